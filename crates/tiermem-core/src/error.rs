//! Errors of the tiermem runtime. Each one says what failed and, where the
//! user can act, how to fix it.

use std::io;
use std::path::PathBuf;

/// Everything that can go wrong when configuring or running tiermem.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A setting has a value tiermem cannot use.
    #[error("invalid {setting} '{value}': {expected}")]
    InvalidSetting {
        /// The setting's name, usually its `TIERMEM_*` variable.
        setting: &'static str,
        /// The value as given.
        value: String,
        /// The accepted form, or why the value cannot work.
        expected: String,
    },

    /// Neither the userfaultfd syscall nor /dev/userfaultfd may be used.
    #[error(
        "userfaultfd is not permitted for this process ({syscall_error}; /dev/userfaultfd: {device_error}).\n\
         tiermem needs full (not user-mode-only) userfaultfd. Fix it with one of:\n  \
         sudo sysctl -w vm.unprivileged_userfaultfd=1\n  \
         or give this user read/write access to /dev/userfaultfd (e.g. sudo setfacl -m u:$USER:rw /dev/userfaultfd)\n  \
         or run as root / with CAP_SYS_PTRACE"
    )]
    UffdNotPermitted {
        /// Why the userfaultfd system call failed.
        syscall_error: io::Error,
        /// Why /dev/userfaultfd could not be opened or used.
        device_error: io::Error,
    },

    /// The kernel lacks a userfaultfd feature tiermem relies on.
    #[error("userfaultfd on this kernel lacks {missing}; tiermem needs Linux 5.19 or newer with write-protect support")]
    UffdFeatureMissing {
        /// The feature or ioctl the kernel does not offer.
        missing: String,
    },

    /// The backing store could not be opened or prepared.
    #[error("backing store {path}: {what}: {source}")]
    Backing {
        /// The backing directory, file or device.
        path: PathBuf,
        /// What failed, in words.
        what: String,
        /// The system's error.
        #[source]
        source: io::Error,
    },

    /// A request for more memory than the backing store can ever hold.
    #[error("out of backing space: {requested} bytes requested, {available} bytes left in the backing store")]
    OutOfBackingSpace {
        /// Bytes asked for.
        requested: u64,
        /// Bytes the backing store has left.
        available: u64,
    },

    /// A system call failed at a point where no better context exists.
    #[error("{what}: {source}")]
    Os {
        /// What the runtime was doing, in words.
        what: &'static str,
        /// The system call's error.
        #[source]
        source: io::Error,
    },

    /// A pointer that tiermem did not hand out, or handed out and already freed.
    #[error("{0:#x} is not the start of a live tiermem allocation")]
    UnknownPointer(usize),

    /// The runtime is shutting down or failed to start earlier.
    #[error("tiermem is not available: {0}")]
    Unavailable(String),
}

/// A setting's value that tiermem cannot use: `expected` says what it
/// accepts, or why the value cannot work.
pub(crate) fn invalid(setting: &'static str, value: &str, expected: &str) -> Error {
    Error::InvalidSetting {
        setting,
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

impl Error {
    /// The errno that best describes this error to a C caller.
    pub fn errno(&self) -> i32 {
        match self {
            Error::InvalidSetting { .. } | Error::UnknownPointer(_) => libc::EINVAL,
            Error::UffdNotPermitted { .. } => libc::EPERM,
            Error::UffdFeatureMissing { .. } => libc::ENOSYS,
            Error::OutOfBackingSpace { .. } => libc::ENOMEM,
            Error::Backing { source, .. } | Error::Os { source, .. } => {
                source.raw_os_error().unwrap_or(libc::EIO)
            }
            Error::Unavailable(_) => libc::ENODEV,
        }
    }

    /// Whether the backing file or device is held by another tiermem
    /// process (its lock is taken), as when the parent of a forked and
    /// exec'd program holds it. A mounted device (EBUSY) is not.
    pub fn is_store_in_use(&self) -> bool {
        matches!(self, Error::Backing { source, .. }
            if source.raw_os_error() == Some(libc::EWOULDBLOCK))
    }

    pub(crate) fn os(what: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Os { what, source }
    }
}

/// The result of every fallible tiermem call.
pub type Result<T, E = Error> = std::result::Result<T, E>;
