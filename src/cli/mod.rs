//! The command line: clap definitions, logging setup, exit codes, and one handler module per
//! command. The `warmstart` binary is just `std::process::exit(cli::main())`.

mod auto;
mod bench;
mod bursts;
mod demo;
mod doctor;
mod emulate;
mod explain;
pub mod front;
mod install;
mod plan;
mod prefetch;
mod record;
mod run;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::launch::LaunchError;
use crate::store::{StoreError, DEFAULT_DB};

/// Exit codes (documented in the README). A wrapped command's own status passes through.
pub mod code {
    pub const OK: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const NOT_FOUND: i32 = 3;
    pub const NEEDS_ROOT: i32 = 4;
    pub const INTERRUPTED: i32 = 130;
    pub const CANNOT_EXECUTE: i32 = 126;
    pub const COMMAND_NOT_FOUND: i32 = 127;
}

#[derive(Parser, Debug)]
#[command(
    name = "warmstart",
    version,
    about = "Learn what an application reads while it starts, and prefetch it concurrently with the next launch.",
    long_about = None,
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 app or plan not found, 4 needs root, \
                  126/127 command cannot run / not found, 130 interrupted; `run` passes the \
                  command's own status through."
)]
pub struct Cli {
    /// SQLite database holding apps, runs, plans and launch history.
    #[arg(long, global = true, env = "WARMSTART_DB", default_value = DEFAULT_DB)]
    pub db: PathBuf,
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Learn an application's launch: trace N cold launches and build its prefetch plan (root).
    Record(RecordArgs),
    /// Launch an application with its plan prefetched concurrently (plain launch if no plan).
    Run(RunArgs),
    /// Inspect and remove plans.
    #[command(subcommand)]
    Plan(PlanCommand),
    /// Record a workload, then time cold, warm and warmstart launches interleaved (root).
    Demo(DemoArgs),
    /// Prefetch an app's plan now, without launching it (the benchmark's prefetch-only).
    Prefetch(PrefetchArgs),
    /// Where a launch's time goes: trace a cold, a warm and a `warmstart run` launch, and
    /// attribute every millisecond of each (root).
    Explain(ExplainArgs),
    /// Replay an app's recorded launches on the device with O_DIRECT, with and without each
    /// plan prefetched, into a simulated cache: strategies compared without touching the page
    /// cache (IEICE 2015's emulation platform; root).
    Emulate(EmulateArgs),
    /// ClusterFetch: the read bursts of running applications, tied to the file whose opening
    /// starts each (mine them, list, show, remove).
    #[command(subcommand)]
    Bursts(BurstsCommand),
    /// Benchmark the suite's real applications: cold, warm, warmstart and the peers (root).
    Bench(BenchArgs),
    /// Run the automatic-mode daemon: learn and prefetch every launched application (root).
    Daemon(DaemonArgs),
    /// Daemon up or down, and per app its phase, launches, prefetches, miss ratio, savings.
    Status {
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
        /// The daemon's runtime directory (where its pid file is).
        #[arg(long, default_value = crate::trace::knobs::RUN_DIR)]
        run_dir: PathBuf,
    },
    /// Manage the apps the daemon handles.
    #[command(subcommand)]
    App(AppCommand),
    /// Install the binaries, the systemd unit, the default configuration, man pages and shell
    /// completions (root, or any user with --destdir).
    Install(InstallArgs),
    /// Remove what `install` installed (same options); --purge also removes the configuration
    /// and the database.
    Uninstall(UninstallArgs),
    /// Write the man pages (one per command) into a directory.
    Man {
        /// Directory to write warmstart.1, warmstart-record.1, ... into.
        #[arg(long, default_value = ".")]
        out_dir: PathBuf,
    },
    /// What this machine offers warmstart (kernel events, fanotify, root, block devices,
    /// ext4, ...) and what each gap means; exit 1 if it cannot learn here.
    Doctor {
        /// Print the checks as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}

#[derive(Args, Debug)]
pub struct DaemonArgs {
    /// Configuration file (a missing file means the defaults).
    #[arg(long, default_value = crate::daemon::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Runtime directory of this daemon (its pid file). The locks and the restore journal of
    /// kernel settings stay machine-wide in /run/warmstart, shared with `run` and `record`.
    #[arg(long, default_value = crate::trace::knobs::RUN_DIR)]
    pub run_dir: PathBuf,
    /// Print the documented default configuration and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Measure, instead of running, how soon each way of detecting an exec (proc connector,
    /// fanotify, tracepoint) reports a launch, and exit.
    #[arg(long)]
    pub measure_detection: bool,
    /// Launches per mechanism for --measure-detection.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub launches: u32,
    /// With --measure-detection: print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum AppCommand {
    /// Apps, their phase and whether they are enabled.
    List {
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Let the daemon handle an app again.
    Enable { app: String },
    /// Never learn or prefetch an app (an executable path, or an app key).
    Disable { app: String },
    /// Send an app back to learning (its runs and plans are dropped).
    Learn { app: String },
    /// Forget an app entirely.
    Forget { app: String },
}

#[derive(Args, Debug)]
pub struct InstallArgs {
    /// Where the binaries (`warmstart`, `warmstart-cli`, `warmstart-bench`) go.
    #[arg(long, default_value = "/usr/local/bin")]
    pub bin_dir: PathBuf,
    /// Where the systemd unit goes.
    #[arg(long, default_value = "/etc/systemd/system")]
    pub unit_dir: PathBuf,
    /// Where the configuration goes (kept if it exists; named in the unit when not the
    /// default).
    #[arg(long, default_value = crate::daemon::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Where man pages (man/man1) and shell completions go.
    #[arg(long, default_value = "/usr/local/share")]
    pub share_dir: PathBuf,
    /// Stage every file under this directory instead (for packages); systemd is not touched.
    #[arg(long)]
    pub destdir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct UninstallArgs {
    /// Where `install` put the binaries.
    #[arg(long, default_value = "/usr/local/bin")]
    pub bin_dir: PathBuf,
    /// Where `install` put the systemd unit.
    #[arg(long, default_value = "/etc/systemd/system")]
    pub unit_dir: PathBuf,
    /// The configuration (removed with --purge).
    #[arg(long, default_value = crate::daemon::config::DEFAULT_PATH)]
    pub config: PathBuf,
    /// Where `install` put man pages and completions.
    #[arg(long, default_value = "/usr/local/share")]
    pub share_dir: PathBuf,
    /// The state directory: database, benchmark state (removed with --purge).
    #[arg(long, default_value = "/var/lib/warmstart")]
    pub state_dir: PathBuf,
    /// Also remove the configuration and the state directory.
    #[arg(long)]
    pub purge: bool,
    /// Remove from under this staging directory instead; systemd is not touched.
    #[arg(long)]
    pub destdir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Suite file (format documented in it).
    #[arg(long, default_value = "bench/suite.toml")]
    pub suite: PathBuf,
    /// Only these apps and loadings (comma-separated names from the suite).
    #[arg(long, value_delimiter = ',')]
    pub apps: Vec<String>,
    /// Rounds; each round runs every scenario of every app once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Write results.json, results.md and SVG plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// List the scenarios and exit.
    #[arg(long)]
    pub scenarios: bool,
    /// Only these scenarios (comma-separated; cold and warm are always measured). `bursts`
    /// selects the suite's loadings (cold, warm and with the daemon's bursts); `--only bursts`
    /// alone measures the loadings and no launch.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Also launch K apps at once, cold against warmstart (FAST fig. 8): e.g. 1,3,all.
    #[arg(long, value_delimiter = ',')]
    pub together: Vec<String>,
    /// Learning runs per app.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub learn_runs: u32,
    /// The benchmark's own state: database, work directories, virtualenv.
    #[arg(
        long,
        default_value = "/var/lib/warmstart/bench",
        env = "WARMSTART_BENCH_DIR"
    )]
    pub state_dir: PathBuf,
    /// Print the results as JSON instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Recompute the summaries and reports of a saved results.json (into --out), measuring
    /// nothing.
    #[arg(long, value_name = "RESULTS_JSON")]
    pub rerender: Option<PathBuf>,
    /// An ad-hoc command to benchmark instead of the suite (ready when it exits).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct PrefetchArgs {
    /// App key, or a unique part of it.
    pub app: String,
    /// Return only when every planned data page is in memory (not just requested).
    #[arg(long)]
    pub wait: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Prefetch worker threads.
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=crate::prefetch::MAX_JOBS as i64))]
    pub jobs: u16,
    /// Most KiB each worker keeps in flight (0: unbounded). No application runs beside this
    /// prefetch, so by default nothing holds it back.
    #[arg(long, default_value_t = 0)]
    pub window_kb: u64,
    /// Metadata-pass threads (lookups, listings and opens ahead of the data workers).
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_META_JOBS as u16, value_parser = clap::value_parser!(u16).range(0..=crate::prefetch::MAX_META_JOBS as i64))]
    pub meta_jobs: u16,
}

