//! Counters and a fault-latency histogram, updated with relaxed atomics on
//! the fault path and readable at any time.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// log2 buckets of nanoseconds, each split in 32: a percentile is a
/// bucket's midpoint, within 1.6% of the sample, which tells 11.8 µs from
/// 12.4 µs where a target sits at 12; one relaxed add per fault, and 16 KiB
/// per histogram.
const SUB_BITS: u32 = 5;
const BUCKETS: usize = 64 << SUB_BITS;

#[derive(Default)]
pub struct Counters {
    pub faults: AtomicU64,
    pub missing_faults: AtomicU64,
    pub wp_faults: AtomicU64,
    pub zero_fills: AtomicU64,
    pub page_ins: AtomicU64,
    pub probation_hits: AtomicU64,
    pub prefetch_issued: AtomicU64,
    pub prefetch_hits: AtomicU64,
    pub prefetch_wasted: AtomicU64,
    /// Pages read with a miss on the page before them (`fault::neighbours`).
    pub neighbour_reads: AtomicU64,
    /// Of those, the ones parked to sample their use.
    pub neighbour_samples: AtomicU64,
    /// Parked neighbours the program faulted on.
    pub neighbour_used: AtomicU64,
    pub io_batches: AtomicU64,
    pub max_in_flight: AtomicU64,
    pub spin_wakeups: AtomicU64,
    pub page_outs: AtomicU64,
    pub clean_drops: AtomicU64,
    pub zero_drops: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_batches: AtomicU64,
    pub duplicate_faults: AtomicU64,
    pub discarded_behind_our_back: AtomicU64,
    pub budget_waits: AtomicU64,
    pub unexpected_present: AtomicU64,
    /// Untouched pages zero-filled ahead of a run of first touches in order.
    pub zero_fills_ahead: AtomicU64,
    pub bad_accesses: AtomicU64,
    /// Pages a miss evicted from its full set (set-associative placement).
    pub conflict_evictions: AtomicU64,
    /// Victims left in DRAM because I/O was in flight into them, or they
    /// were locked.
    pub pinned_skips: AtomicU64,
    /// Dirty victims moved out first, so the kernel could refuse pinned
    /// ones (with asynchronous I/O in the program).
    pub moved_out: AtomicU64,
    /// Written pages copied out by write-through.
    pub write_throughs: AtomicU64,
    /// Read faults installed writable because a write was predicted.
    pub predicted_writes: AtomicU64,
    /// Page reads that failed or failed their checksum (each try counts).
    pub read_errors: AtomicU64,
    /// Failed demand reads tried a second time.
    pub read_retries: AtomicU64,
    /// Pages whose bytes did not match their checksum and identity.
    pub checksum_errors: AtomicU64,
    /// Pages given up after a failed retry: their next access gets SIGBUS.
    pub poisoned_pages: AtomicU64,
    /// Read-ahead pages left in the store because their read failed.
    pub read_ahead_dropped: AtomicU64,
    /// Write requests that failed (each is retried to fresh slots).
    pub write_errors: AtomicU64,
    /// Slots a failed write left unusable; never handed out again.
    pub quarantined_slots: AtomicU64,
    /// Waits that lasted long enough to be reported on stderr.
    pub stalls: AtomicU64,
    /// Pages that entered the compressed tier (same-filled ones included).
    pub compressed_stores: AtomicU64,
    /// Of those, pages kept as one repeated word.
    pub same_filled_pages: AtomicU64,
    /// Of those, pages compressed with the dictionary.
    pub dictionary_pages: AtomicU64,
    /// Pages that saved less than a quarter, sent to the store instead.
    pub compress_rejected: AtomicU64,
    /// Pages a full pool sent to the store uncompressed because it served
    /// no hits (a first fill).
    pub compress_bypassed: AtomicU64,
    /// Compressed pages that left for the store (written, or dropped clean).
    pub compressed_writebacks: AtomicU64,
    /// Faults served by decompressing.
    pub compressed_hits: AtomicU64,
    /// Objects moved to close holes in the pool.
    pub compaction_moves: AtomicU64,
    /// Steps an adapting split took (`TIERMEM_COMPRESS_SHARE=auto`).
    pub compress_share_moves: AtomicU64,
}

