//! `warmstart run -- CMD...`: prefetch the app's plan concurrently with its launch.
//!
//! By default warmstart *becomes* the application, as `nice` or `env` do: it loads the plan,
//! starts a detached prefetcher (double-forked, so the application never sees a stray child),
//! then execs the command in its own process. Exit status, signals, process tree and terminal
//! are the application's own, and no wrapper sits on the launch's critical path. With
//! `--stats` it stays a wrapper instead (fork, wait, forward signals), because the report is
//! printed after the application exits.
//!
//! After the launch the prefetcher records it (strategy, duration, how often the app had to
//! wait) and runs Paralfetch's dynamic scheduling. Nothing here may stop the command from
//! running: a missing database, a corrupt plan or a refused device only turn prefetching off.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{fork, ForkResult};
use serde_json::json;

use super::record::{key_of, parse_strategy};
use super::{human_bytes, RunArgs};
use crate::launch::{exit_like, resolve_command, Forwarder, LaunchError};
use crate::placement::{self, Placement};
use crate::plan::{Look, Plan};
use crate::prefetch::{KnobHold, PrefetchOptions, PrefetchReport};
use crate::schedule::{auto, Strategy};
use crate::serve::{Served, Serving};
use crate::store::{mode, AppRow, LaunchRecord, Store};
use crate::sys::{self, Exit};
use crate::trace::knobs::{self, KnobGuard};

use crate::serve::TIMED_LAUNCH;
/// Dynamic scheduling (Paralfetch 3.3): waits above this share of the plan's entries make the
/// next launch's schedule more aggressive.
const WAIT_SHARE: f64 = 0.05;

/// The history's name for a launch: `traced` launches (by `explain`) are kept apart, as
/// tracing slows them and `auto` compares times (a traced window app's launch runs to the
/// trace's end, 3 s against 1 s plain: `auto` then chose plain launches for it).
fn mode_of(traced: bool) -> &'static str {
    if traced {
        mode::TRACED
    } else {
        mode::RUN
    }
}

/// A plan chosen for this launch.
struct Chosen {
    store: Store,
    app: AppRow,
    /// What the launch looks at first; the plan itself is decoded only if the launch is not
    /// warm (`Chosen::into_planned`).
    look: Look,
    /// The plan, if already decoded.
    plan: Option<Plan>,
    /// Whose plan it is: the strategy's, or `trace` for a plan from before strategies.
    plan_name: &'static str,
    strategy: Strategy,
    why: String,
    /// `auto` chose the strategy.
    by_auto: bool,
}

impl Chosen {
    /// With the whole plan: decoded now unless it was already.
    fn into_planned(self) -> anyhow::Result<Planned> {
        let plan = match self.plan {
            Some(p) => p,
            None => self
                .store
                .plan_for(&self.app, self.plan_name)?
                .ok_or_else(|| anyhow::anyhow!("{}: its plan is gone", self.app.key))?,
        };
        Ok(Planned {
            store: self.store,
            app: self.app,
            plan,
            strategy: self.strategy,
            why: self.why,
            by_auto: self.by_auto,
        })
    }
}

/// A chosen plan, decoded.
struct Planned {
    store: Store,
    app: AppRow,
    plan: Plan,
    strategy: Strategy,
    why: String,
    by_auto: bool,
}

/// A launch with a plan, once its look is taken.
enum Ready {
    /// In memory already: launched at once, its plan not decoded.
    Warm(Box<Chosen>),
    Planned(Box<Planned>),
}

/// What a launch of a known app does.
enum Decision {
    /// Replay a plan beside it.
    Prefetch(Box<Chosen>),
    /// Launch it plainly, timed: `auto` found that no strategy beats a plain launch.
    Plain(AppRow),
}

/// Open the database for a launch's plan lookup; None when there is none, or it is not the
/// caller's to read.
fn open_for_plan(db: &Path) -> anyhow::Result<Option<Store>> {
    if !db.exists() {
        return Ok(None);
    }
    if nix::unistd::access(
        db,
        nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
    )
    .is_err()
    {
        // The database is root's and private: another user's launch runs plainly, without
        // a warning on every launch.
        tracing::debug!(
            "{}: not ours to read; launching without prefetch",
            db.display()
        );
        return Ok(None);
    }
    Ok(Some(Store::open_for_launch(db)?))
}

