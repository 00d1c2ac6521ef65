//! `warmstart bench`: the papers' evaluation on real applications (see bench/suite.toml).

use std::path::PathBuf;

use anyhow::Context;

use super::record::interrupt_flag;
use super::{code, fail, require_root, BenchArgs};
use crate::bench::report;
use crate::bench::run::{run, BenchOptions, Scenario};
use crate::bench::suite::{AppSpec, LoadingSpec, Suite};
use crate::bench::BenchError;

/// Strategies the prefetcher offers (each becomes a scenario, `warmstart:<name>`; plain
/// `warmstart` is the default, auto).
pub const STRATEGIES: &[&str] = &["fast", "trace", "sorted", "paralfetch", "hybrid"];

/// The `--only` name of the suite's loadings.
const LOADINGS: &str = "bursts";

fn suite_path(p: &PathBuf) -> PathBuf {
    if p.exists() || p.is_absolute() {
        return p.clone();
    }
    // Run from elsewhere than the checkout: fall back to the suite this binary was built with.
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(p);
    if built.exists() {
        built
    } else {
        p.clone()
    }
}

pub fn cmd(a: BenchArgs) -> anyhow::Result<i32> {
    let strategies: Vec<String> = STRATEGIES.iter().map(|s| s.to_string()).collect();
    let all = Scenario::all(&strategies);
    if a.scenarios {
        for s in &all {
            println!("{}", s.name());
        }
        println!("{LOADINGS} (the suite's loadings: cold, warm, with the daemon's bursts)");
        return Ok(code::OK);
    }
    if let Some(saved) = &a.rerender {
        let text = std::fs::read_to_string(saved)
            .with_context(|| format!("reading {}", saved.display()))?;
        let mut results: crate::bench::run::Results = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a results.json", saved.display()))?;
        crate::bench::run::resummarize(&mut results);
        if let Some(dir) = &a.out {
            for f in report::write_all(&results, dir)
                .with_context(|| format!("writing results to {}", dir.display()))?
            {
                eprintln!("wrote {}", f.display());
            }
        }
        println!("{}", report::markdown(&results));
        return Ok(code::OK);
    }
    require_root("bench")?;
    let with_loadings = a.only.is_empty() || a.only.iter().any(|s| s == LOADINGS);
    let with_apps = a.only.is_empty() || a.only.iter().any(|s| s != LOADINGS);
    let (apps, loadings): (Vec<AppSpec>, Vec<LoadingSpec>) = if a.command.is_empty() {
        let path = suite_path(&a.suite);
        let suite = Suite::load(&path)?;
        (
            if with_apps {
                suite.select(&a.apps)?
            } else {
                vec![]
            },
            if with_loadings {
                suite.select_loadings(&a.apps)?
            } else {
                vec![]
            },
        )
    } else {
        (vec![AppSpec::adhoc(a.command.clone())], vec![])
    };
    let scenarios: Vec<Scenario> = if a.only.is_empty() {
        all
    } else {
        let mut v = vec![Scenario::Cold, Scenario::Warm];
        for name in a.only.iter().filter(|s| *s != LOADINGS) {
            let s = Scenario::parse(name)
                .filter(|s| all.contains(s))
                .ok_or_else(|| {
                    fail(
                        code::USAGE,
                        format!("unknown scenario `{name}` (see `warmstart bench --scenarios`)"),
                    )
                })?;
            if !v.contains(&s) {
                v.push(s);
            }
        }
        v
    };
    let together = a
        .together
        .iter()
        .map(|k| {
            if k == "all" {
                Ok(usize::MAX)
            } else {
                k.parse::<usize>().map_err(|_| {
                    fail(
                        code::USAGE,
                        format!("--together takes numbers or `all`, not `{k}`"),
                    )
                })
            }
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let opts = BenchOptions {
        apps,
        loadings,
        rounds: a.rounds,
        scenarios,
        state_dir: a.state_dir.clone(),
        // Measure the lean launcher users run, not this larger benchmark binary.
        warmstart_exe: super::launcher_exe()?,
        together,
        learn_runs: a.learn_runs,
    };
    let interrupt = interrupt_flag()?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let mut progress = |msg: &str, done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
        bar.set_message(msg.to_string());
    };
    let results = match run(&opts, &interrupt, &mut progress) {
        Ok(r) => r,
        Err(BenchError::Interrupted) => {
            bar.abandon_with_message("interrupted");
            return Err(fail(
                code::INTERRUPTED,
                "benchmark interrupted; everything it started was stopped",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    bar.finish_and_clear();
    if let Some(dir) = &a.out {
        let files = report::write_all(&results, dir)
            .with_context(|| format!("writing results to {}", dir.display()))?;
        for f in files {
            eprintln!("wrote {}", f.display());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string(&results)?);
    } else {
        println!("{}", report::markdown(&results));
    }
    Ok(
        if results.apps.iter().all(|r| r.error.is_none())
            && results.loadings.iter().all(|l| l.error.is_none())
        {
            code::OK
        } else {
            code::ERROR
        },
    )
}
