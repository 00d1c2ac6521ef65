//! Automatic mode: a system daemon that sees every exec (proc connector), and runs FAST's
//! launch manager cycle for each application (4.4): learning launches are traced as they
//! happen (no cache drop), after N_rawseq of them the plans are built off the launch path,
//! later launches are prefetched, and every N_chk-th one is traced to check the plan (miss
//! ratio, synchronous readaheads, changed files), sending the app back to learning.
//!
//! A launch never waits for the daemon: exec notifications are asynchronous, and if the
//! daemon hangs or dies, launches go on as if it were not there.

pub mod config;
pub mod detect;
pub mod procconn;

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};
use serde::{Deserialize, Serialize};

use crate::app::AppKey;
use crate::plan::{Entry, Plan};
use crate::prefetch::PrefetchOptions;
use crate::resolve::FileId;
use crate::schedule::{auto, Strategy};
use crate::sequence::{RawRun, SysBlockDevices, SysResidency, Target};
use crate::serve::Serving;
use crate::store::{AppRow, LaunchRecord, Store, StoreError};
use crate::sys::{self, monotonic_ns};
use crate::trace::tracefs::Tracefs;
use crate::trace::{knobs, TraceConfig, TracedLaunch};
use config::Config;
use procconn::{ProcConnector, ProcEvent};

pub const PID_FILE: &str = "daemon.pid";

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Trace(#[from] crate::trace::TraceError),
    #[error("another warmstart daemon is running (pid file {0})")]
    AlreadyRunning(PathBuf),
    #[error("{0}")]
    Io(String),
}

/// Where an app is in its cycle (persisted in the store).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    #[default]
    Learning,
    Prefetching,
    /// Its launch reads too little to be worth prefetching.
    TooSmall,
}

/// Per-app counters the daemon keeps (in the store's app settings).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lifecycle {
    pub phase: Phase,
    pub launches: u64,
    pub prefetches: u64,
    /// Prefetched launches since the last check (FAST's n_pref).
    pub since_check: u32,
    pub last_miss_ratio: Option<f64>,
    /// The last check's waste: planned pages the launch did not use, over the plan's pages.
    pub last_waste: Option<f64>,
    /// What the last check did: kept the plan, or sent the app back to learning and why.
    pub last_check: Option<String>,
    /// Why the app last went back to learning.
    pub relearn_reason: Option<String>,
    /// Estimated time saved so far, ms (see `saved_estimate`).
    pub saved_ms: f64,
    /// Planned files a checked launch was seen writing (`Changes::written`): the app's own
    /// data, such as a browser's profile, which it may rewrite at any launch, checked or
    /// not. Their changes never send it back to learning. At most `MAX_OWN_FILES`.
    #[serde(default)]
    pub own_files: Vec<String>,
}

/// Most files `Lifecycle::own_files` remembers (the latest seen).
const MAX_OWN_FILES: usize = 64;

pub struct DaemonOptions {
    pub db: PathBuf,
    pub config_path: PathBuf,
    pub run_dir: PathBuf,
}

/// A plan ready to prefetch the moment its app execs.
struct Cached {
    app: AppRow,
    plan: Arc<Plan>,
    /// How its next launch goes: a strategy's plan replayed, or (`None`) a plain launch,
    /// `auto`'s choice when no strategy beats one in the daemon's launches.
    strategy: auto::Choice,
    /// The file whose open for exec starts its launch before the exec event
    /// (`AppKey::opened_for_exec`): its executable, or the script an interpreter runs by its
    /// `#!` line.
    opened: Option<PathBuf>,
}

struct Shared {
    db: PathBuf,
    cfg: RwLock<Config>,
    plans: Mutex<HashMap<String, Cached>>,
    /// Apps with a learning or checking trace under way (one at a time per app).
    tracing: Mutex<HashSet<String>>,
    /// Pids of launches being handled; an exec below one of them is part of that launch.
    active: Mutex<HashSet<i32>>,
    tfs: Tracefs,
    /// A tracing setup ready to follow the next learning or checking launch.
    prepared: Mutex<Option<crate::trace::session::Prepared>>,
    queueing: bool,
    stop: AtomicBool,
    /// Worker threads not yet ended; shutdown waits for them, since any may hold (or be
    /// creating) a tracefs instance.
    workers: AtomicUsize,
    /// Launches not handled because `max_workers` were busy.
    turned_away: AtomicUsize,
    /// Exec-to-first-prefetch-request latencies, µs.
    latencies: Mutex<Vec<f64>>,
    /// Held across every read-modify-write of an app's lifecycle, so concurrent launches
    /// neither lose counts nor undo a return to learning.
    lc_lock: Mutex<()>,
    /// Pids whose launch was picked up from their exec open (fanotify), so the exec event
    /// that follows is not handled twice; it brings the exec's kernel time, for the latency.
    early: Mutex<HashMap<i32, Early>>,
    /// Files opened for exec by more than one app (a program's modes, `AppKey`): a launch
    /// of one waits for its exec event, which brings the arguments that tell them apart.
    /// It only grows while the daemon runs, bounded by the apps' files.
    modes: Mutex<HashSet<PathBuf>>,
    /// Launches picked up at their exec open as one app that their exec event showed to be
    /// another (a new mode): served, but neither counted, timed nor checked as that app's
    /// (a check of GIMP's window launched so widened the batch mode's plan by 15 MiB).
    foreign: Mutex<HashSet<i32>>,
    /// Keys of the apps in the store.
    known: Mutex<HashSet<String>>,
    /// Commands launched once, not yet apps: when (`learn_window`), at most `SEEN_CAP`.
    seen: Mutex<HashMap<String, Instant>>,
    /// Processes (and their ancestors) that opened a burst's trigger the burst service could
    /// prefetch, and when: a launch among them is not timed as a plain one (`timed_plain`).
    burst_openers: Mutex<HashMap<i32, Instant>>,
}

/// A launch picked up at its exec open, before its exec event.
struct Early {
    at: Instant,
    /// The exec event's kernel time, once it came.
    exec_ts: Option<u64>,
    /// The app it is prefetched as, and that app's executable.
    key: String,
    exe: PathBuf,
    /// The file whose open started it.
    opened: PathBuf,
}

/// First launches remembered at once; the oldest go first. A storm of distinct one-off
/// commands costs this much memory and nothing else.
const SEEN_CAP: usize = 4096;

/// Whether a launch of `key`, not an app yet, is one to learn from: its second within the
/// learning window. A first launch is only remembered (in memory, bounded).
fn second_launch(seen: &mut HashMap<String, Instant>, key: &str, window: Duration) -> bool {
    if seen.get(key).is_some_and(|t| t.elapsed() < window) {
        seen.remove(key);
        return true;
    }
    if seen.len() >= SEEN_CAP {
        seen.retain(|_, t| t.elapsed() < window);
        while seen.len() >= SEEN_CAP {
            let Some(oldest) = seen.iter().min_by_key(|(_, t)| **t).map(|(k, _)| k.clone()) else {
                break;
            };
            seen.remove(&oldest);
        }
    }
    seen.insert(key.to_string(), Instant::now());
    false
}

/// The lifecycle lock; a poisoned lock still serialises (the data lives in the store).
fn lc_guard(sh: &Shared) -> std::sync::MutexGuard<'_, ()> {
    sh.lc_lock.lock().unwrap_or_else(|e| e.into_inner())
}

fn store(sh: &Shared) -> Result<Store, DaemonError> {
    Ok(Store::open(&sh.db)?)
}

fn lifecycle(s: &Store, app: i64) -> Lifecycle {
    s.app_settings(app)
        .ok()
        .and_then(|st| st.lifecycle)
        .unwrap_or_default()
}

fn save_lifecycle(s: &mut Store, app: i64, lc: &Lifecycle) {
    if let Ok(mut st) = s.app_settings(app) {
        st.lifecycle = Some(lc.clone());
        let _ = s.set_app_settings(app, &st);
    }
}

/// How the daemon launches an app next, and the plan for it: its pinned strategy's, else
/// auto's choice, falling back to the launch-order plan. A plain launch (`auto`'s `None`)
/// keeps the launch-order plan: its launches are looked at for how warm they are, and the
/// strategies `auto` re-tries need one. None when no plan is stored; a corrupt row is an
/// error: the app must relearn.
fn choose_plan(
    s: &Store,
    app: &AppRow,
    queueing: bool,
) -> Result<Option<(Arc<Plan>, auto::Choice)>, StoreError> {
    let choice = match app.strategy.as_deref().and_then(Strategy::parse) {
        Some(st) => Some(st),
        None => auto::choose_for_daemon(s, app.id, queueing)?.0,
    };
    let plan = match choice {
        Some(st) => match s.plan_for(app, st.name())? {
            Some(p) => Some(p),
            None => s.plan(app)?,
        },
        None => s.plan(app)?,
    };
    Ok(plan.map(|p| (Arc::new(p), choice)))
}

fn refresh_cache(sh: &Shared) {
    let Ok(mut s) = store(sh) else { return };
    let _lc = lc_guard(sh);
    let prune_days = sh.cfg.read().map(|c| c.prune_after_days).unwrap_or(0);
    if prune_days > 0 {
        let before = crate::sys::now_unix() - i64::from(prune_days) * 86_400;
        match s.prune_apps(before) {
            Ok(gone) if !gone.is_empty() => tracing::info!(
                "forgot {} app(s) not launched for {prune_days} days: {}",
                gone.len(),
                gone.join(", ")
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!("cannot prune old apps: {e}"),
        }
    }
    let Ok(rows) = s.list() else { return };
    if let Ok(mut k) = sh.known.lock() {
        *k = rows.iter().map(|r| r.app.clone()).collect();
    }
    let mut m = HashMap::new();
    let mut opened: HashMap<PathBuf, usize> = HashMap::new();
    for r in rows {
        let Ok(Some(app)) = s.app_by_key(&r.app) else {
            continue;
        };
        if let Some(f) = AppKey::opened_for_exec(&app.key, &app.exe) {
            *opened.entry(f).or_default() += 1;
        }
        let mut lc = lifecycle(&s, app.id);
        // A relearning app keeps its old plan meanwhile.
        if !app.enabled || !matches!(lc.phase, Phase::Prefetching | Phase::Learning) {
            continue;
        }
        let learning = lc.phase == Phase::Learning;
        match choose_plan(&s, &app, sh.queueing) {
            Ok(Some((plan, strategy))) => {
                m.insert(
                    app.key.clone(),
                    Cached {
                        opened: AppKey::opened_for_exec(&app.key, &app.exe),
                        app,
                        plan,
                        strategy,
                    },
                );
            }
            // Learning without a plan yet: nothing to prefetch meanwhile.
            Ok(None) if learning => {}
            // Prefetching needs a plan; without a usable one the app learns again.
            Ok(None) => {
                tracing::warn!("{}: no plan stored; back to learning", app.key);
                relearn(sh, &mut s, &app, &mut lc, "no plan stored".into(), false);
            }
            Err(StoreError::CorruptPlan { source, .. }) => {
                tracing::warn!("{}: plan row corrupt ({source}); back to learning", app.key);
                relearn(
                    sh,
                    &mut s,
                    &app,
                    &mut lc,
                    format!("corrupt plan: {source}"),
                    false,
                );
            }
            Err(e) => tracing::warn!("{}: cannot read its plan: {e}", app.key),
        }
    }
    if let Ok(mut modes) = sh.modes.lock() {
        modes.extend(opened.into_iter().filter(|(_, n)| *n > 1).map(|(f, _)| f));
    }
    if let Ok(mut p) = sh.plans.lock() {
        *p = m;
    }
}

fn read_argv(pid: i32) -> Option<(PathBuf, Vec<std::ffi::OsString>)> {
    use std::os::unix::ffi::OsStringExt;
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<std::ffi::OsString> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| std::ffi::OsString::from_vec(a.to_vec()))
        .collect();
    (!argv.is_empty()).then_some((exe, argv))
}

