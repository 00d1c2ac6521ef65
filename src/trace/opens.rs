//! Which files and directories were opened (or executed) during a recording, with their paths,
//! from fanotify filesystem marks. This is how inode numbers in the trace become paths without
//! walking the filesystem: every file a launch reads was opened by it first, and fanotify hands
//! us an fd to each opened file that we `fstat` and `readlink` on the spot.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::fanotify::{EventFFlags, Fanotify, InitFlags, MarkFlags, MaskFlags};
use nix::sys::stat::{fstat, SFlag};
use serde::{Deserialize, Serialize};

use super::TraceError;
use crate::sys::{monotonic_ns, Dev};

/// One opened file, as seen at open time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenRecord {
    /// CLOCK_MONOTONIC ns when the monitor received the event (shortly after the open).
    pub t: u64,
    /// Process (tgid) that opened it.
    pub pid: i32,
    pub dev: Dev,
    pub ino: u64,
    pub is_dir: bool,
    pub path: PathBuf,
}

/// Filesystem types that never do block I/O worth prefetching.
const PSEUDO_FS: &[&str] = &[
    "proc",
    "sysfs",
    "devtmpfs",
    "devpts",
    "tmpfs",
    "cgroup",
    "cgroup2",
    "tracefs",
    "debugfs",
    "securityfs",
    "pstore",
    "bpf",
    "mqueue",
    "hugetlbfs",
    "configfs",
    "fusectl",
    "autofs",
    "binfmt_misc",
    "nsfs",
    "efivarfs",
    "rpc_pipefs",
    "ramfs",
    "overlay",
    "squashfs",
    "fuse",
];

/// Mount points of filesystems worth marking, one per filesystem, from a mountinfo text.
pub fn block_mounts(mountinfo: &str) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let mut parts = line.split(" - ");
        let (Some(left), Some(right)) = (parts.next(), parts.next()) else {
            continue;
        };
        let fstype = right.split_whitespace().next().unwrap_or("");
        if PSEUDO_FS.contains(&fstype) || fstype.starts_with("fuse.") {
            continue;
        }
        let fields: Vec<&str> = left.split_whitespace().collect();
        let (Some(devno), Some(mp)) = (fields.get(2), fields.get(4)) else {
            continue;
        };
        if seen.insert(devno.to_string()) {
            out.push(PathBuf::from(mp.replace("\\040", " ")));
        }
    }
    out
}

/// A fanotify monitor: `prepare` makes the group (no marks: the system's opens cost nothing
/// yet), `begin` marks the filesystems and starts reading, `finish` stops it and returns what
/// it saw.
pub struct OpenMonitor {
    fan: Option<Fanotify>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), TraceError>>>,
    out: Arc<std::sync::Mutex<Outcome>>,
    /// Keep every opening, not one per distinct (dev, ino, path) (the I/O miner).
    every: bool,
}

#[derive(Default)]
struct Outcome {
    records: Vec<OpenRecord>,
    overflowed: bool,
}

impl OpenMonitor {
    /// Prepare and begin at once.
    pub fn start() -> Result<OpenMonitor, TraceError> {
        let mut m = OpenMonitor::prepare()?;
        m.begin()?;
        Ok(m)
    }

    pub fn prepare() -> Result<OpenMonitor, TraceError> {
        let fan = Fanotify::init(
            InitFlags::FAN_CLOEXEC
                | InitFlags::FAN_NONBLOCK
                | InitFlags::FAN_CLASS_NOTIF
                | InitFlags::FAN_UNLIMITED_QUEUE,
            EventFFlags::O_RDONLY
                | EventFFlags::O_LARGEFILE
                | EventFFlags::O_CLOEXEC
                | EventFFlags::O_NOATIME
                | EventFFlags::O_NONBLOCK,
        )
        .map_err(|e| TraceError::Fanotify(format!("fanotify_init: {e}")))?;
        Ok(OpenMonitor {
            fan: Some(fan),
            stop: Arc::new(AtomicBool::new(false)),
            thread: None,
            out: Arc::default(),
            every: false,
        })
    }

    /// A monitor that reports every opening of a file (not of a directory), taken as they
    /// come with `take` (the I/O miner).
    pub fn prepare_every() -> Result<OpenMonitor, TraceError> {
        let mut m = OpenMonitor::prepare()?;
        m.every = true;
        Ok(m)
    }

    /// The openings reported since the last call, and whether the queue overflowed.
    pub fn take(&self) -> (Vec<OpenRecord>, bool) {
        let mut o = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let overflowed = std::mem::take(&mut o.overflowed);
        (std::mem::take(&mut o.records), overflowed)
    }

