//! Small safe wrappers over the syscalls no crate wraps for us (readahead, cachestat, wait4
//! with rusage) and device-number conversions. Every `unsafe` block of the crate except the
//! fork in `launch` lives here.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A device number as (major, minor). The kernel's tracepoints encode it as
/// `major << 20 | minor`; userspace `stat` uses glibc's `makedev` layout. Keeping the pair
/// avoids mixing the two encodings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Dev {
    pub major: u32,
    pub minor: u32,
}

impl Dev {
    /// From the kernel-internal encoding used by tracepoints (`MKDEV`).
    pub fn from_kernel(raw: u64) -> Dev {
        Dev {
            major: ((raw >> 20) & 0xfff) as u32,
            minor: (raw & 0xfffff) as u32,
        }
    }

    /// From a userspace `st_dev` / `st_rdev`.
    pub fn from_user(raw: u64) -> Dev {
        Dev {
            major: libc::major(raw),
            minor: libc::minor(raw),
        }
    }

    pub fn to_user(self) -> u64 {
        libc::makedev(self.major, self.minor)
    }
}

impl std::fmt::Display for Dev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl std::str::FromStr for Dev {
    type Err = String;

    /// `major:minor`, as `Display` writes it.
    fn from_str(s: &str) -> Result<Dev, String> {
        let (a, b) = s
            .split_once(':')
            .ok_or_else(|| format!("`{s}` is not major:minor"))?;
        Ok(Dev {
            major: a.parse().map_err(|_| format!("bad major in `{s}`"))?,
            minor: b.parse().map_err(|_| format!("bad minor in `{s}`"))?,
        })
    }
}

/// Page size of this machine (tracepoint page indexes are in these units).
pub fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map(|v| v as u64)
        .unwrap_or(4096)
}