/// Whether `pid` (or an ancestor) is a launch the daemon is already handling.
/// Whether `pid` runs under a warmstart command (`record`, `demo`, `explain`, `run --stats`:
/// their `warmstart-cli` process is an ancestor). Those launches are warmstart's own: a
/// recording traced while the daemon prefetched it learned a degraded plan (lookups 49 -> 3,
/// issue #30 item 7), and a wrapped `run` prefetches for itself.
fn under_warmstart_command(pid: i32) -> bool {
    let mut p = pid;
    for _ in 0..32 {
        match sys::parent_of(p) {
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
        if sys::comm_of(p).is_some_and(|c| c == crate::cli::front::FULL) {
            return true;
        }
    }
    false
}

/// For the burst service: whether a trigger opened by `pid` belongs to a launch this daemon
/// prefetches (or learns) itself: `pid` is such a launch (or below one), or the trigger is
/// the executable or script of an app with a plan, whose opening the exec monitor may not
/// have handled yet.
fn launch_owned(sh: &Arc<Shared>) -> crate::cluster::service::LaunchOwned {
    let weak = Arc::downgrade(sh);
    Arc::new(move |pid, path| {
        let Some(sh) = weak.upgrade() else {
            return false;
        };
        let lineage = lineage(pid);
        let owned = in_active(&sh, &lineage)
            || sh.plans.lock().is_ok_and(|p| {
                p.values()
                    .any(|c| Path::new(&c.app.exe) == path || c.opened.as_deref() == Some(path))
            });
        if !owned {
            note_burst_openers(&sh.burst_openers, &lineage);
        }
        owned
    })
}

/// How long the daemon waits for the burst service's setup before it says it is ready
/// without it: the setup took 42-46 ms with the cache dropped, on the bench daemon's state
/// (12 bursts; docs/measurements.md, 2026-12-07, third entry).
const BURSTS_READY_WAIT: Duration = Duration::from_secs(5);

/// How long a burst's opener is remembered: a launch's trigger opens at its exec, before the
/// daemon learns from it.
const BURST_OPENER_KEEP: Duration = Duration::from_secs(60);

fn note_burst_openers(openers: &Mutex<HashMap<i32, Instant>>, lineage: &[i32]) {
    if let Ok(mut o) = openers.lock() {
        o.retain(|_, at| at.elapsed() < BURST_OPENER_KEEP);
        let now = Instant::now();
        for &p in lineage {
            o.insert(p, now);
        }
    }
}

/// Whether a burst may have been prefetched for `pid`'s launch (see `burst_openers`).
fn burst_opened_by(openers: &Mutex<HashMap<i32, Instant>>, pid: i32) -> bool {
    openers.lock().is_ok_and(|o| {
        o.get(&pid)
            .is_some_and(|at| at.elapsed() < BURST_OPENER_KEEP)
    })
}

fn part_of_active(sh: &Shared, pid: i32) -> bool {
    in_active(sh, &lineage(pid))
}

/// Whether a process of `lineage` (a process and its ancestors) is a launch being handled.
fn in_active(sh: &Shared, lineage: &[i32]) -> bool {
    sh.active
        .lock()
        .is_ok_and(|active| lineage.iter().any(|p| active.contains(p)))
}

/// `pid` and its ancestors, nearest first (at most 32; not init): read before the `active`
/// lock is taken, so that the exec path's `handle` never waits on another thread's /proc
/// reads.
fn lineage(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    while out.len() < 32 {
        match sys::parent_of(out[out.len() - 1]) {
            Some(pp) if pp > 1 => out.push(pp),
            _ => break,
        }
    }
    out
}

struct ActiveGuard<'a> {
    sh: &'a Shared,
    pid: i32,
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        if let Ok(mut a) = self.sh.active.lock() {
            a.remove(&self.pid);
        }
    }
}

/// The daemon's traces hold ext4's inode readahead off in the machine-wide domain (the
/// default `run_dir`), like `run` and `record`: the setting is one per machine, so its holders
/// must count each other, whatever `--run-dir` the daemon's pid file is in.
fn trace_config(cfg: &Config) -> TraceConfig {
    TraceConfig {
        buffer_kb: cfg.buffer_kb,
        idle: cfg.idle(),
        timeout: cfg.timeout(),
        drop_caches: false,
        quiet: false,
        ..TraceConfig::default()
    }
}

/// An exec happened: decide, quickly, what to do, and do the rest on another thread.
fn on_exec(sh: &Arc<Shared>, pid: i32, exec_ts: u64) {
    crate::trace::tracefs::note_launch();
    let early = sh.early.lock().ok().and_then(|mut e| {
        e.get_mut(&pid).map(|entry| {
            entry.exec_ts = Some(exec_ts);
            (entry.key.clone(), entry.exe.clone(), entry.opened.clone())
        })
    });
    if let Some((served, app_exe, opened)) = early {
        // Already being prefetched since its exec open, as the one app that file started
        // so far: if its arguments make it another (a mode not seen before), the next
        // launch from that file waits for its exec event, and this one counts as the new
        // app's first. An exec on the way to it (`env` in a `#!` line) tells nothing yet.
        let own = read_argv(pid)
            .filter(|(exe, _)| std::fs::canonicalize(exe).is_ok_and(|e| e == app_exe));
        if let Some((exe, argv)) = own {
            let key = AppKey::for_command(&exe, &argv).key;
            if key != served {
                tracing::debug!("{key}: a new mode of {}", opened.display());
                if let Ok(mut m) = sh.modes.lock() {
                    m.insert(opened);
                }
                if let Ok(mut f) = sh.foreign.lock() {
                    // Taken back when its serving ends; bounded should one never end.
                    if f.len() >= SEEN_CAP {
                        f.clear();
                    }
                    f.insert(pid);
                }
                let window = sh.cfg.read().map(|c| c.learn_window()).ok();
                if let (Ok(mut seen), Some(w)) = (sh.seen.lock(), window) {
                    second_launch(&mut seen, &key, w);
                }
            }
        }
        return;
    }
    if pid as u32 == std::process::id() || part_of_active(sh, pid) || under_warmstart_command(pid) {
        return;
    }
    let Some((exe, argv)) = read_argv(pid) else {
        return;
    };
    let cfg = match sh.cfg.read() {
        Ok(c) => c.clone(),
        Err(_) => return,
    };
    let key = AppKey::for_command(&exe, &argv);
    if !cfg.manages(&exe, &key.selector) {
        return;
    }
    // Fast path: a plan is cached, prefetch at once.
    let cached = sh.plans.lock().ok().and_then(|p| {
        p.get(&key.key)
            .map(|c| (c.app.clone(), c.plan.clone(), c.strategy))
    });
    match cached {
        Some((app, plan, strategy)) => handle(sh, pid, "warmstart-launch", move |sh| {
            serve_launch(sh, pid, exec_ts, app, plan, strategy, &cfg)
        }),
        None => {
            // Not an app yet: learned from its second launch within the window only.
            let known = sh.known.lock().is_ok_and(|k| k.contains(&key.key));
            if !known
                && !sh
                    .seen
                    .lock()
                    .is_ok_and(|mut s| second_launch(&mut s, &key.key, cfg.learn_window()))
            {
                tracing::debug!("{}: first launch; learned from its second", key.key);
                return;
            }
            handle(sh, pid, "warmstart-learn", move |sh| {
                learn_launch(sh, pid, exec_ts, key, &cfg)
            })
        }
    }
}

/// Handle launch `pid` on a thread of its own, marking it active (its children are part of
/// it) until the handler's guard drops; a thread that cannot start leaves nothing marked.
fn handle(sh: &Arc<Shared>, pid: i32, name: &str, f: impl FnOnce(&Arc<Shared>) + Send + 'static) {
    if let Ok(mut a) = sh.active.lock() {
        a.insert(pid);
    }
    if !spawn_worker(sh, name, f) {
        if let Ok(mut a) = sh.active.lock() {
            a.remove(&pid);
        }
    }
}

/// Counts one worker thread, from before it is spawned until it ends (or fails to start).
struct Worker(Arc<Shared>);

