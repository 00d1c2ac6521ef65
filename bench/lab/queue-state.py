#!/usr/bin/env python3
"""Whether a cold launch's disk queue is stopped for lack of room, over time.

    queue-state.py DISK -- CMD...      e.g. queue-state.py vda -- warmstart run -- python3.11 ...

Drops the page cache, runs CMD and, until it exits (at most 0.4 s), samples the block layer's
debugfs view of DISK's single hardware queue in a tight loop: its state (`STOPPED`: the
driver had no room, e.g. a full virtio ring), the requests in flight (`busy`) and those
waiting for the driver (`dispatch`). Prints the share of samples stopped and the mean
counts per 5 ms. Mounts debugfs for the run if it is not mounted, and unmounts it after.
The sampler itself takes a CPU, so compare runs of this script, not launch times.
"""
import collections, os, subprocess, sys, time

disk = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]
mounted = os.path.isdir("/sys/kernel/debug/block")
if not mounted:
    subprocess.run(["mount", "-t", "debugfs", "none", "/sys/kernel/debug"], check=True)
try:
    h = f"/sys/kernel/debug/block/{disk}/hctx0/"
    fds = [os.open(h + n, os.O_RDONLY) for n in ("state", "busy", "dispatch")]
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    samples = []
    while p.poll() is None:
        t = time.monotonic() - t0
        if t > 0.4:
            break
        state, busy, disp = (os.pread(fd, 65536, 0).decode() for fd in fds)
        samples.append((t, "STOPPED" in state, busy.count("\n"), disp.count("\n")))
    p.wait()
    for fd in fds:
        os.close(fd)
finally:
    if not mounted:
        subprocess.run(["umount", "/sys/kernel/debug"], check=False)
bins = collections.defaultdict(list)
for s in samples:
    bins[int(s[0] * 1e3 // 5)].append(s)
print(f"{len(samples)} samples; stopped in {sum(s[1] for s in samples)}")
print("    ms     stopped  in flight  waiting")
for k in sorted(bins)[:20]:
    v = bins[k]
    print(f"{k * 5:3d}-{k * 5 + 5:3d} {100 * sum(s[1] for s in v) / len(v):8.0f}% "
          f"{sum(s[2] for s in v) / len(v):9.1f} {sum(s[3] for s in v) / len(v):8.1f}")