/// Look up how to launch the app `key`: its plan and strategy, or a plain launch.
fn load_plan(
    store: Store,
    db: &Path,
    key: &str,
    asked: Option<&str>,
    traced: bool,
    named: bool,
) -> anyhow::Result<Option<Decision>> {
    // A command learned without its mode (before apps had one, or the program alone) lends
    // its plan to a mode not learned yet, as it did before modes split them.
    let app = match store.app_by_key(key)? {
        None if !named && crate::app::without_mode(key) != key => {
            store.app_by_key(crate::app::without_mode(key))?
        }
        found => found,
    };
    let Some(app) = app else {
        if named {
            // A name the user gave that the store does not know is likely a typo; a command
            // line not learned yet is not worth a word on every launch.
            tracing::warn!(
                "no app named `{key}` in {}; launching without prefetch (`warmstart plan list` \
                 shows the names; `warmstart record --app {key} -- CMD` learns it)",
                db.display()
            );
        }
        return Ok(None);
    };
    if !app.enabled {
        // `warmstart app disable`: never learned or prefetched, by the daemon or by `run`.
        tracing::debug!("{key}: disabled; launching without prefetch");
        return Ok(None);
    }
    let wanted = match asked.or(app.strategy.as_deref()) {
        Some(s) => parse_strategy(s)?,
        None => None,
    };
    let by_auto = wanted.is_none();
    let (strategy, why) = match wanted {
        Some(s) => (
            s,
            if asked.is_some() {
                "asked for".to_string()
            } else {
                "the app's default".to_string()
            },
        ),
        None => {
            match auto::choose_for_launch(&store, app.id, traced, || device_queueing(&store, db))? {
                (Some(s), why) => (s, why),
                (None, why) => {
                    tracing::debug!("{key}: {why}");
                    return Ok(Some(Decision::Plain(app)));
                }
            }
        }
    };
    // Plans from before strategies existed: the launch-order plan.
    let (plan_name, look) = match store.plan_look(&app, strategy.name())? {
        Some(l) => (strategy.name(), l),
        None => match store.plan_look(&app, Strategy::Trace.name())? {
            Some(l) => (Strategy::Trace.name(), l),
            None => return Ok(None),
        },
    };
    // Without a stored look (or a traced launch, whose prefetcher runs anyway) the plan is
    // decoded now and its look made from it.
    let (look, plan) = match look.filter(|_| !traced) {
        Some(l) => (l, None),
        None => match store.plan_for(&app, plan_name)? {
            Some(p) => (p.look(), Some(p)),
            None => return Ok(None),
        },
    };
    Ok(Some(Decision::Prefetch(Box::new(Chosen {
        store,
        app,
        look,
        plan,
        plan_name,
        strategy,
        why,
        by_auto,
    }))))
}

fn device_queueing(store: &Store, db: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = db
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .map(|m| sys::Dev::from_user(m.dev()).to_string())
        .unwrap_or_default();
    // Unmeasured: assume a queueing device (the common case today).
    store
        .device_facts(&dev)
        .ok()
        .flatten()
        .map(|f| f.queueing())
        .unwrap_or(true)
}