impl Drop for Worker {
    fn drop(&mut self) {
        self.0.workers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Run `f` on a counted thread; false when the thread could not start.
fn spawn_worker(
    sh: &Arc<Shared>,
    name: &str,
    f: impl FnOnce(&Arc<Shared>) + Send + 'static,
) -> bool {
    let cap = sh.cfg.read().map(|c| c.max_workers).unwrap_or(32);
    if !take_slot(&sh.workers, cap) {
        // An exec storm: this launch runs without the daemon.
        sh.turned_away.fetch_add(1, Ordering::Relaxed);
        return false;
    }
    let w = Worker(sh.clone());
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || f(&w.0))
        .is_ok()
}

/// The exec monitor: fanotify `FAN_OPEN_EXEC` on every block-backed filesystem. The open of
/// the executable is reported ~250 µs before the proc connector's exec event (measured with
/// `warmstart daemon --measure-detection`), early enough to start prefetching an app keyed
/// by its executable alone; interpreters need their arguments and wait for the exec event.
fn exec_monitor() -> Option<Fanotify> {
    let fan = Fanotify::init(
        InitFlags::FAN_CLASS_NOTIF | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
        EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC | EventFFlags::O_LARGEFILE,
    )
    .map_err(|e| tracing::warn!("fanotify_init: {e}; exec events only"))
    .ok()?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut marked = 0;
    for mp in crate::trace::opens::block_mounts(&mountinfo) {
        match fan.mark(
            MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_FILESYSTEM,
            MaskFlags::FAN_OPEN_EXEC,
            nix::fcntl::AT_FDCWD,
            Some(&mp),
        ) {
            Ok(()) => marked += 1,
            Err(e) => tracing::debug!("fanotify exec mark {}: {e}", mp.display()),
        }
    }
    (marked > 0).then_some(fan)
}

/// An executable was opened for exec by `pid`: if it is an app with a cached plan, start
/// prefetching now, before the exec completes.
fn on_exec_open(sh: &Arc<Shared>, pid: i32, exe: PathBuf) {
    crate::trace::tracefs::note_launch();
    let now = monotonic_ns();
    let name = exe.file_name().unwrap_or_default().to_string_lossy();
    if AppKey::is_interpreter(&name) || pid as u32 == std::process::id() {
        return;
    }
    // The one app this file starts: a program's, or a script's run by its `#!` line, opened
    // for exec before its interpreter is (R, soffice, chromium and npm start so): the exec
    // event of the interpreter comes after its exec has read the interpreter and its loader,
    // and an `env` in the `#!` line adds a whole exec more. A file that starts several
    // (modes) waits for the exec event, whose arguments tell which.
    if sh.modes.lock().is_ok_and(|m| m.contains(&exe)) {
        return;
    }
    let cached = sh.plans.lock().ok().and_then(|p| {
        let mut of_file = p
            .values()
            .filter(|c| c.opened.as_deref() == Some(exe.as_path()));
        match (of_file.next(), of_file.next()) {
            (Some(c), None) => Some((c.app.clone(), c.plan.clone(), c.strategy)),
            _ => None,
        }
    });
    let Some((app, plan, strategy)) = cached else {
        return;
    };
    let cfg = match sh.cfg.read() {
        Ok(c) => c.clone(),
        Err(_) => return,
    };
    let by_script = Path::new(&app.exe) != exe;
    let key = if by_script {
        AppKey::for_command(
            Path::new(&app.exe),
            &[app.exe.clone().into(), exe.clone().into()],
        )
    } else {
        AppKey::for_command(&exe, &[exe.clone().into_os_string()])
    };
    if !cfg.manages(&key.exe, &key.selector)
        || part_of_active(sh, pid)
        || under_warmstart_command(pid)
    {
        return;
    }
    if let Ok(mut e) = sh.early.lock() {
        e.retain(|_, x| x.at.elapsed() < Duration::from_secs(10));
        e.insert(
            pid,
            Early {
                at: Instant::now(),
                exec_ts: None,
                key: app.key.clone(),
                exe: PathBuf::from(&app.exe),
                opened: exe,
            },
        );
    }
    if by_script {
        tracing::debug!("{}: prefetched from its script's exec open", app.key);
    }
    handle(sh, pid, "warmstart-launch", move |sh| {
        serve_launch(sh, pid, now, app, plan, strategy, &cfg)
    });
}

/// A launch of an app with a plan, as `auto` chose for it: prefetched, or plain. A
/// relearning app's launches are prefetched with its old plan (and traced to learn from)
/// whatever the choice.
fn serve_launch(
    sh: &Arc<Shared>,
    pid: i32,
    exec_ts: u64,
    app: AppRow,
    plan: Arc<Plan>,
    choice: auto::Choice,
    cfg: &Config,
) {
    let relearning = || {
        store(sh)
            .map(|s| lifecycle(&s, app.id).phase == Phase::Learning)
            .unwrap_or(false)
    };
    match choice {
        Some(st) => prefetch_launch(sh, pid, exec_ts, app, plan, st, cfg),
        None if relearning() => {
            let st = auto::preference(sh.queueing)[0];
            prefetch_launch(sh, pid, exec_ts, app, plan, st, cfg)
        }
        None => plain_launch(sh, pid, exec_ts, app, &plan),
    }
}

/// The kernel time of `pid`'s exec event, for a launch picked up at its exec open (a
/// script's open comes before its interpreter's exec), else `or`: the launches the daemon
/// times are timed from their exec, however it found them.
fn exec_event_ts(sh: &Shared, pid: i32, or: u64) -> u64 {
    sh.early
        .lock()
        .ok()
        .and_then(|e| e.get(&pid).and_then(|x| x.exec_ts))
        .unwrap_or(or)
}

/// Until when a launch that exec'd at `exec_ts` (monotonic ns) is timed: `TIMED_LAUNCH` on.
fn timed_until(exec_ts: u64) -> Instant {
    let since_exec = Duration::from_nanos(monotonic_ns().saturating_sub(exec_ts));
    Instant::now() + crate::serve::TIMED_LAUNCH.saturating_sub(since_exec)
}

/// A launch's time from its exec to its end, ms; 0 (untimed) if it did not end in time.
fn launch_ms(exec_ts: u64, ended: Option<Instant>) -> f64 {
    ended.map_or(0.0, |t| {
        let ago = t.elapsed().as_nanos() as u64;
        monotonic_ns().saturating_sub(ago).saturating_sub(exec_ts) as f64 / 1e6
    })
}

/// A launch `auto` makes plain (no strategy beat a plain launch in the daemon's launches, or
/// a plain launch is being timed): nothing prefetched, held or pinned. It is timed from its
/// exec to its exit as a prefetched one is, with how much of its plan was in memory at the
/// start, so that `auto` keeps comparing (and leaves a warm one out), as `run`'s plain
/// launches are. Its whole tree is the launch until then: a child the daemon took for an app
/// of its own would be prefetched behind the choice's back (soffice's `soffice.bin`).
fn plain_launch(sh: &Arc<Shared>, pid: i32, exec_ts: u64, app: AppRow, plan: &Plan) {
    let _active = ActiveGuard { sh, pid };
    let looked = crate::prefetch::sample_residency(&plan.look());
    let Ok(pidfd) = sys::pidfd_open(pid) else {
        return; // gone already: nothing to time
    };
    let ended = crate::serve::exit_before(&pidfd, timed_until(exec_ts), &|| {
        sh.stop.load(Ordering::SeqCst)
    });
    let wall_ms = launch_ms(exec_event_ts(sh, pid, exec_ts), ended);
    if another_apps(sh, pid, &app) {
        return;
    }
    tracing::debug!("{}: plain launch, {wall_ms:.1} ms", app.key);
    let Ok(mut s) = store(sh) else { return };
    let _lc = lc_guard(sh);
    let mut lc = lifecycle(&s, app.id);
    lc.launches += 1;
    save_lifecycle(&mut s, app.id, &lc);
    let _ = s.add_launch(
        app.id,
        &LaunchRecord {
            at_unix: crate::sys::now_unix(),
            mode: crate::store::mode::DAEMON.into(),
            wall_ms,
            prefetched_bytes: looked.seen,
            resident_bytes: Some(looked.cached),
            strategy: Some(auto::PLAIN.into()),
            auto: true,
            ..LaunchRecord::default()
        },
    );
    if lc.phase == Phase::Prefetching {
        follow_auto(sh, &s, &app, None);
    }
}

/// Whether launch `pid`, served as `app` from its exec open, turned out to be another app
/// (`Shared::foreign`); forgets it either way, its serving being over.
fn another_apps(sh: &Shared, pid: i32, app: &AppRow) -> bool {
    let foreign = sh.foreign.lock().is_ok_and(|mut f| f.remove(&pid));
    if foreign {
        tracing::debug!("{}: a launch of another mode, not counted", app.key);
    }
    foreign
}

/// A prefetching launch; every N_chk-th is traced as well, to check the plan.
fn prefetch_launch(
    sh: &Arc<Shared>,
    pid: i32,
    exec_ts: u64,
    app: AppRow,
    plan: Arc<Plan>,
    strategy: Strategy,
    cfg: &Config,
) {
    let active = ActiveGuard { sh, pid };
    let started_mono = monotonic_ns();
    let opts = PrefetchOptions {
        jobs: cfg.jobs,
        mem_cap: (cfg.memory_cap_mb > 0).then_some(cfg.memory_cap_mb.saturating_mul(1024 * 1024)),
        avoid_cpu: crate::sys::last_cpu(pid),
        inode_readahead_off: Some(crate::prefetch::KnobHold::Take(Default::default())),
        // A user's launch brings in only what that user may read (issue #30, item 10).
        reader: sys::Credentials::of_process(pid).filter(|c| c.uid != 0),
        ..PrefetchOptions::default()
    };
    // What `run` gives a launch, as early as a launch found after its exec can have it: the
    // executable's pages in the order exec and the loader want them, the application kept
    // off the disk's interrupt CPU while the plan is issued, the prefetch beside it.
    crate::prefetch::warm_executable(Path::new(&app.exe), Some(&plan.look()));
    let placement = crate::placement::for_launch(pid, &plan);
    match &placement {
        Some(p) => tracing::debug!(
            "{}: launch on CPUs {:?} while the plan is issued",
            app.key,
            p.app
        ),
        None => tracing::debug!("{}: no CPU to keep the launch off", app.key),
    }
    let opts = PrefetchOptions { placement, ..opts };
    let started = Instant::now();
    let serving = match Serving::start(pid, plan.clone(), opts, true) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("{}: cannot start prefetching: {e}", app.key);
            return;
        }
    };
    let (since_check, relearning) = store(sh)
        .map(|s| {
            let lc = lifecycle(&s, app.id);
            (lc.since_check, lc.phase == Phase::Learning)
        })
        .unwrap_or_default();
    // A relearning app's launches are prefetched with its old plan and traced to learn from.
    let check = (relearning || since_check + 1 >= cfg.n_chk) && claim_trace(sh, &app.key);
    let (served, checked) = if check {
        // Served on a thread of its own meanwhile, so that the launch gets its CPUs back
        // when the plan is issued, not when the trace ends.
        let sh2 = sh.clone();
        let watcher = std::thread::Builder::new()
            .name("warmstart-serve".into())
            .spawn(move || {
                let mut serving = serving;
                let exited = serving.watch(started, &|| sh2.stop.load(Ordering::SeqCst));
                serving.finish(exited)
            });
        let tc = trace_config(cfg);
        let r = attach(sh, pid, exec_ts, cfg).and_then(|a| a.trace(exec_ts, &tc, &sh.stop));
        release_trace(sh, &app.key);
        let checked = Some(r.map_err(|e| match e {
            crate::trace::TraceError::InstanceCap(_) => tracing::debug!("{}: {e}", app.key),
            e => tracing::warn!(
                "{}: the check could not trace this launch ({e}); judging its files only",
                app.key
            ),
        }));
        match watcher.map(|w| w.join()) {
            Ok(Ok(served)) => (served, checked),
            _ => {
                tracing::warn!("{}: the prefetch's watcher failed", app.key);
                return;
            }
        }
    } else {
        let mut serving = serving;
        let exited = serving.watch(started, &|| sh.stop.load(Ordering::SeqCst));
        (serving.finish(exited), None)
    };
    let report = &served.report;
    // Measured from the exec event's kernel time; a launch picked up at its exec open
    // can have started prefetching before that (a negative latency).
    let exec_ts = exec_event_ts(sh, pid, exec_ts);
    let first = started_mono as f64 + report.first_request_us * 1000.0;
    let latency_us = (first - exec_ts as f64) / 1000.0;
    if report.requests > 0 {
        if let Ok(mut l) = sh.latencies.lock() {
            l.push(latency_us);
        }
    }
    // Its children are launches of their own from here on (as once its plan was issued).
    drop(active);
    if another_apps(sh, pid, &app) {
        return;
    }
    // Timed as `run` times its launches, from the exec to the exit if that comes within
    // TIMED_LAUNCH, so that `auto` can compare strategies by the daemon's own launches; a
    // checked launch is slowed by its trace and is not timed.
    let wall_ms = if checked.is_none() {
        let ended = served.ended_before(timed_until(exec_ts), &|| sh.stop.load(Ordering::SeqCst));
        launch_ms(exec_ts, ended)
    } else {
        0.0
    };
    let Ok(mut s) = store(sh) else { return };
    let _lc = lc_guard(sh);
    let mut lc = lifecycle(&s, app.id);
    lc.launches += 1;
    if lc.phase == Phase::Learning && relearning {
        lc.prefetches += 1;
        // An empty trace missed the launch (see `learn_launch`).
        let run = match checked {
            Some(Ok(t)) => Some(learning_run(&t, cfg, Path::new(&app.exe), &app.key))
                .filter(|r| !r.accesses.is_empty()),
            _ => None,
        };
        if let Some(run) = run {
            match s.add_run(app.id, &run) {
                Ok(n) if n >= cfg.n_rawseq as usize => {
                    if build_plans(&mut s, &app, &mut lc, cfg, None)
                        .bytes()
                        .is_some()
                    {
                        drop(_lc);
                        refresh_cache(sh);
                        return;
                    }
                }
                Ok(n) => tracing::info!("{}: relearning launch {n}/{}", app.key, cfg.n_rawseq),
                Err(e) => tracing::warn!("{}: could not store a learning run: {e}", app.key),
            }
        }
        save_lifecycle(&mut s, app.id, &lc);
        return;
    }
    if lc.phase != Phase::Prefetching {
        // Sent back to learning (or disabled) while this launch ran: count it, nothing more.
        save_lifecycle(&mut s, app.id, &lc);
        return;
    }
    lc.prefetches += 1;
    lc.since_check += 1;
    lc.saved_ms += saved_estimate(&plan, lc.last_miss_ratio, sh);
    let _ = s.add_launch(
        app.id,
        &LaunchRecord {
            at_unix: crate::sys::now_unix(),
            mode: crate::store::mode::DAEMON.into(),
            wall_ms,
            prefetched_bytes: report.data_bytes + report.metadata_bytes,
            resident_bytes: Some(report.resident_bytes),
            stale_files: report.files_stale + report.files_missing,
            prefetch_ms: report.elapsed_ms,
            strategy: Some(strategy.name().into()),
            auto: app.strategy.is_none(),
            ..LaunchRecord::default()
        },
    );
    if app.strategy.is_none() {
        follow_auto(sh, &s, &app, Some(strategy));
    }
    // A check whose trace failed still looks at the planned files (and is not retried at
    // every launch: a trace that keeps failing would otherwise keep a changed app from ever
    // being relearned).
    if let Some(Err(())) = checked {
        lc.since_check = 0;
        let changed = changed_files(&plan, &Own::files(&lc.own_files));
        if changed > 0 {
            let reason = format!("{changed} planned files changed since learning");
            tracing::info!("{}: check: back to learning: {reason}", app.key);
            lc.last_check = Some(format!("back to learning: {reason}"));
            back_to_learning(sh, &mut s, &app, &mut lc, reason);
            return;
        }
    }
    if let Some(Ok(t)) = checked {
        lc.since_check = 0;
        let run = RawRun::from_trace(&t, sys::page_size(), &SysBlockDevices);
        let mut verdict = judge(&plan, &run, cfg, &lc.own_files);
        for p in &verdict.written {
            tracing::info!(
                "{}: {p} is the app's own writing; its changes do not count",
                app.key
            );
        }
        remember_own(&mut lc, std::mem::take(&mut verdict.written));
        lc.last_miss_ratio = Some(verdict.miss_ratio);
        lc.last_waste = Some(verdict.waste);
        // A plan short of the launch with none of its files changed is widened with the
        // launch's run; anything else sends the app back to learning.
        let widens = verdict.widen && !run.accesses.is_empty();
        let action = |r: &str| {
            if widens {
                format!("widening the plan: {r}")
            } else {
                format!("back to learning: {r}")
            }
        };
        lc.last_check = Some(
            verdict
                .reason
                .as_deref()
                .map_or_else(|| "plan kept".into(), action),
        );
        tracing::info!(
            "{}: check: miss ratio {:.3}, waste {:.3}, {} sync readaheads{}",
            app.key,
            verdict.miss_ratio,
            verdict.waste,
            run.sync_readaheads,
            verdict
                .reason
                .as_deref()
                .map(|r| format!("; {}", action(r)))
                .unwrap_or_default()
        );
        if let Some(reason) = verdict.reason {
            if widens {
                if widen(sh, &mut s, &app, &mut lc, &plan, run, &reason, cfg) {
                    drop(_lc);
                    refresh_cache(sh);
                }
                return;
            }
            back_to_learning(sh, &mut s, &app, &mut lc, reason);
            return;
        }
    }
    save_lifecycle(&mut s, app.id, &lc);
}

