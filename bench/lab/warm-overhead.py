#!/usr/bin/env python3
"""Warm launches of three of the bench's short apps (pdflatex, R, npm), plain against `run`
with each given front binary, ROUNDS interleaved rounds (the order reversed every other
round): medians of each launch's wall time and CPU (user + system of the launched process
and the children it waited for), and paired medians of the difference to the plain launch
of the same round. `run` uses the strategy given (default hybrid), so that the prefetcher
runs even where `auto` would launch plainly.

  warm-overhead.py ROUNDS [--strategy S] LABEL=BIN...

DB=PATH uses that database instead of a fresh copy of the bench's."""
import os, statistics, subprocess, sys, time
STATE = "/var/lib/warmstart/bench"
WORK = f"{STATE}/work"
# A copy by default: these launches are recorded, and hundreds of warm ones would push the
# bench's cold launches out of the history `auto` chooses from.
DB = os.environ.get("DB")
if not DB:
    import sqlite3
    DB = "/var/lib/warmstart/lab-warm-overhead.db"
    with sqlite3.connect(f"{STATE}/bench.db") as src, sqlite3.connect(DB) as dst:
        src.backup(dst)
APPS = {
    "pdflatex": (["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"], {}),
    "r-vanilla": (["R", "--vanilla", "--quiet", "-e", "x <- summary(lm(dist ~ speed, data = cars)); print(x$r.squared)"], {}),
    "npm-version": (["npm", "--version"], {"npm_config_update_notifier": "false", "npm_config_cache": f"{WORK}/npm-cache"}),
}
args = sys.argv[1:]
rounds = int(args.pop(0))
strategy = "hybrid"
if args and args[0] == "--strategy":
    strategy = args[1]
    args = args[2:]
bins = dict(a.split("=", 1) for a in args)
sc = {}
for app, (cmd, env) in APPS.items():
    e = dict(os.environ, **env)
    sc[(app, "plain")] = (cmd, e)
    for label, b in bins.items():
        sc[(app, label)] = ([b, "--db", DB, "run", "--strategy", strategy, "--app", app, "--"] + cmd, e)
res = {k: [] for k in sc}
def launch(k):
    cmd, env = sc[k]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=WORK, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, st, ru = os.wait4(p.pid, 0)
    return (time.monotonic() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3
for k in sc:
    launch(k)
for i in range(rounds):
    order = list(sc) if i % 2 == 0 else list(sc)[::-1]
    for k in order:
        res[k].append(launch(k))
        time.sleep(0.2)
med = statistics.median
for (app, label), v in res.items():
    base = res[(app, "plain")]
    dw = med(v[i][0] - base[i][0] for i in range(rounds))
    dc = med(v[i][1] - base[i][1] for i in range(rounds))
    print(f"{app:12} {label:8} wall {med(x[0] for x in v):7.1f} cpu {med(x[1] for x in v):7.1f}   paired: wall {dw:+6.2f} cpu {dc:+6.2f}")
