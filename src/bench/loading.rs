//! ClusterFetch's evaluation in the benchmark (issue #27): loadings of an application that is
//! already running (`[[loading]]` in bench/suite.toml), timed from the line that starts the
//! loading to the line that says it is done, in three scenarios interleaved round by round:
//!
//! - `cold`: the page cache dropped after the application started (what it had mapped stays,
//!   as on a desktop where it has been running a while);
//! - `warm`: a new process of the application, loading right after the cold one;
//! - `bursts`: cold, while a daemon of the benchmark's own runs with bursts only (it learns no
//!   launch), holding the bursts it mined from earlier cold loadings.
//!
//! It also prepares the launches' `launch-bursts` scenario: ClusterFetch on launches, with a
//! bursts-only daemon of its own that mined each app's cold launches.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::launch::each_line;
use super::run::{scenario_summaries, setup_app, BenchDaemon, Ctx, Measurement, ScenarioSummary};
use super::suite::{expand, AppSpec, LoadingSpec};
use super::BenchError;
use crate::store::Store;

/// The scenarios of a loading, in the order each round runs them.
pub const SCENARIOS: [&str; 3] = ["cold", "warm", "bursts"];

/// Cold loadings the daemon mines before the rounds (the lab's figure: a burst is learned from
/// the first, checked and trimmed on the next ones; bench/lab/loading.py).
pub const LEARN_LOADINGS: u32 = 3;

/// Seconds after a burst prefetch the benchmark's daemon checks its use (the daemon's default
/// is 10 s; the rounds wait for the check, so shorter keeps them short).
const CHECK_SECS: f64 = 3.0;
/// How long after a prefetched loading or launch the benchmark waits for its check.
pub(super) const CHECK_WAIT: Duration = Duration::from_millis((CHECK_SECS * 1000.0) as u64 + 1000);

/// A pause before and after the cache drop: the miner cuts bursts at quiet stretches, and the
/// process's start must not run into its loading.
const QUIET: Duration = Duration::from_millis(500);

/// A burst the benchmark's daemon held, as the results report it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadingBurst {
    pub trigger: PathBuf,
    pub bytes: u64,
    pub hits: u64,
    pub active: bool,
    pub last_check: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LoadingResult {
    pub name: String,
    pub command: Vec<String>,
    pub samples: Vec<Measurement>,
    pub summary: BTreeMap<String, ScenarioSummary>,
    /// The bursts the daemon held after learning, and after the rounds.
    pub learned: Vec<LoadingBurst>,
    pub after: Vec<LoadingBurst>,
    pub error: Option<String>,
}

impl LoadingResult {
    pub fn summarize(&mut self) {
        self.summary = scenario_summaries(&self.samples);
    }

    /// The loading gap the bursts closed, (cold - bursts) / (cold - warm), medians.
    pub fn gap_closed(&self) -> Option<f64> {
        self.summary.get("bursts").and_then(|s| s.gap_closed)
    }
}

/// The running application of one loading.
struct Loader<'a> {
    spec: &'a LoadingSpec,
    child: Child,
    stdin: Option<ChildStdin>,
    /// The `load` line, expanded.
    load: String,
    lines: mpsc::Receiver<String>,
    /// Its last lines of output, for an error message.
    tail: std::collections::VecDeque<String>,
}

impl<'a> Loader<'a> {
    /// Start it in its own process group and wait for its `started` line.
    fn start(ctx: &Ctx<'_>, spec: &'a LoadingSpec) -> Result<Loader<'a>, BenchError> {
        let app = spec.as_app();
        let argv = ctx.argv(&app);
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(ctx.work(&app))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        for (k, v) in ctx.env(&app) {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            BenchError::Setup(format!("{}: cannot start `{}`: {e}", spec.name, argv[0]))
        })?;
        let (tx, lines) = mpsc::channel();
        each_line(&mut child, move |line| tx.send(line).is_ok());
        let stdin = child.stdin.take();
        let mut l = Loader {
            spec,
            child,
            stdin,
            load: format!("{}\n", expand(&spec.load, &ctx.work(&app), &ctx.venv)),
            lines,
            tail: Default::default(),
        };
        l.wait_for(ctx, &spec.started, "started")?;
        Ok(l)
    }

    /// Wait for a line matching `re`; the time it took.
    fn wait_for(
        &mut self,
        ctx: &Ctx<'_>,
        re: &regex::Regex,
        what: &str,
    ) -> Result<Duration, BenchError> {
        let t0 = Instant::now();
        loop {
            if ctx.interrupt.load(Ordering::SeqCst) != 0 {
                return Err(BenchError::Interrupted);
            }
            if t0.elapsed() >= self.spec.timeout {
                return Err(BenchError::Setup(format!(
                    "{}: no line matching `{}` ({what}) within {} s{}",
                    self.spec.name,
                    re.as_str(),
                    self.spec.timeout.as_secs(),
                    self.last_output()
                )));
            }
            match self.lines.recv_timeout(Duration::from_millis(1)) {
                Ok(line) if re.is_match(&line) => return Ok(t0.elapsed()),
                Ok(line) => {
                    if self.tail.len() == 4 {
                        self.tail.pop_front();
                    }
                    self.tail.push_back(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map_or("?".to_string(), |s| s.to_string());
                    return Err(BenchError::Setup(format!(
                        "{}: it exited ({status}) before a line matching `{}` ({what}){}",
                        self.spec.name,
                        re.as_str(),
                        self.last_output()
                    )));
                }
            }
        }
    }

    fn last_output(&self) -> String {
        if self.tail.is_empty() {
            String::new()
        } else {
            format!(
                "; its last output: {}",
                Vec::from(self.tail.clone()).join(" | ")
            )
        }
    }

    /// Write the `load` line, wait for `loaded`: the loading's milliseconds.
    fn load(&mut self, ctx: &Ctx<'_>) -> Result<f64, BenchError> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| BenchError::Setup(format!("{}: stdin closed", self.spec.name)))?;
        let t0 = Instant::now();
        stdin
            .write_all(self.load.as_bytes())
            .and_then(|_| stdin.flush())
            .map_err(|e| {
                BenchError::Setup(format!("{}: writing its stdin: {e}", self.spec.name))
            })?;
        let loaded = self.spec.loaded.clone();
        self.wait_for(ctx, &loaded, "loaded")?;
        Ok(t0.elapsed().as_secs_f64() * 1e3)
    }
}

