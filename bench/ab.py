#!/usr/bin/env python3
"""Interleaved A/B of `warmstart run` variants on one command (root; the app must have a plan).

    bench/ab.py ROUNDS VARIANT... -- CMD...

A VARIANT is NAME=ARGS: ARGS (comma-separated) are added to `warmstart run`, e.g.
`nowin=--window-kb=0`; ARGS that start with @PATH run the warmstart binary at PATH instead
(e.g. `old=@/tmp/warmstart-old` to compare two builds), and ARGS of the form +NAME=VALUE set
an environment variable for that variant only; an ARG of the form %FILE:FILE... reads those
files into the page cache after the drop, just before the launch (what a launch would gain if
they were warm); an ARG of the form ^FILE=VALUE writes VALUE to a sysfs or procfs FILE for
that variant's launches (e.g. `^/sys/fs/ext4/vda/inode_readahead_blks=512`) and puts the old
value back after each; an ARG of the form &FD hands that variant's launches /dev/null open
at descriptor FD (no close-on-exec), as a caller that leaves descriptors open would (e.g.
`&64`: the launch then starts with a larger descriptor table). Two names are special: `cold`
runs CMD bare after dropping the page cache, `warm` runs CMD bare on a warm cache; a variant
whose name starts with `bare` also runs CMD bare (after a drop, or on a warm cache if it
starts with `barewarm`), so a knob can be tried on launches without warmstart too
(`barecold128=^/sys/block/vda/queue/read_ahead_kb=128`). Every other variant drops the cache first
(after a `sync`, as `warmstart demo` does), except one whose name starts with `warm`
(`warmrun=`: warmstart on a warm cache, its fixed cost).
The order of the variants alternates from round to round.

This VM's CPU speed drifts by ±30% between launches, so single medians mislead; printed are
the per-round paired differences against the first variant (median), the gap closed from
those paired differences, and the off-CPU time (wall minus the CPU time of the launched
process and its waited-for children): the part of a launch prefetching can change, and
far less noisy than the wall time. Also printed: the median user and system CPU time of the
launched process (the kernel splits them by 4 ms tick samples, so only their sum is exact).
AB_SAMPLES=1 prints every launch's times too. The warmstart binary is
../target/release/warmstart unless WARMSTART_BIN says otherwise.

A drop keeps the pages of files some process has mapped, so everything this harness maps is
warm for every launch. A full Python maps libz, libbz2, liblzma and the C.UTF-8 locale, which
the demo workload reads too, and the prefetched launches measured with it waited ~5 ms less
than in `warmstart demo` (a Rust process mapping libc, ld.so and libgcc_s). So the harness
re-executes itself as a bare interpreter (-I -S, LC_ALL=C: libc, libm and ld.so) and imports
nothing beyond os, sys and time until the launches are done; the launched commands get the
original environment back.
"""
import os
import sys
import time

if os.environ.get("AB_BARE") != "1":
    env = dict(os.environ, AB_BARE="1", LC_ALL="C")
    # The caller's LC_ALL (or its absence), for the launched commands.
    env["AB_LC_ALL"] = "=" + os.environ["LC_ALL"] if "LC_ALL" in os.environ else ""
    os.execve(sys.executable, [sys.executable, "-I", "-S", os.path.abspath(__file__)]
              + sys.argv[1:], env)
base_env = dict(os.environ)
saved = base_env.pop("AB_LC_ALL", "")
del base_env["AB_BARE"], base_env["LC_ALL"]
if saved:
    base_env["LC_ALL"] = saved[1:]

# Open descriptors above stderr that an exec keeps (this process opens its own close-on-exec).
def inheritable(fd):
    try:
        return os.get_inheritable(fd)
    except OSError:  # the listing's own descriptor, closed by now
        return False
inherited = [fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2 and inheritable(fd)]
here = os.path.dirname(os.path.abspath(__file__))
ws = os.environ.get("WARMSTART_BIN", os.path.join(here, "..", "target", "release", "warmstart"))
sep = sys.argv.index("--")
rounds, variants, cmd = int(sys.argv[1]), sys.argv[2:sep], sys.argv[sep + 1:]
names = [v.split("=", 1)[0] for v in variants]
wall = {n: [] for n in names}
off = {n: [] for n in names}
usr = {n: [] for n in names}
sys_ = {n: [] for n in names}
# A launch's detached prefetcher outlives the app by a few ms with its binary mapped: a cache
# drop then keeps those pages for the next launch, favouring a variant that follows itself.
# Every launch waits for the previous one's prefetcher first (as `warmstart demo` does).
binaries = {os.path.realpath(ws)} | {
    os.path.realpath(a[1:]) for v in variants if "=" in v
    for a in v.split("=", 1)[1].split(",") if a.startswith("@")}
