#!/bin/bash
# warmstart's exec to the app's exec over N cold launches of the demo workload:
#   exec-to-exec.sh N BIN [run args...]     e.g. exec-to-exec.sh 12 target/release/warmstart --strategy trace
set -e
N=$1; BIN=$2; shift 2
T=/sys/kernel/tracing/instances/ws-lab-e2e
mkdir $T
trap 'echo 0 > $T/tracing_on; rmdir $T' EXIT
echo 1 > $T/events/sched/sched_process_exec/enable
echo 1 > $T/tracing_on
for i in $(seq "$N"); do
  sync; echo 3 > /proc/sys/vm/drop_caches
  "$BIN" run "$@" -- /usr/bin/python3.11 /var/lib/warmstart/demo/stdlib_import.py >/dev/null
  sleep 0.3
done
echo 0 > $T/tracing_on
python3 -c '
import re, statistics, sys
start, d = {}, []
for l in sys.stdin:
    m = re.search(r"([\d.]+): sched_process_exec: filename=(\S+) pid=(\d+)", l)
    if not m: continue
    t, f, p = float(m.group(1)), m.group(2), m.group(3)
    if "python3.11" not in f: start[p] = t
    elif p in start: d.append((t - start.pop(p)) * 1e3)
print("exec->exec ms: median %.2f min %.2f max %.2f n=%d" % (statistics.median(d), min(d), max(d), len(d)))
print(" ".join("%.1f" % x for x in d))' < $T/trace
