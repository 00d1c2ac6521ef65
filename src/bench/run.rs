//! The benchmark harness: learn each suite app with `warmstart record`, then measure every
//! scenario round by round (cold, warm, then each prefetching scenario after a cache drop),
//! derive the papers' measures (normalised time, gap closed, t_bound), the overheads, one
//! CPU/disk timeline per app, and optionally the FAST fig. 8 experiment (K apps at once).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::launch::{launch, LaunchSpec, Outcome, Xvfb};
use super::loading::{self, LoadingResult};
use super::sampler::{disk_of, Point, Sampler};
use super::stats::{gap_closed, geomean, paired_ratio, PairedRatio, Spread};
use super::suite::{expand, AppSpec, LoadingSpec, Ready};
use super::{make_cold, BenchError};
use crate::resolve::FileKind;
use crate::store::Store;

/// A way of launching an app that the benchmark measures.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Scenario {
    /// Drop caches, launch.
    Cold,
    /// Launch right after the cold launch: everything cached (the upper bound).
    Warm,
    /// A warm launch through `warmstart run`: the prefetcher's overhead when it cannot help.
    WarmWarmstart,
    /// Drop caches, run only the prefetch of the plan until its pages are in memory (t_ssd).
    PrefetchOnly,
    /// Drop caches, `warmstart run` (with a strategy, once strategies exist).
    Warmstart(Option<String>),
    /// Drop caches, `vmtouch -t` every planned file whole, concurrently with the launch.
    WholeFiles,
    /// Drop caches, prefetch the whole plan, then launch.
    FetchThenLaunch,
    /// Drop caches, launch plainly while the warmstart daemon runs (it learned the app from
    /// earlier plain launches).
    Daemon,
    /// Drop caches, `warmstart run` of the app as learned on a kernel without the filemap
    /// access events (Linux 6.1: hidden with WARMSTART_HIDE_EVENTS while `record` ran).
    InsertsOnly,
    /// ClusterFetch on a launch (a launch is a burst): drop caches, launch plainly while a
    /// daemon with bursts only runs, holding the bursts it mined from earlier cold launches.
    LaunchBursts,
}

/// The events a pre-6.12 kernel lacks, hidden for the `warmstart:inserts-only` learning.
pub const OLD_KERNEL_HIDDEN: &str = "filemap:mm_filemap_fault,filemap:mm_filemap_map_pages,\
                                     filemap:mm_filemap_get_pages,readahead:page_cache_sync_ra";

/// The peak resident memory of `warmstart prefetch` (`prefetch`, its argv) on the cache as
/// it is: run once more with `--json`, which reports its own `VmHWM`.
fn prefetcher_peak_rss(prefetch: &[String]) -> Option<u64> {
    let (exe, args) = prefetch.split_first()?;
    let out = Command::new(exe)
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v["peak_rss_kb"].as_u64()
}

/// The name the inserts-only learning of an app is stored under.
fn inserts_only_name(app: &str) -> String {
    format!("{app}@inserts-only")
}

impl Scenario {
    pub fn name(&self) -> String {
        match self {
            Scenario::Cold => "cold".into(),
            Scenario::Warm => "warm".into(),
            Scenario::WarmWarmstart => "warm+warmstart".into(),
            Scenario::PrefetchOnly => "prefetch-only".into(),
            Scenario::Warmstart(None) => "warmstart".into(),
            Scenario::Warmstart(Some(s)) => format!("warmstart:{s}"),
            Scenario::WholeFiles => "whole-files".into(),
            Scenario::FetchThenLaunch => "fetch-then-launch".into(),
            Scenario::Daemon => "daemon".into(),
            Scenario::InsertsOnly => "warmstart:inserts-only".into(),
            Scenario::LaunchBursts => "launch-bursts".into(),
        }
    }

    pub fn parse(s: &str) -> Option<Scenario> {
        Some(match s {
            "cold" => Scenario::Cold,
            "warm" => Scenario::Warm,
            "warm+warmstart" => Scenario::WarmWarmstart,
            "prefetch-only" => Scenario::PrefetchOnly,
            "warmstart" => Scenario::Warmstart(None),
            "whole-files" => Scenario::WholeFiles,
            "fetch-then-launch" => Scenario::FetchThenLaunch,
            "daemon" => Scenario::Daemon,
            "warmstart:inserts-only" => Scenario::InsertsOnly,
            "launch-bursts" => Scenario::LaunchBursts,
            _ => Scenario::Warmstart(Some(s.strip_prefix("warmstart:")?.to_string())),
        })
    }

    /// Every scenario, in the order each round runs them.
    pub fn all(strategies: &[String]) -> Vec<Scenario> {
        let mut v = vec![
            Scenario::Cold,
            Scenario::Warm,
            Scenario::WarmWarmstart,
            Scenario::PrefetchOnly,
            Scenario::Warmstart(None),
        ];
        v.extend(
            strategies
                .iter()
                .map(|s| Scenario::Warmstart(Some(s.clone()))),
        );
        v.extend([
            Scenario::InsertsOnly,
            Scenario::WholeFiles,
            Scenario::FetchThenLaunch,
            Scenario::Daemon,
            Scenario::LaunchBursts,
        ]);
        v
    }
}

