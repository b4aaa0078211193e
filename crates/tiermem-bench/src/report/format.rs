//! Number formatting for the report: durations, sizes, counts, ratios and
//! percentages, short and aligned.

/// A duration in the largest unit (ns, us, ms, s) that keeps it at or above
/// 1, with 3 significant digits: `87.0ns`, `1.02us`, `45.6ms`. ASCII `us`
/// keeps output greppable and aligned on any terminal.
pub fn human_ns(ns: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1.0, "ns"), (1e3, "us"), (1e6, "ms"), (1e9, "s")];
    if !ns.is_finite() {
        return format!("{ns}");
    }
    if ns == 0.0 {
        return "0ns".to_string();
    }
    for (scale, unit) in UNITS {
        let value = ns / scale;
        if value.abs() < 999.5 {
            return format!("{}{unit}", three_significant_digits(value));
        }
    }
    format!("{:.0}s", ns / 1e9)
}

/// A size in binary units: `512 B`, `256 MiB`, `1.00 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    for unit in UNITS {
        value /= 1024.0;
        if value < 1023.5 || unit == "EiB" {
            return format!("{} {unit}", three_significant_digits(value));
        }
    }
    format!("{bytes} B")
}

/// `v` with 3 significant digits for |v| in [1, 1000), without exponent.
fn three_significant_digits(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 99.95 {
        format!("{value:.0}")
    } else if magnitude >= 9.995 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

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

/// A count or rate with 3 significant digits and k/M/G suffixes.
pub(super) fn human_count(value: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    for (scale, unit) in UNITS {
        if value >= scale * 0.9995 {
            return format!("{}{unit}", three_significant_digits(value / scale));
        }
    }
    if value == value.trunc() {
        format!("{value:.0}")
    } else {
        three_significant_digits(value)
    }
}

/// Percent with more decimals for small shares, which matter here: 0.1% of
/// accesses faulting can dominate the run time.
pub(super) fn percent(value: f64) -> String {
    if value == 0.0 {
        "0%".to_string()
    } else if value < 0.01 {
        format!("{value:.4}%")
    } else if value < 10.0 {
        format!("{value:.2}%")
    } else {
        format!("{value:.1}%")
    }
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

/// `1234567` as `1,234,567`.
pub(super) fn group_thousands(value: u64) -> String {
    if value < 1000 {
        value.to_string()
    } else {
        format!("{},{:03}", group_thousands(value / 1000), value % 1000)
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
    fn human_ns_uses_three_significant_digits() {
        let cases = [
            (0.0, "0ns"),
            (5.0, "5.00ns"),
            (87.0, "87.0ns"),
            (999.4, "999ns"),
            (999.6, "1.00us"),
            (1024.0, "1.02us"),
            (45_600_000.0, "45.6ms"),
            (2.5e9, "2.50s"),
            (5e12, "5000s"),
        ];
        for (ns, text) in cases {
            assert_eq!(human_ns(ns), text, "{ns}");
        }
    }

    #[test]
    fn human_bytes_uses_binary_units() {
        let cases = [
            (0, "0 B"),
            (512, "512 B"),
            (1024, "1.00 KiB"),
            (256 << 20, "256 MiB"),
            (1 << 30, "1.00 GiB"),
            (3 << 29, "1.50 GiB"),
            (u64::MAX, "16.0 EiB"),
        ];
        for (bytes, text) in cases {
            assert_eq!(human_bytes(bytes), text, "{bytes}");
        }
    }

    #[test]
    fn small_helpers() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(human_count(860.0), "860");
        assert_eq!(human_count(999_600.0), "1.00M");
        assert_eq!(signed_us(-0.5), "-0.50us");
        assert_eq!(percent(0.001), "0.0010%");
    }
}
