//! `record`: run the learning cycle for one app. N cold, traced launches (FAST's launch
//! profiling phase), then extraction, resolution, scheduling, and one transaction that stores
//! the raw runs and the plan (the prefetcher generation phase).

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use crate::app::AppKey;
use crate::device::DeviceFacts;
use crate::plan::Plan;
use crate::resolve::{DirBlocks, Resolver};
use crate::schedule::{
    plan_for, Base, DevicePaths, FiemapDisk, MissingMeta, ParalfetchSettings, Strategy,
    StrategyContext, SysDevicePaths,
};
use crate::sequence::{extract_supported, RawRun, SysBlockDevices, SysResidency};
use crate::store::{LaunchRecord, Store, StoreError};
use crate::sys::{self, Exit};
use crate::trace::knobs::{self, RecordLock};
use crate::trace::tracefs::Tracefs;
use crate::trace::{trace_launch, TraceConfig, TraceError};

#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("learning run {run} of `{app}` ended with {exit}; nothing was stored (fix the command, or pass --allow-failure to learn from failing launches)")]
    CommandFailed { app: String, run: u32, exit: Exit },
    #[error("cannot set warmstart as child subreaper: {0}")]
    Subreaper(String),
    #[error("measuring the device: {0}")]
    Device(String),
}

#[derive(Clone, Debug)]
pub struct LearnOptions {
    /// Learning runs (FAST's N_rawseq).
    pub runs: u32,
    pub trace: TraceConfig,
    /// Keep a run whose command exited non-zero.
    pub allow_failure: bool,
    /// Plain cold launches timed after learning (a command that exits by itself only):
    /// what `auto` compares the strategies with before it may stop prefetching an app.
    pub baseline_runs: u32,
    /// Rank the plans by emulation after learning, for `auto`.
    pub emulate: bool,
}

impl Default for LearnOptions {
    fn default() -> Self {
        LearnOptions {
            runs: 2,
            baseline_runs: 2,
            emulate: true,
            trace: TraceConfig::default(),
            allow_failure: false,
        }
    }
}

/// What a learning cycle produced.
#[derive(Debug)]
pub struct Learned {
    pub app_id: i64,
    pub runs: Vec<RawRun>,
    pub plan: Plan,
    /// Fraction of traced file-data bytes that resolved to a verified path.
    pub resolved_fraction: f64,
    pub last_exit: Exit,
    /// Every strategy's plan (`plan` is the `trace` one).
    pub plans: Vec<Plan>,
    /// Extraction, resolution and scheduling, after the last learning run.
    pub plan_build_ms: f64,
    /// Size of the stored plan blob.
    pub plan_bytes: usize,
    /// The plans ranked by emulation (None: not asked for, or not possible).
    pub ranking: Option<crate::emulate::Ranking>,
}

/// Progress callback: (run index from 1, total runs, the finished run).
pub type Progress<'a> = &'a mut dyn FnMut(u32, u32, &RawRun);

/// warmstart as child subreaper while it learns; a caller that goes on launching programs
/// (`demo`, `bench`) must not adopt their orphans afterwards: a detached prefetcher would
/// stay a zombie under it, never reaped.
struct Subreaper;

impl Subreaper {
    fn set() -> Result<Subreaper, LearnError> {
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| LearnError::Subreaper(e.to_string()))?;
        Ok(Subreaper)
    }
}

impl Drop for Subreaper {
    fn drop(&mut self) {
        // (Each run's tree, adopted orphans included, was reaped by the run itself.)
        let _ = nix::sys::prctl::set_child_subreaper(false);
    }
}

