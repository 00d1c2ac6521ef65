#!/usr/bin/env python3
"""The suite's batch apps cold, warm, with `run`, and with the daemon under configuration
variants (or builds), interleaved; the daemon started before each launch (then the cache
dropped, as the bench does), on a copy of the bench daemon's state.

    daemon-variants.py ROUNDS NAME=LINES... [-- APP...]
        (root; after a `warmstart bench` run with the daemon scenario; LINES are
        configuration lines added to the bench daemon's, separated by ';'; a first item
        `@PATH` runs the warmstart binary at PATH for that variant (its warmstart-cli beside
        it). WARMSTART_BIN picks the build of the rest and of `run`.)

    daemon-variants.py 10 daemon= nobursts="bursts = false" -- python-imports
    daemon-variants.py 8 new= old=@/tmp/old/warmstart -- pdflatex r-vanilla

Prints per app each scenario's median, the gap it closed, and its launches over `run`'s of
the same round (median). (It replaces daemon-vs-run.py, python-imports with and without
bursts: the first example.)
"""
import os, shutil, statistics, subprocess, sys, tempfile, time

from own_daemon import STATE, WS, batch_apps, command, drop_caches, variant

SRC = os.path.join(STATE, "daemon")
args = sys.argv[1:]
if len(args) < 2:
    sys.exit(__doc__)
rounds, rest = int(args[0]), args[1:]
variants, names = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
variants = dict(v.partition("=")[::2] for v in variants)
if set(variants) & {"cold", "warm", "run"}:
    sys.exit("cold, warm and run are this script's own scenarios")
base = open(os.path.join(SRC, "config.toml")).read()


for app in batch_apps(names):
    work, argv, env, _ = command(app)
    d = tempfile.mkdtemp(prefix="daemon-variants-")
    shutil.copy(os.path.join(SRC, "daemon.db"), d)
    sc = ["cold", "warm", "run", *variants]
    res = {k: [] for k in sc}
    print(f"=== {app['name']}", flush=True)
    p = None
    try:
        for r in range(rounds):
            for k in sc if r % 2 == 0 else sc[::-1]:
                p = variant(d, base, variants[k], 0.4) if k in variants else None
                if k != "warm":
                    drop_caches()
                time.sleep(0.3)
                c = argv if k != "run" else [WS, "--db", os.path.join(STATE, "bench.db"), "-q",
                                             "run", "--app", app["name"], "--"] + argv
                t = time.monotonic()
                subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=work)
                res[k].append((time.monotonic() - t) * 1000)
                if p:
                    p.terminate()
                    p.wait()
                    p = None
                time.sleep(0.3)
    finally:
        # Its own process group: a Ctrl-C here does not reach it.
        if p:
            p.terminate()
            p.wait()
        shutil.rmtree(d)
    c, w = statistics.median(res["cold"]), statistics.median(res["warm"])
    for k in sc:
        m = statistics.median(res[k])
        paired = statistics.median(a / b for a, b in zip(res[k], res["run"]))
        print("%-12s %7.0f  gap closed %4.0f%%  over run %.3f" % (k, m, 100 * (c - m) / (c - w), paired), flush=True)
