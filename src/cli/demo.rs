//! `warmstart demo [-- CMD...]`: learn a workload, then time cold, warm and warmstart launches
//! interleaved round by round (the order reversed every other round), and print medians,
//! spread and the gap closed.

use std::ffi::OsString;
use std::path::Path;

use anyhow::Context;
use serde_json::json;

use super::record::{interrupt_flag, print_learned};
use super::{code, fail, require_root, DemoArgs};
use crate::app::AppKey;
use crate::bench::stats::{gap_closed, gap_closed_interval, Spread};
use crate::bench::{default_demo_command, make_cold, settle, time_command, SETTLE_CAP};
use crate::launch::resolve_command;
use crate::learn::{learn, LearnOptions};
use crate::store::Store;

const SCENARIOS: [&str; 3] = ["cold", "warm", "warmstart"];
/// The share of bootstrap draws the printed interval of the gap closed holds.
const INTERVAL_LEVEL: f64 = 0.9;
/// Bootstrap draws, and their fixed seed: the same timings always print the same interval.
const RESAMPLES: usize = 4000;
const SEED: u64 = 0x5741_524d;
/// An interval wider than this (in shares of the gap) gets a hint to measure more rounds.
const WIDE: f64 = 0.3;

pub fn cmd(db: &Path, a: DemoArgs) -> anyhow::Result<i32> {
    require_root("demo")?;
    let state_dir = crate::store::dir_of(db);
    let command: Vec<OsString> = if a.command.is_empty() {
        default_demo_command(state_dir)
            .with_context(|| format!("writing the demo workload under {}", state_dir.display()))?
    } else {
        a.command.clone()
    };
    let exe = resolve_command(&command[0])?;
    let key = AppKey::for_command(&exe, &command);
    let mut store = Store::open(db)?;
    let interrupt = interrupt_flag()?;
    // Progress goes to stderr: with --json too when a person watches (stdout stays JSON).
    let watched = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let say = |s: String| {
        if !a.json || watched {
            eprintln!("{s}")
        }
    };
    say(format!("learning {} ({} cold runs)...", key.key, a.runs));
    // The demo times its own plain launches; the emulated ranking serves `auto` only.
    let mut opts = LearnOptions {
        runs: a.runs,
        baseline_runs: 0,
        emulate: a.strategy == "auto",
        ..LearnOptions::default()
    };
    opts.trace.quiet = true;
    let learned = learn(
        &mut store,
        &key,
        &exe,
        &command,
        &opts,
        &interrupt,
        &mut |_, _, _| {},
    )
    .with_context(|| format!("learning `{}`", key.key))?;
    drop(store);
    if !a.json {
        print_learned(&key, &learned, false);
    }
    let launcher = super::launcher_exe()?;
    let mut ws_cmd: Vec<OsString> = vec![
        launcher.clone().into(),
        "--db".into(),
        db.into(),
        "-q".into(),
        "run".into(),
        "--strategy".into(),
        a.strategy.clone().into(),
        "--".into(),
    ];
    ws_cmd.extend(command.iter().cloned());

    let mut times: Vec<Vec<f64>> = vec![Vec::new(); SCENARIOS.len()];
    // CPU time (user + system) of each launch and its waited-for children: wall minus this
    // is the time the launch spent off the CPU, mostly waiting for the disk.
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); SCENARIOS.len()];
    for round in 1..=a.rounds {
        // Odd rounds run cold, warm, warmstart; even rounds the reverse, so a drift in the
        // machine's speed within a round (this VM's is large) favours no scenario.
        let order: [usize; 3] = if round % 2 == 1 { [0, 1, 2] } else { [2, 1, 0] };
        for i in order {
            let scenario = &SCENARIOS[i];
            if interrupt.load(std::sync::atomic::Ordering::SeqCst) != 0 {
                return Err(fail(code::INTERRUPTED, "interrupted"));
            }
            if !settle(&launcher, SETTLE_CAP) {
                tracing::warn!(
                    "a process of {} still runs after {} s; measuring anyway",
                    launcher.display(),
                    SETTLE_CAP.as_secs()
                );
            }
            let argv = match *scenario {
                "cold" => {
                    make_cold().context("dropping caches")?;
                    &command
                }
                // Right after another launch of the command: everything it reads is cached.
                "warm" => &command,
                _ => {
                    make_cold().context("dropping caches")?;
                    &ws_cmd
                }
            };
            let (ms, exit, usage) =
                time_command(argv).with_context(|| format!("running the {scenario} launch"))?;
            if !exit.success() {
                return Err(fail(
                    code::ERROR,
                    format!("the {scenario} launch of round {round} ended with {exit}"),
                ));
            }
            times[i].push(ms);
            cpu[i].push((usage.user_us + usage.sys_us) as f64 / 1e3);
        }
        say(format!(
            "round {round}/{}: cold {:.0} ms, warm {:.0} ms, warmstart {:.0} ms",
            a.rounds,
            times[0].last().copied().unwrap_or(0.0),
            times[1].last().copied().unwrap_or(0.0),
            times[2].last().copied().unwrap_or(0.0)
        ));
    }
    let spreads: Vec<Spread> = times
        .iter()
        .map(|t| Spread::of(t).unwrap_or_default())
        .collect();
    let (cold, warm, ws) = (spreads[0].median, spreads[1].median, spreads[2].median);
    let gap = gap_closed(cold, warm, ws);
    // How far five rounds on a noisy machine pin the gap closed down: on the VM this was
    // built on, the same warm launch varies by ±20% from one run to the next.
    let rounds: Vec<(f64, f64, f64)> = (0..times[0].len())
        .map(|i| (times[0][i], times[1][i], times[2][i]))
        .collect();
    let interval = gap_closed_interval(&rounds, INTERVAL_LEVEL, RESAMPLES, SEED);
    if a.json {
        let v = json!({
            "app": key.key,
            "rounds": a.rounds,
            "strategy": a.strategy,
            "cold_ms": cold,
            "warm_ms": warm,
            "warmstart_ms": ws,
            "gap_closed": gap,
            "gap_closed_interval": interval.map(|(lo, hi)| [lo, hi]),
            "interval_level": INTERVAL_LEVEL,
            "samples": {"cold": times[0], "warm": times[1], "warmstart": times[2]},
            "cpu_ms": {"cold": cpu[0], "warm": cpu[1], "warmstart": cpu[2]},
        });
        println!("{v}");
        return Ok(code::OK);
    }
    println!();
    println!(
        "{} rounds, interleaved (order reversed every other round); warmstart with the {} strategy; times in ms",
        a.rounds, a.strategy
    );
    println!("| scenario  | median |    min |    max | vs cold |");
    println!("|-----------|-------:|-------:|-------:|--------:|");
    for (name, s) in SCENARIOS.iter().zip(&spreads) {
        println!(
            "| {:<9} | {:>6.0} | {:>6.0} | {:>6.0} | {:>6.2}x |",
            name,
            s.median,
            s.min,
            s.max,
            if s.median > 0.0 { cold / s.median } else { 0.0 }
        );
    }
    match gap {
        Some(g) => println!(
            "gap closed: {:.1}% of the cold-warm gap ((cold - warmstart) / (cold - warm))",
            g * 100.0
        ),
        None => println!("gap closed: n/a (cold and warm launches took the same time)"),
    }
    if let Some((lo, hi)) = interval {
        println!(
            "{:.0}% bootstrap interval over the {} rounds: {:.0}% to {:.0}%{}",
            INTERVAL_LEVEL * 100.0,
            a.rounds,
            lo * 100.0,
            hi * 100.0,
            if hi - lo > WIDE {
                " (wide: launch times vary a lot from run to run here; more --rounds narrow it)"
            } else {
                ""
            }
        );
    }
    Ok(code::OK)
}