/// Learn `argv` (argv[0] resolved to `exe`) as `key`; stores runs and plan on success.
pub fn learn(
    store: &mut Store,
    key: &AppKey,
    exe: &Path,
    argv: &[OsString],
    opts: &LearnOptions,
    interrupt: &AtomicUsize,
    progress: Progress<'_>,
) -> Result<Learned, LearnError> {
    let _lock = RecordLock::acquire(&opts.trace.run_dir)?;
    let tfs = Tracefs::open()?;
    // Repair what a killed recorder may have left: its instances and changed knobs.
    tfs.remove_stale_instances();
    knobs::recover_journal(&opts.trace.run_dir);
    // Orphans of the launched tree are re-parented to us, so "the tree exited" is knowable.
    let _subreaper = Subreaper::set()?;

    let page = sys::page_size();
    let total = opts.runs.max(1);
    let mut runs = Vec::new();
    let mut last_exit = Exit::Code(0);
    for i in 1..=total {
        let t = trace_launch(&tfs, exe, argv, &opts.trace, interrupt)?;
        let mut run = RawRun::from_trace(&t, page, &SysBlockDevices);
        // A recording on a warm cache (`--no-drop-caches`) learns as the daemon does.
        run.complete_warm(crate::schedule::KEEP_UNUSED_GAP_PAGES, &SysResidency);
        last_exit = t.exit;
        // A launch closed at the timeout did not fail: it was still running.
        let closed = t.ended == crate::trace::EndReason::Timeout;
        if !t.exit.success() && !closed && !opts.allow_failure {
            return Err(LearnError::CommandFailed {
                app: key.key.clone(),
                run: i,
                exit: t.exit,
            });
        }
        progress(i, total, &run);
        runs.push(run);
    }
    let app_id = store.upsert_app(key)?;
    let facts = device_facts(store)?;
    let build_start = std::time::Instant::now();
    let base = base_of(&key.key, &runs);
    let settings = store.app_settings(app_id)?;
    let mut plans = plans_for(&base, &facts, settings.paralfetch);
    let plan = plans
        .iter()
        .find(|p| p.strategy == Strategy::Trace.name())
        .cloned()
        .unwrap_or_else(|| base.skeleton.clone());
    let p = &plan.provenance;
    let unresolved_bytes = p.unresolved_pages * page;
    let resolved_fraction = if p.traced_data_bytes == 0 {
        1.0
    } else {
        1.0 - unresolved_bytes as f64 / p.traced_data_bytes as f64
    };
    let plan_build_ms = build_start.elapsed().as_secs_f64() * 1e3;
    if opts.emulate {
        // The hybrid segments timed by replaying them on the device (seconds of reads, not
        // counted as the plan's build time).
        let mut disk =
            crate::emulate::EmulatedDisk::new(&base.skeleton, facts, crate::prefetch::DEFAULT_JOBS);
        let hybrid = [Strategy::Hybrid];
        let timed = plans_timed(&base, &hybrid, &facts, settings.paralfetch, &mut disk);
        for t in timed {
            if let Some(p) = plans.iter_mut().find(|p| p.strategy == t.strategy) {
                *p = t;
            }
        }
    }
    store.save_learning(app_id, &runs, &mut plans)?;
    let missing = crate::trace::tracefs::Tracefs::open()
        .map(|t| crate::trace::session::missing_access_events(&t))
        .unwrap_or_default();
    let mut settings = store.app_settings(app_id)?;
    if settings.learned_without != missing {
        settings.learned_without = missing;
        store.set_app_settings(app_id, &settings)?;
    }
    let plan = plans
        .iter()
        .find(|p| p.strategy == Strategy::Trace.name())
        .cloned()
        .unwrap_or(plan);
    let ranking = opts
        .emulate
        .then(|| rank_plans(&key.key, &runs, &plans, &facts))
        .flatten();
    if let Some(r) = &ranking {
        store_ranking(store, app_id, r)?;
    }
    let plan_bytes = plan.encode().map(|b| b.len()).unwrap_or(0);
    for r in &runs {
        let (exit_code, signal) = match r.exit() {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        store.add_launch(
            app_id,
            &LaunchRecord {
                at_unix: crate::sys::now_unix(),
                mode: crate::store::mode::RECORD.into(),
                wall_ms: r.duration_ns as f64 / 1e6,
                exit_code,
                signal,
                major_faults: r.usage.major_faults,
                ..LaunchRecord::default()
            },
        )?;
    }
    // A launch that ends by itself can be timed: plain, cold, untraced, for `auto`'s
    // comparison (a window app's learning run ends on idle; it is not timed).
    if runs
        .iter()
        .all(|r| r.ended == crate::trace::EndReason::Exited)
    {
        for _ in 0..opts.baseline_runs {
            let Some(ms) = time_plain(exe, argv, &opts.trace, interrupt)? else {
                break;
            };
            store.add_launch(
                app_id,
                &LaunchRecord {
                    at_unix: crate::sys::now_unix(),
                    mode: crate::store::mode::RUN.into(),
                    wall_ms: ms,
                    strategy: Some(crate::schedule::auto::PLAIN.into()),
                    ..LaunchRecord::default()
                },
            )?;
        }
    }
    Ok(Learned {
        app_id,
        runs,
        plan,
        resolved_fraction,
        last_exit,
        plans,
        plan_build_ms,
        plan_bytes,
        ranking,
    })
}

/// Recorded launches the ranking replays: the most recent ones that read from the disk. Each
/// costs about its launch time per scenario (six scenarios), on the device but not in the
/// page cache.
pub const RANK_LAUNCHES: usize = 2;

/// Rank an app's fresh plans by emulation (`crate::emulate::rank`). None (logged) when no
/// ranking can be made: `auto` then tries strategies in the device class's order, as before
/// there was an emulator.
pub fn rank_plans(
    app: &str,
    runs: &[RawRun],
    plans: &[Plan],
    facts: &DeviceFacts,
) -> Option<crate::emulate::Ranking> {
    let o = crate::emulate::Options {
        jobs: crate::prefetch::DEFAULT_JOBS,
        facts: *facts,
        hold_cap: std::time::Duration::from_millis(crate::prefetch::DEFAULT_HOLD_CAP_MS),
    };
    crate::emulate::rank(runs, plans, &o, RANK_LAUNCHES)
        .map_err(|e| tracing::info!("{app}: plans not ranked by emulation: {e}"))
        .ok()
}

/// Keep an app's emulated ranking for `auto`.
pub fn store_ranking(
    store: &mut Store,
    app_id: i64,
    r: &crate::emulate::Ranking,
) -> Result<(), StoreError> {
    let mut settings = store.app_settings(app_id)?;
    settings.emulated = Some(r.clone());
    store.set_app_settings(app_id, &settings)
}

/// One plain, untraced launch (after a cache drop when `cfg` says so), timed from its exec
/// until its root process exits; the rest of its tree is reaped as the learning runs' is.
/// None when it did not exit within `cfg.timeout` (it is then terminated).
fn time_plain(
    exe: &Path,
    argv: &[OsString],
    cfg: &TraceConfig,
    interrupt: &AtomicUsize,
) -> Result<Option<f64>, LearnError> {
    use std::os::fd::AsFd;
    use std::sync::atomic::Ordering;
    if cfg.drop_caches {
        sys::drop_caches().map_err(|e| TraceError::io(Path::new("/proc/sys/vm/drop_caches"), e))?;
    }
    let child = crate::launch::spawn_gated(exe, argv, cfg.quiet).map_err(TraceError::from)?;
    let root = child.pid();
    let pidfd = sys::pidfd_open(root).map_err(|e| TraceError::io(Path::new("pidfd_open"), e))?;
    let t0 = std::time::Instant::now();
    child.release().map_err(TraceError::from)?;
    let mut ms = None;
    while ms.is_none() {
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        if matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16)), Ok(n) if n > 0)
        {
            ms = Some(t0.elapsed().as_secs_f64() * 1e3);
        } else if let sig @ 1.. = interrupt.load(Ordering::SeqCst) {
            crate::trace::session::kill_tree(root);
            return Err(TraceError::Interrupted(sig as i32).into());
        } else if t0.elapsed() > cfg.timeout {
            crate::trace::session::kill_tree(root);
            return Ok(None);
        }
    }
    // Its orphans are ours (subreaper): wait for them as a learning run does.
    let deadline = std::time::Instant::now() + cfg.timeout;
    loop {
        match sys::wait4(-1, true) {
            Ok(Some(_)) => continue,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Ok(None) => {
                crate::trace::session::kill_tree(root);
                break;
            }
            Err(_) => break,
        }
    }
    Ok(ms)
}

