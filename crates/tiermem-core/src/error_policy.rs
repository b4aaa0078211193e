//! What the runtime does to protect what it stores and when the backing
//! store misbehaves: checksums on every slot, encryption at rest, how long
//! a failing write may keep failing, and the faults a test injects. Part of [`crate::Config`]; each setting has a `TIERMEM_*`
//! variable and goes through the same error reporting.
//!
//! Injected faults follow SQLite's I/O-error tests: the store is real, and
//! the n-th read or write reports EIO instead of its real result, so that a
//! sweep over n reaches every error path the program can meet.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{invalid, Error, Result};
use crate::settings::env_or_default;

/// crc32c and identity check of every page read back: `on` (the default) or
/// `off`.
pub const ENV_CHECKSUMS: &str = "TIERMEM_CHECKSUMS";
/// AES-256-GCM of every page written to the store: `on`, or `off` (the
/// default).
pub const ENV_ENCRYPT: &str = "TIERMEM_ENCRYPT";
/// How long writes may keep failing before the program is stopped, in whole
/// seconds (1 to 86400; 60 by default).
pub const ENV_IO_DEADLINE: &str = "TIERMEM_IO_DEADLINE";
/// Reads and writes that fail with EIO, such as `read:3,write:10-`; for tests
/// and the fault-injection sweep.
pub const ENV_INJECT_FAULTS: &str = "TIERMEM_INJECT_FAULTS";

/// A store that keeps failing writes for this long stops the program.
pub const DEFAULT_IO_DEADLINE: Duration = Duration::from_secs(60);
const MAX_IO_DEADLINE_S: u64 = 24 * 3600;

const INJECT_FORM: &str = "expected a comma-separated list of read:N, write:N, read:N-M \
     or write:N- (the N-th read or write, counting from 1, a range of them, \
     or every one from N on)";

/// How the runtime protects the pages it stores, and how long it bears a
/// failing store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorPolicy {
    /// crc32c and identity check of every page read back.
    pub checksums: bool,
    /// AES-256-GCM of every page written, with a random key per process
    /// (authenticates too, so it takes the checksum's place).
    pub encrypt: bool,
    /// How long writes may keep failing before the program is stopped.
    pub io_deadline: Duration,
    /// Faults to inject (tests and the fault-injection sweep only).
    pub inject: Injection,
}

impl Default for ErrorPolicy {
    fn default() -> Self {
        ErrorPolicy {
            checksums: true,
            encrypt: false,
            io_deadline: DEFAULT_IO_DEADLINE,
            inject: Injection::default(),
        }
    }
}

impl ErrorPolicy {
    /// Defaults overridden by the variables `lookup` returns.
    pub fn from_lookup(lookup: &impl Fn(&str) -> Option<String>) -> Result<ErrorPolicy> {
        let mut p = ErrorPolicy::default();
        if let Some(v) = env_or_default(ENV_CHECKSUMS, lookup) {
            p.checksums = parse_switch(ENV_CHECKSUMS, &v, "crc32c")?;
        }
        if let Some(v) = env_or_default(ENV_ENCRYPT, lookup) {
            p.encrypt = parse_switch(ENV_ENCRYPT, &v, "aes-256-gcm")?;
        }
        if let Some(v) = env_or_default(ENV_IO_DEADLINE, lookup) {
            p.io_deadline = parse_deadline(&v)?;
        }
        if let Some(v) = env_or_default(ENV_INJECT_FAULTS, lookup) {
            p.inject = v.parse()?;
        }
        Ok(p)
    }

