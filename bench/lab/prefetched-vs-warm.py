#!/usr/bin/env python3
"""Where a prefetched launch's time goes, against a warm one: python-imports of the bench
suite timed cold, warm, with `run`, after a whole `prefetch --wait`, with only the slab caches
dropped (dentries, inodes), and warm again; with the app's own rusage (user, system, faults,
context switches), medians.

    prefetched-vs-warm.py ROUNDS [DB]     (root; after a `warmstart bench` run, which made
                                           the venv; DB default: a new one in /tmp, recorded)
"""
import subprocess, time, statistics, sys, os, json
V="/var/lib/warmstart/bench/venv/bin/python"
W="/var/lib/warmstart/bench/work"
code=("import numpy, pandas, matplotlib.pyplot, sympy, requests, json, email, asyncio\n"
      "import resource,sys; r=resource.getrusage(0); print('RU', r.ru_utime, r.ru_stime, r.ru_majflt, r.ru_minflt, r.ru_nvcsw, r.ru_nivcsw, file=sys.stderr)")
cmd=[V,"-c",code]
env=dict(os.environ, MPLBACKEND="Agg", MPLCONFIGDIR=W+"/mpl")
HERE=os.path.dirname(os.path.abspath(__file__))
WS=os.environ.get("WARMSTART_BIN", os.path.join(HERE,"../../target/release/warmstart"))
DB=sys.argv[2] if len(sys.argv)>2 else "/tmp/prefetched-vs-warm.db"
ws=[WS,"--db",DB,"-q"]
def drop():
    subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches","w").write("3")
if not os.path.exists(DB):
    drop(); subprocess.run(ws+["record","--runs","2","--"]+cmd, env=env, check=True, stdout=subprocess.DEVNULL)
sc={"cold":(True,cmd),"warm":(False,cmd),"run":(True,ws+["run","--"]+cmd),"prefetch-then":(True,None),"slab-dropped":(2,cmd),"warm2":(False,cmd)}
res={k:[] for k in sc}
for r in range(int(sys.argv[1])):
    for k,(cold,c) in sc.items():
        if cold==2:
            subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches","w").write("2")
        elif cold: drop()
        time.sleep(0.3)
        if c is None:
            subprocess.run(ws+["prefetch","--wait","python"], stdout=subprocess.DEVNULL); c=cmd
        t=time.monotonic(); p=subprocess.run(c,stdout=subprocess.DEVNULL,stderr=subprocess.PIPE,env=env,text=True); ms=(time.monotonic()-t)*1000
        ru=[l for l in p.stderr.splitlines() if l.startswith("RU")]
        u=ru[-1].split()[1:] if ru else ["0"]*6
        res[k].append([ms]+[float(x) for x in u])
        time.sleep(0.3)
print("scenario   wall   user   sys  majflt minflt vcsw ivcsw (medians)")
for k,v in res.items():
    cols=list(zip(*v))
    print("%-13s"%k, " ".join("%6.0f"%statistics.median(c) if i!=1 and i!=2 else "%6.3f"%statistics.median(c) for i,c in enumerate(cols)))