#[derive(Subcommand, Debug)]
pub enum BurstsCommand {
    /// Watch the whole system's disk reads and file openings for SECONDS and keep the I/O
    /// bursts found, each under the file whose opening started it (root).
    Mine {
        /// How long to watch, in seconds (e.g. 30 or 90s).
        #[arg(long, default_value = "30", value_parser = parse_secs)]
        seconds: Duration,
        /// Log entries kept (the paper's queue_size).
        #[arg(long, default_value_t = 6000, value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
        queue_size: u32,
        /// Log entries per second a burst must reach (default: from the measured device).
        #[arg(long)]
        iops_threshold: Option<f64>,
        /// Log entries a partial burst must hold at least.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        length_threshold: u32,
        /// Never take a path containing this as a trigger (repeatable).
        #[arg(long)]
        exclude: Vec<String>,
        /// Bursts of fewer bytes than this are not kept.
        #[arg(long, default_value_t = 256)]
        min_kb: u64,
        /// Print the bursts kept as JSON.
        #[arg(long)]
        json: bool,
        /// Also write what the miner was given to FILE (JSON lines: its configuration, then
        /// each read, opening and pause), to replay the mining (the tests' fixtures).
        #[arg(long, value_name = "FILE")]
        save_log: Option<std::path::PathBuf>,
    },
    /// The stored bursts: trigger, size, hits, last validation.
    List {
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// One burst: its trigger, alternatives and plan.
    Show {
        /// Burst id, or its trigger's path.
        burst: String,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a burst (by id or trigger path), or all of them with --all.
    Rm {
        /// Burst id, or its trigger's path.
        #[arg(required_unless_present = "all")]
        burst: Option<String>,
        /// Remove every burst.
        #[arg(long, conflicts_with = "burst")]
        all: bool,
    },
}

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["app", "trace"])))]
pub struct EmulateArgs {
    /// App key, or a unique part of it.
    pub app: Option<String>,
    /// Emulate a launch exported with --export (on this or another machine) instead of an
    /// app of the database.
    #[arg(long, value_name = "FILE", conflicts_with = "export")]
    pub trace: Option<PathBuf>,
    /// Write the app's recorded launches and plans to FILE (to emulate elsewhere) and exit.
    #[arg(long, value_name = "FILE")]
    pub export: Option<PathBuf>,
    /// Emulate only this strategy's plan (repeatable; default: every stored plan).
    #[arg(long = "strategy", value_name = "STRATEGY")]
    pub strategies: Vec<String>,
    /// Emulated launches per recorded launch and scenario (the mean is reported).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Prefetcher threads.
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=crate::prefetch::MAX_JOBS as i64))]
    pub jobs: u16,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// The prefetched launch's strategy (default: the one `run` would use).
    #[arg(long)]
    pub strategy: Option<String>,
    /// Use this app name instead of the key derived from the command.
    #[arg(long, value_parser = app_name)]
    pub app: Option<String>,
    /// Skip the cold and warm launches without warmstart: explain only the prefetched one.
    #[arg(long)]
    pub no_cold: bool,
    /// Stop tracing a launch after this many seconds.
    #[arg(long, default_value = "60", value_parser = parse_secs)]
    pub timeout: Duration,
    /// Print the attribution, the plan's timeline and the misses as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command to launch, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct RecordArgs {
    /// Learning runs; only what every run read is kept (FAST's N_rawseq).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Stop tracing a run after this many seconds without file access (FAST's T_idle).
    #[arg(long, default_value = "2", value_parser = parse_secs)]
    pub idle: Duration,
    /// Stop tracing a run after this many seconds in any case (FAST's T_timeout); a command
    /// still running then is closed.
    #[arg(long, default_value = "30", value_parser = parse_secs)]
    pub timeout: Duration,
    /// Per-CPU trace ring buffer size in KiB; raise it if a recording reports lost events.
    #[arg(long, default_value_t = 16384, value_parser = clap::value_parser!(u32).range(256..=1048576))]
    pub buffer_kb: u32,
    /// Learn from the current page cache instead of dropping it first.
    #[arg(long)]
    pub no_drop_caches: bool,
    /// Store under this name instead of the key derived from the command.
    #[arg(long, value_parser = app_name)]
    pub app: Option<String>,
    /// Keep learning runs whose command exits with a non-zero status.
    #[arg(long)]
    pub allow_failure: bool,
    /// Plain cold launches to time after learning (a command that exits by itself): what
    /// `auto` compares its strategies with before it stops prefetching an app that does not
    /// gain from it (0: none).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=20))]
    pub baseline_runs: u32,
    /// Do not rank the plans by emulation after learning (replaying the recorded launches
    /// on the device takes about six launch times); `auto` then tries the strategies in
    /// the device class's order on real launches.
    #[arg(long)]
    pub no_emulate: bool,
    /// Set the app's default strategy (fast, trace, sorted, paralfetch, hybrid, auto).
    #[arg(long)]
    pub strategy: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The command to learn, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Print what was prefetched, skipped and stale, and how long it took (on stderr).
    #[arg(long)]
    pub stats: bool,
    /// With --stats or --explain: print them as one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Trace this launch and print where its time went (as `warmstart explain`, without
    /// dropping the cache first; root).
    #[arg(long, conflicts_with = "stats")]
    pub explain: bool,
    /// This launch is traced (by `explain`): recorded as `traced`, so `auto` does not compare
    /// its time, slowed by the tracing, with untraced launches.
    #[arg(long, hide = true)]
    pub traced: bool,
    /// Prefetch worker threads.
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_JOBS as u16, value_parser = clap::value_parser!(u16).range(1..=crate::prefetch::MAX_JOBS as i64))]
    pub jobs: u16,
    /// Most MiB to prefetch (default: half of MemAvailable).
    #[arg(long)]
    pub mem_cap_mb: Option<u64>,
    /// Threads of the metadata pass running ahead of the data workers (0: none).
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_META_JOBS as u16, value_parser = clap::value_parser!(u16).range(0..=crate::prefetch::MAX_META_JOBS as i64))]
    pub meta_jobs: u16,
    /// Most KiB each worker keeps in flight before waiting for its oldest request (0:
    /// unbounded); a short device queue lets the application's own reads through.
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_WINDOW / 1024)]
    pub window_kb: u64,
    /// Let the application and the prefetch threads share CPUs. By default, while the plan
    /// is issued, the application keeps off the CPU that takes the disk's interrupts and the
    /// prefetcher runs there (a single-queue disk), or else the prefetcher keeps off the CPU
    /// the application starts on, so it never preempts the launch.
    #[arg(long)]
    pub share_cpu: bool,
    /// Scheduling strategy: fast, trace, sorted, paralfetch, hybrid or auto (default: the
    /// app's, set by `record --strategy`, else auto).
    #[arg(long)]
    pub strategy: Option<String>,
    /// Longest the application is held while a strategy fetches its head first (ms).
    #[arg(long, default_value_t = crate::prefetch::DEFAULT_HOLD_CAP_MS)]
    pub hold_cap_ms: u64,
    /// Use this app name instead of the key derived from the command.
    #[arg(long, value_parser = app_name)]
    pub app: Option<String>,
    /// The command to launch, after `--`.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

