//! All of tiermem's settings in one place.
//!
//! A [`Config`] comes from the builder API, from `TIERMEM_*` environment
//! variables ([`Config::from_env`]), or from CLI flags (which the CLI turns into
//! the same environment variables or builder calls). Every value goes through
//! the same parsers, so a bad value gets the same error wherever it came from:
//! the setting, the value, and the accepted form.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::compress::CompressSettings;
use crate::error::{invalid, Error, Result};
use crate::error_policy::ErrorPolicy;
use crate::io_config::IoSettings;
use crate::organization::{Inclusion, Organization, Preset, WritePolicy};
use crate::settings::env_or_default;
pub use crate::sys::physical_ram_bytes;
pub use crate::units::{parse_size, SizeSpec};

/// DRAM budget of the tiered pages: a size such as `256M`, or a share of
/// physical RAM such as `25%` (the default).
pub const ENV_DRAM: &str = "TIERMEM_DRAM";
/// Backing store: a directory (a private file is created there), a file or a
/// block device; [`DEFAULT_BACKING_DIR`] by default.
pub const ENV_BACKING: &str = "TIERMEM_BACKING";
/// Upper bound on the backing store, as a size; unset, as much as the device
/// has.
pub const ENV_BACKING_SIZE: &str = "TIERMEM_BACKING_SIZE";
/// Unit of paging: a power of two from 4K to 2M (4096 to 2097152 bytes).
pub const ENV_PAGE_SIZE: &str = "TIERMEM_PAGE_SIZE";
/// Replacement policy: `clock` (the default), `fifo` or `s3fifo`.
pub const ENV_POLICY: &str = "TIERMEM_POLICY";
/// Userfaultfd handler threads, 1 to 64; by default one per CPU, at most 16.
pub const ENV_HANDLER_THREADS: &str = "TIERMEM_HANDLER_THREADS";
/// Free DRAM the evictor keeps, in ten-thousandths of the budget (1 to 5000),
/// as Linux's `vm.watermark_scale_factor`.
pub const ENV_WATERMARK_SCALE: &str = "TIERMEM_WATERMARK_SCALE_FACTOR";
/// Who resolves a fault: `handler` (the default) or `signal`; see
/// [`FaultDelivery`].
pub const ENV_FAULTS: &str = "TIERMEM_FAULTS";
/// Largest watermark scale factor: half the budget kept free.
const MAX_WATERMARK_SCALE: u32 = 5000;

/// Smallest page size, in bytes (4 KiB); also the default.
pub const MIN_PAGE_SIZE: usize = 4096;
/// Largest page size, in bytes (2 MiB).
pub const MAX_PAGE_SIZE: usize = 2 << 20;
const DEFAULT_BUDGET_PERCENT: u64 = 25;
/// Where the backing file is created unless told otherwise: a directory on
/// disk, where `/tmp` is often tmpfs and would keep evicted pages in RAM.
pub const DEFAULT_BACKING_DIR: &str = "/var/tmp";
const MAX_HANDLER_THREADS: usize = 64;

/// Which pages leave DRAM first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// Evict in page-in order: the simplest policy, kept as a baseline.
    /// Blind to references.
    Fifo,
    /// Second chance with real reference detection (write faults and
    /// soft-unmapped probation) and more turns for pages seen in use
    /// repeatedly (see `policy::clock`). The default.
    Clock,
    /// Scan-resistant S3-FIFO: a small FIFO for new pages, a main CLOCK for
    /// pages referenced again, a ghost of recent victims (see `policy::s3fifo`).
    S3Fifo,
}

impl PolicyKind {
    /// Every policy, for code that runs something under each one.
    pub const ALL: [PolicyKind; 3] = [PolicyKind::Fifo, PolicyKind::Clock, PolicyKind::S3Fifo];

    /// The name `TIERMEM_POLICY` takes and the stats report.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Fifo => "fifo",
            PolicyKind::Clock => "clock",
            PolicyKind::S3Fifo => "s3fifo",
        }
    }
}

