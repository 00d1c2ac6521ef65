//! Starting the application: PATH resolution, a "gated" spawn for tracing (the child exists
//! but waits before exec, so its pid can be put in the tracer's pid filter first), and passing
//! the child's exit status and signals through to whoever started warmstart.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::unistd::{fork, pipe2, ForkResult, Pid};

use crate::sys::Exit;

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("command `{0}` not found (not a path to an executable, and not in PATH)")]
    NotFound(String),
    #[error("cannot execute `{path}`: {source}")]
    Exec {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("command line contains a NUL byte")]
    Nul,
    #[error("cannot start the command: {0}")]
    Spawn(#[source] std::io::Error),
}

/// Resolve argv[0] the way execvp does: a name with a slash is a path; otherwise the first
/// executable match in PATH. The result is absolute (canonical when possible).
pub fn resolve_command(arg0: &OsStr) -> Result<PathBuf, LaunchError> {
    let name = arg0.to_string_lossy().into_owned();
    if name.is_empty() {
        return Err(LaunchError::NotFound(name));
    }
    let candidate = if arg0.as_bytes().contains(&b'/') {
        let p = PathBuf::from(arg0);
        is_executable(&p).then_some(p)
    } else {
        let path =
            std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
        std::env::split_paths(&path)
            .map(|d| d.join(arg0))
            .find(|p| is_executable(p))
    };
    let p = candidate.ok_or(LaunchError::NotFound(name))?;
    let abs = if p.is_absolute() {
        p
    } else {
        std::env::current_dir().map_err(LaunchError::Spawn)?.join(p)
    };
    Ok(abs)
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Whether the ELF executable at `path` is linked statically (it has no program interpreter).
/// The launcher is read from disk in front of every cold prefetched launch, and a dynamic one
/// also has the loader find and map `libgcc_s` (not kept in memory by other processes, so
/// read from disk too) and bind its symbols: linked statically, warmstart's exec to the app's
/// took 6.9 against 9.0 ms cold and 2.4-2.6 against 3.2 ms warm (docs/measurements.md,
/// 2026-11-29, seventh entry). `None` if it is not a 64-bit ELF file.
pub fn statically_linked(path: &Path) -> std::io::Result<Option<bool>> {
    use object::read::elf::ProgramHeader;
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)?
        .take(4096)
        .read_to_end(&mut head)?;
    Ok(crate::elf::headers(&head).map(|h| {
        !h.programs
            .iter()
            .any(|p| p.p_type(h.endian) == object::elf::PT_INTERP)
    }))
}

/// Replace this process with `exe` (argv[0] `arg0`, then `args`), with the signal
/// dispositions Rust's runtime changed reset. Returns only on failure.
pub fn exec_replace(exe: &Path, arg0: &OsStr, args: &[OsString]) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    std::process::Command::new(exe).arg0(arg0).args(args).exec()
}

/// A forked child waiting for `release` before it execs.
pub struct GatedChild {
    pid: Pid,
    gate: Option<OwnedFd>,
    err_r: OwnedFd,
    path: String,
}