#[derive(Subcommand, Debug)]
pub enum PlanCommand {
    /// List learned apps and their plans.
    List {
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show one app's plan: entries, bytes, files, metadata, unresolved and stale.
    Show {
        /// App key, or a unique part of it.
        app: String,
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
        /// How many leading entries to print.
        #[arg(long, default_value_t = 10)]
        entries: usize,
        /// Show this strategy's plan (default: the one the next `run` would use).
        #[arg(long)]
        strategy: Option<String>,
    },
    /// Measure the plan's device floor: its data read with O_DIRECT at the best queue depth
    /// (the page cache untouched), its metadata and its longest chain of dependent metadata
    /// reads (root, for files only root may read).
    Floor {
        /// App key, or a unique part of it.
        app: String,
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
        /// The strategy's plan (default: the one the next `run` would use).
        #[arg(long)]
        strategy: Option<String>,
    },
    /// Compare an app's plan with another database's plan of it (e.g. the daemon's against
    /// `record`'s): file data in common, each way.
    Compare {
        /// App key, or a unique part of it.
        app: String,
        /// The other database.
        #[arg(long)]
        other_db: PathBuf,
        /// The app's key (or a unique part) in the other database, if it differs.
        #[arg(long)]
        other_app: Option<String>,
        /// The strategy whose plans to compare (every strategy orders the same data).
        #[arg(long, default_value = "trace")]
        strategy: String,
        /// Print the result as JSON (one object) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Forget an app: its plan, runs and history.
    Rm {
        /// App key, or a unique part of it.
        app: String,
    },
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Timed rounds; each round runs cold, warm and warmstart once.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Learning runs before measuring.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub runs: u32,
    /// Print {"cold_ms","warm_ms","warmstart_ms","gap_closed"} (medians), the gap's bootstrap
    /// interval and every sample as JSON.
    #[arg(long)]
    pub json: bool,
    /// Strategy of the warmstart launches. The default is FAST's concurrent replay in launch
    /// order (`trace`); `auto` spends its first launches trying every strategy, which a
    /// 5-round demo would mostly measure.
    #[arg(long, default_value = "trace", value_parser = ["fast", "trace", "sorted", "paralfetch", "hybrid", "auto"])]
    pub strategy: String,
    /// Workload to measure (default: import Python's standard library).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<OsString>,
}

fn parse_secs(s: &str) -> Result<Duration, String> {
    let v: f64 = s
        .trim_end_matches('s')
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        return Err(format!("`{s}`: seconds must be in (0, 86400]"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// A failure with a chosen exit code.
#[derive(Debug, thiserror::Error)]
#[error("{msg}")]
pub struct Failure {
    pub code: i32,
    pub msg: String,
}

/// An app name given with `--app`: printed in tables and logs, one line, not empty.
fn app_name(s: &str) -> Result<String, String> {
    if s.trim().is_empty() {
        return Err("an app name cannot be empty".into());
    }
    if s.chars().any(char::is_control) {
        return Err("an app name cannot hold a newline or another control character".into());
    }
    Ok(s.to_string())
}

pub(crate) fn fail(code: i32, msg: impl Into<String>) -> anyhow::Error {
    Failure {
        code,
        msg: msg.into(),
    }
    .into()
}

pub(crate) fn require_root(what: &str) -> anyhow::Result<()> {
    if crate::sys::is_root() {
        Ok(())
    } else {
        Err(fail(
            code::NEEDS_ROOT,
            format!(
                "{what} needs root (it drops caches and uses kernel tracing); run it with sudo"
            ),
        ))
    }
}

/// An error and its causes on one line, each cause once: errors that name their source in
/// their own text (ours, rusqlite's) otherwise repeat it ("file is not a database: file is not
/// a database: Error code 26: file is not a database").
pub(crate) fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let t = cause.to_string();
        let core = t.rsplit(": ").next().unwrap_or(&t);
        if out.contains(&t) || (!out.is_empty() && out.contains(core)) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&t);
    }
    out
}

fn exit_code_of(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.code;
        }
        if let Some(s) = cause.downcast_ref::<StoreError>() {
            if matches!(s, StoreError::NoSuchApp(_) | StoreError::Ambiguous { .. }) {
                return code::NOT_FOUND;
            }
        }
        if let Some(l) = cause.downcast_ref::<LaunchError>() {
            return match l {
                LaunchError::NotFound(_) => code::COMMAND_NOT_FOUND,
                _ => code::CANNOT_EXECUTE,
            };
        }
        // LearnError forwards TraceError transparently, so look inside it too.
        let trace = cause.downcast_ref::<crate::trace::TraceError>().or(
            match cause.downcast_ref::<crate::learn::LearnError>() {
                Some(crate::learn::LearnError::Trace(t)) => Some(t),
                _ => None,
            },
        );
        match trace {
            Some(crate::trace::TraceError::Interrupted(_)) => return code::INTERRUPTED,
            Some(crate::trace::TraceError::Launch(LaunchError::NotFound(_))) => {
                return code::COMMAND_NOT_FOUND
            }
            Some(crate::trace::TraceError::Launch(_)) => return code::CANNOT_EXECUTE,
            _ => {}
        }
    }
    code::ERROR
}