impl Drop for Loader<'_> {
    /// Close its stdin (a well-behaved loader exits on it), then its whole process group.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let pg = Pid::from_raw(self.child.id() as i32);
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if killpg(pg, Signal::SIGTERM).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(3);
            while killpg(pg, None).is_ok() && Instant::now() < deadline {
                // Reaped, or the leader's zombie would keep the group alive.
                let _ = self.child.try_wait();
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = killpg(pg, Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// One loading in a new process of the application; the cache dropped after it started if
/// `cold`.
fn loading(ctx: &Ctx<'_>, spec: &LoadingSpec, cold: bool) -> Result<f64, BenchError> {
    let mut l = Loader::start(ctx, spec)?;
    std::thread::sleep(QUIET);
    if cold {
        ctx.cold()?;
        std::thread::sleep(QUIET);
    }
    l.load(ctx)
}

/// The daemon's state directory and configuration: bursts only (it learns no launch), checked
/// after `CHECK_SECS`, nothing of the benchmark's own state a trigger, and the work
/// directories (which may be under /tmp in a test) not excluded.
fn daemon_dir(ctx: &Ctx<'_>) -> Result<PathBuf, BenchError> {
    bursts_daemon_dir(ctx, "loading-daemon")
}

/// The state directory (under the bench's) of the `launch-bursts` scenario's bursts-only
/// daemon, apart from the loadings' own.
const LAUNCH_BURSTS_DAEMON: &str = "launch-bursts-daemon";

pub(super) fn launch_bursts_dir(ctx: &Ctx<'_>) -> PathBuf {
    ctx.opts.state_dir.join(LAUNCH_BURSTS_DAEMON)
}

/// `launch-bursts`: a bursts-only daemon mines `LEARN_LOADINGS` cold launches of each app, as
/// it mines loadings (ClusterFetch needs no notion of an app: a launch is a burst, its
/// trigger a file the launch opens, the executable itself among them).
pub(super) fn learn_launch_bursts(ctx: &Ctx<'_>, apps: &[&AppSpec]) -> Result<(), BenchError> {
    let dir = bursts_daemon_dir(ctx, LAUNCH_BURSTS_DAEMON)?;
    let _d = BenchDaemon::start(ctx, &dir)?;
    wait_for_device(ctx, &dir)?;
    for app in apps {
        for _ in 0..LEARN_LOADINGS {
            ctx.cold()?;
            std::thread::sleep(QUIET);
            ctx.run_one(app, &ctx.argv(app), &ctx.ready(app))?;
            std::thread::sleep(CHECK_WAIT);
        }
    }
    Ok(())
}

/// A daemon's first start measures the disk (a few seconds of reads): not during what it
/// learns from.
fn wait_for_device(ctx: &Ctx<'_>, dir: &Path) -> Result<(), BenchError> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(60)
        && Store::open(&dir.join("daemon.db"))
            .ok()
            .and_then(|s| s.device_facts_any().ok().flatten())
            .is_none()
    {
        if ctx.interrupt.load(Ordering::SeqCst) != 0 {
            return Err(BenchError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn bursts_daemon_dir(ctx: &Ctx<'_>, name: &str) -> Result<PathBuf, BenchError> {
    let dir = ctx.opts.state_dir.join(name);
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", dir.display())))?;
    // Bursts from an earlier run would be learned already; the measured device is kept, as
    // a user's daemon measured it long ago.
    let db = dir.join("daemon.db");
    if db.exists() {
        let mut store =
            Store::open(&db).map_err(|e| BenchError::Setup(format!("{}: {e}", db.display())))?;
        for b in store.bursts().unwrap_or_default() {
            let _ = store.remove_burst(b.id);
        }
    }
    let work = ctx.opts.state_dir.join("work");
    let cfg = daemon_config(&dir, &work);
    std::fs::write(dir.join("config.toml"), cfg)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

fn daemon_config(dir: &Path, work: &Path) -> String {
    let work = format!("{}/", work.display());
    let mut exclude: Vec<String> = crate::daemon::config::Config::default()
        .burst_exclude
        .into_iter()
        .filter(|x| !work.starts_with(x.as_str()))
        .collect();
    exclude.push(format!("{}/", dir.display()));
    format!(
        "include = [\"/nonexistent\"]\nbursts = true\nburst_check_secs = {CHECK_SECS:.1}\n\
         exclude_paths = []\nburst_exclude = {exclude:?}\n"
    )
}

fn bursts_of(dir: &Path) -> Vec<LoadingBurst> {
    let Ok(store) = Store::open(&dir.join("daemon.db")) else {
        return vec![];
    };
    store
        .bursts()
        .unwrap_or_default()
        .into_iter()
        .map(|b| LoadingBurst {
            trigger: b.path,
            bytes: b.bytes,
            hits: b.hits,
            active: b.active,
            last_check: b.last_check,
        })
        .collect()
}

/// Set up, learn and measure one loading over `rounds` rounds. `progress` is told each step.
pub(super) fn measure(
    ctx: &Ctx<'_>,
    spec: &LoadingSpec,
    rounds: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<LoadingResult, BenchError> {
    let mut res = LoadingResult {
        name: spec.name.clone(),
        command: spec.command.clone(),
        ..LoadingResult::default()
    };
    progress(&format!("{}: setup and learning its burst", spec.name));
    setup_app(ctx, &spec.as_app())?;
    // One untimed loading first, as for launches: a first start creates profiles and caches.
    loading(ctx, spec, false)?;
    let dir = daemon_dir(ctx)?;
    {
        let _d = BenchDaemon::start(ctx, &dir)?;
        wait_for_device(ctx, &dir)?;
        for _ in 0..LEARN_LOADINGS {
            loading(ctx, spec, true)?;
            // The burst ends, is stored, and (from the second) its prefetch is checked.
            std::thread::sleep(CHECK_WAIT);
        }
    }
    res.learned = bursts_of(&dir);
    for round in 1..=rounds {
        for sc in SCENARIOS {
            progress(&format!("{} · {sc} · round {round}/{rounds}", spec.name));
            let ms = match sc {
                "cold" => loading(ctx, spec, true),
                "warm" => loading(ctx, spec, false),
                _ => {
                    let d = BenchDaemon::start(ctx, &dir)?;
                    let ms = loading(ctx, spec, true);
                    // Its check runs (and counts) before the daemon stops.
                    std::thread::sleep(CHECK_WAIT);
                    drop(d);
                    ms
                }
            };
            let (ms, ready) = match ms {
                Ok(ms) => (ms, true),
                Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
                Err(e) => {
                    res.error = Some(e.to_string());
                    (0.0, false)
                }
            };
            res.samples.push(Measurement {
                scenario: sc.to_string(),
                round,
                ms,
                ready,
            });
        }
    }
    res.after = bursts_of(&dir);
    res.summarize();
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_learns_bursts_only_and_may_take_triggers_from_the_work_directories() {
        let c = daemon_config(
            Path::new("/tmp/st/loading-daemon"),
            Path::new("/tmp/st/work"),
        );
        let cfg = crate::daemon::config::Config::parse(&c, "t").unwrap();
        assert_eq!(cfg.include, vec!["/nonexistent".to_string()]);
        assert!(cfg.bursts);
        assert!(cfg.exclude_paths.is_empty());
        // /tmp/ would exclude the work directory of a state under /tmp: left out.
        assert!(!cfg.burst_exclude.iter().any(|x| x == "/tmp/"));
        assert!(cfg.burst_exclude.iter().any(|x| x == "/run/"));
        assert!(cfg
            .burst_exclude
            .iter()
            .any(|x| x == "/tmp/st/loading-daemon/"));
        let c = daemon_config(
            Path::new("/var/lib/warmstart/bench/loading-daemon"),
            Path::new("/var/lib/warmstart/bench/work"),
        );
        let cfg = crate::daemon::config::Config::parse(&c, "t").unwrap();
        assert!(cfg.burst_exclude.iter().any(|x| x == "/tmp/"));
        assert!(!cfg.burst_exclude.iter().any(|x| x == "/var/lib/warmstart/"));
    }

    #[test]
    fn the_gap_closed_is_the_bursts_against_cold_and_warm() {
        let m = |s: &str, ms: f64| Measurement {
            scenario: s.into(),
            round: 1,
            ms,
            ready: true,
        };
        let mut r = LoadingResult {
            samples: vec![m("cold", 2000.0), m("warm", 1000.0), m("bursts", 1250.0)],
            ..LoadingResult::default()
        };
        r.summarize();
        assert!((r.gap_closed().unwrap() - 0.75).abs() < 1e-9);
    }
}
