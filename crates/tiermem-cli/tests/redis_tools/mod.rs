//! Whether the tests that run Redis for real can: redis-server and
//! redis-benchmark must be in PATH. Outside CI their absence skips a test
//! with a message; in CI (where `.ci/run` installs them) it fails it.

fn in_path(name: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join(name).is_file())
}

/// False (with a message) when Redis is missing outside CI; panics in CI.
pub fn redis_available() -> bool {
    let missing: Vec<&str> = ["redis-server", "redis-benchmark"]
        .into_iter()
        .filter(|n| !in_path(n))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{} not found in PATH, and CI is set", missing.join(", "));
    }
    eprintln!(
        "skipping: {} not found in PATH (install redis-server and redis-tools)",
        missing.join(", ")
    );
    false
}
