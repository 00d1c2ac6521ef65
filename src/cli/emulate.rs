//! `warmstart emulate APP | --trace FILE [--export FILE]`: the app's recorded launches replayed
//! on the device by the emulation platform (`crate::emulate`), cold and with each plan.

use std::path::Path;

use anyhow::Context;
use serde::Serialize;

use super::plan::open_existing;
use super::{code, fail, EmulateArgs};
use crate::emulate::{self, Export, Files, LaunchModel, Outcome};

#[derive(Serialize)]
struct Scenario {
    name: String,
    /// Means over the recorded launches (and rounds).
    #[serde(flatten)]
    mean: Outcome,
    /// Pages each recorded launch read from disk that the plan lacks (mean share).
    miss_rate: Option<f64>,
}

#[derive(Serialize)]
struct Report {
    app: String,
    launches: usize,
    rounds: u32,
    recorded_ms: f64,
    recorded_wait_ms: f64,
    recorded_busy_ms: f64,
    recorded_read_bytes: u64,
    cpu_ms: f64,
    qd1_latency_us: f64,
    files_readable: usize,
    /// Pages each recorded launch read from disk that a launch-order plan learned from the
    /// other recorded launches lacks (the paper's held-out miss rate; mean share). None with
    /// fewer than two launches, or for a trace from another machine (its paths are not
    /// here to resolve).
    held_out_miss_rate: Option<f64>,
    scenarios: Vec<Scenario>,
    notes: Vec<String>,
}

fn mean(v: &[Outcome]) -> Outcome {
    let n = v.len().max(1) as f64;
    let f = |g: fn(&Outcome) -> f64| v.iter().map(g).sum::<f64>() / n;
    let u = |g: fn(&Outcome) -> u64| (v.iter().map(g).sum::<u64>() as f64 / n).round() as u64;
    let done: Vec<f64> = v.iter().filter_map(|o| o.prefetch_done_ms).collect();
    Outcome {
        launch_ms: f(|o| o.launch_ms),
        own_read_ms: f(|o| o.own_read_ms),
        prefetch_wait_ms: f(|o| o.prefetch_wait_ms),
        hold_ms: f(|o| o.hold_ms),
        missed_pages: u(|o| o.missed_pages),
        late_pages: u(|o| o.late_pages),
        prefetch_done_ms: (done.len() == v.len() && !done.is_empty())
            .then(|| done.iter().sum::<f64>() / done.len() as f64),
        modelled_reads: u(|o| o.modelled_reads),
        device_reads: u(|o| o.device_reads),
    }
}

