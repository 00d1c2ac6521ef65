//! Measures how soon each system-wide way of seeing an exec reports it, so the daemon's
//! choice (the proc connector) rests on numbers: the proc connector, a fanotify
//! `FAN_OPEN_EXEC` mount mark, and the `sched_process_exec` tracepoint read from `trace_pipe`.
//! Each is timed from just before `posix_spawn` of a small program to the moment a thread
//! blocked on the mechanism wakes with that pid.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};
use serde::Serialize;

use super::procconn::{ProcConnector, ProcEvent};
use super::DaemonError;
use crate::sys::monotonic_ns;
use crate::trace::tracefs::Tracefs;

/// One mechanism's measurement.
#[derive(Clone, Debug, Serialize)]
pub struct Detection {
    pub mechanism: &'static str,
    /// Spawn-to-notification latency of each launch it reported, µs.
    pub samples_us: Vec<f64>,
    /// Launches it did not report within a second.
    pub missed: usize,
    /// What `posix_spawn` itself took (it returns once the exec has happened), µs, median.
    pub spawn_us: f64,
}

/// Waits up to the timeout for events; returns the pids that exec'd.
type Listen = Box<dyn FnMut(u16) -> std::io::Result<Vec<i32>> + Send>;

fn io(what: &str, e: impl std::fmt::Display) -> DaemonError {
    DaemonError::Io(format!("{what}: {e}"))
}

fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, ms: u16) -> std::io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) => Ok(n > 0),
        Err(nix::errno::Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn proc_connector() -> Result<Listen, DaemonError> {
    let pc = ProcConnector::open().map_err(|e| io("proc connector", e))?;
    Ok(Box::new(move |ms| {
        if !wait_readable(pc.fd(), ms)? {
            return Ok(Vec::new());
        }
        Ok(pc
            .recv()?
            .into_iter()
            .filter_map(|e| match e {
                ProcEvent::Exec { pid, .. } => Some(pid),
                _ => None,
            })
            .collect())
    }))
}

fn fanotify(exe: &Path) -> Result<Listen, DaemonError> {
    let fan = Fanotify::init(
        InitFlags::FAN_CLASS_NOTIF | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
        EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC,
    )
    .map_err(|e| io("fanotify_init", e))?;
    fan.mark(
        MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_MOUNT,
        MaskFlags::FAN_OPEN_EXEC,
        nix::fcntl::AT_FDCWD,
        Some(exe),
    )
    .map_err(|e| io(&format!("fanotify mark on {}", exe.display()), e))?;
    Ok(Box::new(move |ms| {
        if !wait_readable(fan.as_fd(), ms)? {
            return Ok(Vec::new());
        }
        match fan.read_events() {
            // Dropping each event closes its fd.
            Ok(evs) => Ok(evs.iter().map(|e| e.pid()).collect()),
            Err(nix::errno::Errno::EAGAIN) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }))
}

fn tracepoint(tfs: &Tracefs) -> Result<(Listen, crate::trace::tracefs::Instance), DaemonError> {
    let inst = tfs.create_instance("detect")?;
    inst.enable_event("sched", "sched_process_exec")?;
    inst.set_on(true)?;
    let path: PathBuf = inst.dir().join("trace_pipe");
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .map_err(|e| io(&path.display().to_string(), e))?;
    let mut pending = String::new();
    let listen: Listen = Box::new(move |ms| {
        if !wait_readable(f.as_fd(), ms)? {
            return Ok(Vec::new());
        }
        let mut buf = [0u8; 16384];
        let n = match f.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(e) => return Err(e),
        };
        pending.push_str(&String::from_utf8_lossy(&buf[..n]));
        let mut pids = Vec::new();
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Some(e) = crate::trace::event::parse_exec_text(&line) {
                pids.push(e.pid);
            }
        }
        Ok(pids)
    });
    Ok((listen, inst))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Time `launches` spawns of `exe` against one listener running on its own thread.
fn time_one(
    mechanism: &'static str,
    mut listen: Listen,
    exe: &Path,
    launches: usize,
) -> Result<Detection, DaemonError> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(i32, u64)>();
    let stop2 = stop.clone();
    let th = std::thread::Builder::new()
        .name(format!("detect-{mechanism}"))
        .spawn(move || -> std::io::Result<()> {
            while !stop2.load(Ordering::Relaxed) {
                let pids = listen(50)?;
                let now = monotonic_ns();
                for p in pids {
                    let _ = tx.send((p, now));
                }
            }
            Ok(())
        })
        .map_err(|e| io("spawn listener thread", e))?;
    // Let the listener block before the first launch.
    std::thread::sleep(Duration::from_millis(100));
    let mut seen: HashMap<i32, u64> = HashMap::new();
    let mut samples = Vec::new();
    let mut spawn = Vec::new();
    let mut missed = 0;
    let timed = (|| -> Result<(), DaemonError> {
        for _ in 0..launches {
            let t0 = monotonic_ns();
            let mut child = Command::new(exe)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| io(&format!("run {}", exe.display()), e))?;
            spawn.push(monotonic_ns().saturating_sub(t0) as f64 / 1000.0);
            let pid = child.id() as i32;
            let deadline = Instant::now() + Duration::from_secs(1);
            let at = loop {
                if let Some(at) = seen.remove(&pid) {
                    break Some(at);
                }
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok((p, at)) => {
                        seen.insert(p, at);
                    }
                    Err(_) => break None,
                }
            };
            let _ = child.wait();
            match at {
                Some(at) => samples.push(at.saturating_sub(t0) as f64 / 1000.0),
                None => missed += 1,
            }
            // Keep launches apart so each is a lone event, as a user's launches are.
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })();
    // The listener stops on every path, so the tracefs instance can go.
    stop.store(true, Ordering::Relaxed);
    let joined = th.join();
    timed?;
    match joined {
        Ok(r) => r.map_err(|e| io(mechanism, e))?,
        Err(_) => return Err(io(mechanism, "listener thread panicked")),
    }
    Ok(Detection {
        mechanism,
        samples_us: samples,
        missed,
        spawn_us: median(&spawn),
    })
}

/// Measure every mechanism in turn with `launches` spawns of `exe` each.
pub fn measure(exe: &Path, launches: usize) -> Result<Vec<Detection>, DaemonError> {
    let mut out = vec![time_one(
        "proc-connector",
        proc_connector()?,
        exe,
        launches,
    )?];
    out.push(time_one(
        "fanotify-open-exec",
        fanotify(exe)?,
        exe,
        launches,
    )?);
    let tfs = Tracefs::open()?;
    let (listen, inst) = tracepoint(&tfs)?;
    let r = time_one("tracepoint-trace-pipe", listen, exe, launches);
    drop(inst);
    out.push(r?);
    Ok(out)
}

/// The median and the 90th percentile of a sample, µs.
pub fn summary(d: &Detection) -> (f64, f64) {
    let mut s = d.samples_us.clone();
    s.sort_by(f64::total_cmp);
    let p90 = s
        .get(((s.len() as f64 * 0.9).ceil() as usize).saturating_sub(1))
        .copied()
        .unwrap_or(f64::NAN);
    (median(&s), p90)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_a_sample() {
        let d = Detection {
            mechanism: "x",
            samples_us: (1..=10).map(|i| i as f64).collect(),
            missed: 0,
            spawn_us: 1.0,
        };
        assert_eq!(summary(&d), (6.0, 9.0));
    }
}
