//! tracefs: finding or mounting it, and private instances that are removed on drop. Every
//! instance this crate creates is named `warmstart-<pid>-<tag>` so that a later run can remove
//! the instances of a process that was killed before it could clean up.

use std::fs;
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use super::format::{EventFormat, PageHeader};
use super::TraceError;

pub const DEFAULT_MOUNT: &str = "/sys/kernel/tracing";
pub const INSTANCE_PREFIX: &str = "warmstart-";

/// Instances this process holds, and the most it may hold (`cap_instances`). Each holds
/// ring buffers of its own (8 MiB per CPU for a launch's trace): an exec storm once took the
/// daemon to 433 instances and 7.5 GB (issue #30). One count for the whole process, since
/// the daemon's parts (exec watch, traces, the burst miner and its checks) each open tracefs.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// When a launch was last seen (CLOCK_MONOTONIC ns; 0: never): see `launches_quiet`.
static LAST_LAUNCH: AtomicU64 = AtomicU64::new(0);

/// A launch was seen now: a tracer may be about to attach to it.
pub fn note_launch() {
    LAST_LAUNCH.store(crate::sys::monotonic_ns(), Ordering::Relaxed);
}

/// No launch seen for `quiet`. Making or removing an instance holds the kernel's tracing
/// locks for 30-200 ms on this VM (the new instance's event directories, the removed one's
/// RCU grace period), and a tracer attaching meanwhile waits for them: a daemon's
/// attach to a launch took 32-46 ms instead of 0.6 ms when a burst check made its next
/// instance at the launch's trigger open (docs/measurements.md, 2026-11-26, sixth entry).
/// What can wait (the burst service's next watch) is made when launches are quiet.
pub fn launches_quiet(quiet: Duration) -> bool {
    let last = LAST_LAUNCH.load(Ordering::Relaxed);
    last == 0 || crate::sys::monotonic_ns().saturating_sub(last) >= quiet.as_nanos() as u64
}

