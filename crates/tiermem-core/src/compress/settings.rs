//! The compressed tier's knobs: `TIERMEM_COMPRESS`,
//! `TIERMEM_COMPRESS_SHARE` and `TIERMEM_COMPRESS_DICT`. Part of [`crate::Config`].

use std::str::FromStr;

use crate::error::{invalid, Error, Result};
use crate::settings::env_or_default;

/// Codec of the compressed tier: `lz4` (the default), `lz4-fast` or `off`.
pub const ENV_COMPRESS: &str = "TIERMEM_COMPRESS";
/// Most of the DRAM budget the compressed pool may take: a percent (1 to
/// 90; 50 by default) or `auto` (adapted between 10% and 90%, from 50%).
pub const ENV_COMPRESS_SHARE: &str = "TIERMEM_COMPRESS_SHARE";
/// Whether compressions may use a dictionary gathered from pages that
/// compress: `on` (the default) or `off`.
pub const ENV_COMPRESS_DICT: &str = "TIERMEM_COMPRESS_DICT";

/// Half the budget, the default, and where an adapting split starts: a page of budget
/// holding compressed text serves three or four pages at a few
/// microseconds each, where the same page resident serves one at no cost;
/// an even split keeps the hottest pages mapped and still multiplies the
/// DRAM that compressible data reaches. Incompressible data never enters
/// the pool, so the share costs it nothing.
pub const DEFAULT_SHARE_PERCENT: u32 = 50;
/// The largest share of the budget the pool may take.
pub const MAX_SHARE_PERCENT: u32 = 90;

/// How evicted pages are compressed before they reach the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// No compressed tier: evicted pages go straight to the store.
    Off,
    /// LZ4 blocks from LZ4HC's mid level: about 8% smaller than the fast
    /// mode's on text, as quick to decompress, and about 1.4x its
    /// compression time, which the evictor spends off the fault path.
    Lz4,
    /// LZ4 blocks from LZ4's fast mode: for a machine whose CPU, not DRAM,
    /// is short.
    Lz4Fast,
}

impl Codec {
    /// The name `TIERMEM_COMPRESS` takes and the stats report.
    pub fn name(self) -> &'static str {
        match self {
            Codec::Off => "off",
            Codec::Lz4 => "lz4",
            Codec::Lz4Fast => "lz4-fast",
        }
    }
}

impl FromStr for Codec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        // The codec's name, or a switch: on is the default codec.
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(Codec::Off),
            "lz4" => Ok(Codec::Lz4),
            "lz4-fast" => Ok(Codec::Lz4Fast),
            _ => match crate::units::switch_from_text(s) {
                Some(true) => Ok(Codec::Lz4),
                Some(false) => Ok(Codec::Off),
                None => Err(invalid(ENV_COMPRESS, s, "expected off, lz4 or lz4-fast")),
            },
        }
    }
}

/// The compressed tier's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompressSettings {
    /// How evicted pages are compressed; [`Codec::Off`] turns the tier off.
    pub codec: Codec,
    /// Most of the DRAM budget the compressed pool may take, in percent;
    /// where it starts if `adapt_share`.
    pub share_percent: u32,
    /// Whether the share adapts to where the pool's hits land
    /// (`TIERMEM_COMPRESS_SHARE=auto`; see `compress::split`). Off by
    /// default: it gained 6–16% on the bench's uniform text and 3–10% on
    /// zipf text, but lost 8–28% under `bench-redis`, where it grew the
    /// pool to 75–90% of the budget.
    pub adapt_share: bool,
    /// Whether compressions may use a 64 KiB dictionary gathered from
    /// pages that compress (on by default; it is used only while it saves
    /// 8% of the bytes, and replaced when it stops paying).
    pub dictionary: bool,
}

impl Default for CompressSettings {
    fn default() -> Self {
        CompressSettings {
            codec: Codec::Lz4,
            share_percent: DEFAULT_SHARE_PERCENT,
            adapt_share: false,
            dictionary: true,
        }
    }
}

impl CompressSettings {
    /// The tier turned off; the share keeps its default.
    pub fn off() -> CompressSettings {
        CompressSettings {
            codec: Codec::Off,
            ..CompressSettings::default()
        }
    }

    /// Whether evicted pages pass through the compressed tier.
    pub fn is_on(&self) -> bool {
        self.codec != Codec::Off
    }

