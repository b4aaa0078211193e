#!/usr/bin/env python3
"""Hit ratios of tiermem's CLOCK with and without per-page heat, simulated.

The simulation gives each policy only what tiermem can see: a miss, a write
to a clean resident page (dirty tracking write-protects clean pages), a touch
of a page in probation (unmapped but still in DRAM, 1/8 of the budget).
Reads and writes of mapped pages are invisible. LRU sees every access, as a
reference for what accessed bits give the kernel.

Accesses are those of `tiermem bench --read-ratio 50`: a read, or a read
followed by a write of the same word, so every miss is a read fault. With
write prediction on (tiermem's default, and it turns on for this pattern),
seven read misses in eight install the page writable and dirty, so a write
that follows is not seen; the eighth installs it protected. A page stays
dirty through probation: a rescued dirty page is installed writable.

Policies:
  lru          every access visible
  clock        one REFERENCED bit (tiermem before the heat byte)
  heat         uses (saturating at 15) and credits, no aging (tiermem)
  heat-aging   the same, uses halving after every eight rings' worth of
               victims, at least 4,096 (built, measured, and dropped)

A referenced page survives one turn of the hand for the bit, plus (with heat)
one per use before this one; a miss grants nothing.

Example (BENCHMARKS.md, "Issue #4, seventh pass"):
  docs/sim/clock_heat.py --pages 262144 --accesses 8000000 lru clock heat heat-aging
"""

import argparse
import collections
import itertools
import random

MAX_USES = 15
RESIDENT, PROBATION, STORED = 1, 2, 0


def zipf_trace(pages, accesses, theta, seed, shifts):
    """Zipf ranks mapped to pages; after each of `shifts` equal parts of the
    trace the popularity of pages is drawn anew (a drifting working set)."""
    rng = random.Random(seed)
    weights = [1.0 / (rank**theta) for rank in range(1, pages + 1)]
    cumulative = list(itertools.accumulate(weights))
    ranks = rng.choices(range(pages), cum_weights=cumulative, k=accesses)
    trace = []
    part = accesses // (shifts + 1) + 1
    for start in range(0, accesses, part):
        order = list(range(pages))
        rng.shuffle(order)
        trace += [order[r] for r in ranks[start : start + part]]
    writes = [rng.random() < 0.5 for _ in range(accesses)]
    best = sum(weights[: pages // 4]) / cumulative[-1]
    return trace, writes, best


def lru(trace, writes, budget, measured_from):
    cache = collections.OrderedDict()
    hits = 0
    for i, page in enumerate(trace):
        if page in cache:
            cache.move_to_end(page)
            hits += i >= measured_from
        else:
            cache[page] = True
            if len(cache) > budget:
                cache.popitem(last=False)
    return hits / (len(trace) - measured_from)


class Heat:
    """Uses per page, with optional lazy aging driven by victims."""

    def __init__(self, pages, aging):
        self.uses = [0] * pages
        self.period_of = [0] * pages
        self.period = 0
        self.victims = 0
        self.aging = aging

    def _fresh(self, page):
        if self.aging and self.period_of[page] != self.period:
            self.uses[page] >>= min(4, self.period - self.period_of[page])
            self.period_of[page] = self.period

    def on_miss(self, page):
        self._fresh(page)
        self.uses[page] = min(MAX_USES, self.uses[page] + 1)

    def on_reference(self, page):
        """Returns the turns a reference buys: one, plus one per earlier use."""
        self._fresh(page)
        self.uses[page] = min(MAX_USES, self.uses[page] + 1)
        return self.uses[page]

    def on_victim(self, ring_len):
        self.victims += 1
        if self.aging and self.victims >= max(8 * ring_len, 4096):
            self.victims = 0
            self.period += 1


def clock(trace, writes, pages, budget, measured_from, heat, prediction):
    """CLOCK over mapped pages, FIFO probation, tiermem's visibility.

    With `heat` None, a reference is worth one turn of the hand (one bit).
    """
    rng = random.Random(7)
    probation_target = budget // 8
    state = [STORED] * pages
    turns = [0] * pages
    dirty = [False] * pages
    ring = collections.deque()
    probation = collections.deque()
    mapped = in_probation = hits = 0

    def reference(page):
        turns[page] = heat.on_reference(page) if heat else 1

    for i, page in enumerate(trace):
        measured = i >= measured_from
        write = writes[i]
        if state[page] == RESIDENT:
            hits += measured
            if write and not dirty[page]:
                dirty[page] = True
                reference(page)
            continue
        if state[page] == PROBATION:
            hits += measured
            state[page] = RESIDENT
            dirty[page] = dirty[page] or write
            reference(page)
            ring.append(page)
            mapped += 1
            in_probation -= 1
            continue
        # A miss is a read fault; a write of the same access follows.
        if heat:
            heat.on_miss(page)
        state[page] = RESIDENT
        turns[page] = 0
        dirty[page] = prediction and rng.random() < 7 / 8
        if write and not dirty[page]:
            dirty[page] = True
            reference(page)
        ring.append(page)
        mapped += 1
        while mapped + in_probation > budget:
            if in_probation > probation_target:
                victim = probation.popleft()
                if state[victim] == PROBATION:
                    state[victim] = STORED
                    dirty[victim] = False
                    in_probation -= 1
                continue
            victim = ring.popleft()
            if state[victim] != RESIDENT:
                continue
            if turns[victim] > 0:
                turns[victim] -= 1
                ring.append(victim)
                continue
            if heat:
                heat.on_victim(len(ring))
            state[victim] = PROBATION
            probation.append(victim)
            mapped -= 1
            in_probation += 1
    return hits / (len(trace) - measured_from)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=262144, help="working set in pages (budget: a quarter)")
    parser.add_argument("--accesses", type=int, default=2_000_000, help="trace length; the first third warms up")
    parser.add_argument("--theta", type=float, default=0.99, help="zipf skew")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shifts", type=int, default=0, help="times the popularity of pages is drawn anew")
    parser.add_argument(
        "--no-write-prediction",
        action="store_true",
        help="every read miss installs the page protected, so the write after it is seen",
    )
    parser.add_argument("policies", nargs="*", default=["lru", "clock", "heat", "heat-aging"])
    args = parser.parse_args()

    budget = args.pages // 4
    trace, writes, best = zipf_trace(args.pages, args.accesses, args.theta, args.seed, args.shifts)
    measured_from = args.accesses // 3
    prediction = not args.no_write_prediction
    print(f"best static choice of {budget} pages: {best:.2%} hits")
    for name in args.policies:
        if name == "lru":
            ratio = lru(trace, writes, budget, measured_from)
        elif name == "clock":
            ratio = clock(trace, writes, args.pages, budget, measured_from, None, prediction)
        elif name == "heat":
            ratio = clock(trace, writes, args.pages, budget, measured_from, Heat(args.pages, False), prediction)
        elif name == "heat-aging":
            ratio = clock(trace, writes, args.pages, budget, measured_from, Heat(args.pages, True), prediction)
        else:
            parser.error(f"unknown policy {name!r}: expected lru, clock, heat or heat-aging")
        print(f"{name:<11} {ratio:.2%} hits")


if __name__ == "__main__":
    main()
