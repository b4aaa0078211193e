//! Set-associative placement (`TIERMEM_ASSOCIATIVITY` = N > 0).
//!
//! The budget is split into `sets` sets of `ways` pages. Page `p` may only
//! live in set `p mod sets`: a miss in a full set evicts one page of that
//! set, whatever the rest of DRAM holds. Within a set, the way to replace
//! goes round in order, so the set's oldest page leaves first (FIFO).
//!
//! Every page that holds DRAM (`Resident`, `Probation`, or owned) has an
//! entry in its set; entries of pages that left DRAM some other way (freed,
//! discarded) are stale and count as empty. A page moves from `Zero` or
//! `Stored` to `Loading` only here, under its set's lock, so a stale entry
//! cannot come back to life behind the lock's back. The lock is per set and
//! held for a few loads and stores, never across I/O.
//!
//! **Victim buffer.** A hardware cache serves one instruction a line at a
//! time; a pager serves it a page at a time, and an instruction that needs
//! two pages of one set at once (`rep movsb` from one buffer to another a
//! multiple of the sets' span away) would never complete in a direct-mapped
//! cache: each page's fault evicts the other. So when two pages have
//! evicted each other in turn moments ago and the first comes back for the
//! second again, it goes to a small fully associative victim buffer
//! instead (as in Jouppi's victim caches), which evicts its own oldest page
//! when full. One return alone is an ordinary conflict miss, which a
//! program survives and a direct-mapped cache must show: A evicts B, B
//! evicts A, and only the third fault of the round, A's, is caught.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::page_table::{Kind, PageNo, PageState, PageTable};
use crate::sys::now_ns;

const LOCKED: u32 = 1 << 31;
/// Two conflicts between the same two pages, in turn, this soon after each
/// other and followed by a third, are one instruction needing both pages,
/// not a program's access pattern: a retried instruction faults again
/// within a fault's round trip.
const PING_PONG_NS: u64 = 1_000_000;

pub(crate) struct SetMap {
    sets: u64,
    ways: u32,
    /// `page + 1` per way (0: empty), `ways` entries per set.
    entries: Box<[AtomicU32]>,
    /// Per set: the lock bit and the next way to replace.
    heads: Box<[AtomicU32]>,
    /// Per set: its last two conflicts.
    conflicts: Box<[ConflictHistory]>,
    /// Pages resident outside the sets, oldest first. Its lock is taken
    /// only when a ping-pong is caught, never on an ordinary miss.
    victims: Mutex<VecDeque<PageNo>>,
    victim_capacity: usize,
}

/// The outcome of placing a page that missed.
pub(crate) enum Placement {
    /// The page is `Loading` and owns a way. If a victim had to go, the
    /// caller owns it (`Evicting`, with its state before) and must evict it.
    Placed(Option<(PageNo, PageState)>),
    /// The page changed under us; look at it again.
    Changed,
    /// The set's victim is busy; try again shortly.
    Busy,
}

impl SetMap {
    pub fn new(sets: u64, ways: u32, victims: u64) -> SetMap {
        let atomics = |n: u64| (0..n).map(|_| AtomicU32::new(0)).collect();
        SetMap {
            sets,
            ways,
            entries: atomics(sets * ways as u64),
            heads: atomics(sets),
            conflicts: (0..sets).map(|_| ConflictHistory::default()).collect(),
            victims: Mutex::new(VecDeque::with_capacity(victims as usize)),
            victim_capacity: victims as usize,
        }
    }

    /// Pages the sets and the victim buffer can hold at once.
    pub fn capacity(&self) -> u64 {
        self.sets * self.ways as u64 + self.victim_capacity as u64
    }

    /// Claims `page` (seen in `state`, `Zero` or `Stored`) for loading and
    /// gives it a way of its set.
    pub fn place(
        &self,
        table: &PageTable,
        page: PageNo,
        state: PageState,
        pinned: &dyn Fn(PageNo) -> bool,
    ) -> Placement {
        let set = page as u64 % self.sets;
        let _lock = SetLock::take(&self.heads[set as usize]);
        let first = (set * self.ways as u64) as usize;
        let ways = &self.entries[first..first + self.ways as usize];
        if let Some(way) = free_way(ways, table, page) {
            if !table.transition(page, state, state.with_kind(Kind::Loading)) {
                return Placement::Changed;
            }
            ways[way].store(page + 1, Ordering::Relaxed);
            return Placement::Placed(None);
        }
        let head = &self.heads[set as usize];
        let way = (head.load(Ordering::Relaxed) & !LOCKED) as usize;
        let victim = ways[way].load(Ordering::Relaxed) - 1;
        if self.is_ping_pong(set, page, victim) {
            return self.place_in_victim_buffer(table, page, state);
        }
        let Some(victim_state) = own_victim(table, victim) else {
            return Placement::Busy;
        };
        if victim_state.kind() == Kind::Resident && pinned(victim) {
            // Under I/O or locked: the set stays as it is, and the fault
            // waits for the pin to end.
            table.finish(victim, victim_state);
            return Placement::Busy;
        }
        if !table.transition(page, state, state.with_kind(Kind::Loading)) {
            table.finish(victim, victim_state);
            return Placement::Changed;
        }
        ways[way].store(page + 1, Ordering::Relaxed);
        let next = (way as u32 + 1) % self.ways;
        head.store(next | LOCKED, Ordering::Relaxed);
        self.conflicts[set as usize].record(victim, page);
        Placement::Placed(Some((victim, victim_state)))
    }

