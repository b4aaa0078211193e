//! Machine settings a bench mode changes for its run (zswap's module
//! parameters, zram's device attributes, `vm.page-cluster`), saved before the first change and
//! put back afterwards on every path.
//!
//! The originals are written to a state file, `<state dir>/<kind>-<pid>.json`
//! (by default under /run, so they are gone with the settings at reboot),
//! before anything is changed. A run that ends normally, with an error, a
//! panic or on SIGINT/SIGTERM/SIGHUP restores them through the swap
//! sandbox's teardown (see `kernel_swap`); a run killed outright leaves the
//! state file behind, and the next run of a compressed mode, or
//! `kernel_swap::remove_leftovers`, restores them from it and deletes it.
//!
//! Every path is a parameter, so tests run against a temporary directory
//! standing in for sysfs.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

/// Where state files live unless a caller says otherwise.
pub const STATE_DIR: &str = "/run/tiermem-bench";

/// What the settings belong to, which decides what restoring them takes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// zswap's module parameters: written back as they were.
    Zswap,
    /// A zram device: swap on `device` is turned off and the device reset
    /// (which empties it and sets its size to 0) before its attributes are
    /// written back, since most of them cannot change while it holds data.
    Zram { device: PathBuf },
    /// Kernel tunables under /proc/sys (`vm.page-cluster`): written back
    /// as they were.
    Sysctl,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Zswap => "zswap",
            Kind::Zram { .. } => "zram",
            Kind::Sysctl => "sysctl",
        }
    }
}

/// The content of a state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// The process that changed the settings.
    pub pid: i32,
    pub kind: Kind,
    /// The directory of the setting files (e.g. /sys/module/zswap/parameters).
    pub dir: PathBuf,
    /// Each setting's original value, restored in this order.
    pub originals: Vec<(String, String)>,
    /// A debugfs this process mounted to read statistics, unmounted on restore.
    #[serde(default)]
    pub mounted: Option<PathBuf>,
}

/// Settings saved to a state file, restored by [`SettingsGuard::restore`]
/// or at the latest when dropped.
#[derive(Debug)]
pub struct SettingsGuard {
    saved: Mutex<Saved>,
    state_file: PathBuf,
    /// Set once everything is back and the state file is gone.
    restored: Mutex<bool>,
}

impl SettingsGuard {
    /// Reads the current value of each of `names` in `dir` and saves them
    /// to a new state file in `state_dir`, before the caller changes any.
    pub fn save(
        state_dir: &Path,
        kind: Kind,
        dir: &Path,
        names: &[&str],
    ) -> anyhow::Result<SettingsGuard> {
        let mut originals = Vec::new();
        for name in names {
            originals.push((name.to_string(), read_setting(&dir.join(name))?));
        }
        let saved = Saved {
            pid: std::process::id() as i32,
            kind,
            dir: dir.to_path_buf(),
            originals,
            mounted: None,
        };
        std::fs::create_dir_all(state_dir)
            .with_context(|| format!("creating the state directory {}", state_dir.display()))?;
        let state_file = state_dir.join(format!("{}-{}.json", saved.kind.name(), saved.pid));
        let guard = SettingsGuard {
            saved: Mutex::new(saved),
            state_file,
            restored: Mutex::new(false),
        };
        guard.write_state(true)?;
        Ok(guard)
    }