pub fn cmd(db: &Path, a: RunArgs) -> anyhow::Result<i32> {
    // The launch's start, as far as this process can tell: its time is the launch's.
    let t0 = Instant::now();
    if let Some(s) = &a.strategy {
        parse_strategy(s)?;
    }
    // ext4's inode readahead is held off for the prefetch, and from the launch's start: taken
    // beside the plan lookup, since its lock files and journal under /run may be on a cold
    // disk too (4-5 ms of serial lookups here). Joined before any fork.
    let has_db = db.exists();
    // Blocked before the knob thread starts, so that it inherits the mask too.
    let deferred = has_db.then(Deferred::block).flatten();
    // Before any thread starts (and while this process is small): a launch that goes
    // without a prefetcher tells it what to record.
    let watcher = has_db.then(|| Watcher::fork(db, t0)).flatten();
    let early_hold = has_db
        .then(|| {
            std::thread::Builder::new()
                .name("warmstart-knobs".into())
                .spawn(|| {
                    KnobGuard::inode_readahead_off(
                        Path::new(knobs::SYS_EXT4),
                        Path::new(knobs::RUN_DIR),
                    )
                })
                .ok()
        })
        .flatten();
    // The database opens while the command is looked up on PATH: two chains of serial cold
    // reads that need not wait for each other (exec-to-exec 14.1 -> 11.3 ms on pdflatex
    // with a 12-entry PATH; docs/measurements.md, 2026-11-27, fourth entry). Spawned after
    // the signals are blocked, like the knob thread.
    let opener = has_db
        .then(|| {
            let db = db.to_path_buf();
            std::thread::Builder::new()
                .name("warmstart-db".into())
                .spawn(move || open_for_plan(&db))
                .ok()
        })
        .flatten();
    let exe = resolve_command(&a.command[0]);
    let store = opener.map(|t| {
        t.join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the database opener panicked")))
    });
    let exe = match exe {
        Ok(exe) => exe,
        Err(e) => {
            drop(store);
            // Put inode readahead back before the error ends the launch.
            drop(early_hold.map(|t| t.join()));
            Deferred::end(deferred, None);
            return Err(e.into());
        }
    };
    let key = key_of(&a.app, &exe, &a.command);
    let looked_up = match store {
        Some(Ok(Some(store))) => load_plan(
            store,
            db,
            &key.key,
            a.strategy.as_deref(),
            a.traced,
            a.app.is_some(),
        ),
        Some(Err(e)) => Err(e),
        Some(Ok(None)) | None => {
            // (A database this user may not read stays quiet, as in `open_for_plan`.)
            if a.app.is_some() && !db.exists() {
                tracing::warn!(
                    "no database at {}, so no app named `{}`; launching without prefetch",
                    db.display(),
                    key.key
                );
            }
            Ok(None)
        }
    };
    let (chosen, plain) = match looked_up {
        Ok(Some(Decision::Prefetch(c))) => (Some(*c), None),
        Ok(Some(Decision::Plain(app))) => (None, Some(app)),
        Ok(None) => (None, None),
        Err(e) => {
            tracing::warn!("{}; running without prefetch", super::error_text(&e));
            (None, None)
        }
    };
    // Only now: issued first, the executable's readahead (then the whole binary, megabytes)
    // queued ahead of the path lookups and database reads above and delayed them by ~5 ms.
    let exe_warm = crate::prefetch::warm_executable(&exe, chosen.as_ref().map(|c| &c.look));
    let held = early_hold.and_then(|t| t.join().ok()).and_then(|r| {
        r.map_err(|e| tracing::debug!("inode readahead left on: {e}"))
            .ok()
    });
    // Without a plan: put it back now (an exec runs no destructors).
    let held = if chosen.is_some() {
        held.inspect(|_| tracing::debug!("inode readahead off from the launch's start"))
    } else {
        drop(held);
        None
    };
    let opts = PrefetchOptions {
        jobs: a.jobs as usize,
        mem_cap: a.mem_cap_mb.map(|m| m.saturating_mul(1024 * 1024)),
        meta_jobs: a.meta_jobs as usize,
        window: a.window_kb.saturating_mul(1024),
        avoid_cpu: None,
        placement: None,
        inode_readahead_off: Some(match held {
            Some(g) => KnobHold::held(g),
            None => KnobHold::Take(Default::default()),
        }),
        max_rate: None,
        // The app runs as the caller, who may read all it reads.
        reader: None,
    };
    let hold_cap = Duration::from_millis(a.hold_cap_ms);
    // A warm launch decodes no plan (python's: 1.1-1.3 ms before its exec); any other needs
    // it now, or, if it cannot be read, runs plainly, as when there was none.
    let look = chosen
        .as_ref()
        .filter(|_| exe_warm && !a.stats)
        .map(|c| crate::prefetch::sample_residency(&c.look));
    let warm = look.is_some_and(|l| l.warm());
    let ready = match chosen {
        None => None,
        Some(c) if warm && !a.traced && !a.stats => Some(Ready::Warm(Box::new(c))),
        Some(c) => match c.into_planned() {
            Ok(p) => Some(Ready::Planned(Box::new(p))),
            Err(e) => {
                tracing::warn!("{}; running without prefetch", super::error_text(&e));
                None
            }
        },
    };
    match ready {
        Some(Ready::Planned(p)) if a.stats => {
            drop(watcher);
            // The wrapper forwards signals from here on.
            Deferred::end(deferred, opts.inode_readahead_off.as_ref());
            wrapped(*p, db, opts, &exe, &a, &key.key, hold_cap)
        }
        Some(Ready::Warm(c)) => {
            // A warm launch: nothing to prefetch, hold or keep off a CPU, so no prefetcher
            // either (it would only find the same and stop); a watcher times and records it,
            // as warm, for `auto` to leave out. Its forked prefetcher cost a warm pdflatex
            // launch ~7.5 ms of CPU (docs/measurements.md, 2026-11-27, sixth entry).
            let Chosen {
                store,
                app,
                strategy,
                by_auto,
                ..
            } = *c;
            drop(store);
            tracing::debug!("{}: the plan is in memory; launching at once", app.key);
            // Puts inode readahead back: nothing is prefetched.
            drop(opts);
            Deferred::end(deferred, None);
            if let Some(w) = watcher {
                let watched = Watched {
                    strategy: strategy.name(),
                    auto: by_auto,
                    looked: look.unwrap_or_default(),
                };
                w.watch(app.id, watched, false);
            }
            exec_app(&exe, &a.command)
        }
        Some(Ready::Planned(p)) => {
            let Planned {
                store,
                app,
                plan,
                strategy,
                by_auto,
                ..
            } = *p;
            // No connection may cross the fork; the prefetcher opens its own. Nor the
            // watcher's pipe: the prefetcher times this launch.
            drop(store);
            drop(watcher);
            // A traced warm launch keeps its prefetcher (`explain` attributes its waits),
            // but is neither held nor pinned: there is nothing to wait for.
            let hold = plan.hold_entries > 0 && !warm;
            let place = (!a.share_cpu && !warm)
                .then(|| placement::for_plan(&plan))
                .flatten();
            let released = detach_prefetcher(
                Job {
                    db: db.to_path_buf(),
                    app,
                    plan,
                    strategy,
                    by_auto,
                    traced: a.traced,
                    started: t0,
                },
                PrefetchOptions {
                    placement: place.clone(),
                    ..opts
                },
                hold,
                !a.share_cpu,
            );
            // The hold is the prefetcher's now (or was given back if it could not start).
            Deferred::end(deferred, None);
            if let Some(r) = released {
                wait_release(&r, hold_cap);
            }
            // The application inherits this across the exec; the prefetcher gives the
            // CPUs back once the plan is issued.
            if let Some(p) = &place {
                sys::set_affinity(0, &p.app);
            }
            exec_app(&exe, &a.command)
        }
        None if a.stats => {
            drop(watcher);
            Deferred::end(deferred, None);
            crate::serve::recover_placements();
            let started = Instant::now();
            let (exit, usage) = spawn_and_wait(&exe, &a.command)?;
            print_stats(
                &key.key,
                None,
                None,
                started.elapsed().as_secs_f64() * 1e3,
                &usage,
                false,
                a.json,
            );
            exit_like(exit)
        }
        None => {
            Deferred::end(deferred, None);
            if let Some(app) = plain {
                // How warm this launch is, for `auto` to leave a warm one out.
                let looked = crate::prefetch::Resident {
                    seen: std::fs::metadata(&exe).map(|m| m.len()).unwrap_or(0),
                    cached: sys::cached_pages_of(&exe).unwrap_or(0) * 4096,
                };
                let plain = Watched {
                    strategy: auto::PLAIN,
                    auto: true,
                    looked,
                };
                if let Some(w) = watcher {
                    w.watch(app.id, plain, a.traced);
                }
            } else {
                drop(watcher);
            }
            exec_app(&exe, &a.command)
        }
    }
}

