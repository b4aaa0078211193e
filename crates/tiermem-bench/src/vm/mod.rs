//! `tiermem bench-vm`: real guests under memory overcommit, by class.
//!
//! A Gold guest has all of its RAM in DRAM, a Silver one half and a Bronze
//! one a quarter; the rest lives on the backing device. Each class boots
//! under tiermem (QEMU with libtiermem.so preloaded, its DRAM budget the
//! class's share) and under kernel swap (QEMU in a memory cgroup limited
//! to the same DRAM, a swapfile on the same filesystem), one guest at a
//! time, the mode order alternating from class to class. Inside each
//! guest a static walker (`walker.c`) stamps its memory and checks every
//! byte of every page on every pass, in a new random permutation each
//! pass (`shuffle`), the same one every pass (`loop`), a constant stride
//! a prefetcher can follow (`stride`), or pages drawn at random with
//! replacement (`uniform`).
//!
//! - [`initramfs`]: the kernel and the initramfs, built at run time;
//! - [`guest`]: one QEMU run, its console and its resident memory;
//! - [`plan`]: the classes, the accelerator and the settings;
//! - [`classes`]: the run of each class under each mode, and the live
//!   class change;
//! - [`outcome`]: what was measured;
//! - [`report`]: the table, the targets and the JSON.

mod classes;
pub mod guest;
pub mod initramfs;
mod outcome;
mod plan;
mod report;

pub use classes::run;
pub use plan::{AccelChoice, Class, Settings};
