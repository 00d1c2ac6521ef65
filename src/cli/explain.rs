//! `warmstart explain -- CMD...` (and `run --explain`): where a launch's time goes, cold and
//! with its plan prefetched, side by side.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::record::{interrupt_flag, key_of, parse_strategy};
use super::{code, require_root, ExplainArgs};
use crate::explain::{self, ksyms::Ksyms, Explained};
use crate::launch::resolve_command;
use crate::plan::Plan;
use crate::store::Store;
use crate::trace::tracefs::Tracefs;

/// The app's plan the next `run` would use (or `strategy`'s), if it has one.
fn plan_of(db: &Path, key: &str, strategy: Option<&str>) -> anyhow::Result<Option<Plan>> {
    if !db.exists() {
        return Ok(None);
    }
    let store = Store::open(db)?;
    let Some(app) = store.app_by_key(key)? else {
        return Ok(None);
    };
    let wanted = strategy
        .or(app.strategy.as_deref())
        .map(parse_strategy)
        .transpose()?
        .flatten();
    let strategy = match wanted {
        Some(s) => Some(s),
        None => crate::schedule::auto::choose_stored_settled(&store, app.id, true)?.0,
    };
    // A plain launch (auto's `none`): the launch-order plan, to attribute against.
    Ok(
        match store.plan_for(&app, crate::schedule::auto::name_of(strategy))? {
            Some(p) => Some(p),
            None => store.plan(&app)?,
        },
    )
}

/// `warmstart run --traced ... -- CMD` as the launcher users run, for the prefetched launch
/// (recorded as traced, so `auto` does not compare its time): the launcher and its argv.
fn traced_run(
    db: &Path,
    strategy: Option<&str>,
    app: Option<&str>,
    command: &[OsString],
) -> anyhow::Result<(PathBuf, Vec<OsString>)> {
    let front = super::launcher_exe()?;
    let mut v: Vec<OsString> = vec![
        front.as_os_str().into(),
        "--db".into(),
        db.into(),
        "run".into(),
        "--traced".into(),
    ];
    if let Some(s) = strategy {
        v.extend(["--strategy".into(), s.into()]);
    }
    if let Some(app) = app {
        v.extend(["--app".into(), app.into()]);
    }
    v.push("--".into());
    v.extend(command.iter().cloned());
    Ok((front, v))
}

pub fn cmd(db: &Path, a: ExplainArgs) -> anyhow::Result<i32> {
    if let Some(s) = &a.strategy {
        parse_strategy(s)?;
    }
    require_root("explain")?;
    let exe = resolve_command(&a.command[0])?;
    let key = key_of(&a.app, &exe, &a.command);
    let plan = plan_of(db, &key.key, a.strategy.as_deref())
        .with_context(|| format!("reading the plan of {} from {}", key.key, db.display()))?;
    let tfs = Tracefs::open()?;
    tfs.remove_stale_instances();
    let interrupt = interrupt_flag()?;
    let syms = Ksyms::load();
    if syms.is_empty() {
        tracing::warn!("cannot read kernel symbols (/proc/kallsyms); waits are named coarsely");
    }
    let timeout = a.timeout;
    let mut launches: Vec<Explained> = Vec::new();
    if !a.no_cold {
        eprintln!("explain: tracing a cold launch of {}", key.key);
        launches.push(explain::trace_and_attribute(
            &tfs,
            &exe,
            &a.command,
            plan.as_ref(),
            false,
            true,
            timeout,
            &interrupt,
            &syms,
        )?);
        // The same launch again, everything cached: what the other two are measured against.
        eprintln!("explain: tracing a warm launch");
        launches.push(explain::trace_and_attribute(
            &tfs,
            &exe,
            &a.command,
            plan.as_ref(),
            false,
            false,
            timeout,
            &interrupt,
            &syms,
        )?);
    }
    match &plan {
        Some(_) => {
            eprintln!("explain: tracing a cold launch with warmstart run");
            let (front, argv) =
                traced_run(db, a.strategy.as_deref(), a.app.as_deref(), &a.command)?;
            launches.push(explain::trace_and_attribute(
                &tfs,
                &front,
                &argv,
                plan.as_ref(),
                true,
                true,
                timeout,
                &interrupt,
                &syms,
            )?);
        }
        None => eprintln!(
            "explain: {} has no plan in {}; only the cold launch is traced (learn it with `warmstart record`)",
            key.key,
            db.display()
        ),
    }
    print(&key.key, &launches, a.json)?;
    Ok(code::OK)
}

fn print(app: &str, launches: &[Explained], json: bool) -> anyhow::Result<()> {
    if json {
        let slices: Vec<_> = launches
            .iter()
            .map(|l| explain::slices(&l.attribution, 10))
            .collect();
        println!(
            "{}",
            serde_json::json!({"app": app, "launches": launches, "slices": slices})
        );
    } else {
        println!("app: {app}\n");
        print!("{}", explain::render(launches));
    }
    Ok(())
}

/// `run --explain`: one launch through `warmstart run`, the cache as it is, traced and
/// attributed; the application's exit status passes through.
pub fn run_explained(db: &Path, a: &super::RunArgs) -> anyhow::Result<i32> {
    require_root("run --explain")?;
    let exe = resolve_command(&a.command[0])?;
    let key = key_of(&a.app, &exe, &a.command);
    let plan = plan_of(db, &key.key, a.strategy.as_deref())?;
    let tfs = Tracefs::open()?;
    tfs.remove_stale_instances();
    let interrupt = interrupt_flag()?;
    let syms = Ksyms::load();
    let (front, argv) = traced_run(db, a.strategy.as_deref(), a.app.as_deref(), &a.command)?;
    let e = explain::trace_and_attribute(
        &tfs,
        &front,
        &argv,
        plan.as_ref(),
        plan.is_some(),
        false,
        Duration::from_secs(3600),
        &interrupt,
        &syms,
    )?;
    print(&key.key, std::slice::from_ref(&e), a.json)?;
    crate::launch::exit_like(e.exit)
}