pub struct BenchOptions {
    pub apps: Vec<AppSpec>,
    /// Loadings of running applications (ClusterFetch's evaluation), measured after the apps.
    pub loadings: Vec<LoadingSpec>,
    pub rounds: u32,
    pub scenarios: Vec<Scenario>,
    /// Benchmark state: its own database, work directories, the suite's virtualenv.
    pub state_dir: PathBuf,
    pub warmstart_exe: PathBuf,
    /// K values of the together experiment (empty: skip it).
    pub together: Vec<usize>,
    /// Learning runs per app.
    pub learn_runs: u32,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Machine {
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub memory_mb: u64,
    pub disk: String,
    pub disk_rotational: Option<bool>,
    pub scheduler: String,
    /// Whether the launcher the bench ran (`warmstart`) was linked statically (None: not
    /// known, a result of an older version).
    #[serde(default)]
    pub launcher_static: Option<bool>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Measurement {
    pub scenario: String,
    pub round: u32,
    pub ms: f64,
    pub ready: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ScenarioSummary {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub n: usize,
    pub failed: usize,
    /// Median over the cold median.
    pub normalized: f64,
    /// (cold - t) / (cold - warm), medians.
    pub gap_closed: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Overhead {
    /// Traced learning launch over the untraced cold launch (medians).
    pub learning_slowdown: Option<f64>,
    pub plan_build_ms: f64,
    pub plan_bytes: u64,
    /// `warm+warmstart` minus `warm`: the median of the rounds' differences (each round
    /// runs both seconds apart), or of the medians when no round has both.
    pub warm_overhead_ms: Option<f64>,
    /// Peak RSS of the prefetcher (`warmstart prefetch`), KiB.
    pub prefetcher_peak_rss_kb: Option<u64>,
    /// The front's own time before a warm launch, by round: from the kernel's exec of
    /// `warmstart` to its exec of the app, ms (`ExecClock`).
    #[serde(default)]
    pub front_exec_rounds: Vec<(u32, f64)>,
    /// Their median.
    #[serde(default)]
    pub front_exec_ms: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AppResult {
    pub name: String,
    pub command: Vec<String>,
    pub plan_entries: u64,
    pub plan_data_bytes: u64,
    pub plan_files: u64,
    pub resolved_fraction: f64,
    pub learning_run_ms: Vec<f64>,
    pub samples: Vec<Measurement>,
    pub summary: BTreeMap<String, ScenarioSummary>,
    /// max(prefetch-only, warm), medians (FAST 5.1).
    pub t_bound_ms: Option<f64>,
    pub overhead: Overhead,
    /// Round-1 CPU/disk timelines of the cold and warmstart launches.
    pub timeline: BTreeMap<String, Vec<Point>>,
    /// When the disk was last busy before ready, from the timeline (the papers' definition of
    /// launch completion, approximated at the sampling period).
    pub last_io_ms: BTreeMap<String, f64>,
    pub error: Option<String>,
    /// What the per-app adaptation ended at after all rounds.
    #[serde(default)]
    pub adapt: Adapt,
    /// The plan's device floor and accuracy.
    #[serde(default)]
    pub accuracy: Accuracy,
}

/// How close the prefetch comes to what the device can do, and how accurate the plan is:
/// the floor is measured right after learning; the rest comes from one traced prefetched
/// launch after the rounds (`warmstart explain --no-cold`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Accuracy {
    pub floor: Option<crate::device::Floor>,
    /// `(round, floor ms)`: the floor measured again right after each round's prefetch-only
    /// launch. The device's speed drifts by up to 45% between rounds a minute apart
    /// (docs/measurements.md, 2026-11-28, eighth entry), so a prefetch is compared with the
    /// floor of its own round.
    #[serde(default)]
    pub floor_rounds: Vec<(u32, f64)>,
    /// The median over rounds of prefetch-only's time over its round's floor.
    #[serde(default)]
    pub floor_ratio: Option<f64>,
    /// Pages the prefetched launch still read itself that the plan lacks, over the plan's.
    pub miss_ratio: Option<f64>,
    /// Pages the prefetch read that the launch never touched, over the plan's.
    pub waste: Option<f64>,
    /// Plan entries the launch needed before the prefetch had them in memory, and all the
    /// entries it needed.
    pub inversions: Option<u64>,
    pub needed_entries: Option<u64>,
    /// The traced launch's critical path off the CPU, and its largest parts.
    pub off_cpu_ms: Option<f64>,
    pub top_waits: Vec<(String, f64)>,
    /// Per plan data entry of the traced launch: (issued, completed, needed) ms.
    pub timeline: Vec<(Option<f64>, Option<f64>, Option<f64>)>,
    pub error: Option<String>,
}

/// The end state of an app's adaptive settings: Paralfetch's dynamic scheduling and auto's
/// choice, from the benchmark's store.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Adapt {
    pub paralfetch_raises: u32,
    pub shift_kib: Option<u64>,
    pub distance: Option<u64>,
    pub auto_strategy: Option<String>,
    pub auto_reason: Option<String>,
    /// The strategies as emulation ranked them after learning, fastest first.
    #[serde(default)]
    pub emulated: Vec<String>,
    /// What `auto` chose for its cold launches during the run, oldest first.
    #[serde(default)]
    pub auto_used: Vec<String>,
}

impl Adapt {
    /// Of `auto`'s cold launches during the run, how many went to a strategy (or a plain
    /// launch) whose median in this run is more than `auto::SWITCH_MARGIN` slower than the
    /// best strategy's: (launches, on a worse one). None without auto's launches or medians.
    pub fn auto_on_worse(
        &self,
        summary: &BTreeMap<String, ScenarioSummary>,
    ) -> Option<(usize, usize)> {
        let median = |name: &str| {
            let scenario = if name == crate::schedule::auto::PLAIN {
                "cold".to_string()
            } else {
                format!("warmstart:{name}")
            };
            summary
                .get(&scenario)
                .filter(|s| s.n > 0)
                .map(|s| s.median_ms)
        };
        let best = crate::schedule::Strategy::ALL
            .iter()
            .filter_map(|s| median(s.name()))
            .min_by(f64::total_cmp)?;
        if self.auto_used.is_empty() {
            return None;
        }
        let worse = self
            .auto_used
            .iter()
            .filter(|s| {
                median(s).is_some_and(|m| m > best * (1.0 + crate::schedule::auto::SWITCH_MARGIN))
            })
            .count();
        Some((self.auto_used.len(), worse))
    }
}

fn adapt_of(db: &Path, app: &str, since_unix: i64) -> Adapt {
    let Ok(store) = Store::open(db) else {
        return Adapt::default();
    };
    let Ok(row) = store.find_app(app) else {
        return Adapt::default();
    };
    let settings = store.app_settings(row.id).unwrap_or_default();
    let queueing = store
        .device_facts_any()
        .ok()
        .flatten()
        .is_none_or(|f| f.queueing());
    let p = settings
        .paralfetch
        .unwrap_or_else(|| crate::schedule::ParalfetchSettings::defaults(queueing));
    let history = store.launches(row.id, 200).unwrap_or_default();
    let (st, why) = crate::schedule::auto::choose(&history, queueing, settings.emulated.as_ref());
    Adapt {
        paralfetch_raises: settings.paralfetch_raises,
        shift_kib: Some(p.shift_bytes / 1024),
        distance: Some(p.distance),
        auto_strategy: Some(crate::schedule::auto::name_of(st).to_string()),
        auto_reason: Some(why),
        emulated: settings
            .emulated
            .map(|r| r.strategies.into_iter().map(|s| s.0).collect())
            .unwrap_or_default(),
        auto_used: history
            .iter()
            .rev()
            .filter(|l| {
                l.auto
                    && l.mode == crate::store::mode::RUN
                    && l.at_unix >= since_unix
                    && crate::schedule::auto::counts(l)
            })
            .filter_map(|l| l.strategy.clone())
            .collect(),
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TogetherResult {
    pub k: usize,
    pub apps: Vec<String>,
    pub cold_ms: Vec<f64>,
    pub warmstart_ms: Vec<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GeoRow {
    pub normalized: Option<f64>,
    pub gap_closed: Option<f64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Results {
    pub machine: Machine,
    pub rounds: u32,
    pub scenarios: Vec<String>,
    pub apps: Vec<AppResult>,
    /// Across apps: geometric mean of normalised time, and the gap closed by that mean,
    /// (1 - g) / (1 - g_warm), which counts every app, also those a scenario made slower.
    pub geomean: BTreeMap<String, GeoRow>,
    /// Each scenario's launches over `warmstart`'s of the same app and round (`PAIRED_BASE`).
    #[serde(default)]
    pub paired: BTreeMap<String, PairedRatio>,
    pub together: Vec<TogetherResult>,
    /// Loadings of running applications: cold, warm, and with the daemon's bursts.
    #[serde(default)]
    pub loadings: Vec<LoadingResult>,
}

/// Progress callback: (what is running now, steps done, steps total).
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

pub fn machine(launcher: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_default();
    let disk = disk_of(Path::new("/")).unwrap_or_default();
    let sysq = |f: &str| {
        std::fs::read_to_string(format!("/sys/block/{disk}/queue/{f}"))
            .ok()
            .map(|s| s.trim().to_string())
    };
    Machine {
        kernel: nix::sys::utsname::uname()
            .map(|u| u.release().to_string_lossy().into_owned())
            .unwrap_or_default(),
        cpu,
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_mb: std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines().find_map(|l| {
                    l.strip_prefix("MemTotal:").map(|v| {
                        v.trim()
                            .trim_end_matches("kB")
                            .trim()
                            .parse::<u64>()
                            .unwrap_or(0)
                            / 1024
                    })
                })
            })
            .unwrap_or(0),
        disk_rotational: sysq("rotational").map(|r| r == "1"),
        scheduler: sysq("scheduler").unwrap_or_default(),
        launcher_static: crate::launch::statically_linked(launcher).ok().flatten(),
        disk: format!(
            "{disk} ({})",
            std::fs::read_to_string(format!("/sys/block/{disk}/device/model"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "virtual".into())
        ),
    }
}

/// A warmstart daemon of the benchmark's own (database, configuration, run directory).
pub(super) struct BenchDaemon {
    child: std::process::Child,
    /// Kept while it runs: it notifies again as it stops.
    notify: ReadySocket,
}

impl BenchDaemon {
    /// Start it on the state in `dir` (its database, `config.toml`, run directory, log), and
    /// wait until it watches exec events: it says so the way it tells systemd
    /// (`READY=1` on `NOTIFY_SOCKET`, here a socket of the benchmark's). Its pid file comes
    /// first, at the start of its setup, which took 170-210 ms with its files not in memory
    /// (the state of a round, whose earlier scenarios dropped the cache): a launch made
    /// 200 ms after the pid file could exec before the daemon saw it, or beside the rest of
    /// its setup (docs/measurements.md, 2026-11-27, seventh entry).
    pub(super) fn start(ctx: &Ctx<'_>, dir: &Path) -> Result<BenchDaemon, BenchError> {
        let run_dir = dir.join("run");
        // Its log is kept: when it does not come up, the benchmark says why.
        let log_path = dir.join("daemon.log");
        let log = std::fs::create_dir_all(dir)
            .and_then(|_| std::fs::File::create(&log_path))
            .map(Stdio::from)
            .unwrap_or_else(|_| Stdio::null());
        let notify = ReadySocket::bind(&run_dir)?;
        let child = Command::new(&ctx.opts.warmstart_exe)
            .args([
                "--db",
                &dir.join("daemon.db").display().to_string(),
                "-q",
                "daemon",
                "--config",
            ])
            .arg(dir.join("config.toml"))
            .arg("--run-dir")
            .arg(&run_dir)
            .env("NOTIFY_SOCKET", &notify.path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|e| BenchError::Setup(format!("cannot start the daemon: {e}")))?;
        let mut d = BenchDaemon { child, notify };
        let t0 = Instant::now();
        while !d.notify.ready() {
            let exited = d.child.try_wait().ok().flatten();
            if exited.is_some() || t0.elapsed() > Duration::from_secs(30) {
                let last = std::fs::read_to_string(&log_path)
                    .ok()
                    .and_then(|l| l.lines().last().map(str::to_string))
                    .unwrap_or_default();
                return Err(BenchError::Setup(format!(
                    "the daemon did not start ({}){}",
                    exited.map_or("not ready after 30 s".to_string(), |e| e.to_string()),
                    if last.is_empty() {
                        String::new()
                    } else {
                        format!(": {last} (log: {})", log_path.display())
                    }
                )));
            }
        }
        Ok(d)
    }
}

/// The receiving end of the systemd notification protocol (sd_notify(3)): a datagram socket
/// whose path a service finds in `NOTIFY_SOCKET`. Removed when dropped.
struct ReadySocket {
    path: PathBuf,
    sock: std::os::unix::net::UnixDatagram,
}

impl ReadySocket {
    fn bind(dir: &Path) -> Result<ReadySocket, BenchError> {
        let path = dir.join("notify.sock");
        let setup = |e: std::io::Error| BenchError::Setup(format!("{}: {e}", path.display()));
        std::fs::create_dir_all(dir).map_err(setup)?;
        // One left by a benchmark that was killed.
        let _ = std::fs::remove_file(&path);
        let sock = std::os::unix::net::UnixDatagram::bind(&path).map_err(setup)?;
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .map_err(setup)?;
        Ok(ReadySocket { path, sock })
    }

    /// Whether a message received within the next 20 ms says `READY=1`.
    fn ready(&self) -> bool {
        let mut buf = [0u8; 4096];
        match self.sock.recv(&mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n])
                .lines()
                .any(|l| l == "READY=1"),
            Err(_) => false,
        }
    }
}

impl Drop for ReadySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Let the benchmark's daemon learn every app from plain launches (a first one it only
/// remembers, N_rawseq to learn from, one that finds the new plan). Its prefetched launches
/// here are checked, each of them: a few launches stand for the days a user's daemon has
/// run (checking every `n_chk`-th launch, 5 by default). A program launched two ways in the
/// suite (GIMP's batch and window, LibreOffice's conversion and editor) is two apps, one per
/// mode (`AppKey`), learned apart as a user's would be. During the rounds checks are off so
/// that measurements are never traced.
fn prepare_daemon(ctx: &Ctx<'_>, apps: &[&AppSpec]) -> Result<(), BenchError> {
    let dir = ctx.opts.state_dir.join("daemon");
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", dir.display())))?;
    let mut include: Vec<String> = Vec::new();
    for app in apps {
        let argv = ctx.argv(app);
        if let Ok(p) = crate::launch::resolve_command(std::ffi::OsStr::new(&argv[0])) {
            let canon = std::fs::canonicalize(&p).unwrap_or(p);
            include.push(canon.display().to_string());
        }
    }
    let cfg = |n_chk: u32| {
        format!(
            "include = {include:?}\nn_rawseq = 2\nn_chk = {n_chk}\nmin_launch_kb = 0\nt_idle_secs = 2.0\n"
        )
    };
    let write = |c: String| {
        std::fs::write(dir.join("config.toml"), c).map_err(|e| BenchError::Setup(e.to_string()))
    };
    write(cfg(1))?;
    {
        let _d = BenchDaemon::start(ctx, &dir)?;
        for app in apps {
            for _ in 0..4 {
                ctx.cold()?;
                ctx.run_one(app, &ctx.argv(app), &ctx.ready(app))?;
                // The learning trace ends on exit or after T_idle: give it that long.
                std::thread::sleep(Duration::from_millis(2500));
            }
        }
    }
    write(cfg(1_000_000))
}

pub(super) struct Ctx<'a> {
    pub(super) opts: &'a BenchOptions,
    db: PathBuf,
    pub(super) venv: PathBuf,
    display: Option<String>,
    pub(super) interrupt: &'a AtomicUsize,
}

impl Ctx<'_> {
    fn ws(&self) -> Vec<String> {
        vec![
            self.opts.warmstart_exe.display().to_string(),
            "--db".into(),
            self.db.display().to_string(),
            "-q".into(),
        ]
    }

    pub(super) fn work(&self, app: &AppSpec) -> PathBuf {
        self.opts.state_dir.join("work").join(&app.name)
    }

    pub(super) fn argv(&self, app: &AppSpec) -> Vec<String> {
        let w = self.work(app);
        app.command
            .iter()
            .map(|a| expand(a, &w, &self.venv))
            .collect()
    }

    pub(super) fn env(&self, app: &AppSpec) -> Vec<(String, String)> {
        let w = self.work(app);
        let mut env: Vec<(String, String)> = app
            .env
            .iter()
            .map(|(k, v)| (k.clone(), expand(v, &w, &self.venv)))
            .collect();
        // Temporary files stay in the app's work directory, not in the system's /tmp (soffice
        // leaves one behind at every launch the bench ends).
        if !env.iter().any(|(k, _)| k == "TMPDIR") {
            env.push(("TMPDIR".into(), tmp_dir(&w).display().to_string()));
        }
        env
    }

    /// The X display an app's launches get: a window app's only. Every launch of an app,
    /// learning ones included, must see the same environment: `record` of the suite's batch
    /// apps once ran with the harness's display while their timed launches did not, and
    /// inkscape-export then learned 5 MiB of GTK display code (libgtk-3) its timed launches
    /// never ran (record's plan 74.8 MiB against 69.8 learned without it; waste 15.6% in
    /// bench/results; docs/measurements.md, 2026-11-29, seventh entry).
    pub(super) fn display_for(&self, ready: &Ready) -> Option<&str> {
        ready.is_gui().then_some(self.display.as_deref()).flatten()
    }

    pub(super) fn ready(&self, app: &AppSpec) -> Ready {
        match &app.ready {
            Ready::File(p) => Ready::File(expand(p, &self.work(app), &self.venv)),
            r => r.clone(),
        }
    }

    pub(super) fn run_one(
        &self,
        app: &AppSpec,
        argv: &[String],
        ready: &Ready,
    ) -> Result<Outcome, BenchError> {
        self.settle();
        let env = self.env(app);
        let work = self.work(app);
        launch(
            &LaunchSpec {
                argv,
                env: &env,
                cwd: &work,
                ready,
                timeout: app.timeout,
                display: self.display_for(ready),
            },
            self.interrupt,
        )
    }

    pub(super) fn cold(&self) -> Result<(), BenchError> {
        self.settle();
        make_cold().map_err(|e| BenchError::Setup(format!("dropping caches: {e}")))
    }

    /// Read warmstart's own files (the launcher and its database) into the page cache. The
    /// warm launches follow a cold one, whose cache drop took warmstart's files too: a warm
    /// launch through warmstart then paid warmstart's own cold start (pdflatex, 12 rounds:
    /// +12.5 ms over a plain warm launch for the first launch through warmstart after the
    /// drop, -8.2 for the next; docs/measurements.md, 2026-11-27, sixth entry), which no
    /// launch on a warm machine pays.
    fn warm_own_files(&self) {
        let exe = std::fs::canonicalize(&self.opts.warmstart_exe)
            .unwrap_or_else(|_| self.opts.warmstart_exe.clone());
        let mut wal = self.db.clone().into_os_string();
        wal.push("-wal");
        for f in [exe, self.db.clone(), PathBuf::from(wal)] {
            // Missing (no WAL yet) is fine: nothing to warm.
            let _ = std::fs::read(&f);
        }
    }

    /// The last warmstart launch's prefetcher gone first (see `settle`).
    fn settle(&self) {
        if !super::settle(&self.opts.warmstart_exe, super::SETTLE_CAP) {
            tracing::warn!(
                "{} still runs after {} s; launching anyway",
                self.opts.warmstart_exe.display(),
                super::SETTLE_CAP.as_secs()
            );
        }
    }
}

/// The TMPDIR of an app's launches, emptied when the app is set up.
fn tmp_dir(work: &Path) -> PathBuf {
    work.join("tmp")
}

pub(super) fn setup_app(ctx: &Ctx<'_>, app: &AppSpec) -> Result<(), BenchError> {
    let work = ctx.work(app);
    let tmp = tmp_dir(&work);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", tmp.display())))?;
    for line in &app.setup {
        let line = expand(line, &work, &ctx.venv);
        let st = Command::new("sh")
            .args(["-c", &line])
            .current_dir(&work)
            .status()
            .map_err(|e| BenchError::Setup(format!("setup of {}: {e}", app.name)))?;
        if !st.success() {
            return Err(BenchError::Setup(format!(
                "setup of {} failed: {line}",
                app.name
            )));
        }
    }
    let cmd = &ctx.argv(app)[0];
    if crate::launch::resolve_command(std::ffi::OsStr::new(cmd)).is_err() {
        return Err(BenchError::Setup(format!(
            "`{cmd}` is not installed (run: sudo bench/install-suite)"
        )));
    }
    Ok(())
}

/// `warmstart record` as a subprocess. Apps that do not exit by themselves are closed after
/// each learning run becomes ready (the recorder waits for them to exit between runs).
fn learn_app(ctx: &Ctx<'_>, app: &AppSpec, res: &mut AppResult) -> Result<(), BenchError> {
    learn_as(ctx, app, &app.name, None, res)
}

/// `learn_app` under another name, the kernel events in `hidden` masked (the results go to a
/// scratch `AppResult`: the app's own figures are its full learning's).
fn learn_inserts_only(ctx: &Ctx<'_>, app: &AppSpec) -> Result<(), BenchError> {
    let mut scratch = AppResult::default();
    learn_as(
        ctx,
        app,
        &inserts_only_name(&app.name),
        Some(OLD_KERNEL_HIDDEN),
        &mut scratch,
    )
}

fn learn_as(
    ctx: &Ctx<'_>,
    app: &AppSpec,
    name: &str,
    hidden: Option<&str>,
    res: &mut AppResult,
) -> Result<(), BenchError> {
    let mut argv = ctx.ws();
    argv.extend(["record", "--json", "--runs"].map(String::from));
    argv.push(ctx.opts.learn_runs.to_string());
    if !matches!(app.ready, Ready::Exit) {
        // The harness closes these apps after each learning run; their status is not theirs.
        argv.push("--allow-failure".into());
    }
    argv.extend(["--app".to_string(), name.to_string(), "--".to_string()]);
    argv.extend(ctx.argv(app));
    let mut cmd = Command::new(&argv[0]);
    if let Some(h) = hidden {
        cmd.env("WARMSTART_HIDE_EVENTS", h);
    }
    cmd.args(&argv[1..])
        .current_dir(ctx.work(app))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in ctx.env(app) {
        cmd.env(k, v);
    }
    if let Some(d) = ctx.display_for(&app.ready) {
        cmd.env("DISPLAY", d);
    }
    let deadline =
        Instant::now() + app.timeout * (ctx.opts.learn_runs + 1) + Duration::from_secs(30);
    let (status, out, err) = run_to_ready(ctx, app, cmd, deadline, "learning")?;
    if !status.success() {
        return Err(BenchError::Setup(format!(
            "learning {} failed: {}",
            app.name,
            err.lines()
                .rev()
                .find(|l| l.starts_with("warmstart:"))
                .unwrap_or(err.trim())
        )));
    }
    let v: serde_json::Value = out
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| BenchError::Setup(format!("learning {}: no JSON result", app.name)))?;
    res.plan_entries = v["entries"].as_u64().unwrap_or(0);
    res.plan_data_bytes = v["data_bytes"].as_u64().unwrap_or(0);
    res.plan_files = v["files"].as_u64().unwrap_or(0);
    res.resolved_fraction = v["resolved_fraction"].as_f64().unwrap_or(0.0);
    res.learning_run_ms = v["run_ms"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    res.overhead.plan_build_ms = v["plan_build_ms"].as_f64().unwrap_or(0.0);
    res.overhead.plan_bytes = v["plan_bytes"].as_u64().unwrap_or(0);
    Ok(())
}

/// Run `cmd` (a `warmstart` command launching `app`, in its own process group, its output
/// piped) to its end and collect its output. A window app's launch under it is closed once
/// its window is up (`app_ready_under`), so that its plan, or its traced launch, ends where
/// the bench's timed launches end; `what` names the step in errors. Killed at `deadline`
/// or on Ctrl-C.
fn run_to_ready(
    ctx: &Ctx<'_>,
    app: &AppSpec,
    mut cmd: Command,
    deadline: Instant,
    what: &str,
) -> Result<(std::process::ExitStatus, String, String), BenchError> {
    let mut child = cmd.spawn().map_err(|e| {
        BenchError::Setup(format!("{what} {}: cannot run warmstart: {e}", app.name))
    })?;
    let pid = child.id() as i32;
    let out_t = read_all(child.stdout.take());
    let err_t = read_all(child.stderr.take());
    // Close apps that stay open: the launch is a descendant of the warmstart command.
    let closer = !matches!(app.ready, Ready::Exit);
    let status = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break st;
        }
        if ctx.interrupt.load(Ordering::SeqCst) != 0 || Instant::now() > deadline {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGINT,
            );
            let _ = child.wait();
            return Err(if ctx.interrupt.load(Ordering::SeqCst) != 0 {
                BenchError::Interrupted
            } else {
                BenchError::Setup(format!("{what} {} timed out", app.name))
            });
        }
        if closer && app_ready_under(ctx, app, pid) {
            close_descendants(pid);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok((
        status,
        out_t.join().unwrap_or_default(),
        err_t.join().unwrap_or_default(),
    ))
}

/// A thread reading `r` to its end (nothing if there is none).
fn read_all<R: Read + Send + 'static>(r: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(mut r) = r {
            let _ = r.read_to_string(&mut s);
        }
        s
    })
}

