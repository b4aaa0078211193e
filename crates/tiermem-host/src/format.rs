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

/// A size in the largest binary unit that divides it, exactly: `8 KiB`,
/// `1 MiB`, `100000 B`, `3 GiB` (`tiermem run`'s budget messages, where a
/// rounded figure could hide why a value is refused).
pub fn exact_bytes(bytes: u64) -> String {
    let (value, unit) = exact_unit(bytes, 3);
    format!("{value} {}", ["B", "KiB", "MiB", "GiB"][unit])
}

/// A size as a flag takes it, exactly: `1M`, `32M`, `640K`, `1024G`,
/// `1536` (the value `tiermem run` suggests for `--dram`).
pub fn short_bytes(bytes: u64) -> String {
    let (value, unit) = exact_unit(bytes, 3);
    format!("{value}{}", ["", "K", "M", "G"][unit])
}

/// A block size as fio writes it, exactly, in K or M at most: `4K`, `1M`,
/// `1024M`, `512` (`tiermem device`).
pub fn block_size(bytes: u64) -> String {
    let (value, unit) = exact_unit(bytes, 2);
    format!("{value}{}", ["", "K", "M"][unit])
}

/// `bytes` as a value and a unit index (0 = B, 1 = KiB, ...) no larger
/// than `largest`, exactly.
fn exact_unit(bytes: u64, largest: u32) -> (u64, usize) {
    if bytes == 0 {
        return (0, 0);
    }
    let unit = (bytes.trailing_zeros() / 10).min(largest);
    (bytes >> (unit * 10), unit as usize)
}

/// A size exactly where it is whole GiB or KiB, else in MiB to two
/// decimals: `2 GiB`, `64 KiB`, `96.50 MiB`, `0` (`tiermem probe`, whose
/// estimates are usually powers of two).
pub fn bytes_exact_or_mib(bytes: u64) -> String {
    if bytes == 0 {
        "0".into()
    } else if bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes >> 30)
    } else if bytes >= 1 << 20 {
        format!("{:.2} MiB", bytes as f64 / (1u64 << 20) as f64)
    } else if bytes.is_multiple_of(1024) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} B")
    }
}

/// A latency with a space before its unit and the micro sign: `87 ns`,
/// `3.4 µs`, `1.25 ms`; `-` when there is none (`tiermem probe`).
pub fn ns_spaced(ns: f64) -> String {
    if !ns.is_finite() {
        "-".into()
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A tick of a latency axis: `10ns`, `1us`, `100ms` bare on whole values,
/// else as [`human_ns`] (the bench's latency plots).
pub fn axis_ns(ns: f64) -> String {
    const UNITS: [(f64, &str); 4] = [(1e9, "s"), (1e6, "ms"), (1e3, "us"), (1.0, "ns")];
    let (scale, unit) = UNITS
        .into_iter()
        .find(|&(scale, _)| ns >= scale)
        .unwrap_or((1.0, "ns"));
    let value = ns / scale;
    if (value - value.round()).abs() < 1e-6 {
        format!("{value:.0}{unit}")
    } else {
        human_ns(ns)
    }
}

/// A ratio to two decimals: `1.25x`.
pub fn ratio(x: f64) -> String {
    format!("{x:.2}x")
}

/// A share (0.25) as a percentage to one decimal: `25.0%`.
pub fn share_percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// Nanoseconds as microseconds to one decimal, without unit: `12.3`, for a
/// table whose header names the unit.
pub fn us_tenths(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

/// `format(value)`, or `-` for a missing value, as the suite's tables show
/// a figure a mode did not produce.
pub fn or_dash<T>(value: Option<T>, format: impl FnOnce(T) -> String) -> String {
    value.map_or_else(|| "-".into(), format)
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

    #[test]
    fn exact_sizes_keep_every_byte() {
        assert_eq!(exact_bytes(8192), "8 KiB");
        assert_eq!(exact_bytes(1 << 20), "1 MiB");
        assert_eq!(exact_bytes(100_000), "100000 B");
        assert_eq!(exact_bytes(3 << 30), "3 GiB");
        assert_eq!(exact_bytes(1 << 40), "1024 GiB");
        assert_eq!(exact_bytes(0), "0 B");
        assert_eq!(short_bytes(32 << 20), "32M");
        assert_eq!(short_bytes(640 << 10), "640K");
        assert_eq!(short_bytes(1 << 40), "1024G");
        assert_eq!(short_bytes(1536), "1536");
        assert_eq!(short_bytes(0), "0");
        assert_eq!(block_size(4096), "4K");
        assert_eq!(block_size(1 << 20), "1M");
        assert_eq!(block_size(512), "512");
        assert_eq!(block_size(1 << 30), "1024M");
        assert_eq!(block_size(0), "0");
    }

    #[test]
    fn probe_sizes_and_latencies() {
        assert_eq!(bytes_exact_or_mib(0), "0");
        assert_eq!(bytes_exact_or_mib(2 << 30), "2 GiB");
        assert_eq!(bytes_exact_or_mib(64 << 20), "64.00 MiB");
        assert_eq!(bytes_exact_or_mib(193 << 19), "96.50 MiB");
        assert_eq!(bytes_exact_or_mib(64 << 10), "64 KiB");
        assert_eq!(bytes_exact_or_mib(100), "100 B");
        assert_eq!(ns_spaced(f64::NAN), "-");
        assert_eq!(ns_spaced(87.4), "87 ns");
        assert_eq!(ns_spaced(3_420.0), "3.4 µs");
        assert_eq!(ns_spaced(1_250_000.0), "1.25 ms");
    }

    #[test]
    fn axis_ticks_are_bare_on_whole_values() {
        assert_eq!(axis_ns(10.0), "10ns");
        assert_eq!(axis_ns(1_000.0), "1us");
        assert_eq!(axis_ns(100e6), "100ms");
        assert_eq!(axis_ns(2e9), "2s");
        assert_eq!(axis_ns(1_500.0), "1.50us");
        assert_eq!(axis_ns(0.5), "0.50ns");
    }

    #[test]
    fn suite_figures_and_missing_ones() {
        assert_eq!(ratio(1.254), "1.25x");
        assert_eq!(share_percent(0.25), "25.0%");
        assert_eq!(us_tenths(12_345), "12.3");
        assert_eq!(or_dash(Some(2.0), ratio), "2.00x");
        assert_eq!(or_dash(None::<f64>, ratio), "-");
    }
}
