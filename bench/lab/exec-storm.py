#!/usr/bin/env python3
"""What an exec storm costs the daemon, and whether it delays the commands (issue 26).

    exec-storm.py [DISTINCT] [REPEATS] [SECONDS]     (defaults 500, 200, 60; root)

With TWICE=1 each distinct line is launched twice (a command's second launch is learned, so
this storm makes the daemon trace), and PARALLEL=N keeps N commands in flight instead of one;
the daemon's threads and tracefs instances are sampled every 20 ms for their peaks.

Starts `warmstart daemon` with its own database, configuration and run directory (the
defaults but for those), waits until it runs, then launches DISTINCT different
`sh -c 'echo N'` command lines and REPEATS `/bin/true`, interleaved and spread evenly over
SECONDS (0: back to back), as a busy script would; then does the same storm without the
daemon. Each command is timed from spawn to exit: a delayed launch shows in the slowest. Prints the daemon's CPU time
(utime+stime from /proc), its peak RSS (VmHWM), its threads at the end, the database's
growth, the tracefs instances left, and the storm's wall time with and without the daemon.
"""
import os, shutil, subprocess, sys, tempfile, time

WS = os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(__file__), "../../target/release/warmstart"))
distinct = int(sys.argv[1]) if len(sys.argv) > 1 else 500
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 200
seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 60.0
tmp = tempfile.mkdtemp(prefix="ws-storm-")
db = os.path.join(tmp, "ws.db")
run_dir = os.path.join(tmp, "run")
cfg = os.path.join(tmp, "config.toml")
open(cfg, "w").write("")  # the defaults


twice = os.environ.get("TWICE") == "1"
parallel = int(os.environ.get("PARALLEL", "1"))


def storm():
    """The storm's wall time and each command's spawn-to-exit time, in ms."""
    cmds = [["sh", "-c", f"echo {i}"] for i in range(distinct) for _ in range(2 if twice else 1)]
    step = max(1, round(distinct / max(repeats, 1)))
    for j in range(repeats):  # /bin/true between the sh -c lines
        cmds.insert(min(len(cmds), (j + 1) * (step + 1) - 1), ["/bin/true"])
    gap = seconds / len(cmds)
    times = []
    running = []
    t = time.monotonic()
    def reap():
        for r in list(running):
            if r[0].poll() is not None:
                times.append((time.monotonic() - r[1]) * 1000)
                running.remove(r)

    for n, c in enumerate(cmds):
        # Commands in flight are polled every 0.5 ms while waiting for the next one's turn,
        # so each is timed to its exit, not to the next command's start.
        while time.monotonic() < t + n * gap or len(running) >= parallel:
            reap()
            time.sleep(0.0005)
        running.append((subprocess.Popen(c, stdout=subprocess.DEVNULL), time.monotonic()))
    for p, s0 in running:
        p.wait()
        times.append((time.monotonic() - s0) * 1000)
    return time.monotonic() - t, sorted(times)


peak = {"threads": 0, "instances": 0}


def monitor(pid, stop):
    while not stop.is_set():
        try:
            peak["threads"] = max(peak["threads"], stat(pid)[2])
        except OSError:
            pass
        peak["instances"] = max(peak["instances"], instances())
        time.sleep(0.02)


def pct(v, q):
    return v[min(len(v) - 1, int(q * len(v)))]


def stat(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    ticks = int(f[11]) + int(f[12])
    st = dict(l.split(":", 1) for l in open(f"/proc/{pid}/status") if ":" in l)
    return ticks / os.sysconf("SC_CLK_TCK"), int(st["VmHWM"].split()[0]), int(st["Threads"])


def instances():
    try:
        return len([n for n in os.listdir("/sys/kernel/tracing/instances") if n.startswith("warmstart-")])
    except OSError:
        return 0


def dbsize():
    return sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))


d = subprocess.Popen([WS, "--db", db, "daemon", "--config", cfg, "--run-dir", run_dir],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "log"), "w"))
try:
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(run_dir, "daemon.pid")) and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    time.sleep(1)
    cpu0, _, _ = stat(d.pid)
    size0 = dbsize()
    import threading
    stop = threading.Event()
    mon = threading.Thread(target=monitor, args=(d.pid, stop))
    mon.start()
    with_daemon, lat_d = storm()
    time.sleep(3)  # traces end after their idle period
    stop.set()
    mon.join()
    cpu1, hwm, threads = stat(d.pid)
    peak_instances = instances()
    size1 = dbsize()
finally:
    d.terminate()
    d.wait(timeout=30)
left = instances()
without, lat_0 = storm()
print(f"storm: {distinct} distinct `sh -c`{' (each twice)' if twice else ''} and {repeats} "
      f"`/bin/true` over {seconds:.0f} s, {parallel} at a time")
print(f"  daemon peaks: {peak['threads']} threads, {peak['instances']} tracefs instances")
print(f"  wall with the daemon {with_daemon:.2f} s, without {without:.2f} s")
for name, v in (("with the daemon", lat_d), ("without", lat_0)):
    print(f"  per command {name}: median {pct(v, 0.5):.2f} ms, p99 {pct(v, 0.99):.2f} ms, "
          f"slowest {v[-1]:.2f} ms")
span = with_daemon + 3
print(f"  daemon CPU {cpu1 - cpu0:.2f} s over {span:.1f} s "
      f"({100 * (cpu1 - cpu0) / span:.2f}% of one core); peak RSS {hwm / 1024:.1f} MiB; "
      f"{threads} threads at the end")
print(f"  database {size0 / 1024:.0f} KiB -> {size1 / 1024:.0f} KiB (+{(size1 - size0) / 1024:.0f} KiB); "
      f"tracefs instances after the storm {peak_instances} (the daemon's exec watch), after the stop {left}")
shutil.rmtree(tmp, ignore_errors=True)
