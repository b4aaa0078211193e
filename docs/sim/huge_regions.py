#!/usr/bin/env python3
"""Hit ratios of tiermem's CLOCK with and without kept huge regions, simulated.

Backs crates/tiermem-core/src/policy/huge_regions.rs. The model gives tiermem
only what it sees (mapped pages' accesses are invisible; the oldest quarter of
the budget waits unmapped in probation, where a touch brings a page back), as
docs/sim/permutation_passes.py does, and adds regions of R pages:

  forming   a region whose pages are all resident is kept, while kept regions
            hold at most CAP of the budget; past that the kept region whose
            last fault is oldest makes room
  proving   a kept region is shielded from the hand only after a fault in it
            (a miss, a probation touch) since it was kept
  checking  once per epoch (EPOCH of the budget demoted) K pages of a proven
            region go to probation and the others are put back; a region
            with no fault since its previous check's samples went out is no
            longer kept

Traces, as in permutation_passes.py: passes (a sequential pass, then random
permutations: bench-vm --order shuffle), loop (one permutation repeated),
uniform, zipf(0.99), and a block of B budgets read twice in random order after
a sweep of three budgets elsewhere (the second read is measured).

Example: docs/sim/huge_regions.py 65536 39321
  (without / with regions) passes 0.262 / 0.392, loop 0.0 / 0.327, uniform
  0.599 / 0.599, zipf 0.909 / 0.909, read-twice 0.5, 0.8, 0.95: 1.0 / 1.0
"""

import argparse
import collections

from permutation_passes import density, workloads


def huge(trace, C, R=512, K=8, cap=0.625, epoch_share=0.5, pshare=0.25, warm=0, measure=None):
    M = int(C * (1 - pshare))
    CAP = int(cap * C)
    EP = max(1, int(C * epoch_share))
    mapped = collections.OrderedDict()
    prob = collections.OrderedDict()
    dens = collections.Counter()
    kept = {}  # region -> "new" (unproven) or True (proven)
    kp = [0]
    touched = {}
    samp = {}
    dem = epoch = hits = n = 0

    def unkeep(r):
        del kept[r]
        kp[0] -= dens[r]
        samp.pop(r, None)

    def fault(r):
        touched[r] = epoch
        if r in kept:
            kept[r] = True

    for i, x in enumerate(trace):
        h = 0
        r = x // R
        if x in mapped:
            h = 1
        elif x in prob:
            del prob[x]
            mapped[x] = 1
            h = 1
            fault(r)
        else:
            mapped[x] = 1
            dens[r] += 1
            if r in kept:
                kp[0] += 1
                fault(r)
            elif dens[r] >= R:
                while kp[0] + dens[r] > CAP and kept:
                    unkeep(min(kept, key=lambda q: touched.get(q, -9)))
                if kp[0] + dens[r] <= CAP:
                    kept[r] = "new"
                    kp[0] += dens[r]
                    touched[r] = epoch
        guard = 0
        while len(mapped) > M:
            y, _ = mapped.popitem(last=False)
            ry = y // R
            if kept.get(ry) is True:
                e, c = samp.get(ry, (None, 0))
                if e is not None and e < epoch and touched.get(ry, -9) < e:
                    unkeep(ry)
                else:
                    if e != epoch:
                        e, c = epoch, 0
                    if c < K or guard > 2 * M:
                        samp[ry] = (e, c + 1)
                    else:
                        samp[ry] = (e, c)
                        guard += 1
                        mapped[y] = 1
                        continue
            prob[y] = 1
            dem += 1
            if dem % EP == 0:
                epoch += 1
        while len(prob) + len(mapped) > C:
            y, _ = prob.popitem(last=False)
            ry = y // R
            dens[ry] -= 1
            if ry in kept:
                kp[0] -= 1
        if measure is None or measure[0] <= i < measure[1]:
            if i >= warm:
                hits += h
                n += 1
    return round(hits / max(n, 1), 3)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", type=int)
    ap.add_argument("budget", type=int)
    ap.add_argument("--region", type=int, default=512)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--cap", type=float, default=0.625)
    ap.add_argument("--epoch", type=float, default=0.5)
    a = ap.parse_args()
    n, c = a.pages, a.budget
    for name, (trace, warm, window) in workloads(n, c, a.region, 4).items():
        without = density(trace, c, a.region, None, warm=warm, measure=window)
        with_regions = huge(trace, c, a.region, a.samples, a.cap, a.epoch, warm=warm, measure=window)
        print(f"{name:16} without {without}  with regions {with_regions}", flush=True)


if __name__ == "__main__":
    main()
