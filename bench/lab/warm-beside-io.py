#!/usr/bin/env python3
"""Does disk I/O alone slow a warm launch on this machine? (issue 25)

    warm-beside-io.py ROUNDS -- COMMAND...      (root; COMMAND warm-launched and timed)

Each round times a warm launch of COMMAND three ways, interleaved: alone; while a separate
process asks for 140 MiB of an unrelated, evicted file with fadvise(WILLNEED) in 1 MiB steps
(buffered readahead, as the prefetcher issues it); and while `dd` reads the same 140 MiB
with O_DIRECT (device time, no page-cache work). Prints the median and every sample.
The file is /var/tmp/warm-beside-io.bin, made once and removed at the end.
"""
import os, subprocess, sys, time, statistics as st

if len(sys.argv) < 4 or sys.argv[2] != "--":
    sys.exit(__doc__)
ROUNDS, CMD = int(sys.argv[1]), sys.argv[3:]
BIG, SIZE = "/var/tmp/warm-beside-io.bin", 140 << 20


def launch():
    t = time.monotonic()
    subprocess.run(CMD, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.monotonic() - t) * 1e3


def evict():
    fd = os.open(BIG, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def buffered():
    code = (f"import os\nfd=os.open({BIG!r},os.O_RDONLY)\n"
            f"for o in range(0,{SIZE},1<<20): os.posix_fadvise(fd,o,1<<20,os.POSIX_FADV_WILLNEED)\n")
    return subprocess.Popen([sys.executable, "-c", code])


def direct():
    return subprocess.Popen(["dd", f"if={BIG}", "of=/dev/null", "bs=1M", f"count={SIZE >> 20}",
                             "iflag=direct"], stderr=subprocess.DEVNULL)


with open(BIG, "wb") as f:
    f.write(os.urandom(SIZE))
    os.fsync(f.fileno())
try:
    res = {"alone": [], "buffered": [], "direct": []}
    launch()
    for _ in range(ROUNDS):
        res["alone"].append(launch())
        evict()
        p = buffered()
        res["buffered"].append(launch())
        p.wait()
        p = direct()
        res["direct"].append(launch())
        p.wait()
    for k, v in res.items():
        print(f"{k:9} median {st.median(v):7.0f} ms  {[round(x) for x in v]}")
finally:
    os.unlink(BIG)
