#!/usr/bin/env python3
"""Hit ratios of page-replacement models under bench-vm's walker orders.

Backs docs/notebook/2026-11-28-vm-walker-orders.md. Traces:
  passes   a sequential stamping pass, then checking passes each in a random
           permutation of its own (bench-vm --order shuffle)
  loop     one permutation repeated (--order loop)
  uniform  pages drawn at random with replacement (--order uniform)
  zipf     zipf(0.99) over pages in a random order
  read-twice B   a sweep of three budgets elsewhere, then a block of B budgets
           read twice in random orders; the second read is measured

Models (C pages of DRAM):
  tiermem  what tiermem sees: mapped pages in a FIFO (their hits unseen), the
           oldest quarter of the budget unmapped in probation; a touch there
           brings a page back to the newest end; a miss enters at the newest end
  kernel   Linux's active/inactive lists as commonly described: misses enter
           the inactive list (or the active one on a refault within the active
           list's size), a referenced inactive page is activated, the active
           list is aged into the inactive one while it is the larger
  density  tiermem, plus one extra turn for pages of regions at least THETA
           resident
  keep     tiermem, plus a region that reaches THETA resident is kept mapped
           while a check of it passes: once per ring's worth of demotions, K
           of its pages go through probation, and a touch of any of them is a
           pass; an untouched sample goes back mapped, not out (slow)

Example: docs/sim/permutation_passes.py 40000 24000 --region 64 --theta 0.9
"""

import argparse
import collections
import itertools
import random

def passes(N, npass, seed):
    rng = random.Random(seed); perm=list(range(N)); out=[]
    for p in range(npass):
        if p==0: out+=perm; continue
        rng.shuffle(perm); out+=perm
    return out
def uniform(N, n, seed):
    rng=random.Random(seed); return [rng.randrange(N) for _ in range(n)]
def zipf(N, n, seed, theta=0.99):
    rng=random.Random(seed); w=[1/(r**theta) for r in range(1,N+1)]
    cum=list(itertools.accumulate(w)); order=list(range(N)); rng.shuffle(order)
    return [order[r] for r in rng.choices(range(N), cum_weights=cum, k=n)]

def kernel(trace, C, warm, refault=True):
    inact=collections.OrderedDict(); act=collections.OrderedDict()  # last = head (newest)
    young=set(); evicted_age={}; age=0
    hits=n=0
    for i,x in enumerate(trace):
        if x in inact or x in act:
            young.add(x); h=1
        else:
            h=0
            ea=evicted_age.pop(x,None)
            if refault and ea is not None and age-ea <= len(act):
                act[x]=1; age+=1
            else:
                inact[x]=1
            young.add(x)  # the faulting access sets the young bit? (pte made young on fault)
        while len(inact)+len(act) > C:
            # balance
            while len(inact) < len(act):
                y,_=act.popitem(last=False); young.discard(y); inact[y]=1
            y,_=inact.popitem(last=False)
            if y in young:
                young.discard(y); act[y]=1; age+=1
            else:
                evicted_age[y]=age; age+=1
        if i>=warm: hits+=h; n+=1
    return round(hits/n,3)