fn init_logging(verbose: u8, quiet: bool) {
    use tracing_subscriber::filter::LevelFilter;
    let level = match (quiet, verbose) {
        (true, _) => LevelFilter::WARN,
        (false, 0) => LevelFilter::INFO,
        (false, 1) => LevelFilter::DEBUG,
        _ => LevelFilter::TRACE,
    };
    // WARMSTART_LOG=debug (a level name) overrides; a plain level filter keeps the regex
    // engine of env-filter out of the launcher binary.
    let level = std::env::var("WARMSTART_LOG")
        .ok()
        .and_then(|v| v.parse::<LevelFilter>().ok())
        .unwrap_or(level);
    let fmt = tracing_subscriber::fmt::format()
        .with_target(false)
        .without_time()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .event_format(SyslogPriority {
            inner: fmt,
            on: stderr_is_journal(),
        })
        .try_init();
}

/// Under systemd, stderr goes to the journal, which reads a `<N>` prefix as the line's
/// syslog priority (`journalctl -p warning` then filters warnings and errors).
struct SyslogPriority<F> {
    inner: F,
    on: bool,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for SyslogPriority<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut w: tracing_subscriber::fmt::format::Writer<'_>,
        ev: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        if self.on {
            write!(w, "<{}>", syslog_priority(*ev.metadata().level()))?;
        }
        self.inner.format_event(ctx, w, ev)
    }
}