/// After a launch of an app on `auto`: if its choice for the next launch is another strategy
/// now (an exploring launch, or a faster one found), the cached plan follows it.
fn follow_auto(sh: &Shared, s: &Store, app: &AppRow, used: auto::Choice) {
    match choose_plan(s, app, sh.queueing) {
        Ok(Some((plan, strategy))) if strategy != used => {
            tracing::info!(
                "{}: auto: {} for the next launch (was {})",
                app.key,
                auto::name_of(strategy),
                auto::name_of(used)
            );
            if let Ok(mut p) = sh.plans.lock() {
                if let Some(c) = p.get_mut(&app.key) {
                    c.plan = plan;
                    c.strategy = strategy;
                }
            }
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("{}: cannot read its plans: {e}", app.key),
    }
}

/// Runs an app's plans are built from at most: `n_rawseq` learned, and the runs of checks
/// that widened the plans since (`widen`). Each is a few hundred KiB in the database.
const MAX_RUNS: usize = 6;

/// A check found the plan short of what this launch read, with no planned file changed: the
/// app does more than its learning launches showed (it is launched another way: GIMP with
/// its window after headless batches, LibreOffice editing after converting). Sending it back
/// to learning would plan the new way only, and the first way again after it. Instead the
/// checked launch joins the runs the plans are built from (the oldest go past `MAX_RUNS`),
/// the plans are rebuilt from what `n_rawseq` of those runs read
/// (`sequence::extract_supported`), and the next launch is checked too (see below): what
/// the new way needs is planned once two of its launches showed it, and the plan in use
/// serves until then (issue #26, item 2). Whether new plans were built.
#[allow(clippy::too_many_arguments)]
fn widen(
    sh: &Shared,
    s: &mut Store,
    app: &AppRow,
    lc: &mut Lifecycle,
    in_use: &Plan,
    run: RawRun,
    reason: &str,
    cfg: &Config,
) -> bool {
    let ran = Ran::of(&run);
    let run = private(run, cfg, Path::new(&app.exe), &app.key);
    let added = s.add_run(app.id, &run).and_then(|n| {
        if n > MAX_RUNS {
            s.keep_last_runs(app.id, MAX_RUNS)?;
        }
        Ok(n.min(MAX_RUNS))
    });
    let n = match added {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("{}: could not store the checked run: {e}", app.key);
            save_lifecycle(s, app.id, lc);
            return false;
        }
    };
    let before = in_use.summary().bytes;
    let built = match build_plans(s, app, lc, cfg, Some((in_use, ran))) {
        Built::Changed(changed) => {
            let reason = format!("{changed} planned files changed since learning");
            tracing::info!("{}: check: back to learning: {reason}", app.key);
            lc.last_check = Some(format!("back to learning: {reason}"));
            back_to_learning(sh, s, app, lc, reason);
            return false;
        }
        b => b.bytes(),
    };
    tracing::info!("{}: check: {reason}; plans widened to {n} runs", app.key);
    lc.last_check = Some(format!("widened to {n} runs: {reason}"));
    if check_after_widening(n, cfg.n_rawseq as usize, before, built) {
        lc.since_check = cfg.n_chk.saturating_sub(1);
    }
    save_lifecycle(s, app.id, lc);
    built.is_some()
}

/// Whether the launch after a widening to `runs` runs is checked too: after a first
/// widening (a new way of launching the app needs a second run to be planned) and after one
/// that grew the plan by more than 1% from `before` bytes (to see whether it now holds what
/// the app reads). Not otherwise: an app whose every launch reads something of its own (a
/// document, a video) would be traced at every launch.
fn check_after_widening(runs: usize, n_rawseq: usize, before: u64, built: Option<u64>) -> bool {
    let first = runs == n_rawseq + 1;
    let grew = built.is_some_and(|b| b > before + before / 100);
    first || grew
}

/// Whether a check says the plan no longer fits the app.
struct Verdict {
    miss_ratio: f64,
    /// Planned pages the launch did not use, over the plan's pages (read for nothing).
    waste: f64,
    /// Why the plan does not fit (None: it does).
    reason: Option<String>,
    /// The plan lacks what the launch read, and none of its files changed: the launch's
    /// run can be added to the plan's (`widen`) rather than learning again from scratch.
    widen: bool,
    /// Planned files the launch was seen writing (`Changes::written`).
    written: Vec<String>,
}

/// FAST's miss ratio (pages read from disk that the plan does not cover, over the plan's
/// pages), the waste (planned pages the launch did not use), Paralfetch's
/// synchronous-readahead share, and changed planned files.
fn judge(plan: &Plan, run: &RawRun, cfg: &Config, own_files: &[String]) -> Verdict {
    let ps = plan.page_size as u64;
    let mut covered: HashSet<(sys::Dev, u64, u64)> = HashSet::new();
    let mut plan_pages = 0u64;
    for e in &plan.entries {
        if let Entry::Data { file, offset, len } = *e {
            let f = &plan.files[file as usize];
            for p in offset / ps..(offset + len).div_ceil(ps) {
                covered.insert((f.dev, f.ino, p));
            }
            plan_pages += len.div_ceil(ps);
        }
    }
    // Pages read from disk that the plan does not cover, and of those the pages the launch
    // used (not the kernel's read-around beside them).
    let (mut missed, mut missed_used) = (0u64, 0u64);
    for a in run.accesses.iter().filter(|a| a.from_disk) {
        if let Target::File { dev, ino } = a.target {
            let n = (a.page..a.page + a.pages)
                .filter(|p| !covered.contains(&(dev, ino, *p)))
                .count() as u64;
            missed += n;
            if a.used {
                missed_used += n;
            }
        }
    }
    let share = |n: u64| {
        if plan_pages == 0 {
            0.0
        } else {
            n as f64 / plan_pages as f64
        }
    };
    let miss_ratio = share(missed);
    let used_miss = share(missed_used);
    let mut used: HashSet<(sys::Dev, u64, u64)> = HashSet::new();
    for a in run.accesses.iter().filter(|a| a.used) {
        if let Target::File { dev, ino } = a.target {
            used.extend((a.page..a.page + a.pages).map(|p| (dev, ino, p)));
        }
    }
    let waste = if covered.is_empty() {
        0.0
    } else {
        covered.iter().filter(|k| !used.contains(k)).count() as f64 / covered.len() as f64
    };
    let Changes { changed, written } = file_changes(
        plan,
        &Own {
            ran: Ran::of(run),
            files: own_files,
        },
    );
    let reason = if miss_ratio > cfg.r_miss {
        Some(format!(
            "miss ratio {miss_ratio:.3} above r_miss {}",
            cfg.r_miss
        ))
    } else if run.sync_readaheads as f64 > cfg.sync_readahead_share * plan.entries.len() as f64 {
        Some(format!(
            "{} synchronous readaheads for {} planned entries",
            run.sync_readaheads,
            plan.entries.len()
        ))
    } else if changed > 0 {
        Some(format!("{changed} planned files changed since learning"))
    } else if used_miss > cfg.w_miss {
        // Widened below (no planned file changed), never sent back to learning for it.
        Some(format!(
            "the launch used {used_miss:.3} of the plan's pages outside it, above w_miss {}",
            cfg.w_miss
        ))
    } else {
        None
    };
    Verdict {
        miss_ratio,
        waste,
        widen: reason.is_some() && changed == 0,
        reason,
        written,
    }
}

/// Planned files gone or changed (device, inode, size or mtime) since learning. The files the
/// launch writes itself (`volatile`) do not count: a lock file deleted at exit, a profile
/// replaced by a rename at every launch (LibreOffice's `.lock`, chromium's `Local State`)
/// say nothing of the app, and counting them sent LibreOffice and chromium back to learning
/// at every check (the prefetcher skips them when they changed).
///
/// Nor does a file whose new time falls within the checked launch (`ran`): the app wrote it
/// itself, at a launch that was not one of its learning ones (chromium's `Variations` and
/// `Last Version` in its profile).
///
/// Nor, at any later check, does a file a checked launch was seen writing (`own.files`):
/// chromium rewrites its profile at launches that are not checked too.
fn changed_files(plan: &Plan, own: &Own) -> usize {
    file_changes(plan, own).changed
}

/// What `changed_files` found, and the planned files that differ from the plan because the
/// checked launch wrote them (`own.ran`): each planned file looked at once.
struct Changes {
    changed: usize,
    written: Vec<String>,
}

fn file_changes(plan: &Plan, own: &Own) -> Changes {
    let mut c = Changes {
        changed: 0,
        written: Vec::new(),
    };
    for f in &plan.files {
        match state_of(f, FileId::of(&f.path).as_ref(), own) {
            FileState::Same => {}
            FileState::Written => c.written.push(path_key(f)),
            FileState::Changed => c.changed += 1,
        }
    }
    c
}

/// What planned file `f`, found now as `now`, says of the app.
#[derive(Debug, PartialEq)]
enum FileState {
    /// Unchanged, or one the app writes itself (`volatile`, `own.files`).
    Same,
    /// Changed by the checked launch itself (`own.ran`).
    Written,
    /// Gone or changed otherwise: the app changed.
    Changed,
}

fn state_of(f: &FileId, now: Option<&FileId>, own: &Own) -> FileState {
    if f.volatile || own.holds(f) {
        return FileState::Same;
    }
    match now {
        Some(n) if f.unchanged(n) => FileState::Same,
        Some(n) if own.ran.is_some_and(|r| r.wrote(n.mtime_ns)) => FileState::Written,
        _ => FileState::Changed,
    }
}

/// What counts as the app's own writing: whatever it wrote during the checked launch
/// (`ran`), and the files a checked launch was seen writing before (`files`).
#[derive(Clone, Copy, Default)]
struct Own<'a> {
    ran: Option<Ran>,
    files: &'a [String],
}

impl<'a> Own<'a> {
    fn files(files: &'a [String]) -> Own<'a> {
        Own { ran: None, files }
    }

    #[cfg(test)]
    fn during(ran: Option<Ran>) -> Own<'a> {
        Own { ran, files: &[] }
    }

    fn holds(&self, f: &FileId) -> bool {
        self.files
            .iter()
            .any(|o| std::ffi::OsStr::new(o) == f.path.as_os_str())
    }
}

/// How a planned file is remembered in `Lifecycle::own_files`.
fn path_key(f: &FileId) -> String {
    f.path.to_string_lossy().into_owned()
}

/// Add `seen` to the app's own files, keeping the latest `MAX_OWN_FILES`.
fn remember_own(lc: &mut Lifecycle, seen: Vec<String>) {
    for p in seen {
        lc.own_files.retain(|o| *o != p);
        lc.own_files.push(p);
    }
    let over = lc.own_files.len().saturating_sub(MAX_OWN_FILES);
    lc.own_files.drain(..over);
}

/// When a checked launch ran, wall clock: a planned file modified meanwhile was written by
/// the app itself.
#[derive(Clone, Copy, Debug)]
struct Ran {
    from_ns: i64,
    to_ns: i64,
}

