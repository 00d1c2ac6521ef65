#!/usr/bin/env python3
"""The daemon's plans against `record`'s, per suite app (issue 26, part 1).

    daemon-plans.py [--cold] [APP...]       (root; after a `warmstart bench` run; KEEP=1
                                            keeps each daemon's database and log;
                                            EXTRA_CONFIG="bursts = false;..." adds
                                            configuration lines; CHURN=1 makes and removes
                                            a tracefs instance in a loop meanwhile)

For each batch app of bench/suite.toml (ready = "exit"; default all of them) it starts a
daemon with its own database and a configuration managing only that app's executable, then
launches the app plainly as a user would: once after a cache drop (the daemon only remembers
a first launch), then warm until the daemon has built a plan (`--cold`: every launch after
a cache drop). With CHURN=1 a shell loop makes and removes a tracefs instance without pause
while it runs, holding the kernel's tracing locks as another tracer on the machine does: the
daemon's attach to a launch then takes 30-200 ms instead of under one. It then compares the
daemon's launch-order plan with the one `record` made in the bench's database (`warmstart
plan compare`): file data in common, each way.
"""
import json, os, shutil, subprocess, sys, time

from own_daemon import STATE, WS, batch_apps, command, drop_caches, start

BENCH_DB = os.path.join(STATE, "bench.db")
cold_learning = "--cold" in sys.argv
apps = batch_apps([a for a in sys.argv[1:] if a != "--cold"])


def ws(*a):
    return subprocess.run([WS, *a], capture_output=True, text=True)


churn = None
if os.environ.get("CHURN"):
    inst = f"/sys/kernel/tracing/instances/ws-dplans-churn-{os.getpid()}"
    churn = subprocess.Popen(["sh", "-c", f"trap 'rmdir {inst} 2>/dev/null; exit 0' TERM; "
                              f"while :; do mkdir {inst} 2>/dev/null; rmdir {inst} 2>/dev/null; done"])

rows = []
for app in apps:
    work, argv, env, exe = command(app)
    tmp, db, run_dir, d = start(exe, "ws-dplans-")
    try:
        launches, phase = 0, ""
        while phase not in ("prefetching", "too-small") and launches < 8:
            if launches == 0 or cold_learning:
                drop_caches()
            subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            launches += 1
            time.sleep(3)  # the learning trace ends T_idle after the launch
            st = json.loads(ws("status", "--json", "--db", db, "--run-dir", run_dir).stdout or "{}")
            phase = (st.get("apps") or [{}])[0].get("phase", "")
        c = ws("--db", db, "plan", "compare", "/", "--other-db", BENCH_DB,
               "--other-app", app["name"], "--json")
        if c.returncode != 0:
            rows.append((app["name"], launches, None, c.stderr.strip()))
        else:
            rows.append((app["name"], launches, json.loads(c.stdout), ""))
    finally:
        d.terminate()
        d.wait(timeout=30)
        if os.environ.get("KEEP"):  # keep the daemon's database and log to look into
            print(f"{app['name']}: kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

if churn:
    churn.terminate()
    churn.wait(timeout=30)

mode = "every launch cold" if cold_learning else "first launch cold, then warm"
mode += ", tracefs instances churned meanwhile" if churn else ""
print(f"daemon plans ({mode}) against record's (bench database {BENCH_DB}), launch-order plans")
print(f"| app | launches | daemon MiB | record MiB | in common MiB | daemon's in record's | record's in daemon's |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, n, c, err in rows:
    if c is None:
        print(f"| {name} | {n} | - | - | - | - | {err} |")
        continue
    o = c["overlap"]
    mib = lambda b: f"{b / 2**20:.1f}"
    print(f"| {name} | {n} | {mib(o['bytes'])} | {mib(o['other_bytes'])} | {mib(o['common_bytes'])} "
          f"| {100 * c['held_by_other']:.1f}% | {100 * c['holds_of_other']:.1f}% |")