/// Whether a learning run's app (a descendant of `root`) looks ready now: for window apps,
/// a matching mapped window; for output or file apps, the file (output is not watched while
/// learning: those apps are closed when the recorder reports the idle period).
fn app_ready_under(ctx: &Ctx<'_>, app: &AppSpec, root: i32) -> bool {
    if crate::sys::descendants(root).is_empty() {
        return false;
    }
    match ctx.ready(app) {
        Ready::File(p) => Path::new(&p).exists(),
        Ready::Window(re) => ctx
            .display
            .as_deref()
            .is_some_and(|d| window_present(d, &re)),
        Ready::Output(_) | Ready::Exit => false,
    }
}

fn window_present(display: &str, re: &regex::Regex) -> bool {
    let out = Command::new("xwininfo")
        .args(["-root", "-children", "-display", display])
        .output();
    let Ok(out) = out else { return false };
    String::from_utf8_lossy(&out.stdout).lines().any(|l| {
        // 0x200075 "Title": ("class" "Class")  1165x924+57+50  +57+50
        l.split('"').nth(1).is_some_and(|t| re.is_match(t))
            && !l.contains(" 1x1+")
            && !l.contains(" 10x10+")
    })
}

fn close_descendants(root: i32) {
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        for p in crate::sys::descendants(root) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(p, sig) };
        }
        let t = Instant::now();
        while !crate::sys::descendants(root).is_empty() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The device floor of an app's launch-order plan.
