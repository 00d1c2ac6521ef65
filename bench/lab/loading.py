#!/usr/bin/env python3
"""ClusterFetch's evaluation on one loading scenario (issue #27): a running application
loads when told to, and the daemon prefetches the loading's burst when its trigger opens.

    sudo bench/lab/loading.py [ROUNDS] [LEARN]       (defaults 5, 3; root)

The loader: a Python process (the bench suite's virtualenv, `bench/install-suite`) that
starts, says `waiting`, and on a line on stdin opens a project file (the trigger) and
imports numpy, pandas, matplotlib.pyplot and sympy, then says `loaded`. Timed from the line
written to `loaded` read:

  cold    the page cache dropped after the loader started (no daemon);
  warm    a new loader process loads right after the cold one: everything cached;
  bursts  the page cache dropped after the loader started, the daemon running with the
          bursts it mined during LEARN cold loadings (each after a cache drop).

Rounds interleave the three. The daemon runs with its own database, configuration
(`include` names no program, so only bursts act) and run directory, and is stopped between
rounds so that the cold loadings run without it. Prints medians and the loading gap closed,
(cold - bursts) / (cold - warm); `--json` prints them as JSON.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

WS = os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(__file__), "../../target/release/warmstart"))
VENV = os.environ.get("VENV", "/var/lib/warmstart/bench/venv/bin/python")
args = [a for a in sys.argv[1:] if not a.startswith("--")]
rounds = int(args[0]) if args else 5
learn = int(args[1]) if len(args) > 1 else 3
as_json = "--json" in sys.argv
tmp = tempfile.mkdtemp(prefix="ws-loading-", dir="/var/tmp")
# The project file lives outside the excluded directories (/tmp, /var/tmp, /run, ...).
proj_dir = "/srv/ws-loading"
os.makedirs(proj_dir, exist_ok=True)
project = os.path.join(proj_dir, "project.cfg")
open(project, "w").write("numpy pandas matplotlib sympy\n")
db = os.path.join(tmp, "ws.db")
run_dir = os.path.join(tmp, "run")
cfg = os.path.join(tmp, "config.toml")
open(cfg, "w").write('include = ["/nonexistent"]\nburst_check_secs = 5.0\n')
LOADER = f"""
import sys
print('waiting', flush=True)
while sys.stdin.readline():
    open({project!r}).read()
    import numpy, pandas, matplotlib.pyplot, sympy
    print('loaded', flush=True)
"""


def drop_caches():
    subprocess.run(["sync"])
    open("/proc/sys/vm/drop_caches", "w").write("3\n")


class Loader:
    def __init__(self):
        self.p = subprocess.Popen([VENV, "-c", LOADER], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        assert self.p.stdout.readline().strip() == "waiting"

    def load(self):
        t0 = time.monotonic()
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        assert line == "loaded", line
        return (time.monotonic() - t0) * 1000

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def daemon():
    d = subprocess.Popen([WS, "--db", db, "daemon", "--config", cfg, "--run-dir", run_dir],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(tmp, "daemon.log"), "a"))
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        s = subprocess.run([WS, "status", "--json", "--run-dir", run_dir, "--db", db],
                           capture_output=True, text=True)
        if s.returncode == 0 and json.loads(s.stdout)["daemon"]["running"]:
            break
        time.sleep(0.1)
    time.sleep(1.0)  # its miner and trigger marks are set up after the pid file
    return d


def stop(d):
    d.terminate()
    d.wait(timeout=60)


def loading(drop):
    """One loading in a fresh loader process, the cache dropped after it started or not."""
    l = Loader()
    time.sleep(0.5)
    if drop:
        drop_caches()
        time.sleep(0.5)
    ms = l.load()
    l.close()
    return ms


def bursts():
    out = subprocess.run([WS, "--db", db, "bursts", "list", "--json"], capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []


try:
    d = daemon()
    for i in range(learn):  # the miner learns the loading's burst
        loading(True)
        time.sleep(3)
    time.sleep(2)
    learned = bursts()
    stop(d)
    res = {"cold": [], "warm": [], "bursts": []}
    for r in range(rounds):
        res["cold"].append(loading(True))
        res["warm"].append(loading(False))
        d = daemon()
        res["bursts"].append(loading(True))
        time.sleep(6)  # its check, then stop
        stop(d)
    final = bursts()
finally:
    shutil.rmtree(tmp, ignore_errors=True)

med = {k: statistics.median(v) for k, v in res.items()}
gap = med["cold"] - med["warm"]
closed = (med["cold"] - med["bursts"]) / gap if gap > 0 else float("nan")
summary = {"rounds": rounds, "learning_loadings": learn, "median_ms": med, "samples_ms": res,
           "gap_closed": closed, "bursts_learned": len(learned),
           "burst_triggers": [b.get("path") for b in learned],
           "bursts_after": [{k: b.get(k) for k in ("path", "bytes", "hits", "active", "last_check")} for b in final]}
if as_json:
    print(json.dumps(summary))
else:
    print(f"loading (numpy, pandas, matplotlib, sympy after {project} opens), {rounds} rounds:")
    for k in ("cold", "warm", "bursts"):
        print(f"  {k:7} median {med[k]:7.0f} ms  ({', '.join(f'{x:.0f}' for x in res[k])})")
    print(f"  loading gap closed by bursts: {closed * 100:.0f}%")
    print(f"  bursts learned: {len(learned)}; triggers: {summary['burst_triggers']}")
    print(f"  after the rounds: {summary['bursts_after']}")