    /// Mark every block-backed filesystem and start reading events.
    pub fn begin(&mut self) -> Result<(), TraceError> {
        let Some(fan) = self.fan.take() else {
            return Ok(()); // already begun
        };
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| TraceError::io(Path::new("/proc/self/mountinfo"), e))?;
        let mut marked = 0;
        // The miner (`every`) has no use for directories: not queued, no descriptor made
        // and named for each (python's imports list a directory for every package).
        let mut mask = MaskFlags::FAN_OPEN | MaskFlags::FAN_OPEN_EXEC;
        if !self.every {
            mask |= MaskFlags::FAN_ONDIR;
        }
        for mp in block_mounts(&mountinfo) {
            let r = fan.mark(
                MarkFlags::FAN_MARK_ADD | MarkFlags::FAN_MARK_FILESYSTEM,
                mask,
                nix::fcntl::AT_FDCWD,
                Some(&mp),
            );
            match r {
                Ok(()) => marked += 1,
                Err(e) => tracing::debug!("fanotify mark {}: {e}", mp.display()),
            }
        }
        if marked == 0 {
            return Err(TraceError::Fanotify(
                "could not mark any mounted filesystem".into(),
            ));
        }
        ignore_locked(&fan);
        let stop2 = self.stop.clone();
        let (out, every) = (self.out.clone(), self.every);
        let thread = std::thread::Builder::new()
            .name("warmstart-opens".into())
            .spawn(move || run(fan, stop2, out, every))
            .map_err(|e| TraceError::Fanotify(format!("spawn monitor thread: {e}")))?;
        self.thread = Some(thread);
        Ok(())
    }

    /// Stop and collect. Records are in arrival order, one per distinct (dev, ino, path).
    pub fn finish(mut self) -> Result<(Vec<OpenRecord>, bool), TraceError> {
        self.stop.store(true, Ordering::SeqCst);
        let Some(t) = self.thread.take() else {
            return Ok((Vec::new(), false)); // never begun
        };
        t.join()
            .map_err(|_| TraceError::Fanotify("monitor thread panicked".into()))??;
        Ok(self.take())
    }
}