    /// Appends the settings that differ from the defaults as variables, for a
    /// child process.
    pub fn to_env(&self, env: &mut Vec<(&'static str, String)>) {
        if !self.checksums {
            env.push((ENV_CHECKSUMS, "off".into()));
        }
        if self.encrypt {
            env.push((ENV_ENCRYPT, "on".into()));
        }
        if self.io_deadline != DEFAULT_IO_DEADLINE {
            env.push((ENV_IO_DEADLINE, self.io_deadline.as_secs().to_string()));
        }
        if self.inject != Injection::default() {
            env.push((ENV_INJECT_FAULTS, self.inject.to_string()));
        }
    }
}

/// A switch (see [`crate::units::switch_from_text`]), which the name of what
/// it switches on (`crc32c`, `aes-256-gcm`) also turns on.
fn parse_switch(var: &'static str, value: &str, name: &str) -> Result<bool> {
    crate::units::switch_from_text(value)
        .or_else(|| value.trim().eq_ignore_ascii_case(name).then_some(true))
        .ok_or_else(|| invalid(var, value, crate::units::SWITCH_FORM))
}

/// Whole seconds from 1 s to a day, written as any duration (`60`, `60s`,
/// `2000ms`). Whole, because a child process gets the deadline back in
/// seconds.
fn parse_deadline(v: &str) -> Result<Duration> {
    crate::units::duration_from_text(v)
        .ok()
        .filter(|d| d.subsec_nanos() == 0 && (1..=MAX_IO_DEADLINE_S).contains(&d.as_secs()))
        .ok_or_else(|| {
            invalid(
                ENV_IO_DEADLINE,
                v,
                "expected whole seconds from 1 to 86400, like 60 or 60s",
            )
        })
}

/// Reads and writes (1-based, in the order the runtime issues them) that
/// fail with EIO. Each range is inclusive; `last == u64::MAX` is open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Injection {
    /// Reads that fail, counted from 1 in the order the runtime issues them.
    pub reads: Ranges,
    /// Writes that fail, counted the same way.
    pub writes: Ranges,
}

/// Most ranges per operation in one injection.
pub const MAX_INJECTED_RANGES: usize = 16;

/// Request numbers (from 1), as inclusive ranges; `u64::MAX` as the end
/// means "and every one after".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ranges {
    list: [(u64, u64); MAX_INJECTED_RANGES],
    len: usize,
}

impl Ranges {
    /// Whether the list holds no range.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The ranges as inclusive `(first, last)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.list[..self.len].iter().copied()
    }

    fn contains(&self, n: u64) -> bool {
        self.iter().any(|(first, last)| (first..=last).contains(&n))
    }

    /// False when the list is full.
    fn push(&mut self, range: (u64, u64)) -> bool {
        let Some(slot) = self.list.get_mut(self.len) else {
            return false;
        };
        *slot = range;
        self.len += 1;
        true
    }
}

impl std::str::FromStr for Injection {
    type Err = Error;
    fn from_str(s: &str) -> Result<Injection> {
        let mut inj = Injection::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, range) = part
                .split_once(':')
                .ok_or_else(|| invalid(ENV_INJECT_FAULTS, s, INJECT_FORM))?;
            let range =
                parse_range(range).ok_or_else(|| invalid(ENV_INJECT_FAULTS, s, INJECT_FORM))?;
            let ranges = match op.trim() {
                "read" => &mut inj.reads,
                "write" => &mut inj.writes,
                _ => return Err(invalid(ENV_INJECT_FAULTS, s, INJECT_FORM)),
            };
            if !ranges.push(range) {
                return Err(invalid(
                    ENV_INJECT_FAULTS,
                    s,
                    &format!(
                        "at most {MAX_INJECTED_RANGES} ranges for reads and as many for writes"
                    ),
                ));
            }
        }
        Ok(inj)
    }
}

fn parse_range(r: &str) -> Option<(u64, u64)> {
    let r = r.trim();
    let (first, last) = match r.split_once('-') {
        None => {
            let n = r.parse().ok()?;
            (n, n)
        }
        Some((a, "")) => (a.parse().ok()?, u64::MAX),
        Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
    };
    (first >= 1 && last >= first).then_some((first, last))
}

impl std::fmt::Display for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        for (op, ranges) in [("read", &self.reads), ("write", &self.writes)] {
            for (first, last) in ranges.iter() {
                match last {
                    u64::MAX => write!(f, "{sep}{op}:{first}-")?,
                    l if l == first => write!(f, "{sep}{op}:{first}")?,
                    l => write!(f, "{sep}{op}:{first}-{l}")?,
                }
                sep = ",";
            }
        }
        Ok(())
    }
}

