#!/usr/bin/env python3
"""Where a miss spends its time under signal delivery, from a perf trace.

Reads the text of `perf script` for a trace taken while `tiermem bench
--faults signal` runs, and for each program thread (the threads named
`tiermem` that resolve faults) splits every miss into:

  submit      the io_uring_enter that submits the read (with the block
              layer's work and the virtio notification, a VM exit)
  device      block_rq_issue to block_rq_complete of that read
  install     the read's completion to the UFFDIO_COPY that installs it
  total       submit to install

It also sums the time those threads spent switched out, by state (R:
preempted, S: asleep) and by the thread that ran instead, and the device
time of reads that overlapped a write.

Take the trace (as root; WORKER is the pid of the bench's worker, the
child of `tiermem bench`):

  perf record -m 64M -a -o miss.data \\
    -e raw_syscalls:sys_enter --filter "common_pid >= WORKER && common_pid < WORKER+50" \\
    -e raw_syscalls:sys_exit --filter "common_pid >= WORKER && common_pid < WORKER+50" \\
    -e block:block_rq_issue,block:block_rq_complete -e sched:sched_switch -- sleep 2
  perf script -i miss.data > miss.txt
  docs/perf/miss_anatomy.py miss.txt

A trace of every system call slows the threads it traces, and perf itself
takes a CPU: on a 2-vCPU guest it crowds the program's threads onto one
CPU. Compare the shapes, not the absolute figures, with an untraced run.
(Its findings: docs/notebook/benchmarks-random-access-passes.md, "Issue #4,
eighth pass".)
"""

import argparse
import collections
import re
import sys

EVENT = re.compile(r"^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
ISSUE = re.compile(r" (R|W)\S* \d+ \(\) (\d+) \+")
COMPLETE = re.compile(r" (R|W)\S* \(\) (\d+) \+")
SWITCH = re.compile(
    r"prev_comm=(\S+) prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+) ==> next_comm=(\S+) next_pid=(\d+)"
)
UFFDIO_COPY = "c028aa03"
IO_URING_ENTER = "NR 426 "


def parse(path):
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = EVENT.match(line)
            if m:
                comm, tid, _cpu, t, name, args = m.groups()
                events.append((float(t), comm, tid, name, args))
    return events


def program_threads(events):
    """Threads named `tiermem` that install pages (UFFDIO_COPY)."""
    return {
        tid
        for _, comm, tid, name, args in events
        if comm == "tiermem" and name == "raw_syscalls:sys_enter" and UFFDIO_COPY in args
    }


def submits_read(args):
    """An io_uring_enter that submits at least one entry."""
    fields = args[len(IO_URING_ENTER) + 1 :].strip("()").split(", ")
    return args.startswith(IO_URING_ENTER) and len(fields) > 1 and fields[1] != "0"


def anatomy(events, threads):
    misses = collections.defaultdict(list)
    open_miss = {}
    issued = {}
    writes_in_flight = set()
    overlapped = []
    for t, _comm, tid, name, args in events:
        if name == "block:block_rq_issue":
            m = ISSUE.search(args)
            if m:
                issued[m.group(2)] = (t, tid, m.group(1), bool(writes_in_flight))
                if m.group(1) == "W":
                    writes_in_flight.add(m.group(2))
        elif name == "block:block_rq_complete":
            m = COMPLETE.search(args)
            if m and m.group(2) in issued:
                t0, who, op, with_write = issued.pop(m.group(2))
                writes_in_flight.discard(m.group(2))
                if op == "R":
                    overlapped.append(((t - t0) * 1e6, with_write))
                    if who in open_miss and "device" not in open_miss[who]:
                        open_miss[who]["device"] = (t - t0) * 1e6
                        open_miss[who]["completed"] = t
        if tid not in threads:
            continue
        if name == "raw_syscalls:sys_enter" and submits_read(args):
            open_miss[tid] = {"start": t}
        elif name == "raw_syscalls:sys_exit" and args.startswith("NR 426 =") and tid in open_miss:
            open_miss[tid].setdefault("submit", (t - open_miss[tid]["start"]) * 1e6)
        elif name == "raw_syscalls:sys_enter" and UFFDIO_COPY in args and tid in open_miss:
            m = open_miss.pop(tid)
            if "device" in m and "submit" in m:
                misses[tid].append(
                    (m["submit"], m["device"], (t - m["completed"]) * 1e6, (t - m["start"]) * 1e6)
                )
    return misses, overlapped


def switched_out(events, threads):
    away = {}
    spans = collections.defaultdict(list)
    for t, _comm, _tid, name, args in events:
        if name != "sched:sched_switch":
            continue
        m = SWITCH.search(args)
        if not m:
            continue
        _prev, prev_pid, state, next_comm, next_pid = m.groups()
        if prev_pid in threads:
            away[prev_pid] = (t, state[0], next_comm if next_pid not in threads else "another program thread")
        if next_pid in threads and next_pid in away:
            t0, state0, instead = away.pop(next_pid)
            spans[(state0, instead)].append((t - t0) * 1e6)
    return spans


def summary(values):
    values = sorted(values)
    n = len(values)
    if n == 0:
        return "none"
    pct = lambda p: values[min(n - 1, int(p * n))]
    return f"p50 {pct(0.5):6.1f}  p90 {pct(0.9):6.1f}  p99 {pct(0.99):7.1f}  mean {sum(values) / n:6.1f} µs"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="output of perf script")
    args = parser.parse_args()
    events = parse(args.trace)
    threads = program_threads(events)
    if not threads:
        sys.exit("no thread named tiermem installs pages in this trace (was it taken with --faults signal?)")
    misses, overlapped = anatomy(events, threads)
    for tid in sorted(misses):
        rows = misses[tid]
        print(f"thread {tid}: {len(rows)} misses")
        for i, part in enumerate(("submit", "device", "install", "total")):
            print(f"  {part:8} {summary([r[i] for r in rows])}")
    alone = [d for d, w in overlapped if not w]
    with_write = [d for d, w in overlapped if w]
    print(f"device reads, no write in flight ({len(alone)}): {summary(alone)}")
    print(f"device reads, a write in flight ({len(with_write)}): {summary(with_write)}")
    spans = switched_out(events, threads)
    print("program threads switched out (state, ran instead): count, total ms, mean µs")
    for (state, instead), v in sorted(spans.items(), key=lambda kv: -sum(kv[1]))[:12]:
        print(f"  {state} {instead:24} {len(v):6} {sum(v) / 1e3:8.1f} {sum(v) / len(v):8.0f}")


if __name__ == "__main__":
    main()
