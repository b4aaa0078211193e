#!/usr/bin/env python3
"""Hit ratios of tiermem's CLOCK with and without per-page heat, simulated.

The simulation gives each policy only what tiermem can see: a miss, a write
to a clean resident page (dirty tracking write-protects clean pages), a touch
of a page in probation (unmapped but still in DRAM, 1/8 of the budget).
Reads and writes of mapped pages are invisible. LRU sees every access, as a
reference for what accessed bits give the kernel. A write miss counts as a
reference, as in tiermem (the page is installed dirty, so no later write
fault would report it).

Policies:
  lru          every access visible
  clock        one REFERENCED bit (tiermem before the heat word)
  heat         uses (saturating at 15) and credits, no aging
  heat-aging   the same, uses halving every eight budgets of misses (tiermem)

Example (BENCHMARKS.md, "Issue #4, seventh pass"):
  docs/sim/clock_heat.py --pages 262144 --accesses 8000000 lru clock heat heat-aging
"""

import argparse
import collections
import itertools
import random

MAX_USES = 15
RESIDENT, PROBATION, STORED = 1, 2, 0


def zipf_trace(pages, accesses, theta, seed):
    rng = random.Random(seed)
    weights = [1.0 / (rank**theta) for rank in range(1, pages + 1)]
    cumulative = list(itertools.accumulate(weights))
    order = list(range(pages))
    rng.shuffle(order)
    ranks = rng.choices(range(pages), cum_weights=cumulative, k=accesses)
    trace = [order[r] for r in ranks]
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
    """Uses and credits per page, with optional lazy aging."""

    def __init__(self, pages, aging_misses):
        self.uses = [0] * pages
        self.period_of = [0] * pages
        self.period = 0
        self.misses = 0
        self.aging_misses = aging_misses

    def _fresh(self, page):
        if self.aging_misses and self.period_of[page] != self.period:
            self.uses[page] >>= min(4, self.period - self.period_of[page])
            self.period_of[page] = self.period

    def on_miss(self, page):
        self.misses += 1
        if self.aging_misses and self.misses % self.aging_misses == 0:
            self.period += 1
        self._fresh(page)
        self.uses[page] = min(MAX_USES, self.uses[page] + 1)

    def on_reference(self, page):
        """Returns the credits a reference grants."""
        self._fresh(page)
        self.uses[page] = min(MAX_USES, self.uses[page] + 1)
        return self.uses[page]


def clock(trace, writes, pages, budget, measured_from, heat):
    """CLOCK over mapped pages, FIFO probation, tiermem's visibility.

    With `heat` None, a reference is worth one turn of the hand (one bit).
    """
    probation_target = budget // 8
    state = [STORED] * pages
    credits = [0] * pages
    dirty = [False] * pages
    ring = collections.deque()
    probation = collections.deque()
    mapped = in_probation = hits = 0

    def reference(page):
        credits[page] = heat.on_reference(page) if heat else 1

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
        if heat:
            heat.on_miss(page)
        state[page] = RESIDENT
        dirty[page] = write
        credits[page] = 0
        if write:
            reference(page)
        ring.append(page)
        mapped += 1
        while mapped + in_probation > budget:
            if in_probation > probation_target:
                victim = probation.popleft()
                if state[victim] == PROBATION:
                    state[victim] = STORED
                    in_probation -= 1
                continue
            victim = ring.popleft()
            if state[victim] != RESIDENT:
                continue
            if credits[victim] > 0:
                credits[victim] -= 1
                ring.append(victim)
                continue
            state[victim] = PROBATION
            dirty[victim] = False
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
    parser.add_argument("policies", nargs="*", default=["lru", "clock", "heat", "heat-aging"])
    args = parser.parse_args()

    budget = args.pages // 4
    trace, writes, best = zipf_trace(args.pages, args.accesses, args.theta, args.seed)
    measured_from = args.accesses // 3
    print(f"best static choice of {budget} pages: {best:.2%} hits")
    for name in args.policies:
        if name == "lru":
            ratio = lru(trace, writes, budget, measured_from)
        elif name == "clock":
            ratio = clock(trace, writes, args.pages, budget, measured_from, None)
        elif name == "heat":
            ratio = clock(trace, writes, args.pages, budget, measured_from, Heat(args.pages, 0))
        elif name == "heat-aging":
            ratio = clock(trace, writes, args.pages, budget, measured_from, Heat(args.pages, 8 * budget))
        else:
            parser.error(f"unknown policy {name!r}: expected lru, clock, heat or heat-aging")
        print(f"{name:<11} {ratio:.2%} hits")


if __name__ == "__main__":
    main()