/// sd-daemon(3)'s levels: err, warning, info, debug.
fn syslog_priority(l: tracing::Level) -> u8 {
    match l {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        _ => 7,
    }
}

/// systemd sets `JOURNAL_STREAM` to the journal stream's `device:inode`; stderr is that
/// stream unless redirected since.
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(st) = nix::sys::stat::fstat(std::io::stderr()) else {
        return false;
    };
    v.to_string_lossy() == format!("{}:{}", st.st_dev, st.st_ino)
}

/// The benchmark's entry point, for binaries that include it (`warmstart-bench`).
pub type BenchMain = fn(BenchArgs) -> anyhow::Result<i32>;

/// The launcher binary: `bench` is delegated to the sibling `warmstart-bench`, so the code the
/// launch path pages in stays small (plots, X11 and the harness live only there).
pub fn main() -> i32 {
    main_with(None)
}

/// The benchmark binary: every command, `bench` included.
pub fn bench_binary_main() -> i32 {
    main_with(Some(bench::cmd))
}

/// The `warmstart` front users launch applications with (see `front`), installed next to
/// this binary; this binary itself where it is missing (a slower launch, but a launch).
pub(crate) fn launcher_exe() -> anyhow::Result<PathBuf> {
    let me = anyhow::Context::context(std::env::current_exe(), "locating the warmstart binary")?;
    let front = me.with_file_name("warmstart");
    Ok(if front.exists() { front } else { me })
}