def density(trace, C, R, theta, pshare=0.25, warm=0, measure=None):
    M=int(C*(1-pshare))
    mapped=collections.OrderedDict(); prob=collections.OrderedDict()
    dens=collections.Counter()   # resident (mapped+prob) pages per region
    credit=set()                 # pages that used their region turn since entering
    hits=resc=n=0
    rng=range(len(trace))
    for i in rng:
        x=trace[i]; h=0
        if x in mapped: h=1
        elif x in prob:
            del prob[x]; mapped[x]=1; h=1; resc+=(i>=warm)
        else:
            mapped[x]=1; dens[x//R]+=1
        # demote from mapped head
        guard=0
        while len(mapped)>M:
            y,_=mapped.popitem(last=False)
            if theta is not None and y not in credit and dens[y//R] >= theta*R and guard < 4*M:
                credit.add(y); mapped[y]=1; guard+=1; continue
            credit.discard(y); prob[y]=1
        while len(prob)+len(mapped)>C:
            y,_=prob.popitem(last=False); dens[y//R]-=1; credit.discard(y)
        if measure is None or measure[0]<=i<measure[1]:
            if i>=warm: hits+=h; n+=1
    return round(hits/max(n,1),3)

def read_twice(C, B, R, seed=5):
    rng=random.Random(seed)
    sweep=list(range(10*C, 13*C))          # a sweep of 3 budgets elsewhere
    blk=list(range(0, B)); a=blk[:]; rng.shuffle(a); b=blk[:]; rng.shuffle(b)
    tr=sweep+a+b
    return tr, (len(sweep)+len(a), len(tr))

def keep(trace, C, R, theta, k=8, pshare=0.25, warm=0, measure=None, keep_on=True):
    M=int(C*(1-pshare))
    mapped=collections.OrderedDict(); prob=collections.OrderedDict()
    dens=collections.Counter()
    dead=set()           # regions whose check failed (not kept until dense again after turnover)
    sampled={}           # page -> region, for samples in probation
    pending=collections.Counter()  # region -> samples still in probation
    live=collections.Counter()
    last_check={}        # region -> demotion count at last check
    demotions=0
    hits=n=resc=0
    keepset=set()
    def kept(r):
        if not keep_on or r in dead: return False
        if r in keepset: return True
        if dens[r] >= theta*R: keepset.add(r); return True
        return False
    for i,x in enumerate(trace):
        h=0
        if x in mapped: h=1
        elif x in prob:
            del prob[x]; mapped[x]=1; h=1; resc+=1
            r=sampled.pop(x,None)
            if r is not None: live[r]+=1; pending[r]-=1
        else:
            mapped[x]=1; r=x//R; dens[r]+=1
            if dens[r] < theta*R*0.5: dead.discard(r)   # turned over: may be kept again
        guard=0
        while len(mapped)>M:
            y,_=mapped.popitem(last=False); r=y//R
            if kept(r) and guard < 2*M:
                guard+=1
                if demotions - last_check.get(r,-10**9) >= M and pending[r]==0:
                    # start a check: this page and up to k-1 others of the region go to probation
                    last_check[r]=demotions; live[r]=0
                    cands=[y]+[p for p in range(r*R,(r+1)*R) if p in mapped and p!=y][:k-1]
                    for p in cands:
                        if p!=y: del mapped[p]
                        prob[p]=1; sampled[p]=r; pending[r]+=1; demotions+=1
                    continue
                mapped[y]=1; continue
            prob[y]=1; demotions+=1
        while len(prob)+len(mapped)>C:
            y,_=prob.popitem(last=False); r=y//R
            rr=sampled.pop(y,None)
            if rr is not None:
                # a sample is inspected, not evicted: it goes back mapped
                pending[rr]-=1
                if pending[rr]==0 and live[rr]==0: dead.add(rr); keepset.discard(rr)
                mapped[y]=1
                continue
            dens[r]-=1
        if measure is None or measure[0]<=i<measure[1]:
            if i>=warm: hits+=h; n+=1
    return round(hits/max(n,1),3)


def workloads(n, c, region, rounds):
    """Every trace by name: (trace, accesses before measuring, measured
    window or None). `rounds` passes (or repeats of the loop); the first is
    not measured."""
    rng = random.Random(9)
    perm = list(range(n))
    rng.shuffle(perm)
    work = {
        "passes": (passes(n, rounds, 1), 2 * n, None),
        "loop": (list(range(n)) + perm * (rounds - 1), 2 * n, None),
        "uniform": (uniform(n, rounds * n, 2), 2 * n, None),
        "zipf": (zipf(n, rounds * n, 3), 2 * n, None),
    }
    for b in (0.5, 0.8, 0.95):
        trace, window = read_twice(c, int(b * c), region)
        work[f"read-twice {b}"] = (trace, 0, window)
    return work


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", type=int)
    ap.add_argument("budget", type=int)
    ap.add_argument("--region", type=int, default=64)
    ap.add_argument("--theta", type=float, default=0.9)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--keep", action="store_true", help="run the (slow) keep model too")
    a = ap.parse_args()
    n, c = a.pages, a.budget
    for name, (trace, warm, window) in workloads(n, c, a.region, 5).items():
        row = {
            "tiermem": density(trace, c, a.region, None, warm=warm, measure=window),
            "kernel": kernel(trace, c, warm) if window is None else "-",
            "density": density(trace, c, a.region, a.theta, warm=warm, measure=window),
        }
        if a.keep:
            row["keep"] = keep(trace, c, a.region, a.theta, a.samples, warm=warm, measure=window)
        print(f"{name:16}", "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
