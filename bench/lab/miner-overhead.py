#!/usr/bin/env python3
"""What ClusterFetch's miner costs (issue #27): the daemon's CPU while idle and during a
1 GiB buffered sequential read by fio, with bursts on and off, and fio's throughput
against no daemon at all.

    sudo bench/lab/miner-overhead.py [ROUNDS] [IDLE_SECONDS]     (defaults 3, 30; root, fio)

Each round runs, in turn: no daemon, the daemon with `bursts = false`, the daemon with the
default configuration (bursts on). Each daemon has its own database, configuration and run
directory. For each: the daemon's CPU over IDLE_SECONDS with nothing running, then fio
reading a 1 GiB file after a cache drop (`--rw=read --bs=1M --ioengine=psync`, buffered, so
every page is a page-cache insert the miner sees), the daemon's CPU over it and fio's MiB/s.
Prints medians; `--json` prints them as JSON.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from own_daemon import drop_caches, spawn

args = [a for a in sys.argv[1:] if not a.startswith("--")]
rounds = int(args[0]) if args else 3
idle = float(args[1]) if len(args) > 1 else 30.0
as_json = "--json" in sys.argv
tmp = tempfile.mkdtemp(prefix="ws-miner-", dir="/var/tmp")
data = os.path.join(tmp, "fio.dat")


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def fio():
    drop_caches()
    o = subprocess.run(["fio", "--name=seq", "--rw=read", "--bs=1M", "--size=1G", f"--filename={data}",
                        "--ioengine=psync", "--direct=0", "--output-format=json"],
                       capture_output=True, text=True, check=True)
    j = json.loads(o.stdout)
    return j["jobs"][0]["read"]["bw"] / 1024.0  # KiB/s -> MiB/s


def daemon(name, config):
    return spawn(os.path.join(tmp, name), config, 2)[2]


def measure(kind):
    p = None
    if kind != "none":
        p = daemon(kind, "bursts = false\n" if kind == "no-bursts" else "")
    try:
        r = {}
        if p:
            c0 = cpu(p.pid)
            time.sleep(idle)
            r["idle_cpu_pct"] = 100 * (cpu(p.pid) - c0) / idle
            c0, t0 = cpu(p.pid), time.monotonic()
        r["fio_mib_s"] = fio()
        if p:
            span = time.monotonic() - t0
            r["fio_cpu_pct"] = 100 * (cpu(p.pid) - c0) / span
        return r
    finally:
        if p:
            p.terminate()
            p.wait(timeout=30)


subprocess.run(["fio", "--name=make", "--rw=write", "--bs=1M", "--size=1G", f"--filename={data}",
                "--output-format=terse"], capture_output=True, check=True)
results = {k: [] for k in ("none", "no-bursts", "bursts")}
try:
    for i in range(rounds):
        for k in results:
            results[k].append(measure(k))
            print(f"round {i + 1} {k}: {results[k][-1]}", file=sys.stderr)
finally:
    shutil.rmtree(tmp, ignore_errors=True)
summary = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in results.items()}
base = summary["none"]["fio_mib_s"]
for k in ("no-bursts", "bursts"):
    summary[k]["fio_lost_pct"] = 100 * (base - summary[k]["fio_mib_s"]) / base
if as_json:
    print(json.dumps(summary))
else:
    print(f"{rounds} rounds, medians; fio: 1 GiB buffered sequential read after a cache drop")
    print(f"{'daemon':<12}{'idle CPU':>10}{'CPU in fio':>12}{'fio MiB/s':>11}{'lost':>8}")
    for k, v in summary.items():
        print(f"{k:<12}{v.get('idle_cpu_pct', 0):>9.2f}%{v.get('fio_cpu_pct', 0):>11.2f}%"
              f"{v['fio_mib_s']:>11.0f}{v.get('fio_lost_pct', 0):>7.1f}%")
