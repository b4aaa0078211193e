//! Numbers as the reports print them: durations, sizes, counts and shares,
//! short and aligned. Every command formats through here, so one size reads
//! the same in `tiermem bench`, `doctor`, `cost`, `ctl` and the exit stats.
//! Where two reports want different precision (a table's three significant
//! digits, a diagnosis's one decimal), each style is one function here.

const GIB: u64 = 1 << 30;

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

/// Bytes as a person reads them, one decimal at most: `8 MiB`, `72.5 GiB`
/// (`tiermem doctor`).
pub fn human_bytes_brief(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 || value >= 100.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `384 GiB`, `1.5 GiB`, `512 MiB`: whole numbers bare, others to two
/// decimals, in GiB from 1 GiB up (`tiermem cost`).
pub fn human_gib(bytes: u64) -> String {
    let (value, unit) = if bytes >= GIB {
        (bytes as f64 / GIB as f64, "GiB")
    } else {
        (bytes as f64 / (1u64 << 20) as f64, "MiB")
    };
    format!("{} {unit}", trimmed(value))
}

/// A number without trailing zeros: `192`, `1.5`, `0.33`.
pub fn trimmed(value: f64) -> String {
    let text = format!("{value:.2}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

/// Mebibytes with one decimal: `12.5 MiB` (the exit stats).
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// `v` with 3 significant digits for |v| in [1, 1000), without exponent.
pub fn three_significant_digits(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 99.95 {
        format!("{value:.0}")
    } else if magnitude >= 9.995 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

/// A count or rate with 3 significant digits and k/M/G suffixes.
pub fn human_count(value: f64) -> String {
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
pub fn percent(value: f64) -> String {
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

/// `1234567` as `1,234,567`.
pub fn group_thousands(value: u64) -> String {
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
    fn sizes_read_naturally() {
        assert_eq!(human_bytes_brief(512), "512 B");
        assert_eq!(human_bytes_brief(8 << 20), "8 MiB");
        assert_eq!(human_bytes_brief(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes_brief(u64::MAX), "16777216 TiB");
    }

    #[test]
    fn gib_sizes_print_without_trailing_zeros() {
        assert_eq!(human_gib(384 * GIB), "384 GiB");
        assert_eq!(human_gib(3 * GIB / 2), "1.5 GiB");
        assert_eq!(human_gib(256 << 20), "256 MiB");
        assert_eq!(trimmed(0.604166), "0.6");
        assert_eq!(trimmed(1.0), "1");
        assert_eq!(mib(3 << 19), "1.5 MiB");
    }

    #[test]
    fn counts_and_shares() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_234_567), "1,234,567");
        assert_eq!(human_count(860.0), "860");
        assert_eq!(human_count(999_600.0), "1.00M");
        assert_eq!(percent(0.001), "0.0010%");
    }
}