impl FromStr for PolicyKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fifo" => Ok(PolicyKind::Fifo),
            "clock" | "second-chance" => Ok(PolicyKind::Clock),
            "s3fifo" | "s3-fifo" => Ok(PolicyKind::S3Fifo),
            _ => Err(invalid(ENV_POLICY, s, "expected fifo, clock or s3fifo")),
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Which thread resolves a fault on tiered memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FaultDelivery {
    /// Handler threads read faults from the userfaultfd and wake the
    /// faulting thread once its page is in. Works for every access,
    /// including the kernel's (`read(2)` into tiered memory).
    #[default]
    Handler,
    /// The faulting thread gets SIGBUS and reads its page itself
    /// (`UFFD_FEATURE_SIGBUS`): no other thread is woken, so a miss costs
    /// no cross-CPU wake-up. For programs that touch tiered memory only
    /// with their own loads and stores: a system call given tiered memory
    /// that is not resident fails with EFAULT. Not for transparent mode.
    /// Read-ahead windows go to one read-ahead thread, which no fault
    /// waits for when it issues them.
    Signal,
}

impl FaultDelivery {
    /// The name `TIERMEM_FAULTS` takes.
    pub fn name(self) -> &'static str {
        match self {
            FaultDelivery::Handler => "handler",
            FaultDelivery::Signal => "signal",
        }
    }
}

impl FromStr for FaultDelivery {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "handler" | "handlers" | "thread" => Ok(FaultDelivery::Handler),
            "signal" | "sigbus" => Ok(FaultDelivery::Signal),
            _ => Err(invalid(ENV_FAULTS, s, "expected handler or signal")),
        }
    }
}

/// The validated configuration of one tiermem runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Most DRAM the tiered pages may occupy, in bytes.
    pub dram_budget: u64,
    /// A directory (a private file is created there), a file, or a block device.
    pub backing: PathBuf,
    /// Upper bound on the backing store; `None` means as much as the device has.
    pub backing_size: Option<u64>,
    /// Unit of paging (the "cache line"), a power of two in 4 KiB..=2 MiB.
    pub page_size: usize,
    /// Which pages leave DRAM first.
    pub policy: PolicyKind,
    /// Threads that read and serve userfaultfd events.
    pub handler_threads: usize,
    /// Handler threads, or the faulting thread itself through SIGBUS.
    pub faults: FaultDelivery,
    /// Engine, queue depth, polling and read-ahead.
    pub io: IoSettings,
    /// Associativity, prefetch degree, write policy and inclusion.
    pub organization: Organization,
    /// Free DRAM the evictor keeps, in ten-thousandths of the budget (as
    /// Linux's `vm.watermark_scale_factor`): it starts below half of it and
    /// stops at all of it. `None`: 1/32 of the budget, at most 4096 pages.
    pub watermark_scale_factor: Option<u32>,
    /// Checksums, the write deadline, and injected faults.
    pub errors: ErrorPolicy,
    /// The compressed tier in front of the store.
    pub compress: CompressSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            dram_budget: SizeSpec::PercentOfRam(DEFAULT_BUDGET_PERCENT).resolve(),
            backing: default_backing_dir(),
            backing_size: None,
            page_size: MIN_PAGE_SIZE,
            policy: PolicyKind::Clock,
            handler_threads: default_handler_threads(),
            faults: FaultDelivery::Handler,
            io: IoSettings::default(),
            organization: Organization::default(),
            watermark_scale_factor: None,
            errors: ErrorPolicy::default(),
            compress: CompressSettings::default(),
        }
    }
}

fn default_backing_dir() -> PathBuf {
    PathBuf::from(DEFAULT_BACKING_DIR)
}

fn default_handler_threads() -> usize {
    // One per CPU, so a fault is usually served on the CPU it happened on.
    std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .clamp(1, 16)
}

