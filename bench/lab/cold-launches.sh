#!/bin/bash
# Trace N cold launches of the demo workload through `warmstart run`:
#   cold-launches.sh exec   N BIN [run args...]   warmstart's exec to the app's exec
#   cold-launches.sh openat N BIN [run args...]   warmstart's exec to the app's 1st, 10th,
#                                                 30th, 100th and 300th openat (its progress
#                                                 through its start, less noisy than its wall time)
# e.g. cold-launches.sh exec 12 target/release/warmstart --strategy trace
set -e
MODE=$1; N=$2; BIN=$3; shift 3
case $MODE in exec|openat) ;; *) echo "mode: exec or openat" >&2; exit 2;; esac
T=/sys/kernel/tracing/instances/ws-lab-$$
mkdir $T
OPENAT=$T/events/syscalls/sys_enter_openat
trap 'echo 0 > $T/tracing_on; echo 0 > $OPENAT/enable; echo 0 > $OPENAT/filter; rmdir $T' EXIT
echo 1 > $T/events/sched/sched_process_exec/enable
if [ "$MODE" = openat ]; then
  echo 'comm == "python3.11"' > $OPENAT/filter
  echo 1 > $OPENAT/enable
  echo 8192 > $T/buffer_size_kb
fi
echo 1 > $T/tracing_on
for i in $(seq "$N"); do
  sync; echo 3 > /proc/sys/vm/drop_caches
  "$BIN" run "$@" -- /usr/bin/python3.11 /var/lib/warmstart/demo/stdlib_import.py >/dev/null
  sleep 0.3
done
echo 0 > $T/tracing_on
python3 -c '
import re, statistics, sys
mode, bin, runs, cur = sys.argv[1], sys.argv[2], [], None
for l in sys.stdin:
    m = re.search(r"-(\d+)\s+\[\d+\].{7}\s*([\d.]+): (\w+)[:(] ?(.*)", l)
    if not m: continue
    pid, t, ev, rest = m.group(1), float(m.group(2)), m.group(3), m.group(4)
    if ev == "sched_process_exec":
        p = rest.split("pid=")[1].split()[0]
        if "filename=" + bin + " " in rest:
            cur = {"t0": t, "pid": p, "exec": None, "o": []}; runs.append(cur)
        elif "filename=/usr/bin/python3.11" in rest and cur and p == cur["pid"] and cur["exec"] is None:
            cur["exec"] = t
    elif ev == "sys_openat" and cur and pid == cur["pid"]:
        cur["o"].append(t)
if mode == "exec":
    d = [(r["exec"] - r["t0"]) * 1e3 for r in runs if r["exec"]]
    print("exec->exec ms: median %.2f min %.2f max %.2f n=%d" % (statistics.median(d), min(d), max(d), len(d)))
    print(" ".join("%.1f" % x for x in d))
else:
    out = []
    for k in (1, 10, 30, 100, 300):
        v = [(r["o"][k - 1] - r["t0"]) * 1e3 for r in runs if len(r["o"]) >= k]
        if v: out.append("#%d: %6.1f" % (k, statistics.median(v)))
    print(" ".join(out), "n=%d" % len(runs))' "$MODE" "$BIN" < $T/trace