    /// The original value of `name`, as saved.
    pub fn original(&self, name: &str) -> Option<String> {
        let saved = self.lock_saved();
        saved
            .originals
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    /// Writes `value` to the setting `name`, which must be one of those
    /// saved, so that nothing is changed that would not be restored.
    pub fn set(&self, name: &str, value: &str) -> anyhow::Result<()> {
        let dir = {
            let saved = self.lock_saved();
            if !saved.originals.iter().any(|(n, _)| n == name) {
                bail!("{name} was not saved before being changed");
            }
            saved.dir.clone()
        };
        write_setting(&dir.join(name), value)
    }

    /// Records that `mountpoint` was mounted by this run, to be unmounted
    /// on restore (also after a crash, through the state file).
    pub fn note_mounted(&self, mountpoint: &Path) -> anyhow::Result<()> {
        self.lock_saved().mounted = Some(mountpoint.to_path_buf());
        self.write_state(false)
    }

    /// Puts every saved setting back, unmounts what was mounted, and
    /// deletes the state file. Every step runs; failures are reported
    /// together and the state file kept, so a later call (or the next run)
    /// tries again. Idempotent.
    pub fn restore(&self) -> Result<(), String> {
        let mut restored = self
            .restored
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if *restored {
            return Ok(());
        }
        let saved = self.lock_saved().clone();
        restore_saved(&saved)?;
        match std::fs::remove_file(&self.state_file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("deleting {}: {e}", self.state_file.display())),
        }
        *restored = true;
        Ok(())
    }

    /// The state file that holds the originals until they are restored.
    pub fn state_file(&self) -> &Path {
        &self.state_file
    }

    fn lock_saved(&self) -> std::sync::MutexGuard<'_, Saved> {
        self.saved
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_state(&self, new: bool) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(&*self.lock_saved())?;
        let path = &self.state_file;
        if new && path.exists() {
            bail!(
                "{} exists: another run of this process changed the same settings \
                 and has not restored them",
                path.display()
            );
        }
        // Written whole and renamed into place, so a crash never leaves a
        // half-written file that would hide the originals.
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
    }
}

impl Drop for SettingsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!(
                "tiermem bench: restoring {}: {e}",
                self.state_file.display()
            );
        }
    }
}

