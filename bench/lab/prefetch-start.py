#!/usr/bin/env python3
"""When the prefetch starts against the application: ROUNDS cold `run` launches of the bench's
pdflatex with BIN and DB (tracefs: `sched_process_exec`, `sched_process_fork`,
`block_rq_issue`): warmstart's exec to the app's exec, and the app's exec to the first block
request of a process or thread the front started (the prefetcher).

  prefetch-start.py ROUNDS BIN DB"""
import os, re, statistics, subprocess, sys, time
WORK = "/var/lib/warmstart/bench/work"
CMD = ["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"]
BIN = sys.argv[2]; DB = sys.argv[3]; rounds = int(sys.argv[1])
T = f"/sys/kernel/tracing/instances/ws-pf-{os.getpid()}"; os.mkdir(T)
def w(p, v): open(f"{T}/{p}", "w").write(v)
rows = []
try:
    for e in ["sched/sched_process_exec", "sched/sched_process_fork", "block/block_rq_issue"]:
        try: w(f"events/{e}/enable", "1")
        except OSError as x: print("no", e, x)
    w("buffer_size_kb", "8192")
    for i in range(rounds):
        subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches", "w").write("3"); time.sleep(0.5)
        w("trace", ""); w("tracing_on", "1")
        subprocess.run([BIN, "--db", DB, "run", "--app", "pdflatex", "--"] + CMD, cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3); w("tracing_on", "0")
        tr = open(f"{T}/trace").read().splitlines()
        t_ws = t_app = None; forks = []; first_ra = None; front = None; desc = set()
        for l in tr:
            m = re.match(r"\s*(.+?)-(\d+)\s+\[\d+\].*?\s(\d+\.\d+): (\w+): (.*)", l)
            if not m: continue
            comm, pid, ts, ev, rest = m.group(1), int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)
            if ev == "sched_process_exec" and "warmstart" in rest and t_ws is None: t_ws = ts; front = pid
            elif ev == "sched_process_exec" and "pdflatex" in rest: t_app = ts
            elif ev == "sched_process_fork":
                c = re.search(r"child_pid=(\d+)", rest); forks.append((ts, pid, int(c.group(1))))
                if pid == front or pid in desc: desc.add(int(c.group(1)))
            elif ev == "block_rq_issue" and first_ra is None and front is not None and pid != front and pid in desc and t_app is not None: first_ra = ts
        rows.append(((t_app - t_ws) * 1e3, ((first_ra or 0) - t_app) * 1e3))
        time.sleep(1.0)
finally:
    w("tracing_on", "0")
    for e in ["sched/sched_process_exec", "sched/sched_process_fork", "block/block_rq_issue"]:
        try: w(f"events/{e}/enable", "0")
        except OSError: pass
    os.rmdir(T)
print("exec->exec", [round(r[0], 1) for r in rows], "median", statistics.median(r[0] for r in rows))
print("app exec -> first readahead by another pid", [round(r[1], 1) for r in rows], "median", statistics.median(r[1] for r in rows))