fn exec_bench_binary() -> anyhow::Result<i32> {
    use std::os::unix::process::CommandExt;
    let me = std::env::current_exe()?;
    let sibling = me.with_file_name("warmstart-bench");
    let err = std::process::Command::new(&sibling)
        .args(std::env::args_os().skip(1))
        .exec();
    Err(fail(
        code::ERROR,
        format!(
            "cannot run {} ({err}); build it with `cargo build --release` (it is installed next to warmstart)",
            sibling.display()
        ),
    ))
}

/// `run`, for the front: no command-line parser involved.
pub(crate) fn run_direct(db: &std::path::Path, verbose: u8, quiet: bool, a: RunArgs) -> i32 {
    init_logging(verbose, quiet);
    match run::cmd(db, a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warmstart: {}", error_text(&e));
            exit_code_of(&e)
        }
    }
}

/// `prefetch`, for the front: no command-line parser involved.
pub(crate) fn prefetch_direct(
    db: &std::path::Path,
    verbose: u8,
    quiet: bool,
    a: PrefetchArgs,
) -> i32 {
    init_logging(verbose, quiet);
    match prefetch::prefetch_cmd(db, a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warmstart: {}", error_text(&e));
            exit_code_of(&e)
        }
    }
}

/// Parse arguments, run the command, return the process exit code.
fn main_with(bench_main: Option<BenchMain>) -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                code::USAGE
            } else {
                code::OK
            };
        }
    };
    init_logging(cli.verbose, cli.quiet);
    let command = match &cli.command {
        Command::Record(a) => a.command.first(),
        Command::Run(a) => a.command.first(),
        Command::Explain(a) => a.command.first(),
        Command::Demo(a) => a.command.first(),
        _ => None,
    };
    if let Some(opt) = command
        .and_then(|c| c.to_str())
        .filter(|c| c.starts_with('-'))
    {
        // The command is taken as is after the options, so a mistyped option lands here.
        eprintln!(
            "warmstart: unknown option `{opt}` (the command to launch goes after `--`; see --help)"
        );
        return code::USAGE;
    }
    let result = match cli.command {
        Command::Record(a) => record::cmd(&cli.db, a),
        // Here, not in `run::cmd`: the front calls that, and must not carry the tracer.
        Command::Run(a) if a.explain => explain::run_explained(&cli.db, &a),
        Command::Run(a) => run::cmd(&cli.db, a),
        Command::Plan(p) => plan::cmd(&cli.db, p),
        Command::Demo(a) => demo::cmd(&cli.db, a),
        Command::Prefetch(a) => prefetch::prefetch_cmd(&cli.db, a),
        Command::Explain(a) => explain::cmd(&cli.db, a),
        Command::Emulate(a) => emulate::cmd(&cli.db, a),
        Command::Bursts(c) => bursts::cmd(&cli.db, c),
        Command::Daemon(a) => auto::daemon(&cli.db, a),
        Command::Status { json, run_dir } => auto::status(&cli.db, json, &run_dir),
        Command::App(c) => auto::app(&cli.db, c),
        Command::Install(a) => install::install(a),
        Command::Uninstall(a) => install::uninstall(a),
        Command::Man { out_dir } => install::man(&out_dir),
        Command::Doctor { json } => doctor::cmd(json),
        Command::Completions { shell } => install::completions(shell),
        Command::Bench(a) => match bench_main {
            Some(f) => f(a),
            None => exec_bench_binary(),
        },
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warmstart: {}", error_text(&e));
            exit_code_of(&e)
        }
    }
}

