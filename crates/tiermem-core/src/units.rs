//! Sizes, durations and on/off switches as people write them, the one
//! parser of each.
//!
//! Every size and every duration tiermem takes, from a `TIERMEM_*` variable,
//! a flag of any command or the builder, goes through [`parse_size`] or
//! [`parse_duration`] (or their reason-giving cores, [`size_from_text`] and
//! [`duration_from_text`], for callers that word their own errors), so a
//! value means the same thing wherever it is written.
//!
//! - A size is a number of bytes with an optional binary unit (`K`, `M`, `G`,
//!   `T`, each with an optional `B` or `iB`, in any case) or a share of
//!   physical RAM (`25%`). A plain number is bytes.
//! - A duration is a number of seconds with an optional unit, `s` or `ms`. A
//!   plain number is seconds.
//! - A switch is `on`, `1`, `yes` or `true`, or `off`, `0`, `no` or `false`,
//!   in any case ([`parse_switch`], [`switch_from_text`]).
//!
//! Ranges (a budget of at least 16 pages, a deadline of at most a day) are
//! the caller's: the parsers only read the text.

use std::fmt;
use std::time::Duration;

use crate::error::{invalid, Result};
use crate::sys::physical_ram_bytes;

/// The accepted form of a size, for the end of an error.
const SIZE_FORM: &str = "expected a size like 262144, 256K, 256M, 4G or 25% (of physical RAM)";
/// The accepted form of a switch, for the end of an error.
pub const SWITCH_FORM: &str = "expected on or off";
/// The accepted form of a duration, for the end of an error.
const DURATION_FORM: &str =
    "expected a duration like 3, 0.5, 3s or 500ms (a plain number is seconds)";

/// A size as the user wrote it: absolute bytes or a share of physical RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeSpec {
    /// An absolute size, in bytes.
    Bytes(u64),
    /// A share of physical RAM, in percent (1 to 100).
    PercentOfRam(u64),
}

impl SizeSpec {
    /// The size in bytes; a share is taken of this machine's physical RAM.
    pub fn resolve(self) -> u64 {
        match self {
            SizeSpec::Bytes(b) => b,
            SizeSpec::PercentOfRam(p) => physical_ram_bytes().saturating_mul(p) / 100,
        }
    }
}

/// What is wrong with a size or a duration as written; its text completes a
/// sentence that starts with the value (`'12Q' has an unknown unit 'Q'`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitError {
    /// Nothing but blanks.
    Empty,
    /// A leading minus sign.
    Negative,
    /// No number, or a malformed one (`G`, `1.2.3G`).
    NotANumber,
    /// A unit this kind of value does not take.
    UnknownUnit(String),
    /// More than the type holds.
    TooLarge,
    /// A share of RAM outside 1% to 100%.
    PercentOutOfRange,
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::Empty => f.write_str("is empty"),
            UnitError::Negative => f.write_str("is negative"),
            UnitError::NotANumber => f.write_str("is not a number followed by a unit"),
            UnitError::UnknownUnit(unit) => write!(f, "has an unknown unit '{unit}'"),
            UnitError::TooLarge => f.write_str("is too large"),
            UnitError::PercentOutOfRange => f.write_str("is a percentage outside 1% to 100%"),
        }
    }
}

impl std::error::Error for UnitError {}

/// Parses `262144`, `256K`, `256M`, `4G`, `1.5G`, `1T` (binary units; an
/// optional `B`/`iB` suffix is accepted) and `25%` of physical RAM. A bad
/// value is refused with the setting, the value and the accepted form.
pub fn parse_size(setting: &'static str, text: &str) -> Result<SizeSpec> {
    size_from_text(text).map_err(|why| match why {
        UnitError::PercentOutOfRange => {
            invalid(setting, text, "a percentage must be between 1% and 100%")
        }
        _ => invalid(setting, text, SIZE_FORM),
    })
}

