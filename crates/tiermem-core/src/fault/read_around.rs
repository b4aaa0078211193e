//! Read-around in eviction order: a miss also reads the stored pages whose
//! slots sit next to its own, while such pages turn out to be used.
//!
//! The evictor hands out slots in ascending runs (`store::slots`), so pages
//! in neighbouring slots left DRAM at about the same time. What a program
//! touched together it often touches together again, in whatever order its
//! addresses lie: a guest walking its memory pass after pass, the objects
//! of one request spread over a heap. Linux's swap does the same on a swap
//! device it takes for rotational, as this machine's virtio disk is: it
//! reads the aligned block of 2^`vm.page-cluster` slots around a faulting
//! one into its swap cache, where a later touch costs a minor fault.
//!
//! Here the block is [`CLUSTER`] slots. Its other stored pages go in the
//! same request as the miss, and wait unmapped in probation
//! ([`park_read_around`]): a touch is a fault served from DRAM, and one
//! never touched leaves unwritten (its slot still holds it), having cost no
//! install. Whether to read around is learnt from those pages:
//! - of every [`EPOCH`] pages read around and resolved (touched, or
//!   evicted untouched), read-around turns on when half were used, and
//!   stays on while a quarter are;
//! - while off, one miss in [`PROBE`] reads around anyway, so that a
//!   program whose neighbours start to pay is seen within a few thousand
//!   misses, at the price of one larger read in 64.
//!
//! The pages wait in probation only, a quarter of the budget, where Linux
//! keeps its read-around pages as long as any other. So they pay where a
//! program comes back to its pages in the order it left them (a loop over
//! more than the budget: nearly all used), not where the order is drawn
//! anew each time: a guest walking its memory in a new random order each
//! pass used 17% of them (`tiermem bench-vm`, Silver), and uniform random
//! pages use them about as often as probation hits any page, a few percent.
//!
//! The io_uring handlers read around (the default engine); the pread
//! fallback and signal delivery read only the faulting page.
//!
//! Everything here is a relaxed atomic: the counts steer a heuristic, and
//! a count lost in a race moves it by one part in an epoch.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};

use super::markers::park;
use super::page_read::PageRead;
use super::resolve::claim_for_prefetch;
use crate::page_table::{Kind, PageState};
use crate::shared::Shared;
use crate::stats::Counters;

/// Slots per read-around block: Linux's default `vm.page-cluster` of 3.
pub const CLUSTER: u64 = 8;
/// Read-around pages resolved per decision.
const EPOCH: u32 = 256;
/// While off, one miss in this many reads around as a probe.
const PROBE: u32 = 64;

/// Whether read-around pays now, one per runtime.
#[derive(Default)]
pub struct ReadAround {
    misses: AtomicU32,
    resolved: AtomicU32,
    used: AtomicU32,
    on: AtomicBool,
}

impl ReadAround {
    /// A miss no stream took: whether to read around it.
    pub fn on_miss(&self) -> bool {
        if self.on.load(Relaxed) {
            return true;
        }
        self.misses.fetch_add(1, Relaxed).is_multiple_of(PROBE)
    }

    /// A page read around was touched before it left DRAM.
    pub fn on_used(&self) {
        self.used.fetch_add(1, Relaxed);
        self.resolve();
    }

    /// A page read around left DRAM untouched.
    pub fn on_wasted(&self) {
        self.resolve();
    }

    #[cfg(test)]
    fn is_on(&self) -> bool {
        self.on.load(Relaxed)
    }

    fn resolve(&self) {
        let position = self.resolved.fetch_add(1, Relaxed) + 1;
        // Only the page that completes an epoch decides (as in
        // `neighbours`): the subtraction keeps a count carried past the
        // end meanwhile.
        if !position.is_multiple_of(EPOCH) {
            return;
        }
        self.resolved.fetch_sub(EPOCH, Relaxed);
        let used = self.used.swap(0, Relaxed);
        // Hysteresis: a share near the threshold does not flip every epoch.
        let threshold = if self.on.load(Relaxed) {
            EPOCH / 4
        } else {
            EPOCH / 2
        };
        self.on.store(used >= threshold, Relaxed);
    }
}

/// The aligned block of slots around `slot`.
pub fn cluster(slot: u64) -> Range<u64> {
    let start = slot & !(CLUSTER - 1);
    start..start + CLUSTER
}

/// Claims the stored pages of the block around `demand`'s slot, if
/// read-around is on (or probing) for this miss: each is a page whose slot
/// there is still its own. Returns them in slot order, without `demand`.
pub(crate) fn claim_around(rt: &Shared, demand: &PageRead) -> Vec<PageRead> {
    if !rt.read_around.on_miss() {
        return Vec::new();
    }
    let slots = rt.slots();
    let mut reads = Vec::new();
    for slot in cluster(demand.slot).filter(|&s| s != demand.slot) {
        let Some(page) = slots.owner(slot) else {
            continue;
        };
        let state = rt.table.load(page);
        if state.kind() != Kind::Stored || state.slot() != Some(slot) {
            continue;
        }
        let Some(mut read) = claim_for_prefetch(rt, page) else {
            continue;
        };
        read.around = true;
        reads.push(read);
    }
    Counters::add(&rt.counters.read_around_reads, reads.len() as u64);
    reads
}

/// Parks a page read around a miss, its read completed into `buf`: it
/// joins probation unmapped, marked as read around, and the evictor's
/// probation queue takes it in. False if no frame is free: then install it.
pub(crate) fn park_read_around(rt: &Shared, read: &PageRead, buf: *const u8) -> bool {
    let parked = park(rt, read, buf, PageState::as_read_around);
    if parked {
        rt.probation_arrivals.push(read.page);
    }
    parked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_is_the_aligned_block_of_eight_slots() {
        assert_eq!(cluster(0), 0..8);
        assert_eq!(cluster(13), 8..16);
        assert_eq!(cluster(15), 8..16);
        assert_eq!(cluster(16), 16..24);
    }

    fn epochs(r: &ReadAround, epochs: u32, used_per_epoch: u32) {
        for _ in 0..epochs {
            for i in 0..EPOCH {
                if i < used_per_epoch {
                    r.on_used();
                } else {
                    r.on_wasted();
                }
            }
        }
    }

    #[test]
    fn it_probes_while_off_and_reads_around_every_miss_while_on() {
        let r = ReadAround::default();
        let probes = (0..PROBE * 4).filter(|_| r.on_miss()).count();
        assert_eq!(probes, 4);
        epochs(&r, 1, EPOCH * 3 / 4);
        assert!(r.is_on());
        assert!((0..100).all(|_| r.on_miss()));
    }

    #[test]
    fn it_turns_on_at_half_used_and_off_below_a_quarter() {
        let r = ReadAround::default();
        epochs(&r, 3, EPOCH / 2 - 1);
        assert!(!r.is_on(), "just under half");
        epochs(&r, 1, EPOCH / 2);
        assert!(r.is_on());
        epochs(&r, 3, EPOCH / 4);
        assert!(r.is_on(), "a quarter keeps it on");
        epochs(&r, 1, EPOCH / 4 - 1);
        assert!(!r.is_on());
    }

    #[test]
    fn pages_never_touched_keep_it_off() {
        let r = ReadAround::default();
        epochs(&r, 8, 0);
        assert!(!r.is_on());
    }
}