/// A launch started without a prefetcher, as its watcher records it.
struct Watched {
    /// `auto::PLAIN`, or the strategy whose plan was found in memory.
    strategy: &'static str,
    auto: bool,
    /// What was looked at to tell how warm the launch is (the executable, or the plan's
    /// samples), and of it in memory: a warm launch says nothing about a strategy and
    /// `auto` leaves it out.
    looked: crate::prefetch::Resident,
}

/// The process that times and records a launch started without a prefetcher (auto's `none`,
/// or a warm one), as the prefetcher times a prefetched one: so that `auto` keeps comparing
/// plain launches with the strategies, and re-tries them. Forked (twice, so that it is not
/// the application's child) when `run` starts, while this process is small and has no other
/// thread, and told what to record (`watch`) just before the exec, or nothing (dropped): a
/// double fork there held a warm launch ~0.5 ms more before its exec (docs/measurements.md,
/// 2026-11-29, fourth entry).
struct Watcher {
    /// Written once with what to record; closed without a word, the watcher exits.
    tell: Option<OwnedFd>,
    /// The intermediate child, reaped before the exec (it exits at once).
    child: Option<nix::unistd::Pid>,
}

/// What the watcher records, sent to it as JSON.
#[derive(serde::Serialize, serde::Deserialize)]
struct WatchOrder {
    app_id: i64,
    strategy: String,
    auto: bool,
    seen: u64,
    cached: u64,
    traced: bool,
}

impl Watcher {
    /// Fork the watcher. Must be called while this process runs no other thread.
    fn fork(db: &Path, t0: Instant) -> Option<Watcher> {
        let app_pid = std::process::id() as i32;
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        // SAFETY: no other thread runs yet (called before the knob and database threads
        // start); the intermediate child only forks again and _exits.
        match unsafe { fork() } {
            Ok(ForkResult::Parent { child }) => {
                drop(r);
                Some(Watcher {
                    tell: Some(w),
                    child: Some(child),
                })
            }
            Ok(ForkResult::Child) => {
                // SAFETY: as above; this process is single-threaded.
                if let Ok(ForkResult::Child) = unsafe { fork() } {
                    drop(w);
                    watcher_main(r, db, app_pid, t0);
                }
                // SAFETY: _exit ends the intermediate child without running the parent's
                // atexit handlers or flushing its copied buffers twice.
                unsafe { libc::_exit(0) }
            }
            Err(e) => {
                tracing::debug!("cannot time this launch: {e}");
                None
            }
        }
    }

    /// Record this launch once the application (this process, after its exec) has exited.
    fn watch(mut self, app_id: i64, w: Watched, traced: bool) {
        let order = WatchOrder {
            app_id,
            strategy: w.strategy.into(),
            auto: w.auto,
            seen: w.looked.seen,
            cached: w.looked.cached,
            traced,
        };
        if let (Some(fd), Ok(msg)) = (self.tell.take(), serde_json::to_vec(&order)) {
            let _ = std::fs::File::from(fd).write_all(&msg);
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Closed: a watcher told nothing exits.
        drop(self.tell.take());
        if let Some(child) = self.child.take() {
            let _ = nix::sys::wait::waitpid(child, None);
        }
    }
}

/// The watcher: waits for its order, then for the application to exit, and records the
/// launch. Never returns.
fn watcher_main(order: OwnedFd, db: &Path, app_pid: i32, t0: Instant) -> ! {
    // Nothing else until told: the launch's start needs both CPUs (with the watcher setting
    // itself up first, `run`'s own thread waited ~1 ms for one).
    let mut msg = Vec::new();
    let _ = std::fs::File::from(order).read_to_end(&mut msg);
    let Ok(o) = serde_json::from_slice::<WatchOrder>(&msg) else {
        // Told nothing: the launch has a prefetcher, or no app, or did not start.
        // SAFETY: _exit ends this copy of `run` without its atexit handlers.
        unsafe { libc::_exit(0) }
    };
    // Out of the launch's process group and session: a signal to the group once the app has
    // exited (the benchmark closes every launch so) killed the watcher before it recorded,
    // and `auto`, which counts launches, then chose its next plain launch again and again.
    let _ = nix::unistd::setsid();
    // Forked while `run` held them back; this process has nothing to put back.
    let _ = Deferred::signals().thread_unblock();
    sys::close_inherited_fds();
    // A plain launch repairs what a killed prefetcher left pinned, as a prefetched one does.
    crate::serve::recover_placements();
    if let Ok(pidfd) = sys::pidfd_open(app_pid) {
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        let left = TIMED_LAUNCH.saturating_sub(t0.elapsed()).as_millis();
        let exited = matches!(
            poll(&mut fds, PollTimeout::from(left.min(u16::MAX as u128) as u16)),
            Ok(n) if n > 0
        );
        let rec = LaunchRecord {
            at_unix: crate::sys::now_unix(),
            mode: mode_of(o.traced).into(),
            wall_ms: if exited {
                t0.elapsed().as_secs_f64() * 1e3
            } else {
                0.0
            },
            prefetched_bytes: o.seen,
            resident_bytes: Some(o.cached),
            strategy: Some(o.strategy),
            auto: o.auto,
            ..LaunchRecord::default()
        };
        match Store::open(db) {
            Ok(mut s) => {
                if let Err(e) = s.add_launch(o.app_id, &rec) {
                    tracing::debug!("could not record the launch: {e}");
                }
                remember_choice(&mut s, db, o.app_id);
            }
            Err(e) => tracing::debug!("could not record the launch: {e}"),
        }
    }
    std::process::exit(0)
}

/// Signals that would end `run` before the application starts, blocked while this process
/// holds inode readahead off itself (until the fork hands the hold to the prefetcher, or it
/// is put back for a launch without a plan) and let through once it no longer does: one
/// that came meanwhile then ends the launch as it would have, with the setting as it was.
/// A blocked mask survives fork and exec, so every path lets them through before it starts
/// the application, and the prefetcher once it handles them itself (`stop_signals`).
struct Deferred(SigSet);

impl Deferred {
    fn signals() -> SigSet {
        [
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ]
        .into_iter()
        .collect()
    }

