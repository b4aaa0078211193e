//! zram for `kernel-zram` mode: swap on a compressed RAM disk instead of
//! the swapfile, set up for one run and reset afterwards.
//!
//! The device is reset, given its compressor (`comp_algorithm`) and size
//! (`disksize`), and the swap sandbox makes it swap with a priority above
//! any other. Restoring (through `saved_settings`, on every exit path)
//! turns that swap off, resets the device, which empties it and sets its
//! size back to 0, and puts the compressor back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::page_data::PageData;
use crate::saved_settings::{choices, read_setting, write_setting, Kind, SettingsGuard};

/// The zram device's sysfs directory and its block device.
pub const SYSFS: &str = "/sys/block/zram0";
pub const DEVICE: &str = "/dev/zram0";
/// Swap priority of the zram device, above the default (-2 and down) of
/// swap areas turned on without one.
pub const SWAP_PRIORITY: i32 = 100;

/// What `--zram-compressor` and `--zram-size` ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZramOptions {
    pub compressor: String,
    /// `None`: the working set plus 25%.
    pub disksize: Option<u64>,
}

impl Default for ZramOptions {
    fn default() -> ZramOptions {
        ZramOptions {
            compressor: "lz4".into(),
            disksize: None,
        }
    }
}

/// The device's size for a working set: all of it plus 25%, as the
/// uncompressed size zram accepts (its memory use is what compresses).
pub fn default_disksize(working_set_bytes: u64) -> u64 {
    working_set_bytes + working_set_bytes / 4
}

/// zsmalloc's size classes step by 16 bytes for 4 KiB pages.
const ZSMALLOC_CLASS_STEP: u64 = 16;
/// zram stores a page whose compressed size reaches zsmalloc's largest
/// class below a page (3,264 bytes for 4 KiB pages) as it is.
const HUGE_FROM_BYTES: u64 = 3264;
/// Pages compressed to estimate zram's memory per page.
const SAMPLE_PAGES: u64 = 512;
/// The estimate is held this far below the cap, so that zram's pool ends
/// under it even where the kernel's LZ4 does a little worse than lz4_flex.
const CAP_MARGIN: f64 = 0.95;

/// What zram's pool takes for a 4 KiB page of `data` as the bench worker
/// writes it (its stamp included): the LZ4 block size rounded up to
/// zsmalloc's class, or a whole page when zram would store it as it is.
/// The mean over pages spread across the working set.
pub fn estimated_pool_bytes_per_page(data: PageData) -> f64 {
    let mut total = 0u64;
    let stride = 1_000_003u64;
    for n in 0..SAMPLE_PAGES {
        let bytes = crate::worker::pages::stamped_image(data, n * stride, 4096);
        let compressed = lz4_flex::block::compress(&bytes).len() as u64;
        total += if compressed >= HUGE_FROM_BYTES {
            bytes.len() as u64
        } else {
            compressed.div_ceil(ZSMALLOC_CLASS_STEP) * ZSMALLOC_CLASS_STEP
        };
    }
    total as f64 / SAMPLE_PAGES as f64
}

/// The device size at which zram's pool, at `bytes_per_page` of memory
/// per 4 KiB page stored, stays within `pool_cap_bytes` (less a margin),
/// at most `largest`: zram has no cap that passes pages on to a slower
/// swap area (its `mem_limit` fails the writes beyond it), but a full
/// device does, to the next swap area by priority.
pub fn disksize_for_pool(pool_cap_bytes: u64, bytes_per_page: f64, largest: u64) -> u64 {
    const PAGE: u64 = 4096;
    let pages = pool_cap_bytes as f64 * CAP_MARGIN / bytes_per_page.max(1.0);
    let bytes = (pages as u64).saturating_mul(PAGE);
    bytes.min(largest) / PAGE * PAGE
}

/// Why the device cannot be used now, or `Ok`: missing, or in use (sized,
/// swapped on, or mounted).
pub fn check_free(sysfs: &Path, device: &Path, swaps: &[PathBuf]) -> anyhow::Result<()> {
    if !sysfs.join("disksize").exists() {
        bail!(
            "there is no zram device ({} is missing; `modprobe zram` makes one)",
            sysfs.display()
        );
    }
    if swaps.iter().any(|s| s == device) {
        bail!(
            "{} is in use as swap; kernel-zram mode resets it",
            device.display()
        );
    }
    let disksize: u64 = read_setting(&sysfs.join("disksize"))?
        .parse()
        .with_context(|| format!("parsing {}", sysfs.join("disksize").display()))?;
    if disksize != 0 {
        bail!(
            "{} is in use (its disksize is {disksize}); kernel-zram mode resets it, so it \
             runs only while the device is unused (`echo 1 > {}` frees it)",
            device.display(),
            sysfs.join("reset").display()
        );
    }
    Ok(())
}

