#!/usr/bin/env python3
"""python-imports cold, warm, with `run`, with the daemon (bursts on) and with the daemon
(bursts off), interleaved; the daemon started before each launch as the bench starts it, on a
copy of the bench daemon's state.

    daemon-vs-run.py ROUNDS     (root; after a `warmstart bench` run with the daemon scenario)
"""
import subprocess, time, os, shutil, sys, statistics
import tempfile
src="/var/lib/warmstart/bench/daemon"; d=tempfile.mkdtemp(prefix="daemon-vs-run-")
for f in ["config.toml","daemon.db"]: shutil.copy(f"{src}/{f}", d)
WS=os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)),"../../target/release/warmstart"))
V="/var/lib/warmstart/bench/venv/bin/python"
W="/var/lib/warmstart/bench/work"
cmd=[V,"-c","import numpy, pandas, matplotlib.pyplot, sympy, requests, json, email, asyncio"]
app=sys.argv[2] if len(sys.argv)>2 else "python-imports"
env=dict(os.environ, MPLBACKEND="Agg", MPLCONFIGDIR=W+"/mpl")
base=open(f"{src}/config.toml").read()
def drop():
    subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches","w").write("3")
def daemon(extra):
    open(f"{d}/config.toml","w").write(base+extra+"\n")
    p=subprocess.Popen([WS,"--db",f"{d}/daemon.db","-q","daemon","--config",f"{d}/config.toml","--run-dir",f"{d}/run"],stderr=open(f"{d}/log","a"),process_group=0)
    while not os.path.exists(f"{d}/run/daemon.pid"): time.sleep(0.02)
    time.sleep(0.4); return p
def launch(c):
    t=time.monotonic(); subprocess.run(c,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,env=env,cwd=W); return (time.monotonic()-t)*1000
sc=["cold","warm","run","daemon","daemon-nobursts"]
res={k:[] for k in sc}
for r in range(int(sys.argv[1])):
    for k in sc:
        p=None
        if k.startswith("daemon"): p=daemon("bursts = false" if k.endswith("nobursts") else "")
        if k!="warm": drop()
        time.sleep(0.3)
        c=cmd if k!="run" else [WS,"--db","/var/lib/warmstart/bench/bench.db","-q","run","--app",app,"--"]+cmd
        res[k].append(launch(c))
        if p: p.terminate(); p.wait()
        time.sleep(0.3)
    print(r, " ".join("%s %.0f"%(k,res[k][-1]) for k in sc), flush=True)
c,w=statistics.median(res["cold"]),statistics.median(res["warm"])
for k in sc:
    m=statistics.median(res[k]); print("%-16s %6.0f  gap closed %4.0f%%"%(k,m,100*(c-m)/(c-w)))
