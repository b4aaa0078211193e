//! Sizes as the user writes them (`384G`, `1.5T`, `200GiB`) and as the
//! reports print them.

use tiermem_core::units::{size_from_text, SizeSpec, UnitError};

/// One GiB, the unit the blueprint's cost model counts in.
pub const GIB: u64 = 1 << 30;

/// The smallest size accepted: a server's memory or a VM under 1 MiB is
/// a forgotten unit (`--dram-a 384` is 384 bytes), not a real machine.
const MIN_BYTES: u64 = 1 << 20;

/// A size flag: its name, what it describes, and an example value, so
/// that every error can say what to pass instead.
#[derive(Clone, Copy, Debug)]
pub struct SizeFlag {
    pub name: &'static str,
    pub what: &'static str,
    pub example: &'static str,
}

impl SizeFlag {
    /// What to pass, for the end of an error message.
    pub fn hint(&self) -> String {
        format!(
            "pass {} as a size, e.g. {} {}",
            self.what, self.name, self.example
        )
    }

    /// Parses this flag's value, or says what was wrong and what to pass.
    pub fn parse(&self, text: &str) -> anyhow::Result<u64> {
        parse_size(text)
            .map_err(|why| anyhow::anyhow!("{} '{text}' {why}: {}", self.name, self.hint()))
    }
}

/// Parses `384G`, `1.5T`, `200GiB`, `512MB`, `1073741824` into bytes, by the
/// rules every size in tiermem follows ([`tiermem_core::units`]): binary
/// units with an optional `B` or `iB`, in any case; a plain number is bytes.
/// A server's size is never a share of this machine's RAM, nor under 1 MiB.
/// On failure, says what is wrong with the value (the caller names the flag).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let bytes = match size_from_text(text) {
        Ok(SizeSpec::Bytes(bytes)) => bytes,
        Ok(SizeSpec::PercentOfRam(_)) | Err(UnitError::PercentOutOfRange) => {
            return Err("is a share of this machine's RAM, not a size (use K, M, G or T)".into())
        }
        Err(UnitError::UnknownUnit(unit)) => {
            return Err(format!("has an unknown unit '{unit}' (use K, M, G or T)"))
        }
        Err(why) => return Err(why.to_string()),
    };
    if bytes == 0 {
        return Err("is zero".into());
    }
    if bytes < MIN_BYTES {
        return Err(format!(
            "is {bytes} bytes, under 1 MiB (a plain number is bytes: add a unit)"
        ));
    }
    Ok(bytes)
}

/// Bytes in GiB, for arithmetic in the blueprint's unit.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB as f64
}

pub use tiermem_host::format::{human_gib as human, trimmed as number};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_binary_with_optional_b_or_ib_in_any_case() {
        assert_eq!(parse_size("384G"), Ok(384 * GIB));
        assert_eq!(parse_size("384GiB"), Ok(384 * GIB));
        assert_eq!(parse_size("384gb"), Ok(384 * GIB));
        assert_eq!(parse_size(" 200 G "), Ok(200 * GIB));
        assert_eq!(parse_size("1.5T"), Ok(1536 * GIB));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2048K"), Ok(2 << 20));
        assert_eq!(parse_size("1073741824"), Ok(GIB));
        assert_eq!(parse_size("1073741824B"), Ok(GIB));
    }

    #[test]
    fn bad_sizes_say_what_is_wrong() {
        assert_eq!(parse_size(""), Err("is empty".into()));
        assert_eq!(parse_size("0G"), Err("is zero".into()));
        assert_eq!(parse_size("0"), Err("is zero".into()));
        assert_eq!(parse_size("-5G"), Err("is negative".into()));
        assert!(parse_size("384X").unwrap_err().contains("unknown unit 'X'"));
        assert!(parse_size("384 GB extra")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_size("G").unwrap_err().contains("not a number"));
        assert!(parse_size("1.2.3G").unwrap_err().contains("not a number"));
        assert!(parse_size("25%").unwrap_err().contains("share"));
        assert!(parse_size("99999999999T")
            .unwrap_err()
            .contains("too large"));
        let bare = parse_size("384").unwrap_err();
        assert!(
            bare.contains("384 bytes") && bare.contains("add a unit"),
            "{bare}"
        );
    }

    #[test]
    fn a_flag_error_names_the_flag_the_value_and_what_to_pass() {
        let flag = SizeFlag {
            name: "--dram-a",
            what: "server A's DRAM",
            example: "384G",
        };
        let err = flag.parse("0G").unwrap_err().to_string();
        assert_eq!(
            err,
            "--dram-a '0G' is zero: pass server A's DRAM as a size, e.g. --dram-a 384G"
        );
    }
}