    fn block() -> Option<Deferred> {
        let set = Deferred::signals();
        set.thread_block().ok().map(|()| Deferred(set))
    }

    /// Let the signals through; a pending one first puts back `hold` if this process still
    /// has it, then ends the process.
    fn end(d: Option<Deferred>, hold: Option<&KnobHold>) {
        let Some(Deferred(set)) = d else { return };
        if sys::signals_pending(&set) {
            if let Some(KnobHold::Held(g)) = hold {
                drop(g.lock().unwrap_or_else(|p| p.into_inner()).take());
            }
        }
        if let Err(e) = set.thread_unblock() {
            tracing::warn!("cannot unblock signals: {e}");
        }
    }
}

/// Replace this process with the application. Returns only on failure.
fn exec_app(exe: &Path, argv: &[OsString]) -> anyhow::Result<i32> {
    let source = crate::launch::exec_replace(exe, &argv[0], &argv[1..]);
    Err(LaunchError::Exec {
        path: exe.display().to_string(),
        source,
    }
    .into())
}

/// Wait (at most `cap`) for the prefetcher to say the plan's head is in memory.
fn wait_release(fd: &OwnedFd, cap: Duration) {
    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
    let ms = cap.as_millis().min(u16::MAX as u128) as u16;
    let _ = poll(&mut fds, PollTimeout::from(ms));
}

/// Start the prefetcher as a grandchild: it replays the plan, watches this process (about to
/// become the application), records the launch. With `hold`, returns the read end of a pipe
/// that becomes readable when the plan's head is in memory.
/// What a detached prefetcher works on.
struct Job {
    db: PathBuf,
    app: AppRow,
    plan: Plan,
    strategy: Strategy,
    by_auto: bool,
    traced: bool,
    /// When `run` started: the launch's time is counted from there.
    started: Instant,
}

fn detach_prefetcher(
    job: Job,
    opts: PrefetchOptions,
    hold: bool,
    avoid_cpu: bool,
) -> Option<OwnedFd> {
    let app_pid = std::process::id() as i32;
    let pipe = if hold {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()
    } else {
        None
    };
    // SAFETY: warmstart runs no other thread now (the knob thread is joined; checked below
    // in debug builds), so the child may run ordinary code. The intermediate child only
    // forks again and _exits.
    #[cfg(debug_assertions)]
    {
        // A joined thread can stay listed for a moment while the kernel finishes its exit.
        let tasks = || {
            std::fs::read_dir("/proc/self/task")
                .map(|d| d.count())
                .unwrap_or(1)
        };
        let t0 = Instant::now();
        while tasks() > 1 && t0.elapsed() < Duration::from_millis(100) {
            std::thread::yield_now();
        }
        assert_eq!(tasks(), 1, "fork must happen while no other thread runs");
    }
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => {
            let _ = nix::sys::wait::waitpid(child, None);
            // The inode-readahead hold is the prefetcher's now: a flock belongs to the open
            // file, shared across the fork, so releasing it here would end the prefetcher's
            // too. This copy of the descriptor closes at the exec.
            if let Some(KnobHold::Held(g)) = opts.inode_readahead_off {
                std::mem::forget(g);
            }
            pipe.map(|(r, _w)| r)
        }
        Ok(ForkResult::Child) => {
            // The prefetcher holds none of the descriptors the caller handed the application
            // (a pipe whose reader waits for EOF, a socket). It grows its descriptor table
            // itself (`prefetch::prepare_process`): a fork copies only a table's open part.
            sys::close_inherited_fds();
            // The prefetcher waits for this process to note the launch for it (see below):
            // the pipe reads EOF once this process has exited.
            let noting = opts
                .placement
                .as_ref()
                .and_then(|p| Some((p, placement::Launch::of(app_pid)?)))
                .and_then(|n| Some((n, nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?)));
            // SAFETY: as above; this process is single-threaded.
            let forked = unsafe { fork() };
            if let Ok(ForkResult::Parent { child }) = forked {
                // Noted before the front pins itself (it waits for this process), so a
                // prefetcher killed at any moment leaves its app to the next one to repair.
                if let Some(((p, launch), _gate)) = &noting {
                    let run_dir = std::path::Path::new(crate::trace::knobs::RUN_DIR);
                    let _ = placement::note_for(run_dir, child.as_raw(), *launch, p);
                }
            }
            if let Ok(ForkResult::Child) = forked {
                if let Some((_, (r, w))) = noting {
                    drop(w);
                    let _ = nix::unistd::read(&r, &mut [0u8; 1]);
                }
                let release = pipe.map(|(_r, w)| w);
                let opts = PrefetchOptions {
                    // Where the application (our grandparent until its exec) runs.
                    avoid_cpu: avoid_cpu.then(|| sys::last_cpu(app_pid)).flatten(),
                    ..opts
                };
                // All of the prefetcher keeps off the application's CPUs, not only its
                // workers: its own thread opens the database, gives the CPUs back (a walk
                // of /proc) and records the launch, and a traced launch waited for a CPU
                // behind it (`warmstart explain`).
                if let Some(p) = &opts.placement {
                    sys::set_affinity(0, &p.prefetcher);
                } else if let Some(cpu) = opts.avoid_cpu {
                    sys::keep_off_cpu(cpu);
                }
                let code = prefetcher_main(job, opts, app_pid, release);
                std::process::exit(code);
            }
            // SAFETY: _exit ends the intermediate child without running the parent's atexit
            // handlers or flushing its copied buffers twice.
            unsafe { libc::_exit(0) }
        }
        Err(e) => {
            tracing::warn!("cannot start the prefetcher ({e}); launching without it");
            None
        }
    }
}