/// `readahead(2)`: start asynchronous reads of `[offset, offset+len)` into the page cache.
pub fn readahead(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: readahead only reads its integer arguments; the fd is valid for the borrow.
    let rc = unsafe { libc::readahead(fd.as_raw_fd(), offset as libc::off64_t, len as usize) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `struct file_handle` with the 8 bytes of a `FILEID_INO32_GEN` handle.
#[repr(C)]
struct InoHandle {
    handle_bytes: u32,
    handle_type: i32,
    ino: u32,
    generation: u32,
}

/// `FILEID_INO32_GEN` (include/linux/exportfs.h): a 32-bit inode number and a generation.
const FILEID_INO32_GEN: i32 = 1;

/// Load inode `ino` of the filesystem holding `mount_fd` into the inode cache, by handle,
/// without a path: `open_by_handle_at(2)` with generation 0, which ext4 (and the other
/// filesystems using the generic export operations) takes as "any generation". Opens with
/// `O_PATH` (no data is read, nothing can be written) and closes at once. Needs
/// CAP_DAC_READ_SEARCH. Inode numbers above 32 bits are not expressible: `EOVERFLOW`.
pub fn load_inode(mount_fd: BorrowedFd<'_>, ino: u64) -> io::Result<()> {
    let Ok(ino) = u32::try_from(ino) else {
        return Err(io::Error::from_raw_os_error(libc::EOVERFLOW));
    };
    let mut h = InoHandle {
        handle_bytes: 8,
        handle_type: FILEID_INO32_GEN,
        ino,
        generation: 0,
    };
    // SAFETY: `h` is a valid, writable `struct file_handle` whose `handle_bytes` (8) matches
    // the payload that follows it; the fd is valid for the borrow; the returned fd, if any,
    // is owned here and closed by `OwnedFd`.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount_fd.as_raw_fd(),
            (&mut h as *mut InoHandle).cast::<libc::file_handle>(),
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// Open a planned file or directory for reading, with no effect on anything else at that
/// path. The path is resolved with no symbolic link in any component (`openat2`
/// `RESOLVE_NO_SYMLINKS`: planned paths are canonical, so a link on the way means a directory
/// was swapped), first as `O_PATH`, which opens a FIFO or a device node without effect; only
/// a regular file or a directory is then reopened for reading, through `/proc/self/fd`, so
/// the object checked is the object read. `flags` adds to `O_RDONLY | O_NONBLOCK |
/// O_CLOEXEC` (`O_NOATIME` is dropped where the kernel refuses it). Returns the descriptor
/// and the object's status; `ESTALE` for anything but a regular file or directory, `ELOOP`
/// for a link on the way.
pub fn open_planned(
    path: &Path,
    flags: nix::fcntl::OFlag,
) -> Result<(OwnedFd, nix::sys::stat::FileStat), nix::errno::Errno> {
    open_planned_if(path, flags, |_| true)
}

/// A planned path's object as `open_planned` finds it, not opened for anything but its
/// status (`O_PATH`, which has no effect on a FIFO or device node): the descriptor and the
/// status; `ELOOP` for a symbolic link on the way.
pub fn stat_planned(path: &Path) -> Result<(OwnedFd, nix::sys::stat::FileStat), nix::errno::Errno> {
    use nix::errno::Errno;
    use nix::fcntl::{open, openat2, OFlag, OpenHow, ResolveFlag, AT_FDCWD};
    use nix::sys::stat::{fstat, Mode};
    let path_flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let how = OpenHow::new()
        .flags(path_flags)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    let opath = match openat2(AT_FDCWD, path, how) {
        // Before Linux 5.6, or filtered: the last component alone is checked.
        Err(Errno::ENOSYS | Errno::EPERM | Errno::EINVAL) => open(path, path_flags, Mode::empty())?,
        r => r?,
    };
    let st = fstat(&opath)?;
    Ok((opath, st))
}

/// `open_planned`, opening for reading only an object `accept` takes from its status (a file
/// swapped, grown or edited since the plan is then not even opened; `ESTALE`).
pub fn open_planned_if(
    path: &Path,
    flags: nix::fcntl::OFlag,
    accept: impl FnOnce(&nix::sys::stat::FileStat) -> bool,
) -> Result<(OwnedFd, nix::sys::stat::FileStat), nix::errno::Errno> {
    use nix::errno::Errno;
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    let (opath, st) = stat_planned(path)?;
    let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if fmt != SFlag::S_IFREG && fmt != SFlag::S_IFDIR || !accept(&st) {
        return Err(Errno::ESTALE);
    }
    if is_locked_file(path) {
        return Err(Errno::EPERM); // closing it would drop this process's locks on it
    }
    let flags = flags | OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let reopen = |at: &Path, flags: OFlag| match open(at, flags, Mode::empty()) {
        Err(Errno::EPERM) if flags.contains(OFlag::O_NOATIME) => {
            open(at, flags - OFlag::O_NOATIME, Mode::empty())
        }
        r => r,
    };
    let magic = format!("/proc/self/fd/{}", opath.as_raw_fd());
    match reopen(Path::new(&magic), flags) {
        Ok(fd) => Ok((fd, st)),
        // No /proc: open the path again and check it is the object just checked.
        Err(Errno::ENOENT) if !Path::new("/proc/self/fd").exists() => {
            let fd = reopen(path, flags | OFlag::O_NOFOLLOW)?;
            let now = fstat(&fd)?;
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                return Err(Errno::ESTALE);
            }
            Ok((fd, now))
        }
        Err(e) => Err(e),
    }
}

/// Files this process holds POSIX record locks on: its SQLite database with its `-wal` and
/// `-shm`. Closing *any* descriptor of a file drops every fcntl lock the process holds on it
/// (POSIX), and SQLite's shared-memory index relies on those locks: another process that then
/// finds the `-shm`'s dead-man-switch lock free truncates it under this one's mapping, whose
/// next read is a SIGBUS (the daemon died so while it learned and `warmstart status` ran;
/// docs/measurements.md, 2026-11-26 ninth entry). So nothing else in the process may open
/// them: a fanotify monitor puts an ignore mark on them (an event would hand it a
/// descriptor), and `open_planned` refuses them.
/// The databases noted, as given: nothing is resolved when one is opened (`run`'s front opens
/// it on the launch's path), only when a file is compared with them.
static LOCKED_DATABASES: std::sync::Mutex<Vec<std::path::PathBuf>> =
    std::sync::Mutex::new(Vec::new());

/// Note the database at `db` (and its `-wal`, `-shm`) as locked by this process.
pub fn note_locked_database(db: &Path) {
    let mut l = LOCKED_DATABASES.lock().unwrap_or_else(|p| p.into_inner());
    if !l.iter().any(|d| d == db) {
        l.push(db.to_path_buf());
    }
}

/// A noted database's three files, by canonical path; `only` keeps the one of that name.
fn files_of(db: &Path, only: Option<&std::ffi::OsStr>) -> Vec<std::path::PathBuf> {
    let Some(name) = db.file_name() else {
        return Vec::new();
    };
    let names = ["", "-wal", "-shm"].map(|suffix| {
        let mut n = name.to_os_string();
        n.push(suffix);
        n
    });
    if only.is_some_and(|o| !names.iter().any(|n| n == o)) {
        return Vec::new();
    }
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    names
        .into_iter()
        .filter(|n| only.is_none_or(|o| o == n))
        .map(|n| dir.join(n))
        .collect()
}

/// The files `note_locked_database` noted, by canonical path.
pub fn locked_files() -> Vec<std::path::PathBuf> {
    let dbs = LOCKED_DATABASES
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    dbs.iter().flat_map(|d| files_of(d, None)).collect()
}

/// Whether canonical `path` is one of the noted files: its name is compared first, so a
/// planned file resolves nothing.
fn is_locked_file(path: &Path) -> bool {
    let Some(name) = path.file_name() else {
        return false;
    };
    LOCKED_DATABASES.lock().is_ok_and(|dbs| {
        dbs.iter()
            .any(|d| files_of(d, Some(name)).iter().any(|p| p == path))
    })
}

/// Seconds since the Unix epoch (0 if the clock is before it): the time stamps of the
/// database's rows.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Whom a prefetch reads for. A file is read only if these credentials could read it
/// themselves (read permission as owner, group or other; ACLs are not consulted, so a file
/// readable through one only is left out): a launch by one user never brings into memory a
/// file that user may not read (another user's 0600 file at a planned path; issue #30).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Credentials {
    /// The file-system credentials of a running process (`/proc/PID/status`).
    pub fn of_process(pid: i32) -> Option<Credentials> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        Credentials::parse_status(&status)
    }

    fn parse_status(status: &str) -> Option<Credentials> {
        let ids = |name: &str| -> Option<Vec<u32>> {
            let line = status.lines().find_map(|l| l.strip_prefix(name))?;
            line.split_whitespace().map(|v| v.parse().ok()).collect()
        };
        // Real, effective, saved, file-system: access checks use the last.
        let uid = *ids("Uid:")?.get(3)?;
        let gid = *ids("Gid:")?.get(3)?;
        let groups = ids("Groups:").unwrap_or_default();
        Some(Credentials { uid, gid, groups })
    }

    /// Whether these credentials may read the object of `st`.
    pub fn may_read(&self, st: &nix::sys::stat::FileStat) -> bool {
        let mode = st.st_mode;
        if self.uid == 0 {
            true
        } else if st.st_uid == self.uid {
            mode & 0o400 != 0
        } else if st.st_gid == self.gid || self.groups.contains(&st.st_gid) {
            mode & 0o040 != 0
        } else {
            mode & 0o004 != 0
        }
    }
}

