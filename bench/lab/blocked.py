#!/usr/bin/env python3
"""What a cold launch waits for: its uninterruptible sleeps, with kernel stacks.

    blocked.py COMM_GLOB -- CMD...     e.g. blocked.py 'soffice*' -- warmstart run -- soffice ...

Drops the page cache, runs CMD with a tracefs instance of its own recording every switch of
a task whose comm matches COMM_GLOB into an uninterruptible sleep (a `stacktrace` trigger on
`sched_switch`) and the wakeups that end them, removes the instance, and prints the total
time asleep, the time per stack (its first five meaningful frames) and every sleep over 2 ms.
"""
import collections, os, re, subprocess, sys

TRACEFS = "/sys/kernel/tracing"
SCHED_FRAMES = {"trace_event_raw_event_sched_switch", "__traceiter_sched_switch", "__schedule",
                "schedule", "io_schedule", "schedule_timeout", "io_schedule_timeout"}
SWITCH = re.compile(r"\s([\d.]+): sched_switch: prev_comm=\S+ prev_pid=(\d+) ")
WAKEUP = re.compile(r"\s([\d.]+): sched_wakeup: comm=\S+ pid=(\d+) ")


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def trace(glob, cmd, events=(), buffer_kb=32768):
    """The trace's lines; `events` ("block/block_rq_issue", ...) are recorded too, unfiltered."""
    inst = os.path.join(TRACEFS, "instances", f"lab-blocked-{os.getpid()}")
    os.mkdir(inst)
    switch = os.path.join(inst, "events/sched/sched_switch")
    asleep = f'prev_state & 2 && prev_comm ~ "{glob}"'
    try:
        write(os.path.join(inst, "buffer_size_kb"), str(buffer_kb))
        for e in events:
            write(os.path.join(inst, "events", e, "enable"), "1")
        write(os.path.join(switch, "filter"), asleep)
        write(os.path.join(switch, "trigger"), f"stacktrace if {asleep}")
        write(os.path.join(inst, "events/sched/sched_wakeup/filter"), f'comm ~ "{glob}"')
        write(os.path.join(switch, "enable"), "1")
        write(os.path.join(inst, "events/sched/sched_wakeup/enable"), "1")
        os.sync()
        write("/proc/sys/vm/drop_caches", "3\n")
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        write(os.path.join(inst, "tracing_on"), "0")
        with open(os.path.join(inst, "trace")) as f:
            return f.read().splitlines()
    finally:
        # A trigger holds its event: remove it before the instance can go.
        write(os.path.join(switch, "trigger"), f"!stacktrace if {asleep}")
        write(os.path.join(inst, "events/enable"), "0")
        os.rmdir(inst)


def sleeps(lines):
    """(start s, duration s, stack) of every sleep that a wakeup ended."""
    asleep, out, i = {}, [], 0
    while i < len(lines):
        m = SWITCH.search(lines[i])
        i += 1
        if m:
            stack = []
            if i < len(lines) and "<stack trace>" in lines[i]:
                i += 1
                while i < len(lines) and lines[i].startswith(" =>"):
                    stack.append(lines[i][4:].split("+")[0].strip())
                    i += 1
            asleep[m.group(2)] = (float(m.group(1)), stack)
            continue
        m = WAKEUP.search(lines[i - 1])
        if m and m.group(2) in asleep:
            t, stack = asleep.pop(m.group(2))
            out.append((t, float(m.group(1)) - t, stack))
    return out


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    found = sleeps(trace(sys.argv[1], sys.argv[3:]))
    if not found:
        sys.exit("no uninterruptible sleep traced (does COMM_GLOB match the launch?)")
    t0 = min(t for t, _, _ in found)
    key = lambda st: " < ".join([f for f in st if f not in SCHED_FRAMES][:5])
    per = collections.defaultdict(lambda: [0.0, 0])
    for _, d, st in found:
        per[key(st)][0] += d
        per[key(st)][1] += 1
    print(f"asleep {sum(d for _, d, _ in found) * 1e3:.1f} ms in {len(found)} sleeps")
    for k, (d, n) in sorted(per.items(), key=lambda kv: -kv[1][0]):
        print(f"{d * 1e3:7.1f} ms {n:4d}  {k}")
    print("sleeps over 2 ms (ms after the first sleep, duration):")
    for t, d, st in sorted(found):
        if d > 0.002:
            print(f"{(t - t0) * 1e3:8.1f} +{d * 1e3:5.1f}  {key(st)}")


if __name__ == "__main__":
    main()
