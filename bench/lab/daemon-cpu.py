#!/usr/bin/env python3
"""What the daemon's CPU costs a launch it serves: the bench daemon (a copy of its state, the
configuration of the bench's daemon directory) started before each cold launch of APP, its
CPU time over the launch (`/proc/PID/stat`, 10 ms ticks: the whole process, threads that
ended included) and that of its threads alive throughout (`schedstat`, ns: the burst miner
`warmstart-burst`, its open monitor `warmstart-opens`, the main thread), per variant,
variants interleaved; medians.

    daemon-cpu.py ROUNDS APP NAME=SPEC...

SPEC as for daemon-variants.py: configuration lines separated by ';', a first item `@PATH`
runs the warmstart binary at PATH (its warmstart-cli beside it). Example
(docs/measurements.md, 2026-12-08):

    daemon-cpu.py 3 chromium-dump-dom old=@/tmp/old/warmstart new= nobursts="bursts = false"
"""
import os, shutil, statistics, subprocess, sys, tempfile, time

from own_daemon import STATE, batch_apps, command, drop_caches, variant

if len(sys.argv) < 4:
    sys.exit(__doc__)
rounds, name = int(sys.argv[1]), sys.argv[2]
variants = [v.partition("=")[::2] for v in sys.argv[3:]]
apps = batch_apps([name])
if not apps:
    sys.exit(f"{name}: not a batch app of the suite")
work, argv, env, _ = command(apps[0])
base = open(os.path.join(STATE, "daemon", "config.toml")).read()
TICK = os.sysconf("SC_CLK_TCK")


def process_ms(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) * 1000 / TICK


def threads_ns(pid):
    out = {}
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
            out[(t, comm)] = int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except OSError:
            pass
    return out


res = {v: [] for v, _ in variants}
for _ in range(rounds):
    for var, spec in variants:
        d = tempfile.mkdtemp(prefix="daemon-cpu-")
        try:
            shutil.copy(os.path.join(STATE, "daemon", "daemon.db"), d)
            p = variant(d, base, spec, 1.0)
            drop_caches()
            time.sleep(0.3)
            c0, t0, w0 = process_ms(p.pid), threads_ns(p.pid), time.monotonic()
            subprocess.run(argv, cwd=work, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            wall = (time.monotonic() - w0) * 1e3
            c1, t1 = process_ms(p.pid), threads_ns(p.pid)
            per = {}
            for k, v in t1.items():
                if k in t0:
                    per[k[1]] = per.get(k[1], 0.0) + (v - t0[k]) / 1e6
            res[var].append((wall, c1 - c0, per))
            p.terminate()
            p.wait()
        finally:
            shutil.rmtree(d, ignore_errors=True)
for var, r in res.items():
    names = sorted({n for _, _, per in r for n in per})
    threads = ", ".join(f"{n} {statistics.median(per.get(n, 0.0) for _, _, per in r):.1f}"
                        for n in names)
    print(f"{name} {var:10s} launch {statistics.median(x[0] for x in r):7.1f} ms; daemon CPU "
          f"{statistics.median(x[1] for x in r):5.0f} ms; threads alive throughout (ms): {threads}")
