//! `warmstart plan list | show | floor | compare | rm`

use std::path::Path;

use serde_json::json;

use super::{code, fail, fmt_unix, human_bytes, PlanCommand};
use crate::plan::{Entry, Plan};
use crate::prefetch::FileState;
use crate::store::Store;

pub(super) fn open_existing(db: &Path) -> anyhow::Result<Store> {
    require_db(db)?;
    Ok(Store::open(db)?)
}

fn require_db(db: &Path) -> anyhow::Result<()> {
    if !db.exists() {
        return Err(fail(
            code::NOT_FOUND,
            format!(
                "no database at {} yet (learn an app with `warmstart record`)",
                db.display()
            ),
        ));
    }
    Ok(())
}

/// `open_existing` for commands that only read (list, show): they work for a user who may
/// only read the database, and on a read-only filesystem.
pub(super) fn open_reading(db: &Path) -> anyhow::Result<Store> {
    require_db(db)?;
    Ok(Store::open_read_only(db)?)
}

/// Files that are no longer what the plan recorded: (stale, missing).
fn staleness(plan: &Plan) -> (usize, usize) {
    let (mut stale, mut missing) = (0, 0);
    for f in &plan.files {
        match crate::prefetch::file_state(f) {
            FileState::Missing => missing += 1,
            FileState::Stale => stale += 1,
            FileState::Unchanged => {}
        }
    }
    (stale, missing)
}

pub fn cmd(db: &Path, c: PlanCommand) -> anyhow::Result<i32> {
    match c {
        PlanCommand::List { json } => {
            let store = open_reading(db)?;
            let rows = store.list()?;
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else if rows.is_empty() {
                println!("no apps learned yet");
            } else {
                println!(
                    "{:>8}  {:>10}  {:>4}  {:>8}  app",
                    "entries", "bytes", "runs", "history"
                );
                for r in rows {
                    println!(
                        "{:>8}  {:>10}  {:>4}  {:>8}  {}",
                        r.entries.map_or("-".into(), |e| e.to_string()),
                        r.bytes.map_or("-".into(), |b| human_bytes(b as u64)),
                        r.runs,
                        r.launches,
                        r.app
                    );
                }
            }
        }
        PlanCommand::Show {
            app,
            json,
            entries,
            strategy,
        } => {
            let store = open_reading(db)?;
            let row = store.find_app(&app)?;
            // Which plan `run` would use now, and why.
            let asked = strategy.as_deref().or(row.strategy.as_deref());
            let (chosen, why) = match asked
                .map(super::record::parse_strategy)
                .transpose()?
                .flatten()
            {
                Some(st) if strategy.is_some() => (Some(st), "asked for".to_string()),
                Some(st) => (
                    Some(st),
                    "the app's default (record --strategy)".to_string(),
                ),
                None => auto_choice(&store, &row, db)?,
            };
            // A plain launch (auto's `none`) shows the launch-order plan it does not use.
            let name = crate::schedule::auto::name_of(chosen);
            let plan = match store.plan_for(&row, name)? {
                Some(p) => p,
                None => store.plan(&row)?.ok_or_else(|| {
                    fail(
                        code::NOT_FOUND,
                        format!("`{}` has no plan (record it first)", row.key),
                    )
                })?,
            };
            let strategies = store.plan_strategies(row.id)?;
            let settings = store.app_settings(row.id)?;
            let runs: Vec<(i64, i64)> = store
                .runs(row.id)?
                .into_iter()
                .map(|(id, at, _)| (id, at))
                .collect();
            let how = How {
                learned_without: &settings.learned_without,
                chosen: name,
                why: &why,
                strategies: &strategies,
                paralfetch: settings.paralfetch,
                raises: settings.paralfetch_raises,
                emulated: settings.emulated.as_ref(),
            };
            show(&plan, &row.key, &runs, &how, json, entries);
        }
        PlanCommand::Floor {
            app,
            json,
            strategy,
        } => {
            let store = open_existing(db)?;
            let row = store.find_app(&app)?;
            let asked = strategy.as_deref().or(row.strategy.as_deref());
            let chosen = match asked
                .map(super::record::parse_strategy)
                .transpose()?
                .flatten()
            {
                Some(st) => Some(st),
                None => auto_choice(&store, &row, db)?.0,
            };
            let plan = match store.plan_for(&row, crate::schedule::auto::name_of(chosen))? {
                Some(p) => p,
                None => store.plan(&row)?.ok_or_else(|| {
                    fail(
                        code::NOT_FOUND,
                        format!("`{}` has no plan (record it first)", row.key),
                    )
                })?,
            };
            drop(store);
            let f = crate::device::floor(&plan).map_err(|e| {
                fail(
                    code::ERROR,
                    format!("measuring the floor of {}'s plan: {e}", row.key),
                )
            })?;
            if json {
                println!("{}", json!({"app": row.key, "floor": f}));
            } else {
                println!(
                    "{}: floor {:.1} ms = data {:.1} ms ({} in {} requests at depth {}) + metadata {:.1} ms ({} blocks) + chain {:.1} ms ({} dependent reads at {:.0} us)",
                    row.key,
                    f.floor_ms,
                    f.data_ms,
                    human_bytes(f.data_bytes),
                    f.requests,
                    f.depth,
                    f.metadata_ms,
                    f.metadata_blocks,
                    f.chain_ms,
                    f.chain_reads,
                    f.qd1_latency_us
                );
                let d: Vec<String> = f
                    .by_depth
                    .iter()
                    .map(|(d, ms)| format!("depth {d}: {ms:.1} ms"))
                    .collect();
                println!("  data pass {}", d.join(", "));
                if f.files_skipped > 0 {
                    println!(
                        "  {} planned files changed since learning, left out",
                        f.files_skipped
                    );
                }
            }
        }
        PlanCommand::Compare {
            app,
            other_db,
            other_app,
            strategy,
            json,
        } => {
            if super::record::parse_strategy(&strategy)?.is_none() {
                return Err(fail(
                    code::USAGE,
                    "compare one strategy's plans, not auto's",
                ));
            }
            let load = |db: &Path, app: &str| -> anyhow::Result<(String, Plan)> {
                let store = open_existing(db)?;
                let row = store.find_app(app)?;
                let plan = store.plan_for(&row, &strategy)?.ok_or_else(|| {
                    fail(
                        code::NOT_FOUND,
                        format!(
                            "`{}` has no {strategy} plan in {} (learn it first)",
                            row.key,
                            db.display()
                        ),
                    )
                })?;
                Ok((row.key, plan))
            };
            let (key, a) = load(db, &app)?;
            let (other_key, b) = load(&other_db, other_app.as_deref().unwrap_or(&app))?;
            let o = a.overlap(&b);
            let lacks = a.lacks_of(&b, 10);
            let extra = b.lacks_of(&a, 10);
            let files = |v: &[(std::path::PathBuf, u64)]| -> Vec<serde_json::Value> {
                v.iter()
                    .map(|(p, b)| json!({"path": p, "bytes": b}))
                    .collect()
            };
            if json {
                println!(
                    "{}",
                    json!({"app": key, "other_app": other_key, "other_db": other_db,
                           "strategy": strategy, "overlap": o,
                           "held_by_other": o.held_by_other(),
                           "holds_of_other": o.holds_of_other(),
                           "lacks": files(&lacks), "only_here": files(&extra)})
                );
            } else {
                println!(
                    "{key}: {} in {} files; {}: {} in {} files",
                    human_bytes(o.bytes),
                    o.files,
                    other_db.display(),
                    human_bytes(o.other_bytes),
                    o.other_files
                );
                println!(
                    "  in common {} in {} files: {:.1}% of this plan, {:.1}% of the other",
                    human_bytes(o.common_bytes),
                    o.common_files,
                    100.0 * o.held_by_other(),
                    100.0 * o.holds_of_other()
                );
                for (what, v) in [("only in the other", &lacks), ("only in this one", &extra)] {
                    if !v.is_empty() {
                        println!("  {what}, largest first:");
                    }
                    for (p, b) in v.iter() {
                        println!("    {:>10}  {}", human_bytes(*b), p.display());
                    }
                }
            }
        }
        PlanCommand::Rm { app } => {
            let mut store = open_existing(db)?;
            let row = store.find_app(&app)?;
            store.remove_app(row.id)?;
            println!("removed {}", row.key);
        }
    }
    Ok(code::OK)
}