impl Ran {
    /// A file's time is the kernel's coarse clock, up to a tick behind: the window opens
    /// that much before the exec, and no more. A wider slack (10 ms, once) let an edit made
    /// just before a launch pass as the launch's own writing; a widening then adopted the
    /// edited file as volatile and no later check saw the change (CI, twice).
    fn of(run: &RawRun) -> Option<Ran> {
        (run.started_unix_ms > 0).then(|| {
            let from_ns = run.started_unix_ms as i64 * 1_000_000;
            let slack = sys::file_time_slack_ns();
            Ran {
                from_ns: from_ns - slack,
                to_ns: from_ns.saturating_add(run.duration_ns as i64) + slack,
            }
        })
    }

    fn wrote(&self, mtime_ns: i64) -> bool {
        (self.from_ns..=self.to_ns).contains(&mtime_ns)
    }
}

/// Send an app back to learning. Its plans stay and keep being prefetched (the prefetcher
/// skips files changed since) until the new ones are built from the launches it learns from
/// meanwhile; a plan that cannot be used (missing, corrupt) goes (`keep_plan` false).
fn back_to_learning(sh: &Shared, s: &mut Store, app: &AppRow, lc: &mut Lifecycle, reason: String) {
    relearn(sh, s, app, lc, reason, true)
}

fn relearn(
    sh: &Shared,
    s: &mut Store,
    app: &AppRow,
    lc: &mut Lifecycle,
    reason: String,
    keep_plan: bool,
) {
    lc.phase = Phase::Learning;
    lc.since_check = 0;
    lc.relearn_reason = Some(reason);
    let _ = if keep_plan {
        s.forget_runs(app.id)
    } else {
        s.forget_learning(app.id)
    };
    save_lifecycle(s, app.id, lc);
    if !keep_plan {
        if let Ok(mut p) = sh.plans.lock() {
            p.remove(&app.key);
        }
    }
}

/// Time a prefetched launch saves, estimated: each planned request the app would otherwise
/// have waited for at queue depth 1, less the misses.
fn saved_estimate(plan: &Plan, miss: Option<f64>, sh: &Shared) -> f64 {
    let requests = plan
        .entries
        .iter()
        .filter(|e| matches!(e, Entry::Data { .. } | Entry::Meta { .. }))
        .count() as f64;
    let latency_ms = store(sh)
        .ok()
        .and_then(|s| s.device_facts_any().ok().flatten())
        .map(|f| f.qd1_latency_us / 1000.0)
        .unwrap_or(0.1);
    requests * latency_ms * (1.0 - miss.unwrap_or(0.0)).max(0.0)
}

/// Start following `pid` with the prepared setup (made now if none is ready), and prepare the
/// next one in the background. Attaching first, before any other work, keeps the start of
/// the launch in the recording.
fn attach(
    sh: &Arc<Shared>,
    pid: i32,
    exec_ts: u64,
    cfg: &Config,
) -> Result<crate::trace::session::Attached, crate::trace::TraceError> {
    let tc = trace_config(cfg);
    let ready = sh.prepared.lock().ok().and_then(|mut p| p.take());
    let ready_was = ready.is_some();
    let prepared = match ready {
        Some(p) => p,
        None => crate::trace::session::Prepared::new(&sh.tfs, &tc)?,
    };
    let attached = prepared.attach(pid);
    tracing::debug!(
        "pid {pid}: traced from {:.1} ms after its exec ({})",
        (monotonic_ns().saturating_sub(exec_ts)) as f64 / 1e6,
        if ready_was { "prepared" } else { "set up now" }
    );
    spawn_worker(sh, "warmstart-prepare", move |sh| prepare_next(sh, &tc));
    attached
}

fn prepare_next(sh: &Shared, tc: &TraceConfig) {
    // Made now, not when launches are quiet (as the burst service's next watch is): under
    // back-to-back launches a trace without a prepared instance set one up on the spot,
    // 40-80 ms after its exec, and saw none of a short launch (daemon_under_load_…, CI of
    // 7adb3fc); a collision of this instance's making with the next launch's attach costs
    // that launch no more, and its tree's mappings are sampled meanwhile.
    if sh.stop.load(Ordering::SeqCst) || sh.prepared.lock().map(|p| p.is_some()).unwrap_or(true) {
        return;
    }
    match crate::trace::session::Prepared::new(&sh.tfs, tc) {
        Ok(p) => {
            if let Ok(mut slot) = sh.prepared.lock() {
                if slot.is_none() && !sh.stop.load(Ordering::SeqCst) {
                    *slot = Some(p);
                }
            }
        }
        // At the instance cap a launch is traced when one ends; nothing to report.
        Err(e @ crate::trace::TraceError::InstanceCap(_)) => tracing::debug!("{e}"),
        Err(e) => tracing::warn!("cannot prepare tracing: {e}"),
    }
}

/// A traced launch as a run to learn from: its private files left out, and, learned warm,
/// what a cold run of it would have shown more of (`RawRun::complete_warm`).
fn learning_run(t: &TracedLaunch, cfg: &Config, exe: &Path, key: &str) -> RawRun {
    let mut run = private(
        RawRun::from_trace(t, sys::page_size(), &SysBlockDevices),
        cfg,
        exe,
        key,
    );
    let (added, loads) = run.complete_warm(crate::schedule::KEEP_UNUSED_GAP_PAGES, &SysResidency);
    if added > 0 {
        tracing::debug!("{key}: {added} pages in memory beside the warm launch's own");
    }
    if loads > 0 {
        tracing::debug!("{key}: {loads} inode loads of the directories the warm launch listed");
    }
    run
}

/// A learning run without the files under `exclude_paths` (by default /home: what apps read
/// there is the user's), keeping the app's executable and any path in its key (its script).
fn private(run: RawRun, cfg: &Config, exe: &Path, key: &str) -> RawRun {
    let mut keep: Vec<&Path> = vec![exe];
    keep.extend(key.split(' ').filter(|t| t.starts_with('/')).map(Path::new));
    run.without_paths(&cfg.exclude_paths, &keep)
}

/// One trace per app at a time, and at most `max_traces` in all (each holds a tracefs
/// instance of `buffer_kb` per CPU).
fn claim_trace(sh: &Shared, key: &str) -> bool {
    let cap = sh.cfg.read().map(|c| c.max_traces).unwrap_or(4);
    sh.tracing
        .lock()
        .map(|mut t| claim(&mut t, key, cap))
        .unwrap_or(false)
}

fn claim(tracing: &mut HashSet<String>, key: &str, cap: usize) -> bool {
    tracing.len() < cap && tracing.insert(key.to_string())
}

/// Count one more worker unless `cap` are running; the caller's `Worker` gives it back.
fn take_slot(workers: &AtomicUsize, cap: usize) -> bool {
    workers
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < cap).then_some(n + 1)
        })
        .is_ok()
}

fn release_trace(sh: &Shared, key: &str) {
    if let Ok(mut t) = sh.tracing.lock() {
        t.remove(key);
    }
}

/// A learning launch: trace it as it runs; after N_rawseq, build the plans.
fn learn_launch(sh: &Arc<Shared>, pid: i32, exec_ts: u64, key: AppKey, cfg: &Config) {
    let _active = ActiveGuard { sh, pid };
    if !claim_trace(sh, &key.key) {
        return;
    }
    // Record first; whether the recording is wanted is decided while it runs.
    let attached = attach(sh, pid, exec_ts, cfg);
    let decision = (|| -> Option<(Store, AppRow)> {
        let mut s = store(sh).ok()?;
        let app = match s.app_by_key(&key.key).ok()? {
            Some(a) => a,
            None => {
                let id = s.upsert_app(&key).ok()?;
                // A new mode of a program the user disabled (`app disable EXE` before it
                // was launched) is disabled too.
                let base = crate::app::without_mode(&key.key);
                if base != key.key
                    && s.app_by_key(base)
                        .ok()
                        .flatten()
                        .is_some_and(|b| !b.enabled)
                {
                    s.set_app_enabled(id, false).ok()?;
                }
                if let Ok(mut k) = sh.known.lock() {
                    k.insert(key.key.clone());
                }
                s.app_by_key(&key.key).ok()??
            }
        };
        Some((s, app))
    })();
    let Some((mut s, app)) = decision else {
        release_trace(sh, &key.key);
        return;
    };
    let lc_held = lc_guard(sh);
    let mut lc = lifecycle(&s, app.id);
    if app.enabled && lc.phase == Phase::Prefetching {
        // Not cached: either its plans were just built, or they are gone or corrupt, and
        // then this launch is the first of a new learning phase.
        let reason = match choose_plan(&s, &app, sh.queueing) {
            Ok(Some(_)) => None,
            Ok(None) => Some("no plan stored".to_string()),
            Err(StoreError::CorruptPlan { source, .. }) => Some(format!("corrupt plan: {source}")),
            Err(_) => None,
        };
        if let Some(reason) = reason {
            tracing::warn!("{}: {reason}; back to learning", app.key);
            relearn(sh, &mut s, &app, &mut lc, reason, false);
        }
    }
    if !app.enabled || lc.phase != Phase::Learning {
        // Disabled, too small, or prefetching but not cached yet (its plan was just built).
        drop(attached);
        release_trace(sh, &key.key);
        if app.enabled && lc.phase == Phase::Prefetching {
            lc.launches += 1;
            save_lifecycle(&mut s, app.id, &lc);
            drop(lc_held);
            refresh_cache(sh);
        }
        return;
    }
    drop(lc_held);
    drop(s);
    let tc = trace_config(cfg);
    let traced = attached.and_then(|a| a.trace(exec_ts, &tc, &sh.stop));
    release_trace(sh, &key.key);
    // An interrupted or failed trace is discarded, never half-used.
    let t = match traced {
        Ok(t) => t,
        Err(e) => {
            tracing::debug!("{}: learning launch not used: {e}", key.key);
            return;
        }
    };
    let run = learning_run(&t, cfg, &key.exe, &key.key);
    if run.accesses.is_empty() {
        // Every launch maps its executable and libraries: a trace that saw nothing missed
        // the launch (attached after it ended), and counted as a learning run it would make
        // the app "too small" for good (issue #30, item 6).
        tracing::debug!("{}: learning trace saw no access; not used", key.key);
        return;
    }
    let Ok(mut s) = store(sh) else { return };
    let lc_held = lc_guard(sh);
    let mut lc = lifecycle(&s, app.id);
    lc.launches += 1;
    if lc.phase != Phase::Learning {
        // Its phase changed while this launch was traced (app learn/forget, disable).
        save_lifecycle(&mut s, app.id, &lc);
        return;
    }
    let n = match s.add_run(app.id, &run) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("{}: could not store a learning run: {e}", key.key);
            return;
        }
    };
    tracing::info!("{}: learning launch {n}/{}", key.key, cfg.n_rawseq);
    // A burst prefetched beside it (the service mines a command's first launch, and fires
    // at the next one's trigger): not a plain launch, however much of it was read from disk.
    if let Some(l) = timed_plain(&run).filter(|_| !burst_opened_by(&sh.burst_openers, pid)) {
        tracing::debug!("{}: a cold learning launch, {:.1} ms", key.key, l.wall_ms);
        if let Err(e) = s.add_launch(app.id, &l) {
            tracing::warn!("{}: could not store a launch: {e}", key.key);
        }
    }
    if n < cfg.n_rawseq as usize {
        save_lifecycle(&mut s, app.id, &lc);
        return;
    }
    // Prefetcher generation, off the launch path (the app has launched).
    if build_plans(&mut s, &app, &mut lc, cfg, None)
        .bytes()
        .is_some()
    {
        drop(lc_held);
        refresh_cache(sh);
        if cfg.rank_by_emulation {
            rank_plans(sh, &mut s, &app);
        }
    }
}

