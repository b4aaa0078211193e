//! The process-wide runtime behind the C API: started explicitly with
//! [`init`] or lazily from the environment on first use.

use std::sync::OnceLock;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

static GLOBAL: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();

/// Starts the process-wide runtime with `config`. Fails with EBUSY-like
/// `Unavailable` if it is already running.
pub fn init(config: Config) -> Result<&'static Runtime> {
    init_with_fallback(config, |_| None)
}

/// As [`init`]; if the start fails with an error for which `fallback`
/// gives another configuration, starts with that one instead.
pub fn init_with_fallback(
    config: Config,
    fallback: impl FnOnce(&Error) -> Option<Config>,
) -> Result<&'static Runtime> {
    let mut fresh = false;
    let slot = GLOBAL.get_or_init(|| {
        fresh = true;
        Runtime::new(config)
            .or_else(|e| fallback(&e).map_or(Err(e), Runtime::new))
            .map_err(|e| e.to_string())
    });
    match slot {
        Ok(rt) if fresh => Ok(rt),
        Ok(_) => Err(Error::Unavailable("tiermem is already initialized".into())),
        Err(msg) => Err(Error::Unavailable(msg.clone())),
    }
}

/// The process-wide runtime, started from `TIERMEM_*` variables if needed.
/// A failed start is remembered, and its message returned each time.
pub fn get() -> Result<&'static Runtime> {
    let slot = GLOBAL.get_or_init(|| {
        Config::from_env()
            .and_then(Runtime::new)
            .map_err(|e| e.to_string())
    });
    slot.as_ref().map_err(|msg| Error::Unavailable(msg.clone()))
}

/// The runtime if it has started, without starting it.
pub fn running() -> Option<&'static Runtime> {
    GLOBAL.get().and_then(|r| r.as_ref().ok())
}