/// The launch-order base of an app's plans, from its cold learning runs (what every run read).
pub fn base_of(app: &str, runs: &[RawRun]) -> Base {
    base_with(app, runs, runs.len(), false)
}

/// The base from runs learned on a warm system (the daemon): metadata is derived, and a page
/// is kept when at least `support` runs read it (the daemon adds the runs of checks that
/// found the plan short to the ones it learned from; `extract_supported`).
pub fn base_of_warm(app: &str, runs: &[RawRun], support: usize) -> Base {
    base_with(app, runs, support, true)
}

fn base_with(app: &str, runs: &[RawRun], support: usize, derive_lookups: bool) -> Base {
    let mut seq = extract_supported(runs, support);
    if runs.iter().any(|r| r.mostly_warm()) {
        seq.fill_gaps(crate::schedule::KEEP_UNUSED_GAP_PAGES);
    }
    let resolver = Resolver::from_runs(runs);
    let dirs = DirBlocks::build(resolver.dirs());
    let first_start = runs
        .iter()
        .map(|r| r.started_unix_ms)
        .filter(|t| *t > 0)
        .min();
    let bo = crate::schedule::BaseOptions {
        volatile_since_ns: first_start.map(|ms| ms as i64 * 1_000_000),
        derive_lookups,
    };
    crate::schedule::build_base_with(
        app,
        &seq,
        &resolver,
        &SysDevicePaths,
        &dirs,
        &mut FiemapDisk::default(),
        Vec::new(),
        &bo,
    )
}

