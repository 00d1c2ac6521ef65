#!/usr/bin/env python3
"""pdflatex (the bench's, its plan in the bench database) cold, warm, with `run` and with
`run --share-cpu`, ROUNDS interleaved rounds: medians of the wall time and of the launched
process's own rusage (for `run`: the front and the app it execs, and the intermediate child
it waits for; not the prefetcher).

  launch-cpu.py ROUNDS [DB]"""
import os, statistics, subprocess, sys, time
WORK = "/var/lib/warmstart/bench/work"
CMD = ["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"]
BIN = os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/release/warmstart"))
DB = sys.argv[2] if len(sys.argv) > 2 else "/var/lib/warmstart/bench/bench.db"
rounds = int(sys.argv[1])
sc = {"cold": CMD, "warm": CMD, "run": [BIN, "--db", DB, "run", "--app", "pdflatex", "--"] + CMD,
      "share": [BIN, "--db", DB, "run", "--share-cpu", "--app", "pdflatex", "--"] + CMD}
res = {k: [] for k in sc}
for i in range(rounds):
    order = list(sc) if i % 2 == 0 else list(sc)[::-1]
    for k in order:
        if k == "warm":
            subprocess.run(CMD, cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches", "w").write("3"); time.sleep(0.5)
        t0 = time.monotonic()
        p = subprocess.Popen(sc[k], cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, st, ru = os.wait4(p.pid, 0)
        wall = (time.monotonic() - t0) * 1e3
        res[k].append((wall, ru.ru_utime * 1e3, ru.ru_stime * 1e3, ru.ru_majflt, ru.ru_minflt))
        time.sleep(1.0)
for k, v in res.items():
    med = lambda j: statistics.median(x[j] for x in v)
    print(f"{k:6} wall {med(0):6.1f} user {med(1):6.1f} sys {med(2):5.1f} majflt {med(3):5.0f} minflt {med(4):6.0f}  walls {[round(x[0]) for x in v]}")