fn floor_of(db: &Path, app: &str) -> Option<crate::device::Floor> {
    let store = Store::open(db).ok()?;
    let row = store.find_app(app).ok()?;
    let plan = store.plan(&row).ok()??;
    drop(store);
    crate::device::floor(&plan)
        .map_err(|e| tracing::warn!("{app}: measuring the plan's floor: {e}"))
        .ok()
}

/// One prefetched launch of `app` traced and attributed by `warmstart explain --no-cold`
/// (this binary): miss ratio, waste, inversions, where its time went. A window app is
/// closed once its window is up, as in learning (at the latest after twice its median warm
/// launch, at least 3 s: explain's own timeout).
fn explained(ctx: &Ctx<'_>, app: &AppSpec, res: &AppResult) -> Result<Accuracy, BenchError> {
    let me = std::env::current_exe()
        .map_err(|e| BenchError::Setup(format!("locating the benchmark binary: {e}")))?;
    let timeout = if matches!(app.ready, Ready::Exit) {
        app.timeout.as_secs_f64()
    } else {
        let warm = res
            .samples
            .iter()
            .filter(|s| s.scenario == "warm" && s.ready)
            .map(|s| s.ms)
            .collect::<Vec<_>>();
        (Spread::of(&warm).map_or(3000.0, |s| s.median) * 2.0 / 1e3).max(3.0)
    };
    ctx.cold()?;
    let mut cmd = Command::new(me);
    cmd.args([
        "--db",
        &ctx.db.display().to_string(),
        "-q",
        "explain",
        "--no-cold",
        "--json",
    ])
    .args([
        "--timeout",
        &format!("{timeout:.1}"),
        "--app",
        &app.name,
        "--",
    ])
    .args(ctx.argv(app))
    .current_dir(ctx.work(app))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    for (k, v) in ctx.env(app) {
        cmd.env(k, v);
    }
    if let Some(d) = ctx.display_for(&app.ready) {
        cmd.env("DISPLAY", d);
    }
    // The plan's learning ended where the window came up; so does the traced launch, or
    // what the app reads after (Writer: ICU's data, Mesa's LLVM) counts as misses.
    let deadline = Instant::now() + Duration::from_secs_f64(timeout) + Duration::from_secs(60);
    let (_, out, _) = run_to_ready(ctx, app, cmd, deadline, "explain of")?;
    let v: serde_json::Value = serde_json::from_str(&out)
        .map_err(|_| BenchError::Setup(format!("explain of {} gave no result", app.name)))?;
    let l = v["launches"]
        .as_array()
        .and_then(|a| a.iter().find(|l| l["scenario"] == "warmstart"))
        .ok_or_else(|| {
            BenchError::Setup(format!("explain of {}: no prefetched launch", app.name))
        })?;
    let n = |k: &str| l[k].as_u64();
    let plan = n("plan_pages").unwrap_or(0).max(1) as f64;
    let states = &l["entry_states"];
    let st = |k: &str| states[k].as_u64().unwrap_or(0);
    let mut waits: Vec<(String, f64)> = l["critical"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !k.starts_with("on CPU"))
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    waits.sort_by(|a, b| b.1.total_cmp(&a.1));
    let off: f64 = waits.iter().map(|w| w.1).sum();
    waits.truncate(3);
    let f = |e: &serde_json::Value, k: &str| e[k].as_f64();
    Ok(Accuracy {
        floor: None,
        floor_rounds: vec![],
        floor_ratio: None,
        miss_ratio: n("missed_pages").map(|m| m as f64 / plan),
        waste: n("wasted_pages").map(|w| w as f64 / plan),
        inversions: Some(st("in_flight") + st("app_first")),
        needed_entries: Some(st("in_flight") + st("app_first") + st("in_time")),
        off_cpu_ms: Some(off),
        top_waits: waits,
        timeline: l["entries"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| (f(e, "issued_ms"), f(e, "completed_ms"), f(e, "needed_ms")))
                    .collect()
            })
            .unwrap_or_default(),
        error: None,
    })
}

