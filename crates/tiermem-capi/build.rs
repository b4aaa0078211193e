//! Compiles the one piece of C: the interposer's thread-local guard, which
//! must use the initial-exec TLS model (stable Rust cannot ask for it), so
//! reading it from inside `malloc` never calls `__tls_get_addr`, which may
//! itself call `malloc`.
//!
//! Also gives libtiermem.so its SONAME, `libtiermem.so.MAJOR`: a program
//! linked with `-ltiermem` then records that name, which `make install`
//! points at the versioned file, so a later install of the same major
//! version serves it without a relink.
fn main() {
    println!("cargo:rerun-if-changed=src/preload/guard.c");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtiermem.so.{major}");
    cc::Build::new()
        .file("src/preload/guard.c")
        .flag("-ftls-model=initial-exec")
        .compile("tiermem_guard");
}