/// A learning launch as `auto` counts a plain one, if it was one: nothing prefetched it, it
/// read at least half of what its trace saw it touch from disk (a warm one tells nothing of
/// a cold start) and its trace ended at its exit within `TIMED_LAUNCH`, so that its time is the
/// launch's, from the exec to the exit. The daemon's `auto` needs timed plain launches to
/// find out that prefetching an app does harm; without these it timed two at its exploring
/// launches, each a cold start: in a daemon bench run five apps' rounds each held one (python
/// 3596 ms against 1572-2117; docs/measurements.md, 2026-11-28, fifth entry).
/// Traced, such a launch is no faster than a plain one: `auto` errs towards prefetching. Not
/// one a burst was prefetched beside (the caller's `burst_opened_by`): with the burst service
/// on (the default) that is most learning launches, whose first launch it mined as a burst
/// (bench/lab/daemon-cold-loop.py: npm and R, both learning launches of each).
fn timed_plain(run: &RawRun) -> Option<LaunchRecord> {
    let timed = run.ended == crate::trace::EndReason::Exited
        && run.duration_ns > 0
        && run.duration_ns < crate::serve::TIMED_LAUNCH.as_nanos() as u64;
    // What the trace saw read: the pages mapped before it attached (at the exec's instant)
    // show no source, and under load they were most of a short launch's (CI: a cold
    // learning launch of the synthetic app counted "mostly warm" by them).
    let seen = run.accesses.iter().filter(|a| a.t > 0);
    let touched: u64 = seen.clone().map(|a| a.pages * run.page_size).sum();
    let disk: u64 = seen
        .filter(|a| a.from_disk)
        .map(|a| a.pages * run.page_size)
        .sum();
    if !timed || touched == 0 || disk * 2 < touched {
        return None;
    }
    Some(LaunchRecord {
        at_unix: crate::sys::now_unix(),
        mode: crate::store::mode::DAEMON.into(),
        wall_ms: run.duration_ns as f64 / 1e6,
        // What `auto::counts` weighs: of the bytes the launch touched, those it found cached.
        prefetched_bytes: touched,
        resident_bytes: Some(touched - disk),
        strategy: Some(auto::PLAIN.into()),
        ..LaunchRecord::default()
    })
}

/// What `build_plans` did.
#[derive(Debug, PartialEq)]
enum Built {
    /// Built and stored; the launch-order plan's bytes.
    Plans(u64),
    /// Not built: this many files of the plan in use changed since it was judged.
    Changed(usize),
    /// Not built or not stored (logged).
    Failed,
}

impl Built {
    fn bytes(&self) -> Option<u64> {
        match self {
            Built::Plans(b) => Some(*b),
            _ => None,
        }
    }
}

/// Planned files of `in_use` that `built` (identified later) holds in another state: edited
/// in between. As in `changed_files`, not the files the launch writes itself.
fn changed_since(in_use: &Plan, built: &Plan, own: &Own) -> usize {
    let now: HashMap<(sys::Dev, u64), &FileId> =
        built.files.iter().map(|f| ((f.dev, f.ino), f)).collect();
    in_use
        .files
        .iter()
        .filter(|f| {
            now.get(&(f.dev, f.ino))
                .is_some_and(|n| state_of(f, Some(n), own) == FileState::Changed)
        })
        .count()
}

/// Build and store an app's plans from its stored runs, replacing any it had, and move it
/// to prefetching (or too small). With `in_use`, the plan the runs were judged against: a
/// file of it changed since stops the build.
fn build_plans(
    s: &mut Store,
    app: &AppRow,
    lc: &mut Lifecycle,
    cfg: &Config,
    in_use: Option<(&Plan, Option<Ran>)>,
) -> Built {
    let runs: Vec<RawRun> = s
        .runs(app.id)
        .map(|v| v.into_iter().filter_map(|(_, _, r)| r.ok()).collect())
        .unwrap_or_default();
    let base = crate::learn::base_of_warm(&app.key, &runs, cfg.n_rawseq as usize);
    if let Some((p, ran)) = in_use {
        // A file edited after the check that judged it unchanged and before it was
        // identified again here would enter the plans with its new identity, its old pages
        // and no way for a later check to see the change (seen in CI: a widening raced an
        // edit). The runs are stale then: learning again.
        let own_files = lc.own_files.clone();
        let own = Own {
            ran,
            files: &own_files,
        };
        let changed = changed_since(p, &base.skeleton, &own);
        if changed > 0 {
            return Built::Changed(changed);
        }
    }
    let facts = crate::learn::device_facts(s).ok();
    let settings = s.app_settings(app.id).unwrap_or_default();
    let Some(f) = facts.as_ref() else {
        return Built::Failed;
    };
    let mut plans = crate::learn::plans_for(&base, f, settings.paralfetch);
    let bytes = plans
        .iter()
        .find(|p| p.strategy == "trace")
        .map(|p| p.summary().bytes)
        .unwrap_or(0);
    if let Err(e) = s.replace_plans(app.id, &mut plans) {
        tracing::warn!("{}: could not store plans: {e}", app.key);
        return Built::Failed;
    }
    lc.phase = if bytes < cfg.min_launch_kb * 1024 {
        Phase::TooSmall
    } else {
        Phase::Prefetching
    };
    lc.since_check = 0;
    save_lifecycle(s, app.id, lc);
    tracing::info!(
        "{}: plans built ({} KiB): {:?}",
        app.key,
        bytes / 1024,
        lc.phase
    );
    Built::Plans(bytes)
}

/// Rank an app's new plans by emulation for `auto` (seconds of `O_DIRECT` reads of its
/// cold learning launch; run after the lifecycle lock is released, so other launches are
/// not held up). Its first prefetched launches may use the device order meanwhile.
fn rank_plans(sh: &Shared, s: &mut Store, app: &AppRow) {
    let runs: Vec<RawRun> = s
        .runs(app.id)
        .map(|v| v.into_iter().filter_map(|(_, _, r)| r.ok()).collect())
        .unwrap_or_default();
    let mut plans = Vec::new();
    for st in s.plan_strategies(app.id).unwrap_or_default() {
        if let Ok(Some(p)) = s.plan_for(app, &st) {
            plans.push(p);
        }
    }
    let Ok(facts) = crate::learn::device_facts(s) else {
        return;
    };
    if let Some(r) = crate::learn::rank_plans(&app.key, &runs, &plans, &facts) {
        let stored = {
            let _lc = lc_guard(sh);
            crate::learn::store_ranking(s, app.id, &r)
        };
        if let Err(e) = stored {
            tracing::warn!("{}: cannot store the emulated ranking: {e}", app.key);
            return;
        }
        tracing::info!(
            "{}: plans ranked by emulation: {:?} (cold {:.0} ms)",
            app.key,
            r.strategies,
            r.cold_ms
        );
        refresh_cache(sh);
    }
}

/// Tell systemd (Type=notify) where the daemon is; nothing without `NOTIFY_SOCKET`. A failure
/// is logged, never fatal: the daemon works the same without a service manager.
fn notify_systemd(states: &[sd_notify::NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!("cannot notify systemd ({e}); NOTIFY_SOCKET is set but unusable");
    }
}

/// The daemon's pid file, locked while it runs (status reads liveness from the lock).
pub struct PidFile {
    _lock: Flock<std::fs::File>,
}

impl PidFile {
    pub fn take(run_dir: &Path) -> Result<PidFile, DaemonError> {
        std::fs::create_dir_all(run_dir)
            .map_err(|e| DaemonError::Io(format!("{}: {e}", run_dir.display())))?;
        let p = run_dir.join(PID_FILE);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .read(true)
            .open(&p)
            .map_err(|e| DaemonError::Io(format!("{}: {e}", p.display())))?;
        // `status` probes the lock with a shared lock held for microseconds: a daemon that
        // starts in that instant must not mistake the probe for another daemon. A running
        // daemon holds the lock for good, so a few retries tell the two apart.
        let mut f = f;
        let mut tries = 0;
        let mut lock = loop {
            match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
                Ok(l) => break l,
                Err((back, _)) if tries < 20 => {
                    f = back;
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(25));
                }
                Err(_) => return Err(DaemonError::AlreadyRunning(p.clone())),
            }
        };
        use std::io::{Seek, Write};
        let _ = lock.set_len(0);
        let _ = lock.seek(std::io::SeekFrom::Start(0));
        let _ = writeln!(lock, "{}", std::process::id());
        Ok(PidFile { _lock: lock })
    }

    /// The pid of a running daemon, if one holds the lock.
    pub fn running(run_dir: &Path) -> Option<i32> {
        let p = run_dir.join(PID_FILE);
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .ok()?;
        match Flock::lock(f, FlockArg::LockSharedNonblock) {
            Ok(_) => None, // nobody holds it
            Err(_) => std::fs::read_to_string(&p).ok()?.trim().parse().ok(),
        }
    }
}