/// Saves the device's compressor, resets the device, sets `options` and
/// the size; the guard undoes all of it.
pub fn prepare(
    sysfs: &Path,
    device: &Path,
    state_dir: &Path,
    options: &ZramOptions,
    disksize: u64,
) -> anyhow::Result<SettingsGuard> {
    let algorithms = sysfs.join("comp_algorithm");
    let offered = choices(
        &std::fs::read_to_string(&algorithms)
            .with_context(|| format!("reading {}", algorithms.display()))?,
    );
    if !offered.contains(&options.compressor) {
        bail!(
            "--zram-compressor {}: this kernel offers {} (from {})",
            options.compressor,
            offered.join(", "),
            algorithms.display()
        );
    }
    let guard = SettingsGuard::save(
        state_dir,
        Kind::Zram {
            device: device.to_path_buf(),
        },
        sysfs,
        &["comp_algorithm"],
    )?;
    write_setting(&sysfs.join("reset"), "1")?;
    guard.set("comp_algorithm", &options.compressor)?;
    write_setting(&sysfs.join("disksize"), &disksize.to_string())?;
    Ok(guard)
}

/// The device's memory statistics (`mm_stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmStat {
    /// Bytes stored, uncompressed.
    pub orig_data_size: u64,
    /// Bytes they take compressed.
    pub compr_data_size: u64,
    /// Memory the device uses, its allocator's overhead included.
    pub mem_used_total: u64,
    /// Highest mem_used_total since the device was set up.
    pub mem_used_max: u64,
    /// Pages stored as one repeated word, with no memory.
    pub same_pages: u64,
    /// Pages stored uncompressed because they did not compress.
    pub huge_pages: u64,
}

impl MmStat {
    pub fn parse(text: &str) -> anyhow::Result<MmStat> {
        let fields: Vec<u64> = text
            .split_whitespace()
            .map(|f| f.parse::<u64>())
            .collect::<Result<_, _>>()
            .with_context(|| format!("parsing mm_stat {:?}", text.trim()))?;
        if fields.len() < 7 {
            bail!("mm_stat {:?} has fewer than 7 fields", text.trim());
        }
        Ok(MmStat {
            orig_data_size: fields[0],
            compr_data_size: fields[1],
            mem_used_total: fields[2],
            mem_used_max: fields[4],
            same_pages: fields[5],
            huge_pages: fields.get(7).copied().unwrap_or(0),
        })
    }

    pub fn read(sysfs: &Path) -> anyhow::Result<MmStat> {
        let path = sysfs.join("mm_stat");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        MmStat::parse(&text)
    }

