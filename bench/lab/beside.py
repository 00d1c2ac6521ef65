#!/usr/bin/env python3
"""What a prefetch on the other vCPU costs a warm launch.

    beside.py ROUNDS APP_CPU [OTHER_APP]     (OTHER_APP default: soffice)

Each round, per variant (order reversed every other round): drop the cache, run the demo
workload twice to warm it, then time a launch pinned to APP_CPU (0 or 1) alone, beside
`warmstart prefetch OTHER_APP --wait` pinned to the other vCPU (another app's plan, so it
reads from the disk without helping), and beside a 75 ms C busy loop there (needs gcc).
Prints medians and the paired differences against alone.
"""
import os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
WS = os.environ.get("WARMSTART_BIN", os.path.join(HERE, "..", "..", "target", "release", "warmstart"))
CMD = ["/usr/bin/python3.11", "/var/lib/warmstart/demo/stdlib_import.py"]
BURN = r"""#include <stdlib.h>
#include <time.h>
int main(int c, char **v) { struct timespec a, b; double ms = atof(v[1]); volatile unsigned long x = 0;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (;;) { for (int i = 0; i < 10000; i++) x += i; clock_gettime(CLOCK_MONOTONIC, &b);
    if ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 > ms) return 0; } }"""


def drop():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def launch(cpu):
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
        os.sched_setaffinity(0, {cpu})
        os.execv(CMD[0], CMD)
    _, _, ru = os.wait4(pid, 0)
    return (time.monotonic() - t0) * 1e3, (ru.ru_utime + ru.ru_stime) * 1e3


def main():
    rounds, cpu = int(sys.argv[1]), int(sys.argv[2])
    other_app = sys.argv[3] if len(sys.argv) > 3 else "soffice"
    other = str(1 - cpu)
    with tempfile.TemporaryDirectory() as d:
        burn = os.path.join(d, "burn")
        subprocess.run(["gcc", "-O1", "-x", "c", "-o", burn, "-"], input=BURN, text=True, check=True)
        res = {"alone": [], "prefetch": [], "busy": []}
        for r in range(rounds):
            for v in list(res) if r % 2 == 0 else list(res)[::-1]:
                drop()
                launch(cpu)
                launch(cpu)
                helper = None
                if v == "prefetch":
                    helper = [WS, "prefetch", other_app, "--wait", "-q"]
                elif v == "busy":
                    helper = [burn, "75"]
                p = helper and subprocess.Popen(["taskset", "-c", other, *helper],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.002)
                res[v].append(launch(cpu))
                if p:
                    p.wait()
    for v in res:
        w, c = zip(*res[v])
        line = f"{v:9} wall {statistics.median(w):7.1f} cpu {statistics.median(c):7.1f}"
        if v != "alone":
            dw = statistics.median(a[0] - b[0] for a, b in zip(res[v], res["alone"]))
            dc = statistics.median(a[1] - b[1] for a, b in zip(res[v], res["alone"]))
            line += f"   paired: wall {dw:+.1f} cpu {dc:+.1f}"
        print(line)


main()