static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Let this process hold at most `n` tracefs instances from now on (the daemon's
/// `max_instances`); instances beyond it are refused with `TraceError::InstanceCap`.
pub fn cap_instances(n: usize) {
    CAP.store(n, Ordering::SeqCst);
}

/// The tracefs instances this process holds.
pub fn live_instances() -> usize {
    LIVE.load(Ordering::SeqCst)
}

/// The count after one more instance, if `live` held now leave room for it and for `leave`
/// more under `cap`.
fn admit(live: usize, leave: usize, cap: usize) -> Option<usize> {
    (live.saturating_add(leave) < cap).then_some(live + 1)
}

/// A mounted tracefs.
#[derive(Clone, Debug)]
pub struct Tracefs {
    root: PathBuf,
}

impl Tracefs {
    /// Use an existing tracefs mount, or mount one at /sys/kernel/tracing (and leave it
    /// mounted: other tools expect it there).
    pub fn open() -> Result<Tracefs, TraceError> {
        if let Some(root) = find_mount()? {
            return Ok(Tracefs { root });
        }
        let target = Path::new(DEFAULT_MOUNT);
        nix::mount::mount(
            Some("nodev"),
            target,
            Some("tracefs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .map_err(|e| TraceError::Mount(io::Error::from(e)))?;
        tracing::info!("tracefs was not mounted; mounted it at {DEFAULT_MOUNT}");
        Ok(Tracefs {
            root: target.to_path_buf(),
        })
    }

    /// A tracefs at a given root (tests use a fake tree).
    pub fn at(root: impl Into<PathBuf>) -> Tracefs {
        Tracefs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn event_format(&self, system: &str, event: &str) -> Result<EventFormat, TraceError> {
        if hidden(system, event) {
            return Err(TraceError::MissingEvent(format!("{system}:{event}")));
        }
        let p = self
            .root
            .join("events")
            .join(system)
            .join(event)
            .join("format");
        let text = read_tracefs(&p).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                TraceError::MissingEvent(format!("{system}:{event}"))
            } else {
                TraceError::io(&p, e)
            }
        })?;
        EventFormat::parse(&text)
    }

    pub fn page_header(&self) -> Result<PageHeader, TraceError> {
        let p = self.root.join("events/header_page");
        PageHeader::parse(&read_tracefs(&p).map_err(|e| TraceError::io(&p, e))?)
    }

    /// Create a new private instance, tracing off until `set_on(true)`; `InstanceCap` when
    /// this process holds as many as `cap_instances` allows.
    pub fn create_instance(&self, tag: &str) -> Result<Instance, TraceError> {
        self.create_instance_leaving(tag, 0)
    }

    /// `create_instance`, but refused unless `leave` instances stay free under the cap after
    /// it: what may wait (a burst's check) never takes the last instance a launch's trace
    /// needs.
    pub fn create_instance_leaving(&self, tag: &str, leave: usize) -> Result<Instance, TraceError> {
        let cap = CAP.load(Ordering::SeqCst);
        if LIVE
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| admit(n, leave, cap))
            .is_err()
        {
            return Err(TraceError::InstanceCap(cap));
        }
        let name = format!("{INSTANCE_PREFIX}{}-{tag}", std::process::id());
        let dir = self.root.join("instances").join(&name);
        if let Err(e) = fs::create_dir(&dir) {
            LIVE.fetch_sub(1, Ordering::SeqCst);
            return Err(TraceError::io(&dir, e));
        }
        let inst = Instance {
            dir,
            name,
            triggers: Default::default(),
        };
        // A new instance starts with tracing on; keep it quiet until it is configured.
        inst.write("tracing_on", "0")?;
        Ok(inst)
    }

    /// warmstart instances whose creator's pid satisfies `keep`.
    fn instances_of(&self, keep: impl Fn(u32) -> bool) -> Vec<PathBuf> {
        let Ok(rd) = fs::read_dir(self.root.join("instances")) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid: u32 = name
                    .strip_prefix(INSTANCE_PREFIX)?
                    .split('-')
                    .next()?
                    .parse()
                    .ok()?;
                keep(pid).then(|| e.path())
            })
            .collect()
    }

    /// Instances left by warmstart processes that no longer run (killed with SIGKILL, say).
    pub fn stale_instances(&self) -> Vec<PathBuf> {
        self.instances_of(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    }

    /// Remove instances of dead warmstart processes; returns how many were removed.
    pub fn remove_stale_instances(&self) -> usize {
        let n = remove_all(&self.stale_instances());
        if n > 0 {
            tracing::warn!("removed {n} tracefs instance(s) left by warmstart processes that died");
        }
        n
    }

    /// Remove this process's own instances: the last step of a shutdown, for any a worker
    /// thread still held when it was told to stop. Returns how many were removed.
    pub fn remove_own_instances(&self) -> usize {
        let me = std::process::id();
        remove_all(&self.instances_of(|pid| pid == me))
    }
}

fn remove_all(dirs: &[PathBuf]) -> usize {
    let mut n = 0;
    for dir in dirs {
        match fs::remove_dir(dir) {
            Ok(()) => n += 1,
            Err(e) => tracing::warn!("could not remove tracefs instance {}: {e}", dir.display()),
        }
    }
    n
}

