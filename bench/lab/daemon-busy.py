#!/usr/bin/env python3
"""The daemon on a machine with many processes: how long after an app's exec its prefetch
issues its first request. N idle processes (`sleep`) run throughout; each round, for each
daemon binary (interleaved, the order reversed every other round), a daemon is started on a
copy of the bench daemon's state (it learned the bench's apps), the cache dropped, the
bench's pdflatex launched cold (an executable, not a script: its prefetch starts at the
open of its exec) and the daemon stopped; the daemon's own figure for the launch ("exec to
first prefetch request", logged as it stops) is collected. Medians.

  daemon-busy.py ROUNDS N LABEL=BIN...     (root; after a `warmstart bench` run)"""
import os, re, shutil, socket, statistics, subprocess, sys, tempfile, time

STATE = "/var/lib/warmstart/bench"
WORK = f"{STATE}/work"
CMD = ["pdflatex", "-interaction=batchmode", f"-output-directory={WORK}", f"{WORK}/doc.tex"]
rounds, n = int(sys.argv[1]), int(sys.argv[2])
bins = dict(a.split("=", 1) for a in sys.argv[3:])
tmp = tempfile.mkdtemp(prefix="daemon-busy-", dir="/var/lib/warmstart")
for label in bins:
    d = f"{tmp}/{label}"
    os.makedirs(f"{d}/run")
    subprocess.run(["sqlite3", f"{STATE}/daemon/daemon.db", f".backup {d}/daemon.db"], check=True)
    with open(f"{d}/config.toml", "w") as f:
        f.write('include = ["/usr/bin/pdftex"]\nn_rawseq = 2\nn_chk = 1000000\nmin_launch_kb = 0\n')
idle = [subprocess.Popen(["sleep", "3600"]) for _ in range(n)]
res = {k: [] for k in bins}
wall = {k: [] for k in bins}


def one(label):
    d = f"{tmp}/{label}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = f"{d}/run/notify.sock"
    if os.path.exists(path):
        os.unlink(path)
    sock.bind(path)
    sock.settimeout(30)
    log = open(f"{d}/log", "w")
    p = subprocess.Popen([bins[label], "--db", f"{d}/daemon.db", "daemon", "--config", f"{d}/config.toml",
                          "--run-dir", f"{d}/run"], env=dict(os.environ, NOTIFY_SOCKET=path),
                         stdout=subprocess.DEVNULL, stderr=log)
    while b"READY=1" not in sock.recv(4096):
        pass
    subprocess.run(["sync"])
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    time.sleep(0.5)
    t0 = time.monotonic()
    subprocess.run(CMD, cwd=WORK, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall[label].append((time.monotonic() - t0) * 1e3)
    time.sleep(0.5)
    p.terminate()
    p.wait()
    sock.close()
    log.close()
    m = re.findall(r"exec to first prefetch request: median (-?\d+) us", open(f"{d}/log").read())
    if m:
        res[label].append(int(m[-1]))


try:
    for i in range(rounds):
        order = list(bins) if i % 2 == 0 else list(bins)[::-1]
        for label in order:
            one(label)
finally:
    for p in idle:
        p.kill()
        p.wait()
    shutil.rmtree(tmp)
for label in bins:
    v = res[label]
    print(f"{label:8} N={n}: exec to first request median {statistics.median(v) if v else float('nan'):8.0f} us "
          f"({len(v)} launches: {sorted(v)}), pdflatex wall median {statistics.median(wall[label]):6.1f} ms")