    /// Defaults overridden by the `TIERMEM_COMPRESS*` variables `lookup` returns.
    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<CompressSettings> {
        let mut s = CompressSettings::default();
        if let Some(v) = env_or_default(ENV_COMPRESS, lookup) {
            s.codec = v.parse()?;
        }
        if let Some(v) = env_or_default(ENV_COMPRESS_SHARE, lookup) {
            s.adapt_share = is_auto(&v);
        }
        if let Some(v) = env_or_default(ENV_COMPRESS_SHARE, lookup).filter(|v| !is_auto(v)) {
            s.share_percent = v
                .trim()
                .trim_end_matches('%')
                .parse()
                .ok()
                .filter(|p| (1..=MAX_SHARE_PERCENT).contains(p))
                .ok_or_else(|| {
                    invalid(
                        ENV_COMPRESS_SHARE,
                        &v,
                        "expected auto or a percentage of the DRAM budget from 1 to 90",
                    )
                })?;
        }
        if let Some(v) = env_or_default(ENV_COMPRESS_DICT, lookup) {
            s.dictionary = crate::units::switch_from_text(&v)
                .ok_or_else(|| invalid(ENV_COMPRESS_DICT, &v, "expected on or off"))?;
        }
        Ok(s)
    }

    /// Appends the settings as `TIERMEM_COMPRESS*` variables, for a child process.
    pub fn to_env(&self, env: &mut Vec<(&'static str, String)>) {
        env.push((ENV_COMPRESS, self.codec.name().into()));
        let share = match self.adapt_share {
            true => "auto".to_string(),
            false => self.share_percent.to_string(),
        };
        env.push((ENV_COMPRESS_SHARE, share));
        let dictionary = if self.dictionary { "on" } else { "off" };
        env.push((ENV_COMPRESS_DICT, dictionary.into()));
    }
}

fn is_auto(v: &str) -> bool {
    v.trim().eq_ignore_ascii_case("auto")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_round_trip_and_refuse_bad_values() {
        let defaults = CompressSettings::from_lookup(&|_| None).unwrap();
        assert_eq!(defaults, CompressSettings::default());
        assert_eq!(defaults.codec, Codec::Lz4, "the tier is on by default");
        let set =
            |k: &'static str, v: &'static str| move |name: &str| (name == k).then(|| v.to_string());
        let off = CompressSettings::from_lookup(&set(ENV_COMPRESS, "off")).unwrap();
        assert!(!off.is_on());
        for (v, codec) in [
            ("none", Codec::Off),
            ("No", Codec::Off),
            ("false", Codec::Off),
            ("LZ4", Codec::Lz4),
            ("on", Codec::Lz4),
            ("1", Codec::Lz4),
            ("lz4-fast", Codec::Lz4Fast),
            ("LZ4-Fast", Codec::Lz4Fast),
        ] {
            let s = CompressSettings::from_lookup(&set(ENV_COMPRESS, v)).unwrap();
            assert_eq!(s.codec, codec, "{v}");
        }
        assert!(defaults.dictionary, "the dictionary is on by default");
        let plain = CompressSettings::from_lookup(&set(ENV_COMPRESS_DICT, "off")).unwrap();
        assert!(!plain.dictionary && plain.is_on());
        let mut share = CompressSettings::from_lookup(&set(ENV_COMPRESS_SHARE, "30%")).unwrap();
        assert_eq!(share.share_percent, 30);
        assert!(
            !defaults.adapt_share && !share.adapt_share,
            "the share is set by default"
        );
        let auto = CompressSettings::from_lookup(&set(ENV_COMPRESS_SHARE, "Auto")).unwrap();
        assert!(auto.adapt_share && auto.share_percent == DEFAULT_SHARE_PERCENT);
        share.dictionary = false;
        let mut env = Vec::new();
        share.to_env(&mut env);
        let back = CompressSettings::from_lookup(&|k: &str| {
            env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        assert_eq!(back, share);
        for (k, v, expected) in [
            (ENV_COMPRESS, "zstd", "off, lz4 or lz4-fast"),
            (ENV_COMPRESS_SHARE, "0", "from 1 to 90"),
            (ENV_COMPRESS_SHARE, "95", "from 1 to 90"),
            (ENV_COMPRESS_SHARE, "half", "from 1 to 90"),
            (ENV_COMPRESS_DICT, "trained", "on or off"),
        ] {
            let err = CompressSettings::from_lookup(&set(k, v))
                .unwrap_err()
                .to_string();
            assert!(err.contains(k) && err.contains(expected), "{err}");
        }
    }
}