/// Page-cache residency of a file range, from `cachestat(2)` (Linux 6.5+). Unlike mincore it
/// needs no mapping and does not depend on write permission.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    pub cached_pages: u64,
    pub dirty_pages: u64,
}

#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct CachestatRaw {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

const SYS_CACHESTAT: libc::c_long = 451;

/// Residency of `[offset, offset+len)`; `len == 0` means to the end of the file.
pub fn cachestat(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<CacheStat> {
    let range = CachestatRange { off: offset, len };
    let mut out = CachestatRaw::default();
    // SAFETY: both pointers refer to live, properly sized #[repr(C)] structs matching the
    // kernel's struct cachestat_range / struct cachestat; flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const CachestatRange,
            &mut out as *mut CachestatRaw,
            0u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(CacheStat {
        cached_pages: out.nr_cache,
        dirty_pages: out.nr_dirty,
    })
}

/// Which of the first `len` bytes' pages of the file `fd` are in the page cache, one flag
/// per page: mincore(2) over a read-only shared mapping of them (mapping reads nothing; a
/// root caller sees the residency of any file).
pub fn resident_pages(fd: BorrowedFd<'_>, len: u64) -> io::Result<Vec<bool>> {
    use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
    let Some(size) = usize::try_from(len)
        .ok()
        .and_then(std::num::NonZeroUsize::new)
    else {
        return Ok(Vec::new());
    };
    // SAFETY: a new shared read-only mapping of a file, never read through: it aliases no
    // memory of this process, and only its address is handed to mincore.
    let p = unsafe {
        mmap(
            None,
            size,
            ProtFlags::PROT_READ,
            MapFlags::MAP_SHARED,
            fd,
            0,
        )
    }
    .map_err(io::Error::from)?;
    let mut vec = vec![0u8; size.get().div_ceil(page_size() as usize)];
    // SAFETY: the mapping just made covers `size` bytes, and `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(p.as_ptr(), size.get(), vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: the mapping made above, unmapped once.
    let _ = unsafe { munmap(p, size.get()) };
    if rc != 0 {
        return Err(err);
    }
    Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
}

/// This process's peak resident set (`VmHWM`), KiB. Not `ru_maxrss`: a process exec'd by a
/// large one (the bench) starts with its parent's high-water mark there (218 MiB for a
/// `/bin/true` spawned by a 200 MiB process, measured).
pub fn peak_rss_kb() -> Option<u64> {
    status_field(None, "VmHWM")?
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// One field of `/proc/TID/status` (`tid` None: this process's), its value trimmed:
/// `status_field(None, "VmHWM")` is "5428 kB". None if the task is gone or has no such field.
pub fn status_field(tid: Option<i32>, field: &str) -> Option<String> {
    let path = match tid {
        Some(t) => format!("/proc/{t}/status"),
        None => "/proc/self/status".to_string(),
    };
    let status = std::fs::read_to_string(path).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_string())
}

/// Cached pages of a whole file, by path.
pub fn cached_pages_of(path: &Path) -> io::Result<u64> {
    let f = std::fs::File::open(path)?;
    use std::os::fd::AsFd;
    Ok(cachestat(f.as_fd(), 0, 0)?.cached_pages)
}

/// Resource usage of a reaped child.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub major_faults: u64,
    pub minor_faults: u64,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
    pub user_us: u64,
    pub sys_us: u64,
    pub max_rss_kb: u64,
}

/// How a reaped child ended, as `waitpid` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
}

impl Exit {
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit status {c}"),
            Exit::Signal(s) => {
                let name = nix::sys::signal::Signal::try_from(*s)
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_else(|_| format!("signal {s}"));
                write!(f, "killed by {name}")
            }
        }
    }
}

/// `wait4(2)`: reap `pid` (or any child with -1), blocking unless `nohang`. Returns None when
/// `nohang` and nothing has exited yet.
pub fn wait4(pid: i32, nohang: bool) -> io::Result<Option<(i32, Exit, Usage)>> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain old data; zeroed is a valid value for it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let flags = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: status and ru point to live locals of the types wait4 expects.
        let rc = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(err);
        }
        if rc == 0 {
            return Ok(None);
        }
        let exit = if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        };
        let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        let usage = Usage {
            major_faults: ru.ru_majflt as u64,
            minor_faults: ru.ru_minflt as u64,
            voluntary_switches: ru.ru_nvcsw as u64,
            involuntary_switches: ru.ru_nivcsw as u64,
            user_us: tv(ru.ru_utime),
            sys_us: tv(ru.ru_stime),
            max_rss_kb: ru.ru_maxrss as u64,
        };
        return Ok(Some((rc, exit, usage)));
    }
}

/// Close every descriptor above stderr that would survive an exec (no `FD_CLOEXEC`): in a
/// process forked from a launcher, those are the ones the launcher's caller handed to the
/// application, never its own (warmstart opens everything close-on-exec). Returns how many.
pub fn close_inherited_fds() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    // Collected first: the listing's own descriptor is in it, and closes with it.
    let fds: Vec<i32> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    let mut closed = 0;
    for fd in fds {
        // SAFETY: F_GETFD only reads the flags of a descriptor number; a number that is no
        // longer open (the listing's) fails with EBADF.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
            // SAFETY: no object of this process owns a descriptor without FD_CLOEXEC (all
            // are opened close-on-exec), so nothing will use or close this number again.
            unsafe { libc::close(fd) };
            closed += 1;
        }
    }
    closed
}