/// Counts reads and writes and says which ones fail. Without an injection
/// it costs one branch per I/O.
#[derive(Default)]
pub(crate) struct Injector {
    plan: Injection,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl Injector {
    pub fn new(plan: Injection) -> Injector {
        Injector {
            plan,
            ..Injector::default()
        }
    }

    /// Counts one read request; the error it must report instead, if any.
    pub fn read(&self) -> Option<std::io::Error> {
        Self::next(&self.plan.reads, &self.reads)
    }

    /// Counts one write request; the error it must report instead, if any.
    pub fn write(&self) -> Option<std::io::Error> {
        Self::next(&self.plan.writes, &self.writes)
    }

    fn next(plan: &Ranges, count: &AtomicU64) -> Option<std::io::Error> {
        if plan.is_empty() {
            return None;
        }
        let n = count.fetch_add(1, Ordering::Relaxed) + 1;
        plan.contains(n)
            .then(|| std::io::Error::from_raw_os_error(libc::EIO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(vars: &[(&str, &str)]) -> Result<ErrorPolicy> {
        ErrorPolicy::from_lookup(&|name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        })
    }

    #[test]
    fn injections_parse_and_print_back() {
        for text in [
            "read:3",
            "write:7-",
            "read:2-3,write:1",
            "read:4,read:9-10,write:2,write:8",
        ] {
            let inj: Injection = text.parse().unwrap();
            assert_eq!(inj.to_string(), text);
        }
        let inj: Injection = "read:5-".parse().unwrap();
        assert_eq!(inj.reads.iter().collect::<Vec<_>>(), [(5, u64::MAX)]);
    }

    #[test]
    fn bad_injections_say_the_form() {
        for bad in ["read", "read:0", "seek:3", "read:5-2", "write:x"] {
            let err = bad.parse::<Injection>().unwrap_err().to_string();
            assert!(
                err.contains(ENV_INJECT_FAULTS) && err.contains("read:N"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn injector_fails_exactly_the_planned_requests() {
        let inj = Injector::new("read:2-3".parse().unwrap());
        let failed: Vec<bool> = (0..5).map(|_| inj.read().is_some()).collect();
        assert_eq!(failed, [false, true, true, false, false]);
        assert!(inj.write().is_none());
    }

    #[test]
    fn settings_round_trip_through_the_environment() {
        let p = policy(&[
            (ENV_CHECKSUMS, "off"),
            (ENV_ENCRYPT, "1"),
            (ENV_IO_DEADLINE, "5s"),
            (ENV_INJECT_FAULTS, "write:4-"),
        ])
        .unwrap();
        assert!(!p.checksums);
        assert!(p.encrypt);
        assert_eq!(p.io_deadline, Duration::from_secs(5));
        let mut env = Vec::new();
        p.to_env(&mut env);
        let again = policy(
            &env.iter()
                .map(|(k, v)| (*k, v.as_str()))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn deadlines_take_whole_seconds_in_any_duration_form() {
        for (text, secs) in [
            ("60", 60),
            ("60s", 60),
            (" 5 ", 5),
            ("2000ms", 2),
            ("86400", 86400),
        ] {
            let p = policy(&[(ENV_IO_DEADLINE, text)]).unwrap();
            assert_eq!(p.io_deadline, Duration::from_secs(secs), "{text}");
        }
    }

    #[test]
    fn bad_deadlines_and_switches_are_refused() {
        for (k, v) in [
            (ENV_IO_DEADLINE, "0"),
            (ENV_IO_DEADLINE, "1m"),
            (ENV_IO_DEADLINE, "1.5"),
            (ENV_IO_DEADLINE, "500ms"),
            (ENV_IO_DEADLINE, "86401"),
            (ENV_CHECKSUMS, "maybe"),
            (ENV_ENCRYPT, "aes"),
        ] {
            let err = policy(&[(k, v)]).unwrap_err().to_string();
            assert!(err.contains(k), "{err}");
        }
    }

    #[test]
    fn switches_take_the_common_words_and_the_name_of_what_they_turn_on() {
        for (k, v, on) in [
            (ENV_CHECKSUMS, "crc32c", true),
            (ENV_CHECKSUMS, "false", false),
            (ENV_CHECKSUMS, "No", false),
            (ENV_ENCRYPT, "AES-256-GCM", true),
            (ENV_ENCRYPT, "true", true),
            (ENV_ENCRYPT, "0", false),
        ] {
            let p = policy(&[(k, v)]).unwrap();
            let got = if k == ENV_CHECKSUMS {
                p.checksums
            } else {
                p.encrypt
            };
            assert_eq!(got, on, "{k}={v}");
        }
    }
}