    /// Whether `page` would evict `victim` a second time in a row, moments
    /// after `victim` evicted it.
    fn is_ping_pong(&self, set: u64, page: PageNo, victim: PageNo) -> bool {
        let history = &self.conflicts[set as usize];
        history.last.matches(page, victim) && history.before.matches(victim, page)
    }

    /// Claims `page` into the victim buffer, making room by evicting the
    /// buffer's oldest page (which the caller then owns) if it is full.
    fn place_in_victim_buffer(
        &self,
        table: &PageTable,
        page: PageNo,
        state: PageState,
    ) -> Placement {
        let mut victims = self.victims.lock().unwrap_or_else(|p| p.into_inner());
        let mut evict = None;
        while victims.len() >= self.victim_capacity {
            let Some(&oldest) = victims.front() else {
                break;
            };
            if !holds_dram(table.load(oldest)) {
                victims.pop_front(); // left DRAM some other way
                continue;
            }
            let Some(oldest_state) = own_victim(table, oldest) else {
                return Placement::Busy;
            };
            victims.pop_front();
            evict = Some((oldest, oldest_state));
            break;
        }
        if !table.transition(page, state, state.with_kind(Kind::Loading)) {
            if let Some((oldest, oldest_state)) = evict {
                table.finish(oldest, oldest_state);
                victims.push_front(oldest);
            }
            return Placement::Changed;
        }
        victims.push_back(page);
        Placement::Placed(evict)
    }
}

/// A set's last two conflicts, written under the set's lock.
#[derive(Default)]
struct ConflictHistory {
    last: Conflict,
    before: Conflict,
}

impl ConflictHistory {
    fn record(&self, evicted: PageNo, evictor: PageNo) {
        self.before.copy_from(&self.last);
        self.last.set(evicted, evictor);
    }
}

/// One conflict: `(evicted + 1) << 32 | (evictor + 1)` (0: none), and when.
#[derive(Default)]
struct Conflict {
    pair: AtomicU64,
    at_ns: AtomicU64,
}

impl Conflict {
    fn set(&self, evicted: PageNo, evictor: PageNo) {
        self.pair.store(pair(evicted, evictor), Ordering::Relaxed);
        self.at_ns.store(now_ns(), Ordering::Relaxed);
    }