/// Grow this process's descriptor table to hold `n` descriptors (at most the soft
/// `RLIMIT_NOFILE`): a standard descriptor is duplicated to the highest of them and closed
/// again, and the kernel never shrinks a table. Returns the table size now assured (0 if no
/// standard descriptor is open to duplicate).
pub fn reserve_fds(n: u64) -> u64 {
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft);
    let n = n.min(limit).min(libc::c_int::MAX as u64);
    if n == 0 {
        return 0;
    }
    for from in [2, 1, 0] {
        // SAFETY: F_DUPFD_CLOEXEC only creates a descriptor numbered n - 1 or more, which
        // no object of this process owns and which is closed at once.
        let fd = unsafe { libc::fcntl(from, libc::F_DUPFD_CLOEXEC, (n - 1) as libc::c_int) };
        if fd >= 0 {
            // SAFETY: as above, this function made `fd` and nothing else knows its number.
            unsafe { libc::close(fd) };
            return n;
        }
    }
    0
}

/// Is any signal of `set` pending for this thread or process (blocked, not yet delivered)?
pub fn signals_pending(set: &nix::sys::signal::SigSet) -> bool {
    // SAFETY: an all-zero sigset_t is a valid (empty) set.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: sigpending writes only into the set it is given.
    if unsafe { libc::sigpending(&mut pending) } != 0 {
        return false;
    }
    // SAFETY: sigismember only reads the initialised set.
    set.iter()
        .any(|s| unsafe { libc::sigismember(&pending, s as libc::c_int) } == 1)
}

/// `pidfd_open(2)`: an fd that becomes readable when process `pid` exits (any process, not
/// only a child; Linux 5.3+).
pub fn pidfd_open(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// One extent from FIEMAP: `len` bytes at file offset `logical` live at disk byte `physical`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub logical: u64,
    pub physical: u64,
    pub len: u64,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapExtentRaw {
    fe_logical: u64,
    fe_physical: u64,
    fe_length: u64,
    fe_reserved64: [u64; 2],
    fe_flags: u32,
    fe_reserved: [u32; 3],
}

#[repr(C)]
struct FiemapRaw<const N: usize> {
    fm_start: u64,
    fm_length: u64,
    fm_flags: u32,
    fm_mapped_extents: u32,
    fm_extent_count: u32,
    fm_reserved: u32,
    fm_extents: [FiemapExtentRaw; N],
}

/// _IOWR('f', 11, struct fiemap)
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FIEMAP_EXTENT_LAST: u32 = 0x1;
const FIEMAP_FLAG_SYNC: u32 = 0x1;

/// Physical extents of a file or directory (`FS_IOC_FIEMAP`), in file order.
pub fn fiemap(fd: BorrowedFd<'_>) -> io::Result<Vec<Extent>> {
    const N: usize = 64;
    let mut out = Vec::new();
    let mut start = 0u64;
    loop {
        let mut req = FiemapRaw::<N> {
            fm_start: start,
            fm_length: u64::MAX - start,
            fm_flags: FIEMAP_FLAG_SYNC,
            fm_mapped_extents: 0,
            fm_extent_count: N as u32,
            fm_reserved: 0,
            fm_extents: [FiemapExtentRaw::default(); N],
        };
        // SAFETY: `req` is a #[repr(C)] struct fiemap followed by room for N extents, as
        // fm_extent_count tells the kernel; it lives across the call.
        let rc =
            unsafe { libc::ioctl(fd.as_raw_fd(), FS_IOC_FIEMAP, &mut req as *mut FiemapRaw<N>) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = (req.fm_mapped_extents as usize).min(N);
        if n == 0 {
            return Ok(out);
        }
        let mut last = false;
        for e in &req.fm_extents[..n] {
            out.push(Extent {
                logical: e.fe_logical,
                physical: e.fe_physical,
                len: e.fe_length,
            });
            last |= e.fe_flags & FIEMAP_EXTENT_LAST != 0;
        }
        let end = req.fm_extents[n - 1].fe_logical + req.fm_extents[n - 1].fe_length;
        if last || n < N || end <= start {
            return Ok(out);
        }
        start = end;
    }
}

/// An anonymous buffer aligned to 2 MiB and advised `MADV_HUGEPAGE`, so that a read into it
/// is a few memory segments rather than one per 4 KiB page (what a device that counts its
/// queue in segments, as virtio-blk without indirect descriptors does, can take fastest).
pub struct HugeBuf {
    ptr: std::ptr::NonNull<u8>,
    map_len: usize,
    offset: usize,
    len: usize,
}

// SAFETY: the mapping is owned exclusively by this value; nothing else aliases it.
unsafe impl Send for HugeBuf {}

impl HugeBuf {
    const ALIGN: usize = 2 << 20;

    /// `len` bytes (rounded up to 4 KiB), touched so that the memory is in place before use.
    pub fn new(len: usize) -> io::Result<HugeBuf> {
        let len = len.max(4096).div_ceil(4096) * 4096;
        let map_len = len + Self::ALIGN;
        let size = std::num::NonZeroUsize::new(map_len).ok_or_else(|| io::Error::other("empty"))?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let p = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                size,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_PRIVATE,
            )
        }
        .map_err(io::Error::from)?;
        let base = p.as_ptr() as usize;
        let offset = (Self::ALIGN - base % Self::ALIGN) % Self::ALIGN;
        let ptr = p.cast::<u8>();
        // SAFETY: [offset, offset + len) lies inside the mapping just made.
        let region = unsafe { ptr.as_ptr().add(offset) };
        if let Some(r) = std::ptr::NonNull::new(region as *mut std::ffi::c_void) {
            // SAFETY: madvise on memory of our own mapping; a refusal only leaves small pages.
            let _ = unsafe {
                nix::sys::mman::madvise(r, len, nix::sys::mman::MmapAdvise::MADV_HUGEPAGE)
            };
        }
        let mut b = HugeBuf {
            ptr,
            map_len,
            offset,
            len,
        };
        b.as_mut_slice()
            .iter_mut()
            .step_by(4096)
            .for_each(|x| *x = 1);
        Ok(b)
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: [offset, offset + len) is inside the mapping, which lives as long as self,
        // and &mut self makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.offset), self.len) }
    }
}

