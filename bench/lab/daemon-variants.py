#!/usr/bin/env python3
"""The suite's batch apps cold, warm, with `run`, and with the daemon under configuration
variants, interleaved; the daemon started before each launch (then the cache dropped, as the
bench does), on a copy of the bench daemon's state: daemon-vs-run.py for any batch app and
any configuration.

    daemon-variants.py ROUNDS NAME=LINES... [-- APP...]
        (root; after a `warmstart bench` run with the daemon scenario; LINES are
        configuration lines added to the bench daemon's, separated by ';', e.g.
        `daemon= nobursts=bursts = false`; WARMSTART_BIN picks the build)

Prints per app each scenario's median, the gap it closed, and its launches over `run`'s of
the same round (median).
"""
import os, shutil, statistics, subprocess, sys, tempfile, time

from own_daemon import WS, batch_apps, command, drop_caches

SRC = "/var/lib/warmstart/bench/daemon"
args = sys.argv[1:]
if len(args) < 2:
    sys.exit(__doc__)
rounds, rest = int(args[0]), args[1:]
variants, names = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
variants = [v.partition("=")[::2] for v in variants]
base = open(f"{SRC}/config.toml").read()
for app in batch_apps(names):
    work, argv, env, _ = command(app)
    d = tempfile.mkdtemp(prefix="daemon-variants-")
    shutil.copy(f"{SRC}/daemon.db", d)

    def daemon(lines):
        open(f"{d}/config.toml", "w").write(base + lines.replace(";", "\n") + "\n")
        p = subprocess.Popen([WS, "--db", f"{d}/daemon.db", "-q", "daemon", "--config",
                              f"{d}/config.toml", "--run-dir", f"{d}/run"],
                             stderr=open(f"{d}/log", "a"), process_group=0)
        t0 = time.monotonic()
        while not os.path.exists(f"{d}/run/daemon.pid"):
            if time.monotonic() - t0 > 30:
                sys.exit(f"the daemon did not start: {open(f'{d}/log').read()}")
            time.sleep(0.02)
        time.sleep(0.4)
        return p

    def launch(c):
        t = time.monotonic()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
        return (time.monotonic() - t) * 1000

    sc = ["cold", "warm", "run"] + [n for n, _ in variants]
    res = {k: [] for k in sc}
    print(f"=== {app['name']}", flush=True)
    for r in range(rounds):
        order = sc if r % 2 == 0 else sc[::-1]
        for k in order:
            p = daemon(dict(variants)[k]) if k in dict(variants) else None
            if k != "warm":
                drop_caches()
            time.sleep(0.3)
            c = argv if k != "run" else [WS, "--db", "/var/lib/warmstart/bench/bench.db", "-q",
                                         "run", "--app", app["name"], "--"] + argv
            res[k].append(launch(c))
            if p:
                p.terminate()
                p.wait()
            time.sleep(0.3)
    c, w = statistics.median(res["cold"]), statistics.median(res["warm"])
    for k in sc:
        m = statistics.median(res[k])
        paired = statistics.median(a / b for a, b in zip(res[k], res["run"]))
        print("%-12s %7.0f  gap closed %4.0f%%  over run %.3f" % (k, m, 100 * (c - m) / (c - w), paired), flush=True)
    shutil.rmtree(d)