pub fn cmd(db: &Path, a: EmulateArgs) -> anyhow::Result<i32> {
    let (export, facts) = match (&a.trace, &a.app) {
        (Some(file), _) => {
            let bytes = std::fs::read(file)
                .with_context(|| format!("cannot read the exported launch {}", file.display()))?;
            let ex = Export::decode(&bytes).map_err(|e| {
                fail(
                    code::ERROR,
                    format!(
                        "{} is not a launch exported by `warmstart emulate --export`: {e}",
                        file.display()
                    ),
                )
            })?;
            let facts = if db.exists() {
                let mut store = open_existing(db)?;
                crate::learn::device_facts(&mut store)?
            } else {
                crate::device::measure(&std::env::temp_dir())
                    .context("cannot measure the device for the emulation")?
            };
            (ex, facts)
        }
        (None, Some(app)) => {
            let mut store = open_existing(db)?;
            let row = store.find_app(app)?;
            let mut runs = Vec::new();
            for (id, _, r) in store.runs(row.id)? {
                match r {
                    Ok(r) => runs.push(r),
                    Err(e) => tracing::warn!("run #{id} of {} does not decode: {e}", row.key),
                }
            }
            let mut plans = Vec::new();
            for s in store.plan_strategies(row.id)? {
                if let Some(p) = store.plan_for(&row, &s)? {
                    plans.push(p);
                }
            }
            let facts = crate::learn::device_facts(&mut store)?;
            (
                Export {
                    app: row.key,
                    runs,
                    plans,
                },
                facts,
            )
        }
        (None, None) => return Err(fail(code::USAGE, "name an app, or --trace FILE")),
    };
    if let Some(out) = &a.export {
        let bytes = export.encode()?;
        std::fs::write(out, &bytes)
            .with_context(|| format!("cannot write the export to {}", out.display()))?;
        println!(
            "exported {} recorded launches and {} plans of {} to {} ({} bytes)",
            export.runs.len(),
            export.plans.len(),
            export.app,
            out.display(),
            bytes.len()
        );
        return Ok(code::OK);
    }
    if export.runs.is_empty() {
        return Err(fail(
            code::NOT_FOUND,
            format!(
                "`{}` has no recorded launches to emulate (learn it with `warmstart record`)",
                export.app
            ),
        ));
    }
    let plans: Vec<_> = if a.strategies.is_empty() {
        export.plans.iter().collect()
    } else {
        let mut v = Vec::new();
        for s in &a.strategies {
            let p = export
                .plans
                .iter()
                .find(|p| &p.strategy == s)
                .ok_or_else(|| {
                    fail(
                        code::NOT_FOUND,
                        format!(
                            "`{}` has no `{s}` plan (it has: {})",
                            export.app,
                            export
                                .plans
                                .iter()
                                .map(|p| p.strategy.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    )
                })?;
            v.push(p);
        }
        v
    };
    // Launches the daemon learned warm read nothing: with no cold one, they are modelled cold.
    let all_warm = export.runs.iter().all(|r| r.disk_bytes() == 0);
    let models: Vec<LaunchModel> = export
        .runs
        .iter()
        .map(|r| {
            if all_warm {
                LaunchModel::from_warm_run(r)
            } else {
                LaunchModel::from_run(r)
            }
        })
        .collect::<Result<_, _>>()
        .with_context(|| format!("cannot model the recorded launches of {}", export.app))?;
    let files = Files::open(&plans, &export.runs.iter().collect::<Vec<_>>());
    let opts = emulate::Options {
        jobs: a.jobs as usize,
        facts,
        hold_cap: std::time::Duration::from_millis(crate::prefetch::DEFAULT_HOLD_CAP_MS),
    };
    let mut scenarios = Vec::new();
    let mut names: Vec<(String, Option<&crate::plan::Plan>)> = vec![("cold".into(), None)];
    names.extend(plans.iter().map(|p| (p.strategy.clone(), Some(*p))));
    // Interleaved: each round replays every scenario once, so a slower moment of the device
    // or CPU falls on all of them alike.
    let mut results: Vec<Vec<Outcome>> = vec![Vec::new(); names.len()];
    let total = a.rounds as usize * models.len() * names.len();
    let mut k = 0;
    for _ in 0..a.rounds {
        for m in &models {
            for (i, (name, plan)) in names.iter().enumerate() {
                k += 1;
                if !a.json {
                    eprint!("\remulating {name:<12} ({k} of {total})");
                }
                results[i].push(emulate::emulate(m, *plan, &files, &opts)?);
            }
        }
    }
    if !a.json {
        eprintln!();
    }
    for (i, (name, plan)) in names.iter().enumerate() {
        scenarios.push(Scenario {
            name: name.clone(),
            mean: mean(&results[i]),
            miss_rate: plan
                .map(|p| models.iter().map(|m| m.miss_rate(p)).sum::<f64>() / models.len() as f64),
        });
    }
    // Each launch against a plan learned without it (the paper: one sequence as the
    // prefetcher's input, the others as launches).
    let held_out_miss_rate = (a.trace.is_none() && export.runs.len() >= 2).then(|| {
        let rates: Vec<f64> = (0..export.runs.len())
            .map(|i| {
                let others: Vec<crate::sequence::RawRun> = export
                    .runs
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, r)| r.clone())
                    .collect();
                let base = crate::learn::base_of(&export.app, &others);
                crate::learn::plans_for(&base, &facts, None)
                    .iter()
                    .find(|p| p.strategy == crate::schedule::Strategy::Fast.name())
                    .map_or(1.0, |p| models[i].miss_rate(p))
            })
            .collect();
        rates.iter().sum::<f64>() / rates.len() as f64
    });
    let n = models.len() as f64;
    let mut report = Report {
        app: export.app.clone(),
        launches: models.len(),
        rounds: a.rounds,
        recorded_ms: models.iter().map(|m| m.recorded_ms).sum::<f64>() / n,
        recorded_wait_ms: models.iter().map(|m| m.recorded_wait_ms).sum::<f64>() / n,
        recorded_busy_ms: models.iter().map(|m| m.recorded_busy_ms).sum::<f64>() / n,
        recorded_read_bytes: (models.iter().map(|m| m.recorded_read_bytes).sum::<u64>() as f64 / n)
            as u64,
        cpu_ms: models.iter().map(|m| m.cpu_ms()).sum::<f64>() / n,
        qd1_latency_us: facts.qd1_latency_us,
        files_readable: files.len(),
        held_out_miss_rate,
        scenarios,
        notes: vec![
            "file data is read from the device with O_DIRECT; block-device metadata is \
             modelled at the measured depth-1 latency plus transfer (it is not read, so \
             nothing is cached)"
                .into(),
            "computation is emulated by sleeping: the prefetcher's CPU use does not slow \
             the emulated launch"
                .into(),
        ],
    };
    if all_warm {
        report.notes.push(
            "every recorded launch was warm (read nothing from disk): each is emulated as \
             if its cache had been dropped, every page it used read in the pieces it \
             touched them"
                .into(),
        );
    }
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(code::OK);
    }
    println!(
        "{}: {} recorded launch(es), {:.0} ms traced ({:.0} ms of it waiting for reads; the device busy {:.0} ms reading {}), {:.0} ms computing; {} files readable with O_DIRECT",
        report.app,
        report.launches,
        report.recorded_ms,
        report.recorded_wait_ms,
        report.recorded_busy_ms,
        super::human_bytes(report.recorded_read_bytes),
        report.cpu_ms,
        report.files_readable
    );
    println!(
        "{:<12} {:>10} {:>9} {:>13} {:>14} {:>9} {:>9} {:>10} {:>12}",
        "scenario",
        "launch ms",
        "vs cold",
        "own reads ms",
        "prefetch wait",
        "missed",
        "late",
        "miss rate",
        "plan done ms"
    );
    let cold = report.scenarios[0].mean.launch_ms;
    for s in &report.scenarios {
        let o = &s.mean;
        println!(
            "{:<12} {:>10.1} {:>9.2} {:>13.1} {:>14.1} {:>9} {:>9} {:>10} {:>12}",
            s.name,
            o.launch_ms,
            o.launch_ms / cold.max(1e-9),
            o.own_read_ms,
            o.prefetch_wait_ms,
            o.missed_pages,
            o.late_pages,
            s.miss_rate
                .map_or("-".into(), |r| format!("{:.1}%", r * 100.0)),
            o.prefetch_done_ms.map_or("-".into(), |d| format!("{d:.1}"))
        );
    }
    println!(
        "computation only: {:.1} ms. Pages are {} bytes; missed = read by the launch, not in the plan; late = in the plan, read by the launch first.",
        report.cpu_ms,
        models[0].page_size
    );
    if let Some(r) = report.held_out_miss_rate {
        println!(
            "held-out miss rate: {:.1}% (each recorded launch against a plan learned from the \
             others)",
            r * 100.0
        );
    }
    for n in &report.notes {
        println!("note: {n}");
    }
    Ok(code::OK)
}
