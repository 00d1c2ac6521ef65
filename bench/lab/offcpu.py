#!/usr/bin/env python3
"""Each off-CPU stretch of some threads of one traced launch, with the kernel stack it began in.

    perf record -o P.data -e sched:sched_switch -e sched:sched_process_exec -g -a -- \\
        warmstart --db DB run --app APP -- CMD...          (after a cache drop)
    perf script -i P.data > P.txt
    bench/lab/offcpu.py P.txt warmstart-prefe [MIN_MS]

Prints, for every thread whose name starts with the prefix, each time it was off the CPU
for MIN_MS (default 0.8) or more: when (ms from warmstart's exec), how long, its state
(D: uninterruptible, S: asleep, R: preempted), and the first frames below the scheduler.
Then the totals per innermost frame. How the prefetch threads' stall in `expand_files` was
found (docs/measurements.md, 2026-11-29, ninth entry).
"""
import collections
import re
import sys

path, prefix = sys.argv[1], sys.argv[2]
min_s = float(sys.argv[3]) / 1000 if len(sys.argv) > 3 else 0.0008
head = re.compile(r"\s*(\S.*?)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s*(.*)")
switch = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
t0 = None
out = {}
totals = collections.Counter()
for block in open(path).read().split("\n\n"):
    lines = block.strip().split("\n")
    m = head.match(lines[0]) if lines and lines[0] else None
    if not m:
        continue
    _, _, _, t, event, rest = m.groups()
    t = float(t)
    if event == "sched:sched_process_exec":
        if t0 is None and re.search(r"filename=\S*warmstart ", rest + " "):
            t0 = t
        continue
    if event != "sched:sched_switch":
        continue
    s = switch.search(rest)
    if not s:
        continue
    prev, prev_pid, state, nxt, next_pid = s.groups()
    if prev.startswith(prefix):
        frames = [x.strip().split(" ", 1)[1].split("+")[0] for x in lines[1:] if " " in x.strip()]
        frames = [f for f in frames if "schedule" not in f and not f.startswith("__wait")]
        out[prev_pid] = (t, state, frames[:6])
    if next_pid in out and nxt.startswith(prefix):
        t1, state, frames = out.pop(next_pid)
        totals[frames[0] if frames else "?"] += t - t1
        if t - t1 >= min_s:
            start = (t1 - (t0 if t0 is not None else t1)) * 1000
            print(f"{start:8.2f} {1000 * (t - t1):6.2f} ms  tid {next_pid} {state}  "
                  + " < ".join(frames))
print("\ntotal off the CPU by innermost frame (ms):")
for frame, s in totals.most_common(12):
    print(f"  {1000 * s:8.1f}  {frame}")
