//! Stage 8, bench: measuring launches. Scenarios (cold, warm, warmstart, ...) are interleaved
//! round by round so drift hits all of them alike; results are medians with their spread, and
//! the gap closed `(cold - t) / (cold - warm)` (FAST and Paralfetch's yardstick).

pub mod launch;
pub mod loading;
pub mod report;
pub mod run;
pub mod sampler;
pub mod stats;
pub mod suite;

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::sys::{self, Exit, Usage};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Suite(#[from] suite::SuiteError),
    #[error("interrupted")]
    Interrupted,
}

/// One timed launch.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    pub scenario: String,
    pub round: u32,
    pub ms: f64,
    pub major_faults: u64,
    #[serde(skip)]
    pub exit: Option<Exit>,
}

/// Run `argv` to completion with output discarded; wall time from spawn to exit.
pub fn time_command(argv: &[OsString]) -> std::io::Result<(f64, Exit, Usage)> {
    let (first, rest) = argv
        .split_first()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty command"))?;
    let t0 = Instant::now();
    let child = Command::new(first)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let (_, exit, usage) = sys::wait4(child.id() as i32, false)?
        .ok_or_else(|| std::io::Error::other("wait4 returned nothing"))?;
    Ok((t0.elapsed().as_secs_f64() * 1e3, exit, usage))
}

/// Drop the page cache (cold scenario preparation).
pub fn make_cold() -> std::io::Result<()> {
    sys::drop_caches()
}

/// Longest `settle` waits for the previous launch's prefetcher.
pub const SETTLE_CAP: Duration = Duration::from_secs(5);

/// Wait (at most `cap`) until no process but this one runs the executable `exe`; true if
/// none does. A launch's detached prefetcher outlives the application by a few ms (it
/// records the launch), with its binary still mapped: a cache drop in that window keeps
/// those pages, and the next launch finds its launcher warm (1.4 MB of the front's 1.6
/// survived one drop in five, right after a launch). Its tail also competes with the next
/// launch. So every measured launch waits for the last one's prefetcher first.
pub fn settle(exe: &Path, cap: Duration) -> bool {
    let want = std::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let me = std::process::id().to_string();
    let running = || {
        std::fs::read_dir("/proc")
            .map(|d| {
                d.filter_map(Result::ok).any(|e| {
                    let name = e.file_name();
                    name.as_encoded_bytes().iter().all(u8::is_ascii_digit)
                        && name != me.as_str()
                        && std::fs::read_link(e.path().join("exe")).is_ok_and(|x| x == want)
                })
            })
            .unwrap_or(false)
    };
    let t0 = Instant::now();
    while running() {
        if t0.elapsed() >= cap {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// The demo's default workload: import (nearly) every module of Python's standard library,
/// a launch that reads hundreds of files and directories, present on any machine with python3.
pub const STDLIB_IMPORT_PY: &str = r#"# warmstart demo workload: import the Python standard library, as a big app starts.
import importlib, pkgutil, sys
SKIP = {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "__phello__",
        "_tkinter", "test", "lib2to3", "ensurepip", "venv", "pydoc_data"}
n = 0
def load(name):
    global n
    try:
        m = importlib.import_module(name)
        n += 1
        return m
    except BaseException:
        return None
for name in sorted(getattr(sys, "stdlib_module_names", ())):
    if name in SKIP:
        continue
    mod = load(name)
    for info in pkgutil.walk_packages(getattr(mod, "__path__", None) or [], name + "."):
        leaf = info.name.rsplit(".", 1)[-1]
        if leaf in ("__main__", "test", "tests") or ".test" in info.name or "idle_test" in info.name:
            continue
        load(info.name)
print(n, "modules imported")
"#;

/// Write the demo workload next to the database and return the command that runs it.
pub fn default_demo_command(state_dir: &Path) -> std::io::Result<Vec<OsString>> {
    let dir = state_dir.join("demo");
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("stdlib_import.py");
    if std::fs::read_to_string(&script).ok().as_deref() != Some(STDLIB_IMPORT_PY) {
        std::fs::write(&script, STDLIB_IMPORT_PY)?;
    }
    // Prefer the system interpreter: a version manager's shim adds its own noise.
    let py = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .iter()
        .find(|p| Path::new(p).exists())
        .map(OsString::from)
        .unwrap_or_else(|| "python3".into());
    Ok(vec![py, script.into_os_string()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settle_waits_for_other_processes_of_the_executable() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("my-sleep");
        std::fs::copy("/bin/sleep", &exe).unwrap();
        // None running: at once.
        assert!(settle(&exe, Duration::ZERO));
        let mut child = Command::new(&exe).arg("30").spawn().unwrap();
        assert!(!settle(&exe, Duration::from_millis(50)), "still running");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(settle(&exe, SETTLE_CAP));
    }
}