/// "12.3 MiB"
pub(crate) fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// "2026-11-22 19:40:01 UTC" from unix seconds (civil-from-days, no timezone database).
pub(crate) fn fmt_unix(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    /// Every option of every command says what it does in `--help` (`--json` had none).
    #[test]
    fn every_option_has_help() {
        use clap::CommandFactory;
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" || a.is_positional() {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{path} --{id}"));
                }
            }
            for sub in c.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&super::Cli::command(), "warmstart", &mut missing);
        assert!(missing.is_empty(), "options without help: {missing:?}");
    }

    #[test]
    fn an_error_chain_says_each_cause_once() {
        let db = std::env::temp_dir().join(format!("ws-notadb-{}", std::process::id()));
        std::fs::write(&db, "hello, not a database\n".repeat(100)).unwrap();
        let e = anyhow::Error::new(crate::store::Store::open(&db).err().unwrap());
        let _ = std::fs::remove_file(&db);
        let t = super::error_text(&e);
        assert_eq!(t.matches("not a database").count(), 1, "{t}");
        assert!(t.contains(&db.display().to_string()), "{t}");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(super::error_text(&e), "outer: inner");
    }

    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn formats() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
        assert_eq!(fmt_unix(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(fmt_unix(1_795_000_000), "2026-11-18 11:06:40 UTC");
    }

    #[test]
    fn seconds_parser() {
        assert_eq!(parse_secs("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_secs("0.5s").unwrap(), Duration::from_millis(500));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("x").is_err());
    }
}