    fn copy_from(&self, other: &Conflict) {
        self.pair
            .store(other.pair.load(Ordering::Relaxed), Ordering::Relaxed);
        self.at_ns
            .store(other.at_ns.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Whether `evictor` evicted `evicted` within the last `PING_PONG_NS`.
    fn matches(&self, evicted: PageNo, evictor: PageNo) -> bool {
        self.pair.load(Ordering::Relaxed) == pair(evicted, evictor)
            && now_ns().saturating_sub(self.at_ns.load(Ordering::Relaxed)) < PING_PONG_NS
    }
}

fn pair(evicted: PageNo, evictor: PageNo) -> u64 {
    (evicted as u64 + 1) << 32 | (evictor as u64 + 1)
}

/// The way `page` already has (a stale entry of its own), else an empty or
/// stale one.
fn free_way(ways: &[AtomicU32], table: &PageTable, page: PageNo) -> Option<usize> {
    let entry = |w: &AtomicU32| w.load(Ordering::Relaxed);
    if let Some(own) = ways.iter().position(|w| entry(w) == page + 1) {
        return Some(own);
    }
    ways.iter()
        .position(|w| entry(w) == 0 || !holds_dram(table.load(entry(w) - 1)))
}

fn holds_dram(state: PageState) -> bool {
    matches!(
        state.kind(),
        Kind::Resident | Kind::Probation | Kind::Loading | Kind::Evicting
    )
}

/// Takes over a victim that is in DRAM and nobody else's right now.
fn own_victim(table: &PageTable, victim: PageNo) -> Option<PageState> {
    loop {
        let s = table.load(victim);
        if !matches!(s.kind(), Kind::Resident | Kind::Probation) {
            return None;
        }
        if table.transition(victim, s, s.with_kind(Kind::Evicting)) {
            return Some(s);
        }
    }
}

/// A set's spin lock (bit 31 of its head word), released on drop.
struct SetLock<'a>(&'a AtomicU32);

impl<'a> SetLock<'a> {
    fn take(head: &'a AtomicU32) -> SetLock<'a> {
        let mut spins = 0u32;
        loop {
            let cur = head.load(Ordering::Relaxed);
            if cur & LOCKED == 0
                && head
                    .compare_exchange_weak(cur, cur | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return SetLock(head);
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

impl Drop for SetLock<'_> {
    fn drop(&mut self) {
        self.0.fetch_and(!LOCKED, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(table: &PageTable, page: PageNo) -> PageState {
        let s = PageState::FREE
            .with_kind(Kind::Stored)
            .with_slot(Some(page as u64));
        table.update_unchecked(page, |_| s);
        s
    }

    /// Places `page` and makes it resident, as the fault path would.
    fn load(sets: &SetMap, table: &PageTable, page: PageNo) -> Option<PageNo> {
        let s = stored(table, page);
        match sets.place(table, page, s, &|_| false) {
            Placement::Placed(victim) => {
                table.finish(page, s.with_kind(Kind::Resident));
                victim.map(|(v, vs)| {
                    assert_eq!(table.load(v).kind(), Kind::Evicting);
                    table.finish(v, vs.with_kind(Kind::Stored));
                    v
                })
            }
            _ => panic!("placing page {page} failed"),
        }
    }

    #[test]
    fn a_direct_mapped_cache_evicts_the_page_with_the_same_index() {
        let table = PageTable::new(1024).unwrap();
        let sets = SetMap::new(16, 1, 2);
        assert_eq!(load(&sets, &table, 3), None);
        assert_eq!(load(&sets, &table, 4), None, "another set");
        assert_eq!(load(&sets, &table, 19), Some(3), "3 and 19 share set 3");
        assert_eq!(load(&sets, &table, 35), Some(19));
    }

    #[test]
    fn a_set_evicts_its_oldest_page_first() {
        let table = PageTable::new(1024).unwrap();
        let sets = SetMap::new(8, 4, 2);
        for p in [1, 9, 17, 25] {
            assert_eq!(load(&sets, &table, p), None, "set 1 has room for {p}");
        }
        assert_eq!(load(&sets, &table, 33), Some(1));
        assert_eq!(load(&sets, &table, 41), Some(9));
        assert_eq!(load(&sets, &table, 2), None, "set 2 is still empty");
    }

    #[test]
    fn two_pages_that_keep_evicting_each_other_go_to_the_victim_buffer() {
        let table = PageTable::new(1024).unwrap();
        let sets = SetMap::new(16, 1, 2);
        load(&sets, &table, 3);
        assert_eq!(load(&sets, &table, 19), Some(3), "an ordinary conflict");
        assert_eq!(load(&sets, &table, 3), Some(19), "one return is one too");
        // 19 at once again, as a retried instruction would: both stay.
        assert_eq!(load(&sets, &table, 19), None);
        assert_eq!(table.load(3).kind(), Kind::Resident);
        assert_eq!(load(&sets, &table, 35), Some(3), "the set still works");
        // A second round is caught too; the buffer keeps its two newest pages.
        assert_eq!(load(&sets, &table, 3), Some(35));
        assert_eq!(load(&sets, &table, 35), None, "caught again");
        assert_eq!(load(&sets, &table, 51), Some(3));
        assert_eq!(load(&sets, &table, 3), Some(51));
        assert_eq!(
            load(&sets, &table, 51),
            Some(19),
            "the buffer's oldest leaves"
        );
        assert_eq!(table.load(35).kind(), Kind::Resident, "the newest stays");
    }

    #[test]
    fn stale_entries_are_reused_and_busy_victims_wait() {
        let table = PageTable::new(1024).unwrap();
        let sets = SetMap::new(4, 1, 2);
        load(&sets, &table, 1);
        // Page 1 is freed behind the set's back: its entry is stale.
        table.finish(1, PageState::FREE);
        assert_eq!(load(&sets, &table, 5), None);
        // A victim someone else owns cannot be taken.
        let s = table.load(5);
        table.finish(5, s.with_kind(Kind::Loading));
        let s9 = stored(&table, 9);
        assert!(matches!(
            sets.place(&table, 9, s9, &|_| false),
            Placement::Busy
        ));
        assert_eq!(table.load(9).kind(), Kind::Stored, "9 is left as it was");
    }
}
