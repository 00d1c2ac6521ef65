#!/usr/bin/env python3
"""What watching the machine as the burst miner does costs a prefetched launch: a batch app
of the suite (python-imports by default) through `warmstart run` on the bench database, each
launch after a cache drop, beside nothing; beside `fatrace -f O` (a fanotify watch of every
opening, its events read and named); beside fanotify-watch.c (built here with `cc`), the same
watch with file handles instead of descriptors, woken at each event (`fid`) or reading every
50 ms (`fidbatch`); beside a tracefs instance tracing every page-cache insert with no reader
(`trace`: the tracepoint's own cost); beside `warmstart bursts mine` (`mine`). The order is
reversed every other round; printed: each scenario's median and its launches over the bare
one's of the same round (median).

    miner-watch-cost.py ROUNDS [APP]     (root; after a `warmstart bench` run; needs fatrace, cc)
"""
import os, statistics, subprocess, sys, tempfile, time

from own_daemon import HERE, STATE, WS, batch_apps, command, drop_caches

if len(sys.argv) < 2:
    sys.exit(__doc__)
rounds = int(sys.argv[1])
(app,) = batch_apps([sys.argv[2] if len(sys.argv) > 2 else "python-imports"])
work, argv, env, _ = command(app)
cmd = [WS, "--db", os.path.join(STATE, "bench.db"), "-q", "run", "--app", app["name"], "--"] + argv
TRACE = "/sys/kernel/tracing/instances/warmstart-miner-watch-cost"
EVENT = TRACE + "/events/filemap/mm_filemap_add_to_page_cache/enable"
tmp = tempfile.mkdtemp(prefix="miner-watch-cost-")
watch = os.path.join(tmp, "fanotify-watch")
subprocess.run(["cc", "-O2", "-o", watch, os.path.join(HERE, "fanotify-watch.c")], check=True)


def start(k):
    """What runs beside the launch in scenario `k`: a process to stop, or None."""
    if k in ("fid", "fidbatch"):
        return subprocess.Popen([watch, "fb" if k == "fidbatch" else "f"])
    if k == "fanotify":
        return subprocess.Popen(["fatrace", "-f", "O"], stdout=subprocess.DEVNULL)
    if k == "trace":
        os.mkdir(TRACE)
        open(TRACE + "/buffer_size_kb", "w").write("2048")
        open(EVENT, "w").write("1")
        open(TRACE + "/tracing_on", "w").write("1")
    if k == "mine":
        return subprocess.Popen([WS, "bursts", "mine", "--seconds", "30"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return None


def stop(p):
    if p:
        p.terminate()
        p.wait()
    if os.path.isdir(TRACE):
        open(EVENT, "w").write("0")
        os.rmdir(TRACE)


sc = ["none", "fanotify", "fid", "fidbatch", "trace", "mine"]
res = {k: [] for k in sc}
p = None
try:
    for r in range(rounds):
        for k in sc if r % 2 == 0 else sc[::-1]:
            p = start(k)
            time.sleep(0.8)
            drop_caches()
            time.sleep(0.3)
            t = time.monotonic()
            subprocess.run(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            res[k].append((time.monotonic() - t) * 1000)
            stop(p)
            p = None
            time.sleep(0.3)
        print(r, " ".join("%s %.0f" % (k, res[k][-1]) for k in sc), flush=True)
finally:
    stop(p)
    os.remove(watch)
    os.rmdir(tmp)
for k in sc:
    print("%-9s median %6.0f  over none %.3f" % (k, statistics.median(res[k]),
                                                 statistics.median(a / b for a, b in zip(res[k], res["none"]))))