fn planned_files(db: &Path, app: &str) -> Vec<String> {
    let Ok(store) = Store::open(db) else {
        return vec![];
    };
    let Ok(row) = store.find_app(app) else {
        return vec![];
    };
    let Ok(Some(plan)) = store.plan(&row) else {
        return vec![];
    };
    plan.files
        .iter()
        .filter(|f| f.kind == FileKind::Regular)
        .map(|f| f.path.display().to_string())
        .collect()
}

fn measure(
    ctx: &Ctx<'_>,
    app: &AppSpec,
    sc: &Scenario,
    round: u32,
    res: &mut AppResult,
) -> Result<(), BenchError> {
    let argv = ctx.argv(app);
    let ready = ctx.ready(app);
    let mut ws_run = ctx.ws();
    let name = match sc {
        Scenario::InsertsOnly => inserts_only_name(&app.name),
        _ => app.name.clone(),
    };
    ws_run.extend(["run".to_string(), "--app".to_string(), name]);
    if let Scenario::Warmstart(Some(s)) = sc {
        ws_run.extend(["--strategy".to_string(), s.clone()]);
    }
    ws_run.push("--".into());
    ws_run.extend(argv.iter().cloned());
    let mut prefetch = ctx.ws();
    prefetch.extend(["prefetch", "--wait", &app.name].map(String::from));
    let sample = |ctx: &Ctx<'_>,
                  argv: &[String],
                  r: &Ready,
                  timeline: bool|
     -> Result<(Outcome, Vec<Point>), BenchError> {
        let sampler = timeline.then(|| {
            Sampler::start(
                disk_of(&ctx.opts.state_dir).unwrap_or_else(|| "vda".into()),
                Duration::from_millis(10),
            )
        });
        let o = ctx.run_one(app, argv, r)?;
        let pts: Vec<Point> = sampler
            .map(Sampler::finish)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| p.t_ms <= o.ms + 10.0)
            .collect();
        Ok((o, pts))
    };
    let timeline = round == 1 && matches!(sc, Scenario::Cold | Scenario::Warmstart(None));
    let (ms, ok) = match sc {
        Scenario::Cold | Scenario::Warmstart(_) | Scenario::InsertsOnly => {
            ctx.cold()?;
            let a = if *sc == Scenario::Cold {
                &argv
            } else {
                &ws_run
            };
            let (o, pts) = sample(ctx, a, &ready, timeline)?;
            if timeline {
                if let Some(p) = pts.iter().rev().find(|p| p.disk_busy > 0.0) {
                    res.last_io_ms.insert(sc.name(), p.t_ms);
                }
                res.timeline.insert(sc.name(), pts);
            }
            (o.ms, o.ready)
        }
        Scenario::Warm => {
            let o = ctx.run_one(app, &argv, &ready)?;
            (o.ms, o.ready)
        }
        Scenario::WarmWarmstart => {
            ctx.warm_own_files();
            let clock = ExecClock::start();
            let o = ctx.run_one(app, &ws_run, &ready)?;
            if let Some(ms) = clock.and_then(|c| c.front_ms(&ws_run[0])) {
                res.overhead.front_exec_rounds.push((round, ms));
            }
            (o.ms, o.ready)
        }
        Scenario::PrefetchOnly => {
            ctx.cold()?;
            let o = ctx.run_one(app, &prefetch, &Ready::Exit)?;
            // Its peak memory, once per app, from a prefetch of its own that reports it (the
            // timed one's `ru_maxrss` is the bench's own high-water mark: 72.4 MiB for every
            // app in the suite run of d3f58e1).
            if res.overhead.prefetcher_peak_rss_kb.is_none() {
                ctx.cold()?;
                res.overhead.prefetcher_peak_rss_kb = prefetcher_peak_rss(&prefetch);
            }
            let ok = o.ready && o.exit.is_some_and(|e| e.success());
            if ok {
                if let Some(f) = floor_of(&ctx.db, &app.name) {
                    res.accuracy.floor_rounds.push((round, f.floor_ms));
                }
            }
            (o.ms, ok)
        }
        Scenario::Daemon => {
            let d = BenchDaemon::start(ctx, &ctx.opts.state_dir.join("daemon"))?;
            ctx.cold()?;
            let o = ctx.run_one(app, &argv, &ready);
            drop(d);
            let o = o?;
            (o.ms, o.ready)
        }
        Scenario::LaunchBursts => {
            let d = BenchDaemon::start(ctx, &loading::launch_bursts_dir(ctx))?;
            ctx.cold()?;
            let o = ctx.run_one(app, &argv, &ready);
            // The burst's check runs (and counts) before the daemon stops.
            std::thread::sleep(loading::CHECK_WAIT);
            drop(d);
            let o = o?;
            (o.ms, o.ready)
        }
        Scenario::FetchThenLaunch => {
            ctx.cold()?;
            let p = ctx.run_one(app, &prefetch, &Ready::Exit)?;
            let o = ctx.run_one(app, &argv, &ready)?;
            (p.ms + o.ms, p.ready && o.ready)
        }
        Scenario::WholeFiles => {
            ctx.cold()?;
            let files = planned_files(&ctx.db, &app.name);
            let vm = Command::new("vmtouch")
                .arg("-q")
                .arg("-t")
                .args(&files)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| {
                    BenchError::Setup(format!(
                        "cannot run vmtouch (install it: bench/install-suite): {e}"
                    ))
                })?;
            let o = ctx.run_one(app, &argv, &ready);
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(vm.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = crate::sys::wait4(vm.id() as i32, false);
            let o = o?;
            (o.ms, o.ready)
        }
    };
    res.samples.push(Measurement {
        scenario: sc.name(),
        round,
        ms,
        ready: ok,
    });
    Ok(())
}

/// Per scenario: median, spread, failures, normalised to cold and the gap closed.
pub(super) fn scenario_summaries(samples: &[Measurement]) -> BTreeMap<String, ScenarioSummary> {
    let mut by: BTreeMap<String, (Vec<f64>, usize)> = BTreeMap::new();
    for s in samples {
        let e = by.entry(s.scenario.clone()).or_default();
        if s.ready {
            e.0.push(s.ms);
        } else {
            e.1 += 1;
        }
    }
    let med = |name: &str| {
        by.get(name)
            .and_then(|(v, _)| Spread::of(v))
            .map(|s| s.median)
    };
    let (cold, warm) = (med("cold"), med("warm"));
    let mut out = BTreeMap::new();
    for (name, (v, failed)) in &by {
        let sp = Spread::of(v).unwrap_or_default();
        out.insert(
            name.clone(),
            ScenarioSummary {
                median_ms: sp.median,
                min_ms: sp.min,
                max_ms: sp.max,
                n: sp.n,
                failed: *failed,
                normalized: cold.map_or(0.0, |c| if c > 0.0 { sp.median / c } else { 0.0 }),
                gap_closed: match (cold, warm) {
                    (Some(c), Some(w)) if sp.n > 0 => gap_closed(c, w, sp.median),
                    _ => None,
                },
            },
        );
    }
    out
}