def settle(cap=5.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < cap:
        busy = False
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) != os.getpid():
                try:
                    busy = os.readlink(f"/proc/{p}/exe") in binaries
                except OSError:
                    continue
                if busy:
                    break
        if not busy:
            return
        time.sleep(0.002)

for r in range(rounds):
    order = list(zip(names, variants))
    for name, v in order if r % 2 == 0 else order[::-1]:
        args = [a for a in v.split("=", 1)[1].split(",") if a] if "=" in v else []
        settle()
        if not name.startswith(("warm", "barewarm")):
            # As `warmstart demo` does: a drop keeps dirty pages, such as the database pages
            # the last launch's prefetcher wrote, which would leave the next launcher warm.
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
        for a in [a for a in args if a.startswith("%")]:
            for path in a[1:].split(":"):
                with open(path, "rb") as f:
                    while f.read(1 << 20):
                        pass
        args = [a for a in args if not a.startswith("%")]
        knobs = []
        for a in [a for a in args if a.startswith("^")]:
            path, _, val = a[1:].partition("=")
            with open(path) as f:
                old = f.read().strip()
            # A choice file (`none [mq-deadline] kyber`) shows its setting in brackets.
            if "[" in old:
                old = old.split("[", 1)[1].split("]", 1)[0]
            knobs.append((path, old))
            with open(path, "w") as f:
                f.write(val)
        args = [a for a in args if not a.startswith("^")]
        env = dict(base_env)
        for a in [a for a in args if a.startswith("+")]:
            k, _, val = a[1:].partition("=")
            env[k] = val
        args = [a for a in args if not a.startswith("+")]
        handed = [int(a[1:]) for a in args if a.startswith("&")]
        args = [a for a in args if not a.startswith("&")]
        exe = ws
        if args and args[0].startswith("@"):
            exe, args = args[0][1:], args[1:]
        bare = name in ("warm", "cold") or name.startswith("bare")
        argv = cmd if bare else [exe, "-q", "run", *args, "--", *cmd]
        t = time.perf_counter()
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        # Descriptors this harness inherited (a terminal's or CI's) stay out of the launch, as
        # from a plain shell.
        pid = os.posix_spawnp(argv[0], argv, env, file_actions=[
            (os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
            + [(os.POSIX_SPAWN_CLOSE, fd) for fd in inherited]
            + [(os.POSIX_SPAWN_DUP2, null, fd) for fd in handed])
        os.close(null)
        _, status, ru = os.wait4(pid, 0)
        ms = (time.perf_counter() - t) * 1e3
        for path, old in reversed(knobs):
            with open(path, "w") as f:
                f.write(old)
        if status != 0:
            sys.exit(f"ab: {name} exited with status {status}")
        wall[name].append(ms)
        off[name].append(ms - (ru.ru_utime + ru.ru_stime) * 1e3)
        usr[name].append(ru.ru_utime * 1e3)
        sys_[name].append(ru.ru_stime * 1e3)

import statistics  # only now: its imports map more libraries

base = names[0]
def paired(d, n):
    return statistics.median(a - b for a, b in zip(d[n], d[base]))
print(f"{rounds} rounds; paired = median of per-round differences against {base}")
print(f"{'variant':<12} {'median ms':>9} {'paired':>8} {'off-CPU':>8} {'paired':>8} {'gap':>6}"
      f" {'user':>7} {'system':>7}")
for n in names:
    gap = ""
    if "cold" in names and "warm" in names:
        c, w, x = (paired(wall, k) for k in ("cold", "warm", n))
        if c != w:
            gap = f"{100 * (c - x) / (c - w):5.0f}%"
    print(f"{n:<12} {statistics.median(wall[n]):9.1f} {paired(wall, n):+8.1f} "
          f"{statistics.median(off[n]):8.1f} {paired(off, n):+8.1f} {gap:>6}"
          f" {statistics.median(usr[n]):7.1f} {statistics.median(sys_[n]):7.1f}")
if os.environ.get("AB_SAMPLES"):
    for n in names:
        print(f"{n:<12} wall " + " ".join(f"{x:.0f}" for x in wall[n]))
        print(f"{'':<12} user " + " ".join(f"{x:.0f}" for x in usr[n]))
        print(f"{'':<12} sys  " + " ".join(f"{x:.0f}" for x in sys_[n]))
