//! One timed launch for the benchmark: start the command in its own process group, wait for
//! its ready condition (exit, an output line, a file, a mapped X11 window), then close whatever
//! is still running. Also the Xvfb server GUI apps run under.

use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeWindowAttributesAux, ConnectionExt, EventMask, Window,
};
use x11rb::protocol::Event;

use super::suite::Ready;
use super::BenchError;
use crate::sys::{self, Exit};

/// A launch to time.
pub struct LaunchSpec<'a> {
    pub argv: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
    pub ready: &'a Ready,
    pub timeout: Duration,
    /// X display for GUI apps.
    pub display: Option<&'a str>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Milliseconds from spawn to ready (or to the timeout).
    pub ms: f64,
    pub ready: bool,
    pub exit: Option<Exit>,
    pub usage: Option<sys::Usage>,
}

enum Ev {
    Exited(Exit, sys::Usage),
    Ready,
}

/// Spawn `spec` in a new process group, wait for it to be ready, close it.
pub fn launch(spec: &LaunchSpec<'_>, interrupt: &AtomicUsize) -> Result<Outcome, BenchError> {
    if let Ready::File(p) = spec.ready {
        let _ = std::fs::remove_file(p);
    }
    let (tx, rx) = mpsc::channel::<Ev>();
    let stop = Arc::new(AtomicBool::new(false));
    // Subscribe to window maps before the app can create its window.
    let watcher = match (spec.ready, spec.display) {
        (Ready::Window(re), Some(d)) => Some(WindowWatcher::start(
            d,
            re.clone(),
            tx.clone(),
            stop.clone(),
        )?),
        (Ready::Window(_), None) => {
            return Err(BenchError::Setup(
                "a window-ready app needs a display".into(),
            ))
        }
        _ => None,
    };
    let piped = matches!(spec.ready, Ready::Output(_));
    let (first, rest) = spec
        .argv
        .split_first()
        .ok_or_else(|| BenchError::Setup("empty command".into()))?;
    let mut cmd = Command::new(first);
    cmd.args(rest)
        .current_dir(spec.cwd)
        .stdin(Stdio::null())
        .stdout(if piped { Stdio::piped() } else { Stdio::null() })
        .stderr(if piped { Stdio::piped() } else { Stdio::null() })
        .process_group(0);
    for (k, v) in spec.env {
        cmd.env(k, v);
    }
    if let Some(d) = spec.display {
        cmd.env("DISPLAY", d);
    }
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .map_err(|e| BenchError::Setup(format!("cannot start `{first}`: {e}")))?;
    let pid = child.id() as i32;
    if let Ready::Output(re) = spec.ready {
        let (re, tx) = (re.clone(), tx.clone());
        each_line(&mut child, move |line| {
            if re.is_match(&line) {
                let _ = tx.send(Ev::Ready);
            }
            true
        });
    }
    {
        let tx = tx.clone();
        std::thread::spawn(move || {
            if let Ok(Some((_, exit, usage))) = sys::wait4(pid, false) {
                let _ = tx.send(Ev::Exited(exit, usage));
            }
        });
    }
    drop(child);
    let mut exit = None;
    let mut usage = None;
    let mut ready_ms = None;
    while ready_ms.is_none() {
        if interrupt.load(Ordering::SeqCst) != 0 {
            close_group(pid, &rx, &mut exit);
            stop.store(true, Ordering::SeqCst);
            return Err(BenchError::Interrupted);
        }
        if t0.elapsed() >= spec.timeout {
            break;
        }
        match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(Ev::Ready) => ready_ms = Some(t0.elapsed().as_secs_f64() * 1e3),
            Ok(Ev::Exited(e, u)) => {
                exit = Some(e);
                usage = Some(u);
                let now = t0.elapsed().as_secs_f64() * 1e3;
                match spec.ready {
                    Ready::Exit => ready_ms = Some(now),
                    Ready::File(p) if Path::new(p).exists() => ready_ms = Some(now),
                    _ => break, // exited without becoming ready
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ready::File(p) = spec.ready {
                    if Path::new(p).exists() {
                        ready_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    stop.store(true, Ordering::SeqCst);
    drop(watcher);
    close_group(pid, &rx, &mut exit);
    Ok(Outcome {
        ms: ready_ms.unwrap_or(t0.elapsed().as_secs_f64() * 1e3),
        ready: ready_ms.is_some(),
        exit,
        usage,
    })
}

/// Hand every line of the child's stdout and stderr (each piped) to `f`, from a thread per
/// stream, until the stream ends or `f` returns false.
pub(super) fn each_line<F>(child: &mut Child, f: F)
where
    F: Fn(String) -> bool + Clone + Send + 'static,
{
    let streams = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ];
    for stream in streams.into_iter().flatten() {
        let f = f.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                if !f(line) {
                    break;
                }
            }
        });
    }
}

/// Close the launch: SIGTERM its process group (the leader too, if still running), wait up to
/// 5 s for the leader, then SIGKILL whatever is left of the group.
fn close_group(pid: i32, rx: &mpsc::Receiver<Ev>, exit: &mut Option<Exit>) {
    let pg = Pid::from_raw(pid);
    if exit.is_none() {
        let _ = killpg(pg, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while exit.is_none() && Instant::now() < deadline {
            if let Ok(Ev::Exited(e, _)) = rx.recv_timeout(Duration::from_millis(20)) {
                *exit = Some(e);
            }
        }
    }
    // Stragglers (helpers of the app, a detached prefetcher) must not run into the next
    // launch. SIGTERM first: a prefetcher stops on it and gives back the inode readahead
    // setting it holds; killed outright it would leave the setting changed.
    if killpg(pg, Signal::SIGTERM).is_ok() {
        let deadline = Instant::now() + Duration::from_secs(2);
        while killpg(pg, None).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if killpg(pg, Signal::SIGKILL).is_ok() {
            // What a killed holder left changed, unless someone else still holds it.
            let n = crate::trace::knobs::recover_journal(Path::new(crate::trace::knobs::RUN_DIR));
            if n > 0 {
                tracing::warn!("restored {n} setting(s) left by a killed prefetcher");
            }
        }
    }
    if exit.is_none() {
        if let Ok(Ev::Exited(e, _)) = rx.recv_timeout(Duration::from_secs(2)) {
            *exit = Some(e);
        }
    }
}

/// Watches an X server for a mapped top-level window whose title matches.
struct WindowWatcher {
    thread: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl WindowWatcher {
    fn start(
        display: &str,
        re: regex::Regex,
        tx: mpsc::Sender<Ev>,
        stop: Arc<AtomicBool>,
    ) -> Result<WindowWatcher, BenchError> {
        let (conn, screen) = x11rb::connect(Some(display)).map_err(|e| {
            BenchError::Setup(format!("cannot connect to X display {display}: {e}"))
        })?;
        let root = conn.setup().roots[screen].root;
        let x = |e: &dyn std::fmt::Display| BenchError::Setup(format!("X11: {e}"));
        conn.change_window_attributes(
            root,
            &ChangeWindowAttributesAux::new().event_mask(EventMask::SUBSTRUCTURE_NOTIFY),
        )
        .map_err(|e| x(&e))?
        .check()
        .map_err(|e| x(&e))?;
        let net_wm_name = conn
            .intern_atom(false, b"_NET_WM_NAME")
            .map_err(|e| x(&e))?
            .reply()
            .map_err(|e| x(&e))?
            .atom;
        let utf8 = conn
            .intern_atom(false, b"UTF8_STRING")
            .map_err(|e| x(&e))?
            .reply()
            .map_err(|e| x(&e))?
            .atom;
        let stop2 = stop.clone();
        let thread = std::thread::spawn(move || {
            let title = |w: Window| -> String {
                for (atom, ty) in [
                    (net_wm_name, utf8),
                    (AtomEnum::WM_NAME.into(), AtomEnum::STRING.into()),
                ] {
                    if let Ok(Ok(r)) = conn
                        .get_property(false, w, atom, ty, 0, 1024)
                        .map(|c| c.reply())
                    {
                        if !r.value.is_empty() {
                            return String::from_utf8_lossy(&r.value).into_owned();
                        }
                    }
                }
                String::new()
            };
            let mut mapped: Vec<Window> = Vec::new();
            while !stop2.load(Ordering::SeqCst) {
                match conn.poll_for_event() {
                    Ok(Some(Event::MapNotify(e))) if !e.override_redirect => {
                        // Watch the title too: many toolkits set it after mapping.
                        let _ = conn.change_window_attributes(
                            e.window,
                            &ChangeWindowAttributesAux::new()
                                .event_mask(EventMask::PROPERTY_CHANGE),
                        );
                        let _ = conn.flush();
                        mapped.push(e.window);
                        if re.is_match(&title(e.window)) {
                            let _ = tx.send(Ev::Ready);
                            return;
                        }
                    }
                    Ok(Some(Event::PropertyNotify(e))) if mapped.contains(&e.window) => {
                        if re.is_match(&title(e.window)) {
                            let _ = tx.send(Ev::Ready);
                            return;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => std::thread::sleep(Duration::from_millis(1)),
                    Err(_) => return,
                }
            }
        });
        Ok(WindowWatcher {
            thread: Some(thread),
            stop,
        })
    }
}

impl Drop for WindowWatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// An Xvfb server owned by the harness; stopped when dropped.
pub struct Xvfb {
    child: Child,
    pub display: String,
}

impl Xvfb {
    pub fn start() -> Result<Xvfb, BenchError> {
        let n = (90..140)
            .find(|n| {
                !Path::new(&format!("/tmp/.X11-unix/X{n}")).exists()
                    && !Path::new(&format!("/tmp/.X{n}-lock")).exists()
            })
            .ok_or_else(|| BenchError::Setup("no free X display number in :90..:139".into()))?;
        let display = format!(":{n}");
        let child = Command::new("Xvfb")
            .args([
                display.as_str(),
                "-screen",
                "0",
                "1280x1024x24",
                "-nolisten",
                "tcp",
                "-noreset",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                BenchError::Setup(format!(
                    "cannot start Xvfb (install package xvfb: bench/install-suite): {e}"
                ))
            })?;
        let x = Xvfb { child, display };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if x11rb::connect(Some(&x.display)).is_ok() {
                return Ok(x);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(BenchError::Setup("Xvfb did not start within 10 s".into()))
    }
}

impl Drop for Xvfb {
    /// SIGTERM lets the server remove its lock file and socket. Killed outright it left both
    /// behind, and with them one display number fewer at every run, until none of :90..:139
    /// was free; whatever a server that had to be killed still left is removed here.
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(3);
        while !matches!(self.child.try_wait(), Ok(Some(_))) {
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let n = self.display.trim_start_matches(':');
        let lock = format!("/tmp/.X{n}-lock");
        // The lock file holds its server's pid: only ours is removed.
        if std::fs::read_to_string(&lock).is_ok_and(|s| s.trim() == pid.to_string()) {
            let _ = std::fs::remove_file(&lock);
            let _ = std::fs::remove_file(format!("/tmp/.X11-unix/X{n}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argv: &[&str], ready: Ready, timeout_ms: u64) -> Outcome {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let dir = tempfile::tempdir().unwrap();
        launch(
            &LaunchSpec {
                argv: &argv,
                env: &[],
                cwd: dir.path(),
                ready: &ready,
                timeout: Duration::from_millis(timeout_ms),
                display: None,
            },
            &AtomicUsize::new(0),
        )
        .unwrap()
    }

    #[test]
    fn xvfb_leaves_no_lock_file_or_socket() {
        if crate::launch::resolve_command(std::ffi::OsStr::new("Xvfb")).is_err() {
            return crate::testutil::skip("Xvfb is not installed (package xvfb)");
        }
        let x = Xvfb::start().unwrap();
        let n = x.display.trim_start_matches(':').to_string();
        let lock = format!("/tmp/.X{n}-lock");
        let socket = format!("/tmp/.X11-unix/X{n}");
        assert!(Path::new(&lock).exists(), "{lock}");
        drop(x);
        assert!(!Path::new(&lock).exists(), "{lock} left behind");
        assert!(!Path::new(&socket).exists(), "{socket} left behind");
    }

    #[test]
    fn ready_on_exit() {
        let o = run(&["sh", "-c", "sleep 0.1; exit 3"], Ready::Exit, 5000);
        assert!(o.ready);
        assert_eq!(o.exit, Some(Exit::Code(3)));
        assert!(o.ms >= 100.0);
    }

    #[test]
    fn ready_on_output_then_closed() {
        let re = regex::Regex::new("^up and running$").unwrap();
        let t = Instant::now();
        let o = run(
            &[
                "sh",
                "-c",
                "echo starting; sleep 0.2; echo up and running; sleep 30",
            ],
            Ready::Output(re),
            10_000,
        );
        assert!(o.ready);
        assert!(o.ms >= 200.0 && o.ms < 5000.0, "{}", o.ms);
        // The app was closed (SIGTERM), not waited for.
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(o.exit, Some(Exit::Signal(libc::SIGTERM)));
    }

    #[test]
    fn ready_on_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("done");
        let script = format!("sleep 0.1; touch {}; sleep 30", f.display());
        let o = run(
            &["sh", "-c", &script],
            Ready::File(f.display().to_string()),
            10_000,
        );
        assert!(o.ready);
    }

    #[test]
    fn timeout_and_early_exit_are_not_ready() {
        let o = run(&["sleep", "10"], Ready::Exit, 200);
        assert!(!o.ready);
        let re = regex::Regex::new("never").unwrap();
        let o = run(&["true"], Ready::Output(re), 5000);
        assert!(!o.ready);
        assert_eq!(o.exit, Some(Exit::Code(0)));
    }

    #[test]
    fn ready_on_window_under_xvfb() {
        if Command::new("Xvfb").arg("-help").output().is_err()
            || Command::new("xmessage").arg("-help").output().is_err()
        {
            return crate::testutil::skip(
                "Xvfb or xmessage (x11-utils) not installed; run bench/install-suite",
            );
        }
        let x = Xvfb::start().unwrap();
        let argv: Vec<String> = ["xmessage", "-title", "warmstart-test-window", "hello"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let ready = Ready::Window(regex::Regex::new("warmstart-test-window").unwrap());
        let o = launch(
            &LaunchSpec {
                argv: &argv,
                env: &[],
                cwd: dir.path(),
                ready: &ready,
                timeout: Duration::from_secs(20),
                display: Some(&x.display),
            },
            &AtomicUsize::new(0),
        )
        .unwrap();
        assert!(o.ready, "{o:?}");
    }
}
