//! Automatic mode on the command line: `daemon`, `status`, `app ...`, `install`.

use std::path::Path;

use anyhow::Context;
use serde_json::json;

use super::{code, human_bytes, require_root, AppCommand, DaemonArgs};
use crate::daemon::{config, DaemonOptions, Lifecycle, Phase, PidFile};
use crate::store::{AppRow, Store};

pub fn daemon(db: &Path, a: DaemonArgs) -> anyhow::Result<i32> {
    if a.print_config {
        print!("{}", config::DEFAULT_TOML);
        return Ok(code::OK);
    }
    require_root("the daemon")?;
    if a.measure_detection {
        return measure_detection(a.launches as usize, a.json);
    }
    crate::daemon::run(&DaemonOptions {
        db: db.to_path_buf(),
        config_path: a.config,
        run_dir: a.run_dir,
    })?;
    Ok(code::OK)
}

fn measure_detection(launches: usize, json_out: bool) -> anyhow::Result<i32> {
    use crate::daemon::detect;
    let exe = ["/usr/bin/true", "/bin/true"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .context("no /usr/bin/true to launch; install coreutils")?;
    let res = detect::measure(exe, launches)
        .with_context(|| format!("measuring exec detection with {}", exe.display()))?;
    if json_out {
        let v: Vec<_> = res
            .iter()
            .map(|d| {
                let (median, p90) = detect::summary(d);
                json!({"mechanism": d.mechanism, "median_us": median, "p90_us": p90,
                       "missed": d.missed, "spawn_median_us": d.spawn_us,
                       "samples_us": d.samples_us})
            })
            .collect();
        println!(
            "{}",
            json!({"launched": exe, "launches": launches, "mechanisms": v})
        );
        return Ok(code::OK);
    }
    println!(
        "spawn of {} to notification, {launches} launches each (µs):",
        exe.display()
    );
    println!(
        "{:<24} {:>9} {:>9} {:>7} {:>12}",
        "mechanism", "median", "p90", "missed", "spawn itself"
    );
    for d in &res {
        let (median, p90) = detect::summary(d);
        println!(
            "{:<24} {median:>9.0} {p90:>9.0} {:>7} {:>12.0}",
            d.mechanism, d.missed, d.spawn_us
        );
    }
    Ok(code::OK)
}

fn lifecycle(store: &Store, app: &AppRow) -> Lifecycle {
    store
        .app_settings(app.id)
        .ok()
        .and_then(|s| s.lifecycle)
        .unwrap_or_default()
}

fn phase_name(app: &AppRow, lc: &Lifecycle, has_plan: bool) -> &'static str {
    if !app.enabled {
        return "disabled";
    }
    match lc.phase {
        Phase::Prefetching => "prefetching",
        Phase::TooSmall => "too-small",
        // Sent back to learning: prefetched with its old plan meanwhile.
        Phase::Learning if has_plan && lc.relearn_reason.is_some() => "relearning",
        Phase::Learning if has_plan => "recorded",
        Phase::Learning => "learning",
    }
}

pub fn status(db: &Path, json_out: bool, run_dir: &Path) -> anyhow::Result<i32> {
    let running = PidFile::running(run_dir);
    let mut apps = Vec::new();
    let mut bursts = json!({"kept": 0, "active": 0, "hits": 0, "bytes": 0});
    if db.exists() {
        let store = Store::open_read_only(db)?;
        // ClusterFetch's bursts (`warmstart bursts list` has each).
        let rows = store.bursts()?;
        bursts = json!({
            "kept": rows.len(),
            "active": rows.iter().filter(|b| b.active).count(),
            "hits": rows.iter().map(|b| b.hits).sum::<u64>(),
            "bytes": rows.iter().filter(|b| b.active).map(|b| b.bytes).sum::<u64>(),
        });
        for app in store.apps()? {
            let lc = lifecycle(&store, &app);
            let plan = store.plan(&app).ok().flatten();
            let strategy = app.strategy.clone().unwrap_or_else(|| "auto".into());
            apps.push(json!({
                "app": app.key,
                "phase": phase_name(&app, &lc, plan.is_some()),
                "enabled": app.enabled,
                "launches": lc.launches,
                "prefetches": lc.prefetches,
                "last_miss_ratio": lc.last_miss_ratio,
                "last_waste": lc.last_waste,
                "last_check": lc.last_check,
                "strategy": strategy,
                "plan_bytes": plan.as_ref().map(|p| p.summary().bytes),
                "saved_ms_estimate": lc.saved_ms,
                "relearn_reason": lc.relearn_reason,
            }));
        }
    }
    if json_out {
        println!(
            "{}",
            json!({"daemon": {"running": running.is_some(), "pid": running}, "apps": apps,
                   "bursts": bursts})
        );
        return Ok(code::OK);
    }
    match running {
        Some(pid) => println!("daemon: running (pid {pid})"),
        None => println!("daemon: not running (start it: systemctl enable --now warmstart)"),
    }
    println!(
        "bursts: {} kept, {} active ({}), prefetched {} times (`warmstart bursts list`)",
        bursts["kept"],
        bursts["active"],
        human_bytes(bursts["bytes"].as_u64().unwrap_or(0)),
        bursts["hits"]
    );
    if apps.is_empty() {
        println!("no apps yet");
        return Ok(code::OK);
    }
    println!(
        "{:<12} {:>8} {:>10} {:>6} {:>6} {:>10} {:>9} {:>10}  app",
        "phase", "seen", "prefetches", "miss", "waste", "strategy", "plan", "saved"
    );
    // `plan list` counts every launch in an app's history (record's, run's, the daemon's);
    // here, the launches the daemon saw.
    let ratio = |v: &serde_json::Value| v.as_f64().map_or("-".into(), |m| format!("{m:.2}"));
    for a in &apps {
        println!(
            "{:<12} {:>8} {:>10} {:>6} {:>6} {:>10} {:>9} {:>9.1}s  {}",
            a["phase"].as_str().unwrap_or(""),
            a["launches"].as_u64().unwrap_or(0),
            a["prefetches"].as_u64().unwrap_or(0),
            ratio(&a["last_miss_ratio"]),
            ratio(&a["last_waste"]),
            a["strategy"].as_str().unwrap_or(""),
            a["plan_bytes"].as_u64().map_or("-".into(), human_bytes),
            a["saved_ms_estimate"].as_f64().unwrap_or(0.0) / 1000.0,
            a["app"].as_str().unwrap_or(""),
        );
    }
    // What the daemon did about its last check, where it did something.
    for a in &apps {
        if let Some(c) = a["last_check"].as_str().filter(|c| *c != "plan kept") {
            println!("{}: last check: {c}", a["app"].as_str().unwrap_or(""));
        }
    }
    Ok(code::OK)
}

