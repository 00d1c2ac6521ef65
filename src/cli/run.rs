//! `warmstart run -- CMD...`: prefetch the app's plan concurrently with its launch. Nothing
//! here may stop the command from running: a missing database, a corrupt plan or a refused
//! device only turn prefetching off, with a warning.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde_json::json;

use super::record::key_of;
use super::{human_bytes, RunArgs};
use crate::launch::{exit_like, resolve_command, Forwarder};
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

pub fn cmd(db: &Path, a: RunArgs) -> anyhow::Result<i32> {
    let t_start = Instant::now();
    let exe = resolve_command(&a.command[0])?;
    let key = key_of(&a.app, &exe, &a.command);
    tracing::debug!("resolved after {:?}", t_start.elapsed());
    let loaded = match load_plan(db, &key.key) {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!("{e:#}; running without prefetch");
            None
        }
    };
    tracing::debug!("plan loaded after {:?}", t_start.elapsed());
    let t0 = Instant::now();
    let (mut store, running) = match loaded {
        Some((store, app_id, plan)) => {
            let opts = PrefetchOptions {
                jobs: a.jobs as usize,
                mem_cap: a.mem_cap_mb.map(|m| m * 1024 * 1024),
            };
            let r = Running::start(Arc::new(plan), opts).context("starting the prefetch thread")?;
            (Some((store, app_id)), Some(r))
        }
        None => (None, None),
    };
    let child = std::process::Command::new(&exe)
        .arg0(&a.command[0])
        .args(&a.command[1..])
        .spawn()
        .map_err(|source| crate::launch::LaunchError::Exec {
            path: exe.display().to_string(),
            source,
        })?;
    let pid = child.id() as i32;
    tracing::debug!("spawned after {:?}", t_start.elapsed());
    let forwarder = Forwarder::start(pid).context("installing signal forwarding")?;
    let (_, exit, usage) = sys::wait4(pid, false)
        .context("waiting for the command")?
        .ok_or_else(|| anyhow::anyhow!("wait4 returned no status"))?;
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3;
    let t_exit = Instant::now();
    drop(forwarder);
    tracing::debug!("forwarder stopped after {:?}", t_exit.elapsed());
    // The launch is over: stop issuing requests that can no longer help it.
    let report = running.map(Running::stop);
    tracing::debug!("prefetch stopped after {:?}", t_exit.elapsed());
    if let Some((store, app_id)) = store.as_mut() {
        let (exit_code, signal) = match exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        let rec = LaunchRecord {
            at_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
            mode: "run".into(),
            wall_ms,
            exit_code,
            signal,
            major_faults: usage.major_faults,
            prefetched_bytes: report
                .as_ref()
                .map_or(0, |r| r.data_bytes + r.metadata_bytes),
            stale_files: report
                .as_ref()
                .map_or(0, |r| r.files_stale + r.files_missing),
            prefetch_ms: report.as_ref().map_or(0.0, |r| r.elapsed_ms),
        };
        if let Err(e) = store.add_launch(*app_id, &rec) {
            tracing::warn!("could not record the launch in the history: {e}");
        }
    }
    drop(store);
    tracing::debug!("history written after {:?}", t_exit.elapsed());
    if a.stats {
        print_stats(
            &key.key,
            report.as_ref(),
            wall_ms,
            usage.major_faults,
            a.json,
        );
    }
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
