#!/usr/bin/env python3
"""Accuracy of `warmstart emulate` (issue #28): every suite app's recorded launches emulated
cold and with each strategy's plan, against the medians of a real bench run.

    sudo bench/lab/emulate-accuracy.py [--db /var/lib/warmstart/bench/bench.db]
        [--results bench/results/results.json] [--rounds 1] [--out bench/results/emulation.md]

Needs the plans of the bench run (the bench database) and its results.json."""
import argparse, json, math, statistics, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--db", default="/var/lib/warmstart/bench/bench.db")
ap.add_argument("--results", default="bench/results/results.json")
ap.add_argument("--bin", default="./target/release/warmstart")
ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("--out", default="bench/results/emulation.md")
a = ap.parse_args()

res = json.load(open(a.results))
rows, errs, abs_errs, agree, apps_n = [], [], [], 0, 0
t0 = time.time()
for app in res["apps"]:
    name = app["name"]
    med = {}
    for s in app["samples"]:
        if s.get("ready"):
            med.setdefault(s["scenario"], []).append(s["ms"])
    med = {k: statistics.median(v) for k, v in med.items()}
    p = subprocess.run([a.bin, "--db", a.db, "emulate", name, "--json", "--rounds", str(a.rounds)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{name}: emulate failed: {p.stderr.strip()}", file=sys.stderr)
        continue
    e = json.loads(p.stdout)
    em = {s["name"]: s for s in e["scenarios"]}
    best_real = best_emu = None
    for sc in e["scenarios"]:
        real_key = "cold" if sc["name"] == "cold" else f"warmstart:{sc['name']}"
        real = med.get(real_key)
        if real is None:
            continue
        err = sc["launch_ms"] / real - 1
        errs.append(err); abs_errs.append(abs(err))
        rows.append((name, sc["name"], sc["launch_ms"], real, err, sc.get("miss_rate"),
                     sc["own_read_ms"], sc["prefetch_wait_ms"]))
        if sc["name"] != "cold":
            if best_real is None or real < best_real[1]:
                best_real = (sc["name"], real)
            if best_emu is None or sc["launch_ms"] < best_emu[1]:
                best_emu = (sc["name"], sc["launch_ms"])
    if best_real and best_emu:
        apps_n += 1
        same = best_real[0] == best_emu[0]
        # Within noise: the emulator's pick is within 5% of the real best in the real run.
        near = med[f"warmstart:{best_emu[0]}"] <= best_real[1] * 1.05
        agree += same or near
        rows.append((name, f"best: real {best_real[0]}, emulated {best_emu[0]}"
                     + (" (same)" if same else (" (within 5% in the real run)" if near else "")),
                     None, None, None, None, None, None))
    print(f"{name} done ({time.time() - t0:.0f} s)", file=sys.stderr)

out = ["# Emulation accuracy", "",
       f"`sudo bench/lab/emulate-accuracy.py` ({a.rounds} emulated round(s) per recorded launch): "
       f"`warmstart emulate APP --json` on the bench database against the medians of "
       f"`{a.results}` (machine: {res['machine']}).", "",
       "| app | scenario | emulated ms | real median ms | error | miss rate | own reads ms | prefetch waits ms |",
       "|---|---|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    if r[2] is None:
        out.append(f"| {r[0]} | {r[1]} | | | | | | |")
    else:
        mr = "-" if r[5] is None else f"{100*r[5]:.1f}%"
        out.append(f"| {r[0]} | {r[1]} | {r[2]:.0f} | {r[3]:.0f} | {100*r[4]:+.0f}% | {mr} | {r[6]:.0f} | {r[7]:.0f} |")
cold = [r[4] for r in rows if r[1] == "cold" and r[4] is not None]
pre = [r[4] for r in rows if r[2] is not None and r[1] != "cold"]
out += ["",
        f"Mean error {100*statistics.mean(errs):+.1f}% (mean absolute {100*statistics.mean(abs_errs):.1f}%) over {len(errs)} app-scenarios; "
        f"cold launches {100*statistics.mean(cold):+.1f}% (abs {100*statistics.mean(map(abs, cold)):.1f}%), "
        f"prefetched {100*statistics.mean(pre):+.1f}% (abs {100*statistics.mean(map(abs, pre)):.1f}%). "
        f"Best strategy: the emulator's pick is the real best, or within 5% of it, on {agree} of {apps_n} apps."]
open(a.out, "w").write("\n".join(out) + "\n")
print("\n".join(out[-1:]))