fn summarize(res: &mut AppResult) {
    res.summary = scenario_summaries(&res.samples);
    let med = |name: &str| {
        res.summary
            .get(name)
            .filter(|s| s.n > 0)
            .map(|s| s.median_ms)
    };
    let warm = med("warm");
    let cold = med("cold");
    res.t_bound_ms = match (med("prefetch-only"), warm) {
        (Some(p), Some(w)) => Some(p.max(w)),
        (None, Some(w)) => Some(w),
        _ => None,
    };
    res.overhead.front_exec_ms = Spread::of(
        &res.overhead
            .front_exec_rounds
            .iter()
            .map(|r| r.1)
            .collect::<Vec<_>>(),
    )
    .map(|s| s.median);
    res.overhead.warm_overhead_ms = paired_median(&res.samples, "warm+warmstart", "warm").or(
        match (med("warm+warmstart"), warm) {
            (Some(a), Some(w)) => Some(a - w),
            _ => None,
        },
    );
    res.overhead.learning_slowdown = match (Spread::of(&res.learning_run_ms), cold) {
        (Some(l), Some(c)) if c > 0.0 => Some(l.median / c),
        _ => None,
    };
    res.accuracy.floor_ratio = floor_ratio(&res.samples, &res.accuracy.floor_rounds);
}

/// What a warm launch through warmstart costs before the app starts, counted directly: from
/// the kernel's exec of `warmstart` to its exec of the application (tracefs
/// `sched_process_exec`). The wall-time difference to a plain warm launch carries the
/// launch's own spread (±100 ms and more per round for the long apps of the suite); this
/// does not. What it leaves out: the front's own exec before it, the watcher's CPU after.
struct ExecClock(crate::trace::tracefs::Instance);

impl ExecClock {
    fn start() -> Option<ExecClock> {
        let i = crate::trace::tracefs::Tracefs::open()
            .ok()?
            .create_instance("exec-clock")
            .ok()?;
        // Two events per launch: the smallest buffer will do.
        let _ = i.write("buffer_size_kb", "16");
        i.enable_event("sched", "sched_process_exec").ok()?;
        i.set_on(true).ok()?;
        Some(ExecClock(i))
    }

    /// The front's exec to the next exec of the same process, ms.
    fn front_ms(self, front: &str) -> Option<f64> {
        let _ = self.0.set_on(false);
        exec_to_exec(&self.0.read("trace").ok()?, front)
    }
}

/// From a tracefs text trace of `sched_process_exec`: the time from the exec of `front` to
/// the next exec of the same pid, ms.
fn exec_to_exec(trace: &str, front: &str) -> Option<f64> {
    let mut start = None;
    for e in trace
        .lines()
        .filter_map(crate::trace::event::parse_exec_text)
    {
        match start {
            None if e.filename == front => start = Some((e.ts, e.pid)),
            Some((t0, p)) if p == e.pid => return Some((e.ts - t0) * 1e3),
            _ => {}
        }
    }
    None
}

/// A round's scenarios in order: `warm` and `warm+warmstart` trade places every other
/// round, so that neither is always the first launch after the cold one and an order effect
/// cannot pass for warmstart's overhead. (None was seen: warm+warmstart over warm 0.975 with
/// warm first, 0.954 with it second; docs/measurements.md, 2026-11-28, twelfth entry.)
fn round_order(scenarios: &[Scenario], round: u32) -> Vec<&Scenario> {
    let mut v: Vec<&Scenario> = scenarios.iter().collect();
    let at = |s: &Scenario| v.iter().position(|x| **x == *s);
    if round % 2 == 0 {
        if let (Some(a), Some(b)) = (at(&Scenario::Warm), at(&Scenario::WarmWarmstart)) {
            v.swap(a, b);
        }
    }
    v
}

/// The median over rounds of prefetch-only's time over the floor measured in the same round
/// (rounds with a ready prefetch and a floor).
fn floor_ratio(samples: &[Measurement], floors: &[(u32, f64)]) -> Option<f64> {
    let r: Vec<f64> = floors
        .iter()
        .filter(|(_, f)| *f > 0.0)
        .filter_map(|&(round, f)| Some(ready_ms(samples, "prefetch-only", round)? / f))
        .collect();
    Spread::of(&r).map(|s| s.median)
}

/// The median over rounds of `a`'s time minus `b`'s in the same round (rounds where both
/// were ready). The VM's speed drifts within seconds and between rounds, so a difference of
/// a few ms shows in paired rounds, not in the difference of two medians (the per-app warm
/// overheads of the committed run scattered from -72 to +132 ms that way).
fn paired_median(samples: &[Measurement], a: &str, b: &str) -> Option<f64> {
    let d: Vec<f64> = round_pairs(samples, a, b)
        .into_iter()
        .map(|(x, y)| x - y)
        .collect();
    Spread::of(&d).map(|s| s.median)
}

/// The time of `scenario`'s launch in `round`, if it was ready.
fn ready_ms(samples: &[Measurement], scenario: &str, round: u32) -> Option<f64> {
    samples
        .iter()
        .find(|m| m.scenario == scenario && m.round == round && m.ready)
        .map(|m| m.ms)
}

/// `(a, b)` times of the rounds in which both launches were ready, by round.
fn round_pairs(samples: &[Measurement], a: &str, b: &str) -> Vec<(f64, f64)> {
    let mut rounds: Vec<u32> = samples.iter().map(|m| m.round).collect();
    rounds.sort_unstable();
    rounds.dedup();
    rounds
        .into_iter()
        .filter_map(|r| Some((ready_ms(samples, a, r)?, ready_ms(samples, b, r)?)))
        .collect()
}

/// Across apps: the geometric mean of each scenario's normalised time, and the gap closed
/// by that mean, (1 - g) / (1 - g_warm), which counts every app (a per-app gap can be
/// negative, which no geometric mean takes).
pub fn suite_means(results: &[AppResult], scenarios: &[String]) -> BTreeMap<String, GeoRow> {
    let norm_of = |name: &str| -> Option<f64> {
        let v: Vec<f64> = results
            .iter()
            .filter_map(|r| r.summary.get(name))
            .filter(|s| s.n > 0)
            .map(|s| s.normalized)
            .filter(|v| *v > 0.0)
            .collect();
        geomean(&v)
    };
    let warm = norm_of("warm");
    scenarios
        .iter()
        .map(|name| {
            let g = norm_of(name);
            let gap = match (g, warm) {
                (Some(g), Some(w)) if w < 1.0 => Some((1.0 - g) / (1.0 - w)),
                _ => None,
            };
            (
                name.clone(),
                GeoRow {
                    normalized: g,
                    gap_closed: gap,
                },
            )
        })
        .collect()
}

/// The scenario every other is paired with: `run` with `auto`, what a user runs.
pub const PAIRED_BASE: &str = "warmstart";
/// The paired interval's level, redraws and seed (fixed: the same timings, the same
/// interval).
const PAIRED_LEVEL: f64 = 0.9;
const PAIRED_RESAMPLES: usize = 2000;
const PAIRED_SEED: u64 = 25;

/// Each scenario against `base`, paired by app and round (rounds where both launches were
/// ready): how much longer its launches took than `base`'s beside them. Five medians per
/// app move by tens of points between runs, and a difference of two suite means with them
/// (the daemon behind `run` in five suite runs: 6 to 12 points by the medians, 1 to 13
/// paired, each with an interval; docs/measurements.md, 2026-11-28, tenth entry).
pub fn paired_against(
    results: &[AppResult],
    scenarios: &[String],
    base: &str,
) -> BTreeMap<String, PairedRatio> {
    scenarios
        .iter()
        .filter(|s| s.as_str() != base)
        .filter_map(|name| {
            let groups: Vec<Vec<(f64, f64)>> = results
                .iter()
                .map(|a| round_pairs(&a.samples, name, base))
                .collect();
            paired_ratio(&groups, PAIRED_LEVEL, PAIRED_RESAMPLES, PAIRED_SEED)
                .map(|p| (name.clone(), p))
        })
        .collect()
}

/// `scenario` against `base` app by app, paired by round, each app's rounds redrawn for the
/// interval: whether one app is behind (issue #26 asks of the daemon that no app be more
/// than 10 points behind `run`), which five medians of each cannot tell (per-app medians
/// moved by tens of points between suite runs; docs/measurements.md, 2026-11-29).
pub fn paired_by_app<'a>(
    results: &'a [AppResult],
    scenario: &str,
    base: &str,
) -> Vec<(&'a AppResult, PairedRatio)> {
    results
        .iter()
        .filter_map(|a| {
            let pairs = round_pairs(&a.samples, scenario, base);
            paired_ratio(&[pairs], PAIRED_LEVEL, PAIRED_RESAMPLES, PAIRED_SEED).map(|p| (a, p))
        })
        .collect()
}

/// Recompute every summary of saved results (after a change to how they are derived).
pub fn resummarize(r: &mut Results) {
    for a in &mut r.apps {
        a.summary.clear();
        summarize(a);
    }
    r.geomean = suite_means(&r.apps, &r.scenarios);
    r.paired = paired_against(&r.apps, &r.scenarios, PAIRED_BASE);
    for l in &mut r.loadings {
        l.summarize();
    }
}

