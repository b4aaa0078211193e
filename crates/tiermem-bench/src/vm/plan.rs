//! What `tiermem bench-vm` is asked to run: the classes of service, the
//! accelerator and the settings.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use super::guest::{GuestRam, Order};
use crate::result::Mode;

/// A class of service: the share of guest RAM kept in DRAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    /// All of guest RAM in DRAM.
    Gold,
    /// Half.
    Silver,
    /// A quarter.
    Bronze,
}

impl Class {
    /// Every class, in the order they run.
    pub const ALL: [Class; 3] = [Class::Gold, Class::Silver, Class::Bronze];

    /// The class's name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Gold => "gold",
            Class::Silver => "silver",
            Class::Bronze => "bronze",
        }
    }

    /// The DRAM budget of a guest with `guest_mem` bytes of RAM.
    pub fn budget(self, guest_mem: u64) -> u64 {
        match self {
            Class::Gold => guest_mem,
            Class::Silver => guest_mem / 2,
            Class::Bronze => guest_mem / 4,
        }
    }

    /// The class named `name`.
    pub fn parse(name: &str) -> Result<Class, String> {
        Class::ALL
            .into_iter()
            .find(|c| c.name() == name)
            .ok_or_else(|| format!("unknown class `{name}` (expected gold, silver or bronze)"))
    }
}

/// Which accelerator to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccelChoice {
    /// KVM if a probe guest boots with it, else TCG.
    Auto,
    /// KVM, or fail.
    Kvm,
    /// TCG.
    Tcg,
}

/// What `tiermem bench-vm` runs.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Guest RAM of every guest.
    pub guest_mem: u64,
    /// Memory the in-guest walker owns.
    pub walker_mem: u64,
    /// Checking passes after the stamping one.
    pub passes: u32,
    /// The walker's order of visits.
    pub order: Order,
    /// Where QEMU keeps guest RAM.
    pub ram: GuestRam,
    /// Classes, in order.
    pub classes: Vec<Class>,
    /// `Mode::Tiermem` and/or `Mode::KernelSwap`.
    pub modes: Vec<Mode>,
    /// KVM, TCG or the first that works.
    pub accel: AccelChoice,
    /// The guest kernel (default: the newest /boot/vmlinuz-*).
    pub kernel: Option<PathBuf>,
    /// The QEMU binary.
    pub qemu: PathBuf,
    /// Backing store directory (tiermem's file, kernel swap's swapfile).
    pub backing: PathBuf,
    /// libtiermem.so, for tiermem mode.
    pub library: Option<PathBuf>,
    /// The tiermem binary, whose `ctl` changes a class live.
    pub tiermem: PathBuf,
    /// Also run the live Bronze → Gold change.
    pub live_change: bool,
    /// Longest a guest may run.
    pub timeout: Duration,
    /// JSON on stdout instead of the table.
    pub json: bool,
}
