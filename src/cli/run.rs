//! `warmstart run -- CMD...`: prefetch the app's plan concurrently with its launch.
//!
//! By default warmstart *becomes* the application, as `nice` or `env` do: it loads the plan,
//! starts a detached prefetcher (double-forked, so the application never sees a stray child),
//! then execs the command in its own process. Exit status, signals, process tree and terminal
//! are the application's own, and no wrapper sits on the launch's critical path. With
//! `--stats` it stays a wrapper instead (fork, wait, forward signals), because the report is
//! printed after the application exits.
//!
//! Nothing here may stop the command from running: a missing database, a corrupt plan or a
//! refused device only turn prefetching off, with a warning.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::unistd::{fork, ForkResult};
use serde_json::json;

use super::record::key_of;
use super::{human_bytes, RunArgs};
use crate::launch::{exit_like, resolve_command, Forwarder, LaunchError};
use crate::plan::Plan;
use crate::prefetch::{PrefetchOptions, PrefetchReport, Running};
use crate::store::{LaunchRecord, Store};
use crate::sys::{self, Exit};

fn load_plan(db: &Path, key: &str) -> anyhow::Result<Option<(Store, i64, Plan)>> {
    if !db.exists() {
        return Ok(None);
    }
    let store = Store::open(db)?;
    let Some(app) = store.app_by_key(key)? else {
        return Ok(None);
    };
    match store.plan(&app)? {
        Some(plan) => Ok(Some((store, app.id, plan))),
        None => Ok(None),
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

pub fn cmd(db: &Path, a: RunArgs) -> anyhow::Result<i32> {
    let exe = resolve_command(&a.command[0])?;
    let key = key_of(&a.app, &exe, &a.command);
    let loaded = match load_plan(db, &key.key) {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!("{e:#}; running without prefetch");
            None
        }
    };
    let opts = PrefetchOptions {
        jobs: a.jobs as usize,
        mem_cap: a.mem_cap_mb.map(|m| m * 1024 * 1024),
        meta_jobs: a.meta_jobs as usize,
    };
    match loaded {
        Some((store, app_id, plan)) if a.stats => {
            wrapped(store, app_id, plan, opts, &exe, &a, &key.key)
        }
        Some((store, app_id, plan)) => {
            // No connection may cross the fork; the prefetcher opens its own.
            drop(store);
            detach_prefetcher(db.to_path_buf(), app_id, plan, opts);
            exec_app(&exe, &a.command)
        }
        None if a.stats => {
            let started = Instant::now();
            let (exit, usage) = spawn_and_wait(&exe, &a.command)?;
            print_stats(
                &key.key,
                None,
                started.elapsed().as_secs_f64() * 1e3,
                usage.major_faults,
                a.json,
            );
            exit_like(exit)
        }
        None => exec_app(&exe, &a.command),
    }
}

/// Replace this process with the application. Returns only on failure.
fn exec_app(exe: &Path, argv: &[OsString]) -> anyhow::Result<i32> {
    let source = std::process::Command::new(exe)
        .arg0(&argv[0])
        .args(&argv[1..])
        .exec();
    Err(LaunchError::Exec {
        path: exe.display().to_string(),
        source,
    }
    .into())
}

/// Start the prefetcher as a grandchild that outlives nobody: it replays the plan until done
/// or until this process (about to become the application) exits, then records the launch.
fn detach_prefetcher(db: PathBuf, app_id: i64, plan: Plan, opts: PrefetchOptions) {
    let app_pid = std::process::id() as i32;
    // SAFETY: warmstart has started no threads yet (checked below in debug builds), so the
    // child may run ordinary code. The intermediate child only forks again and _exits.
    debug_assert_eq!(
        std::fs::read_dir("/proc/self/task")
            .map(|d| d.count())
            .unwrap_or(1),
        1,
        "fork must happen before any thread starts"
    );
    match unsafe { fork() } {
        Ok(ForkResult::Parent { child }) => {
            let _ = nix::sys::wait::waitpid(child, None);
        }
        Ok(ForkResult::Child) => {
            // SAFETY: as above; this process is single-threaded.
            if let Ok(ForkResult::Child) = unsafe { fork() } {
                let code = prefetcher_main(&db, app_id, plan, opts, app_pid);
                std::process::exit(code);
            }
            // SAFETY: _exit ends the intermediate child without running the parent's atexit
            // handlers or flushing its copied buffers twice.
            unsafe { libc::_exit(0) }
        }
        Err(e) => tracing::warn!("cannot start the prefetcher ({e}); launching without it"),
    }
}

/// The detached prefetcher: run the plan, stop when the application exits, record.
fn prefetcher_main(db: &Path, app_id: i64, plan: Plan, opts: PrefetchOptions, app_pid: i32) -> i32 {
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
    let Ok(app) = sys::pidfd_open(app_pid) else {
        return 0; // the application is already gone
    };
    let started = Instant::now();
    let running = match Running::start(Arc::new(plan), opts) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("cannot start prefetch threads: {e}");
            return 1;
        }
    };
    let mut app_exited = false;
    while !running.is_finished() {
        let mut fds = [PollFd::new(app.as_fd(), PollFlags::POLLIN)];
        if let Ok(n) = poll(&mut fds, PollTimeout::from(20u16)) {
            if n > 0 {
                app_exited = true;
                break;
            }
        }
    }
    let report = running.stop();
    let rec = LaunchRecord {
        at_unix: now_unix(),
        mode: "run".into(),
        // The launch's duration is known only if it ended while we watched.
        wall_ms: if app_exited {
            started.elapsed().as_secs_f64() * 1e3
        } else {
            0.0
        },
        prefetched_bytes: report.data_bytes + report.metadata_bytes,
        stale_files: report.files_stale + report.files_missing,
        prefetch_ms: report.elapsed_ms,
        ..LaunchRecord::default()
    };
    match Store::open(db) {
        Ok(mut s) => {
            if let Err(e) = s.add_launch(app_id, &rec) {
                tracing::warn!("could not record the launch in the history: {e}");
            }
        }
        Err(e) => tracing::warn!("could not record the launch in the history: {e}"),
    }
    0
}

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
    mut store: Store,
    app_id: i64,
    plan: Plan,
    opts: PrefetchOptions,
    exe: &Path,
    a: &RunArgs,
    key: &str,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let running = Running::start(Arc::new(plan), opts).context("starting the prefetch thread")?;
    let (exit, usage) = spawn_and_wait(exe, &a.command)?;
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    // The launch is over: stop issuing requests that can no longer help it.
    let report = running.stop();
    let (exit_code, signal) = match exit {
        Exit::Code(c) => (Some(c), None),
        Exit::Signal(s) => (None, Some(s)),
    };
    let rec = LaunchRecord {
        at_unix: now_unix(),
        mode: "run".into(),
        wall_ms,
        exit_code,
        signal,
        major_faults: usage.major_faults,
        prefetched_bytes: report.data_bytes + report.metadata_bytes,
        stale_files: report.files_stale + report.files_missing,
        prefetch_ms: report.elapsed_ms,
    };
    if let Err(e) = store.add_launch(app_id, &rec) {
        tracing::warn!("could not record the launch in the history: {e}");
    }
    drop(store);
    print_stats(key, Some(&report), wall_ms, usage.major_faults, a.json);
    exit_like(exit)
}

