//! The cache organization knobs: how DRAM caches the backing store.
//!
//! Each knob has an environment variable whose name other tools depend on
//! (`TIERMEM_ASSOCIATIVITY`, `TIERMEM_PREFETCH`, `TIERMEM_WRITE_POLICY`,
//! `TIERMEM_INCLUSION`) and a builder call; a preset (`TIERMEM_PRESET`,
//! `--preset`) sets several at once, and explicit knobs override it.
//!
//! - **Associativity**: `0` is fully associative (the replacement policy
//!   picks any resident page). `N` splits the budget into `budget / N` sets
//!   of `N` pages; page `p` may only live in set `p mod sets`, and a miss in
//!   a full set evicts that set's oldest page on the spot (FIFO within the
//!   set). `1` is direct-mapped.
//! - **Prefetch degree**: `N` reads the `N` pages after every demand miss
//!   with it (a next-N-line prefetcher) instead of the adaptive read-ahead;
//!   `0` turns prefetching off. Unset keeps the adaptive read-ahead
//!   (`TIERMEM_READAHEAD`).
//! - **Write policy**: write-back keeps written pages dirty in DRAM until
//!   they are evicted. Write-through copies every written page to the
//!   backing store within a few milliseconds of its first write (page
//!   granularity is the finest a pager sees writes at) and protects it
//!   again, so the next write is seen too: DRAM never holds dirty data for
//!   long, and evictions never write.
//! - **Inclusion**: inclusive keeps a page's backing copy while it is in
//!   DRAM, so a clean page leaves DRAM without a write. Exclusive frees the
//!   backing copy as the page comes in, so DRAM and the store hold disjoint
//!   pages and every eviction writes.

use std::str::FromStr;

use crate::error::{invalid, Error, Result};
use crate::settings::env_or_default;

/// Ways per set: `0` fully associative (the default), `1` direct-mapped, `N`
/// N-way.
pub const ENV_ASSOCIATIVITY: &str = "TIERMEM_ASSOCIATIVITY";
/// Fixed prefetch degree in pages, 0 (none) to 256; unset keeps the adaptive
/// read-ahead.
pub const ENV_PREFETCH: &str = "TIERMEM_PREFETCH";
/// `write-back` (the default) or `write-through`.
pub const ENV_WRITE_POLICY: &str = "TIERMEM_WRITE_POLICY";
/// `inclusive` (the default) or `exclusive`.
pub const ENV_INCLUSION: &str = "TIERMEM_INCLUSION";
/// A named set of knobs (`memory-mode`); knobs set explicitly override it.
pub const ENV_PRESET: &str = "TIERMEM_PRESET";

/// Largest fixed prefetch degree, in pages (one read-ahead window).
pub const MAX_PREFETCH: u32 = 256;

/// When written pages reach the backing store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WritePolicy {
    /// Written pages stay dirty in DRAM until they are evicted.
    #[default]
    WriteBack,
    /// Every written page is copied to the store within a few milliseconds of
    /// its first write, so evictions never write.
    WriteThrough,
}

impl WritePolicy {
    /// The name `TIERMEM_WRITE_POLICY` takes.
    pub fn name(self) -> &'static str {
        match self {
            WritePolicy::WriteBack => "write-back",
            WritePolicy::WriteThrough => "write-through",
        }
    }
}

impl FromStr for WritePolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "write-back" | "writeback" | "wb" => Ok(WritePolicy::WriteBack),
            "write-through" | "writethrough" | "wt" => Ok(WritePolicy::WriteThrough),
            _ => Err(invalid(
                ENV_WRITE_POLICY,
                s,
                "expected write-back or write-through",
            )),
        }
    }
}

/// Whether a page in DRAM keeps its copy in the backing store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Inclusion {
    /// The backing copy stays, so a clean page leaves DRAM without a write.
    #[default]
    Inclusive,
    /// The backing copy is freed as the page comes in, so every eviction
    /// writes.
    Exclusive,
}