/// The detached prefetcher: run the plan, stop when the application exits, record.
fn prefetcher_main(job: Job, opts: PrefetchOptions, app_pid: i32, release: Option<OwnedFd>) -> i32 {
    let Job {
        db,
        app,
        plan,
        strategy,
        by_auto,
        traced,
        started,
    } = job;
    let db = db.as_path();
    // Hold no end of the application's stdin/stdout: a pipe reader must see EOF when the app
    // is done. stderr stays for warnings.
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        // SAFETY: dup2 onto the standard descriptors of this process; `null` stays valid.
        unsafe {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
    }
    let stop = stop_signals();
    // Blocked by `run` until the fork (see `Deferred`); handled from here on.
    if let Err(e) = Deferred::signals().thread_unblock() {
        tracing::warn!("cannot unblock signals: {e}");
    }
    if sys::pidfd_open(app_pid).is_err() {
        // The application is already gone: what it left behind gets its CPUs back (the
        // note written for this prefetcher says what), and so do launches a killed
        // prefetcher pinned.
        placement::settle_started(std::path::Path::new(crate::trace::knobs::RUN_DIR));
        crate::serve::recover_placements();
        return 0;
    }
    let entries = plan.entries.len();
    let stopped = || stop.load(Ordering::Relaxed) != 0;
    // The application pins itself before its exec (`cmd`).
    let mut serving = match Serving::start(app_pid, Arc::new(plan), opts, false) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot start prefetch threads: {e}");
            return 1;
        }
    };
    if let (Some(w), Some(head)) = (release, serving.take_head()) {
        std::thread::spawn(move || {
            if head.recv().is_ok() {
                let _ = nix::unistd::write(&w, &[1u8]);
            }
        });
    }
    let exited = serving.watch(started, &stopped);
    // Dropping the hold on the way: the inode readahead setting is back once this returns.
    let served = serving.finish(exited);
    if stopped() {
        let sig = stop.load(Ordering::Relaxed) as i32;
        tracing::info!("prefetcher stopped by signal {sig}; this launch is not recorded");
        return 128 + sig;
    }
    // Keep watching (asleep, no CPU) to time launches that end within T_timeout.
    let ended = served.ended_before(started + TIMED_LAUNCH, &stopped);
    let Served { report, waits, .. } = served;
    let rec = LaunchRecord {
        at_unix: crate::sys::now_unix(),
        mode: mode_of(traced).into(),
        wall_ms: ended.map_or(0.0, |t| t.duration_since(started).as_secs_f64() * 1e3),
        prefetched_bytes: report.data_bytes + report.metadata_bytes,
        resident_bytes: Some(report.resident_bytes),
        stale_files: report.files_stale + report.files_missing,
        prefetch_ms: report.elapsed_ms,
        strategy: Some(strategy.name().into()),
        waits: Some(waits),
        auto: by_auto,
        ..LaunchRecord::default()
    };
    after_launch(db, &app, strategy, entries, &rec);
    0
}

