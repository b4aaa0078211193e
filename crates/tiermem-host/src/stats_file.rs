//! What `tiermem run` and the preloaded library share about the exit
//! report: the `--stats-file` path template, and the pipe each process
//! that reported writes its pid to.

/// The `schema` of the statistics file.
pub const SCHEMA: &str = "tiermem.run-stats/1";

/// Names the descriptor of `tiermem run`'s pipe in the program's
/// environment: each process that reported its statistics at exit writes
/// its pid there, one line, so that `tiermem run` reports for one that
/// could not (a direct `exit_group`, a fatal signal).
pub const ENV_REPORTED_FD: &str = "TIERMEM_REPORTED_FD";

/// `template` with every `%p` replaced by `pid` (and `%%` by `%`).
pub fn expand(template: &str, pid: u32) -> String {
    let mut out = String::with_capacity(template.len() + 8);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        match (c, chars.clone().next()) {
            ('%', Some('p')) => {
                out.push_str(&pid.to_string());
                chars.next();
            }
            ('%', Some('%')) => {
                out.push('%');
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn the_stats_path_expands_the_pid() {
        assert_eq!(expand("/tmp/s-%p.json", 42), "/tmp/s-42.json");
        assert_eq!(expand("/tmp/100%%-%p", 7), "/tmp/100%-7");
        assert_eq!(expand("/tmp/plain%", 7), "/tmp/plain%");
    }
}
