//! The `warmstart` binary users run: a lean front for the launch path.
//!
//! `warmstart run -- CMD` starts cold in front of the application it prefetches, and a cold
//! exec reads its whole binary (mmap read-around is `read_ahead_kb` wide, 8 MiB on this VM's
//! disk) before the plan is even looked up. So the front holds only what a plain `run`
//! needs (the store, the plan, the prefetch engine) and no command-line parser, tracer,
//! daemon or report code: 1.9 MB (2.8 MB linked statically, `cargo static-launcher`, which
//! spares it the loader's work and libgcc_s) instead of the full command line's 3.9 MB. Every other
//! command line, and `run` with anything the front does not parse itself (`--stats`,
//! `--help`, a value the full parser would reject), is handed to `warmstart-cli` unchanged,
//! so there is one parser of record and the front never guesses at an error message.
//!
//! Keep clap, the tracer and the daemon out of this module's reach: the front's size is the
//! point.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::cli::RunArgs;
use crate::prefetch::{MAX_JOBS, MAX_META_JOBS};
use crate::schedule::Strategy;

/// The full command line's binary, installed next to this one.
pub const FULL: &str = "warmstart-cli";

/// A plain `run` the front launches itself.
#[derive(Debug, Default, PartialEq)]
pub struct FastRun {
    pub db: Option<PathBuf>,
    pub verbose: u8,
    pub quiet: bool,
    pub jobs: Option<u16>,
    pub meta_jobs: Option<u16>,
    pub window_kb: Option<u64>,
    pub mem_cap_mb: Option<u64>,
    pub hold_cap_ms: Option<u64>,
    pub share_cpu: bool,
    pub traced: bool,
    pub strategy: Option<String>,
    pub app: Option<String>,
    pub command: Vec<OsString>,
}

impl FastRun {
    fn run_args(&self) -> RunArgs {
        use crate::prefetch::{DEFAULT_HOLD_CAP_MS, DEFAULT_JOBS, DEFAULT_META_JOBS};
        RunArgs {
            stats: false,
            json: false,
            explain: false,
            traced: self.traced,
            jobs: self.jobs.unwrap_or(DEFAULT_JOBS as u16),
            mem_cap_mb: self.mem_cap_mb,
            meta_jobs: self.meta_jobs.unwrap_or(DEFAULT_META_JOBS as u16),
            window_kb: self
                .window_kb
                .unwrap_or(crate::prefetch::DEFAULT_WINDOW / 1024),
            share_cpu: self.share_cpu,
            strategy: self.strategy.clone(),
            hold_cap_ms: self.hold_cap_ms.unwrap_or(DEFAULT_HOLD_CAP_MS),
            app: self.app.clone(),
            command: self.command.clone(),
        }
    }
}

/// Take `tok` if it is a global option (valid before or after the subcommand): Some(true)
/// if taken, Some(false) if it is not one, None if its value is missing.
fn global(f: &mut FastRun, tok: &str, next: &mut dyn Iterator<Item = &OsString>) -> Option<bool> {
    if tok == "--db" {
        f.db = Some(PathBuf::from(next.next()?));
    } else if let Some(v) = tok.strip_prefix("--db=") {
        f.db = Some(PathBuf::from(v));
    } else if tok == "-q" || tok == "--quiet" {
        f.quiet = true;
    } else if tok == "--verbose" {
        f.verbose = f.verbose.saturating_add(1);
    } else if tok.len() >= 2 && tok.starts_with('-') && tok[1..].bytes().all(|b| b == b'v') {
        f.verbose = f.verbose.saturating_add((tok.len() - 1) as u8);
    } else {
        return Some(false);
    }
    Some(true)
}

fn ranged(v: &str, lo: u16, hi: u16) -> Option<u16> {
    v.parse().ok().filter(|n| (lo..=hi).contains(n))
}

