#!/usr/bin/env python3
"""What each wait of a cold launch queued behind: its uninterruptible sleeps, with the block
requests in flight when each began, named by file.

    inflight.py [--min-ms MS] COMM_GLOB -- CMD...
    e.g. inflight.py 'python3*' -- warmstart run --strategy trace -- /usr/bin/python3.11 ...

Drops the page cache and runs CMD under a tracefs instance of its own (exec, fork, block
request issue and completion, switches into an uninterruptible sleep with a kernel stack,
wakeups), removes the instance, and prints, from the first exec of CMD: every block request
as it is issued (by whom, its size, the file it reads) and every sleep of a task whose comm
matches COMM_GLOB lasting at least MS (default 0.5), with the requests then in flight. A
sector is named by a FIEMAP map (`filefrag`) of the files and directories in the
directories CMD's absolute arguments name (and those above them) and the loader's
(/etc, /lib, /usr/lib, /usr/lib/x86_64-linux-gnu, /usr/bin); "?" is anything else, mostly
inode tables. `blocked.py` totals the sleeps
by stack; this script says what each one waited behind.
"""
import argparse
import bisect
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from blocked import SCHED_FRAMES, trace  # noqa: E402  (the same tracefs instance setup)

LINE = re.compile(r"\s*(.+?)-(\d+)\s+\[(\d+)\]\s+\S+\s+([\d.]+): (\w+): (.*)")
ISSUE = re.compile(r"\S+ (\S+) \d+ \(.*?\) (\d+) \+ (\d+)")
DONE = re.compile(r"\S+ \(.*?\) (\d+) \+ (\d+)")
EVENTS = ("sched/sched_process_exec", "sched/sched_process_fork",
          "block/block_rq_issue", "block/block_rq_complete")


def sector_map(cmd):
    """(start sector, end sector, name) of the files and directories CMD is likely to read."""
    roots = {"/etc", "/lib", "/lib64", "/usr/lib", "/usr/lib/x86_64-linux-gnu", "/usr/bin"}
    for a in cmd:
        if a.startswith("/") and os.path.exists(a):
            p = os.path.realpath(a)
            roots.add(p if os.path.isdir(p) else os.path.dirname(p))
            while p != "/":
                p = os.path.dirname(p)
                roots.add(p)
    paths = set()
    for r in roots:
        paths.add(r)
        try:
            for e in os.scandir(r):
                if e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False):
                    paths.add(e.path)
        except OSError:
            pass
    extents = []
    paths = sorted(paths)
    for i in range(0, len(paths), 256):
        out = subprocess.run(["filefrag", "-v", "-b4096", *paths[i:i + 256]],
                             capture_output=True, text=True).stdout
        name = None
        for l in out.splitlines():
            m = re.match(r"^File size of (/.*?) is \d+", l)
            if m:
                name = m.group(1)
                continue
            m = re.match(r"\s*\d+:\s+(\d+)\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):", l)
            if m and name:
                lblk, lo, hi = map(int, m.groups())
                extents.append((lo * 8, (hi + 1) * 8, name, lblk))
    extents.sort()
    return extents


def name_of(extents, starts, sec):
    i = bisect.bisect_right(starts, sec) - 1
    if i >= 0 and extents[i][0] <= sec < extents[i][1]:
        lo, _, name, lblk = extents[i]
        return f"{name}@{((sec - lo) // 8 + lblk) * 4}K"
    return "?"


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--min-ms", type=float, default=0.5)
    ap.add_argument("glob")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        sys.exit("usage: inflight.py [--min-ms MS] COMM_GLOB -- CMD...")
    lines = trace(a.glob, cmd, EVENTS, 65536)
    extents = sector_map(cmd)
    starts = [e[0] for e in extents]
    t0, inflight, asleep, total, n = None, {}, {}, 0.0, 0
    i = 0
    while i < len(lines):
        m = LINE.match(lines[i])
        i += 1
        if not m:
            continue
        comm, pid, _, t, ev, rest = m.groups()
        t, pid = float(t), int(pid)
        if ev == "sched_process_exec" and t0 is None:
            t0 = t
        if t0 is None:
            continue
        ms = (t - t0) * 1e3
        if ev == "block_rq_issue":
            r = ISSUE.search(rest)
            if r:
                sec, kb = int(r.group(2)), int(r.group(3)) // 2
                inflight[sec] = (ms, kb, comm, r.group(1))
        elif ev == "block_rq_complete":
            r = DONE.search(rest)
            if r:
                inflight.pop(int(r.group(1)), None)
        elif ev == "sched_switch":
            stack = []
            while i < len(lines) and (lines[i].lstrip().startswith("=>") or "<stack trace>" in lines[i]):
                f = lines[i].strip()
                if f.startswith("=>"):
                    fn = f[3:].split("+")[0].strip()
                    if fn not in SCHED_FRAMES:
                        stack.append(fn)
                i += 1
            asleep[pid] = (t, ms, comm, stack[:4], dict(inflight))
        elif ev == "sched_wakeup":
            r = re.search(r"pid=(\d+)", rest)
            if r and int(r.group(1)) in asleep:
                ts, at, who, stack, flight = asleep.pop(int(r.group(1)))
                d = (t - ts) * 1e3
                total += d
                n += 1
                if d >= a.min_ms:
                    print(f"{at:8.2f} ms  {who}: asleep {d:.2f} ms in {' < '.join(stack)}")
                    for sec, (it, kb, by, rw) in sorted(flight.items(), key=lambda x: x[1][0]):
                        print(f"{'':13}in flight since {it:7.2f} ms: {rw:<3} {kb:5d} KiB "
                              f"{name_of(extents, starts, sec)} (by {by})")
    print(f"asleep {total:.1f} ms in {n} sleeps after the first exec")


if __name__ == "__main__":
    main()