impl GatedChild {
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Let the child exec. Returns once exec has succeeded (or reports why it failed; the
    /// failed child is reaped).
    pub fn release(mut self) -> Result<i32, LaunchError> {
        let gate = self.gate.take().ok_or(LaunchError::Nul)?;
        nix::unistd::write(&gate, &[1u8]).map_err(|e| LaunchError::Spawn(e.into()))?;
        drop(gate);
        // The error pipe is close-on-exec: EOF means exec succeeded; 4 bytes are an errno.
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match nix::unistd::read(&self.err_r, &mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(LaunchError::Spawn(e.into())),
            }
        }
        if got == 4 {
            let errno = i32::from_ne_bytes(buf);
            let _ = crate::sys::wait4(self.pid.as_raw(), false);
            return Err(LaunchError::Exec {
                path: self.path.clone(),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        Ok(self.pid.as_raw())
    }
}

impl Drop for GatedChild {
    fn drop(&mut self) {
        if self.gate.take().is_some() {
            // Never released (an error came first): the child has not exec'd anything yet.
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
            let _ = crate::sys::wait4(self.pid.as_raw(), false);
        }
    }
}

/// Fork a child that waits on a pipe, then execs `exe` with `argv` (argv[0] as given). With
/// `quiet`, the child's stdin, stdout and stderr are /dev/null.
pub fn spawn_gated(exe: &Path, argv: &[OsString], quiet: bool) -> Result<GatedChild, LaunchError> {
    let null = if quiet {
        Some(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")
                .map_err(LaunchError::Spawn)?,
        )
    } else {
        None
    };
    let null_raw = null.as_ref().map(|f| f.as_raw_fd());
    let path_c = CString::new(exe.as_os_str().as_bytes()).map_err(|_| LaunchError::Nul)?;
    let args_c: Vec<CString> = argv
        .iter()
        .map(|a| CString::new(a.as_bytes()).map_err(|_| LaunchError::Nul))
        .collect::<Result<_, _>>()?;
    let mut args_p: Vec<*const libc::c_char> = args_c.iter().map(|a| a.as_ptr()).collect();
    args_p.push(std::ptr::null());
    let (gate_r, gate_w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| LaunchError::Spawn(e.into()))?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC).map_err(|e| LaunchError::Spawn(e.into()))?;
    let (gate_r_raw, err_w_raw) = (gate_r.as_raw_fd(), err_w.as_raw_fd());
    let (gate_w_raw, err_r_raw) = (gate_w.as_raw_fd(), err_r.as_raw_fd());
    // SAFETY: after fork in a multi-threaded process the child may only call
    // async-signal-safe functions. The child branch below uses only close, read, signal,
    // execv, write and _exit on memory prepared before the fork; it never returns or unwinds.
    match unsafe { fork() }.map_err(|e| LaunchError::Spawn(e.into()))? {
        ForkResult::Child => unsafe {
            // The parent's ends: holding the gate's write end would hide the parent's EOF.
            libc::close(gate_w_raw);
            libc::close(err_r_raw);
            if let Some(n) = null_raw {
                libc::dup2(n, 0);
                libc::dup2(n, 1);
                libc::dup2(n, 2);
            }
            let mut b = 0u8;
            let n = libc::read(gate_r_raw, &mut b as *mut u8 as *mut libc::c_void, 1);
            if n != 1 {
                libc::_exit(126);
            }
            // Rust ignores SIGPIPE; the application expects the default.
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execv(path_c.as_ptr(), args_p.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(
                err_w_raw,
                &errno as *const i32 as *const libc::c_void,
                std::mem::size_of::<i32>(),
            );
            libc::_exit(127);
        },
        ForkResult::Parent { child } => {
            drop(gate_r);
            drop(err_w);
            Ok(GatedChild {
                pid: child,
                gate: Some(gate_w),
                err_r,
                path: exe.display().to_string(),
            })
        }
    }
}

/// Signals a wrapper forwards to the application. SIGINT and SIGQUIT are not forwarded: the
/// terminal already sends them to the whole foreground process group, child included; the
/// wrapper only survives them (as system(3) does).
pub const FORWARDED: &[i32] = &[
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGCONT,
    libc::SIGWINCH,
];

/// Forwards signals to a child while alive; dropping it stops forwarding.
pub struct Forwarder {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Forwarder {
    pub fn start(child: i32) -> std::io::Result<Forwarder> {
        let mut sigs: Vec<i32> = FORWARDED.to_vec();
        sigs.extend([libc::SIGINT, libc::SIGQUIT]);
        let mut signals = signal_hook::iterator::Signals::new(&sigs)?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("warmstart-signals".into())
            .spawn(move || {
                for sig in signals.forever() {
                    if FORWARDED.contains(&sig) {
                        // SAFETY: kill has no memory-safety preconditions.
                        unsafe { libc::kill(child, sig) };
                    }
                }
            })?;
        Ok(Forwarder {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// End this process the way the child ended: same exit code, or the same signal (so a shell
/// sees "killed by SIGINT", not a plain status).
pub fn exit_like(exit: Exit) -> ! {
    match exit {
        Exit::Code(c) => std::process::exit(c),
        Exit::Signal(s) => {
            let _ = signal_hook::low_level::emulate_default_handler(s);
            // Signals whose default is to ignore or stop land here.
            std::process::exit(128 + s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_like_execvp() {
        let sh = resolve_command(OsStr::new("sh")).unwrap();
        assert!(sh.is_absolute());
        assert!(matches!(
            resolve_command(OsStr::new("definitely-not-a-command-xyz")),
            Err(LaunchError::NotFound(_))
        ));
        assert!(resolve_command(OsStr::new("/etc/passwd")).is_err());
        assert!(resolve_command(OsStr::new("")).is_err());
    }

    #[test]
    fn tells_a_static_executable_from_a_dynamic_one() {
        let sh = resolve_command(OsStr::new("sh")).unwrap();
        assert_eq!(statically_linked(&sh).unwrap(), Some(false));
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script");
        std::fs::write(&script, b"#!/bin/sh\n").unwrap();
        assert_eq!(statically_linked(&script).unwrap(), None);
        assert!(statically_linked(&dir.path().join("absent")).is_err());
        // A static executable, made with the C toolchain Rust links with (glibc's libc.a
        // comes with the headers, libc6-dev).
        let src = dir.path().join("s.c");
        std::fs::write(&src, b"int main(void){return 0;}\n").unwrap();
        let out = dir.path().join("s");
        let st = std::process::Command::new("cc")
            .args(["-static", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success(), "cc -static failed");
        assert_eq!(statically_linked(&out).unwrap(), Some(true));
    }

    #[test]
    fn gated_child_runs_only_when_released() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let exe = resolve_command(OsStr::new("sh")).unwrap();
        let argv: Vec<OsString> = vec![
            "sh".into(),
            "-c".into(),
            format!("touch {}; exit 7", marker.display()).into(),
        ];
        let child = spawn_gated(&exe, &argv, false).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!marker.exists(), "the gate holds the child before exec");
        let pid = child.release().unwrap();
        let (_, exit, _) = crate::sys::wait4(pid, false).unwrap().unwrap();
        assert_eq!(exit, Exit::Code(7));
        assert!(marker.exists());
    }

    #[test]
    fn gated_exec_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("not-executable");
        std::fs::write(&p, b"#!/nonexistent/interpreter\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = spawn_gated(&p, &[p.clone().into_os_string()], true).unwrap();
        assert!(matches!(child.release(), Err(LaunchError::Exec { .. })));
    }

    #[test]
    fn dropped_gate_reaps_the_child() {
        let exe = resolve_command(OsStr::new("true")).unwrap();
        let child = spawn_gated(&exe, &["true".into()], false).unwrap();
        let pid = child.pid();
        drop(child);
        // Already reaped: waiting again finds no such child.
        assert!(crate::sys::wait4(pid, true).is_err());
    }
}
