//! The method checked on the CPU's caches, whose organization is known: the
//! line size of x86-64 caches is 64 bytes.

use std::process::Command;

#[test]
#[cfg(target_arch = "x86_64")]
fn dram_line_size_is_64_bytes() {
    let out = Command::new(env!("CARGO_BIN_EXE_tiermem-probe"))
        .args(["--target", "dram", "--json"])
        .output()
        .expect("running tiermem-probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "probe failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON output");
    println!("{v}");
    assert_eq!(v["line_size_bytes"].as_u64(), Some(64), "{v}");
    assert_eq!(v["write_policy"].as_str(), Some("write-back"), "{v}");
}