pub struct LatencyHistogram {
    buckets: Box<[AtomicU64]>,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

fn bucket_of(ns: u64) -> usize {
    if ns < (1 << SUB_BITS) {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros();
    let sub = (ns >> (log - SUB_BITS)) & ((1 << SUB_BITS) - 1);
    (((log - SUB_BITS + 1) << SUB_BITS) as u64 + sub) as usize
}

/// The midpoint of a bucket's range, in nanoseconds.
fn bucket_value(b: usize) -> u64 {
    if b < (1 << SUB_BITS) {
        return b as u64;
    }
    let log = (b >> SUB_BITS) as u32 + SUB_BITS - 1;
    let sub = (b & ((1 << SUB_BITS) - 1)) as u64;
    let width = 1u64 << (log - SUB_BITS);
    (1u64 << log) + sub * width + width / 2
}

impl LatencyHistogram {
    #[inline]
    pub fn record(&self, ns: u64) {
        self.buckets[bucket_of(ns).min(BUCKETS - 1)].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
        self.max_ns.fetch_max(ns, Relaxed);
    }

    pub fn summary(&self) -> LatencySummary {
        let counts: Vec<u64> = self.buckets.iter().map(|b| b.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let pct = |q: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = ((q / 100.0) * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (b, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return bucket_value(b);
                }
            }
            0
        };
        LatencySummary {
            count: total,
            mean_ns: self.sum_ns.load(Relaxed).checked_div(total).unwrap_or(0),
            p50_ns: pct(50.0),
            p90_ns: pct(90.0),
            p99_ns: pct(99.0),
            p999_ns: pct(99.9),
            max_ns: self.max_ns.load(Relaxed),
        }
    }
}

/// Percentiles of a latency histogram, each within about 1.6% (half the
/// width of the histogram's buckets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct LatencySummary {
    /// Samples recorded.
    pub count: u64,
    /// Mean, in nanoseconds (exact, not bucketed).
    pub mean_ns: u64,
    /// Median, in nanoseconds.
    pub p50_ns: u64,
    /// 90th percentile, in nanoseconds.
    pub p90_ns: u64,
    /// 99th percentile, in nanoseconds.
    pub p99_ns: u64,
    /// 99.9th percentile, in nanoseconds.
    pub p999_ns: u64,
    /// Largest sample, in nanoseconds (exact).
    pub max_ns: u64,
}

/// A snapshot of everything the runtime counts.
#[derive(Clone, Debug, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Stats {
    /// userfaultfd faults served: missing plus write-protect.
    pub faults: u64,
    /// Faults on pages not mapped in DRAM (the rest are write-protect faults).
    pub missing_faults: u64,
    /// First writes to clean pages (dirty tracking).
    pub wp_faults: u64,
    /// First touches of never-written pages.
    pub zero_fills: u64,
    /// Pages read back from the store.
    pub page_ins: u64,
    /// Pages brought back from probation without I/O (references detected).
    pub probation_hits: u64,
    /// Pages read ahead of demand (sequential or strided streams).
    pub prefetch_issued: u64,
    /// Read-ahead pages later used (a fault found them, the stream moved
    /// past them, or they were written).
    pub prefetch_hits: u64,
    /// Read-ahead pages evicted unused.
    pub prefetch_wasted: u64,
    /// Pages read with a miss on the page before them, while misses come in
    /// adjacent pairs (objects spanning two pages); part of
    /// `prefetch_issued`. Mapped at once, so their use is not seen...
    pub neighbour_reads: u64,
    /// ...except for this sample of them, parked until the program faults.
    pub neighbour_samples: u64,
    /// Sampled neighbours the program used: `neighbour_used /
    /// neighbour_samples` estimates the share of neighbour reads used.
    pub neighbour_used: u64,
    /// io_uring submissions of page reads.
    pub io_batches: u64,
    /// Most page reads one handler had in flight at once.
    pub max_in_flight: u64,
    /// Events a fault handler found while polling between faults, each a
    /// wake-up it did not need (see `TIERMEM_IDLE_SPIN_US`).
    pub spin_wakeups: u64,
    /// Pages written to the store.
    pub page_outs: u64,
    /// Clean pages dropped without a write: their store copy was still valid.
    pub clean_drops: u64,
    /// Evicted pages found all-zero: dropped with no write and no slot.
    pub zero_drops: u64,
    /// Bytes of pages read back from the store.
    pub bytes_read: u64,
    /// Bytes of pages written to the store.
    pub bytes_written: u64,
    /// Write requests to the store, each of one or more pages.
    pub write_batches: u64,
    /// Missing faults on pages another fault had already installed.
    pub duplicate_faults: u64,
    /// Base pages the program discarded with its own `madvise` system call
    /// (Go's runtime does), which read zeros again when next touched.
    pub discarded_behind_our_back: u64,
    /// Faults that had to wait for the evictor to free DRAM.
    pub budget_waits: u64,
    /// Installs that found the page already mapped by someone else, whose
    /// page was kept.
    pub unexpected_present: u64,
    /// Untouched pages zero-filled ahead of a run of first touches in order.
    pub zero_fills_ahead: u64,
    /// Accesses to tiered addresses outside any live allocation.
    pub bad_accesses: u64,
    /// Pages a miss evicted from its full set (set-associative placement).
    pub conflict_evictions: u64,
    /// Victims left in DRAM because I/O was in flight into them, or they
    /// were locked.
    pub pinned_skips: u64,
    /// Dirty victims moved out first, so the kernel could refuse pinned
    /// ones (with asynchronous I/O in the program).
    pub moved_out: u64,
    /// Pages locked in DRAM now (mlock).
    pub locked_bytes: u64,
    /// Written pages copied to the store by write-through.
    pub write_throughs: u64,
    /// Read faults installed writable because a write was predicted.
    pub predicted_writes: u64,
    /// Page reads that failed or failed their checksum (each try counts).
    pub read_errors: u64,
    /// Failed demand reads tried a second time.
    pub read_retries: u64,
    /// Pages whose bytes did not match their checksum and identity.
    pub checksum_errors: u64,
    /// Pages given up after a failed retry: their next access gets SIGBUS.
    pub poisoned_pages: u64,
    /// Read-ahead pages left in the store because their read failed.
    pub read_ahead_dropped: u64,
    /// Write requests that failed (each is retried to fresh slots).
    pub write_errors: u64,
    /// Slots a failed write left unusable; never handed out again.
    pub quarantined_slots: u64,
    /// Waits that lasted long enough to be reported on stderr.
    pub stalls: u64,
    /// DRAM held by tiered pages now, in bytes.
    pub resident_bytes: u64,
    /// Most DRAM tiered pages have held at once, in bytes.
    pub peak_resident_bytes: u64,
    /// The DRAM budget now, in bytes.
    pub budget_bytes: u64,
    /// Live allocations, in bytes rounded up to whole pages.
    pub allocated_bytes: u64,
    /// Bytes the backing file occupies on disk.
    pub backing_bytes: u64,
    /// Slots holding pages right now, in bytes.
    pub stored_bytes: u64,
    /// Of those, slots freed here but kept because forked children may
    /// still read them, in bytes.
    pub parked_bytes: u64,
    /// DRAM the runtime uses for itself (page table, bitmaps, buffers).
    pub metadata_bytes: u64,
    /// The unit of paging, in bytes.
    pub page_size: u64,
    /// Time from reading a fault to resolving it, as the handler sees it.
    pub fault_latency: LatencySummary,
    /// Demand page-ins only, from reading the fault to installing the page.
    pub page_in_latency: LatencySummary,
    /// The device read inside a demand page-in (submission to completion).
    pub read_latency: LatencySummary,
    /// Most the store can hold, in bytes: its slots times the page size.
    pub backing_capacity_bytes: u64,
    /// The backing file or block device.
    pub backing_path: String,
    /// The store is a block device, not a file.
    pub backing_is_block_device: bool,
    /// The replacement policy's name.
    pub policy: &'static str,
    /// Associativity, prefetch, write policy and inclusion, in words.
    pub organization: String,
    /// How faults read pages.
    pub io_engine: &'static str,
    /// How the evictor writes pages.
    pub write_engine: &'static str,
    /// Store I/O bypasses the page cache (O_DIRECT, where the filesystem
    /// honours it).
    pub direct_io: bool,
    /// Pages go to the store encrypted (AES-256-GCM, `TIERMEM_ENCRYPT`).
    pub encrypted: bool,
    /// The compressed tier's codec ("off" or "lz4").
    pub compression: &'static str,
    /// Pages held compressed in DRAM now.
    pub compressed_pages: u64,
    /// Bytes their objects take (headers included).
    pub compressed_bytes: u64,
    /// DRAM the compressed tier holds (the pool's committed segments and
    /// the dictionary), part of `resident_bytes`.
    pub pool_bytes: u64,
    /// Of `pool_bytes`, the dictionaries': 0 until one is gathered, 64 KiB
    /// per dictionary that compressions or pooled pages use.
    pub compress_dictionary_bytes: u64,
    /// Dictionaries gathered: the first, and each one that replaced a
    /// dictionary that stopped paying.
    pub dictionaries_gathered: u64,
    /// Pages that entered the compressed tier, same-filled ones included.
    pub compressed_stores: u64,
    /// Of those, pages kept as one repeated word.
    pub same_filled_pages: u64,
    /// Of those, pages compressed with the dictionary.
    pub dictionary_pages: u64,
    /// Pages that saved less than a quarter, sent to the store instead.
    pub compress_rejected: u64,
    /// Pages a full pool sent to the store uncompressed because it served
    /// no hits (a first fill).
    pub compress_bypassed: u64,
    /// Compressed pages that left for the store (written, or dropped clean).
    pub compressed_writebacks: u64,
    /// Faults served by decompressing.
    pub compressed_hits: u64,
    /// Objects moved to close holes in the pool.
    pub compaction_moves: u64,
    /// The pool's share of the budget now, in percent (set, or adapted).
    pub compress_share_percent: u32,
    /// Steps an adapting split took.
    pub compress_share_moves: u64,
    /// 2 MiB regions of `MADV_HUGEPAGE` memory kept resident as the kernel
    /// keeps a huge page: kept now.
    pub huge_regions_kept: u64,
    /// ... kept since the start (each time a region filled).
    pub huge_regions_formed: u64,
    /// ... shown in use by a fault after they were kept (then shielded).
    pub huge_regions_proven: u64,
    /// ... given up because a check found them unused.
    pub huge_regions_dropped: u64,
    /// ... given up to make room for newer ones or for a smaller budget.
    pub huge_regions_displaced: u64,
    /// Faults served from the compressed tier, from reading the fault to
    /// installing the page.
    pub compressed_hit_latency: LatencySummary,
}