/// How `run` picks a plan for this app, for `plan show`.
struct How<'a> {
    /// The access events the kernel lacked when the app was learned.
    learned_without: &'a [String],
    chosen: &'a str,
    why: &'a str,
    strategies: &'a [String],
    paralfetch: Option<crate::schedule::ParalfetchSettings>,
    raises: u32,
    /// The plans ranked by emulation after learning.
    emulated: Option<&'a crate::emulate::Ranking>,
}

fn auto_choice(
    store: &Store,
    row: &crate::store::AppRow,
    db: &Path,
) -> anyhow::Result<(crate::schedule::auto::Choice, String)> {
    use std::os::unix::fs::MetadataExt;
    let dev = db
        .parent()
        .and_then(|d| std::fs::metadata(d).ok())
        .map(|m| crate::sys::Dev::from_user(m.dev()).to_string())
        .unwrap_or_default();
    let queueing = store
        .device_facts(&dev)?
        .map(|f| f.queueing())
        .unwrap_or(true);
    // The daemon chooses by its own launches: shown when the app's last launch was its.
    let by_daemon = store
        .launches(row.id, 1)?
        .first()
        .is_some_and(|l| l.mode == crate::store::mode::DAEMON);
    if by_daemon {
        let (s, why) = crate::schedule::auto::choose_for_daemon(store, row.id, queueing)?;
        return Ok((s, format!("auto, in the daemon: {why}")));
    }
    let (s, why) = crate::schedule::auto::choose_stored(store, row.id, queueing)?;
    Ok((s, format!("auto: {why}")))
}