fn print_stats(app: &str, r: Option<&PrefetchReport>, wall_ms: f64, majflt: u64, json: bool) {
    if json {
        let v = json!({
            "app": app,
            "plan": r.is_some(),
            "wall_ms": wall_ms,
            "major_faults": majflt,
            "prefetch": r,
        });
        eprintln!("{v}");
        return;
    }
    let Some(r) = r else {
        eprintln!("warmstart: no plan for {app}; launched without prefetch ({wall_ms:.1} ms, {majflt} major faults)");
        return;
    };
    eprintln!("warmstart: {app}");
    eprintln!("  launch:     {wall_ms:.1} ms, {majflt} major faults");
    eprintln!(
        "  prefetched: {} data + {} metadata in {} requests, {} lookups, {} listings ({} of {} entries{})",
        human_bytes(r.data_bytes),
        human_bytes(r.metadata_bytes),
        r.requests,
        r.lookups,
        r.listings,
        r.entries_done,
        r.entries,
        if r.stopped_early { ", stopped when the app exited" } else { "" }
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
        "  timing:     first request after {:.0} us, all issued after {:.1} ms ({} workers, metadata via {})",
        r.first_request_us,
        r.elapsed_ms,
        r.jobs,
        match r.metadata_mode {
            crate::prefetch::MetadataMode::BlockDevice => "block device",
            crate::prefetch::MetadataMode::Filesystem => "filesystem lookups",
        }
    );
}