impl Drop for HugeBuf {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in `new`, unmapped once.
        let _ = unsafe { nix::sys::mman::munmap(self.ptr.cast(), self.map_len) };
    }
}

/// Current CLOCK_MONOTONIC in nanoseconds: the clock our tracefs instances use (`mono`), so
/// userspace instants and event timestamps compare directly.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; 0 keeps the signature infallible.
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|ts| ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
        .unwrap_or(0)
}

/// How far behind the time a file's change is stamped with can be: the resolution of the
/// coarse real-time clock the kernel stamps it from (one tick: 4 ms at HZ=250).
pub fn file_time_slack_ns() -> i64 {
    nix::time::clock_getres(nix::time::ClockId::CLOCK_REALTIME_COARSE)
        .map(|ts| ts.tv_sec() * 1_000_000_000 + ts.tv_nsec())
        .unwrap_or(10_000_000)
}

/// Whether the effective user is root (most commands need CAP_SYS_ADMIN in practice).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo_available(&text)
}

fn parse_meminfo_available(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// `sync(2)`, then drop clean page cache, dentries and inodes (`echo 3 > drop_caches`).
pub fn drop_caches() -> io::Result<()> {
    nix::unistd::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3\n")
}

#[cfg(test)]
mod tests {
    #[test]
    fn open_planned_refuses_the_process_own_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("own.db");
        std::fs::write(&db, b"").unwrap();
        let canon = std::fs::canonicalize(&db).unwrap();
        assert!(super::open_planned(&canon, nix::fcntl::OFlag::empty()).is_ok());
        super::note_locked_database(&db);
        assert!(super::locked_files().contains(&canon.with_file_name("own.db-shm")));
        assert_eq!(
            super::open_planned(&canon, nix::fcntl::OFlag::empty()).err(),
            Some(nix::errno::Errno::EPERM)
        );
    }

    #[test]
    fn open_planned_opens_only_regular_files_and_directories_with_no_link_on_the_way() {
        use nix::errno::Errno;
        use nix::fcntl::OFlag;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("f"), b"data").unwrap();
        let (_, st) = super::open_planned(&real.join("f"), OFlag::O_NOATIME).unwrap();
        assert_eq!(st.st_size, 4);
        assert!(super::open_planned(&real, OFlag::O_DIRECTORY).is_ok());
        // A FIFO: opening it for reading would release a writer blocked on it; never opened.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert_eq!(
            super::open_planned(&fifo, OFlag::empty()).err(),
            Some(Errno::ESTALE)
        );
        // No reader ever came: a non-blocking writer still finds none.
        let w = nix::fcntl::open(
            &fifo,
            OFlag::O_WRONLY | OFlag::O_NONBLOCK,
            nix::sys::stat::Mode::empty(),
        );
        assert_eq!(w.err(), Some(Errno::ENXIO));
        // A device node.
        assert_eq!(
            super::open_planned(std::path::Path::new("/dev/null"), OFlag::empty()).err(),
            Some(Errno::ESTALE)
        );
        // A planned directory swapped for a link: neither the last component nor any other.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert_eq!(
            super::open_planned(&link.join("f"), OFlag::empty()).err(),
            Some(Errno::ELOOP)
        );
        assert!(super::open_planned(&link, OFlag::empty()).is_err());
    }

    #[test]
    fn credentials_read_what_their_owner_could() {
        // `/proc/PID/status` of a user's shell on this kernel (lines cut).
        let status = "Name:\tbash\nUmask:\t0022\nUid:\t1000\t1000\t1000\t1000\n\
            Gid:\t1000\t1000\t1000\t1000\nFDSize:\t256\nGroups:\t4 24 27 1000 \nNStgid:\t7\n";
        let c = super::Credentials::parse_status(status).unwrap();
        assert_eq!((c.uid, c.gid, c.groups.len()), (1000, 1000, 4));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let st = |mode: u32, uid: u32, gid: u32| {
            let mut s = nix::sys::stat::stat(&f).unwrap();
            (s.st_mode, s.st_uid, s.st_gid) = (0o100000 | mode, uid, gid);
            s
        };
        assert!(c.may_read(&st(0o600, 1000, 0)));
        assert!(
            !c.may_read(&st(0o600, 1001, 1001)),
            "another user's 0600 file"
        );
        assert!(c.may_read(&st(0o640, 0, 24)), "a supplementary group");
        assert!(!c.may_read(&st(0o640, 0, 1001)));
        assert!(c.may_read(&st(0o644, 0, 0)));
        assert!(
            !c.may_read(&st(0o044, 1000, 0)),
            "the owner's bits count for the owner"
        );
        let root = super::Credentials::parse_status(&status.replace("1000", "0")).unwrap();
        assert!(root.may_read(&st(0o000, 1001, 1001)));
        assert!(super::Credentials::parse_status("Name: x\n").is_none());
    }

    #[test]
    fn cpus_without_keeps_at_least_one() {
        assert_eq!(cpus_without(&[0, 1], 1), Some(vec![0]));
        assert_eq!(cpus_without(&[0, 1, 2, 3], 2), Some(vec![0, 1, 3]));
        assert_eq!(cpus_without(&[1], 1), None);
        assert_eq!(cpus_without(&[0, 1], 5), None);
    }

    #[test]
    fn stat_field_39_is_the_cpu() {
        // `cat /proc/self/stat` on this kernel; it ran on CPU 0.
        let real = "15055 (cat) R 15012 15012 1531 0 -1 4194304 97 0 0 0 0 0 0 0 20 0 1 0 1230664 \
            3133440 362 18446744073709551615 94563443097600 94563443117481 140721531774608 0 0 0 0 \
            0 0 0 0 0 17 0 0 0 0 0 0 94563443133488 94563443135104 94563736330240 \
            140721531775676 140721531775696 140721531775696 140721531777003 0";
        assert_eq!(stat_field::<usize>(real, 39), Some(0));
        assert_eq!(stat_field::<u64>(real, 22), Some(1230664));
        // The same on CPU 1, under a command name holding a space and a parenthesis.
        let odd = real
            .replace("(cat)", "(a b) c)")
            .replace(" 17 0 0 0", " 17 1 0 0");
        assert_eq!(stat_field::<usize>(&odd, 39), Some(1));
        assert_eq!(stat_field::<usize>("garbage", 39), None);
    }

    #[test]
    fn keep_off_cpu_takes_the_cpu_out_of_this_thread_only() {
        use nix::sched::sched_getaffinity;
        use nix::unistd::Pid;
        let before = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
        let allowed: Vec<usize> = (0..nix::sched::CpuSet::count())
            .filter(|&c| before.is_set(c).unwrap_or(false))
            .collect();
        if allowed.len() < 2 {
            println!("skipped: one CPU, nothing to keep off");
            return;
        }
        let cpu = allowed[0];
        // In a thread of its own: affinity is per thread, and the test harness's stays.
        let after = std::thread::spawn(move || {
            assert!(keep_off_cpu(cpu));
            // Threads started afterwards inherit it.
            std::thread::spawn(|| sched_getaffinity(Pid::from_raw(0)).expect("affinity"))
                .join()
                .expect("thread")
        })
        .join()
        .expect("thread");
        assert!(!after.is_set(cpu).unwrap_or(true));
        assert!(after.is_set(allowed[1]).unwrap_or(false));
        let mine = sched_getaffinity(Pid::from_raw(0)).expect("affinity");
        assert!(mine.is_set(cpu).unwrap_or(false));
    }

    #[test]
    fn current_cpu_is_one_we_may_run_on() {
        let cpu = current_cpu().expect("sched_getcpu");
        let now = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).expect("affinity");
        assert!(now.is_set(cpu).unwrap_or(false));
    }

    use super::*;

    #[test]
    fn the_peak_resident_memory_is_this_processs() {
        // 64 MiB touched: resident now, so the high-water mark is at least that (other
        // tests of this process may have raised it further).
        let mut v = vec![0u8; 64 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        assert!(peak_rss_kb().unwrap() >= 64 * 1024);
    }

    #[test]
    fn a_status_field_is_its_value_alone() {
        let me = std::process::id().to_string();
        assert_eq!(status_field(None, "Pid").as_deref(), Some(me.as_str()));
        assert_eq!(
            status_field(Some(std::process::id() as i32), "Tgid").as_deref(),
            Some(me.as_str())
        );
        // A field's name is whole: "Vm" is not "VmHWM".
        assert_eq!(status_field(None, "Vm"), None);
        assert!(status_field(None, "VmHWM").unwrap().ends_with("kB"));
        assert_eq!(status_field(Some(i32::MAX), "Pid"), None);
    }

    #[test]
    fn kernel_dev_encoding() {
        let d = Dev::from_kernel(0x0fe0_0000);
        assert_eq!(
            d,
            Dev {
                major: 254,
                minor: 0
            }
        );
        let d = Dev::from_kernel((8 << 20) | 17);
        assert_eq!((d.major, d.minor), (8, 17));
        assert_eq!(Dev::from_user(d.to_user()), d);
        assert_eq!(d.to_string(), "8:17");
    }

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24684096 kB\nMemFree:        23000000 kB\nMemAvailable:   23500000 kB\n";
        assert_eq!(parse_meminfo_available(t), Some(23_500_000 * 1024));
        assert_eq!(parse_meminfo_available("junk"), None);
    }

    #[test]
    fn fiemap_maps_a_file_and_a_directory() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![5u8; 3 * 4096]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        match fiemap(f.as_fd()) {
            Ok(ext) => {
                assert!(!ext.is_empty());
                assert_eq!(ext[0].logical, 0);
                assert!(ext.iter().map(|e| e.len).sum::<u64>() >= 3 * 4096);
                let d = std::fs::File::open(dir.path()).unwrap();
                // ext4 maps directories too; other filesystems may refuse (EOPNOTSUPP).
                if let Ok(de) = fiemap(d.as_fd()) {
                    assert!(!de.is_empty());
                }
            }
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                crate::testutil::skip(&format!("filesystem has no FIEMAP: {e}"))
            }
            Err(e) => panic!("fiemap: {e}"),
        }
    }

    /// The table is grown (the kernel's FDSize in /proc) and no descriptor is left open.
    #[test]
    fn reserve_fds_grows_the_descriptor_table_and_leaves_nothing_open() {
        let size = || {
            std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("FDSize:"))
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        };
        // Larger than any other test (the prefetch grows it to `FD_TABLE`) asks for.
        let got = reserve_fds(4096);
        assert_eq!(
            got,
            4096.min(
                nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                    .unwrap()
                    .0
            )
        );
        assert!(size() >= got, "FDSize {} after reserving {got}", size());
        // The descriptor made to grow it is closed (other tests run beside this one, so
        // the number of open descriptors is not compared).
        assert!(std::fs::metadata(format!("/proc/self/fd/{}", got - 1)).is_err());
        assert_eq!(reserve_fds(0), 0);
    }

    #[test]
    fn cachestat_sees_written_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 64 * 1024]).unwrap();
        match cached_pages_of(&p) {
            Ok(n) => assert!(n >= 1, "a just-written file is cached"),
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                crate::testutil::skip(&format!("cachestat(2) not available: {e}"))
            }
            Err(e) => panic!("cachestat failed: {e}"),
        }
    }
}