/// The prefetcher's signals. SIGTERM and SIGHUP stop it the orderly way, so it gives back
/// the inode readahead setting it holds (the default action would leave the setting changed
/// until the next warmstart command repairs it): the returned flag holds the signal. SIGINT
/// and SIGQUIT are caught and left alone: a terminal sends them (`Ctrl-C`, `Ctrl-\`) to the
/// whole foreground group, and they are the application's to act on; the prefetcher ends
/// with the application anyway. (Caught rather than ignored, as an ignored signal would
/// stay ignored in whatever the prefetcher starts.)
fn stop_signals() -> Arc<AtomicUsize> {
    let stop = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGTERM, libc::SIGHUP] {
        if let Err(e) = signal_hook::flag::register_usize(sig, stop.clone(), sig as usize) {
            tracing::debug!("cannot catch signal {sig}: {e}");
        }
    }
    for sig in [libc::SIGINT, libc::SIGQUIT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::new(AtomicBool::new(false))) {
            tracing::debug!("cannot catch signal {sig}: {e}");
        }
    }
    stop
}

/// Make `auto`'s choice for the app's next launch now, while nothing waits for it, so that
/// the next launch's front reads it instead of the history.
fn remember_choice(store: &mut Store, db: &Path, app_id: i64) {
    let queueing = device_queueing(store, db);
    if let Err(e) = auto::remember(store, app_id, queueing) {
        tracing::debug!("could not keep auto's next choice: {e}");
    }
}

/// Record the launch; for `paralfetch`, dynamic scheduling: too many waits raise the app's
/// thresholds and re-plan from the stored runs for the next launch.
fn after_launch(db: &Path, app: &AppRow, strategy: Strategy, entries: usize, rec: &LaunchRecord) {
    let mut store = match Store::open(db) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("could not record the launch in the history: {e}");
            return;
        }
    };
    if let Err(e) = store.add_launch(app.id, rec) {
        tracing::warn!("could not record the launch in the history: {e}");
    }
    let waits = rec.waits.unwrap_or(0);
    // A traced launch waits for the tracer too: not a signal to re-plan on.
    if rec.mode != mode_of(false)
        || strategy != Strategy::Paralfetch
        || (waits as f64) <= WAIT_SHARE * entries as f64
    {
        remember_choice(&mut store, db, app.id);
        return;
    }
    let queueing = device_queueing(&store, db);
    let Ok(mut settings) = store.app_settings(app.id) else {
        return;
    };
    let current = settings
        .paralfetch
        .unwrap_or_else(|| crate::schedule::ParalfetchSettings::defaults(queueing));
    let raised = current.raise(queueing);
    settings.paralfetch = Some(raised);
    settings.paralfetch_raises += 1;
    if store.set_app_settings(app.id, &settings).is_ok() {
        if let Err(e) = crate::learn::replan_paralfetch(&mut store, app, raised, queueing) {
            tracing::warn!("dynamic scheduling could not re-plan {}: {e}", app.key);
        }
    }
    remember_choice(&mut store, db, app.id);
}

/// Run the command as a child, unprefetched, and wait for it.
fn spawn_and_wait(exe: &Path, argv: &[OsString]) -> anyhow::Result<(Exit, sys::Usage)> {
    let child = std::process::Command::new(exe)
        .arg0(&argv[0])
        .args(&argv[1..])
        .spawn()
        .map_err(|source| LaunchError::Exec {
            path: exe.display().to_string(),
            source,
        })?;
    let pid = child.id() as i32;
    let forwarder = Forwarder::start(pid).context("installing signal forwarding")?;
    let (_, exit, usage) = sys::wait4(pid, false)
        .context("waiting for the command")?
        .ok_or_else(|| anyhow::anyhow!("wait4 returned no status"))?;
    drop(forwarder);
    Ok((exit, usage))
}

/// `--stats`: stay a wrapper so the report can follow the application's exit.
fn wrapped(
    c: Planned,
    db: &Path,
    opts: PrefetchOptions,
    exe: &Path,
    a: &RunArgs,
    key: &str,
    hold_cap: Duration,
) -> anyhow::Result<i32> {
    let Planned {
        store,
        app,
        plan,
        strategy,
        why,
        by_auto,
    } = c;
    drop(store);
    let entries = plan.entries.len();
    let hold = plan.hold_entries > 0;
    let started = Instant::now();
    let place = (!a.share_cpu).then(|| placement::for_plan(&plan)).flatten();
    // The application, forked but held before its exec: served like any launch from here.
    let child = crate::launch::spawn_gated(exe, &a.command, false)?;
    let opts = PrefetchOptions {
        avoid_cpu: (!a.share_cpu).then(sys::current_cpu).flatten(),
        placement: place.clone(),
        ..opts
    };
    let mut serving = Serving::start(child.pid(), Arc::new(plan), opts, true)
        .context("starting the prefetch thread")?;
    let held_ms = if hold {
        serving.wait_head(hold_cap);
        Some(started.elapsed().as_secs_f64() * 1e3)
    } else {
        None
    };
    let pid = child.release()?;
    let forwarder = Forwarder::start(pid).context("installing signal forwarding")?;
    serving.watch(started, &|| false);
    let (_, exit, usage) = sys::wait4(pid, false)
        .context("waiting for the command")?
        .ok_or_else(|| anyhow::anyhow!("wait4 returned no status"))?;
    drop(forwarder);
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    // The launch is over: stop issuing requests that can no longer help it.
    let report = serving.finish(true).report;
    let (exit_code, signal) = match exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    let rec = LaunchRecord {
        at_unix: crate::sys::now_unix(),
        mode: mode_of(a.traced).into(),
        wall_ms,
        exit_code,
        signal,
        major_faults: usage.major_faults,
        prefetched_bytes: report.data_bytes + report.metadata_bytes,
        resident_bytes: Some(report.resident_bytes),
        stale_files: report.files_stale + report.files_missing,
        prefetch_ms: report.elapsed_ms,
        strategy: Some(strategy.name().into()),
        waits: Some(usage.voluntary_switches),
        auto: by_auto,
    };
    after_launch(db, &app, strategy, entries, &rec);
    print_stats(
        key,
        Some(&report),
        Some(How {
            strategy,
            why: why.as_str(),
            held_ms,
            place: place.as_ref(),
        }),
        wall_ms,
        &usage,
        true,
        a.json,
    );
    exit_like(exit)
}

