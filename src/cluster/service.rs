//! ClusterFetch in the daemon: the live miner keeps burst plans in the store, each under its
//! trigger file; a fanotify inode mark on every active trigger starts the burst's prefetch
//! (the launch path's engine) when the file is opened, without ever blocking the open; some
//! seconds later a kernel-filtered trace of accesses to the burst's files tells how much of
//! it was used, and a burst used less than `used_share` is deactivated (section 2.4).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};

use super::live::{burst_plan, stored_burst, LiveMiner};
use super::miner::MinerConfig;
use super::BLACKLIST_AFTER;
use crate::plan::{Entry, Plan};
use crate::store::Store;
use crate::sys::Dev;
use crate::trace::session::AccessWatch;
use crate::trace::tracefs::Tracefs;

/// How bursts are learned and used.
#[derive(Clone, Debug)]
pub struct Settings {
    pub miner: MinerConfig,
    /// Bursts smaller than this are not kept.
    pub min_kb: u64,
    /// When a prefetched burst is checked (the paper: 10 s).
    pub check_after: Duration,
    /// Share of a burst's pages that must have been used by then (the paper: 90%).
    pub used_share: f64,
    /// Prefetch workers per burst.
    pub jobs: usize,
    /// Directories whose files are never learned (the daemon's `exclude_paths`): not as
    /// triggers (they are in `miner.exclude` too), not in a burst.
    pub private: Vec<String>,
    /// Bytes per second a burst's prefetch may issue (`burst_bandwidth_share` of the
    /// measured sequential bandwidth); None: no cap.
    pub max_rate: Option<u64>,
}

/// Whether `p` is under one of `dirs` (path prefixes).
fn under(p: &std::path::Path, dirs: &[String]) -> bool {
    let s = p.to_string_lossy();
    dirs.iter().any(|d| s.starts_with(d.as_str()))
}

/// Burst prefetches running at once; a trigger opened while this many run is let be. Their
/// checks, which wait `burst_check_secs` after the prefetch, do not count: an application's
/// start fires two bursts (GIMP: its configuration, its GIO modules), and while their checks
/// waited, the burst of the PDF it opened a second later was not prefetched (bench
/// gimp-open-pdf). The checks are bounded by the daemon's tracefs instances instead.
const MAX_RUNNING: usize = 2;
/// Files of a burst whose accesses the check traces (the filter names each inode).
const CHECK_FILES: usize = 64;
const POLL: Duration = Duration::from_millis(100);

/// A trigger: its burst, path and plan (kept in memory: the prefetch starts the moment the
/// file is opened).
#[derive(Clone)]
struct Trigger {
    id: i64,
    path: PathBuf,
    plan: Arc<Plan>,
    /// The program whose opening fires it (None: any program's, see `fires_for`).
    opener: Option<String>,
}

/// Whether a trigger mined as opened by program `opener` fires when program `comm` opens
/// it (`exec`: opens it to execute it). A burst is one program's loading; the miner keeps
/// files opened by several programs out of its triggers (`live::SHARED_BY`), but only once
/// it has seen them opened so, and a burst of R's start mined right after the daemon's own
/// start was kept under /etc/locale.alias, then prefetched (25 MiB) whenever `date`,
/// `sleep` or any other program set its locale, beside whatever launch that was
/// (docs/measurements.md, 2026-11-27, eighth entry). An executable's exec is that program
/// whatever it is called: the opening comes before the exec renames the process (its
/// `comm` is still its parent's), and a link's name is not its target's. A burst mined
/// before openers were kept fires for anyone; an opener already gone, for nobody.
fn fires_for(opener: Option<&str>, comm: Option<&str>, exec: bool) -> bool {
    match opener {
        Some(o) => exec || comm == Some(o),
        None => true,
    }
}

/// Whether a trigger's opening is part of a launch the daemon prefetches with the launch's
/// own plan (the opener's pid, the trigger's path): such a burst is not prefetched, the
/// launch's plan holds it already.
pub type LaunchOwned = Arc<dyn Fn(i32, &std::path::Path) -> bool + Send + Sync>;