    /// The run's counters, `zram_`-prefixed, and the compression ratio
    /// orig_data_size / mem_used_total.
    pub fn counters(&self) -> BTreeMap<String, f64> {
        let mut out: BTreeMap<String, f64> = [
            ("zram_orig_data_size", self.orig_data_size),
            ("zram_compr_data_size", self.compr_data_size),
            ("zram_mem_used_total", self.mem_used_total),
            ("zram_mem_used_max", self.mem_used_max),
            ("zram_same_pages", self.same_pages),
            ("zram_huge_pages", self.huge_pages),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v as f64))
        .collect();
        if self.mem_used_total > 0 {
            out.insert(
                "zram_compression_ratio".into(),
                self.orig_data_size as f64 / self.mem_used_total as f64,
            );
        }
        out
    }

    /// How the pool's peak compares with the cap it was sized for under
    /// `--pool-in-budget`, to be appended to [`MmStat::describe`]'s line.
    /// The estimate behind the device's size can miss: a pool past the cap
    /// had more DRAM than tiermem's, and the line says so.
    pub fn against_cap(&self, cap: u64) -> String {
        let share = self.mem_used_max as f64 * 100.0 / cap.max(1) as f64;
        let mut line = format!(
            "; its pool peaked at {:.1} MiB, {share:.0}% of the {:.1} MiB cap",
            self.mem_used_max as f64 / 1048576.0,
            cap as f64 / 1048576.0,
        );
        if share > 102.0 {
            line.push_str(
                " (past it: zram had more DRAM than tiermem's pool, so this run favours zram)",
            );
        }
        line
    }

    /// One line for the report.
    pub fn describe(&self, compressor: &str) -> String {
        let mib = |b: u64| b as f64 / 1048576.0;
        format!(
            "zram ({compressor}) at its fullest: {:.1} MiB stored in {:.1} MiB compressed, \
             {:.1} MiB used in all: ratio {}; {} same-filled and {} incompressible pages",
            mib(self.orig_data_size),
            mib(self.compr_data_size),
            mib(self.mem_used_total),
            if self.mem_used_total > 0 {
                format!(
                    "{:.2}x",
                    self.orig_data_size as f64 / self.mem_used_total as f64
                )
            } else {
                "-".into()
            },
            self.same_pages,
            self.huge_pages,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_zram(disksize: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, value) in [
            ("comp_algorithm", "[lzo-rle] lzo lz4\n"),
            ("disksize", disksize),
            ("reset", ""),
        ] {
            std::fs::write(dir.path().join(name), value).unwrap();
        }
        dir
    }

    #[test]
    fn mm_stat_parses_and_gives_the_ratio() {
        let s = MmStat::parse("  4194304  1048576  2097152  0  2097152  3  0  1  0\n").unwrap();
        assert_eq!(s.orig_data_size, 4 << 20);
        assert_eq!(s.same_pages, 3);
        assert_eq!(s.huge_pages, 1);
        assert_eq!(s.counters()["zram_compression_ratio"], 2.0);
        assert!(s.describe("lz4").contains("ratio 2.00x"));
        assert!(MmStat::parse("1 2 3").is_err());
        assert_eq!(
            s.against_cap(4 << 20),
            "; its pool peaked at 2.0 MiB, 50% of the 4.0 MiB cap"
        );
        assert!(s
            .against_cap(1 << 20)
            .contains("200% of the 1.0 MiB cap (past it"));
        assert!(MmStat::parse("1 2 x 4 5 6 7").is_err());
    }

    #[test]
    fn the_pool_estimate_follows_the_data_and_sizes_the_device_within_the_cap() {
        let random = estimated_pool_bytes_per_page(PageData::Random);
        let text = estimated_pool_bytes_per_page(PageData::Text);
        let zero = estimated_pool_bytes_per_page(PageData::Zero);
        assert_eq!(random, 4096.0, "random pages are stored as they are");
        assert!((1000.0..2500.0).contains(&text), "text: {text}");
        assert!(
            zero <= 64.0 && zero > 0.0,
            "zero pages with a stamp: {zero}"
        );
        let mixed = estimated_pool_bytes_per_page(PageData::Mixed);
        assert!(mixed > text && mixed < random, "mixed: {mixed}");

        let cap = 100 << 20;
        let size = disksize_for_pool(cap, random, 1 << 40);
        assert_eq!(size, (cap as f64 * CAP_MARGIN) as u64 / 4096 * 4096);
        let size = disksize_for_pool(cap, text, 1 << 40);
        let pool = size as f64 / 4096.0 * text;
        assert!(pool <= cap as f64 && pool > 0.9 * cap as f64, "{pool}");
        assert_eq!(
            disksize_for_pool(cap, zero, 64 << 20),
            64 << 20,
            "capped by the largest"
        );
        assert_eq!(disksize_for_pool(cap, 0.0, 1 << 40) % 4096, 0);
    }

    #[test]
    fn a_device_in_use_is_refused() {
        let zram = fake_zram("0\n");
        let dev = PathBuf::from("/dev/zram-test");
        check_free(zram.path(), &dev, &[]).unwrap();
        let err = check_free(zram.path(), &dev, std::slice::from_ref(&dev)).unwrap_err();
        assert!(err.to_string().contains("in use as swap"), "{err}");
        std::fs::write(zram.path().join("disksize"), "1048576\n").unwrap();
        let err = check_free(zram.path(), &dev, &[]).unwrap_err();
        assert!(err.to_string().contains("disksize is 1048576"), "{err}");
        let err = check_free(&zram.path().join("nope"), &dev, &[]).unwrap_err();
        assert!(err.to_string().contains("no zram device"), "{err}");
    }

    #[test]
    fn prepare_sets_the_device_up_and_restore_puts_it_back() {
        let zram = fake_zram("0\n");
        let state = tempfile::tempdir().unwrap();
        let dev = PathBuf::from("/dev/tiermem-no-such-zram");
        let options = ZramOptions::default();
        let guard = prepare(zram.path(), &dev, state.path(), &options, 80 << 20).unwrap();
        let read = |n: &str| std::fs::read_to_string(zram.path().join(n)).unwrap();
        assert_eq!(read("comp_algorithm"), "lz4");
        assert_eq!(read("disksize"), (80u64 << 20).to_string());
        std::fs::write(zram.path().join("reset"), "").unwrap();
        guard.restore().unwrap();
        assert_eq!(read("comp_algorithm"), "lzo-rle");
        assert_eq!(read("reset"), "1");
        // A stand-in file keeps what was written; the kernel lists choices.
        std::fs::write(zram.path().join("comp_algorithm"), "[lzo-rle] lzo lz4\n").unwrap();
        let bad = ZramOptions {
            compressor: "zstd".into(),
            disksize: None,
        };
        let err = prepare(zram.path(), &dev, state.path(), &bad, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("lzo-rle, lzo, lz4"), "{err}");
        assert_eq!(default_disksize(64 << 20), 80 << 20);
    }
}