impl Config {
    /// A builder whose unset fields keep their defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Defaults overridden by whatever `TIERMEM_*` variables are set.
    pub fn from_env() -> Result<Config> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`Config::from_env`] but reads variables through `lookup`, so
    /// tests and the CLI can supply their own environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let mut b = Config::builder();
        if let Some(v) = env_or_default(ENV_DRAM, &lookup) {
            b.dram_budget = Some(parse_size(ENV_DRAM, &v)?.resolve());
        }
        if let Some(v) = env_or_default(ENV_BACKING, &lookup) {
            b = b.backing(v);
        }
        if let Some(v) = env_or_default(ENV_BACKING_SIZE, &lookup) {
            b.backing_size = Some(parse_size(ENV_BACKING_SIZE, &v)?.resolve());
        }
        if let Some(v) = env_or_default(ENV_PAGE_SIZE, &lookup) {
            b.page_size = Some(parse_size(ENV_PAGE_SIZE, &v)?.resolve());
        }
        if let Some(v) = env_or_default(ENV_POLICY, &lookup) {
            b.policy = Some(v.parse()?);
        }
        if let Some(v) = env_or_default(ENV_HANDLER_THREADS, &lookup) {
            b.handler_threads = Some(v.trim().parse().map_err(|_| {
                invalid(
                    ENV_HANDLER_THREADS,
                    &v,
                    "expected a whole number from 1 to 64",
                )
            })?);
        }
        if let Some(v) = env_or_default(ENV_WATERMARK_SCALE, &lookup) {
            b.watermark_scale_factor = Some(
                v.trim()
                    .parse()
                    .ok()
                    .filter(|f| (1..=MAX_WATERMARK_SCALE).contains(f))
                    .ok_or_else(|| {
                        invalid(
                            ENV_WATERMARK_SCALE,
                            &v,
                            "expected ten-thousandths of the budget, from 1 to 5000",
                        )
                    })?,
            );
        }
        if let Some(v) = env_or_default(ENV_FAULTS, &lookup) {
            b.faults = Some(v.parse()?);
        }
        b.io = Some(IoSettings::from_lookup(&lookup)?);
        b.organization = Some(Organization::from_lookup(&lookup)?);
        b.errors = Some(ErrorPolicy::from_lookup(&lookup)?);
        b.compress = Some(CompressSettings::from_lookup(&lookup)?);
        b.build()
    }

    /// The same configuration as `TIERMEM_*` variables, for a child process.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (ENV_DRAM, self.dram_budget.to_string()),
            (ENV_BACKING, self.backing.display().to_string()),
            (ENV_PAGE_SIZE, self.page_size.to_string()),
            (ENV_POLICY, self.policy.name().to_string()),
            (ENV_HANDLER_THREADS, self.handler_threads.to_string()),
            (ENV_FAULTS, self.faults.name().to_string()),
        ];
        if let Some(size) = self.backing_size {
            env.push((ENV_BACKING_SIZE, size.to_string()));
        }
        self.io.to_env(&mut env);
        self.organization.to_env(&mut env);
        self.errors.to_env(&mut env);
        self.compress.to_env(&mut env);
        if let Some(f) = self.watermark_scale_factor {
            env.push((ENV_WATERMARK_SCALE, f.to_string()));
        }
        env
    }

    /// Refuses what transparent mode (`tiermem run`, the preload library)
    /// cannot honour: signal delivery, under which a program's `read(2)`
    /// into a malloc'd buffer that was evicted would fail with EFAULT.
    pub fn check_transparent(&self) -> Result<()> {
        match self.faults {
            FaultDelivery::Handler => Ok(()),
            FaultDelivery::Signal => Err(invalid(
                ENV_FAULTS,
                self.faults.name(),
                "handler in transparent mode: under signal delivery the kernel does not \
                 wait for evicted pages, so the program's system calls on its own memory \
                 would fail with EFAULT",
            )),
        }
    }

    /// The DRAM budget in whole pages.
    pub fn budget_pages(&self) -> u64 {
        self.dram_budget / self.page_size as u64
    }
}

/// Builder for [`Config`]; unset fields keep their defaults.
#[derive(Clone, Debug, Default)]
pub struct ConfigBuilder {
    dram_budget: Option<u64>,
    backing: Option<PathBuf>,
    backing_size: Option<u64>,
    page_size: Option<u64>,
    policy: Option<PolicyKind>,
    handler_threads: Option<usize>,
    faults: Option<FaultDelivery>,
    io: Option<IoSettings>,
    organization: Option<Organization>,
    watermark_scale_factor: Option<u32>,
    errors: Option<ErrorPolicy>,
    compress: Option<CompressSettings>,
}