fn show(plan: &Plan, key: &str, runs: &[(i64, i64)], how: &How<'_>, json: bool, n_entries: usize) {
    let s = plan.summary();
    let p = &plan.provenance;
    let (stale, missing) = staleness(plan);
    let traced = p.traced_data_bytes.max(1) as f64;
    let unresolved_frac = (p.unresolved_pages * plan.page_size as u64) as f64 / traced;
    if json {
        let v = json!({
            "app": key,
            "strategy": plan.strategy,
            "created_unix": plan.created_unix,
            "entries": s.entries,
            "bytes": s.bytes,
            "data_bytes": s.data_bytes,
            "files": s.files,
            "directories": s.directories,
            "metadata_bytes": s.metadata_bytes,
            "lookups": s.lookups,
            "listings": s.listings,
            "inodes": s.inodes,
            "unresolved_pages": p.unresolved_pages,
            "unresolved_files": p.unresolved_files,
            "traced_data_bytes": p.traced_data_bytes,
            "dropped_pages": p.dropped_pages,
            "unused_pages_dropped": p.unused_pages_dropped,
            "stale_files": stale,
            "missing_files": missing,
            "devices": plan.devices.iter().map(|d| d.path.display().to_string()).collect::<Vec<_>>(),
            "strategy_in_use": how.chosen,
            "why": how.why,
            "strategies": how.strategies,
            "emulated": how.emulated,
            "hold_entries": plan.hold_entries,
            "segments": plan.segments,
            "t_exp_ms": plan.t_exp_ms,
            "notes": plan.notes,
            "paralfetch_settings": how.paralfetch,
            "paralfetch_raises": how.raises,
            "learned_from": if how.learned_without.is_empty() { "accesses" } else { "inserts" },
            "learned_without": how.learned_without,
            "runs": runs.iter().map(|(id, at)| json!({"id": id, "recorded_unix": at})).collect::<Vec<_>>(),
        });
        println!("{v}");
        return;
    }
    println!("app:          {key}");
    println!("strategy:     {} ({})", plan.strategy, how.why);
    println!("strategies:   {}", how.strategies.join(", "));
    if let Some(r) = how.emulated {
        println!("emulated:     {}", super::record::ranking_line(r));
    }
    if plan.hold_entries > 0 {
        println!(
            "hold:         the application waits for the first {} entries",
            plan.hold_entries
        );
    }
    if !plan.segments.is_empty() {
        println!(
            "segments:     {} ({} entries in fetch order); expected launch time t_exp {:.0} ms",
            plan.segments.len(),
            plan.segments
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(" + "),
            plan.t_exp_ms.unwrap_or(0.0)
        );
    }
    if let Some(p) = how.paralfetch {
        println!(
            "paralfetch:   shift {} KiB, I/O distance {} (raised {} times by dynamic scheduling)",
            p.shift_bytes / 1024,
            p.distance,
            how.raises
        );
    }
    for n in &plan.notes {
        println!("note:         {n}");
    }
    if !how.learned_without.is_empty() {
        println!(
            "learned from: the pages the launches read from disk only (the kernel lacks {}): \
             readahead the app never used is planned too, pages it found cached are not, and \
             the order is the order of the reads",
            how.learned_without.join(", ")
        );
    }
    println!("created:      {}", fmt_unix(plan.created_unix as i64));
    println!(
        "entries:      {} ({} lookups, {} directory listings, {} inodes by handle)",
        s.entries, s.lookups, s.listings, s.inodes
    );
    println!(
        "bytes:        {} ({} data, {} metadata)",
        human_bytes(s.bytes),
        human_bytes(s.data_bytes),
        human_bytes(s.metadata_bytes)
    );
    println!(
        "files:        {} (+ {} directories)",
        s.files, s.directories
    );
    println!(
        "unresolved:   {} pages in {} files ({:.2}% of traced data)",
        p.unresolved_pages,
        p.unresolved_files,
        unresolved_frac * 100.0
    );
    println!(
        "trimmed:      {} pages not read by every run, {} read ahead but never used",
        p.dropped_pages, p.unused_pages_dropped
    );
    println!("stale files:  {stale} changed, {missing} missing since recording");
    println!(
        "runs:         {}",
        runs.iter()
            .map(|(id, at)| format!("#{id} ({})", fmt_unix(*at)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if n_entries > 0 {
        println!("first entries:");
        for (i, e) in plan.entries.iter().take(n_entries).enumerate() {
            let line = match *e {
                Entry::Data { file, offset, len } => format!(
                    "data     {} @{} +{}",
                    plan.files[file as usize].path.display(),
                    offset,
                    human_bytes(len)
                ),
                Entry::Meta {
                    device,
                    offset,
                    len,
                } => format!(
                    "metadata {} @{} +{}",
                    plan.devices[device as usize].path.display(),
                    offset,
                    human_bytes(len)
                ),
                Entry::Lookup { file } => {
                    format!("lookup   {}", plan.files[file as usize].path.display())
                }
                Entry::ListDir { file } => {
                    format!("listdir  {}", plan.files[file as usize].path.display())
                }
                Entry::Inode { file, ino } => format!(
                    "inode    {ino} on the filesystem of {}",
                    plan.files[file as usize].path.display()
                ),
            };
            println!("  {:>5}  {line}", i + 1);
        }
    }
}
