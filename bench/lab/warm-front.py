#!/usr/bin/env python3
"""Warm `run` launches of the bench's batch apps: warmstart's exec to the app's exec (tracefs
`sched_process_exec`), each front binary with its own database copy, ROUNDS interleaved rounds
(the order reversed every other round), medians per app.

  warm-front.py ROUNDS LABEL=BIN:DB [LABEL=BIN:DB ...]

APPS=a,b limits the apps. Each variant needs a database of its own (a newer binary migrates
the one it opens): `sqlite3 /var/lib/warmstart/bench/bench.db ".backup A.db"`. The bench's
`warm+warmstart` scenario measures the same ("front ms" in its Overheads table)."""
import json, os, re, statistics, subprocess, sys, time

STATE = "/var/lib/warmstart/bench"
HERE = os.path.dirname(os.path.abspath(__file__))
W, V = f"{STATE}/work", f"{STATE}/venv"
r = json.load(open(os.path.join(HERE, "..", "results", "results.json")))
BATCH = {"soffice-convert", "gimp-batch", "chromium-dump-dom", "inkscape-export", "python-imports",
         "r-vanilla", "pdflatex", "java-single-file", "npm-version"}
apps = {a["name"]: [c.replace("{work}", f"{W}/{a['name']}").replace("{venv}", V) for c in a["command"]]
        for a in r["apps"] if a["name"] in BATCH}
if os.environ.get("APPS"):
    apps = {k: v for k, v in apps.items() if k in os.environ["APPS"].split(",")}
env = dict(os.environ, npm_config_update_notifier="false",
           npm_config_cache=f"{W}/npm-version/npm-cache", GIMP2_DIRECTORY=f"{W}/gimp-batch/gimp-profile")
rounds = int(sys.argv[1])
variants = [(label, *v.split(":", 1)) for label, v in (a.split("=", 1) for a in sys.argv[2:])]
T = f"/sys/kernel/tracing/instances/ws-warm-front-{os.getpid()}"
os.mkdir(T)


def w(p, v):
    with open(f"{T}/{p}", "w") as f:
        f.write(v)


def one(app, v):
    w("trace", "")
    w("tracing_on", "1")
    p = subprocess.Popen([v[1], "--db", v[2], "run", "--app", app, "--"] + apps[app], cwd=f"{W}/{app}", env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    p.wait(timeout=60)
    w("tracing_on", "0")
    with open(f"{T}/trace") as f:
        ts = [float(m.group(1)) for m in
              re.finditer(r"\s(\d+\.\d+): sched_process_exec: filename=\S+ pid=%d " % p.pid, f.read())]
    return (ts[1] - ts[0]) * 1e3 if len(ts) >= 2 else float("nan")


res = {}
try:
    w("events/sched/sched_process_exec/enable", "1")
    for app in apps:  # a warm cache, and each database migrated
        for v in variants:
            one(app, v)
    for i in range(rounds):
        for app in apps:
            for v in (variants if i % 2 == 0 else variants[::-1]):
                res.setdefault((app, v[0]), []).append(one(app, v))
                time.sleep(0.1)
finally:
    w("events/sched/sched_process_exec/enable", "0")
    os.rmdir(T)
for (app, label), x in res.items():
    print(f"{app:20} {label:8} exec->exec median {statistics.median(x):6.2f} ms  min {min(x):6.2f} max {max(x):6.2f}")
