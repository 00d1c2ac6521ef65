"""Shared by the lab scripts that run a warmstart daemon of their own (daemon-plans.py,
daemon-cold-loop.py, miner-overhead.py, daemon-variants.py, daemon-cpu.py): the suite's batch apps as the bench runs them, and a
daemon with its own database, configuration and run directory."""
import os, shutil, subprocess, tempfile, time, tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
WS = os.environ.get("WARMSTART_BIN", os.path.join(HERE, "../../target/release/warmstart"))
STATE = os.environ.get("WARMSTART_BENCH_DIR", "/var/lib/warmstart/bench")
VENV = os.path.join(STATE, "venv")


def batch_apps(names):
    """The batch apps of bench/suite.toml (ready = "exit") named, or all of them."""
    suite = tomllib.load(open(os.path.join(HERE, "../suite.toml"), "rb"))["app"]
    return [a for a in suite if a.get("ready", "exit") == "exit" and (not names or a["name"] in names)]


def drop_caches():
    os.sync()
    open("/proc/sys/vm/drop_caches", "w").write("3\n")


def command(app):
    """The app's work directory, argv, environment and canonical executable, as the bench's."""
    work = os.path.join(STATE, "work", app["name"])
    expand = lambda s: s.replace("{work}", work).replace("{venv}", VENV)
    argv = [expand(a) for a in app["command"]]
    env = dict(os.environ, **{k: expand(v) for k, v in app.get("env", {}).items()})
    env.setdefault("TMPDIR", os.path.join(work, "tmp"))
    exe = os.path.realpath(shutil.which(argv[0], path=env.get("PATH")) or argv[0])
    return work, argv, env, exe


def spawn(d, config, settle):
    """A daemon with `config` (its text) and its own database, run directory and log in
    directory `d`, once its pid file is there and `settle` seconds more: (database, run
    directory, process)."""
    os.makedirs(d, exist_ok=True)
    db, run_dir, cfg = (os.path.join(d, f) for f in ("ws.db", "run", "config.toml"))
    open(cfg, "w").write(config)
    p = subprocess.Popen([WS, "--db", db, "daemon", "--config", cfg, "--run-dir", run_dir],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "log"), "a"))
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(run_dir, "daemon.pid")) and time.monotonic() - t0 < 60:
        time.sleep(0.1)
    time.sleep(settle)
    return db, run_dir, p


def start(exe, prefix):
    """A daemon managing `exe` only, with the bench daemon's settings (n_rawseq 2, no checks)
    and EXTRA_CONFIG's lines ("a = 1;b = 2"), in a new directory: (directory, database, run
    directory, process), once its pid file is there."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    db, run_dir, d = spawn(tmp, f'include = ["{exe}"]\nn_rawseq = 2\nn_chk = 1000000\n'
                           'min_launch_kb = 0\nt_idle_secs = 2.0\n'
                           + os.environ.get("EXTRA_CONFIG", "").replace(";", "\n") + "\n", 1)
    return tmp, db, run_dir, d


def variant(d, base, spec, settle):
    """A daemon on the state copied into directory `d` (its daemon.db) with the bench
    daemon's configuration `base` and a variant `spec`: configuration lines separated by ';',
    a first item `@PATH` running the warmstart binary at PATH (its warmstart-cli beside it);
    in a process group of its own (a Ctrl-C of the script does not reach it), once its pid
    file is there and `settle` seconds more."""
    items = spec.split(";")
    ws = items.pop(0)[1:] if items and items[0].startswith("@") else WS
    open(f"{d}/config.toml", "w").write(base + "\n".join(i for i in items if i) + "\n")
    p = subprocess.Popen([ws, "--db", f"{d}/daemon.db", "-q", "daemon", "--config",
                          f"{d}/config.toml", "--run-dir", f"{d}/run"],
                         stderr=open(f"{d}/log", "a"), process_group=0)
    t0 = time.monotonic()
    while not os.path.exists(f"{d}/run/daemon.pid"):
        if p.poll() is not None or time.monotonic() - t0 > 30:
            p.kill()
            raise SystemExit(f"the daemon did not start: {open(f'{d}/log').read()}")
        time.sleep(0.02)
    time.sleep(settle)
    return p
