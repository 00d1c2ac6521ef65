//! `warmstart record -- CMD...`

use std::path::Path;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use anyhow::Context;
use serde_json::json;

use super::{code, human_bytes, require_root, RecordArgs};
use crate::app::AppKey;
use crate::launch::resolve_command;
use crate::learn::{learn, LearnOptions, Learned};
use crate::store::Store;
use crate::trace::TraceConfig;

/// Ctrl-C, SIGTERM, SIGHUP and SIGQUIT set this (to the signal number) instead of killing us,
/// so a recording always gets to clean up the kernel state it changed.
pub(super) fn interrupt_flag() -> anyhow::Result<Arc<AtomicUsize>> {
    let flag = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        signal_hook::flag::register_usize(sig, flag.clone(), sig as usize)
            .context("installing signal handlers")?;
    }
    Ok(flag)
}

pub(super) fn key_of(app: &Option<String>, exe: &Path, argv: &[std::ffi::OsString]) -> AppKey {
    match app {
        Some(name) => AppKey::named(name, exe),
        None => AppKey::for_command(exe, argv),
    }
}

/// A strategy name as given on the command line: Ok(None) for auto.
pub(super) fn parse_strategy(s: &str) -> anyhow::Result<Option<crate::schedule::Strategy>> {
    if s == "auto" {
        return Ok(None);
    }
    crate::schedule::Strategy::parse(s)
        .map(Some)
        .ok_or_else(|| {
            super::fail(
                code::USAGE,
                format!("unknown strategy `{s}` (fast, trace, sorted, paralfetch, hybrid, auto)"),
            )
        })
}

pub fn cmd(db: &Path, a: RecordArgs) -> anyhow::Result<i32> {
    let default_strategy = a.strategy.as_deref().map(parse_strategy).transpose()?;
    require_root("record")?;
    let exe = resolve_command(&a.command[0])?;
    let key = key_of(&a.app, &exe, &a.command);
    let mut store = Store::open(db)?;
    let interrupt = interrupt_flag()?;
    let opts = LearnOptions {
        runs: a.runs,
        trace: TraceConfig {
            buffer_kb: a.buffer_kb,
            idle: a.idle,
            timeout: a.timeout,
            drop_caches: !a.no_drop_caches,
            ..TraceConfig::default()
        },
        allow_failure: a.allow_failure,
        baseline_runs: a.baseline_runs,
        emulate: !a.no_emulate,
    };
    let quiet = a.json;
    // Said on a terminal only: a script's stderr keeps its one line per error.
    if !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprintln!(
            "learning `{}`: {} traced launch(es), {}{}",
            key.key,
            a.runs,
            if a.no_drop_caches {
                "the page cache kept"
            } else {
                "the page cache dropped before each"
            },
            if a.baseline_runs > 0 {
                format!(", then up to {} timed plain ones", a.baseline_runs)
            } else {
                String::new()
            }
        );
    }
    let mut progress = |i: u32, n: u32, r: &crate::sequence::RawRun| {
        if !quiet {
            eprintln!(
                "run {i}/{n}: {} read from disk, {} entries, {} files opened, {:.2} s, {:?}, {}",
                human_bytes(r.disk_bytes()),
                r.accesses.len(),
                r.opens.iter().filter(|o| o.by_tree).count(),
                r.duration_ns as f64 / 1e9,
                r.ended,
                r.exit(),
            );
        }
    };
    let learned = learn(
        &mut store,
        &key,
        &exe,
        &a.command,
        &opts,
        &interrupt,
        &mut progress,
    )
    .map_err(|e| match e {
        // Names the app and the run itself.
        e @ crate::learn::LearnError::CommandFailed { .. } => anyhow::Error::new(e),
        e => anyhow::Error::new(e).context(format!("learning `{}`", key.key)),
    })?;
    if let Some(s) = default_strategy {
        store.set_app_strategy(learned.app_id, s.map(|s| s.name()))?;
    }
    print_learned(&key, &learned, a.json);
    Ok(code::OK)
}

pub(super) fn print_learned(key: &AppKey, l: &Learned, json: bool) {
    let s = l.plan.summary();
    let p = &l.plan.provenance;
    if json {
        let v = json!({
            "app": key.key,
            "runs": p.runs,
            "entries": s.entries,
            "bytes": s.bytes,
            "data_bytes": s.data_bytes,
            "files": s.files,
            "metadata_bytes": s.metadata_bytes,
            "lookups": s.lookups,
            "listings": s.listings,
            "unresolved_pages": p.unresolved_pages,
            "unresolved_files": p.unresolved_files,
            "resolved_fraction": l.resolved_fraction,
            "dropped_pages": p.dropped_pages,
            "unused_pages_dropped": p.unused_pages_dropped,
            "run_ms": l.runs.iter().map(|r| r.launch_ms()).collect::<Vec<_>>(),
            "strategies": l.plans.iter().map(|p| json!({"strategy": p.strategy, "entries": p.entries.len(), "hold_entries": p.hold_entries})).collect::<Vec<_>>(),
            "plan_build_ms": l.plan_build_ms,
            "plan_bytes": l.plan_bytes,
            "emulated": l.ranking,
        });
        println!("{v}");
    } else {
        println!(
            "learned {}: {} entries, {} of data in {} files, {} metadata, {} lookups, {} listings, {} inodes by handle",
            key.key,
            s.entries,
            human_bytes(s.data_bytes),
            s.files,
            human_bytes(s.metadata_bytes),
            s.lookups,
            s.listings,
            s.inodes
        );
        println!(
            "resolved {:.2}% of traced data bytes ({} pages in {} files unresolved); dropped {} pages not common to all runs and {} read ahead but never used",
            l.resolved_fraction * 100.0,
            p.unresolved_pages,
            p.unresolved_files,
            p.dropped_pages,
            p.unused_pages_dropped
        );
        if let Some(r) = &l.ranking {
            println!("{}", ranking_line(r));
        }
    }
}

/// The emulated ranking in one line: `ranked by emulation: fast 812 ms, … (cold 1204 ms)`.
pub(super) fn ranking_line(r: &crate::emulate::Ranking) -> String {
    format!(
        "ranked by emulation ({} recorded launch{}): {} (cold {:.0} ms)",
        r.launches,
        if r.launches == 1 { "" } else { "es" },
        r.strategies
            .iter()
            .map(|(s, ms)| format!("{s} {ms:.0} ms"))
            .collect::<Vec<_>>()
            .join(", "),
        r.cold_ms
    )
}
