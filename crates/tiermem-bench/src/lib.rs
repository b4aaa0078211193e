//! `tiermem bench`: a pmbench-style paging benchmark.
//!
//! The same workload runs in separate worker processes, one per mode (plain
//! DRAM, tiermem, kernel swap in a memory cgroup), and the results are shown
//! side by side with ratios and each mode's hit ratio from its own miss
//! counters. Besides the pattern workload there is a scan-resistance
//! workload. Every page is stamped and verified at the end.

pub mod cgroup;
pub mod compressed;
pub mod device_limit;
pub mod device_ref;
pub mod hit_ratio;
pub mod kernel_swap;
mod mix;
pub mod page_data;
pub mod page_text;
pub mod pattern;
pub mod plot;
pub mod redis_bench;
pub mod report;
pub mod result;
pub mod runner;
pub mod saved_settings;
pub mod scan_resistance;
pub mod swap_readahead;
pub mod vm;
pub mod worker;
pub mod zram;
pub mod zswap;
