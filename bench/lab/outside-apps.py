#!/usr/bin/env python3
"""Applications outside the suite, as a new user would try them: each learned afresh and
timed by the bench's ad-hoc mode (`warmstart bench --rounds N --only warmstart,prefetch-only
--out OUT/NAME -- COMMAND`: cold, warm, `run` with the default strategy and prefetch-only,
interleaved per round), its `adhoc` app removed from the bench database first so that no
plan of another command is lent. Prints per app the medians, the gap closed, prefetch-only
over its floor, the miss ratio and the waste; then the mean gap closed.

    outside-apps.py ROUNDS [NAME...]

NAME: some of the workloads below (default: every one whose program is installed). Nothing
of the suite's harness is used; the inputs are written to a directory of their own.
Example (docs/measurements.md, 2026-12-08): `outside-apps.py 6`.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile

WS = os.environ.get(
    "WARMSTART_BIN",
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/release/warmstart"),
)
BENCH_DB = os.path.join(os.environ.get("WARMSTART_BENCH_DIR", "/var/lib/warmstart/bench"), "bench.db")

CPP = """#include <iostream>
#include <vector>
#include <map>
int main() { std::map<int, std::vector<int>> m; m[1].push_back(2); std::cout << m.size() << std::endl; }
"""
TEX = "\\documentclass{article}\\begin{document}Hello $x^2$\\end{document}\n"


def workloads(d):
    """(name, program that must be installed, argv)."""
    return [
        ("g++", "g++", ["g++", "-c", f"{d}/hello.cpp", "-o", f"{d}/hello.o"]),
        ("lualatex", "lualatex",
         ["lualatex", "-interaction=batchmode", f"-output-directory={d}", f"{d}/doc.tex"]),
        ("valgrind", "valgrind", ["valgrind", "-q", "/bin/true"]),
        ("perl", "perl", ["perl", "-MPod::Usage", "-MData::Dumper", "-MFile::Find", "-MCPAN", "-e", "1"]),
        ("gdb", "gdb", ["gdb", "-nx", "-batch", "-ex", "python print(1)"]),
    ]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rounds, wanted = int(sys.argv[1]), set(sys.argv[2:])
    d = tempfile.mkdtemp(prefix="ws-outside-")
    out = os.path.join(d, "out")
    open(f"{d}/hello.cpp", "w").write(CPP)
    open(f"{d}/doc.tex", "w").write(TEX)
    rows = []
    try:
        for name, prog, argv in workloads(d):
            if (wanted and name not in wanted) or not shutil.which(prog):
                continue
            subprocess.run([WS, "--db", BENCH_DB, "plan", "rm", "adhoc"], capture_output=True)
            o = os.path.join(out, name)
            r = subprocess.run(
                [WS, "bench", "--rounds", str(rounds), "--only", "warmstart,prefetch-only",
                 "--out", o, "--"] + argv,
                capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: bench failed ({r.returncode}): {r.stderr[-400:]}", file=sys.stderr)
                continue
            a = json.load(open(os.path.join(o, "results.json")))["apps"][0]
            s, acc = a["summary"], a["accuracy"]
            rows.append((name, s["cold"]["median_ms"], s["warm"]["median_ms"],
                         s["warmstart"]["median_ms"], s["warmstart"]["gap_closed"],
                         s["prefetch-only"]["median_ms"], acc.get("floor_ratio"),
                         acc.get("miss_ratio"), acc.get("waste")))
    finally:
        subprocess.run([WS, "--db", BENCH_DB, "plan", "rm", "adhoc"], capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
    f = lambda v, k="{:.0f}": "–" if v is None else k.format(v)
    print("| app | cold ms | warm ms | run ms (gap closed) | prefetch-only ms | × floor | miss | waste |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, c, w, r, g, p, fl, m, wa in rows:
        print(f"| {n} | {c:.0f} | {w:.0f} | {r:.0f} ({g * 100:.0f}%) | {p:.0f} | {f(fl, '{:.2f}')} "
              f"| {f(m and m * 100, '{:.1f}%')} | {f(wa and wa * 100, '{:.1f}%')} |")
    if rows:
        print(f"\nmean gap closed {statistics.mean(r[4] for r in rows) * 100:.0f}% over {len(rows)} apps")


main()
