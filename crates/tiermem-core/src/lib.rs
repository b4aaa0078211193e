//! tiermem: a software Memory Mode for Linux.
//!
//! A bounded amount of DRAM caches a larger backing tier (an SSD file, a block
//! device). Pages of a large virtual arena are served by userfaultfd handler
//! threads: missing pages are read from the store, the evictor writes cold
//! dirty pages back and drops clean ones.
//!
//! ```no_run
//! use tiermem_core::{Config, Runtime, TieredBuf};
//! let rt = Runtime::new(Config::builder().dram_budget(64 << 20).build()?)?;
//! let mut buf = TieredBuf::new(&rt, 1 << 30)?; // 1 GiB in a 64 MiB budget
//! buf[123_456_789] = 7;
//! # Ok::<(), tiermem_core::Error>(())
//! ```

#![warn(missing_docs)]

mod budget;
mod buffer;
pub mod compress;
pub mod config;
pub mod cpuidle;
pub mod cpus;
mod encryption;
mod error;
pub mod error_policy;
mod evictor;
mod fault;
pub mod fork;
mod frames;
pub mod global;
mod integrity;
pub mod io_config;
pub mod organization;
mod owner_waits;
mod page_table;
mod pause;
mod pins;
mod policy;
pub mod preload_library;
mod ranges;
mod replaceable;
mod runtime;
mod sets;
pub mod settings;
mod shared;
mod stats;
mod store;
mod store_errors;
pub mod sys;
mod threads;
mod transparent;
pub mod units;

pub use buffer::TieredBuf;
pub use compress::{Codec, CompressSettings};
pub use config::{Config, ConfigBuilder, FaultDelivery, PolicyKind, DEFAULT_BACKING_DIR};
pub use error::{Error, Result};
pub use error_policy::{ErrorPolicy, Injection};
pub use fault::ring_buffer_bytes;
pub use io_config::{AsyncIo, IoEngine, IoSettings, PollMode};
pub use organization::{Inclusion, Organization, Preset, WritePolicy};
pub use pins::expect_async_io;
pub use runtime::{PinnedIo, Runtime};
pub use stats::{LatencySummary, Stats};
pub use store::{format_store, Label as StoreLabel};
pub use threads::set_thread_start_hook;
pub use transparent::Drained;
pub use units::{parse_duration, parse_size, SizeSpec};
