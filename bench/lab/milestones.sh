#!/bin/bash
# warmstart's exec to the app's k-th openat (k = 1, 10, 30, 100, 300), N cold launches:
#   milestones.sh N BIN [run args...]
# The app's progress through its start, less noisy than its wall time.
set -e
N=$1; BIN=$2; shift 2
T=/sys/kernel/tracing/instances/ws-lab-mile
mkdir $T
trap 'echo 0 > $T/tracing_on; echo 0 > $T/events/syscalls/sys_enter_openat/enable; echo 0 > $T/events/syscalls/sys_enter_openat/filter; rmdir $T' EXIT
echo 1 > $T/events/sched/sched_process_exec/enable
echo 'comm == "python3.11"' > $T/events/syscalls/sys_enter_openat/filter
echo 1 > $T/events/syscalls/sys_enter_openat/enable
echo 8192 > $T/buffer_size_kb
echo 1 > $T/tracing_on
for i in $(seq "$N"); do
  sync; echo 3 > /proc/sys/vm/drop_caches
  "$BIN" run "$@" -- /usr/bin/python3.11 /var/lib/warmstart/demo/stdlib_import.py >/dev/null
  sleep 0.3
done
echo 0 > $T/tracing_on
python3 -c '
import re, statistics, sys
runs, cur, bin = [], None, sys.argv[1]
for l in sys.stdin:
    m = re.search(r"-(\d+)\s+\[\d+\].{7}\s*([\d.]+): (\w+)[:(] ?(.*)", l)
    if not m: continue
    pid, t, ev, rest = m.group(1), float(m.group(2)), m.group(3), m.group(4)
    if ev == "sched_process_exec" and "filename=" + bin in rest:
        cur = {"t0": t, "pid": rest.split("pid=")[1].split()[0], "o": []}; runs.append(cur)
    elif ev == "sys_openat" and cur and pid == cur["pid"]:
        cur["o"].append(t)
out = []
for k in (1, 10, 30, 100, 300):
    v = [(r["o"][k - 1] - r["t0"]) * 1e3 for r in runs if len(r["o"]) >= k]
    if v: out.append("#%d: %6.1f" % (k, statistics.median(v)))
print(" ".join(out), "n=%d" % len(runs))' "$BIN" < $T/trace