/// Run the daemon until SIGTERM/SIGINT. SIGHUP reloads the configuration and the plans.
pub fn run(opts: &DaemonOptions) -> Result<(), DaemonError> {
    // Before any thread starts (see `prefetch::FD_TABLE`).
    crate::prefetch::prepare_process();
    let cfg = Config::load(&opts.config_path)?;
    // Signals arrive on a pipe, so the loop sleeps in poll() and uses no CPU when idle.
    // Caught from the start: a SIGTERM while starting up (before any tracefs instance
    // exists, or while one is prepared) is handled by the loop, never the default action.
    let (sig_r, sig_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| DaemonError::Io(e.to_string()))?;
    let mut signals =
        signal_hook::iterator::Signals::new([libc::SIGTERM, libc::SIGINT, libc::SIGHUP])
            .map_err(|e| DaemonError::Io(e.to_string()))?;
    let pending = Arc::new(Mutex::new(Vec::<i32>::new()));
    let p2 = pending.clone();
    std::thread::spawn(move || {
        for sig in signals.forever() {
            if let Ok(mut p) = p2.lock() {
                p.push(sig);
            }
            let _ = nix::unistd::write(&sig_w, &[1u8]);
        }
    });
    let _pid = PidFile::take(&opts.run_dir)?;
    crate::trace::tracefs::cap_instances(cfg.max_instances);
    let tfs = Tracefs::open()?;
    {
        let knob_dir = Path::new(knobs::RUN_DIR);
        let _lock = knobs::RecordLock::acquire(knob_dir)?;
        tfs.remove_stale_instances();
        knobs::recover_journal(knob_dir);
    }
    let mut s = Store::open(&opts.db)?;
    let facts = crate::learn::device_facts(&mut s).map_err(|e| DaemonError::Io(e.to_string()))?;
    drop(s);
    let sh = Arc::new(Shared {
        db: opts.db.clone(),
        cfg: RwLock::new(cfg),
        plans: Mutex::new(HashMap::new()),
        tracing: Mutex::new(HashSet::new()),
        active: Mutex::new(HashSet::new()),
        tfs,
        prepared: Mutex::new(None),
        queueing: facts.queueing(),
        stop: AtomicBool::new(false),
        workers: AtomicUsize::new(0),
        turned_away: AtomicUsize::new(0),
        latencies: Mutex::new(Vec::new()),
        lc_lock: Mutex::new(()),
        early: Mutex::new(HashMap::new()),
        modes: Mutex::new(HashSet::new()),
        foreign: Mutex::new(HashSet::new()),
        known: Mutex::new(HashSet::new()),
        seen: Mutex::new(HashMap::new()),
        burst_openers: Mutex::new(HashMap::new()),
    });
    refresh_cache(&sh);
    if let Ok(c) = sh.cfg.read() {
        prepare_next(&sh, &trace_config(&c));
    }
    // ClusterFetch beside the launch prefetching; its own thread, stopped with the daemon.
    let burst_stop = Arc::new(AtomicBool::new(false));
    let bursts = match sh
        .cfg
        .read()
        .map(|c| (c.bursts, c.burst_settings(facts.iops_qd1, facts.seq_mib_s)))
    {
        Ok((true, settings)) => crate::cluster::service::spawn(
            opts.db.clone(),
            settings,
            launch_owned(&sh),
            burst_stop.clone(),
        )
        .map_err(|e| tracing::error!("bursts off: cannot start their thread: {e}"))
        .ok(),
        _ => None,
    };
    let pc = ProcConnector::open()
        .map_err(|e| DaemonError::Io(format!("process-events connector: {e} (needs root)")))?;
    let fan = exec_monitor();
    tracing::info!(
        "warmstart daemon running (pid {}); {} apps with plans; device {}",
        std::process::id(),
        sh.plans.lock().map(|p| p.len()).unwrap_or(0),
        if sh.queueing {
            "queueing"
        } else {
            "not queueing"
        }
    );
    // Type=notify: started once exec events are watched and the burst service is set up
    // (systemd orders dependants after this; the bench launches right after it). Its setup
    // beside a launch cost that launch (docs/measurements.md, 2026-12-07, third entry); one
    // stuck does not hold the daemon back beyond the cap.
    let bursts = bursts.map(|(handle, ready)| {
        if ready.recv_timeout(BURSTS_READY_WAIT).is_err() {
            tracing::debug!("bursts: not set up yet; ready without them");
        }
        handle
    });
    notify_systemd(&[sd_notify::NotifyState::Ready]);
    loop {
        let (pc_ready, sig_ready, fan_ready) = {
            let mut fds = vec![
                PollFd::new(pc.fd(), PollFlags::POLLIN),
                PollFd::new(sig_r.as_fd(), PollFlags::POLLIN),
            ];
            if let Some(f) = &fan {
                fds.push(PollFd::new(f.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(DaemonError::Io(format!("poll: {e}"))),
            }
            let r = |f: &PollFd| {
                f.revents()
                    .is_some_and(|e| e.intersects(PollFlags::POLLIN | PollFlags::POLLERR))
            };
            (r(&fds[0]), r(&fds[1]), fds.get(2).is_some_and(r))
        };
        if fan_ready {
            if let Some(f) = &fan {
                if let Ok(events) = f.read_events() {
                    for ev in events {
                        let path = ev
                            .fd()
                            .map(|fd| format!("/proc/self/fd/{}", fd.as_raw_fd()))
                            .and_then(|p| std::fs::read_link(p).ok());
                        if let Some(exe) = path {
                            on_exec_open(&sh, ev.pid(), exe);
                        }
                        // Dropping the event closes its fd.
                    }
                }
            }
        }
        if sig_ready {
            let mut b = [0u8; 64];
            let _ = nix::unistd::read(&sig_r, &mut b);
            let sigs: Vec<i32> = pending
                .lock()
                .map(|mut p| std::mem::take(&mut *p))
                .unwrap_or_default();
            if sigs
                .iter()
                .any(|s| *s == libc::SIGTERM || *s == libc::SIGINT)
            {
                tracing::info!("stopping");
                notify_systemd(&[sd_notify::NotifyState::Stopping]);
                sh.stop.store(true, Ordering::SeqCst);
                burst_stop.store(true, Ordering::SeqCst);
                if let Some(b) = bursts {
                    // Its tracefs instances go with it.
                    let _ = b.join();
                }
                // Let every worker see the flag and remove its instances: a trace being
                // followed, or a setup still being made for the next launch.
                let t0 = Instant::now();
                while sh.workers.load(Ordering::SeqCst) > 0
                    && t0.elapsed() < Duration::from_secs(10)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                report_latency(&sh);
                // The prepared setup's instance is removed when it drops.
                if let Ok(mut p) = sh.prepared.lock() {
                    p.take();
                }
                // Whatever a worker that did not end in time still held.
                let left = sh.tfs.remove_own_instances();
                if left > 0 {
                    tracing::warn!("removed {left} tracefs instance(s) a worker still held");
                }
                return Ok(());
            }
            if sigs.contains(&libc::SIGHUP) {
                // systemd 253+ wants the reload's start time beside RELOADING=1.
                let mut reloading = vec![sd_notify::NotifyState::Reloading];
                reloading.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
                notify_systemd(&reloading);
                match Config::load(&opts.config_path) {
                    Ok(c) => {
                        crate::trace::tracefs::cap_instances(c.max_instances);
                        if let Ok(mut w) = sh.cfg.write() {
                            *w = c;
                        }
                        tracing::info!(
                            "configuration reloaded from {}",
                            opts.config_path.display()
                        );
                    }
                    Err(e) => tracing::error!("keeping the old configuration: {e}"),
                }
                refresh_cache(&sh);
                notify_systemd(&[sd_notify::NotifyState::Ready]);
            }
        }
        if pc_ready {
            match pc.recv() {
                Ok(events) => {
                    for e in events {
                        if let ProcEvent::Exec { pid, ts } = e {
                            on_exec(&sh, pid, ts);
                        }
                    }
                }
                // ENOBUFS: the kernel dropped events while we were busy; carry on.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    tracing::warn!("missed exec events (socket buffer full)")
                }
                Err(e) => return Err(DaemonError::Io(format!("proc connector: {e}"))),
            }
        }
    }
}

fn report_latency(sh: &Shared) {
    let away = sh.turned_away.load(Ordering::Relaxed);
    if away > 0 {
        tracing::warn!("{away} launches ran without the daemon: max_workers were busy");
    }
    if let Ok(l) = sh.latencies.lock() {
        if let Some(s) = crate::bench::stats::Spread::of(&l) {
            tracing::info!("exec to first prefetch request: median {:.0} us (min {:.0}, max {:.0}, {} launches)", s.median, s.min, s.max, s.n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::tests::sample_plan;

    /// The daemon's caps: one trace per app, `max_traces` in all; `max_workers` threads.
    #[test]
    fn traces_and_workers_are_capped() {
        let mut t = HashSet::new();
        assert!(claim(&mut t, "a", 2));
        assert!(!claim(&mut t, "a", 2), "one trace per app");
        assert!(claim(&mut t, "b", 2));
        assert!(!claim(&mut t, "c", 2), "at most max_traces");
        t.remove("a");
        assert!(claim(&mut t, "c", 2));
        let w = AtomicUsize::new(0);
        assert!((0..5).filter(|_| take_slot(&w, 3)).count() == 3);
        assert_eq!(w.load(Ordering::SeqCst), 3);
        w.fetch_sub(1, Ordering::SeqCst);
        assert!(take_slot(&w, 3));
    }
    use crate::sequence::Access;
    use crate::trace::EndReason;

    #[test]
    fn a_command_is_learned_from_its_second_launch_within_the_window() {
        let mut seen = HashMap::new();
        let day = Duration::from_secs(86_400);
        assert!(
            !second_launch(&mut seen, "sh -c 'echo 1'", day),
            "first: remembered"
        );
        assert!(
            !second_launch(&mut seen, "sh -c 'echo 2'", day),
            "another first"
        );
        assert!(
            second_launch(&mut seen, "sh -c 'echo 1'", day),
            "second: learned"
        );
        assert!(
            !seen.contains_key("sh -c 'echo 1'"),
            "and forgotten as a first launch"
        );
        // Outside the window a launch counts as a first one again.
        assert!(!second_launch(&mut seen, "x", Duration::ZERO));
        assert!(!second_launch(&mut seen, "x", Duration::ZERO));
        // A storm of distinct commands stays within the cap.
        for i in 0..SEEN_CAP + 100 {
            second_launch(&mut seen, &format!("cmd {i}"), day);
        }
        assert!(seen.len() <= SEEN_CAP, "{}", seen.len());
        assert!(second_launch(
            &mut seen,
            &format!("cmd {}", SEEN_CAP + 99),
            day
        ));
    }

    fn run_with(accesses: Vec<Access>, sync: u32) -> RawRun {
        RawRun {
            page_size: 4096,
            accesses,
            inode_loads: vec![],
            opens: vec![],
            execs: vec![],
            block: vec![],
            sync_readaheads: sync,
            duration_ns: 0,
            ended: EndReason::Exited,
            exit_code: Some(0),
            exit_signal: None,
            usage: Default::default(),
            started_unix_ms: 0,
        }
    }

    /// A launch whose process (or a descendant) opened a burst's trigger is remembered as one
    /// a burst may have been prefetched beside; others are not.
    #[test]
    fn a_bursts_opener_and_its_ancestors_are_remembered() {
        let openers = Mutex::new(HashMap::new());
        note_burst_openers(&openers, &[30, 20, 10]);
        assert!(burst_opened_by(&openers, 30) && burst_opened_by(&openers, 10));
        assert!(!burst_opened_by(&openers, 40));
        openers
            .lock()
            .unwrap()
            .insert(50, Instant::now() - BURST_OPENER_KEEP);
        assert!(!burst_opened_by(&openers, 50), "forgotten after a while");
        note_burst_openers(&openers, &[60]);
        assert!(!openers.lock().unwrap().contains_key(&50), "and pruned");
    }

    /// A cold learning launch that ended at its exit is a timed plain launch for `auto`; a
    /// warm one, one cut by idleness or one past `TIMED_LAUNCH` is not.
    #[test]
    fn a_cold_learning_launch_is_a_timed_plain_one() {
        let acc = |page, from_disk| Access {
            target: Target::File {
                dev: sys::Dev { major: 8, minor: 1 },
                ino: 7,
            },
            page,
            pages: 10,
            t: 1_000 + page,
            from_disk,
            used: true,
        };
        // Mapped before the trace attached (at the exec's instant): of no known source.
        let early = Access {
            t: 0,
            pages: 1000,
            ..acc(100, false)
        };
        let mut cold = run_with(vec![early, acc(0, true), acc(10, true), acc(20, false)], 0);
        cold.duration_ns = 250_000_000;
        let l = timed_plain(&cold).expect("a cold launch that exited is timed");
        assert_eq!(l.strategy.as_deref(), Some(auto::PLAIN));
        assert_eq!(l.mode, crate::store::mode::DAEMON);
        assert_eq!(l.wall_ms, 250.0);
        assert_eq!(
            (l.prefetched_bytes, l.resident_bytes),
            (30 * 4096, Some(10 * 4096))
        );
        assert!(auto::counts(&l), "{l:?}");
        let mut warm = run_with(vec![acc(0, true), acc(10, false), acc(20, false)], 0);
        warm.duration_ns = 250_000_000;
        assert_eq!(timed_plain(&warm), None, "a warm launch compares nothing");
        let mut idle = cold.clone();
        idle.ended = EndReason::Idle;
        assert_eq!(timed_plain(&idle), None, "its time is not the launch's");
        let mut long = cold.clone();
        long.duration_ns = crate::serve::TIMED_LAUNCH.as_nanos() as u64;
        assert_eq!(
            timed_plain(&long),
            None,
            "not timed, as `run` times none so long"
        );
    }

    /// `pages` pages of the plan's first file from `page` on, read from disk by the launch
    /// (`used`: touched by it, not only read around what it touched).
    fn from_disk(plan: &Plan, page: u64, pages: u64, used: bool) -> Access {
        let f = &plan.files[0];
        Access {
            target: Target::File {
                dev: f.dev,
                ino: f.ino,
            },
            page,
            pages,
            t: 0,
            from_disk: true,
            used,
        }
    }

    /// `sample_plan` over two real files (its data entries are of the first).
    fn plan_over(first: &Path, second: &Path) -> Plan {
        let mut plan = sample_plan();
        plan.files[0] = FileId::of(first).unwrap();
        plan.files[1] = FileId::of(second).unwrap();
        plan
    }

    #[test]
    fn a_lineage_is_the_process_then_its_ancestors() {
        let me = std::process::id() as i32;
        let l = lineage(me);
        assert_eq!(l[0], me);
        if let Some(parent) = sys::parent_of(me).filter(|p| *p > 1) {
            assert_eq!(l[1], parent);
        }
        assert!(!l.contains(&1) && l.len() <= 32, "{l:?}");
    }

    /// Plain launches beat the strategies in the daemon's launches: the next launch is plain,
    /// and the app keeps its plan (not sent back to learning as one without a plan).
    #[test]
    fn a_plain_choice_keeps_the_plan() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = Store::open(&dir.path().join("ws.db")).unwrap();
        let id = st
            .upsert_app(&AppKey::named("a", Path::new("/usr/bin/x")))
            .unwrap();
        st.put_plan(id, &sample_plan()).unwrap();
        let app = st.app_by_key("a").unwrap().unwrap();
        let timed = |name: &str, ms: f64| LaunchRecord {
            mode: crate::store::mode::DAEMON.into(),
            wall_ms: ms,
            strategy: Some(name.into()),
            auto: true,
            ..LaunchRecord::default()
        };
        let first = auto::preference(true)[0].name();
        for ms in [200.0, 204.0] {
            st.add_launch(id, &timed(first, ms)).unwrap();
        }
        let (plan, choice) = choose_plan(&st, &app, true).unwrap().unwrap();
        assert_eq!(choice.map(|s| s.name()), Some(first));
        assert!(!plan.entries.is_empty());
        for ms in [150.0, 152.0] {
            st.add_launch(id, &timed(auto::PLAIN, ms)).unwrap();
        }
        let (plan, choice) = choose_plan(&st, &app, true).unwrap().unwrap();
        assert_eq!(choice, None);
        assert_eq!(plan.entries, sample_plan().entries);
    }

    #[test]
    fn a_file_edited_after_its_check_stops_a_widening() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 10_000]).unwrap();
        let mut judged = plan_over(&p, dir.path());
        // Identified again before any edit: the same.
        let mut built = judged.clone();
        built.files[0] = crate::resolve::FileId::of(&p).unwrap();
        assert_eq!(changed_since(&judged, &built, &Own::default()), 0);
        // Edited in place (same inode) between the check and the build.
        std::fs::write(&p, b"a new version").unwrap();
        built.files[0] = crate::resolve::FileId::of(&p).unwrap();
        assert_eq!(built.files[0].ino, judged.files[0].ino);
        assert_eq!(changed_since(&judged, &built, &Own::default()), 1);
        // A file the launch writes itself does not count.
        judged.files[0].volatile = true;
        assert_eq!(changed_since(&judged, &built, &Own::default()), 0);
    }

    /// A planned file `name`, and a checked launch (started 2 s ago, 4 s long) that rewrote it.
    fn launch_writing(name: &str) -> (tempfile::TempDir, PathBuf, Plan, RawRun) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(name);
        std::fs::write(&state, b"v1").unwrap();
        let plan = plan_over(&state, dir.path());
        let mut run = run_with(vec![], 0);
        run.started_unix_ms = crate::sys::now_unix() as u64 * 1000 - 2_000;
        run.duration_ns = 4_000_000_000;
        std::fs::write(&state, b"v22").unwrap();
        (dir, state, plan, run)
    }

    /// Set `path`'s modification time.
    fn stamp(path: &Path, t: std::time::SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .and_then(|f| f.set_modified(t))
            .unwrap();
    }

    #[test]
    fn a_file_the_checked_launch_wrote_is_the_apps_own() {
        // Written by the app during a launch that was not a learning one.
        let (dir, state, plan, mut run) = launch_writing("Variations");
        let ran = Ran::of(&run);
        assert_eq!(changed_files(&plan, &Own::during(ran)), 0);
        assert!(judge(&plan, &run, &Config::default(), &[]).reason.is_none());
        let mut built = plan.clone();
        built.files[0] = crate::resolve::FileId::of(&state).unwrap();
        assert_eq!(changed_since(&plan, &built, &Own::during(ran)), 0);
        // Edited just before the launch began (by more than a tick of the clock files are
        // stamped with): a change, which a widening must not adopt.
        let before = std::time::UNIX_EPOCH + std::time::Duration::from_millis(run.started_unix_ms)
            - std::time::Duration::from_nanos(sys::file_time_slack_ns() as u64 + 2_000_000);
        stamp(&state, before);
        let built = plan_over(&state, dir.path());
        assert_eq!(changed_files(&plan, &Own::during(ran)), 1);
        assert_eq!(changed_since(&plan, &built, &Own::during(ran)), 1);
        // Written after the launch ended (an edit, an update): a change.
        run.started_unix_ms -= 60_000;
        let ran = Ran::of(&run);
        assert_eq!(changed_files(&plan, &Own::during(ran)), 1);
        assert_eq!(changed_since(&plan, &built, &Own::during(ran)), 1);
        assert!(judge(&plan, &run, &Config::default(), &[])
            .reason
            .is_some_and(|r| r.contains("changed")));
        // A run without a start time: every change counts.
        run.started_unix_ms = 0;
        assert_eq!(changed_files(&plan, &Own::during(Ran::of(&run))), 1);
    }

    #[test]
    fn a_file_a_checked_launch_wrote_stays_the_apps_own() {
        // A checked launch writes it: the app's own from then on.
        let (_dir, state, plan, run) = launch_writing("Local State");
        let mut lc = Lifecycle::default();
        remember_own(&mut lc, judge(&plan, &run, &Config::default(), &[]).written);
        assert_eq!(lc.own_files, [state.to_string_lossy()]);
        // Rewritten at a launch that was not checked (stamped well before the next check).
        std::fs::write(&state, b"v333").unwrap();
        stamp(
            &state,
            std::time::SystemTime::now() - std::time::Duration::from_secs(30),
        );
        let mut later = run_with(vec![], 0);
        later.started_unix_ms = crate::sys::now_unix() as u64 * 1000;
        later.duration_ns = 1_000_000;
        let ran = Ran::of(&later);
        assert_eq!(changed_files(&plan, &Own::during(ran)), 1);
        let own = Own {
            ran,
            files: &lc.own_files,
        };
        assert_eq!(changed_files(&plan, &own), 0);
        let v = judge(&plan, &later, &Config::default(), &lc.own_files);
        assert!(v.reason.is_none());
        assert!(v.written.is_empty());
        // Remembered once each, the latest MAX_OWN_FILES.
        remember_own(&mut lc, vec![state.to_string_lossy().into_owned()]);
        assert_eq!(lc.own_files.len(), 1);
        remember_own(&mut lc, (0..100).map(|i| format!("/p/{i}")).collect());
        assert_eq!(lc.own_files.len(), MAX_OWN_FILES);
        assert_eq!(lc.own_files.last().unwrap(), "/p/99");
        // A lifecycle stored before own files were kept still reads.
        let old: Lifecycle = serde_json::from_str(
            r#"{"phase":"prefetching","launches":3,"prefetches":1,"since_check":0,
                "last_miss_ratio":null,"last_waste":null,"last_check":null,
                "relearn_reason":null,"saved_ms":0.0}"#,
        )
        .unwrap();
        assert!(old.own_files.is_empty());
    }

    #[test]
    fn files_the_launch_writes_itself_do_not_send_it_back_to_learning() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(".lock");
        let lib = dir.path().join("lib.so");
        std::fs::write(&lock, b"host,pid").unwrap();
        std::fs::write(&lib, vec![0u8; 10_000]).unwrap();
        let mut plan = plan_over(&lock, &lib);
        plan.files[0].volatile = true;
        assert_eq!(changed_files(&plan, &Own::default()), 0);
        // The app deletes its lock file at exit and makes a new one at its next launch.
        std::fs::remove_file(&lock).unwrap();
        assert_eq!(changed_files(&plan, &Own::default()), 0);
        std::fs::write(&lock, b"host,pid2").unwrap();
        assert_eq!(changed_files(&plan, &Own::default()), 0);
        let v = judge(&plan, &run_with(vec![], 0), &Config::default(), &[]);
        assert!(v.reason.is_none(), "{:?}", v.reason);
        // An update of the app does.
        std::fs::write(&lib, b"new version").unwrap();
        assert_eq!(changed_files(&plan, &Own::default()), 1);
    }

    #[test]
    fn judge_computes_the_miss_ratio_over_planned_pages() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 10_000]).unwrap();
        let plan = plan_over(&p, dir.path());
        let acc = |page, pages| from_disk(&plan, page, pages, true);
        let cfg = Config::default();
        // Plan data covers pages 0..=2 (3 pages); reading page 2 (covered) and 5 (not).
        let v = judge(&plan, &run_with(vec![acc(2, 1), acc(5, 1)], 0), &cfg, &[]);
        assert!((v.miss_ratio - 1.0 / 3.0).abs() < 1e-9, "{}", v.miss_ratio);
        // Pages 0 and 1 planned, not used.
        assert!((v.waste - 2.0 / 3.0).abs() < 1e-9, "{}", v.waste);
        // Nothing changed: the launch's run widens the plan.
        assert!(v.widen);
        assert!(v.reason.unwrap().contains("miss ratio"));
        let v = judge(&plan, &run_with(vec![acc(0, 3)], 0), &cfg, &[]);
        assert_eq!(v.miss_ratio, 0.0);
        assert_eq!(v.waste, 0.0);
        assert!(v.reason.is_none(), "{:?}", v.reason);
        let v = judge(&plan, &run_with(vec![], 5), &cfg, &[]);
        assert!(v.reason.unwrap().contains("synchronous readaheads"));
        assert_eq!(changed_files(&plan, &Own::default()), 0);
        std::fs::write(&p, b"changed").unwrap();
        assert_eq!(changed_files(&plan, &Own::default()), 1);
        let v = judge(&plan, &run_with(vec![], 0), &cfg, &[]);
        assert!(!v.widen);
        assert!(v.reason.unwrap().contains("changed"));
        // Misses with a changed file: learning again, the old runs are stale.
        let v = judge(&plan, &run_with(vec![acc(5, 1)], 0), &cfg, &[]);
        assert!(v.reason.unwrap().contains("miss ratio") && !v.widen);
        std::fs::remove_file(&p).unwrap();
        assert_eq!(changed_files(&plan, &Own::default()), 1);
    }

    /// An app launched a second way uses a few percent outside its plan: under `r_miss`, but
    /// the launch widens the plan (`w_miss`); read-around beside the plan's pages does not.
    #[test]
    fn judge_widens_for_pages_used_outside_the_plan_under_r_miss() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 10_000]).unwrap();
        let mut plan = plan_over(&p, dir.path());
        let ps = plan.page_size as u64;
        plan.entries = vec![Entry::Data {
            file: 0,
            offset: 0,
            len: 100 * ps,
        }];
        let acc = |page, pages, used| from_disk(&plan, page, pages, used);
        let cfg = Config::default();
        // 5 pages used outside a 100-page plan: 5%, between w_miss and r_miss.
        let v = judge(
            &plan,
            &run_with(vec![acc(0, 100, true), acc(200, 5, true)], 0),
            &cfg,
            &[],
        );
        assert!((v.miss_ratio - 0.05).abs() < 1e-9, "{}", v.miss_ratio);
        assert!(v.widen);
        assert!(v.reason.unwrap().contains("w_miss"));
        // The same pages read around the plan's, never used: the plan is kept.
        let v = judge(
            &plan,
            &run_with(vec![acc(0, 100, true), acc(200, 5, false)], 0),
            &cfg,
            &[],
        );
        assert!(v.reason.is_none() && !v.widen, "{:?}", v.reason);
        // 1 page used outside: under w_miss.
        let v = judge(
            &plan,
            &run_with(vec![acc(0, 100, true), acc(200, 1, true)], 0),
            &cfg,
            &[],
        );
        assert!(v.reason.is_none(), "{:?}", v.reason);
    }

    #[test]
    fn only_a_first_or_fruitful_widening_checks_the_next_launch() {
        // A new way of launching: its first run changes nothing yet, its second grows the plan.
        assert!(check_after_widening(3, 2, 100_000_000, Some(100_000_000)));
        assert!(check_after_widening(4, 2, 100_000_000, Some(120_000_000)));
        // A document of each launch's own: the plan stays as it was, checks at their pace.
        assert!(!check_after_widening(4, 2, 100_000_000, Some(100_500_000)));
        assert!(!check_after_widening(6, 2, 100_000_000, None));
    }

    #[test]
    fn pid_file_is_exclusive() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(PidFile::running(dir.path()), None);
        let p = PidFile::take(dir.path()).unwrap();
        assert_eq!(
            PidFile::running(dir.path()),
            Some(std::process::id() as i32)
        );
        assert!(matches!(
            PidFile::take(dir.path()),
            Err(DaemonError::AlreadyRunning(_))
        ));
        drop(p);
        assert_eq!(PidFile::running(dir.path()), None);
    }

    /// A `status` probe (a shared lock held briefly) at the moment the daemon starts is not
    /// another daemon: the CI failure of 91f2f09.
    #[test]
    fn a_status_probe_does_not_stop_a_starting_daemon() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(PID_FILE), "").unwrap();
        let f = std::fs::File::open(dir.path().join(PID_FILE)).unwrap();
        let probe = Flock::lock(f, FlockArg::LockSharedNonblock).unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(60));
            drop(probe);
        });
        let p = PidFile::take(dir.path());
        release.join().unwrap();
        assert!(p.is_ok(), "{:?}", p.err());
    }
}