/// Every strategy's plan of `base` on a device with these facts.
pub fn plans_for(
    base: &Base,
    facts: &DeviceFacts,
    paralfetch: Option<ParalfetchSettings>,
) -> Vec<Plan> {
    plans_timed(
        base,
        &Strategy::ALL,
        facts,
        paralfetch,
        &mut crate::device::Model(*facts),
    )
}

/// These strategies' plans of `base`, the hybrid segmentation's fetch times from `timer`.
pub fn plans_timed(
    base: &Base,
    strategies: &[Strategy],
    facts: &DeviceFacts,
    paralfetch: Option<ParalfetchSettings>,
    timer: &mut dyn crate::schedule::strategy::DiskTimer,
) -> Vec<Plan> {
    let queueing = facts.queueing();
    let missing = missing_metadata(&base.skeleton, &crate::schedule::SysDevicePaths);
    let mut cx = StrategyContext {
        queueing,
        paralfetch: paralfetch.unwrap_or_else(|| ParalfetchSettings::defaults(queueing)),
        disk: timer,
        missing: &missing,
    };
    strategies
        .iter()
        .map(|s| plan_for(base, *s, &mut cx))
        .collect()
}

/// Paralfetch's missing metadata of every file in `skeleton`: the block holding its inode and
/// its extent-tree blocks, read from its ext4 block device (opened read-only). A filesystem
/// whose device cannot be read, or that is not ext4, is skipped with the reason.
pub fn missing_metadata(skeleton: &Plan, devs: &dyn DevicePaths) -> MissingMeta {
    use std::collections::BTreeMap;
    let mut by_dev: BTreeMap<sys::Dev, Vec<usize>> = BTreeMap::new();
    for (i, f) in skeleton.files.iter().enumerate() {
        by_dev.entry(f.dev).or_default().push(i);
    }
    let mut devices = Vec::new();
    let mut per_file = Vec::new();
    let mut skipped = Vec::new();
    for (dev, files) in by_dev {
        let Some(path) = devs.path_of(dev) else {
            skipped.push(format!("{dev} has no block device"));
            continue;
        };
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) => {
                skipped.push(format!("cannot read {}: {e}", path.display()));
                continue;
            }
        };
        let fs = match crate::ext4::Ext4::open(&f) {
            Ok(fs) => fs,
            Err(e) => {
                skipped.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let d = devices.len();
        devices.push(crate::plan::BlockDevice {
            path: path.clone(),
            dev,
        });
        for i in files {
            let ino = skeleton.files[i].ino;
            let mut v = Vec::new();
            if let Ok((off, len)) = fs.inode_block(&f, ino) {
                v.push((d, off, len));
            }
            match fs.extent_blocks(&f, ino) {
                Ok(blocks) => {
                    v.extend(blocks.iter().map(|b| (d, b * fs.block_size, fs.block_size)))
                }
                Err(e) => tracing::debug!("{}: extent tree: {e}", skeleton.files[i].path.display()),
            }
            per_file.push((i as u32, v));
        }
    }
    if devices.is_empty() {
        return MissingMeta::Skipped(if skipped.is_empty() {
            "no files".into()
        } else {
            skipped.join("; ")
        });
    }
    MissingMeta::Found {
        devices,
        per_file,
        skipped,
    }
}