impl ConfigBuilder {
    /// Most DRAM the tiered pages may occupy, in bytes (default: 25% of
    /// physical RAM).
    pub fn dram_budget(mut self, bytes: u64) -> Self {
        self.dram_budget = Some(bytes);
        self
    }
    /// A directory (a private file is created there), a file, or a block device
    /// (default: [`DEFAULT_BACKING_DIR`]).
    pub fn backing(mut self, path: impl AsRef<Path>) -> Self {
        self.backing = Some(path.as_ref().to_path_buf());
        self
    }
    /// Upper bound on the backing store, in bytes (default: as much as the device
    /// has).
    pub fn backing_size(mut self, bytes: u64) -> Self {
        self.backing_size = Some(bytes);
        self
    }
    /// Unit of paging, in bytes: a power of two from 4 KiB to 2 MiB (default:
    /// 4 KiB).
    pub fn page_size(mut self, bytes: usize) -> Self {
        self.page_size = Some(bytes as u64);
        self
    }
    /// Which pages leave DRAM first (default: [`PolicyKind::Clock`]).
    pub fn policy(mut self, policy: PolicyKind) -> Self {
        self.policy = Some(policy);
        self
    }
    /// Threads that serve userfaultfd events, 1 to 64 (default: one per CPU, at
    /// most 16).
    pub fn handler_threads(mut self, n: usize) -> Self {
        self.handler_threads = Some(n);
        self
    }
    /// Who resolves faults (see [`FaultDelivery`]).
    pub fn faults(mut self, faults: FaultDelivery) -> Self {
        self.faults = Some(faults);
        self
    }
    /// Engine, queue depth, polling and read-ahead.
    pub fn io(mut self, io: IoSettings) -> Self {
        self.io = Some(io);
        self
    }
    /// Associativity, prefetch degree, write policy and inclusion at once.
    pub fn organization(mut self, organization: Organization) -> Self {
        self.organization = Some(organization);
        self
    }
    /// Free DRAM the evictor keeps, in ten-thousandths of the budget.
    pub fn watermark_scale_factor(mut self, factor: u32) -> Self {
        self.watermark_scale_factor = Some(factor);
        self
    }
    /// Checksums, the write deadline, and injected faults.
    pub fn errors(mut self, errors: ErrorPolicy) -> Self {
        self.errors = Some(errors);
        self
    }
    /// The compressed tier (on, with LZ4, unless set otherwise).
    pub fn compress(mut self, compress: CompressSettings) -> Self {
        self.compress = Some(compress);
        self
    }
    /// Applies a preset; knobs set after it override it.
    pub fn preset(mut self, preset: Preset) -> Self {
        self.organization = Some(preset.organization());
        self
    }
    /// Ways per set: 0 fully associative, 1 direct-mapped.
    pub fn associativity(mut self, ways: u32) -> Self {
        self.organization
            .get_or_insert_with(Default::default)
            .associativity = ways;
        self
    }
    /// A fixed prefetch degree in pages (0: none) instead of the adaptive
    /// read-ahead.
    pub fn prefetch(mut self, pages: u32) -> Self {
        self.organization
            .get_or_insert_with(Default::default)
            .prefetch = Some(pages);
        self
    }
    /// Write-back or write-through; the other organization knobs stay.
    pub fn write_policy(mut self, policy: WritePolicy) -> Self {
        self.organization
            .get_or_insert_with(Default::default)
            .write_policy = policy;
        self
    }
    /// Inclusive or exclusive; the other organization knobs stay.
    pub fn inclusion(mut self, inclusion: Inclusion) -> Self {
        self.organization
            .get_or_insert_with(Default::default)
            .inclusion = inclusion;
        self
    }