impl Inclusion {
    /// The name `TIERMEM_INCLUSION` takes.
    pub fn name(self) -> &'static str {
        match self {
            Inclusion::Inclusive => "inclusive",
            Inclusion::Exclusive => "exclusive",
        }
    }
}

impl FromStr for Inclusion {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "inclusive" => Ok(Inclusion::Inclusive),
            "exclusive" => Ok(Inclusion::Exclusive),
            _ => Err(invalid(ENV_INCLUSION, s, "expected inclusive or exclusive")),
        }
    }
}

/// Named sets of knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// Intel Optane Memory Mode as documented: direct-mapped, write-back,
    /// inclusive (the backing copy stays), no prefetch.
    MemoryMode,
}

impl Preset {
    /// The name `TIERMEM_PRESET` takes.
    pub fn name(self) -> &'static str {
        match self {
            Preset::MemoryMode => "memory-mode",
        }
    }

    /// The knobs this preset sets.
    pub fn organization(self) -> Organization {
        match self {
            Preset::MemoryMode => Organization {
                associativity: 1,
                prefetch: Some(0),
                write_policy: WritePolicy::WriteBack,
                inclusion: Inclusion::Inclusive,
            },
        }
    }
}

impl FromStr for Preset {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "memory-mode" | "memorymode" => Ok(Preset::MemoryMode),
            _ => Err(invalid(ENV_PRESET, s, "expected memory-mode")),
        }
    }
}

/// The organization of the DRAM cache. The default is tiermem's own:
/// fully associative, adaptive read-ahead, write-back, inclusive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Organization {
    /// Ways per set; 0 for fully associative, 1 for direct-mapped.
    pub associativity: u32,
    /// Fixed prefetch degree in pages; `None` for the adaptive read-ahead.
    pub prefetch: Option<u32>,
    /// When written pages reach the backing store.
    pub write_policy: WritePolicy,
    /// Whether pages in DRAM keep their backing copy.
    pub inclusion: Inclusion,
}

impl Organization {
    /// Sets, ways and victim-buffer pages for a budget of `budget_pages`,
    /// if set-associative. The victim buffer (1/64 of the budget, at least
    /// 2 pages) is what lets one instruction touch two pages of one set
    /// (see `sets`); the sets get the rest.
    pub fn sets(&self, budget_pages: u64) -> Option<(u64, u32, u64)> {
        (self.associativity > 0).then(|| {
            let ways = self.associativity as u64;
            let victims = (budget_pages / 64).max(2).min(budget_pages / 2);
            let sets = ((budget_pages - victims) / ways).max(1);
            (sets, ways as u32, victims)
        })
    }

    /// Checks that the knobs fit each other and a budget of `budget_pages`.
    pub fn validate(&self, budget_pages: u64) -> Result<()> {
        if self.associativity as u64 > budget_pages / 2 {
            return Err(invalid(
                ENV_ASSOCIATIVITY,
                &self.associativity.to_string(),
                &format!(
                    "at most half the budget's {budget_pages} pages (0 fully associative, 1 direct-mapped, N for N ways)"
                ),
            ));
        }
        if let Some(p) = self.prefetch {
            if p > MAX_PREFETCH {
                return Err(invalid(
                    ENV_PREFETCH,
                    &p.to_string(),
                    &format!("expected a page count from 0 to {MAX_PREFETCH}"),
                ));
            }
        }
        if self.write_policy == WritePolicy::WriteThrough && self.inclusion == Inclusion::Exclusive
        {
            return Err(invalid(
                ENV_WRITE_POLICY,
                self.write_policy.name(),
                "write-through keeps a copy of every page in the backing store, so it needs TIERMEM_INCLUSION=inclusive",
            ));
        }
        Ok(())
    }

    /// A one-line description, for stats and reports.
    pub fn describe(&self) -> String {
        let assoc = match self.associativity {
            0 => "fully associative".to_string(),
            1 => "direct-mapped".to_string(),
            n => format!("{n}-way"),
        };
        let prefetch = match self.prefetch {
            None => "adaptive read-ahead".to_string(),
            Some(0) => "no prefetch".to_string(),
            Some(n) => format!("prefetch {n}"),
        };
        format!(
            "{assoc}, {prefetch}, {}, {}",
            self.write_policy.name(),
            self.inclusion.name()
        )
    }