/// How a prefetched launch was run, for `--stats`.
struct How<'a> {
    strategy: Strategy,
    why: &'a str,
    /// How long the application was held for the plan's head.
    held_ms: Option<f64>,
    place: Option<&'a Placement>,
}

fn print_stats(
    app: &str,
    r: Option<&PrefetchReport>,
    how: Option<How<'_>>,
    wall_ms: f64,
    usage: &crate::sys::Usage,
    // Waits are the dynamic-scheduling signal, meaningful only for a prefetched launch.
    with_waits: bool,
    json: bool,
) {
    let place = how.as_ref().and_then(|h| h.place);
    let majflt = usage.major_faults;
    let waits = with_waits.then_some(usage.voluntary_switches);
    let (user_ms, sys_ms) = (usage.user_us as f64 / 1e3, usage.sys_us as f64 / 1e3);
    if json {
        let v = json!({
            "app": app,
            "plan": r.is_some(),
            "strategy": how.as_ref().map(|h| h.strategy.name()),
            "why": how.as_ref().map(|h| h.why),
            "held_ms": how.as_ref().and_then(|h| h.held_ms),
            "wall_ms": wall_ms,
            "major_faults": majflt,
            "waits": waits,
            "user_ms": user_ms,
            "sys_ms": sys_ms,
            "prefetch": r,
            "placement": place,
        });
        eprintln!("{v}");
        return;
    }
    let Some(r) = r else {
        eprintln!("warmstart: no plan for {app}; launched without prefetch ({wall_ms:.1} ms, {user_ms:.0} ms user, {sys_ms:.0} ms system CPU, {majflt} major faults)");
        return;
    };
    eprintln!("warmstart: {app}");
    if let Some(h) = &how {
        eprintln!(
            "  strategy:   {} ({}){}",
            h.strategy.name(),
            h.why,
            h.held_ms
                .map(|h| format!("; application held {h:.1} ms for the plan's head"))
                .unwrap_or_default()
        );
    }
    eprintln!(
        "  launch:     {wall_ms:.1} ms ({user_ms:.0} ms user, {sys_ms:.0} ms system CPU), {majflt} major faults, {} waits",
        waits.map_or("?".into(), |w| w.to_string())
    );
    eprintln!(
        "  prefetched: {} data ({} of it already cached) + {} metadata in {} requests, {} lookups, {} listings, {} inodes ({} gone), {} names beside planned inodes stat'ed ({} work items done{})",
        human_bytes(r.data_bytes),
        human_bytes(r.resident_bytes),
        human_bytes(r.metadata_bytes),
        r.requests,
        r.lookups,
        r.listings,
        r.inodes,
        r.inodes_stale,
        r.names_stated,
        r.entries_done,
        if r.stopped_early {
            ", stopped when the app exited"
        } else if r.stopped_warm {
            ", stopped: the plan was in memory already"
        } else {
            ""
        }
    );
    eprintln!(
        "  files:      {} opened, {} stale, {} missing; {} entries skipped, {} capped, {} errors",
        r.files_opened,
        r.files_stale,
        r.files_missing,
        r.entries_skipped,
        human_bytes(r.capped_bytes),
        r.errors
    );
    eprintln!(
        "  timing:     first request after {:.0} us, all issued after {:.1} ms ({} workers, metadata via {}{})",
        r.first_request_us,
        r.elapsed_ms,
        r.jobs,
        match r.metadata_mode {
            crate::prefetch::MetadataMode::BlockDevice => "block device",
            crate::prefetch::MetadataMode::Filesystem => "filesystem lookups",
        },
        if r.inode_readahead_off {
            "; ext4 inode readahead off until then"
        } else {
            ""
        }
    );
    if let Some(p) = place {
        let list = |v: &[usize]| {
            v.iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        eprintln!(
            "  cpus:       application on {}, prefetch on {} (the disk's interrupts) until all was issued",
            list(&p.app),
            list(&p.prefetcher)
        );
    }
}