/// Start the burst service; it runs until `stop` is set. The receiver hears once it mines
/// and its triggers are marked (or is closed when it could not start): its setup reads the
/// database and every burst's plan, work a launch should not find beside its own.
pub fn spawn(
    db: PathBuf,
    settings: Settings,
    launch_owned: LaunchOwned,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(JoinHandle<()>, mpsc::Receiver<()>)> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name("warmstart-bursts".into())
        .spawn(move || {
            if let Err(e) = serve(&db, &settings, &*launch_owned, &stop, ready_tx) {
                tracing::error!("bursts off: {e}");
            }
        })?;
    Ok((handle, ready_rx))
}

fn serve(
    db: &std::path::Path,
    st: &Settings,
    launch_owned: &(dyn Fn(i32, &std::path::Path) -> bool + Send + Sync),
    stop: &Arc<AtomicBool>,
    ready: mpsc::Sender<()>,
) -> Result<(), String> {
    let set_up = Instant::now();
    let tfs = Tracefs::open().map_err(|e| e.to_string())?;
    let mut live = LiveMiner::start(&tfs, st.miner.clone()).map_err(|e| e.to_string())?;
    let fan = Fanotify::init(
        InitFlags::FAN_CLASS_NOTIF | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
        EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC | EventFFlags::O_NOATIME,
    )
    .map_err(|e| format!("fanotify_init: {e}"))?;
    let mut triggers: HashMap<(Dev, u64), Trigger> = HashMap::new();
    let mark = |fan: &Fanotify, p: &PathBuf, add: bool| {
        let flags = if add {
            MarkFlags::FAN_MARK_ADD
        } else {
            MarkFlags::FAN_MARK_REMOVE
        } | MarkFlags::FAN_MARK_DONT_FOLLOW;
        // An exec's opening carries both bits (`fires_for`).
        let mask = MaskFlags::FAN_OPEN | MaskFlags::FAN_OPEN_EXEC;
        fan.mark(flags, mask, nix::fcntl::AT_FDCWD, Some(p))
    };
    {
        let store = Store::open(db).map_err(|e| e.to_string())?;
        for b in store.bursts().map_err(|e| e.to_string())? {
            let Ok(dev) = b.dev.parse::<Dev>() else {
                continue;
            };
            let Ok(plan) = store.burst_plan(&b) else {
                continue;
            };
            if b.active && mark(&fan, &b.path, true).is_ok() {
                triggers.insert(
                    (dev, b.ino),
                    Trigger {
                        id: b.id,
                        path: b.path,
                        plan: Arc::new(plan),
                        opener: b.opener,
                    },
                );
            }
        }
    }
    tracing::info!(
        "bursts: mining (at least {} log entries at {:.0}/s), {} triggers marked; set up in {:.0} ms",
        st.miner.length_threshold,
        st.miner.iops_threshold,
        triggers.len(),
        set_up.elapsed().as_secs_f64() * 1e3
    );
    let _ = ready.send(());
    // Threads of prefetches and checks (all gone before the daemon's instances are removed),
    // and of them those still prefetching.
    let running = Arc::new(AtomicUsize::new(0));
    let prefetching = Arc::new(AtomicUsize::new(0));
    // A check's trace instance, made ahead of the next trigger.
    let mut next_watch: Option<AccessWatch> = None;
    // What the checks decided: a trimmed plan, or None (deactivated).
    let (failed_tx, failed_rx) = mpsc::channel::<((Dev, u64), Option<Plan>)>();
    let mut last_fired: HashMap<i64, Instant> = HashMap::new();
    let me = std::process::id() as i32;
    while !stop.load(Ordering::Relaxed) {
        // Trigger openings first: they are what a user waits on.
        let mut fds = [PollFd::new(fan.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(POLL.as_millis() as u16)).unwrap_or(0) > 0;
        if ready {
            for ev in fan.read_events().unwrap_or_default() {
                let Some(fd) = ev.fd() else { continue };
                if ev.pid() == me {
                    continue;
                }
                let Ok(s) = nix::sys::stat::fstat(fd) else {
                    continue;
                };
                let key = (Dev::from_user(s.st_dev), s.st_ino);
                let Some(t) = triggers.get(&key).cloned() else {
                    continue;
                };
                let comm = crate::sys::comm_of(ev.pid());
                let exec = ev.mask().contains(MaskFlags::FAN_OPEN_EXEC);
                if !fires_for(t.opener.as_deref(), comm.as_deref(), exec) {
                    tracing::debug!(
                        "bursts: {} opened by {}, not by {}: left alone",
                        t.path.display(),
                        comm.as_deref().unwrap_or("a process already gone"),
                        t.opener.as_deref().unwrap_or_default()
                    );
                    continue;
                }
                // A launch is a burst too (its script or executable the trigger), but one the
                // daemon prefetches with the launch's plan: the same pages twice, and a
                // larger burst's extra megabytes, queued beside that plan slowed the launch.
                if launch_owned(ev.pid(), &t.path) {
                    tracing::debug!(
                        "bursts: {} opened by a launch being prefetched; left to its plan",
                        t.path.display()
                    );
                    continue;
                }
                let opened = Instant::now();
                if prefetching.load(Ordering::Relaxed) >= MAX_RUNNING {
                    continue;
                }
                // Opened again while its last prefetch is still being checked: prefetched
                // again (a new loading), checked once. And prefetched unchecked when no
                // check can be watched now (the daemon's instances are all in use).
                let checking = last_fired
                    .get(&t.id)
                    .is_some_and(|at| at.elapsed() < st.check_after);
                let watch = if checking {
                    None
                } else {
                    // The watch of the check is made here, before anything else, so that it
                    // sees the application's reads that follow its open.
                    next_watch
                        .take()
                        .map_or_else(|| AccessWatch::prepare(&tfs), Ok)
                        .and_then(|w| w.arm(&check_inos(&t.plan)).map(|_| w))
                        .map_err(|e| {
                            tracing::warn!(
                                "bursts: cannot watch a burst's use now ({e}); prefetched unchecked"
                            )
                        })
                        .ok()
                };
                let Some(watch) = watch else {
                    let (plan, jobs, stop2) = (t.plan.clone(), st.jobs, stop.clone());
                    let max_rate = st.max_rate;
                    let (running2, prefetching2) = (running.clone(), prefetching.clone());
                    let (id, path) = (t.id, t.path.clone());
                    running.fetch_add(1, Ordering::Relaxed);
                    prefetching.fetch_add(1, Ordering::Relaxed);
                    let spawned = std::thread::Builder::new()
                        .name("warmstart-burst".into())
                        .spawn(move || {
                            let opts = crate::prefetch::PrefetchOptions {
                                jobs,
                                max_rate,
                                ..Default::default()
                            };
                            let r = crate::prefetch::prefetch(&plan, &opts, &stop2);
                            prefetching2.fetch_sub(1, Ordering::Relaxed);
                            tracing::info!(
                                "bursts: {} opened, prefetched burst #{id} ({} bytes) unchecked, \
                                 done {:.1} ms after the open was seen",
                                path.display(),
                                r.data_bytes,
                                opened.elapsed().as_secs_f64() * 1e3
                            );
                            running2.fetch_sub(1, Ordering::Relaxed);
                        });
                    if spawned.is_err() {
                        prefetching.fetch_sub(1, Ordering::Relaxed);
                        running.fetch_sub(1, Ordering::Relaxed);
                    }
                    continue;
                };
                last_fired.insert(t.id, Instant::now());
                running.fetch_add(1, Ordering::Relaxed);
                prefetching.fetch_add(1, Ordering::Relaxed);
                let (db, st2, stop2, running2, failed) = (
                    db.to_path_buf(),
                    st.clone(),
                    stop.clone(),
                    running.clone(),
                    failed_tx.clone(),
                );
                let prefetching2 = prefetching.clone();
                let spawned = std::thread::Builder::new()
                    .name("warmstart-burst".into())
                    .spawn(move || {
                        match fire(&db, &t, watch, &st2, &stop2, opened, &prefetching2) {
                            Ok(Checked::Kept) => {}
                            Ok(Checked::Trimmed(p)) => {
                                let _ = failed.send((key, Some(*p)));
                            }
                            Ok(Checked::Dropped) => {
                                let _ = failed.send((key, None));
                            }
                            Err(e) => {
                                tracing::warn!("burst #{} of {}: {e}", t.id, t.path.display())
                            }
                        }
                        running2.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    prefetching.fetch_sub(1, Ordering::Relaxed);
                    running.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        while let Ok((key, plan)) = failed_rx.try_recv() {
            match plan {
                Some(p) => {
                    if let Some(t) = triggers.get_mut(&key) {
                        t.plan = Arc::new(p);
                    }
                }
                None => {
                    if let Some(t) = triggers.remove(&key) {
                        let _ = mark(&fan, &t.path, false);
                    }
                }
            }
        }
        // Made ahead, but not while launches start: it would hold up their tracers' attach
        // (`tracefs::launches_quiet`).
        if next_watch.is_none()
            && crate::trace::tracefs::launches_quiet(std::time::Duration::from_millis(500))
        {
            next_watch = AccessWatch::prepare(&tfs).ok();
        }
        // Then the miner.
        let bursts = match live.step(false) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("bursts: the system trace failed ({e}); mining stops");
                return Err(e.to_string());
            }
        };
        if bursts.is_empty() {
            continue;
        }
        let mut store = Store::open(db).map_err(|e| e.to_string())?;
        for b in bursts {
            // What a trigger's own prefetch left for the application to read is no burst
            // to learn (it would replace the whole one with the remainder).
            let recent = triggers
                .get(&(b.trigger.dev, b.trigger.ino))
                .and_then(|t| last_fired.get(&t.id))
                .is_some_and(|at| at.elapsed() < 2 * st.check_after);
            if recent {
                continue;
            }
            // Files under the private directories (`exclude_paths`) are not learned.
            let plan = burst_plan(&b, &|d, i| {
                live.path_of(d, i)
                    .filter(|p| !under(p, &st.private))
                    .cloned()
            });
            if plan.entries.is_empty() || plan.summary().bytes < st.min_kb.saturating_mul(1024) {
                continue;
            }
            let saved = store.put_burst(&stored_burst(&b, plan.clone()), BLACKLIST_AFTER);
            match saved {
                Ok(Some(id)) => {
                    tracing::info!(
                        "bursts: learned #{id}, {} reads after {}",
                        b.reads.len(),
                        b.trigger.path.display()
                    );
                    if mark(&fan, &b.trigger.path, true).is_ok() {
                        triggers.insert(
                            (b.trigger.dev, b.trigger.ino),
                            Trigger {
                                id,
                                path: b.trigger.path.clone(),
                                plan: Arc::new(plan),
                                opener: b.trigger.comm.clone(),
                            },
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("bursts: cannot store a burst: {e}"),
            }
        }
    }
    // The prefetches and checks see `stop` within a poll; their trace instances must be
    // gone before the daemon removes what is left of its own.
    let t0 = Instant::now();
    while running.load(Ordering::Relaxed) > 0 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The pages of a plan's data entries, by (device, inode).
fn planned(plan: &Plan) -> HashSet<(Dev, u64, u64)> {
    let mut s = HashSet::new();
    for e in &plan.entries {
        if let Entry::Data { file, offset, len } = *e {
            if let Some(f) = plan.files.get(file as usize) {
                for p in offset / 4096..(offset + len).div_ceil(4096) {
                    s.insert((f.dev, f.ino, p));
                }
            }
        }
    }
    s
}

/// The files of a plan whose accesses a check traces: the largest `CHECK_FILES`.
fn check_inos(plan: &Plan) -> Vec<u64> {
    let mut files: Vec<(u64, u64)> = plan.files.iter().map(|f| (f.ino, f.size)).collect();
    files.sort_by_key(|f| std::cmp::Reverse(f.1));
    files.iter().take(CHECK_FILES).map(|f| f.0).collect()
}

/// What a burst's check decided.
enum Checked {
    /// Used as planned.
    Kept,
    /// Mostly used: the plan now holds only what was (the kernel's readahead beyond what a
    /// program reads makes every mined burst hold some pages nobody uses).
    Trimmed(Box<Plan>),
    /// Mostly unused: deactivated.
    Dropped,
}

/// Below `used_share` but at least this share used, a burst is trimmed, not dropped.
const TRIM_SHARE: f64 = 0.5;

/// The note a trimmed burst's plan carries.
const TRIMMED_NOTE: &str = "trimmed to the pages used after its first prefetch";

#[derive(Debug, PartialEq, Eq)]
enum Judged {
    Keep,
    Trim,
    Drop,
}

/// A check's verdict on a burst whose pages were `share` used (`hit_kb` of them). A burst's
/// first check trims it to what was used however little that share, if that still makes a
/// burst (`min_kb`): it was mined from page-cache inserts, which hold the kernel's readahead
/// around what the loading read (mmap read-around is `read_ahead_kb` wide, 8 MiB on this
/// VM's disk), and a Python loading of numpy, pandas, matplotlib and sympy used 32% of its
/// 128 MiB burst (bench/lab/loading.py, docs/measurements.md). From then on the paper's rule
/// holds: under `used_share` trimmed again if at least half was used, else deactivated.
fn judge(share: f64, hit_kb: u64, first: bool, st: &Settings) -> Judged {
    if share >= st.used_share {
        Judged::Keep
    } else if hit_kb > 0 && (share >= TRIM_SHARE || (first && hit_kb >= st.min_kb)) {
        Judged::Trim
    } else {
        Judged::Drop
    }
}

/// `plan` keeping, of the files in `checked`, only the pages in `used`.
fn trimmed(plan: &Plan, checked: &HashSet<u64>, used: &HashSet<(Dev, u64, u64)>) -> Plan {
    let mut out = plan.clone();
    out.entries.clear();
    for e in &plan.entries {
        let Entry::Data { file, offset, len } = *e else {
            out.entries.push(*e);
            continue;
        };
        let Some(f) = plan.files.get(file as usize) else {
            continue;
        };
        if !checked.contains(&f.ino) {
            out.entries.push(*e);
            continue;
        }
        let mut run: Option<(u64, u64)> = None;
        for p in offset / 4096..(offset + len).div_ceil(4096) {
            if used.contains(&(f.dev, f.ino, p)) {
                run = Some(run.map_or((p, p + 1), |(a, _)| (a, p + 1)));
            } else if let Some((a, b)) = run.take() {
                out.entries.push(Entry::Data {
                    file,
                    offset: a * 4096,
                    len: (b - a) * 4096,
                });
            }
        }
        if let Some((a, b)) = run {
            out.entries.push(Entry::Data {
                file,
                offset: a * 4096,
                len: (b - a) * 4096,
            });
        }
    }
    out.notes.push(TRIMMED_NOTE.into());
    out
}

/// Prefetch burst `t` now, then check with `watch` (armed) how much of it was used.
fn fire(
    db: &std::path::Path,
    t: &Trigger,
    mut watch: AccessWatch,
    st: &Settings,
    stop: &AtomicBool,
    opened: Instant,
    prefetching: &AtomicUsize,
) -> Result<Checked, String> {
    let (id, plan) = (t.id, &*t.plan);
    let started = opened.elapsed();
    let inos = check_inos(plan);
    let opts = crate::prefetch::PrefetchOptions {
        jobs: st.jobs,
        max_rate: st.max_rate,
        ..Default::default()
    };
    let report = crate::prefetch::prefetch(plan, &opts, stop);
    prefetching.fetch_sub(1, Ordering::Relaxed);
    let mut store = Store::open(db).map_err(|e| e.to_string())?;
    store
        .burst_hit(id, crate::sys::now_unix())
        .map_err(|e| e.to_string())?;
    tracing::info!(
        "bursts: {} opened, prefetched burst #{id} ({} bytes), started {:.1} ms after the \
         open was seen, done {:.1} ms after",
        t.path.display(),
        report.data_bytes,
        started.as_secs_f64() * 1e3,
        opened.elapsed().as_secs_f64() * 1e3
    );
    let t0 = Instant::now();
    let mut used: HashSet<(Dev, u64, u64)> = HashSet::new();
    while t0.elapsed() < st.check_after {
        if stop.load(Ordering::Relaxed) {
            return Ok(Checked::Kept);
        }
        std::thread::sleep(POLL);
        for e in watch.events().map_err(|e| e.to_string())? {
            if let Some((dev, ino, first, last)) = e.kind.used_pages() {
                for p in first..=last.min(first + (1 << 20)) {
                    used.insert((dev, ino, p));
                }
            }
        }
    }
    let checked: HashSet<u64> = inos.into_iter().collect();
    let want: HashSet<_> = planned(plan)
        .into_iter()
        .filter(|k| checked.contains(&k.1))
        .collect();
    let hit = want.iter().filter(|k| used.contains(k)).count();
    let share = if want.is_empty() {
        1.0
    } else {
        hit as f64 / want.len() as f64
    };
    let first = !plan.notes.iter().any(|n| n == TRIMMED_NOTE);
    let hit_kb = hit as u64 * plan.page_size as u64 / 1024;
    let verdict = match judge(share, hit_kb, first, st) {
        Judged::Keep => Checked::Kept,
        Judged::Trim => Checked::Trimmed(Box::new(trimmed(plan, &checked, &used))),
        Judged::Drop => Checked::Dropped,
    };
    let what = format!(
        "{:.0}% used{}",
        share * 100.0,
        match verdict {
            Checked::Kept => "",
            Checked::Trimmed(_) => ": trimmed to it",
            Checked::Dropped => ": deactivated",
        }
    );
    tracing::info!("bursts: #{id} after {}: {what}", t.path.display());
    if let Checked::Trimmed(p) = &verdict {
        store.replace_burst_plan(id, p).map_err(|e| e.to_string())?;
    }
    store
        .burst_checked(id, !matches!(verdict, Checked::Dropped), &what)
        .map_err(|e| e.to_string())?;
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Provenance;
    use crate::resolve::{FileId, FileKind};

    #[test]
    fn a_trigger_fires_for_the_program_that_opened_it_when_mined() {
        assert!(fires_for(Some("R"), Some("R"), false));
        assert!(!fires_for(Some("R"), Some("date"), false));
        // The opener already gone: its loading is no one's to serve.
        assert!(!fires_for(Some("R"), None, false));
        // An exec of the trigger, its process still named as its parent.
        assert!(fires_for(Some("R"), Some("bash"), true));
        // Mined before openers were kept: as before, any program's opening.
        assert!(fires_for(None, Some("date"), false));
        assert!(fires_for(None, None, false));
    }

    #[test]
    fn the_first_check_trims_a_burst_later_ones_judge_it() {
        let st = Settings {
            miner: crate::cluster::miner::MinerConfig::for_device(1000.0),
            min_kb: 256,
            check_after: Duration::from_secs(10),
            used_share: 0.9,
            jobs: 1,
            max_rate: None,
            private: vec![],
        };
        assert_eq!(judge(0.95, 1000, true, &st), Judged::Keep);
        // Mined with readahead around it: a third used, trimmed to that the first time...
        assert_eq!(judge(0.32, 40_000, true, &st), Judged::Trim);
        // ...not once trimmed, nor when too little is left to make a burst.
        assert_eq!(judge(0.32, 40_000, false, &st), Judged::Drop);
        assert_eq!(judge(0.32, 100, true, &st), Judged::Drop);
        assert_eq!(judge(0.6, 40_000, false, &st), Judged::Trim);
        assert_eq!(judge(0.0, 0, true, &st), Judged::Drop);
    }

    #[test]
    fn a_mostly_used_burst_is_trimmed_to_the_pages_used() {
        let dev = Dev { major: 8, minor: 1 };
        let f = |ino| FileId {
            path: format!("/d/{ino}").into(),
            dev,
            ino,
            size: 1 << 20,
            mtime_ns: 0,
            kind: FileKind::Regular,
            volatile: false,
        };
        let plan = Plan {
            app: "t".into(),
            created_unix: 0,
            strategy: "burst".into(),
            page_size: 4096,
            files: vec![f(1), f(2)],
            devices: vec![],
            entries: vec![
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 8 * 4096,
                },
                Entry::Data {
                    file: 1,
                    offset: 0,
                    len: 4096,
                },
            ],
            provenance: Provenance::default(),
            hold_entries: 0,
            segments: vec![],
            t_exp_ms: None,
            notes: vec![],
        };
        // File 1 checked, pages 0-2 and 5 used; file 2 not checked: kept whole.
        let checked: HashSet<u64> = [1].into();
        let used: HashSet<(Dev, u64, u64)> = [0, 1, 2, 5].iter().map(|&p| (dev, 1, p)).collect();
        let t = trimmed(&plan, &checked, &used);
        assert_eq!(
            t.entries,
            vec![
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 3 * 4096
                },
                Entry::Data {
                    file: 0,
                    offset: 5 * 4096,
                    len: 4096
                },
                Entry::Data {
                    file: 1,
                    offset: 0,
                    len: 4096
                },
            ]
        );
        assert_eq!(check_inos(&plan).len(), 2);
    }
}
