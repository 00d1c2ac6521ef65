#!/usr/bin/env python3
"""Warm launches of the bench's pdflatex, plain and through each given front, ROUNDS
interleaved rounds (the order reversed every other round): each launch runs in a cgroup of
its own, so its CPU counts everything the launch started, detached prefetchers and watchers
too (`warm-overhead.py` counts only what the front waited for). Medians, and paired medians
of the difference to the plain launch of the same round. `run` uses `--strategy hybrid`, so
that a plan is used where `auto` would launch plainly; on a copy of the bench's database.

  warm-cpu.py ROUNDS LABEL=BIN...      (root; after a `warmstart bench` run)"""
import os, sqlite3, statistics, subprocess, sys, time
STATE = "/var/lib/warmstart/bench"
WORK = f"{STATE}/work"
DB = "/var/lib/warmstart/lab-warm-cpu.db"
with sqlite3.connect(f"{STATE}/bench.db") as src, sqlite3.connect(DB) as dst:
    src.backup(dst)
cmd = ["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"]
rounds = int(sys.argv[1])
bins = dict(a.split("=", 1) for a in sys.argv[2:])
sc = {"plain": cmd}
for label, b in bins.items():
    sc[label] = [b, "--db", DB, "run", "--strategy", "hybrid", "--app", "pdflatex", "--"] + cmd
# cgroup v2 (cpu.stat usage_usec) or v1's cpuacct (cpuacct.usage, ns).
V2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
ROOT = "/sys/fs/cgroup" if V2 else "/sys/fs/cgroup/cpuacct"
groups = {k: f"{ROOT}/warmstart-lab-{k}" for k in sc}
for g in groups.values():
    os.makedirs(g, exist_ok=True)
def cpu_ms(k):
    g = groups[k]
    if V2:
        for line in open(f"{g}/cpu.stat"):
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e3
    return int(open(f"{g}/cpuacct.usage").read()) / 1e6
def launch(k):
    g = groups[k]
    c0 = cpu_ms(k)
    t0 = time.monotonic()
    p = subprocess.Popen(["sh", "-c", f'echo $$ > {g}/cgroup.procs; exec "$@"', "sh"] + sc[k],
                         cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    p.wait()
    ms = (time.monotonic() - t0) * 1e3
    # What the launch left running (a prefetcher, a watcher) ends before the CPU is read.
    for _ in range(500):
        if not open(f"{g}/cgroup.procs").read().strip():
            break
        time.sleep(0.01)
    return ms, cpu_ms(k) - c0
try:
    res = {k: [] for k in sc}
    for k in sc:
        launch(k)
    for i in range(rounds):
        for k in (list(sc) if i % 2 == 0 else list(sc)[::-1]):
            res[k].append(launch(k))
            time.sleep(0.1)
finally:
    for g in groups.values():
        for _ in range(100):
            try:
                os.rmdir(g)
                break
            except OSError:
                time.sleep(0.05)
med = statistics.median
base = res["plain"]
for k, v in res.items():
    dw = med(v[i][0] - base[i][0] for i in range(rounds))
    dc = med(v[i][1] - base[i][1] for i in range(rounds))
    print(f"{k:8} wall {med(x[0] for x in v):7.1f} cpu {med(x[1] for x in v):7.1f}   paired: wall {dw:+6.2f} cpu {dc:+6.2f}")