/// Restores one saved state: the kind's own steps first, then every
/// setting in order, then the unmount.
fn restore_saved(saved: &Saved) -> Result<(), String> {
    let mut errors = Vec::new();
    if let Kind::Zram { device } = &saved.kind {
        if let Err(e) = crate::kernel_swap::swapfile::swap_off_if_active(device) {
            errors.push(e);
        }
        if let Err(e) = write_setting(&saved.dir.join("reset"), "1") {
            errors.push(format!("{e:#}"));
        }
    }
    for (name, value) in &saved.originals {
        let path = saved.dir.join(name);
        let current = read_setting(&path).ok();
        if current.as_deref() == Some(value.as_str()) {
            continue;
        }
        if let Err(e) = write_setting(&path, value) {
            errors.push(format!("{e:#}"));
        }
    }
    if let Some(mountpoint) = &saved.mounted {
        if let Err(e) = unmount(mountpoint) {
            errors.push(format!("{e:#}"));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// State files in `state_dir` whose process is gone: what a killed run
/// left changed.
pub fn stale_states(state_dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::read_dir(state_dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| match read_state(p) {
            Ok(saved) => !owner_alive(saved.pid),
            // Unreadable: left for a person to look at, not guessed at.
            Err(_) => false,
        })
        .collect();
    found.sort();
    found
}

/// Restores what every stale state file in `state_dir` saved and deletes
/// the files. Returns how many; fails (after trying all) if any could not be.
pub fn restore_stale(state_dir: &Path) -> anyhow::Result<usize> {
    let mut errors = Vec::new();
    let mut restored = 0;
    for path in stale_states(state_dir) {
        let outcome = read_state(&path)
            .map_err(|e| format!("{e:#}"))
            .and_then(|saved| restore_saved(&saved))
            .and_then(|()| {
                std::fs::remove_file(&path).map_err(|e| format!("deleting {}: {e}", path.display()))
            });
        match outcome {
            Ok(()) => restored += 1,
            Err(e) => errors.push(format!("{}: {e}", path.display())),
        }
    }
    if errors.is_empty() {
        Ok(restored)
    } else {
        bail!(
            "restored {restored} saved setting(s), but: {}",
            errors.join("; ")
        )
    }
}

fn read_state(path: &Path) -> anyhow::Result<Saved> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn owner_alive(pid: i32) -> bool {
    // A file of this very process is a leftover of an earlier process with
    // the same pid only if no guard of ours owns it; guards restore their
    // own, so it is treated as live here.
    pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// The current value of a setting file: trimmed, and for a list with the
/// current choice in brackets (`lzo [lz4] zstd`), that choice.
pub fn read_setting(path: &Path) -> anyhow::Result<String> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(current_choice(&text))
}

/// `lzo [lz4] zstd` → `lz4`; anything without brackets, trimmed.
pub fn current_choice(text: &str) -> String {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix('[').and_then(|w| w.strip_suffix(']')))
        .map_or_else(|| text.trim().to_string(), str::to_string)
}

/// The choices of a list setting (`lzo [lz4] zstd` → lzo, lz4, zstd).
pub fn choices(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_start_matches('[').trim_end_matches(']').to_string())
        .collect()
}

pub fn write_setting(path: &Path, value: &str) -> anyhow::Result<()> {
    use std::io::Write;
    // O_TRUNC is a no-op on sysfs and keeps a stand-in file exact.
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    f.write_all(value.as_bytes())
        .with_context(|| format!("writing {value} to {}", path.display()))
}

/// Unmounts what a run mounted; "not mounted (any more)" is success.
pub fn unmount(at: &Path) -> anyhow::Result<()> {
    let target = CString::new(at.as_os_str().as_bytes())
        .with_context(|| format!("{} contains a NUL byte", at.display()))?;
    // SAFETY: target is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINVAL) || err.raw_os_error() == Some(libc::ENOENT) {
        return Ok(());
    }
    Err(err).with_context(|| format!("unmounting {}", at.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory standing in for /sys/module/zswap/parameters.
    fn fake_params(values: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, value) in values {
            std::fs::write(dir.path().join(name), format!("{value}\n")).unwrap();
        }
        dir
    }

    fn value(dir: &Path, name: &str) -> String {
        read_setting(&dir.join(name)).unwrap()
    }

    const ZSWAP: [(&str, &str); 3] = [
        ("enabled", "N"),
        ("compressor", "lzo"),
        ("max_pool_percent", "20"),
    ];

    #[test]
    fn settings_come_back_on_restore_and_the_state_file_goes() {
        let params = fake_params(&ZSWAP);
        let state = tempfile::tempdir().unwrap();
        let guard = SettingsGuard::save(
            state.path(),
            Kind::Zswap,
            params.path(),
            &["enabled", "compressor", "max_pool_percent"],
        )
        .unwrap();
        assert!(guard.state_file().exists());
        guard.set("compressor", "lzo-rle").unwrap();
        guard.set("max_pool_percent", "35").unwrap();
        guard.set("enabled", "Y").unwrap();
        assert_eq!(value(params.path(), "enabled"), "Y");
        assert_eq!(guard.original("compressor").as_deref(), Some("lzo"));
        guard.restore().unwrap();
        for (name, original) in ZSWAP {
            assert_eq!(value(params.path(), name), original, "{name}");
        }
        assert!(!guard.state_file().exists());
        // A second restore does nothing, even if someone changed a value since.
        std::fs::write(params.path().join("enabled"), "Y").unwrap();
        guard.restore().unwrap();
        assert_eq!(value(params.path(), "enabled"), "Y");
    }

    #[test]
    fn dropping_the_guard_restores_too() {
        let params = fake_params(&ZSWAP);
        let state = tempfile::tempdir().unwrap();
        {
            let guard = SettingsGuard::save(state.path(), Kind::Zswap, params.path(), &["enabled"])
                .unwrap();
            guard.set("enabled", "Y").unwrap();
        }
        assert_eq!(value(params.path(), "enabled"), "N");
        assert!(std::fs::read_dir(state.path()).unwrap().next().is_none());
    }

    #[test]
    fn only_saved_settings_can_be_changed() {
        let params = fake_params(&ZSWAP);
        let state = tempfile::tempdir().unwrap();
        let guard =
            SettingsGuard::save(state.path(), Kind::Zswap, params.path(), &["enabled"]).unwrap();
        let err = guard.set("compressor", "deflate").unwrap_err();
        assert!(err.to_string().contains("not saved"), "{err}");
        assert_eq!(value(params.path(), "compressor"), "lzo");
    }

    #[test]
    fn a_missing_setting_is_an_error_that_names_it() {
        let params = fake_params(&ZSWAP);
        let state = tempfile::tempdir().unwrap();
        let err = SettingsGuard::save(state.path(), Kind::Zswap, params.path(), &["nonesuch"])
            .unwrap_err();
        assert!(format!("{err:#}").contains("nonesuch"), "{err:#}");
    }

    /// A run killed outright leaves its state file; the next run restores
    /// from it. A live process's file is left alone.
    #[test]
    fn a_dead_runs_state_file_is_restored_and_a_live_ones_is_not() {
        let params = fake_params(&ZSWAP);
        let state = tempfile::tempdir().unwrap();
        let dead_pid = dead_pid();
        let saved = Saved {
            pid: dead_pid,
            kind: Kind::Zswap,
            dir: params.path().to_path_buf(),
            originals: ZSWAP
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            mounted: None,
        };
        let dead_file = state.path().join(format!("zswap-{dead_pid}.json"));
        std::fs::write(&dead_file, serde_json::to_string(&saved).unwrap()).unwrap();
        let live = Saved {
            pid: std::process::id() as i32,
            ..saved.clone()
        };
        let live_file = state.path().join("zswap-live.json");
        std::fs::write(&live_file, serde_json::to_string(&live).unwrap()).unwrap();
        for (name, v) in [
            ("enabled", "Y"),
            ("compressor", "deflate"),
            ("max_pool_percent", "50"),
        ] {
            std::fs::write(params.path().join(name), v).unwrap();
        }
        assert_eq!(stale_states(state.path()), vec![dead_file.clone()]);
        assert_eq!(restore_stale(state.path()).unwrap(), 1);
        for (name, original) in ZSWAP {
            assert_eq!(value(params.path(), name), original, "{name}");
        }
        assert!(!dead_file.exists());
        assert!(live_file.exists());
        assert_eq!(restore_stale(state.path()).unwrap(), 0);
    }

    #[test]
    fn zram_attributes_come_back_after_a_reset() {
        let sysfs = fake_params(&[
            ("comp_algorithm", "lzo [lzo-rle] lz4"),
            ("disksize", "0"),
            ("reset", ""),
        ]);
        let state = tempfile::tempdir().unwrap();
        let guard = SettingsGuard::save(
            state.path(),
            Kind::Zram {
                device: PathBuf::from("/dev/tiermem-no-such-zram"),
            },
            sysfs.path(),
            &["comp_algorithm"],
        )
        .unwrap();
        assert_eq!(guard.original("comp_algorithm").as_deref(), Some("lzo-rle"));
        guard.set("comp_algorithm", "lz4").unwrap();
        guard.restore().unwrap();
        assert_eq!(
            std::fs::read_to_string(sysfs.path().join("comp_algorithm")).unwrap(),
            "lzo-rle"
        );
        assert_eq!(
            std::fs::read_to_string(sysfs.path().join("reset")).unwrap(),
            "1"
        );
    }

    #[test]
    fn bracketed_lists_give_their_current_choice() {
        assert_eq!(current_choice("lzo [lz4] zstd\n"), "lz4");
        assert_eq!(current_choice("lzo-rle\n"), "lzo-rle");
        assert_eq!(choices("lzo [lz4] zstd\n"), vec!["lzo", "lz4", "zstd"]);
    }

    /// A pid no process has: beyond pid_max.
    fn dead_pid() -> i32 {
        let max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(4_194_304);
        max + 1
    }
}