impl Drop for OpenMonitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Ignore marks on the files this process holds locks on (`sys::locked_files`: its
/// database): an event would hand the monitor a descriptor of them, and closing it drops the
/// process's locks. A mark lives as long as its inode, so a monitor that runs for good
/// renews them now and then (a file deleted and created again is a new inode).
fn ignore_locked(fan: &Fanotify) {
    for p in crate::sys::locked_files() {
        let r = fan.mark(
            MarkFlags::FAN_MARK_ADD
                | MarkFlags::FAN_MARK_IGNORED_MASK
                // Without it the first write to the file would clear the ignore mask.
                | MarkFlags::FAN_MARK_IGNORED_SURV_MODIFY
                | MarkFlags::FAN_MARK_DONT_FOLLOW,
            MaskFlags::FAN_OPEN | MaskFlags::FAN_OPEN_EXEC,
            nix::fcntl::AT_FDCWD,
            Some(&p),
        );
        if let Err(e) = r {
            // ENOENT: not created yet (the -shm of a database not read yet).
            tracing::trace!("fanotify ignore mark {}: {e}", p.display());
        }
    }
}

/// How often a monitor that runs for good renews its ignore marks.
const IGNORE_RENEW_NS: u64 = 2_000_000_000;

/// How long a monitor that runs for good (the I/O miner's) lets openings queue after the
/// first before reading them. Woken at every opening, it cost a launch it did not trace 6.5%
/// of its time; reading its queue every 50 ms, 2.3% (python-imports through `run`,
/// `bench/lab/miner-watch-cost.py 12` with `bench/lab/fanotify-watch.c`, docs/measurements.md
/// 2026-12-07). The miner waits `cluster::live::LAG` for the slower stream, longer than this.
pub const BATCH: std::time::Duration = std::time::Duration::from_millis(50);

fn run(
    fan: Fanotify,
    stop: Arc<AtomicBool>,
    shared: Arc<std::sync::Mutex<Outcome>>,
    every: bool,
) -> Result<(), TraceError> {
    let mut seen = HashSet::new();
    let mut renewed = monotonic_ns();
    loop {
        let stopping = stop.load(Ordering::SeqCst);
        if every && monotonic_ns().saturating_sub(renewed) > IGNORE_RENEW_NS {
            ignore_locked(&fan);
            renewed = monotonic_ns();
        }
        {
            let mut fds = [PollFd::new(fan.as_fd(), PollFlags::POLLIN)];
            // On stop, drain what is queued without waiting.
            let timeout = if stopping { 0u16 } else { 50u16 };
            match poll(&mut fds, PollTimeout::from(timeout)) {
                Ok(0) if stopping => break,
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(TraceError::Fanotify(format!("poll: {e}"))),
            }
        }
        // The queue was read to its end before this poll, so the poll returned at the first
        // opening since: its time, within the wakeup's latency. Openings that queue during
        // the batch carry it too, early by up to `BATCH`: never after the reads they cause.
        let t = monotonic_ns();
        if every && !stopping {
            std::thread::sleep(BATCH);
        }
        loop {
            let events = match fan.read_events() {
                Ok(ev) if ev.is_empty() => break,
                Ok(ev) => ev,
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(TraceError::Fanotify(format!("read: {e}"))),
            };
            let mut out = shared.lock().unwrap_or_else(|p| p.into_inner());
            for ev in events {
                if ev.mask().contains(MaskFlags::FAN_Q_OVERFLOW) {
                    out.overflowed = true;
                    continue;
                }
                let Some(fd) = ev.fd() else {
                    continue;
                };
                let Some((dev, ino, is_dir, path)) = describe(fd) else {
                    continue;
                };
                if every || seen.insert((dev, ino, path.clone())) {
                    out.records.push(OpenRecord {
                        t,
                        pid: ev.pid(),
                        dev,
                        ino,
                        is_dir,
                        path,
                    });
                }
                // The event's fd is closed when `ev` drops.
            }
        }
    }
    Ok(())
}

/// An event's file: device, inode, whether a directory, path; None for what is neither a
/// regular file nor a directory, or is deleted.
fn describe(fd: std::os::fd::BorrowedFd<'_>) -> Option<(Dev, u64, bool, PathBuf)> {
    let st = fstat(fd).ok()?;
    let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let is_dir = fmt == SFlag::S_IFDIR;
    if !(is_dir || fmt == SFlag::S_IFREG) {
        return None;
    }
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    if path.to_string_lossy().ends_with(" (deleted)") {
        return None;
    }
    Some((Dev::from_user(st.st_dev), st.st_ino, is_dir, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_one_mount_per_block_filesystem() {
        let mi = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                  27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n\
                  28 27 254:0 /home /home rw,relatime - ext4 /dev/vda rw\n\
                  29 27 0:44 / /data rw - btrfs /dev/vdb rw\n\
                  30 24 0:23 / /dev/shm rw,relatime - tmpfs tmpfs rw\n";
        assert_eq!(
            block_mounts(mi),
            vec![PathBuf::from("/"), PathBuf::from("/data")]
        );
    }

    #[test]
    fn sees_an_open_with_its_path() {
        if !crate::sys::is_root() {
            return crate::testutil::skip("fanotify filesystem marks need root");
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let p = dir.path().join("seen-by-fanotify");
        std::fs::write(&p, b"x").unwrap();
        let mon = OpenMonitor::start().unwrap();
        // Give the thread a moment to poll, then open.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let _ = std::fs::read(&p).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (recs, overflow) = mon.finish().unwrap();
        assert!(!overflow);
        let canon = std::fs::canonicalize(&p).unwrap();
        let hit = recs.iter().find(|r| r.path == canon);
        let r = hit.unwrap_or_else(|| panic!("open of {} not reported", canon.display()));
        assert_eq!(r.pid as u32, std::process::id());
        assert!(!r.is_dir);
    }

    /// The miner's monitor reads its queue in batches: every opening of a run longer than
    /// one read's worth of events is reported, in the order made, with times that never go
    /// back; directories it is not told of.
    #[test]
    fn every_mode_reports_a_run_of_openings_in_order() {
        if !crate::sys::is_root() {
            return crate::testutil::skip("fanotify filesystem marks need root");
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        // Paths as the monitor names them (/var/tmp may be a link).
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let files: Vec<PathBuf> = (0..400)
            .map(|i| {
                let p = root.join(format!("opened-{i}"));
                std::fs::write(&p, b"x").unwrap();
                p
            })
            .collect();
        let mut mon = OpenMonitor::prepare_every().unwrap();
        mon.begin().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        for p in &files {
            let _ = std::fs::read(p).unwrap();
            let _ = std::fs::read_dir(&root).unwrap();
        }
        let (recs, overflow) = mon.finish().unwrap();
        assert!(!overflow);
        let mine: Vec<&OpenRecord> = recs
            .iter()
            .filter(|r| r.pid as u32 == std::process::id() && r.path.starts_with(&root))
            .collect();
        let paths: Vec<&PathBuf> = mine.iter().map(|r| &r.path).collect();
        assert_eq!(paths, files.iter().collect::<Vec<_>>());
        assert!(mine.windows(2).all(|w| w[0].t <= w[1].t));
        assert!(!recs.iter().any(|r| r.is_dir));
    }

    /// The process's own database is never handed to it by an event: closing that
    /// descriptor would drop the process's SQLite locks (the daemon's SIGBUS).
    #[test]
    fn never_reports_the_process_own_database() {
        if !crate::sys::is_root() {
            return crate::testutil::skip("fanotify filesystem marks need root");
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let db = dir.path().join("own.db");
        let _store = crate::store::Store::open(&db).unwrap();
        let other = dir.path().join("not-a-database");
        std::fs::write(&other, b"x").unwrap();
        let mon = OpenMonitor::start().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let own: Vec<PathBuf> = ["", "-wal", "-shm"]
            .iter()
            .map(|s| std::fs::canonicalize(format!("{}{s}", db.display())).unwrap())
            .collect();
        for p in own.iter().chain([&other]) {
            let _ = std::fs::read(p).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (recs, _) = mon.finish().unwrap();
        let canon = std::fs::canonicalize(&other).unwrap();
        assert!(
            recs.iter().any(|r| r.path == canon),
            "the control open was not seen"
        );
        for p in &own {
            assert!(
                !recs.iter().any(|r| &r.path == p),
                "{} reported",
                p.display()
            );
        }
    }
}