/// The facts of the device holding the state directory: measured once, then from the store.
pub fn device_facts(store: &mut Store) -> Result<DeviceFacts, LearnError> {
    let state_dir = crate::store::dir_of(store.path()).to_path_buf();
    let dev = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&state_dir)
            .map(|m| crate::sys::Dev::from_user(m.dev()).to_string())
            .unwrap_or_else(|_| "unknown".into())
    };
    if let Some(f) = store.device_facts(&dev)? {
        return Ok(f);
    }
    tracing::info!(
        "measuring the disk holding {} once (a few seconds; kept in the database)",
        state_dir.display()
    );
    let f = match crate::device::measure(&state_dir) {
        Ok(f) => f,
        // Learning goes on with assumed figures, measured again next time.
        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => {
            tracing::warn!(
                "cannot measure the disk: {e}; assuming an SSD until there is room (free some space beside the database)"
            );
            return Ok(DeviceFacts::unmeasured());
        }
        Err(e) => return Err(LearnError::Device(e.to_string())),
    };
    tracing::info!(
        "measured device {dev}: {:.0} us per 4 KiB read at depth 1, {:.1}x the IOPS at depth 32 ({}), {:.0} MiB/s sequential",
        f.qd1_latency_us,
        f.parallelism(),
        if f.queueing() { "queueing" } else { "not queueing" },
        f.seq_mib_s
    );
    store.put_device_facts(&dev, &f)?;
    Ok(f)
}

/// Dynamic scheduling's re-plan: the `paralfetch` plan rebuilt with new thresholds from the
/// stored launch-order (`fast`) plan. It keeps that plan's file table as recorded, so files
/// changed since recording still count as stale (re-resolving them would hide that), and it
/// needs no filesystem access. Off the launch path: the application has already exited.
pub fn replan_paralfetch(
    store: &mut Store,
    app: &crate::store::AppRow,
    settings: ParalfetchSettings,
    queueing: bool,
) -> Result<(), LearnError> {
    let Some(base) = store.plan_for(app, Strategy::Fast.name())? else {
        return Ok(());
    };
    let items: Vec<crate::schedule::Item> = base
        .entries
        .iter()
        .enumerate()
        .map(|(i, e)| crate::schedule::Item {
            entry: *e,
            t: i as u64,
            disk: None,
        })
        .collect();
    let mut plan = base.clone();
    plan.strategy = Strategy::Paralfetch.name().into();
    plan.hold_entries = 0;
    plan.notes = vec![format!(
        "metadata shift {} KiB, I/O distance {} ({} device); raised by dynamic scheduling",
        settings.shift_bytes / 1024,
        settings.distance,
        if queueing { "queueing" } else { "non-queueing" }
    )];
    // Reads only the block devices, never the planned files (they may have changed).
    let missing = missing_metadata(&base, &crate::schedule::SysDevicePaths);
    let items = crate::schedule::with_missing_metadata(&mut plan, &items, &missing);
    plan.entries = crate::schedule::strategy::paralfetch(&items, settings, plan.page_size as u64)
        .into_iter()
        .map(|i| i.entry)
        .collect();
    store.put_plan(app.id, &plan)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subreaper_lasts_only_while_learning() {
        let was = nix::sys::prctl::get_child_subreaper().unwrap();
        {
            let _s = Subreaper::set().unwrap();
            assert!(nix::sys::prctl::get_child_subreaper().unwrap());
        }
        // A caller that goes on launching (demo, bench) must not adopt their orphans.
        assert!(!nix::sys::prctl::get_child_subreaper().unwrap());
        if was {
            nix::sys::prctl::set_child_subreaper(true).unwrap();
        }
    }
}