/// Field `n` of a `/proc/<pid>/stat` line, numbered from 1 as in proc(5) (`n` >= 3). The
/// command name may hold spaces and parentheses, so fields are counted after the last `)`.
fn stat_field<T: std::str::FromStr>(stat: &str, n: usize) -> Option<T> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(n.checked_sub(3)?)?
        .parse()
        .ok()
}

fn proc_stat_field<T: std::str::FromStr>(pid: i32, n: usize) -> Option<T> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_field(&stat, n)
}

/// The program name of process `pid` (`/proc/<pid>/comm`); None once it is gone.
pub fn comm_of(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|c| c.trim_end().to_string())
        .filter(|c| !c.is_empty())
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`).
pub fn parent_of(pid: i32) -> Option<i32> {
    proc_stat_field(pid, 4)
}

/// When `pid` started, in clock ticks since boot (field 22 of `/proc/<pid>/stat`).
pub fn start_time(pid: i32) -> Option<u64> {
    proc_stat_field(pid, 22)
}

/// Whether the process `pid` that started at `start` still runs: not gone, not a zombie
/// (dead, its parent yet to reap it), not a later process with its pid.
pub fn running_since(pid: i32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state: Option<String> = stat_field(&stat, 3);
    stat_field::<u64>(&stat, 22) == Some(start) && !matches!(state.as_deref(), Some("Z" | "X"))
}

/// The session `pid` belongs to (field 6 of `/proc/<pid>/stat`).
pub fn session_of(pid: i32) -> Option<i32> {
    proc_stat_field(pid, 6)
}

/// The CPU `pid` last ran on (field 39 of `/proc/<pid>/stat`).
pub fn last_cpu(pid: i32) -> Option<usize> {
    proc_stat_field(pid, 39)
}

/// The CPU the calling thread runs on now.
pub fn current_cpu() -> Option<usize> {
    nix::sched::sched_getcpu().ok()
}

/// The CPUs left once `cpu` is taken out of `allowed`; None when that would leave none, or
/// `cpu` is not among them (nothing to change).
pub fn cpus_without(allowed: &[usize], cpu: usize) -> Option<Vec<usize>> {
    if !allowed.contains(&cpu) || allowed.len() < 2 {
        return None;
    }
    Some(allowed.iter().copied().filter(|&c| c != cpu).collect())
}

/// Keep the calling thread (and the threads it starts afterwards) off `cpu`, if it may run
/// anywhere else. Returns whether the affinity changed.
pub fn keep_off_cpu(cpu: usize) -> bool {
    affinity(0)
        .and_then(|now| cpus_without(&now, cpu))
        .is_some_and(|keep| set_affinity(0, &keep))
}

/// The CPUs task `tid` (0 = the calling thread) may run on.
pub fn affinity(tid: i32) -> Option<Vec<usize>> {
    use nix::sched::{sched_getaffinity, CpuSet};
    let set = sched_getaffinity(nix::unistd::Pid::from_raw(tid)).ok()?;
    Some(
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
    )
}

/// Let task `tid` (0 = the calling thread; threads and children it starts later inherit it)
/// run only on `cpus`. Returns whether the affinity was set.
pub fn set_affinity(tid: i32, cpus: &[usize]) -> bool {
    use nix::sched::{sched_setaffinity, CpuSet};
    let mut set = CpuSet::new();
    for &c in cpus {
        if set.set(c).is_err() {
            return false;
        }
    }
    sched_setaffinity(nix::unistd::Pid::from_raw(tid), &set).is_ok()
}

/// At most this many processes of a launch's tree are looked at (`tree_threads`).
const TREE_MAX: usize = 4096;

/// Every thread (task id) of `pid` and of its descendants: from the kernel's lists of each
/// thread's children (`tasks_of_tree`), else, on a kernel built without them
/// (`CONFIG_PROC_CHILDREN`), from the parent of every process in /proc. A launch is
/// sampled so every 100 ms while it is served, and the daemon pins one so before its
/// prefetch starts: the scan of all of /proc took 0.5-0.9 ms beside ~70 processes and
/// 3.8-6.0 ms beside 470, the children lists 30-40 µs (docs/measurements.md, 2026-11-29).
pub fn tree_threads(pid: i32) -> Vec<i32> {
    if children_lists() {
        tasks_of_tree(pid, TREE_MAX)
    } else {
        tree_threads_by_scan(pid)
    }
}

/// Whether this kernel lists each thread's children (`/proc/PID/task/TID/children`).
fn children_lists() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| Path::new("/proc/thread-self/children").exists())
}

/// `tree_threads` from the parent links of every process in /proc.
fn tree_threads_by_scan(pid: i32) -> Vec<i32> {
    let mut pids = vec![pid];
    pids.extend(descendants(pid));
    pids.into_iter()
        .filter_map(|p| std::fs::read_dir(format!("/proc/{p}/task")).ok())
        .flat_map(|rd| rd.filter_map(Result::ok))
        .filter_map(|t| t.file_name().to_string_lossy().parse().ok())
        .collect()
}

/// `pid` and its live descendants, at most `max`, from the kernel's lists of each thread's
/// children (`/proc/PID/task/TID/children`): no scan of all of /proc.
pub fn tree_of(pid: i32, max: usize) -> Vec<i32> {
    walk_tree(pid, max).0
}

/// Every thread of `pid` and of its descendants (`tree_of`, at most `max` processes), from
/// /proc: the pid itself first when it is alive.
pub fn tasks_of_tree(pid: i32, max: usize) -> Vec<i32> {
    walk_tree(pid, max).1
}

/// One walk down from `pid` for both: its processes (at most `max`), and the threads of each
/// process alive, its own tid first.
fn walk_tree(pid: i32, max: usize) -> (Vec<i32>, Vec<i32>) {
    let mut out = vec![pid];
    let mut threads = Vec::new();
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        let mut tids = Vec::new();
        for t in tasks.filter_map(Result::ok) {
            let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            tids.push(tid);
            if out.len() >= max {
                continue;
            }
            let Ok(kids) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            for k in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<i32>().ok())
            {
                if out.len() < max && !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        tids.sort_unstable_by_key(|&t| (t != p, t));
        threads.extend(tids);
    }
    (out, threads)
}

/// All live descendants of `pid`, from the ppid links in /proc.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parent = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.filter_map(Result::ok) {
            let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Some(pp) = parent_of(p) {
                parent.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(c) = todo.pop() {
        for (p, pp) in &parent {
            if *pp == c && !out.contains(p) {
                out.push(*p);
                todo.push(*p);
            }
        }
    }
    out
}

#[cfg(test)]
mod proc_tests {
    use super::*;

    #[test]
    fn a_blocked_signal_shows_as_pending_until_taken() {
        use nix::sys::signal::{SigSet, Signal};
        // Thread-directed, on a thread of its own: no other test thread can receive it.
        std::thread::spawn(|| {
            let set = SigSet::from(Signal::SIGUSR2);
            set.thread_block().unwrap();
            assert!(!signals_pending(&set));
            nix::sys::pthread::pthread_kill(nix::sys::pthread::pthread_self(), Signal::SIGUSR2)
                .unwrap();
            assert!(signals_pending(&set));
            assert!(!signals_pending(&SigSet::from(Signal::SIGUSR1)));
            assert_eq!(set.wait().unwrap(), Signal::SIGUSR2);
            assert!(!signals_pending(&set));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn ppid_is_read_after_the_command_name() {
        assert_eq!(stat_field::<i32>("42 (a) b) c) S 7 42 42 0", 4), Some(7));
        assert_eq!(stat_field::<i32>("garbage", 4), None);
    }

    #[test]
    fn the_tasks_of_a_tree_are_its_processes_threads() {
        let me = std::process::id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let tasks = tasks_of_tree(me, 64);
        assert_eq!(tasks[0], me);
        assert!(tasks.contains(&tid), "{tasks:?} lacks {tid}");
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(tasks_of_tree(i32::MAX, 64).is_empty());
    }

    #[test]
    fn a_child_is_a_descendant_and_has_us_as_parent() {
        let mut c = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = c.id() as i32;
        assert_eq!(parent_of(pid), Some(std::process::id() as i32));
        assert!(descendants(std::process::id() as i32).contains(&pid));
        let me = std::process::id() as i32;
        let tree = tree_of(me, 64);
        assert_eq!(tree[0], me);
        assert!(tree.contains(&pid), "{tree:?}");
        assert_eq!(tree_of(me, 1), vec![me]);
        let _ = c.kill();
        let _ = c.wait();
    }

    /// The children lists find the threads the scan of /proc finds: a grandchild's too, and
    /// a thread of the root.
    #[test]
    fn a_trees_threads_are_found_by_the_children_lists_as_by_the_scan() {
        if !children_lists() {
            crate::testutil::skip("this kernel has no /proc/PID/task/TID/children");
            return;
        }
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & (sleep 5 & wait) & wait"])
            .spawn()
            .unwrap();
        let pid = sh.id() as i32;
        // sh, its two children and the subshell's sleep.
        let t = std::time::Instant::now();
        while tree_of(pid, 8).len() < 4 && t.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut by_lists = tree_threads(pid);
        let mut by_scan = tree_threads_by_scan(pid);
        by_lists.sort_unstable();
        by_scan.sort_unstable();
        assert_eq!(by_lists.len(), 4, "{by_lists:?}");
        assert_eq!(by_lists, by_scan);
        // This process: its own thread, and the shell's tree below it.
        let me = std::process::id() as i32;
        let mine = tree_threads(me);
        assert!(mine.contains(&me), "{mine:?}");
        assert!(by_lists.iter().all(|t| mine.contains(t)), "{mine:?}");
        for &p in by_lists.iter().filter(|&&p| p != pid) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = sh.kill();
        let _ = sh.wait();
        assert!(tree_threads(i32::MAX).is_empty());
    }
}