/// The size `text` describes, or what is wrong with it. Zero is a size here:
/// whether it is allowed is the caller's rule.
pub fn size_from_text(text: &str) -> std::result::Result<SizeSpec, UnitError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(UnitError::Empty);
    }
    if t.starts_with('-') {
        return Err(UnitError::Negative);
    }
    if let Some(pct) = t.strip_suffix('%') {
        let p: u64 = pct.trim().parse().map_err(|_| UnitError::NotANumber)?;
        if p == 0 || p > 100 {
            return Err(UnitError::PercentOutOfRange);
        }
        return Ok(SizeSpec::PercentOfRam(p));
    }
    let (number, unit) = split_number(t);
    if number.is_empty() {
        return Err(UnitError::NotANumber);
    }
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => return Err(UnitError::UnknownUnit(unit.to_string())),
    };
    let bytes = if number.contains('.') {
        let v: f64 = number.parse().map_err(|_| UnitError::NotANumber)?;
        let b = v * (1u64 << shift) as f64;
        if !b.is_finite() || b >= u64::MAX as f64 {
            return Err(UnitError::TooLarge);
        }
        b as u64
    } else {
        // Whole numbers stay integers, so a byte count past 2^53 is exact.
        let v: u64 = number.parse().map_err(|_| UnitError::TooLarge)?;
        v.checked_mul(1u64 << shift).ok_or(UnitError::TooLarge)?
    };
    Ok(SizeSpec::Bytes(bytes))
}

/// Parses `3`, `0.5`, `3s`, `500ms` (a plain number is seconds). A bad value
/// is refused with the setting, the value and the accepted form.
pub fn parse_duration(setting: &'static str, text: &str) -> Result<Duration> {
    duration_from_text(text).map_err(|_| invalid(setting, text, DURATION_FORM))
}

/// Parses an on/off switch (see [`switch_from_text`]). A bad value is
/// refused with the setting, the value and the accepted form.
pub fn parse_switch(setting: &'static str, text: &str) -> Result<bool> {
    switch_from_text(text).ok_or_else(|| invalid(setting, text, SWITCH_FORM))
}

/// Whether `text` turns a switch on (`on`, `1`, `yes`, `true`) or off
/// (`off`, `0`, `no`, `false`), in any case and between blanks; `None` for
/// anything else, so callers that take more words add their own.
pub fn switch_from_text(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// The duration `text` describes, or what is wrong with it. Zero is a
/// duration here: whether it is allowed is the caller's rule.
pub fn duration_from_text(text: &str) -> std::result::Result<Duration, UnitError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(UnitError::Empty);
    }
    if t.starts_with('-') {
        return Err(UnitError::Negative);
    }
    // A plain number is seconds in any form Rust reads, `1e3` included, as
    // flags that once took a bare float did.
    if let Ok(secs) = t.parse::<f64>() {
        return if secs.is_nan() {
            Err(UnitError::NotANumber)
        } else {
            Duration::try_from_secs_f64(secs).map_err(|_| UnitError::TooLarge)
        };
    }
    let (number, unit) = split_number(t);
    if number.is_empty() {
        return Err(UnitError::NotANumber);
    }
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        _ => return Err(UnitError::UnknownUnit(unit.to_string())),
    };
    let value: f64 = number.parse().map_err(|_| UnitError::NotANumber)?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| UnitError::TooLarge)
}