/// Read a tracefs file whole. Some (events/header_page) answer only the first read() of an
/// open file, so the first read must be large: std's read_to_string starts with a 32-byte probe.
pub fn read_tracefs(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let mut f = fs::File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Names of warmstart instances present now (tests check nothing is left behind).
pub fn warmstart_instances(root: &Path) -> Vec<String> {
    fs::read_dir(root.join("instances"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(INSTANCE_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

/// Events named in `WARMSTART_HIDE_EVENTS` (`system:event,...`) are treated as absent: how
/// an older kernel is emulated here (issue #29: learning on a kernel without the filemap
/// access events), in tests and measurements.
pub fn hidden(system: &str, event: &str) -> bool {
    std::env::var("WARMSTART_HIDE_EVENTS").is_ok_and(|v| {
        v.split(',')
            .any(|e| e.trim() == format!("{system}:{event}"))
    })
}

fn find_mount() -> Result<Option<PathBuf>, TraceError> {
    let text = fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| TraceError::io(Path::new("/proc/self/mountinfo"), e))?;
    Ok(parse_tracefs_mount(&text))
}

/// The tracefs mount point from a mountinfo text, preferring /sys/kernel/tracing.
fn parse_tracefs_mount(mountinfo: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    for line in mountinfo.lines() {
        // fields: id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        let mut parts = line.split(" - ");
        let (Some(left), Some(right)) = (parts.next(), parts.next()) else {
            continue;
        };
        if right.split_whitespace().next() != Some("tracefs") {
            continue;
        }
        if let Some(mp) = left.split_whitespace().nth(4) {
            found.push(PathBuf::from(mp.replace("\\040", " ")));
        }
    }
    found
        .iter()
        .find(|p| p.as_path() == Path::new(DEFAULT_MOUNT))
        .or_else(|| found.first())
        .cloned()
}

/// A private tracefs instance; removed when dropped (open readers must be dropped first).
#[derive(Debug)]
pub struct Instance {
    dir: PathBuf,
    name: String,
    /// Triggers set on events of this instance, as `events/SYS/EVENT/trigger` paths and
    /// commands, taken off again before the instance is removed.
    triggers: std::sync::Mutex<Vec<(String, String)>>,
}

/// Per-CPU loss counters from `per_cpu/cpuN/stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStats {
    pub overrun: u64,
    pub commit_overrun: u64,
    pub dropped: u64,
}

impl CpuStats {
    pub fn lost(&self) -> u64 {
        self.overrun + self.commit_overrun + self.dropped
    }

    pub fn parse(text: &str) -> CpuStats {
        let mut s = CpuStats::default();
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim().parse::<u64>().unwrap_or(0);
            match k.trim() {
                "overrun" => s.overrun = v,
                "commit overrun" => s.commit_overrun = v,
                "dropped events" => s.dropped = v,
                _ => {}
            }
        }
        s
    }
}

impl Instance {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn write(&self, rel: &str, value: &str) -> Result<(), TraceError> {
        let p = self.dir.join(rel);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&p)
            .map_err(|e| TraceError::io(&p, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| TraceError::io(&p, e))
    }

    /// Write without truncating: for the files where that adds to what they hold
    /// (`set_event_pid`), not replaces it.
    pub fn append(&self, rel: &str, value: &str) -> Result<(), TraceError> {
        let p = self.dir.join(rel);
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .map_err(|e| TraceError::io(&p, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| TraceError::io(&p, e))
    }

    pub fn read(&self, rel: &str) -> Result<String, TraceError> {
        let p = self.dir.join(rel);
        read_tracefs(&p).map_err(|e| TraceError::io(&p, e))
    }

    pub fn enable_event(&self, system: &str, event: &str) -> Result<(), TraceError> {
        let rel = format!("events/{system}/{event}/enable");
        if !self.dir.join(&rel).exists() {
            return Err(TraceError::MissingEvent(format!("{system}:{event}")));
        }
        self.write(&rel, "1")
    }

    /// Set a trigger (`stacktrace if FILTER`, ...) on an event of this instance; it is
    /// removed again when the instance is dropped.
    pub fn set_trigger(&self, system: &str, event: &str, trigger: &str) -> Result<(), TraceError> {
        let rel = format!("events/{system}/{event}/trigger");
        if !self.dir.join(&rel).exists() {
            return Err(TraceError::MissingEvent(format!("{system}:{event}")));
        }
        self.write(&rel, trigger)?;
        self.triggers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((rel, trigger.to_string()));
        Ok(())
    }

    pub fn set_on(&self, on: bool) -> Result<(), TraceError> {
        self.write("tracing_on", if on { "1" } else { "0" })
    }

    /// Online CPUs of the instance (per_cpu/cpuN directories).
    pub fn cpus(&self) -> Vec<usize> {
        let mut cpus: Vec<usize> = fs::read_dir(self.dir.join("per_cpu"))
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter_map(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .strip_prefix("cpu")
                            .and_then(|n| n.parse().ok())
                    })
                    .collect()
            })
            .unwrap_or_default();
        cpus.sort_unstable();
        cpus
    }

    /// Non-blocking reader of one CPU's raw ring buffer.
    pub fn open_raw(&self, cpu: usize) -> Result<OwnedFd, TraceError> {
        let p = self.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
        open(
            &p,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| TraceError::io(&p, io::Error::from(e)))
    }

    pub fn cpu_stats(&self, cpu: usize) -> Result<CpuStats, TraceError> {
        Ok(CpuStats::parse(
            &self.read(&format!("per_cpu/cpu{cpu}/stats"))?,
        ))
    }

    /// Size of one raw sub-buffer in bytes (what one read of trace_pipe_raw returns).
    pub fn subbuf_bytes(&self) -> usize {
        self.read("buffer_subbuf_size_kb")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| crate::sys::page_size() as usize)
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        // Stop first so nothing is written while the kernel tears the buffers down.
        let _ = self.set_on(false);
        let triggers =
            std::mem::take(&mut *self.triggers.lock().unwrap_or_else(|p| p.into_inner()));
        for (rel, t) in triggers {
            let _ = self.write(&rel, &format!("!{t}"));
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            tracing::warn!(
                "could not remove tracefs instance {}: {e}; remove it with `rmdir {}`",
                self.name,
                self.dir.display()
            );
        }
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_may_wait_leaves_the_last_instances_to_launches() {
        // The daemon's default: 6. With 4 held, a launch's trace and a burst check fit; with
        // 5 held only the launch's trace does; with 6 nothing.
        assert_eq!(admit(4, 0, 6), Some(5));
        assert_eq!(admit(4, 1, 6), Some(5));
        assert_eq!(admit(5, 0, 6), Some(6));
        assert_eq!(admit(5, 1, 6), None);
        assert_eq!(admit(6, 0, 6), None);
        // No cap (`usize::MAX`): never refused, never overflows.
        assert_eq!(admit(3, 1, usize::MAX), Some(4));
        assert_eq!(admit(usize::MAX - 1, 1, usize::MAX), None);
    }

    #[test]
    fn finds_tracefs_in_mountinfo() {
        let mi = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                  40 23 0:12 / /sys/kernel/debug/tracing rw - tracefs nodev rw\n\
                  41 23 0:12 / /sys/kernel/tracing rw,nosuid - tracefs nodev rw\n";
        assert_eq!(
            parse_tracefs_mount(mi),
            Some(PathBuf::from("/sys/kernel/tracing"))
        );
        let mi = "40 23 0:12 / /sys/kernel/debug/tracing rw - tracefs nodev rw\n";
        assert_eq!(
            parse_tracefs_mount(mi),
            Some(PathBuf::from("/sys/kernel/debug/tracing"))
        );
        assert_eq!(
            parse_tracefs_mount("22 27 0:21 / /proc rw - proc proc rw\n"),
            None
        );
    }

    #[test]
    fn reads_header_page_whole_from_the_kernel() {
        let p = Path::new(DEFAULT_MOUNT).join("events/header_page");
        if !p.exists() {
            return crate::testutil::skip("tracefs is not mounted at /sys/kernel/tracing");
        }
        let text = read_tracefs(&p).unwrap();
        PageHeader::parse(&text).unwrap();
        assert!(text.contains("data"), "{text:?}");
    }

    #[test]
    fn parses_cpu_stats() {
        let s = CpuStats::parse(
            "entries: 0\noverrun: 3\ncommit overrun: 1\nbytes: 0\ndropped events: 5\nread events: 9\n",
        );
        assert_eq!(s.lost(), 9);
        assert_eq!(CpuStats::parse("entries: 0\n").lost(), 0);
    }

    #[test]
    fn stale_instance_detection_on_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let inst = dir.path().join("instances");
        fs::create_dir_all(&inst).unwrap();
        // pid 1 is always alive; a huge pid is not.
        fs::create_dir(inst.join("warmstart-1-a")).unwrap();
        fs::create_dir(inst.join("warmstart-999999999-b")).unwrap();
        fs::create_dir(inst.join("someone-else")).unwrap();
        let t = Tracefs::at(dir.path());
        let stale = t.stale_instances();
        assert_eq!(stale, vec![inst.join("warmstart-999999999-b")]);
        assert_eq!(t.remove_stale_instances(), 1);
        let mut left = warmstart_instances(dir.path());
        left.sort();
        assert_eq!(left, vec!["warmstart-1-a".to_string()]);
    }

    #[test]
    fn own_instances_are_removed_and_no_others() {
        let dir = tempfile::tempdir().unwrap();
        let inst = dir.path().join("instances");
        fs::create_dir_all(&inst).unwrap();
        let mine = format!("warmstart-{}-launch", std::process::id());
        fs::create_dir(inst.join(&mine)).unwrap();
        fs::create_dir(inst.join("warmstart-1-a")).unwrap();
        fs::create_dir(inst.join("someone-else")).unwrap();
        let t = Tracefs::at(dir.path());
        assert_eq!(t.remove_own_instances(), 1);
        assert!(!inst.join(&mine).exists());
        assert!(inst.join("warmstart-1-a").exists());
        assert!(inst.join("someone-else").exists());
        assert_eq!(t.remove_own_instances(), 0);
    }
}