impl Stats {
    /// Bytes of pages held compressed per byte of pool DRAM (0 when the
    /// pool is empty): what zswap reports as its compression ratio.
    pub fn compression_ratio(&self) -> f64 {
        if self.pool_bytes == 0 {
            return 0.0;
        }
        (self.compressed_pages * self.page_size) as f64 / self.pool_bytes as f64
    }
}

impl Counters {
    pub fn max(counter: &AtomicU64, n: u64) {
        counter.fetch_max(n, Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }

    pub fn fill(&self, s: &mut Stats) {
        s.faults = self.faults.load(Relaxed);
        s.missing_faults = self.missing_faults.load(Relaxed);
        s.wp_faults = self.wp_faults.load(Relaxed);
        s.zero_fills = self.zero_fills.load(Relaxed);
        s.page_ins = self.page_ins.load(Relaxed);
        s.probation_hits = self.probation_hits.load(Relaxed);
        s.prefetch_issued = self.prefetch_issued.load(Relaxed);
        s.prefetch_hits = self.prefetch_hits.load(Relaxed);
        s.prefetch_wasted = self.prefetch_wasted.load(Relaxed);
        s.neighbour_reads = self.neighbour_reads.load(Relaxed);
        s.neighbour_samples = self.neighbour_samples.load(Relaxed);
        s.neighbour_used = self.neighbour_used.load(Relaxed);
        s.io_batches = self.io_batches.load(Relaxed);
        s.max_in_flight = self.max_in_flight.load(Relaxed);
        s.spin_wakeups = self.spin_wakeups.load(Relaxed);
        s.page_outs = self.page_outs.load(Relaxed);
        s.clean_drops = self.clean_drops.load(Relaxed);
        s.zero_drops = self.zero_drops.load(Relaxed);
        s.bytes_read = self.bytes_read.load(Relaxed);
        s.bytes_written = self.bytes_written.load(Relaxed);
        s.write_batches = self.write_batches.load(Relaxed);
        s.duplicate_faults = self.duplicate_faults.load(Relaxed);
        s.discarded_behind_our_back = self.discarded_behind_our_back.load(Relaxed);
        s.budget_waits = self.budget_waits.load(Relaxed);
        s.unexpected_present = self.unexpected_present.load(Relaxed);
        s.zero_fills_ahead = self.zero_fills_ahead.load(Relaxed);
        s.bad_accesses = self.bad_accesses.load(Relaxed);
        s.conflict_evictions = self.conflict_evictions.load(Relaxed);
        s.pinned_skips = self.pinned_skips.load(Relaxed);
        s.moved_out = self.moved_out.load(Relaxed);
        s.write_throughs = self.write_throughs.load(Relaxed);
        s.predicted_writes = self.predicted_writes.load(Relaxed);
        s.read_errors = self.read_errors.load(Relaxed);
        s.read_retries = self.read_retries.load(Relaxed);
        s.compressed_stores = self.compressed_stores.load(Relaxed);
        s.same_filled_pages = self.same_filled_pages.load(Relaxed);
        s.dictionary_pages = self.dictionary_pages.load(Relaxed);
        s.compress_rejected = self.compress_rejected.load(Relaxed);
        s.compress_bypassed = self.compress_bypassed.load(Relaxed);
        s.compressed_writebacks = self.compressed_writebacks.load(Relaxed);
        s.compressed_hits = self.compressed_hits.load(Relaxed);
        s.compaction_moves = self.compaction_moves.load(Relaxed);
        s.compress_share_moves = self.compress_share_moves.load(Relaxed);
        s.checksum_errors = self.checksum_errors.load(Relaxed);
        s.poisoned_pages = self.poisoned_pages.load(Relaxed);
        s.read_ahead_dropped = self.read_ahead_dropped.load(Relaxed);
        s.write_errors = self.write_errors.load(Relaxed);
        s.quarantined_slots = self.quarantined_slots.load(Relaxed);
        s.stalls = self.stalls.load(Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        let samples = [
            0u64, 1, 3, 4, 5, 7, 8, 31, 32, 33, 63, 64, 100, 1000, 55_000,
        ];
        for ns in samples.into_iter().chain([1 << 40, u64::MAX]) {
            let b = bucket_of(ns);
            assert!(b >= last);
            last = b;
            if (8..1 << 40).contains(&ns) {
                let v = bucket_value(b) as f64;
                assert!(
                    (v - ns as f64).abs() / (ns as f64) <= 1.0 / 64.0,
                    "{ns} -> {v}"
                );
            }
        }
    }

    #[test]
    fn percentiles_of_a_bimodal_distribution() {
        let h = LatencyHistogram::default();
        for _ in 0..90 {
            h.record(100);
        }
        for _ in 0..10 {
            h.record(60_000);
        }
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert!((80..=120).contains(&s.p50_ns), "{s:?}");
        assert!((50_000..=70_000).contains(&s.p99_ns), "{s:?}");
        assert_eq!(s.max_ns, 60_000);
    }
}