fn together(
    ctx: &Ctx<'_>,
    apps: &[AppSpec],
    k: usize,
    rounds: u32,
    progress: &mut dyn FnMut(&str),
) -> Result<TogetherResult, BenchError> {
    let chosen: Vec<AppSpec> = apps.iter().take(k).cloned().collect();
    let mut r = TogetherResult {
        k,
        apps: chosen.iter().map(|a| a.name.clone()).collect(),
        cold_ms: vec![],
        warmstart_ms: vec![],
    };
    for round in 1..=rounds {
        for ws in [false, true] {
            progress(&format!(
                "together K={k} round {round} {}",
                if ws { "warmstart" } else { "cold" }
            ));
            ctx.cold()?;
            let t0 = Instant::now();
            let results: Vec<Result<Outcome, BenchError>> = std::thread::scope(|s| {
                let hs: Vec<_> = chosen
                    .iter()
                    .map(|app| {
                        s.spawn(move || {
                            let mut argv = ctx.argv(app);
                            if ws {
                                let mut w = ctx.ws();
                                w.extend(["run", "--app", &app.name, "--"].map(String::from));
                                w.extend(argv);
                                argv = w;
                            }
                            ctx.run_one(app, &argv, &ctx.ready(app))
                        })
                    })
                    .collect();
                hs.into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or(Err(BenchError::Setup("launch thread panicked".into())))
                    })
                    .collect()
            });
            let all_ok = results.iter().all(|o| o.as_ref().is_ok_and(|o| o.ready));
            for o in results {
                o?;
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if all_ok {
                if ws {
                    r.warmstart_ms.push(ms)
                } else {
                    r.cold_ms.push(ms)
                }
            }
        }
    }
    Ok(r)
}

