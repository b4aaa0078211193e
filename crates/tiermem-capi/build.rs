//! Compiles the one piece of C: the interposer's thread-local guard, which
//! must use the initial-exec TLS model (stable Rust cannot ask for it), so
//! reading it from inside `malloc` never calls `__tls_get_addr`, which may
//! itself call `malloc`.
fn main() {
    println!("cargo:rerun-if-changed=src/preload/guard.c");
    cc::Build::new()
        .file("src/preload/guard.c")
        .flag("-ftls-model=initial-exec")
        .compile("tiermem_guard");
}