/// Apps matching `what`: an executable path (all apps of that executable), else a key or a
/// unique part of one.
fn matching(store: &Store, what: &str) -> anyhow::Result<Vec<AppRow>> {
    let canon = std::fs::canonicalize(what)
        .ok()
        .map(|p| p.display().to_string());
    let by_exe: Vec<AppRow> = store
        .apps()?
        .into_iter()
        .filter(|a| a.exe == what || canon.as_deref() == Some(a.exe.as_str()))
        .collect();
    if !by_exe.is_empty() {
        return Ok(by_exe);
    }
    Ok(vec![store.find_app(what)?])
}

/// Tell a running daemon to reload (it re-reads apps and plans).
fn poke_daemon() {
    if let Some(pid) = PidFile::running(Path::new(crate::trace::knobs::RUN_DIR)) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGHUP,
        );
    }
}

pub fn app(db: &Path, c: AppCommand) -> anyhow::Result<i32> {
    if let AppCommand::List { json: j } = c {
        // Listing creates nothing: no database yet is no apps yet.
        if !db.exists() {
            if j {
                println!("[]");
            }
            return Ok(code::OK);
        }
        return status_list(&Store::open_read_only(db)?, j);
    }
    let mut store = Store::open(db)?;
    match c {
        AppCommand::List { .. } => {}
        AppCommand::Enable { app } => {
            for a in matching(&store, &app)? {
                store.set_app_enabled(a.id, true)?;
                println!("enabled {}", a.key);
            }
        }
        AppCommand::Disable { app } => {
            let rows = match matching(&store, &app) {
                Ok(r) => r,
                // An executable the daemon has not seen yet: record it, disabled.
                Err(_) if Path::new(&app).is_absolute() => {
                    let exe = std::fs::canonicalize(&app)
                        .with_context(|| format!("{app}: no such executable"))?;
                    let key =
                        crate::app::AppKey::for_command(&exe, &[exe.clone().into_os_string()]);
                    store.upsert_app(&key)?;
                    vec![store.find_app(&key.key)?]
                }
                Err(e) => return Err(e),
            };
            for a in rows {
                store.set_app_enabled(a.id, false)?;
                println!("disabled {}", a.key);
            }
        }
        AppCommand::Learn { app } => {
            for a in matching(&store, &app)? {
                store.forget_learning(a.id)?;
                let mut st = store.app_settings(a.id)?;
                let mut lc = st.lifecycle.unwrap_or_default();
                lc.phase = Phase::Learning;
                lc.since_check = 0;
                lc.relearn_reason = Some("asked by `warmstart app learn`".into());
                st.lifecycle = Some(lc);
                store.set_app_settings(a.id, &st)?;
                println!("{} goes back to learning", a.key);
            }
        }
        AppCommand::Forget { app } => {
            for a in matching(&store, &app)? {
                store.remove_app(a.id)?;
                println!("forgot {}", a.key);
            }
        }
    }
    poke_daemon();
    Ok(code::OK)
}

fn status_list(store: &Store, j: bool) -> anyhow::Result<i32> {
    let mut rows = Vec::new();
    for a in store.apps()? {
        let lc = lifecycle(store, &a);
        let has_plan = store.plan(&a).ok().flatten().is_some();
        rows.push(json!({"app": a.key, "exe": a.exe, "enabled": a.enabled, "phase": phase_name(&a, &lc, has_plan)}));
    }
    if j {
        println!("{}", serde_json::Value::Array(rows));
    } else {
        for r in rows {
            println!(
                "{:<12} {}",
                r["phase"].as_str().unwrap_or(""),
                r["app"].as_str().unwrap_or("")
            );
        }
    }
    Ok(code::OK)
}
