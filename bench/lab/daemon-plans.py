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
plan compare`): file data in common, each way; and with a plan `record` makes of the same
command right after (two cold runs, as the bench's), with the bench's record plan against
that one: what two recordings of a command made at different times differ by.
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
        d.terminate()
        d.wait(timeout=30)
        # record's plan of the same command, the same hour (the daemon stopped: it would
        # otherwise prefetch the recording's cold launches).
        rec_db = os.path.join(tmp, "record.db")
        r = subprocess.run([WS, "--db", rec_db, "-q", "record", "--runs", "2", "--baseline-runs",
                            "0", "--no-emulate", "--app", app["name"], "--"] + argv, cwd=work,
                           env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=600)
        now = ws("--db", db, "plan", "compare", "/", "--other-db", rec_db, "--other-app",
                 app["name"], "--json") if r.returncode == 0 else r
        again = ws("--db", rec_db, "plan", "compare", app["name"], "--other-db", BENCH_DB,
                   "--other-app", app["name"], "--json") if r.returncode == 0 else r
        parse = lambda x: json.loads(x.stdout) if x.returncode == 0 else None
        err = " ".join(x.stderr.strip() for x in (c, now, again) if x.returncode != 0)
        rows.append((app["name"], launches, parse(c), parse(now), parse(again), err))
    finally:
        if d.poll() is None:
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
print("and against a `record` of the same command made right after (\"record now\"), with the")
print("bench's record plan against that one (\"bench in now\": two recordings' own difference)")
print(f"| app | launches | daemon MiB | record MiB | in common MiB | daemon's in record's | record's in daemon's "
      f"| record now MiB | daemon's in record now's | record now's in daemon's | bench in now / now in bench |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
mib = lambda b: f"{b / 2**20:.1f}"
pct = lambda x: f"{100 * x:.1f}%"
for name, n, c, now, again, err in rows:
    cells = ["-"] * 9
    if c:
        o = c["overlap"]
        cells[:5] = [mib(o["bytes"]), mib(o["other_bytes"]), mib(o["common_bytes"]),
                     pct(c["held_by_other"]), pct(c["holds_of_other"])]
    if now:
        cells[5:8] = [mib(now["overlap"]["other_bytes"]), pct(now["held_by_other"]),
                      pct(now["holds_of_other"])]
    if again:
        cells[8] = f"{pct(again['holds_of_other'])} / {pct(again['held_by_other'])}"
    print(f"| {name} | {n} | " + " | ".join(cells) + f" |{' ' + err if err else ''}")
