#!/usr/bin/env python3
"""`warmstart run` with the disk's read_ahead_kb as found against 128 during the launch (and
a cold launch with each), interleaved, on three suite apps; medians and gap closed.

    readahead-window.py ROUNDS [APP,...]    (root; after a `warmstart bench` run: its
                                             database holds the plans; vda assumed)
"""
import subprocess, time, os, sys, statistics
WS=os.environ.get("WARMSTART_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)),"../../target/release/warmstart")); DB="/var/lib/warmstart/bench/bench.db"
B="/var/lib/warmstart/bench/work"
RA="/sys/block/vda/queue/read_ahead_kb"
orig=open(RA).read().strip()
apps={
 "npm-version":(["npm","--version"],dict(npm_config_update_notifier="false",npm_config_cache=B+"/npm-cache"),B+"/npm-version"),
 "chromium-dump-dom":(["chromium","--headless","--no-sandbox","--disable-gpu","--disable-quic","--no-first-run","--disable-background-networking","--disable-component-update","--disable-sync",f"--user-data-dir={B}/chromium-dump-dom/chrome-profile","--dump-dom",f"file://{B}/chromium-dump-dom/page.html"],{},B+"/chromium-dump-dom"),
 "python-imports":(["/var/lib/warmstart/bench/venv/bin/python","-c","import numpy, pandas, matplotlib.pyplot, sympy, requests, json, email, asyncio"],dict(MPLBACKEND="Agg",MPLCONFIGDIR=B+"/mpl"),B),
}
only=sys.argv[2].split(",") if len(sys.argv)>2 else list(apps)
def drop():
    subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches","w").write("3")
sc=["cold","warm","ws","ws128","cold128"]
res={a:{k:[] for k in sc} for a in only}
try:
  for r in range(int(sys.argv[1])):
    for a in only:
        cmd,e,cwd=apps[a]; env=dict(os.environ,**e)
        for k in sc:
            if k!="warm": drop()
            time.sleep(0.3)
            open(RA,"w").write("128" if k.endswith("128") else orig)
            c=cmd if k.startswith("cold") or k=="warm" else [WS,"--db",DB,"-q","run","--app",a,"--"]+cmd
            t=time.monotonic(); subprocess.run(c,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL,env=env,cwd=cwd); ms=(time.monotonic()-t)*1000
            open(RA,"w").write(orig)
            res[a][k].append(ms); time.sleep(0.3)
    print(r, flush=True)
finally:
  open(RA,"w").write(orig)
for a in only:
    m={k:statistics.median(v) for k,v in res[a].items()}
    g=lambda k: 100*(m["cold"]-m[k])/(m["cold"]-m["warm"])
    print(a, " ".join("%s %.0f (%.0f%%)"%(k,m[k],g(k)) for k in sc))
