#!/usr/bin/env python3
"""bench/ab.py over the suite's batch apps, each launched as the bench launches it (its
command, environment and TMPDIR from bench/suite.toml, via own_daemon.py), on a copy of the
bench database.

    bench/lab/ab-apps.py ROUNDS DB VARIANT... [-- APP...]

A VARIANT is NAME=ARGS as for bench/ab.py; `,+WARMSTART_DB=DB,--app,APP` is put after each
one's ARGS (cold and warm are always run). APPs default to every batch app of the suite.
Example (docs/measurements.md, 2026-11-29, ninth entry):

    cp /var/lib/warmstart/bench/bench.db /tmp/ab.db
    bench/lab/ab-apps.py 10 /tmp/ab.db new= old=@/tmp/warmstart-old -- soffice-convert npm-version
"""
import os
import subprocess
import sys

import own_daemon

args = sys.argv[1:]
if len(args) < 3:
    sys.exit(__doc__)
rounds, db, rest = args[0], args[1], args[2:]
variants, names = (rest[:rest.index("--")], rest[rest.index("--") + 1:]) if "--" in rest else (rest, [])
apps = own_daemon.batch_apps(names)
if names and len(apps) != len(names):
    sys.exit(f"not batch apps of the suite: {sorted(set(names) - {a['name'] for a in apps})}")
ab = os.path.join(own_daemon.HERE, "../ab.py")
for app in apps:
    _, argv, env, _ = own_daemon.command(app)
    vs = []
    for v in variants:
        name, _, extra = v.partition("=")
        vs.append(f"{name}={extra + ',' if extra else ''}+WARMSTART_DB={db},--app,{app['name']}")
    print(f"=== {app['name']}", flush=True)
    subprocess.run([sys.executable, ab, rounds, "cold", "warm", *vs, "--", *argv], env=env, check=False)