/// Run the benchmark. An app whose setup or learning fails is reported with its error and
/// skipped; an interrupt stops everything and returns `BenchError::Interrupted`.
pub fn run(
    opts: &BenchOptions,
    interrupt: &AtomicUsize,
    progress: Progress<'_>,
) -> Result<Results, BenchError> {
    let started_unix = crate::sys::now_unix();
    let db = opts.state_dir.join("bench.db");
    std::fs::create_dir_all(&opts.state_dir)
        .map_err(|e| BenchError::Setup(format!("{}: {e}", opts.state_dir.display())))?;
    let needs_x = opts.apps.iter().any(|a| a.ready.is_gui());
    let xvfb = if needs_x { Some(Xvfb::start()?) } else { None };
    let ctx = Ctx {
        opts,
        db,
        venv: opts.state_dir.join("venv"),
        display: xvfb.as_ref().map(|x| x.display.clone()),
        interrupt,
    };
    let per_app = 2 + opts.rounds as u64 * opts.scenarios.len() as u64;
    let per_loading = 1 + opts.rounds as u64 * loading::SCENARIOS.len() as u64;
    let total = per_app * opts.apps.len() as u64
        + opts.together.len() as u64 * opts.rounds as u64 * 2
        + per_loading * opts.loadings.len() as u64;
    let mut done = 0u64;
    let mut results: Vec<AppResult> = opts
        .apps
        .iter()
        .map(|a| AppResult {
            name: a.name.clone(),
            command: a.command.clone(),
            ..AppResult::default()
        })
        .collect();
    let mut live = vec![true; opts.apps.len()];
    for (i, app) in opts.apps.iter().enumerate() {
        progress(&format!("{}: setup and learning", app.name), done, total);
        // One untimed launch first: an app's very first start (creating its profile, caches)
        // is not the launch it will repeat, and must not be the one it is learned from.
        let r = setup_app(&ctx, app)
            .and_then(|_| {
                ctx.run_one(app, &ctx.argv(app), &ctx.ready(app))
                    .map(|_| ())
            })
            .and_then(|_| learn_app(&ctx, app, &mut results[i]))
            .and_then(|_| {
                if opts.scenarios.contains(&Scenario::InsertsOnly) {
                    learn_inserts_only(&ctx, app)
                } else {
                    Ok(())
                }
            });
        if r.is_ok() {
            results[i].accuracy.floor = floor_of(&ctx.db, &app.name);
        }
        match r {
            Ok(()) => {}
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => {
                results[i].error = Some(e.to_string());
                live[i] = false;
                done += per_app - 1;
            }
        }
        done += 1;
    }
    // Scenarios whose daemon learns every live app before the rounds.
    type Prepare = fn(&Ctx<'_>, &[&AppSpec]) -> Result<(), BenchError>;
    let preparations: [(Scenario, &str, Prepare); 2] = [
        (
            Scenario::Daemon,
            "daemon: learning every app from plain launches",
            prepare_daemon,
        ),
        (
            Scenario::LaunchBursts,
            "launch-bursts: mining every app's launch as a burst",
            loading::learn_launch_bursts,
        ),
    ];
    for (sc, what, prepare) in preparations {
        if !opts.scenarios.contains(&sc) {
            continue;
        }
        progress(what, done, total);
        let apps: Vec<&AppSpec> = opts
            .apps
            .iter()
            .zip(&live)
            .filter(|(_, l)| **l)
            .map(|(a, _)| a)
            .collect();
        match prepare(&ctx, &apps) {
            Ok(()) => {}
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => {
                for r in results.iter_mut() {
                    r.error
                        .get_or_insert(format!("{} scenario: {e}", sc.name()));
                }
            }
        }
    }
    for round in 1..=opts.rounds {
        for (i, app) in opts.apps.iter().enumerate() {
            if !live[i] {
                continue;
            }
            for sc in round_order(&opts.scenarios, round) {
                progress(
                    &format!(
                        "{} · {} · round {round}/{}",
                        app.name,
                        sc.name(),
                        opts.rounds
                    ),
                    done,
                    total,
                );
                match measure(&ctx, app, sc, round, &mut results[i]) {
                    Ok(()) => {}
                    Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
                    Err(e) => {
                        results[i].error = Some(e.to_string());
                    }
                }
                done += 1;
            }
        }
    }
    for (i, app) in opts.apps.iter().enumerate() {
        if !live[i] {
            continue;
        }
        progress(
            &format!("{}: one traced prefetched launch", app.name),
            done,
            total,
        );
        match explained(&ctx, app, &results[i]) {
            Ok(a) => {
                let floor = results[i].accuracy.floor.take();
                let floor_rounds = std::mem::take(&mut results[i].accuracy.floor_rounds);
                results[i].accuracy = Accuracy {
                    floor,
                    floor_rounds,
                    ..a
                };
            }
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => results[i].accuracy.error = Some(e.to_string()),
        }
    }
    for r in &mut results {
        summarize(r);
        r.adapt = adapt_of(&ctx.db, &r.name, started_unix);
    }
    let batch: Vec<AppSpec> = opts
        .apps
        .iter()
        .zip(&live)
        .filter(|(a, l)| **l && !a.ready.is_gui())
        .map(|(a, _)| a.clone())
        .collect();
    let mut tog = Vec::new();
    for &k in &opts.together {
        let k = k.min(batch.len());
        if k == 0 {
            continue;
        }
        let mut p = |s: &str| {
            progress(s, done, total);
            done += 1;
        };
        tog.push(together(&ctx, &batch, k, opts.rounds, &mut p)?);
    }
    let mut loadings = Vec::new();
    for spec in &opts.loadings {
        let mut p = |s: &str| {
            progress(s, done, total);
            done += 1;
        };
        match loading::measure(&ctx, spec, opts.rounds, &mut p) {
            Ok(r) => loadings.push(r),
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => loadings.push(LoadingResult {
                name: spec.name.clone(),
                command: spec.command.clone(),
                error: Some(e.to_string()),
                ..LoadingResult::default()
            }),
        }
    }
    progress("done", total, total);
    let names: Vec<String> = opts.scenarios.iter().map(Scenario::name).collect();
    let geo = suite_means(&results, &names);
    let paired = paired_against(&results, &names, PAIRED_BASE);
    drop(xvfb);
    Ok(Results {
        machine: machine(&opts.warmstart_exe),
        rounds: opts.rounds,
        scenarios: opts.scenarios.iter().map(Scenario::name).collect(),
        apps: results,
        geomean: geo,
        paired,
        together: tog,
        loadings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon is ready when it says `READY=1` on the socket, the way it tells systemd;
    /// other messages are not readiness, and the socket goes with its owner.
    #[test]
    fn a_daemon_is_ready_when_it_notifies_ready() {
        let dir = tempfile::tempdir().unwrap();
        let n = ReadySocket::bind(&dir.path().join("run")).unwrap();
        assert!(!n.ready(), "nothing sent yet");
        let tx = std::os::unix::net::UnixDatagram::unbound().unwrap();
        tx.send_to(b"STATUS=starting\n", &n.path).unwrap();
        assert!(!n.ready());
        tx.send_to(b"STATUS=watching\nREADY=1\n", &n.path).unwrap();
        assert!(n.ready());
        // A socket left by a killed benchmark is replaced.
        let path = n.path.clone();
        std::mem::forget(n);
        let again = ReadySocket::bind(&dir.path().join("run")).unwrap();
        drop(again);
        assert!(!path.exists());
    }

    /// Options of a bench with nothing to run, its state in /st.
    fn options() -> BenchOptions {
        BenchOptions {
            apps: vec![],
            loadings: vec![],
            rounds: 1,
            scenarios: vec![],
            state_dir: "/st".into(),
            warmstart_exe: "/ws".into(),
            together: vec![],
            learn_runs: 1,
        }
    }

    #[test]
    fn apps_get_a_tmpdir_in_their_work_directory_unless_they_set_one() {
        let opts = options();
        let stop = AtomicUsize::new(0);
        let ctx = Ctx {
            opts: &opts,
            db: "/st/db".into(),
            venv: "/st/venv".into(),
            display: None,
            interrupt: &stop,
        };
        let mut app = AppSpec::adhoc(vec!["true".into()]);
        assert_eq!(
            ctx.env(&app),
            vec![("TMPDIR".to_string(), "/st/work/adhoc/tmp".to_string())]
        );
        app.env.insert("TMPDIR".into(), "/elsewhere".into());
        assert_eq!(
            ctx.env(&app),
            vec![("TMPDIR".to_string(), "/elsewhere".to_string())]
        );
    }

    /// `record` and the timed launches of an app see the same display: none for a batch app
    /// even while the harness runs an X server for the window apps.
    #[test]
    fn only_window_apps_get_the_display_learning_included() {
        let opts = options();
        let stop = AtomicUsize::new(0);
        let mut ctx = Ctx {
            opts: &opts,
            db: "/st/db".into(),
            venv: "/st/venv".into(),
            display: Some(":90".into()),
            interrupt: &stop,
        };
        let batch = AppSpec::adhoc(vec!["true".into()]);
        assert!(matches!(batch.ready, Ready::Exit));
        assert_eq!(ctx.display_for(&batch.ready), None);
        let window = Ready::Window(regex::Regex::new("Writer").unwrap());
        assert_eq!(ctx.display_for(&window), Some(":90"));
        ctx.display = None;
        assert_eq!(ctx.display_for(&window), None);
    }

    #[test]
    fn scenario_names_round_trip() {
        for s in Scenario::all(&["fast".into()]) {
            assert_eq!(Scenario::parse(&s.name()), Some(s.clone()), "{}", s.name());
        }
        assert_eq!(Scenario::parse("nope"), None);
    }

    #[test]
    fn summary_derives_the_papers_measures() {
        let mut r = AppResult::default();
        let m = |s: &str, ms: f64| Measurement {
            scenario: s.into(),
            round: 1,
            ms,
            ready: true,
        };
        r.samples = vec![
            m("cold", 1000.0),
            m("cold", 1100.0),
            m("cold", 900.0),
            m("warm", 500.0),
            m("warmstart", 600.0),
            m("prefetch-only", 300.0),
            m("warm+warmstart", 520.0),
        ];
        r.samples.push(Measurement {
            scenario: "warmstart".into(),
            round: 2,
            ms: 0.0,
            ready: false,
        });
        r.learning_run_ms = vec![1200.0];
        summarize(&mut r);
        let ws = &r.summary["warmstart"];
        assert_eq!(ws.median_ms, 600.0);
        assert_eq!(ws.failed, 1);
        assert!((ws.normalized - 0.6).abs() < 1e-9);
        assert!((ws.gap_closed.unwrap() - 0.8).abs() < 1e-9);
        assert_eq!(r.t_bound_ms, Some(500.0));
        assert_eq!(r.overhead.warm_overhead_ms, Some(20.0));
        assert!((r.overhead.learning_slowdown.unwrap() - 1.2).abs() < 1e-9);
        // Paired by round: a slow round moves both scenarios, not their difference.
        let mut r = AppResult::default();
        for (round, warm, ws) in [(1, 500.0, 503.0), (2, 700.0, 702.0), (3, 510.0, 700.0)] {
            r.samples.push(Measurement {
                scenario: "warm".into(),
                round,
                ms: warm,
                ready: true,
            });
            r.samples.push(Measurement {
                scenario: "warm+warmstart".into(),
                round,
                ms: ws,
                ready: true,
            });
        }
        summarize(&mut r);
        // Medians 510 and 702 would say +192.
        assert_eq!(r.overhead.warm_overhead_ms, Some(3.0));
    }

    #[test]
    fn paired_by_app_pairs_each_apps_rounds_alone() {
        let m = |s: &str, round: u32, ms: f64| Measurement {
            scenario: s.into(),
            round,
            ms,
            ready: true,
        };
        // One app's daemon 10% slower in every round, however fast the round; another's
        // daemon never ready, which pairs nothing.
        let mut a = AppResult {
            name: "a".into(),
            ..AppResult::default()
        };
        for (round, ws) in [(1, 100.0), (2, 300.0), (3, 200.0)] {
            a.samples.push(m("warmstart", round, ws));
            a.samples.push(m("daemon", round, ws * 1.1));
        }
        let mut b = AppResult {
            name: "b".into(),
            ..AppResult::default()
        };
        b.samples.push(m("warmstart", 1, 100.0));
        b.samples.push(Measurement {
            ready: false,
            ..m("daemon", 1, 90.0)
        });
        let apps = [a, b];
        let rows = paired_by_app(&apps, "daemon", PAIRED_BASE);
        assert_eq!(rows.len(), 1);
        let (app, p) = &rows[0];
        assert_eq!(app.name, "a");
        assert!(
            (p.ratio - 1.1).abs() < 1e-9 && (p.lo - 1.1).abs() < 1e-9,
            "{p:?}"
        );
        assert_eq!((p.slower, p.pairs), (3, 3));
    }

    /// The front's time from a `sched_process_exec` trace as this kernel writes it: from the
    /// exec of the front to the next exec of the same pid, whatever else execs between.
    #[test]
    fn the_fronts_time_is_its_exec_to_the_apps() {
        let trace = "# tracer: nop\n\
            #\n\
            \x20       pdflatex-30247   [000] ..... 36208.138146: sched_process_exec: filename=/work/lab/new3/warmstart pid=30247 old_pid=30247\n\
            \x20           sync-30250   [001] ..... 36208.139000: sched_process_exec: filename=/usr/bin/sync pid=30250 old_pid=30250\n\
            \x20       pdflatex-30247   [001] ..... 36208.142450: sched_process_exec: filename=/usr/bin/pdflatex pid=30247 old_pid=30247\n";
        let ms = exec_to_exec(trace, "/work/lab/new3/warmstart").unwrap();
        assert!((ms - 4.304).abs() < 1e-6, "{ms}");
        assert_eq!(
            exec_to_exec(trace, "/usr/bin/warmstart"),
            None,
            "another front"
        );
        assert_eq!(
            exec_to_exec(
                trace
                    .lines()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join("\n")
                    .as_str(),
                "/work/lab/new3/warmstart"
            ),
            None,
            "the app's exec not traced"
        );
    }

    #[test]
    fn warm_and_warm_warmstart_trade_places_every_other_round() {
        let all = vec![
            Scenario::Cold,
            Scenario::Warm,
            Scenario::WarmWarmstart,
            Scenario::PrefetchOnly,
        ];
        let names =
            |r: u32| -> Vec<String> { round_order(&all, r).iter().map(|s| s.name()).collect() };
        assert_eq!(
            names(1),
            ["cold", "warm", "warm+warmstart", "prefetch-only"]
        );
        assert_eq!(
            names(2),
            ["cold", "warm+warmstart", "warm", "prefetch-only"]
        );
        // Without both, nothing moves.
        let some = vec![Scenario::Cold, Scenario::Warm];
        assert_eq!(round_order(&some, 2), some.iter().collect::<Vec<_>>());
    }

    #[test]
    fn prefetch_only_is_compared_with_its_own_rounds_floor() {
        let mut r = AppResult::default();
        for (round, ms, ready) in [
            (1, 200.0, true),
            (2, 300.0, true),
            (3, 100.0, true),
            (4, 999.0, false),
        ] {
            r.samples.push(Measurement {
                scenario: "prefetch-only".into(),
                round,
                ms,
                ready,
            });
        }
        // Round 3 has no floor, round 4's prefetch failed, round 5 has no prefetch: only the
        // ratios 2.0 and 1.5 count, not 300/100 of two rounds' medians.
        r.accuracy.floor_rounds = vec![(1, 100.0), (2, 200.0), (4, 10.0), (5, 50.0)];
        summarize(&mut r);
        assert_eq!(r.accuracy.floor_ratio, Some(1.75));
        r.accuracy.floor_rounds.clear();
        summarize(&mut r);
        assert_eq!(r.accuracy.floor_ratio, None);
    }
}
