#!/usr/bin/env python3
"""Does the way the page cache was filled change a warm launch's CPU time?

    cache-state.py ROUNDS STATE...      STATE: self | ra | hp

Each round, per state (order reversed every other round): drop the cache, fill it, run the
demo workload once, then time two warm launches. `self`: the workload's own cold launch;
`ra`: `warmstart prefetch --wait` of its plan; `hp`: the plan's ranges of ELF files mapped
with MADV_HUGEPAGE and MADV_POPULATE_READ (large folios), the rest POSIX_FADV_WILLNEED.
Prints median wall, CPU (user + system) and minor faults, and CPU paired against the first.
"""
import mmap, os, re, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
WS = os.environ.get("WARMSTART_BIN", os.path.join(HERE, "..", "..", "target", "release", "warmstart"))
APP = "stdlib_import"
CMD = ["/usr/bin/python3.11", "/var/lib/warmstart/demo/stdlib_import.py"]
PG = 4096


def drop():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def launch():
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
        os.execv(CMD[0], CMD)
    _, _, ru = os.wait4(pid, 0)
    return (time.monotonic() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_minflt


def plan_ranges():
    out = subprocess.run([WS, "plan", "show", APP, "--strategy", "trace", "--entries", "100000"],
                         capture_output=True, text=True, check=True).stdout
    unit = {"B": 1, "KiB": 1024, "MiB": 1 << 20}
    ranges = {}
    for line in out.splitlines():
        m = re.match(r"\s*\d+\s+data\s+(\S+) @(\d+) \+([\d.]+) (\w+)", line)
        if m:
            ranges.setdefault(m.group(1), []).append(
                (int(m.group(2)), int(float(m.group(3)) * unit[m.group(4)])))
    return ranges


def large_folio_load(ranges):
    for path, rs in ranges.items():
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        size = os.fstat(fd).st_size
        if os.pread(fd, 4, 0) == b"\x7fELF" and size >= 64 * 1024:
            m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
            m.madvise(14)  # MADV_HUGEPAGE: the fault path allocates PMD-order folios
            m.madvise(1)   # MADV_RANDOM: one folio per fault, no read-around beyond it
            end = (size + PG - 1) // PG * PG
            for off, n in rs:
                s = off & ~(PG - 1)
                ln = min((min(size, off + n) - s + PG - 1) // PG * PG, end - s)
                try:
                    m.madvise(22, s, ln)  # MADV_POPULATE_READ
                except OSError:
                    pass
            m.close()
        else:
            for off, n in rs:
                os.posix_fadvise(fd, off, n, os.POSIX_FADV_WILLNEED)
        os.close(fd)


def main():
    rounds, states = int(sys.argv[1]), sys.argv[2:]
    ranges = plan_ranges() if "hp" in states else None
    res = {s: [] for s in states}
    for r in range(rounds):
        for s in states if r % 2 == 0 else states[::-1]:
            drop()
            if s == "ra":
                subprocess.run([WS, "prefetch", APP, "--wait", "-q"], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            elif s == "hp":
                large_folio_load(ranges)
            launch()
            res[s] += [launch(), launch()]
    base = states[0]
    for s in states[1:]:
        d = [a[1] - b[1] for a, b in zip(res[s], res[base])]
        print(f"paired CPU {s} - {base}: median {statistics.median(d):.1f} mean {statistics.mean(d):.1f} ms")
    for s in states:
        w, c, f = zip(*res[s])
        print(f"{s:5} wall {statistics.median(w):7.1f} cpu {statistics.median(c):7.1f} "
              f"minflt {statistics.median(f):7.0f} n={len(w)}")


main()
