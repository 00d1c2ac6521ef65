#!/usr/bin/env python3
"""A fresh daemon's choices over many cold launches of one suite app (issue 26: what a daemon
user's first weeks cost).

    daemon-cold-loop.py N [APP...]      (root; after a `warmstart bench` run set the apps up;
                                        default npm-version; WARMSTART_BIN picks the build;
                                        KEEP=1 keeps each daemon's database and log;
                                        EXTRA_CONFIG="bursts = false;..." adds
                                        configuration lines)

For each batch app of bench/suite.toml it starts a daemon with its own database managing only
that app's executable (the bench daemon's configuration: n_rawseq 2, no checks), then launches
the app N times, each after a cache drop, 2.5 s apart (a learning trace ends T_idle after the
launch). It prints the daemon's launches as its database holds them: per launch the strategy
(`none`: nothing prefetched), whether `auto` chose it, and the daemon's time; then the wall
times this script measured of the launches the daemon made plain by choice, and of the rest
after learning.
"""
import json, os, shutil, sqlite3, statistics, subprocess, sys, time

from own_daemon import batch_apps, command, drop_caches, start

n = int(sys.argv[1])
for app in batch_apps(sys.argv[2:] or ["npm-version"]):
    work, argv, env, exe = command(app)
    tmp, db, run_dir, d = start(exe, "ws-dcold-")
    walls = []
    try:
        for i in range(n):
            drop_caches()
            t = time.monotonic()
            subprocess.run(argv, cwd=work, env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            walls.append((time.monotonic() - t) * 1000)
            time.sleep(2.5)
    finally:
        d.terminate()
        d.wait(timeout=30)
    con = sqlite3.connect(db)
    rows = [json.loads(r[0]) for r in con.execute("SELECT data FROM launches ORDER BY id")]
    con.close()
    if os.environ.get("KEEP"):  # keep the daemon's database and log to look into
        print(f"{app['name']}: kept {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{app['name']}: {n} cold launches, the daemon recorded {len(rows)}")
    for i, l in enumerate(rows):
        print(f"  {i + 1:2} {l.get('strategy') or '-':10} {'auto' if l.get('auto') else '    '} "
              f"{l.get('wall_ms', 0):7.0f} ms")
    # The daemon's records follow its launches from the first it learned from (the second).
    learned = [w for w in walls[3:]]
    plain_by_choice = sum(1 for l in rows if l.get("strategy") == "none" and l.get("auto"))
    print(f"  plain by auto's choice: {plain_by_choice}; script's wall ms after learning: "
          f"median {statistics.median(learned):.0f}, max {max(learned):.0f}, "
          f"all {' '.join(f'{w:.0f}' for w in learned)}")
