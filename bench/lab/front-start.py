#!/usr/bin/env python3
"""The front's cold start: warmstart's exec to the application's exec, for `run` of the
bench's pdflatex (its plan in DB), ROUNDS cold launches per variant, variants interleaved.

  front-start.py ROUNDS BIN:DB [BIN:DB ...]

Each variant is a front binary and a database (copies, e.g. `sqlite3 bench.db ".backup a.db"`:
a newer binary migrates the database it opens). Medians of exec-to-exec (tracefs
`sched_process_exec`) and of the launch's wall time."""
import os, re, statistics, subprocess, sys, time

WORK = "/var/lib/warmstart/bench/work"
CMD = ["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"]
rounds = int(sys.argv[1])
variants = [tuple(v.split(":", 1)) for v in sys.argv[2:]]
T = f"/sys/kernel/tracing/instances/ws-front-{os.getpid()}"
os.mkdir(T)


def w(p, v):
    with open(f"{T}/{p}", "w") as f:
        f.write(v)


res = {v: [] for v in variants}
try:
    w("events/sched/sched_process_exec/enable", "1")
    for i in range(rounds):
        order = variants if i % 2 == 0 else variants[::-1]
        for v in order:
            subprocess.run(["sync"])
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
            time.sleep(0.5)
            w("trace", "")
            w("tracing_on", "1")
            t0 = time.monotonic()
            subprocess.run([v[0], "--db", v[1], "run", "--app", "pdflatex", "--"] + CMD, cwd=WORK,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall = (time.monotonic() - t0) * 1e3
            w("tracing_on", "0")
            with open(f"{T}/trace") as f:
                ts = [float(m.group(1)) for m in re.finditer(r"\s(\d+\.\d+): sched_process_exec", f.read())]
            res[v].append(((ts[1] - ts[0]) * 1e3 if len(ts) >= 2 else float("nan"), wall))
            time.sleep(1.5)
finally:
    w("events/sched/sched_process_exec/enable", "0")
    os.rmdir(T)
for v, r in res.items():
    print(f"{v[0]}:{v[1]}  exec->exec median {statistics.median(x[0] for x in r):5.1f} ms, "
          f"wall median {statistics.median(x[1] for x in r):6.1f} ms  ({[round(x[0], 1) for x in r]})")
