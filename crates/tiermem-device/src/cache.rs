//! Where saved reports live: one JSON file per device number under
//! `$XDG_CACHE_HOME/tiermem/` (else `~/.cache/tiermem/`), named
//! `device-<major>-<minor>.json` after the st_dev of the filesystem holding
//! a path (st_rdev for a block device path).

use std::env;
use std::path::{Path, PathBuf};

use crate::identity::dev_of;
use crate::report::DeviceReport;

/// The cache directory: `$XDG_CACHE_HOME/tiermem`, else `$HOME/.cache/tiermem`,
/// else `/var/tmp/tiermem-cache`.
pub fn cache_dir() -> PathBuf {
    let abs = |v: Option<std::ffi::OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(x) = abs(env::var_os("XDG_CACHE_HOME")) {
        return x.join("tiermem");
    }
    if let Some(h) = abs(env::var_os("HOME")) {
        return h.join(".cache").join("tiermem");
    }
    PathBuf::from("/var/tmp/tiermem-cache")
}

/// Cache file for the device holding `path`. `path` need not exist yet
/// (its nearest existing ancestor decides). If even that fails, the name is
/// `device-unknown.json`.
pub fn cache_path_for(path: &Path) -> PathBuf {
    let name = match dev_of(path) {
        Ok((major, minor)) => format!("device-{major}-{minor}.json"),
        Err(_) => "device-unknown.json".to_string(),
    };
    cache_dir().join(name)
}

/// The saved report for the device holding `path`, if there is one and it
/// really is for that device number.
pub fn cached_for(path: &Path) -> Option<DeviceReport> {
    let (major, minor) = dev_of(path).ok()?;
    let r = DeviceReport::load(&cache_path_for(path)).ok()?;
    (r.device.major == major && r.device.minor == minor).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_round_trip_via_xdg() {
        let dir = tempfile::tempdir().unwrap();
        // Only this test touches XDG_CACHE_HOME in this binary.
        env::set_var("XDG_CACHE_HOME", dir.path());
        let target = Path::new("/var/tmp/not-created-yet/backing.img");
        let p = cache_path_for(target);
        assert!(p.starts_with(dir.path().join("tiermem")), "{}", p.display());
        let (major, minor) = dev_of(target).unwrap();
        assert!(p.ends_with(format!("device-{major}-{minor}.json")));
        assert!(cached_for(target).is_none());

        let mut r = crate::report::tests::sample();
        r.device.major = major;
        r.device.minor = minor;
        r.save(&p).unwrap();
        assert_eq!(cached_for(target), Some(r.clone()));

        // A report for another device number under this name is ignored.
        r.device.minor = minor.wrapping_add(1);
        r.save(&p).unwrap();
        assert!(cached_for(target).is_none());
        env::remove_var("XDG_CACHE_HOME");
    }
}