/// `run`'s option `name` with `value` (the same checks as the full parser's); None if the
/// front does not take it.
fn run_option(f: &mut FastRun, name: &str, value: &str) -> Option<()> {
    match name {
        "--jobs" => f.jobs = Some(ranged(value, 1, MAX_JOBS)?),
        "--meta-jobs" => f.meta_jobs = Some(ranged(value, 0, MAX_META_JOBS)?),
        "--window-kb" => f.window_kb = Some(value.parse().ok()?),
        "--mem-cap-mb" => f.mem_cap_mb = Some(value.parse().ok()?),
        "--hold-cap-ms" => f.hold_cap_ms = Some(value.parse().ok()?),
        "--strategy" if value == "auto" || Strategy::parse(value).is_some() => {
            f.strategy = Some(value.to_string())
        }
        "--app" if !value.trim().is_empty() && !value.chars().any(char::is_control) => {
            f.app = Some(value.to_string())
        }
        _ => return None,
    }
    Some(())
}

/// The plain `run` in `args` (the command line without argv[0]), if it is one the front
/// launches itself; None hands the command line to the full binary.
pub fn classify(args: &[OsString]) -> Option<FastRun> {
    let mut f = FastRun::default();
    let mut it = args.iter();
    // Globals, then `run`.
    loop {
        let tok = it.next()?.to_str()?;
        if tok == "run" {
            break;
        }
        if !global(&mut f, tok, &mut it)? {
            return None;
        }
    }
    loop {
        let arg = it.next()?; // no command: the full parser says so
        if arg == "--" {
            break;
        }
        let tok = arg.to_str()?;
        if !tok.starts_with('-') {
            f.command.push(arg.clone());
            break;
        }
        if global(&mut f, tok, &mut it)? {
            continue;
        }
        if tok == "--share-cpu" {
            f.share_cpu = true;
            continue;
        }
        if tok == "--traced" {
            f.traced = true;
            continue;
        }
        match tok.split_once('=') {
            Some((name, value)) => run_option(&mut f, name, value)?,
            None => {
                let value = it.next()?.to_str()?;
                run_option(&mut f, tok, value)?
            }
        }
    }
    f.command.extend(it.cloned());
    (!f.command.is_empty()).then_some(f)
}

/// A plain `prefetch APP` the front runs itself.
#[derive(Debug, PartialEq)]
pub struct FastPrefetch {
    pub db: Option<PathBuf>,
    pub verbose: u8,
    pub quiet: bool,
    pub wait: bool,
    pub json: bool,
    pub jobs: Option<u16>,
    pub meta_jobs: Option<u16>,
    pub window_kb: Option<u64>,
    pub app: String,
}

impl FastPrefetch {
    fn args(&self) -> crate::cli::PrefetchArgs {
        crate::cli::PrefetchArgs {
            app: self.app.clone(),
            wait: self.wait,
            json: self.json,
            jobs: self.jobs.unwrap_or(crate::prefetch::DEFAULT_JOBS as u16),
            window_kb: self.window_kb.unwrap_or(0),
            meta_jobs: self
                .meta_jobs
                .unwrap_or(crate::prefetch::DEFAULT_META_JOBS as u16),
        }
    }
}

/// The `prefetch` in `args` (without argv[0]), if it is one the front runs itself: globals,
/// `prefetch`, its flags and options in any order, one app; anything else is the full
/// parser's (with its messages).
pub fn classify_prefetch(args: &[OsString]) -> Option<FastPrefetch> {
    let mut g = FastRun::default();
    let mut it = args.iter();
    loop {
        let tok = it.next()?.to_str()?;
        if tok == "prefetch" {
            break;
        }
        if !global(&mut g, tok, &mut it)? {
            return None;
        }
    }
    let (mut wait, mut json, mut app) = (false, false, None);
    let (mut jobs, mut meta_jobs, mut window_kb) = (None, None, None);
    while let Some(arg) = it.next() {
        let tok = arg.to_str()?;
        if global(&mut g, tok, &mut it)? {
            continue;
        }
        match tok {
            "--wait" => wait = true,
            "--json" => json = true,
            t if !t.starts_with('-') && app.is_none() => app = Some(t.to_string()),
            t => {
                let (name, value) = match t.split_once('=') {
                    Some((n, v)) => (n, v.to_string()),
                    None => (t, it.next()?.to_str()?.to_string()),
                };
                match name {
                    "--jobs" => jobs = Some(ranged(&value, 1, MAX_JOBS)?),
                    "--meta-jobs" => meta_jobs = Some(ranged(&value, 0, MAX_META_JOBS)?),
                    "--window-kb" => window_kb = Some(value.parse().ok()?),
                    _ => return None,
                }
            }
        }
    }
    Some(FastPrefetch {
        db: g.db,
        verbose: g.verbose,
        quiet: g.quiet,
        wait,
        json,
        jobs,
        meta_jobs,
        window_kb,
        app: app.filter(|a| !a.is_empty())?,
    })
}

