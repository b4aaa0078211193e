//! Number formatting for the report: the shared formatters of
//! [`tiermem_host::format`], and the ratios and differences only the bench
//! report prints.

pub use tiermem_host::format::{
    group_thousands, human_bytes, human_count, human_ns, percent, three_significant_digits,
};

/// A throughput ratio: `14.3x`, `1.43x`, `0.715x` (3 significant digits).
pub(super) fn ratio_text(ratio: f64) -> String {
    if ratio < 1.0 {
        format!("{ratio:.3}x")
    } else {
        format!("{}x", three_significant_digits(ratio))
    }
}

/// A microsecond difference with an explicit sign: `+12.3us`, `-0.50us`.
pub(super) fn signed_us(us: f64) -> String {
    let sign = if us < 0.0 { "-" } else { "+" };
    format!("{sign}{}us", three_significant_digits(us.abs()))
}

/// A hit ratio as a percentage with two decimals, exactly 1 as `100%` so
/// that "no miss at all" stands out from "99.995%" (`100.00%`).
pub(super) fn hit_percent(ratio: f64) -> String {
    if ratio == 1.0 {
        "100%".to_string()
    } else {
        format!("{:.2}%", ratio * 100.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_percent_keeps_an_exact_one_apart() {
        assert_eq!(hit_percent(1.0), "100%");
        assert_eq!(hit_percent(0.99999), "100.00%");
        assert_eq!(hit_percent(0.5), "50.00%");
        assert_eq!(hit_percent(0.0), "0.00%");
    }

    #[test]
    fn small_helpers() {
        assert_eq!(signed_us(-0.5), "-0.50us");
    }
}