    /// Checks every value and fills in defaults.
    pub fn build(self) -> Result<Config> {
        let defaults = Config::default();
        let page_size = validate_page_size(self.page_size.unwrap_or(MIN_PAGE_SIZE as u64))?;
        let dram_budget = self.dram_budget.unwrap_or(defaults.dram_budget);
        if dram_budget < page_size as u64 * MIN_BUDGET_PAGES {
            return Err(invalid(
                ENV_DRAM,
                &dram_budget.to_string(),
                &format!(
                    "the budget must hold at least {MIN_BUDGET_PAGES} pages ({} bytes at page size {page_size})",
                    page_size as u64 * MIN_BUDGET_PAGES
                ),
            ));
        }
        let backing = self.backing.unwrap_or(defaults.backing);
        if backing.as_os_str().is_empty() {
            return Err(invalid(
                ENV_BACKING,
                "",
                "expected a directory, a file or a block device",
            ));
        }
        if let Some(f) = self.watermark_scale_factor {
            if !(1..=MAX_WATERMARK_SCALE).contains(&f) {
                return Err(invalid(
                    ENV_WATERMARK_SCALE,
                    &f.to_string(),
                    "expected ten-thousandths of the budget, from 1 to 5000",
                ));
            }
        }
        if let Some(size) = self.backing_size {
            if size < page_size as u64 {
                return Err(invalid(
                    ENV_BACKING_SIZE,
                    &size.to_string(),
                    "the backing store must hold at least one page",
                ));
            }
        }
        let handler_threads = self.handler_threads.unwrap_or(defaults.handler_threads);
        if !(1..=MAX_HANDLER_THREADS).contains(&handler_threads) {
            return Err(invalid(
                ENV_HANDLER_THREADS,
                &handler_threads.to_string(),
                "expected a whole number from 1 to 64",
            ));
        }
        let organization = self.organization.unwrap_or_default();
        organization.validate(dram_budget / page_size as u64)?;
        let faults = self.faults.unwrap_or_default();
        if faults == FaultDelivery::Signal && !cfg!(target_arch = "x86_64") {
            return Err(invalid(
                ENV_FAULTS,
                faults.name(),
                "handler: signal delivery needs x86-64, where the page-fault error code \
                 tells a write from a read",
            ));
        }
        Ok(Config {
            dram_budget,
            backing,
            backing_size: self.backing_size,
            page_size,
            policy: self.policy.unwrap_or(defaults.policy),
            handler_threads,
            faults,
            io: self.io.unwrap_or_default(),
            organization,
            watermark_scale_factor: self.watermark_scale_factor,
            errors: self.errors.unwrap_or_default(),
            compress: self.compress.unwrap_or_default(),
        })
    }
}

/// A budget below this many pages cannot make progress: every handler thread
/// plus the evictor's batch needs frames at once.
pub const MIN_BUDGET_PAGES: u64 = 16;

fn validate_page_size(bytes: u64) -> Result<usize> {
    let ok =
        bytes.is_power_of_two() && (MIN_PAGE_SIZE as u64..=MAX_PAGE_SIZE as u64).contains(&bytes);
    if ok {
        Ok(bytes as usize)
    } else {
        Err(invalid(
            ENV_PAGE_SIZE,
            &bytes.to_string(),
            "expected a power of two from 4K to 2M (4096 to 2097152 bytes)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn env_overrides_defaults() {
        let env: HashMap<&str, &str> = [
            (ENV_DRAM, "64M"),
            (ENV_BACKING, "/var/tmp"),
            (ENV_PAGE_SIZE, "64K"),
            (ENV_POLICY, "fifo"),
            (ENV_HANDLER_THREADS, "3"),
            (ENV_WATERMARK_SCALE, "150"),
            (ENV_FAULTS, "signal"),
        ]
        .into();
        let c = Config::from_lookup(|k| env.get(k).map(|v| v.to_string())).unwrap();
        assert_eq!(c.dram_budget, 64 << 20);
        assert_eq!(c.page_size, 64 << 10);
        assert_eq!(c.policy, PolicyKind::Fifo);
        assert_eq!(c.handler_threads, 3);
        assert_eq!(c.watermark_scale_factor, Some(150));
        assert_eq!(c.faults, FaultDelivery::Signal);
        let back = Config::from_lookup(|k| {
            c.to_env()
                .into_iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v)
        })
        .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn invalid_env_values_are_rejected_with_the_setting_name() {
        let cases = [
            (ENV_PAGE_SIZE, "3000", "power of two"),
            (ENV_PAGE_SIZE, "4M", "power of two"),
            (ENV_POLICY, "lru-ish", "fifo, clock or s3fifo"),
            (ENV_HANDLER_THREADS, "0", "1 to 64"),
            (ENV_HANDLER_THREADS, "many", "1 to 64"),
            (ENV_WATERMARK_SCALE, "0", "1 to 5000"),
            (ENV_WATERMARK_SCALE, "10%", "ten-thousandths"),
            (ENV_DRAM, "4K", "at least 16 pages"),
            (ENV_FAULTS, "interrupt", "handler or signal"),
        ];
        for (name, value, hint) in cases {
            let err = Config::from_lookup(|k| (k == name).then(|| value.to_string()))
                .unwrap_err()
                .to_string();
            assert!(err.contains(name), "{err}");
            assert!(err.contains(hint), "{err}");
        }
    }
}