/// `text` split at its first character that is neither a digit nor a
/// point, with the blanks around the unit trimmed.
fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    (number, unit.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_take_four_words_each_way_in_any_case() {
        for on in ["on", "1", "yes", "true", " ON ", "True"] {
            assert_eq!(switch_from_text(on), Some(true), "{on}");
        }
        for off in ["off", "0", "no", "false", "OFF", " No"] {
            assert_eq!(switch_from_text(off), Some(false), "{off}");
        }
        for bad in ["", "2", "enabled", "o n"] {
            assert_eq!(switch_from_text(bad), None, "{bad}");
        }
        let err = parse_switch("TIERMEM_READAHEAD", "maybe")
            .unwrap_err()
            .to_string();
        assert!(err.contains("TIERMEM_READAHEAD"), "{err}");
        assert!(
            err.contains("'maybe'") && err.contains("expected on or off"),
            "{err}"
        );
    }

    const ENV_DRAM: &str = "TIERMEM_DRAM";

    fn bytes(s: &str) -> u64 {
        parse_size(ENV_DRAM, s).unwrap().resolve()
    }

    #[test]
    fn sizes_in_every_documented_form() {
        assert_eq!(bytes("262144"), 262144);
        assert_eq!(bytes("256K"), 256 << 10);
        assert_eq!(bytes("256M"), 256 << 20);
        assert_eq!(bytes("4G"), 4 << 30);
        assert_eq!(bytes("4GiB"), 4 << 30);
        assert_eq!(bytes("1.5G"), 3 << 29);
        assert_eq!(bytes(" 64m "), 64 << 20);
        assert_eq!(bytes("200 gb"), 200 << 30);
        assert_eq!(bytes("1073741824B"), 1 << 30);
        assert_eq!(bytes("18446744073709551615"), u64::MAX);
        let quarter = bytes("25%");
        assert_eq!(quarter, physical_ram_bytes() / 4);
    }

    #[test]
    fn bad_sizes_name_setting_value_and_form() {
        for bad in ["", "12Q", "G", "-1", "0%", "150%", "99999999999T", "1.2.3G"] {
            let err = parse_size(ENV_DRAM, bad).unwrap_err().to_string();
            assert!(err.contains("TIERMEM_DRAM"), "{err}");
            assert!(err.contains(&format!("'{bad}'")), "{err}");
        }
        let err = parse_size(ENV_DRAM, "12Q").unwrap_err().to_string();
        assert!(err.contains("256M"), "accepted form missing: {err}");
        let err = parse_size(ENV_DRAM, "150%").unwrap_err().to_string();
        assert!(err.contains("between 1% and 100%"), "{err}");
    }

    #[test]
    fn size_errors_say_what_is_wrong() {
        assert_eq!(size_from_text(" "), Err(UnitError::Empty));
        assert_eq!(size_from_text("-5G"), Err(UnitError::Negative));
        assert_eq!(size_from_text("G"), Err(UnitError::NotANumber));
        assert_eq!(size_from_text("1.2.3G"), Err(UnitError::NotANumber));
        assert_eq!(size_from_text("x%"), Err(UnitError::NotANumber));
        assert_eq!(size_from_text("two hundred"), Err(UnitError::NotANumber));
        assert_eq!(
            size_from_text("12Q"),
            Err(UnitError::UnknownUnit("Q".into()))
        );
        assert_eq!(
            size_from_text("384 GB extra"),
            Err(UnitError::UnknownUnit("GB extra".into()))
        );
        assert_eq!(size_from_text("99999999999T"), Err(UnitError::TooLarge));
        assert_eq!(
            size_from_text("1e30T"),
            Err(UnitError::UnknownUnit("e30T".into()))
        );
        assert_eq!(size_from_text("101%"), Err(UnitError::PercentOutOfRange));
        assert_eq!(size_from_text("0"), Ok(SizeSpec::Bytes(0)));
        assert_eq!(
            UnitError::UnknownUnit("Q".into()).to_string(),
            "has an unknown unit 'Q'"
        );
    }

    #[test]
    fn durations_are_seconds_unless_a_unit_says_otherwise() {
        let d = |s: &str| duration_from_text(s).unwrap();
        assert_eq!(d("3"), Duration::from_secs(3));
        assert_eq!(d("0.5"), Duration::from_millis(500));
        assert_eq!(d("3s"), Duration::from_secs(3));
        assert_eq!(d(" 2 S "), Duration::from_secs(2));
        assert_eq!(d("500ms"), Duration::from_millis(500));
        assert_eq!(d("1.5ms"), Duration::from_micros(1500));
        assert_eq!(d("0"), Duration::ZERO);
        assert_eq!(d("86400"), Duration::from_secs(86400));
        assert_eq!(d("1e3"), Duration::from_secs(1000));
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        assert_eq!(duration_from_text(""), Err(UnitError::Empty));
        assert_eq!(duration_from_text("-1"), Err(UnitError::Negative));
        assert_eq!(duration_from_text("soon"), Err(UnitError::NotANumber));
        assert_eq!(duration_from_text("ms"), Err(UnitError::NotANumber));
        assert_eq!(duration_from_text("1.2.3s"), Err(UnitError::NotANumber));
        assert_eq!(
            duration_from_text("5m"),
            Err(UnitError::UnknownUnit("m".into()))
        );
        assert_eq!(
            duration_from_text("60ss"),
            Err(UnitError::UnknownUnit("ss".into()))
        );
        assert_eq!(duration_from_text("1e300"), Err(UnitError::TooLarge));
        assert_eq!(duration_from_text("inf"), Err(UnitError::TooLarge));
        assert_eq!(duration_from_text("NaN"), Err(UnitError::NotANumber));
        assert_eq!(
            duration_from_text("99999999999999999999999"),
            Err(UnitError::TooLarge)
        );
        let err = parse_duration("TIERMEM_IO_DEADLINE", "soon")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TIERMEM_IO_DEADLINE") && err.contains("'soon'"),
            "{err}"
        );
        assert!(err.contains("500ms"), "accepted form missing: {err}");
    }
}