/// The database path from `--db`, `WARMSTART_DB`, or the default.
fn db_of(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os("WARMSTART_DB").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(crate::store::DEFAULT_DB))
}

/// The binary's entry point.
pub fn main() -> i32 {
    let args: Vec<OsString> = std::env::args_os().collect();
    let rest = args.get(1..).unwrap_or_default();
    if let Some(fast) = classify(rest) {
        let db = db_of(fast.db.clone());
        return crate::cli::run_direct(&db, fast.verbose, fast.quiet, fast.run_args());
    }
    if let Some(p) = classify_prefetch(rest) {
        let db = db_of(p.db.clone());
        return crate::cli::prefetch_direct(&db, p.verbose, p.quiet, p.args());
    }
    let full = std::env::current_exe()
        .map(|me| me.with_file_name(FULL))
        .unwrap_or_else(|_| PathBuf::from(FULL));
    let arg0 = args.first().cloned().unwrap_or_else(|| "warmstart".into());
    let err = crate::launch::exec_replace(&full, &arg0, rest);
    eprintln!(
        "warmstart: cannot run {} ({err}); it is built and installed next to warmstart (`cargo build --release`)",
        full.display()
    );
    crate::cli::code::ERROR
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    fn fast(s: &str) -> FastRun {
        classify(&args(s)).unwrap_or_else(|| panic!("`{s}` should take the fast path"))
    }

    #[test]
    fn plain_runs_are_launched_by_the_front() {
        let f = fast("run -- python3 x.py --flag");
        assert_eq!(f.command, args("python3 x.py --flag"));
        assert_eq!((f.db, f.quiet, f.verbose), (None, false, 0));
        let a = fast("run ls").run_args();
        assert_eq!(a.jobs as usize, crate::prefetch::DEFAULT_JOBS);
        assert_eq!(a.hold_cap_ms, crate::prefetch::DEFAULT_HOLD_CAP_MS);
        assert!(!a.stats && !a.share_cpu && a.strategy.is_none());

        let f = fast("-q --db /tmp/x.db run --strategy trace --jobs=4 --share-cpu python3 -c 1");
        assert_eq!(f.db, Some(PathBuf::from("/tmp/x.db")));
        assert!(f.quiet && f.share_cpu);
        assert_eq!(f.strategy.as_deref(), Some("trace"));
        assert_eq!(f.jobs, Some(4));
        assert_eq!(f.command, args("python3 -c 1"));

        let f = fast("run -vv --db=/d --hold-cap-ms 50 --meta-jobs 0 --app my -- ls -l");
        assert_eq!((f.verbose, f.db.as_deref()), (2, Some("/d".as_ref())));
        let a = f.run_args();
        assert_eq!((a.hold_cap_ms, a.meta_jobs), (50, 0));
        assert_eq!(a.app.as_deref(), Some("my"));
        assert_eq!(a.command, args("ls -l"));
    }

    /// Every option the full parser gives `run` is one the front takes or hands on: an
    /// option added there and forgotten here fails this test, not a user's launch.
    #[test]
    fn every_run_option_of_the_parser_is_known_to_the_front() {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let run = cli.find_subcommand("run").unwrap();
        let sample = |long: &str| match long {
            "jobs" | "meta-jobs" => Some("2"),
            "window-kb" | "mem-cap-mb" | "hold-cap-ms" => Some("100"),
            "strategy" => Some("trace"),
            "app" => Some("x"),
            "db" => Some("/x.db"),
            _ => None,
        };
        let mut seen = 0;
        for a in run.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            seen += 1;
            let takes_value = a.get_action().takes_values();
            let line = match (takes_value, sample(long)) {
                (true, Some(v)) => format!("run --{long} {v} -- ls"),
                (true, None) => panic!("--{long}: give the front a sample value or route it"),
                (false, _) => format!("run --{long} -- ls"),
            };
            let handed_on = matches!(long, "stats" | "json" | "help" | "explain");
            assert_eq!(classify(&args(&line)).is_none(), handed_on, "`{line}`");
        }
        assert!(seen >= 10, "{seen} options");
    }

    #[test]
    fn a_plain_prefetch_is_run_by_the_front() {
        let p =
            classify_prefetch(&args("--db /x.db prefetch --wait --jobs 8 soffice --json")).unwrap();
        assert_eq!(p.db, Some(PathBuf::from("/x.db")));
        assert!(p.wait && p.json);
        assert_eq!(
            (p.jobs, p.window_kb, p.app.as_str()),
            (Some(8), None, "soffice")
        );
        let a = classify_prefetch(&args("prefetch -q app --window-kb=512")).unwrap();
        assert!(a.quiet && !a.wait);
        assert_eq!(a.args().window_kb, 512);
        assert_eq!(a.args().jobs as usize, crate::prefetch::DEFAULT_JOBS);
        assert_eq!(
            a.args().meta_jobs as usize,
            crate::prefetch::DEFAULT_META_JOBS
        );
        let m = classify_prefetch(&args("prefetch --meta-jobs 8 app")).unwrap();
        assert_eq!(m.args().meta_jobs, 8);
        for s in [
            "prefetch",
            "prefetch --wait",
            "prefetch --help app",
            "prefetch a b",
            "prefetch --jobs 0 a",
            "prefetch --jobs 99 a",
            "prefetch --meta-jobs 17 a",
            "prefetch --window-kb x a",
            "prefetch --nosuch a",
            "prefetch --jobs",
            "plan prefetch a",
        ] {
            assert_eq!(classify_prefetch(&args(s)), None, "`{s}`");
        }
    }

    /// Every option the full parser gives `prefetch` is one the front takes.
    #[test]
    fn every_prefetch_option_of_the_parser_is_known_to_the_front() {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let cmd = cli.find_subcommand("prefetch").unwrap();
        let mut seen = 0;
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if matches!(long, "help" | "db" | "verbose" | "quiet") {
                continue;
            }
            seen += 1;
            let line = if a.get_action().takes_values() {
                format!("prefetch --{long} 4 app")
            } else {
                format!("prefetch --{long} app")
            };
            assert!(classify_prefetch(&args(&line)).is_some(), "`{line}`");
        }
        assert!(seen >= 4, "{seen} options");
    }

    #[test]
    fn everything_else_goes_to_the_full_binary() {
        for s in [
            "",
            "--version",
            "--help",
            "plan list",
            "record -- ls",
            "run",
            "run --",
            "run --stats -- ls",
            "run --json --stats ls",
            "run --help",
            "run -h ls",
            "run --jobs 0 -- ls",
            "run --jobs 65 -- ls",
            "run --meta-jobs 17 -- ls",
            "run --strategy nosuch -- ls",
            "run --window-kb -1 -- ls",
            "run --app= -- ls",
            "run --share-cpu=yes -- ls",
            "run --jobs",
            "--db",
            "run --unknown -- ls",
            "-x run -- ls",
            "--db /x plan list",
        ] {
            assert_eq!(classify(&args(s)), None, "`{s}`");
        }
    }
}