    /// Reads the knobs from `lookup`: the preset first, then each variable.
    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<Organization> {
        let mut org = match env_or_default(ENV_PRESET, lookup) {
            Some(p) => p.parse::<Preset>()?.organization(),
            None => Organization::default(),
        };
        if let Some(v) = env_or_default(ENV_ASSOCIATIVITY, lookup) {
            org.associativity = parse_count(
                ENV_ASSOCIATIVITY,
                &v,
                "0 (fully associative), 1 (direct-mapped) or N (N-way)",
            )?;
        }
        if let Some(v) = env_or_default(ENV_PREFETCH, lookup) {
            org.prefetch = Some(parse_count(ENV_PREFETCH, &v, "a page count from 0 to 256")?);
        }
        if let Some(v) = env_or_default(ENV_WRITE_POLICY, lookup) {
            org.write_policy = v.parse()?;
        }
        if let Some(v) = env_or_default(ENV_INCLUSION, lookup) {
            org.inclusion = v.parse()?;
        }
        Ok(org)
    }

    /// The knobs as variables, for a child process.
    pub fn to_env(&self, env: &mut Vec<(&'static str, String)>) {
        env.push((ENV_ASSOCIATIVITY, self.associativity.to_string()));
        if let Some(p) = self.prefetch {
            env.push((ENV_PREFETCH, p.to_string()));
        }
        env.push((ENV_WRITE_POLICY, self.write_policy.name().to_string()));
        env.push((ENV_INCLUSION, self.inclusion.name().to_string()));
    }
}

/// The organization knobs as command-line flags (`tiermem run`, `tiermem
/// probe`). A flag overrides its variable; `--preset` is applied first.
#[cfg(feature = "clap")]
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OrganizationArgs {
    /// Set a cache organization at once: memory-mode is direct-mapped,
    /// write-back, inclusive, without prefetch (Intel Optane Memory Mode).
    /// The flags below override it. [default: TIERMEM_PRESET, else none]
    #[arg(long, value_name = "memory-mode")]
    pub preset: Option<String>,
    /// Ways per set: 0 fully associative (the replacement policy picks any
    /// page), 1 direct-mapped, N N-way set-associative by page number (a
    /// miss in a full set evicts that set's oldest page).
    /// [default: TIERMEM_ASSOCIATIVITY, else 0]
    #[arg(long, value_name = "N")]
    pub associativity: Option<String>,
    /// Pages read after every miss, with it (0: none), instead of the
    /// adaptive read-ahead. [default: TIERMEM_PREFETCH, else adaptive]
    #[arg(long, value_name = "PAGES")]
    pub prefetch: Option<String>,
    /// write-back (written pages go to the store when evicted) or
    /// write-through (copied to the store within milliseconds of each
    /// first write, so evictions never write).
    /// [default: TIERMEM_WRITE_POLICY, else write-back]
    #[arg(long, value_name = "write-back|write-through")]
    pub write_policy: Option<String>,
    /// inclusive (a page keeps its store copy while in DRAM) or exclusive
    /// (DRAM and store hold disjoint pages; every eviction writes).
    /// [default: TIERMEM_INCLUSION, else inclusive]
    #[arg(long, value_name = "inclusive|exclusive")]
    pub inclusion: Option<String>,
}

#[cfg(feature = "clap")]
impl OrganizationArgs {
    /// The flag that sets `var`, with its value, if it was given.
    pub fn flag_for(&self, var: &str) -> Option<(&'static str, String)> {
        let (flag, value) = match var {
            ENV_PRESET => ("--preset", &self.preset),
            ENV_ASSOCIATIVITY => ("--associativity", &self.associativity),
            ENV_PREFETCH => ("--prefetch", &self.prefetch),
            ENV_WRITE_POLICY => ("--write-policy", &self.write_policy),
            ENV_INCLUSION => ("--inclusion", &self.inclusion),
            _ => return None,
        };
        value.clone().map(|v| (flag, v))
    }
}

/// Every organization variable, for tools that pass settings on.
pub const ENV_VARS: [&str; 5] = [
    ENV_PRESET,
    ENV_ASSOCIATIVITY,
    ENV_PREFETCH,
    ENV_WRITE_POLICY,
    ENV_INCLUSION,
];

fn parse_count(setting: &'static str, text: &str, expected: &str) -> Result<u32> {
    text.trim()
        .parse::<u32>()
        .map_err(|_| invalid(setting, text, &format!("expected {expected}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn org(vars: &[(&str, &str)]) -> Result<Organization> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Organization::from_lookup(&|k: &str| env.get(k).cloned())
    }

    #[test]
    fn defaults_are_tiermems_own_organization() {
        let o = org(&[]).unwrap();
        assert_eq!(o, Organization::default());
        assert_eq!(o.sets(1000), None);
        assert_eq!(
            o.describe(),
            "fully associative, adaptive read-ahead, write-back, inclusive"
        );
    }

    #[test]
    fn every_knob_is_read_from_its_variable() {
        let o = org(&[
            (ENV_ASSOCIATIVITY, "4"),
            (ENV_PREFETCH, "2"),
            (ENV_WRITE_POLICY, "write-through"),
            (ENV_INCLUSION, "inclusive"),
        ])
        .unwrap();
        assert_eq!(o.associativity, 4);
        assert_eq!(o.prefetch, Some(2));
        assert_eq!(o.write_policy, WritePolicy::WriteThrough);
        assert_eq!(o.sets(1024), Some((252, 4, 16)));
        let mut env = Vec::new();
        o.to_env(&mut env);
        let back = Organization::from_lookup(&|k: &str| {
            env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        })
        .unwrap();
        assert_eq!(back, o);
    }

    #[test]
    fn the_memory_mode_preset_is_direct_mapped_write_back_inclusive() {
        let o = org(&[(ENV_PRESET, "memory-mode")]).unwrap();
        assert_eq!(o.associativity, 1);
        assert_eq!(o.prefetch, Some(0));
        assert_eq!(o.write_policy, WritePolicy::WriteBack);
        assert_eq!(o.inclusion, Inclusion::Inclusive);
        let o = org(&[(ENV_PRESET, "memory-mode"), (ENV_ASSOCIATIVITY, "2")]).unwrap();
        assert_eq!(o.associativity, 2, "an explicit knob overrides the preset");
    }

    #[test]
    fn bad_values_name_the_variable_and_the_form() {
        let cases = [
            (ENV_ASSOCIATIVITY, "-1", "direct-mapped"),
            (ENV_ASSOCIATIVITY, "four", "N-way"),
            (ENV_PREFETCH, "x", "page count"),
            (
                ENV_WRITE_POLICY,
                "write-around",
                "write-back or write-through",
            ),
            (ENV_INCLUSION, "nine", "inclusive or exclusive"),
            (ENV_PRESET, "optane", "memory-mode"),
        ];
        for (var, value, hint) in cases {
            let err = org(&[(var, value)]).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
            assert!(err.contains(hint), "{err}");
        }
    }

    #[test]
    fn knobs_are_checked_against_the_budget_and_each_other() {
        let o = org(&[(ENV_ASSOCIATIVITY, "64")]).unwrap();
        assert!(o.validate(16).unwrap_err().to_string().contains("16 pages"));
        assert!(o.validate(64).unwrap_err().to_string().contains("64 pages"));
        assert!(o.validate(128).is_ok());
        let o = org(&[(ENV_PREFETCH, "257")]).unwrap();
        assert!(o.validate(1 << 20).is_err());
        let o = org(&[
            (ENV_WRITE_POLICY, "write-through"),
            (ENV_INCLUSION, "exclusive"),
        ])
        .unwrap();
        let err = o.validate(1 << 20).unwrap_err().to_string();
        assert!(err.contains("TIERMEM_INCLUSION=inclusive"), "{err}");
    }
}
