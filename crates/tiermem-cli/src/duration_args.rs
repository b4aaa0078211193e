//! Duration flags, read by the one duration parser
//! ([`tiermem_core::units::duration_from_text`]), so that every flag in
//! seconds also takes `10s` or `500ms`, as `tiermem device --duration` and
//! `TIERMEM_IO_DEADLINE` do.

/// Seconds as a float: `10`, `2.5`, `10s`, `500ms`; zero is allowed (a
/// `--warmup 0`), the range is the command's.
pub fn seconds(s: &str) -> Result<f64, String> {
    tiermem_core::units::duration_from_text(s)
        .map(|d| d.as_secs_f64())
        .map_err(|why| format!("{s:?} {why} (expected seconds, e.g. 10, 2.5, 10s or 500ms)"))
}

/// Whole seconds: `600`, `600s`, `90000ms`.
pub fn whole_seconds(s: &str) -> Result<u64, String> {
    let d = tiermem_core::units::duration_from_text(s)
        .map_err(|why| format!("{s:?} {why} (expected whole seconds, e.g. 600 or 600s)"))?;
    if d.subsec_nanos() != 0 {
        return Err(format!("{s:?} is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_numbers_stay_seconds_and_units_are_accepted() {
        assert_eq!(seconds("10"), Ok(10.0));
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert_eq!(seconds("0"), Ok(0.0));
        assert_eq!(seconds("10s"), Ok(10.0));
        assert_eq!(seconds("500ms"), Ok(0.5));
        assert!(seconds("soon").unwrap_err().contains("not a number"));
        assert!(seconds("5m").unwrap_err().contains("unknown unit 'm'"));
        assert!(seconds("-1").unwrap_err().contains("negative"));
        assert_eq!(whole_seconds("600"), Ok(600));
        assert_eq!(whole_seconds("600s"), Ok(600));
        assert_eq!(whole_seconds("90000ms"), Ok(90));
        assert!(whole_seconds("1.5").unwrap_err().contains("whole"));
    }
}
