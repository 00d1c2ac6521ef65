#!/usr/bin/env python3
"""What watching the machine as the burst miner does costs a prefetched launch: python-imports
through `warmstart run` (the bench database's plan), each after a cache drop, with nothing
beside it, beside `fatrace -f O` (a fanotify watch of every opening, its events read and
named), beside a tracefs instance tracing every page-cache insert (no reader: the tracepoint's
own cost), and beside `warmstart bursts mine` (both, and the miner), and beside fanotify-watch.c (built here with `cc`): the
same watch with file handles instead of descriptors (`fid`), and read every 50 ms instead of
at each event (`fidbatch`); the order reversed every other round.

    miner-watch-cost.py ROUNDS      (root; after a `warmstart bench` run; needs fatrace, cc)
"""
import os, subprocess, time, statistics, sys

WS = os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/release/warmstart"))
W="/var/lib/warmstart/bench/work/python-imports"
V="/var/lib/warmstart/bench/venv/bin/python"
cmd=[WS,"--db","/var/lib/warmstart/bench/bench.db","-q","run","--app","python-imports","--",V,"-c","import numpy, pandas, matplotlib.pyplot, sympy, requests, json, email, asyncio"]
env=dict(os.environ, MPLBACKEND="Agg", MPLCONFIGDIR="/var/lib/warmstart/bench/work/mpl")
T="/sys/kernel/tracing/instances/minercost"
def drop():
    os.sync(); open("/proc/sys/vm/drop_caches","w").write("3")
HERE = os.path.dirname(os.path.abspath(__file__))
WATCH = "/tmp/warmstart-fanotify-watch"
subprocess.run(["cc", "-O2", "-o", WATCH, os.path.join(HERE, "fanotify-watch.c")], check=True)
def bg(k):
    if k in ("fid", "fidbatch"):
        return subprocess.Popen([WATCH, "fb" if k == "fidbatch" else "f"])
    if k=="fanotify":
        return subprocess.Popen(["fatrace","-f","O"],stdout=subprocess.DEVNULL)
    if k=="trace":
        os.mkdir(T); open(T+"/buffer_size_kb","w").write("2048")
        open(T+"/events/filemap/mm_filemap_add_to_page_cache/enable","w").write("1")
        open(T+"/tracing_on","w").write("1"); return None
    if k=="mine":
        return subprocess.Popen([WS,"bursts","mine","--seconds","30"],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
    return None
def stop(k,p):
    if p: p.terminate(); p.wait()
    if k=="trace":
        open(T+"/events/filemap/mm_filemap_add_to_page_cache/enable","w").write("0"); os.rmdir(T)
sc=["none","fanotify","fid","fidbatch","trace","mine"]
res={k:[] for k in sc}
for r in range(int(sys.argv[1])):
    for k in (sc if r%2==0 else sc[::-1]):
        p=bg(k); time.sleep(0.8); drop(); time.sleep(0.3)
        t=time.monotonic(); subprocess.run(cmd,env=env,cwd=W,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL); res[k].append((time.monotonic()-t)*1000)
        stop(k,p); time.sleep(0.3)
    print(r," ".join("%s %.0f"%(k,res[k][-1]) for k in sc),flush=True)
for k in sc:
    print("%-9s median %6.0f  over none %.3f"%(k,statistics.median(res[k]),statistics.median(a/b for a,b in zip(res[k],res["none"]))))
