//! Stage 6, prefetch: replay a plan with asynchronous readahead, concurrently with the launch.
//! Worker threads take entries in plan order (so the order the schedule chose is kept, while
//! several requests are in flight to use the device's parallelism). Before reading a file it
//! is opened O_NOFOLLOW|O_NONBLOCK and checked against the plan (regular file, device, inode,
//! size, mtime); a mismatch skips the file and counts it stale. Nothing is ever written.

use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{open, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};
use serde::Serialize;

use crate::plan::{Entry, Look, Plan};
use crate::resolve::{FileId, FileKind};
use crate::sys::{self, Dev};
use crate::trace::knobs;

#[derive(Clone, Debug)]
pub struct PrefetchOptions {
    /// Worker threads issuing requests.
    pub jobs: usize,
    /// Most bytes to prefetch; None = half of MemAvailable.
    pub mem_cap: Option<u64>,
    /// Threads of the metadata pass that runs ahead of the data workers (filesystem mode).
    pub meta_jobs: usize,
    /// Most bytes each data worker keeps in flight (0 = unbounded); see `Window`.
    pub window: u64,
    /// The CPU the application runs on: a background prefetch (`Running`) keeps its threads
    /// off it, so they never preempt the launch they serve; see `Running::start_holding`.
    pub avoid_cpu: Option<usize>,
    /// The launch's CPU split (`placement`): the prefetch threads run on its prefetcher
    /// CPUs; takes precedence over `avoid_cpu`.
    pub placement: Option<crate::placement::Placement>,
    /// Hold ext4's inode readahead off until the plan is issued (`knobs::KnobGuard`); None
    /// leaves it alone. With it on, each inode-table block a lookup reads brings the 31
    /// after it: bandwidth the data then waits for. Measured on the demo
    /// (docs/measurements.md): off from the launch's start, its off-CPU time fell by 2.6 ms.
    pub inode_readahead_off: Option<KnobHold>,
    /// Most bytes per second to issue (None: as fast as the device takes them). ClusterFetch's
    /// I/O control (its section 3.3): a burst's prefetch leaves the rest of the disk to the
    /// applications running meanwhile.
    pub max_rate: Option<u64>,
    /// Whom the prefetch reads for (the launching process's credentials); None reads every
    /// planned file (a launch by root, or `run`, whose app runs as the caller).
    pub reader: Option<sys::Credentials>,
}

/// Where a prefetch's inode-readahead hold comes from.
#[derive(Clone, Debug)]
pub enum KnobHold {
    /// Take one beside the workers, with the settings under these paths.
    Take(KnobPaths),
    /// One the launcher took already (from before the plan was read, so it covers the whole
    /// launch); released once the plan is issued.
    Held(Arc<Mutex<Option<knobs::KnobGuard>>>),
}

impl KnobHold {
    pub fn held(g: knobs::KnobGuard) -> KnobHold {
        KnobHold::Held(Arc::new(Mutex::new(Some(g))))
    }
}

/// Where the kernel settings a prefetch may change live (the real ones by default).
#[derive(Clone, Debug)]
pub struct KnobPaths {
    pub sys_ext4: std::path::PathBuf,
    pub run_dir: std::path::PathBuf,
}

impl Default for KnobPaths {
    fn default() -> Self {
        KnobPaths {
            sys_ext4: knobs::SYS_EXT4.into(),
            run_dir: knobs::RUN_DIR.into(),
        }
    }
}

/// Default worker count. Measured on this machine (docs/measurements.md): 4 workers
/// closed more of the cold-warm gap than 1, and as much as 8 or 16; bounding the requests in
/// flight (each worker waiting for its read) closed less.
pub const DEFAULT_JOBS: usize = 4;

/// Default metadata-pass threads: 4 and 8 measured no better (docs/measurements.md).
pub const DEFAULT_META_JOBS: usize = 2;

/// Default in-flight bytes per data worker (512 KiB in all with 4 workers). What a device
/// can hold in flight is not always counted in requests: this VM's virtio disk has no
/// indirect descriptors, so its 256-slot ring takes one slot per memory segment, and
/// `readahead(2)` fills the page cache with single pages that rarely sit next to each other
/// in memory: ~1 MiB of readahead fills the ring, and every later request, the
/// application's own included, waits in the queue behind it (the queue was stopped for a
/// full ring in 83-97% of samples while the plan was issued with 2 MiB per worker).
/// Measured with `bench/ab.py` (docs/measurements.md, 2026-11-25): against 2 MiB, 128 KiB
/// cut the demo app's off-CPU time by 3-6 ms and soffice's by 8 ms; 32 KiB helped the demo
/// as much but slowed soffice, whose plan is four times larger. But a small window starves
/// plans of large ranges, whose launches wait on the prefetch's throughput, not on the
/// queue's length (docs/measurements.md, 2026-11-25, fourth entry): against 128 KiB, 512 KiB
/// and 1 MiB cut chromium's off-CPU time by 29 and 38 ms, 1 MiB npm's by 29 ms and
/// soffice's by 13 ms, and cost inkscape and R 1-6 ms (within their noise).
pub const DEFAULT_WINDOW: u64 = 512 << 10;
/// Descriptors a prefetching process's table is grown to before its threads start
/// (`prepare_process`). The metadata pass holds up to `META_AHEAD` files open ahead of the
/// data workers, and a table the kernel has to grow while other threads share it waits for
/// an RCU grace period (`expand_fdtable` → `synchronize_rcu`, ~10 ms on this VM) with every
/// thread that opens a file in the meantime: traced on soffice, all prefetch threads stood
/// still at 18-29 ms and 35-45 ms of the launch, growing the table to 128 and to 256 slots,
/// while the application read what they would have issued. Grown beforehand, the prefetched
/// launches' off-CPU time fell by 10 ms on soffice, 28 on chromium, 11 on inkscape, 5 on npm
/// (10 interleaved rounds each, docs/measurements.md, 2026-11-29, ninth entry).
pub const FD_TABLE: u64 = 1024;
/// Bounds of `--jobs` and `--meta-jobs` (the parser and the front check the same).
pub const MAX_JOBS: u16 = 64;
pub const MAX_META_JOBS: u16 = 16;
/// Longest a launch is held while a strategy fetches the plan's head first, ms.
pub const DEFAULT_HOLD_CAP_MS: u64 = 2000;

impl Default for PrefetchOptions {
    fn default() -> Self {
        PrefetchOptions {
            jobs: DEFAULT_JOBS,
            mem_cap: None,
            meta_jobs: DEFAULT_META_JOBS,
            window: DEFAULT_WINDOW,
            avoid_cpu: None,
            placement: None,
            inode_readahead_off: None,
            max_rate: None,
            reader: None,
        }
    }
}

/// How metadata entries were replayed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetadataMode {
    /// Readahead of the exact blocks on the block device.
    BlockDevice,
    /// The device cannot be opened: lookups and directory listings through the filesystem.
    #[default]
    Filesystem,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PrefetchReport {
    pub entries: usize,
    pub entries_done: usize,
    pub requests: u64,
    pub data_bytes: u64,
    /// Of `data_bytes`, what was already in the page cache when its request was made.
    pub resident_bytes: u64,
    pub metadata_bytes: u64,
    pub lookups: u64,
    pub listings: u64,
    /// Inodes loaded by handle; and those gone since learning (deleted or reused).
    pub inodes: u64,
    pub inodes_stale: u64,
    /// Names in listed directories stat'ed because their inode shares an inode-table block
    /// with one the plan loads by handle or opens (see `Engine::list_dir`).
    pub names_stated: u64,
    pub files_opened: u32,
    pub files_stale: u32,
    pub files_missing: u32,
    /// Entries not replayed: their file was stale or missing, or the cap was reached.
    pub entries_skipped: u64,
    /// Bytes left out by the memory cap.
    pub capped_bytes: u64,
    pub errors: u64,
    pub metadata_mode: MetadataMode,
    pub jobs: usize,
    /// From start until the last request was issued.
    pub elapsed_ms: f64,
    /// From start until the first request was issued.
    pub first_request_us: f64,
    /// Stopped because the application exited first.
    pub stopped_early: bool,
    /// Stopped because the plan was found in memory already, across it and not only at its
    /// head: a warm launch, left its CPUs.
    pub stopped_warm: bool,
    /// ext4's inode readahead was held off while issuing (`inode_readahead_off`).
    pub inode_readahead_off: bool,
}

enum Slot {
    Pending,
    Open(Arc<OwnedFd>),
    Closed,
}

struct FileSlot {
    state: Mutex<Slot>,
    remaining: AtomicU32,
}

#[derive(Default)]
struct Counters {
    done: AtomicUsize,
    requests: AtomicU64,
    data: AtomicU64,
    meta: AtomicU64,
    lookups: AtomicU64,
    listings: AtomicU64,
    inodes: AtomicU64,
    stale_inodes: AtomicU64,
    names_stated: AtomicU64,
    opened: AtomicU32,
    stale: AtomicU32,
    missing: AtomicU32,
    skipped: AtomicU64,
    errors: AtomicU64,
    resident: AtomicU64,
    first_ns: AtomicU64,
    last_ns: AtomicU64,
    /// Data bytes looked at for the warm check (`WARM_PROBE`), and of them resident.
    probed: AtomicU64,
    probed_resident: AtomicU64,
    /// Bytes counted against `max_rate`.
    paced: AtomicU64,
}

/// The plan's first data bytes the prefetch checks to tell a warm launch (the app's files
/// already in memory) from a cold one.
const WARM_PROBE: u64 = 4 << 20;
/// Share of the probed bytes resident for a launch to count as warm: then the application
/// gets all its CPUs back at once, as there is (next to) nothing to prefetch beside it.
const WARM_SHARE: f64 = 0.9;
/// Data entries sampled across the whole plan once its head is found warm. The head alone
/// does not tell: it is mostly shared libraries, which a desktop keeps in memory while the
/// app's own files are not. With the sample (nearly) all in memory too, the rest of the plan
/// is not issued: on a warm cache soffice's plan took 20-40 ms of system CPU to go through
/// (569 opens, 2084 stats, 2388 readaheads and residency checks), the whole of its measured
/// warm-launch overhead on two vCPUs (bench/results: +33 ms).
const WARM_SAMPLES: usize = crate::plan::LOOK_SAMPLES;

/// Largest single readahead(2): the kernel silently trims a request to
/// max(read_ahead_kb, max_sectors_kb) of the file's device, so longer ranges are split.
fn readahead_chunk(dev: Dev) -> u64 {
    let read = |name: &str| -> Option<u64> {
        for base in [
            format!("/sys/dev/block/{dev}/queue/{name}"),
            format!("/sys/dev/block/{dev}/../queue/{name}"),
        ] {
            if let Ok(s) = std::fs::read_to_string(&base) {
                if let Ok(v) = s.trim().parse::<u64>() {
                    return Some(v * 1024);
                }
            }
        }
        None
    };
    let ra = read("read_ahead_kb").unwrap_or(0);
    let io = read("max_sectors_kb").unwrap_or(0);
    ra.max(io).max(128 * 1024)
}

/// Start reading what exec, the dynamic loader and the program's first instructions touch in
/// the executable a launch is about to exec, while the prefetcher is forked and starts its
/// first requests. Best effort, never an error.
///
/// Traced: exec's `elf_load` waited ~7 ms for the bss page of the data segment (it zeroes the
/// tail of that page), and then the dynamic loader's first fault, on `.dynamic` in the data
/// segment 5.3 MB into python3, waited ~4-7 ms behind the text before it. So the
/// `exec_order` ranges go first (see there). Then the executable's ranges among the plan's
/// first `plan::LOOK_HEAD` entries (the plan is in first-use order): python3 faults on its text
/// 0.3 ms after exec, before the prefetcher has issued anything, and a fault on a page not yet
/// requested makes the kernel read around it, here 8 MiB: the whole binary, 1 MB at a time,
/// with the pages wanted next somewhere in the queue (traced: a 5.3 ms wait at 2 ms). The
/// rest of the file is the plan's. Reading the whole binary here instead (6.8 MB) cost the
/// launcher 2-5 ms of CPU before the exec and put ~7 ms of device time ahead of the plan.
///
/// Returns whether those ranges were (nearly) all in memory before it asked for them: the
/// first sign of a warm launch, free to take (the file is open anyway), which
/// `sample_residency` then confirms.
pub fn warm_executable(path: &Path, look: Option<&Look>) -> bool {
    // The path may name a symlink (/usr/bin/python3); the file is what exec will map.
    let Ok(real) = std::fs::canonicalize(path) else {
        return false;
    };
    let Ok((fd, st)) = sys::open_planned(&real, OFlag::empty()) else {
        return false;
    };
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return false;
    }
    reads_exact(&fd);
    // Looked at before any of it is asked for: pages being read count as cached. The header
    // page first: exec reads it whatever the file is, and a script (R, npm, soffice) has
    // nothing else to look at here, so without it a warm script launch was never taken for
    // one (docs/measurements.md, 2026-11-29, fourth entry).
    let mut resident = Resident::default();
    resident.add(&fd, 0, EXE_HEAD as u64);
    // The header page: exec reads it first, and it says where the rest is.
    let mut head = vec![0u8; EXE_HEAD];
    let n = nix::sys::uio::pread(fd.as_fd(), &mut head, 0).unwrap_or(0);
    let dev = Dev::from_user(st.st_dev);
    let chunk = readahead_chunk(dev);
    let ranges: Vec<(u64, u64)> = exec_order(&head[..n])
        .into_iter()
        .chain(look.map(|l| l.head_of(dev, st.st_ino)).unwrap_or_default())
        .map(|(offset, len)| (offset, len.min(chunk)))
        .collect();
    for &(offset, len) in &ranges {
        // The header page is counted above already.
        let from = offset.max(EXE_HEAD as u64);
        let end = offset.saturating_add(len);
        if end > from {
            resident.add(&fd, from, end - from);
        }
    }
    // All in memory (a warm launch): nothing to ask for, a dozen syscalls fewer before it.
    if resident.cached < resident.seen {
        for (offset, len) in ranges {
            let _ = sys::readahead(fd.as_fd(), offset, len);
        }
    }
    resident.warm()
}

/// Bytes looked at for residency, and of them in memory.
#[derive(Clone, Copy, Debug, Default)]
pub struct Resident {
    pub seen: u64,
    pub cached: u64,
}

impl Resident {
    fn add(&mut self, fd: &OwnedFd, offset: u64, len: u64) {
        let cached = sys::cachestat(fd.as_fd(), offset, len).map_or(0, |c| c.cached_pages * 4096);
        self.seen += len;
        self.cached += cached.min(len);
    }

    /// At least `WARM_SHARE` of what was looked at is in memory.
    pub fn warm(&self) -> bool {
        self.seen > 0 && self.cached as f64 >= WARM_SHARE * self.seen as f64
    }

    /// More than `1 - WARM_SHARE` of `total` bytes is known not to be in memory.
    fn cold_of(&self, total: u64) -> bool {
        (self.seen - self.cached) as f64 > (1.0 - WARM_SHARE) * total as f64
    }
}

/// How much of the plan's data is in memory already (`Resident::warm`: whether the plan looks
/// warm), sampled: the `Look`'s data entries spread over the whole plan (`Plan::look`), the
/// prefetch's own check (`spread_resident`) made before anything starts, so that a warm launch is neither
/// held for the plan's head nor kept off a CPU (warm pdflatex: +8.5 ms with both,
/// docs/measurements.md, 2026-11-27, fifth entry).
/// The samples are looked at from the plan's end, where the app's own files are (its head is
/// mostly shared libraries, warm on a desktop while the app is not), and the look stops at
/// the first sample that settles it as cold: a cold plan costs one or two opens.
pub fn sample_residency(look: &Look) -> Resident {
    let samples = &look.samples;
    let total: u64 = samples.iter().map(|s| s.2).sum();
    let mut resident = Resident::default();
    // Each sampled file opened once (a plan's large files hold several samples).
    let mut opened: Vec<(u32, Option<OwnedFd>)> = Vec::with_capacity(samples.len());
    for &(file, offset, len) in samples.iter().rev() {
        let i = match opened.iter().position(|(f, _)| *f == file) {
            Some(i) => i,
            None => {
                let fd = look
                    .files
                    .get(file as usize)
                    .and_then(|f| open_checked(f, None).ok());
                opened.push((file, fd));
                opened.len() - 1
            }
        };
        match &opened[i].1 {
            Some(fd) => resident.add(fd, offset, len),
            // Gone or changed: the prefetch would not find it in memory either.
            None => resident.seen += len,
        }
        if resident.cold_of(total) {
            break;
        }
    }
    resident
}

/// What `warm_executable` reads synchronously to find the program headers.
const EXE_HEAD: usize = 4096;

/// The ranges of a 64-bit ELF executable that a launch touches first, in that order, from
/// the program headers in `head` (its first bytes):
/// 1. for each loadable segment with a bss, the page holding the end of its file part, which
///    exec zeroes from there on (exec waits for it);
/// 2. the file part of each writable loadable segment: `.dynamic`, the GOT and the data the
///    dynamic loader reads and relocates before any of the program's code runs;
/// 3. the page of the entry point.
///
/// Anything that is not such an ELF file gives nothing.
fn exec_order(head: &[u8]) -> Vec<(u64, u64)> {
    use object::elf::{PF_W, PF_X, PT_LOAD};
    use object::read::elf::{FileHeader, ProgramHeader};
    let Some(crate::elf::Headers {
        header: h,
        endian,
        programs: phdrs,
    }) = crate::elf::headers(head)
    else {
        return Vec::new();
    };
    let page = EXE_HEAD as u64;
    let loads = || {
        phdrs
            .iter()
            .filter(|p| p.p_type(endian) == PT_LOAD && p.p_filesz(endian) > 0)
    };
    let mut out: Vec<(u64, u64)> = loads()
        .filter(|p| p.p_memsz(endian) > p.p_filesz(endian))
        .map(|p| {
            let end = p.p_offset(endian).saturating_add(p.p_filesz(endian));
            ((end - 1) / page * page, page)
        })
        .collect();
    out.extend(
        loads()
            .filter(|p| p.p_flags(endian) & PF_W == PF_W)
            .map(|p| (p.p_offset(endian), p.p_filesz(endian))),
    );
    let entry = h.e_entry(endian);
    out.extend(
        loads()
            .filter(|p| p.p_flags(endian) & PF_X == PF_X)
            .filter(|p| {
                let v = p.p_vaddr(endian);
                entry >= v && entry - v < p.p_filesz(endian)
            })
            .map(|p| {
                (
                    (p.p_offset(endian) + entry - p.p_vaddr(endian)) / page * page,
                    page,
                )
            }),
    );
    out
}

fn open_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC
}

/// Turn the kernel's readahead heuristics off for reads through `fd` (`readahead(2)` is not
/// affected): such a read then brings in the pages it asks for and no more. Otherwise a read
/// at offset 0 opens a readahead window and marks a page in it, and the marked page, touched
/// by the launch a moment later, grows the window on and on: traced on the demo, the front's
/// read of python3.11's header read 1.1 MB of it that the plan leaves out, in the launch's
/// first milliseconds; with the advice, exactly the plan's 5.4 MB (docs/measurements.md).
fn reads_exact(fd: &OwnedFd) {
    let _ = nix::fcntl::posix_fadvise(
        fd.as_fd(),
        0,
        0,
        nix::fcntl::PosixFadviseAdvice::POSIX_FADV_RANDOM,
    );
}

/// Whether the object of `st` is still the planned file `f`, and `reader` may read it.
fn still_planned(
    f: &FileId,
    st: &nix::sys::stat::FileStat,
    reader: Option<&sys::Credentials>,
) -> bool {
    let fmt = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    let kind_ok = match f.kind {
        FileKind::Regular => fmt == SFlag::S_IFREG,
        FileKind::Directory => fmt == SFlag::S_IFDIR,
    };
    let now = FileId {
        path: f.path.clone(),
        dev: Dev::from_user(st.st_dev),
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
        kind: f.kind,
        volatile: false,
    };
    kind_ok && f.unchanged(&now) && reader.is_none_or(|r| r.may_read(st))
}

/// What a planned file is now, judged as the prefetch judges it (`plan show` and the
/// daemon's checks use this, so that they count what `run --stats` counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileState {
    Unchanged,
    /// Changed or replaced; something else than a regular file or directory now; or reached
    /// through a symbolic link: not read.
    Stale,
    Missing,
}

impl FileState {
    fn of_error(e: Errno) -> FileState {
        match e {
            Errno::ENOENT | Errno::ENOTDIR => FileState::Missing,
            _ => FileState::Stale,
        }
    }
}

/// `f`'s state, without opening it for reading.
pub fn file_state(f: &FileId) -> FileState {
    match sys::stat_planned(&f.path) {
        Ok((_, st)) if still_planned(f, &st, None) => FileState::Unchanged,
        Ok(_) => FileState::Stale,
        Err(e) => FileState::of_error(e),
    }
}

/// Open a planned file and check it is still what the plan recorded. Reads through the
/// descriptor (a wait for a range, a residency check) bring in only what they ask for.
/// The check happens on the object's status before it is opened for reading, so a changed,
/// swapped or grown file is not opened at all; nor is one `reader` may not read.
fn open_checked(f: &FileId, reader: Option<&sys::Credentials>) -> Result<OwnedFd, Errno> {
    let mut flags = OFlag::empty();
    if f.kind == FileKind::Directory {
        flags |= OFlag::O_DIRECTORY;
    }
    let accept = |st: &nix::sys::stat::FileStat| still_planned(f, st, reader);
    // O_NOATIME keeps the prefetch from dirtying inodes; only allowed for owner or root.
    let (fd, _) = sys::open_planned_if(&f.path, flags | OFlag::O_NOATIME, accept)?;
    if f.kind == FileKind::Regular {
        reads_exact(&fd);
    }
    Ok(fd)
}

/// Open a block device read-only and check it is the planned device.
fn open_device(path: &Path, dev: Dev) -> Result<OwnedFd, Errno> {
    let fd = open(path, open_flags(), Mode::empty())?;
    let st = fstat(&fd)?;
    let is_blk = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFBLK;
    if !is_blk || Dev::from_user(st.st_rdev) != dev {
        return Err(Errno::ESTALE);
    }
    Ok(fd)
}

/// One unit of work: a (piece of an) entry.
#[derive(Clone, Copy)]
struct Work {
    entry: u32,
    offset: u64,
    len: u64,
}

/// How many work items the metadata pass may run ahead of the data workers.
const META_AHEAD: usize = 256;

struct Engine<'a> {
    plan: &'a Plan,
    /// Lookups and listings are done by the metadata pass, not the data workers.
    meta_pass: bool,
    next_meta: AtomicUsize,
    work: Vec<Work>,
    files: Vec<FileSlot>,
    devices: Vec<Option<OwnedFd>>,
    mode: MetadataMode,
    next: AtomicUsize,
    c: Counters,
    start: Instant,
    /// In-flight budget of each data worker.
    window: u64,
    /// `planned_blocks` of the plan.
    planned_blocks: HashSet<(Dev, u64)>,
    /// Set once the plan's first `WARM_PROBE` bytes were found (nearly all) in memory.
    warm: &'a AtomicBool,
    /// Set when, beside its head, a sample across the whole plan was found in memory too:
    /// the workers stop, leaving the warm launch its CPUs (`spread_resident`).
    all_warm: AtomicBool,
    max_rate: Option<u64>,
    reader: Option<sys::Credentials>,
}

/// When, from the prefetch's start, `total` bytes may have been issued at `rate` bytes/s.
fn due(total: u64, rate: u64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(total as f64 / rate as f64)
}

/// Inodes per inode-table block assumed when grouping inode numbers: 256-byte inodes in
/// 4 KiB blocks, mke2fs's default for ext4. Another size only makes the groups finer or
/// coarser (a few more stats, or a few fewer), never wrong.
const INODES_PER_BLOCK: u64 = 16;

/// The inode-table block, counted from inode 1, that holds inode `ino`.
fn itable_block(ino: u64) -> u64 {
    ino.saturating_sub(1) / INODES_PER_BLOCK
}

/// Per filesystem, the inode-table blocks the plan reads anyway: those of the inodes it
/// loads by handle (files the launch stats but never opens) and of every file and directory
/// it opens.
fn planned_blocks(plan: &Plan) -> HashSet<(Dev, u64)> {
    let by_handle = plan.entries.iter().filter_map(|e| match *e {
        Entry::Inode { file, ino } => plan
            .files
            .get(file as usize)
            .map(|f| (f.dev, itable_block(ino))),
        _ => None,
    });
    let opened = plan.files.iter().map(|f| (f.dev, itable_block(f.ino)));
    by_handle.chain(opened).collect()
}

impl Engine<'_> {
    fn mark(&self) {
        let ns = self.start.elapsed().as_nanos() as u64;
        let _ =
            self.c
                .first_ns
                .compare_exchange(0, ns.max(1), Ordering::Relaxed, Ordering::Relaxed);
        self.c.last_ns.fetch_max(ns, Ordering::Relaxed);
        self.c.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// The open fd of a file, opening and checking it on first use.
    fn file_fd(&self, idx: u32) -> Option<Arc<OwnedFd>> {
        let slot = &self.files[idx as usize];
        let mut st = slot.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*st {
            Slot::Open(fd) => Some(fd.clone()),
            Slot::Closed => None,
            Slot::Pending => {
                match open_checked(&self.plan.files[idx as usize], self.reader.as_ref()) {
                    Ok(fd) => {
                        self.c.opened.fetch_add(1, Ordering::Relaxed);
                        let fd = Arc::new(fd);
                        *st = Slot::Open(fd.clone());
                        Some(fd)
                    }
                    Err(Errno::EMFILE | Errno::ENFILE) => {
                        // Out of descriptors for now: not the file's fault; a later piece retries.
                        self.c.errors.fetch_add(1, Ordering::Relaxed);
                        None
                    }
                    Err(e) => {
                        match FileState::of_error(e) {
                            FileState::Missing => &self.c.missing,
                            _ => &self.c.stale,
                        }
                        .fetch_add(1, Ordering::Relaxed);
                        *st = Slot::Closed;
                        None
                    }
                }
            }
        }
    }

    /// Called after each piece of a file's work: close the fd after its last one.
    fn release(&self, idx: u32) {
        let slot = &self.files[idx as usize];
        if slot.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
            *slot.state.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Closed;
        }
    }

    /// Whether `WARM_SAMPLES` data entries spread over the plan's work are (nearly) all in
    /// memory. Each sampled file is opened as its first piece would open it (and kept for it).
    fn spread_resident(&self) -> bool {
        let data: Vec<&Work> = self
            .work
            .iter()
            .filter(|w| matches!(self.plan.entries[w.entry as usize], Entry::Data { .. }))
            .collect();
        let mut resident = Resident::default();
        for k in 1..=WARM_SAMPLES {
            let Some(w) = data.get(k * data.len() / (WARM_SAMPLES + 1)) else {
                continue;
            };
            let Entry::Data { file, .. } = self.plan.entries[w.entry as usize] else {
                continue;
            };
            let Some(fd) = self.file_fd(file) else {
                continue;
            };
            resident.add(&fd, w.offset, w.len);
        }
        resident.warm()
    }

    /// Under `max_rate`, wait until `bytes` more may be issued.
    fn pace(&self, bytes: u64) {
        if let Some(rate) = self.max_rate {
            let total = self.c.paced.fetch_add(bytes, Ordering::Relaxed) + bytes;
            let wait = due(total, rate).saturating_sub(self.start.elapsed());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    fn do_work(&self, w: Work, win: &mut Window) {
        // Only bursts set a rate: a launch's prefetch pays one test per item.
        if self.max_rate.is_some()
            && matches!(
                self.plan.entries[w.entry as usize],
                Entry::Data { .. } | Entry::Meta { .. }
            )
        {
            self.pace(w.len);
        }
        match self.plan.entries[w.entry as usize] {
            Entry::Data { file, .. } => {
                let fd = self.file_fd(file);
                // What was in memory before this request: a launch that found most of its
                // plan cached says little about the strategy (see `PrefetchReport`).
                let cached_before = fd
                    .as_ref()
                    .and_then(|fd| sys::cachestat(fd.as_fd(), w.offset, w.len).ok())
                    .map_or(0, |c| c.cached_pages * 4096);
                if fd.is_some() && self.c.probed.load(Ordering::Relaxed) < WARM_PROBE {
                    let seen = self.c.probed.fetch_add(w.len, Ordering::Relaxed) + w.len;
                    let res = self
                        .c
                        .probed_resident
                        .fetch_add(cached_before.min(w.len), Ordering::Relaxed)
                        + cached_before.min(w.len);
                    if seen >= WARM_PROBE
                        && res as f64 >= WARM_SHARE * seen as f64
                        && !self.warm.swap(true, Ordering::Relaxed)
                        && self.spread_resident()
                    {
                        self.all_warm.store(true, Ordering::Relaxed);
                    }
                }
                match fd {
                    Some(fd) => match sys::readahead(fd.as_fd(), w.offset, w.len) {
                        Ok(()) => {
                            self.mark();
                            self.c.data.fetch_add(w.len, Ordering::Relaxed);
                            self.c
                                .resident
                                .fetch_add(cached_before.min(w.len), Ordering::Relaxed);
                            win.issued(fd.clone(), w.offset + w.len, w.len);
                        }
                        Err(_) => {
                            self.c.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                    None => {
                        self.c.skipped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                self.release(file);
            }
            Entry::Meta { device, .. } => {
                if let Some(Some(fd)) = self.devices.get(device as usize) {
                    match sys::readahead(fd.as_fd(), w.offset, w.len) {
                        Ok(()) => {
                            self.mark();
                            self.c.meta.fetch_add(w.len, Ordering::Relaxed);
                        }
                        Err(_) => {
                            self.c.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else {
                    self.c.skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Entry::Lookup { .. } | Entry::ListDir { .. } | Entry::Inode { .. } => {
                self.do_metadata(w)
            }
        }
        self.c.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Filesystem-level metadata: a lookup, a directory listing or an inode by handle.
    fn do_metadata(&self, w: Work) {
        match self.plan.entries[w.entry as usize] {
            Entry::Lookup { file } => {
                let f = &self.plan.files[file as usize];
                // lstat walks the path: every directory block and the inode get cached.
                let _ = std::fs::symlink_metadata(&f.path);
                self.mark();
                self.c.lookups.fetch_add(1, Ordering::Relaxed);
                self.release(file);
            }
            Entry::ListDir { file } => {
                if let Some(fd) = self.file_fd(file) {
                    self.list_dir(&fd, self.plan.files[file as usize].dev);
                } else {
                    self.c.skipped.fetch_add(1, Ordering::Relaxed);
                }
                self.release(file);
            }
            Entry::Inode { file, ino } => {
                // The anchor is a planned file on the same filesystem, checked like any.
                if let Some(fd) = self.file_fd(file) {
                    match sys::load_inode(fd.as_fd(), ino) {
                        Ok(()) => {
                            self.mark();
                            self.c.inodes.fetch_add(1, Ordering::Relaxed);
                        }
                        // Deleted since learning, or no longer a valid inode number.
                        Err(e) if e.raw_os_error() == Some(libc::ESTALE) => {
                            self.c.stale_inodes.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {
                            self.c.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                } else {
                    self.c.skipped.fetch_add(1, Ordering::Relaxed);
                }
                self.release(file);
            }
            Entry::Data { .. } | Entry::Meta { .. } => {}
        }
    }

    /// Read a directory's listing (its blocks get cached), and stat the entries whose inode
    /// shares an inode-table block with an inode the plan loads by handle or opens. A launch
    /// that stats files it never opens (python: each module's source, to check its bytecode)
    /// has only some of their inode numbers in the plan (the blocks its stats read first),
    /// not their names; the listing has the names. Stat'ing them here builds their dentries
    /// and inodes off the application's CPU, at no extra I/O (their inode-table block is
    /// planned): the demo app's `stat()` time over a warm launch's fell from +7.8 to +3.1 ms
    /// per launch with the blocks of inodes by handle, and its name lookups after a complete
    /// prefetch from 2.6 to 1.1 ms (what is left: names that do not exist) with the blocks of
    /// opened files too (`perf`, docs/measurements.md).
    fn list_dir(&self, fd: &OwnedFd, dev: Dev) {
        let Ok(Ok(mut dir)) = nix::unistd::dup(fd.as_fd()).map(nix::dir::Dir::from_fd) else {
            self.c.errors.fetch_add(1, Ordering::Relaxed);
            return;
        };
        for e in dir.iter().flatten() {
            let name = e.file_name();
            if matches!(name.to_bytes(), b"." | b"..")
                || !self.planned_blocks.contains(&(dev, itable_block(e.ino())))
            {
                continue;
            }
            if fstatat(fd.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW).is_ok() {
                self.c.names_stated.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.mark();
        self.c.listings.fetch_add(1, Ordering::Relaxed);
    }

    /// A data worker: takes every item in plan order, except that in filesystem-metadata mode
    /// lookups and listings belong to the metadata pass.
    fn worker(&self, stop: &AtomicBool) {
        let mut win = Window::new(self.window);
        loop {
            if stop.load(Ordering::Relaxed) || self.all_warm.load(Ordering::Relaxed) {
                return;
            }
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(w) = self.work.get(i) else { return };
            if self.plan.entries[w.entry as usize].is_fs_level() && self.meta_pass {
                continue;
            }
            win.make_room(w.len);
            self.do_work(*w, &mut win);
        }
    }

    /// The metadata pass (filesystem mode; Paralfetch's metadata shift done in user space):
    /// runs ahead of the data workers through the same order, doing the lookups and listings
    /// and opening each file at its first data entry, so directory blocks and inodes are
    /// cached before the data workers, and the application, walk those paths. It stays at
    /// most `META_AHEAD` items ahead, which bounds the descriptors it holds open.
    fn meta_worker(&self, stop: &AtomicBool) {
        let done = || stop.load(Ordering::Relaxed) || self.all_warm.load(Ordering::Relaxed);
        loop {
            if done() {
                return;
            }
            let i = self.next_meta.fetch_add(1, Ordering::Relaxed);
            let Some(w) = self.work.get(i) else { return };
            while i > self.next.load(Ordering::Relaxed) + META_AHEAD {
                if done() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            match self.plan.entries[w.entry as usize] {
                Entry::Lookup { .. } | Entry::ListDir { .. } | Entry::Inode { .. } => {
                    self.do_metadata(*w);
                    self.c.done.fetch_add(1, Ordering::Relaxed);
                }
                Entry::Data { file, .. } => {
                    // Opening walks the path and loads the inode; the fd is kept for the
                    // data workers (closed after the file's last piece).
                    let _ = self.file_fd(file);
                }
                Entry::Meta { .. } => {}
            }
        }
    }
}

/// Make this process ready to prefetch: its descriptor table grown to `FD_TABLE` while
/// (ideally) no other thread shares it, which costs nothing then; later growth would stall
/// the prefetch threads (see `FD_TABLE`). A long-lived process (the daemon) calls it at its
/// start; `Running` and `prefetch` call it too (a few syscalls once it is done).
pub fn prepare_process() {
    sys::reserve_fds(FD_TABLE);
}

/// Replay `plan` now, blocking until done or `stop` is set.
pub fn prefetch(plan: &Plan, opts: &PrefetchOptions, stop: &AtomicBool) -> PrefetchReport {
    prefetch_holding(plan, opts, stop, &|| {})
}

/// `prefetch`, calling `on_head` once the plan's first `hold_entries` entries are in memory
/// (at once if it holds nothing): the launcher releases the application then.
pub fn prefetch_holding(
    plan: &Plan,
    opts: &PrefetchOptions,
    stop: &AtomicBool,
    on_head: &(dyn Fn() + Sync),
) -> PrefetchReport {
    // (`Running` prepares the process before its thread starts.)
    prepare_process();
    prefetch_watching(plan, opts, stop, on_head, &AtomicBool::new(false))
}

/// `prefetch_holding`, setting `warm` as soon as the plan's first data turn out to be in
/// memory already (a warm launch).
fn prefetch_watching(
    plan: &Plan,
    opts: &PrefetchOptions,
    stop: &AtomicBool,
    on_head: &(dyn Fn() + Sync),
    warm: &AtomicBool,
) -> PrefetchReport {
    let start = Instant::now();
    // Taken beside the workers (its lock files and journal may be on a cold disk: 4-5 ms
    // before the first request when taken first), released once everything is issued (the
    // last holder restores the setting).
    let knob_hold: Mutex<Option<knobs::KnobGuard>> = Mutex::new(None);
    // Metadata: exact blocks from the block device when it can be opened, otherwise the
    // filesystem-level operations (lookups and listings) the plan carries for that case.
    let devices: Vec<Option<OwnedFd>> = plan
        .devices
        .iter()
        .map(|d| match open_device(&d.path, d.dev) {
            Ok(fd) => Some(fd),
            Err(e) => {
                tracing::debug!(
                    "metadata device {}: {e}; using filesystem lookups",
                    d.path.display()
                );
                None
            }
        })
        .collect();
    let mode = if !devices.is_empty() && devices.iter().all(Option::is_some) {
        MetadataMode::BlockDevice
    } else {
        MetadataMode::Filesystem
    };
    let cap = opts
        .mem_cap
        .unwrap_or_else(|| sys::mem_available().map(|m| m / 2).unwrap_or(u64::MAX));
    let mut chunk_of_dev = std::collections::HashMap::new();
    let mut chunk = |d: Dev| *chunk_of_dev.entry(d).or_insert_with(|| readahead_chunk(d));
    let mut work = Vec::with_capacity(plan.entries.len());
    let mut files: Vec<FileSlot> = plan
        .files
        .iter()
        .map(|_| FileSlot {
            state: Mutex::new(Slot::Pending),
            remaining: AtomicU32::new(0),
        })
        .collect();
    let mut budget = cap;
    let mut capped = 0u64;
    let mut skipped = 0u64;
    for (i, e) in plan.entries.iter().enumerate() {
        let (file, range) = match *e {
            Entry::Data { file, offset, len } => (
                Some(file),
                Some((plan.files[file as usize].dev, offset, len)),
            ),
            Entry::Meta {
                device,
                offset,
                len,
            } => {
                if mode != MetadataMode::BlockDevice {
                    continue;
                }
                (None, Some((plan.devices[device as usize].dev, offset, len)))
            }
            Entry::Lookup { file } | Entry::ListDir { file } => {
                if mode == MetadataMode::BlockDevice {
                    continue;
                }
                (Some(file), None)
            }
            // In both modes: with the block device the inode-table block is prefetched, but
            // the inode is still built (parsed, allocated) by whoever looks it up first.
            Entry::Inode { file, .. } => (Some(file), None),
        };
        if let Some((_, _, len)) = range {
            if len > budget {
                capped += len;
                skipped += 1;
                continue;
            }
            budget -= len;
        }
        match range {
            Some((dev, offset, len)) => {
                let step = chunk(dev);
                let mut off = offset;
                while off < offset + len {
                    let l = step.min(offset + len - off);
                    work.push(Work {
                        entry: i as u32,
                        offset: off,
                        len: l,
                    });
                    if let Some(f) = file {
                        *files[f as usize].remaining.get_mut() += 1;
                    }
                    off += l;
                }
            }
            None => {
                work.push(Work {
                    entry: i as u32,
                    offset: 0,
                    len: 0,
                });
                if let Some(f) = file {
                    *files[f as usize].remaining.get_mut() += 1;
                }
            }
        }
    }
    let meta_jobs = if mode == MetadataMode::Filesystem {
        opts.meta_jobs
    } else {
        0
    };
    let engine = Engine {
        plan,
        meta_pass: meta_jobs > 0,
        next_meta: AtomicUsize::new(0),
        work,
        files,
        devices,
        mode,
        next: AtomicUsize::new(0),
        c: Counters::default(),
        start,
        window: opts.window,
        planned_blocks: planned_blocks(plan),
        warm,
        all_warm: AtomicBool::new(false),
        max_rate: opts.max_rate.filter(|&r| r > 0),
        reader: opts.reader.clone(),
    };
    let jobs = opts.jobs.max(1);
    let hold = plan.hold_entries as usize;
    let head_work = engine
        .work
        .iter()
        .take_while(|w| (w.entry as usize) < hold)
        .count();
    std::thread::scope(|s| {
        if let Some(KnobHold::Held(g)) = &opts.inode_readahead_off {
            *knob_hold.lock().unwrap_or_else(|p| p.into_inner()) =
                g.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
        if let Some(KnobHold::Take(k)) = &opts.inode_readahead_off {
            s.spawn(
                || match knobs::KnobGuard::inode_readahead_off(&k.sys_ext4, &k.run_dir) {
                    Ok(g) => *knob_hold.lock().unwrap_or_else(|p| p.into_inner()) = Some(g),
                    Err(e) => tracing::debug!("inode readahead left on: {e}"),
                },
            );
        }
        // The holder: once the head's requests are issued, wait for their pages, release.
        s.spawn(|| {
            while engine.next.load(Ordering::Relaxed) < head_work
                && !stop.load(Ordering::Relaxed)
                && !engine.all_warm.load(Ordering::Relaxed)
            {
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            if hold > 0 && !stop.load(Ordering::Relaxed) {
                wait_resident_entries(plan, 0..hold);
            }
            on_head();
        });
        for _ in 0..meta_jobs {
            s.spawn(|| engine.meta_worker(stop));
        }
        for _ in 0..jobs {
            s.spawn(|| engine.worker(stop));
        }
    });
    let knob_hold = knob_hold.into_inner().unwrap_or_else(|p| p.into_inner());
    let c = &engine.c;
    let (seen, res) = (
        c.probed.load(Ordering::Relaxed),
        c.probed_resident.load(Ordering::Relaxed),
    );
    if seen > 0 && res as f64 >= WARM_SHARE * seen as f64 {
        warm.store(true, Ordering::Relaxed);
    }
    let total_work = engine.work.len();
    let done = c.done.load(Ordering::Relaxed);
    PrefetchReport {
        entries: plan.entries.len(),
        entries_done: done,
        requests: c.requests.load(Ordering::Relaxed),
        data_bytes: c.data.load(Ordering::Relaxed),
        resident_bytes: c.resident.load(Ordering::Relaxed),
        metadata_bytes: c.meta.load(Ordering::Relaxed),
        lookups: c.lookups.load(Ordering::Relaxed),
        listings: c.listings.load(Ordering::Relaxed),
        names_stated: c.names_stated.load(Ordering::Relaxed),
        inodes: c.inodes.load(Ordering::Relaxed),
        inodes_stale: c.stale_inodes.load(Ordering::Relaxed),
        files_opened: c.opened.load(Ordering::Relaxed),
        files_stale: c.stale.load(Ordering::Relaxed),
        files_missing: c.missing.load(Ordering::Relaxed),
        entries_skipped: skipped + c.skipped.load(Ordering::Relaxed),
        capped_bytes: capped,
        errors: c.errors.load(Ordering::Relaxed),
        metadata_mode: engine.mode,
        jobs,
        elapsed_ms: c.last_ns.load(Ordering::Relaxed) as f64 / 1e6,
        first_request_us: c.first_ns.load(Ordering::Relaxed) as f64 / 1e3,
        stopped_early: done < total_work && !engine.all_warm.load(Ordering::Relaxed),
        stopped_warm: engine.all_warm.load(Ordering::Relaxed),
        inode_readahead_off: knob_hold.is_some(),
    }
}

/// Block until the plan's data ranges are in memory: a read of a page under I/O waits for that
/// I/O, so reading one byte at each end of each range waits for everything already issued
/// (and reads what was not). A range still short of pages then (readahead(2) is best effort:
/// its page allocations may fail and end the request early; CI once found 4 of 3992 planned
/// pages missing after `prefetch --wait`) has its missing pages read. Returns how many ranges
/// were checked.
pub fn wait_resident(plan: &Plan) -> usize {
    wait_resident_entries(plan, 0..plan.entries.len())
}

/// `wait_resident` for some of the entries.
pub fn wait_resident_entries(plan: &Plan, range: std::ops::Range<usize>) -> usize {
    let mut fds: Vec<Option<Option<OwnedFd>>> = (0..plan.files.len()).map(|_| None).collect();
    let mut n = 0;
    let mut b = [0u8; 1];
    let page = u64::from(plan.page_size).max(1);
    for e in plan.entries.get(range).unwrap_or(&[]) {
        let Entry::Data { file, offset, len } = *e else {
            continue;
        };
        let slot = fds[file as usize]
            .get_or_insert_with(|| open_checked(&plan.files[file as usize], None).ok());
        if let Some(fd) = slot {
            let _ = nix::sys::uio::pread(fd.as_fd(), &mut b, offset as i64);
            let _ = nix::sys::uio::pread(fd.as_fd(), &mut b, (offset + len - 1) as i64);
            let first = offset / page;
            let end = (offset + len).div_ceil(page);
            let short = crate::sys::cachestat(fd.as_fd(), first * page, (end - first) * page)
                .is_ok_and(|c| c.cached_pages < end - first);
            if short {
                for p in first..end {
                    let _ = nix::sys::uio::pread(fd.as_fd(), &mut b, (p * page) as i64);
                }
            }
            n += 1;
        }
    }
    n
}

/// A prefetch running in the background while the application launches.
pub struct Running {
    stop: Arc<AtomicBool>,
    warm: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<PrefetchReport>,
}

impl Running {
    pub fn start(plan: Arc<Plan>, opts: PrefetchOptions) -> std::io::Result<Running> {
        Ok(Running::start_holding(plan, opts)?.0)
    }

    /// Start, with a channel that receives once the plan's held head is in memory.
    pub fn start_holding(
        plan: Arc<Plan>,
        opts: PrefetchOptions,
    ) -> std::io::Result<(Running, std::sync::mpsc::Receiver<()>)> {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let warm = Arc::new(AtomicBool::new(false));
        let w2 = warm.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        // Before the thread: grown while this process may still run no other one.
        prepare_process();
        let handle = std::thread::Builder::new()
            .name("warmstart-prefetch".into())
            .spawn(move || {
                // Set before the workers start, which inherit it. A launch is mostly one busy
                // thread; prefetch threads woken by completed reads on its CPU preempt it.
                // Measured on the demo (docs/measurements.md): off its CPU, the app's off-CPU
                // time fell by 4-5 ms; on its CPU it rose by 13 ms.
                if let Some(p) = &opts.placement {
                    sys::set_affinity(0, &p.prefetcher);
                } else if let Some(cpu) = opts.avoid_cpu {
                    sys::keep_off_cpu(cpu);
                }
                prefetch_watching(
                    &plan,
                    &opts,
                    &s2,
                    &|| {
                        if let Ok(t) = tx.lock() {
                            let _ = t.send(());
                        }
                    },
                    &w2,
                )
            })?;
        Ok((Running { stop, warm, handle }, rx))
    }

    /// The plan's first data were already in memory: a warm launch, where the prefetch has
    /// (next to) nothing to do beside the application.
    pub fn is_warm(&self) -> bool {
        self.warm.load(Ordering::Relaxed)
    }

    /// The whole plan has been issued.
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }

    /// Stop issuing new requests (in-flight ones complete) and return the report.
    pub fn stop(self) -> PrefetchReport {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Wait for the whole plan.
    pub fn join(self) -> PrefetchReport {
        self.handle.join().unwrap_or_default()
    }
}

/// The bytes one worker has asked for and not yet seen arrive. readahead(2) returns as soon
/// as its requests are queued, so without a bound the workers push the whole plan into the
/// device queue at once, and every read the application itself has to make (a directory
/// block, a page the plan does not hold) waits behind megabytes of prefetch. A worker over
/// its budget first waits for its oldest range to arrive: a one-byte pread of the range's
/// last page sleeps on that page's lock until its I/O completes, and reads nothing more.
const WINDOW_MAX_RANGES: usize = 64;

struct Window {
    budget: u64,
    pending: VecDeque<(Arc<OwnedFd>, u64, u64)>,
    bytes: u64,
}

impl Window {
    /// `budget` 0 means unbounded.
    fn new(budget: u64) -> Window {
        Window {
            budget,
            pending: VecDeque::new(),
            bytes: 0,
        }
    }

    /// A range `[end - len, end)` of `fd` was just handed to readahead.
    fn issued(&mut self, fd: Arc<OwnedFd>, end: u64, len: u64) {
        if self.budget == 0 || len == 0 {
            return;
        }
        self.pending.push_back((fd, end, len));
        self.bytes += len;
    }

    /// Wait until `len` more bytes fit (a range larger than the budget still goes alone).
    /// Each pending range holds its file open, so their number is bounded too: a plan of
    /// many small files must not run the process out of descriptors.
    fn make_room(&mut self, len: u64) {
        while self.bytes > 0
            && (self.bytes + len > self.budget || self.pending.len() >= WINDOW_MAX_RANGES)
        {
            let Some((fd, end, l)) = self.pending.pop_front() else {
                break;
            };
            let mut b = [0u8; 1];
            // An error (the file shrank, an I/O error) only ends the wait early.
            let _ = nix::sys::uio::pread(fd.as_fd(), &mut b, end.saturating_sub(1) as i64);
            self.bytes -= l;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{BlockDevice, Provenance};

    fn plan_for(files: Vec<FileId>, entries: Vec<Entry>) -> Plan {
        Plan {
            app: "t".into(),
            created_unix: 0,
            strategy: "trace".into(),
            page_size: 4096,
            files,
            devices: vec![],
            entries,
            provenance: Provenance::default(),
            hold_entries: 0,
            segments: vec![],
            t_exp_ms: None,
            notes: vec![],
        }
    }

    /// `max_rate`'s schedule: n bytes are due n / rate seconds after the start.
    #[test]
    fn pacing_spreads_bytes_over_time_at_the_rate() {
        assert_eq!(due(0, 1000), std::time::Duration::ZERO);
        assert_eq!(due(500, 1000), std::time::Duration::from_millis(500));
        assert_eq!(due(3 << 20, 1 << 20), std::time::Duration::from_secs(3));
    }

    /// A plan whose data are all in memory is seen as a warm launch, one whose data are not
    /// is not.
    #[test]
    fn a_plan_already_in_memory_is_a_warm_launch() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![1u8; 6 << 20]).unwrap();
        let id = FileId::of(&p).unwrap();
        let plan = plan_for(
            vec![id],
            (0..6)
                .map(|i| Entry::Data {
                    file: 0,
                    offset: i << 20,
                    len: 1 << 20,
                })
                .collect(),
        );
        let opts = PrefetchOptions {
            jobs: 1,
            ..PrefetchOptions::default()
        };
        // Just written: every page cached.
        let warm = AtomicBool::new(false);
        let r = prefetch_watching(&plan, &opts, &AtomicBool::new(false), &|| {}, &warm);
        assert!(warm.load(Ordering::Relaxed), "all in memory: warm");
        assert!(r.stopped_warm && !r.stopped_early, "{r:?}");
        assert!(
            r.requests < 6,
            "the rest of a warm plan is not issued: {r:?}"
        );
        // Evicted (clean after the sync): cold.
        crate::testutil::evict(&p);
        if sys::cached_pages_of(&p).unwrap() > 0 {
            return crate::testutil::skip("this filesystem does not evict on POSIX_FADV_DONTNEED");
        }
        let warm = AtomicBool::new(false);
        prefetch_watching(&plan, &opts, &AtomicBool::new(false), &|| {}, &warm);
        assert!(!warm.load(Ordering::Relaxed), "nothing in memory: cold");
    }

    /// A plan of a 4 MiB "lib" (its head) and an 8 MiB "own" file in `dir`, in 1 MiB
    /// pieces, both just written (in memory): "own"'s path and the plan.
    fn lib_and_own(dir: &Path) -> (std::path::PathBuf, Plan) {
        let (lib, own) = (dir.join("lib"), dir.join("own"));
        std::fs::write(&lib, vec![1u8; 4 << 20]).unwrap();
        std::fs::write(&own, vec![2u8; 8 << 20]).unwrap();
        let files = vec![FileId::of(&lib).unwrap(), FileId::of(&own).unwrap()];
        let piece = |file: u32, i: u64| Entry::Data {
            file,
            offset: i << 20,
            len: 1 << 20,
        };
        let entries = (0..4)
            .map(|i| piece(0, i))
            .chain((0..8).map(|i| piece(1, i)));
        (own, plan_for(files, entries.collect()))
    }

    /// A warm head (the shared libraries a desktop keeps in memory) over a cold rest (the
    /// app's own files): the application gets its CPUs back, but the prefetch goes on.
    #[test]
    fn a_warm_head_over_a_cold_plan_is_still_prefetched() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let (own, plan) = lib_and_own(dir.path());
        nix::unistd::sync();
        crate::testutil::evict(&own);
        if sys::cached_pages_of(&own).unwrap() > 0 {
            return crate::testutil::skip("this filesystem does not evict on POSIX_FADV_DONTNEED");
        }
        let opts = PrefetchOptions {
            jobs: 1,
            ..PrefetchOptions::default()
        };
        let warm = AtomicBool::new(false);
        let r = prefetch_watching(&plan, &opts, &AtomicBool::new(false), &|| {}, &warm);
        assert!(warm.load(Ordering::Relaxed), "the head was in memory");
        assert!(!r.stopped_warm, "{r:?}");
        assert_eq!(r.data_bytes, 12 << 20, "{r:?}");
    }

    /// The front's look before a launch (`sample_residency`) agrees with the prefetch's own: a
    /// plan all in memory is warm; a warm head over the app's own files evicted is not, nor
    /// is a plan whose files are gone.
    #[test]
    fn a_plan_looks_warm_only_when_its_spread_is_in_memory() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let (own, plan) = lib_and_own(dir.path());
        // Just written: every page cached.
        assert!(sample_residency(&plan.look()).warm());
        nix::unistd::sync();
        crate::testutil::evict(&own);
        if sys::cached_pages_of(&own).unwrap() > 0 {
            return crate::testutil::skip("this filesystem does not evict on POSIX_FADV_DONTNEED");
        }
        assert!(
            !sample_residency(&plan.look()).warm(),
            "the app's own files are not in memory"
        );
        // Read back whole: warm again.
        std::fs::read(&own).unwrap();
        assert!(sample_residency(&plan.look()).warm());
        // Replaced by another file of the same name: not the planned file, so not warm.
        std::fs::remove_file(&own).unwrap();
        std::fs::write(&own, vec![2u8; 9 << 20]).unwrap();
        assert!(
            !sample_residency(&plan.look()).warm(),
            "a changed file is not the plan's"
        );
        assert!(
            !sample_residency(&plan_for(vec![], vec![]).look()).warm(),
            "nothing to look at"
        );
    }

    /// A launch by a user brings in only files that user may read (issue #30): another
    /// user's 0600 file at a planned path is not even opened.
    #[test]
    fn reads_for_a_user_only_what_the_user_may_read() {
        if !nix::unistd::geteuid().is_root() {
            crate::testutil::skip("needs root to give a file to another user");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let (mine, theirs) = (dir.path().join("mine"), dir.path().join("theirs"));
        for p in [&mine, &theirs] {
            std::fs::write(p, vec![3u8; 4 * 4096]).unwrap();
        }
        let other = nix::unistd::Uid::from_raw(65533);
        nix::unistd::chown(
            &theirs,
            Some(other),
            Some(nix::unistd::Gid::from_raw(65533)),
        )
        .unwrap();
        std::fs::set_permissions(&theirs, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let files: Vec<FileId> = [&mine, &theirs]
            .iter()
            .map(|p| FileId::of(p).unwrap())
            .collect();
        let data = |file| Entry::Data {
            file,
            offset: 0,
            len: 4 * 4096,
        };
        let plan = plan_for(files, vec![data(0), data(1)]);
        let user = sys::Credentials {
            uid: 1000,
            gid: 1000,
            groups: vec![],
        };
        for (reader, stale, bytes) in [(Some(user), 1, 4 * 4096), (None, 0, 8 * 4096)] {
            let opts = PrefetchOptions {
                reader,
                ..Default::default()
            };
            let r = prefetch(&plan, &opts, &AtomicBool::new(false));
            assert_eq!((r.files_stale, r.data_bytes), (stale, bytes), "{r:?}");
        }
    }

    #[test]
    fn replays_data_and_counts_stale_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        let c = dir.path().join("c");
        for p in [&a, &b, &c] {
            std::fs::write(p, vec![3u8; 3 * 4096]).unwrap();
        }
        let ids: Vec<FileId> = [&a, &b, &c]
            .iter()
            .map(|p| FileId::of(p).unwrap())
            .collect();
        let mut dir_id = FileId::of(dir.path()).unwrap();
        dir_id.mtime_ns = 0; // directories are not checked for mtime
                             // b changes (stale), c disappears (missing).
        std::fs::write(&b, vec![4u8; 5 * 4096]).unwrap();
        std::fs::remove_file(&c).unwrap();
        let mut files = ids.clone();
        files.push(dir_id);
        let plan = plan_for(
            files,
            vec![
                Entry::ListDir { file: 3 },
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 8192,
                },
                Entry::Data {
                    file: 1,
                    offset: 0,
                    len: 4096,
                },
                Entry::Data {
                    file: 2,
                    offset: 0,
                    len: 4096,
                },
                Entry::Data {
                    file: 0,
                    offset: 8192,
                    len: 4096,
                },
                Entry::Lookup { file: 0 },
            ],
        );
        plan.validate().unwrap();
        let r = prefetch(
            &plan,
            &PrefetchOptions {
                jobs: 2,
                mem_cap: None,
                meta_jobs: 1,
                window: DEFAULT_WINDOW,
                avoid_cpu: None,
                placement: None,
                inode_readahead_off: None,
                max_rate: None,
                reader: None,
            },
            &AtomicBool::new(false),
        );
        assert_eq!(r.files_stale, 1);
        assert_eq!(r.files_missing, 1);
        assert_eq!(r.data_bytes, 3 * 4096);
        assert_eq!(r.entries_skipped, 2);
        assert_eq!(r.listings, 1);
        assert_eq!(r.lookups, 1);
        assert_eq!(r.metadata_mode, MetadataMode::Filesystem);
        assert!(!r.stopped_early);
        assert_eq!(r.errors, 0);
    }

    #[test]
    fn groups_inodes_by_inode_table_block() {
        assert_eq!(
            (itable_block(1), itable_block(16), itable_block(17)),
            (0, 0, 1)
        );
        assert_eq!(itable_block(0), 0);
        let dir = tempfile::tempdir().unwrap();
        let anchor = FileId::of(dir.path()).unwrap();
        let dev = anchor.dev;
        let plan = plan_for(
            vec![anchor],
            vec![
                Entry::Inode { file: 0, ino: 40 },
                Entry::ListDir { file: 0 },
                Entry::Inode { file: 0, ino: 33 },
            ],
        );
        let got = planned_blocks(&plan);
        // Inodes 33 and 40 share block 2; the anchor's own inode is planned too.
        assert_eq!(
            got,
            HashSet::from([(dev, 2), (dev, itable_block(plan.files[0].ino))])
        );
    }

    #[test]
    fn a_listing_stats_the_names_beside_planned_inodes() {
        use std::os::unix::fs::DirEntryExt;
        let dir = tempfile::tempdir().unwrap();
        for i in 0..40 {
            std::fs::write(dir.path().join(format!("m{i}.py")), b"x").unwrap();
        }
        // Inode numbers as the listing gives them (what the prefetcher groups by).
        let inos: Vec<(String, u64)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.ino()))
            .collect();
        let dir_id = FileId::of(dir.path()).unwrap();
        let dir_block = itable_block(dir_id.ino);
        // Two names in inode-table blocks of their own (40 inodes fill at least three), so
        // each case below stats names the others do not.
        let mut elsewhere = inos.iter().filter(|(_, i)| itable_block(*i) != dir_block);
        let (handle_name, by_handle) = elsewhere.next().unwrap().clone();
        let opened_name = elsewhere
            .find(|(_, i)| itable_block(*i) != itable_block(by_handle))
            .map(|(n, _)| n.clone())
            .unwrap_or(handle_name);
        // Whatever the filesystem numbered them: the names whose inode shares a block with a
        // planned inode (the listed directory's own is always one).
        let beside = |blocks: &[u64]| {
            inos.iter()
                .filter(|(_, i)| blocks.contains(&itable_block(*i)))
                .count() as u64
        };
        let listed = |files: Vec<FileId>, entries: Vec<Entry>| {
            let plan = plan_for(files, entries);
            prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(false))
        };
        // Only the listing: the names beside the directory's own inode.
        let r = listed(vec![dir_id.clone()], vec![Entry::ListDir { file: 0 }]);
        assert_eq!(
            (r.listings, r.names_stated),
            (1, beside(&[dir_block])),
            "{r:?}"
        );
        // With an inode by handle: its block's names too.
        let r = listed(
            vec![dir_id.clone()],
            vec![
                Entry::ListDir { file: 0 },
                Entry::Inode {
                    file: 0,
                    ino: by_handle,
                },
            ],
        );
        let expected = beside(&[dir_block, itable_block(by_handle)]);
        assert!(expected >= 1);
        assert_eq!(r.names_stated, expected, "{r:?}");
        // With a file the plan opens: its block's names too.
        let opened = FileId::of(&dir.path().join(&opened_name)).unwrap();
        let r = listed(
            vec![dir_id, opened.clone()],
            vec![
                Entry::ListDir { file: 0 },
                Entry::Data {
                    file: 1,
                    offset: 0,
                    len: 1,
                },
            ],
        );
        assert_eq!(
            r.names_stated,
            beside(&[dir_block, itable_block(opened.ino)]),
            "{r:?}"
        );
    }

    #[test]
    fn loads_inodes_by_handle_through_the_anchor_directory() {
        if !nix::unistd::geteuid().is_root() {
            return crate::testutil::skip("open_by_handle_at needs CAP_DAC_READ_SEARCH (root)");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("statted");
        std::fs::write(&f, b"x").unwrap();
        let ino = FileId::of(&f).unwrap().ino;
        let anchor = FileId::of(dir.path()).unwrap();
        let fs = nix::sys::statfs::statfs(dir.path()).unwrap();
        if fs.filesystem_type() != nix::sys::statfs::EXT4_SUPER_MAGIC {
            return crate::testutil::skip(
                "inode handles are checked on ext4 (the temp dir is not)",
            );
        }
        let plan = plan_for(
            vec![anchor],
            vec![
                Entry::Inode { file: 0, ino },
                // Never allocated on a test filesystem this small: gone, not an error.
                Entry::Inode {
                    file: 0,
                    ino: u32::MAX as u64 - 1,
                },
            ],
        );
        let r = prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(false));
        assert_eq!((r.inodes, r.inodes_stale, r.errors), (1, 1, 0), "{r:?}");
        // Beyond 32 bits a handle cannot name the inode: refused without a syscall.
        let fd = open(dir.path(), open_flags(), Mode::empty()).unwrap();
        let e = sys::load_inode(fd.as_fd(), 1 << 40).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOVERFLOW));
    }

    #[test]
    fn the_executable_ranges_of_the_plan_head_in_plan_order() {
        let id = |ino| FileId {
            ino,
            ..FileId::of(Path::new("/")).unwrap()
        };
        let data = |file, offset| Entry::Data {
            file,
            offset,
            len: 4096,
        };
        let mut entries = vec![
            data(0, 8192),
            data(1, 0),
            Entry::Lookup { file: 1 },
            data(0, 0),
        ];
        // Past the head: not the launcher's.
        entries.extend((0..crate::plan::LOOK_HEAD as u64).map(|i| data(1, i * 4096)));
        entries.push(data(0, 4096 * 9));
        let plan = plan_for(vec![id(5), id(6)], entries);
        let dev = plan.files[0].dev;
        let look = plan.look();
        assert_eq!(look.head_of(dev, 5), vec![(8192, 4096), (0, 4096)]);
        assert!(look.head_of(dev, 7).is_empty());
    }

    #[test]
    fn refuses_symlinks_and_respects_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, vec![1u8; 4096]).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut id = FileId::of(&real).unwrap();
        id.path = link; // the plan names a path that is now a symlink
        let plan = plan_for(
            vec![id.clone()],
            vec![Entry::Data {
                file: 0,
                offset: 0,
                len: 4096,
            }],
        );
        let r = prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(false));
        assert_eq!((r.files_stale, r.data_bytes), (1, 0));

        let ok = FileId::of(&real).unwrap();
        let plan = plan_for(
            vec![ok],
            vec![
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 2048,
                },
                Entry::Data {
                    file: 0,
                    offset: 2048,
                    len: 2048,
                },
            ],
        );
        let r = prefetch(
            &plan,
            &PrefetchOptions {
                jobs: 1,
                mem_cap: Some(3000),
                meta_jobs: 0,
                window: 0,
                avoid_cpu: None,
                placement: None,
                inode_readahead_off: None,
                max_rate: None,
                reader: None,
            },
            &AtomicBool::new(false),
        );
        assert_eq!(r.data_bytes, 2048);
        assert_eq!(r.capped_bytes, 2048);
    }

    #[test]
    fn holder_signals_once_the_head_is_resident() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![1u8; 64 * 1024]).unwrap();
        let mut plan = plan_for(
            vec![FileId::of(&a).unwrap()],
            vec![
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 32768,
                },
                Entry::Data {
                    file: 0,
                    offset: 32768,
                    len: 32768,
                },
            ],
        );
        plan.hold_entries = 1;
        let signalled = AtomicUsize::new(0);
        let r = prefetch_holding(
            &plan,
            &PrefetchOptions::default(),
            &AtomicBool::new(false),
            &|| {
                signalled.fetch_add(1, Ordering::SeqCst);
            },
        );
        assert_eq!(signalled.load(Ordering::SeqCst), 1);
        assert_eq!(r.data_bytes, 65536);
        let (run, rx) = Running::start_holding(Arc::new(plan), PrefetchOptions::default()).unwrap();
        rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
        run.join();
    }

    #[test]
    fn holds_inode_readahead_off_until_the_plan_is_issued() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("data");
        std::fs::write(&f, vec![7u8; 64 << 10]).unwrap();
        let plan = plan_for(
            vec![FileId::of(&f).unwrap()],
            vec![Entry::Data {
                file: 0,
                offset: 0,
                len: 64 << 10,
            }],
        );
        // A stand-in for /sys/fs/ext4 and /run/warmstart.
        let sys = tempfile::tempdir().unwrap();
        let knob = sys.path().join("vdx").join("inode_readahead_blks");
        std::fs::create_dir_all(knob.parent().unwrap()).unwrap();
        std::fs::write(&knob, "32\n").unwrap();
        let run = tempfile::tempdir().unwrap();
        let paths = KnobPaths {
            sys_ext4: sys.path().to_path_buf(),
            run_dir: run.path().to_path_buf(),
        };
        let value = || std::fs::read_to_string(&knob).unwrap().trim().to_string();
        let with = |hold: KnobHold| {
            let opts = PrefetchOptions {
                inode_readahead_off: Some(hold),
                ..Default::default()
            };
            prefetch(&plan, &opts, &AtomicBool::new(false))
        };
        // Taken by the prefetch itself, given back when it is done.
        let r = with(KnobHold::Take(paths.clone()));
        assert!(r.inode_readahead_off, "{r:?}");
        assert_eq!(value(), "32");
        // Taken by the launcher before: off until the prefetch is done, then given back.
        let g = knobs::KnobGuard::inode_readahead_off(&paths.sys_ext4, &paths.run_dir).unwrap();
        assert_eq!(value(), "0");
        let r = with(KnobHold::held(g));
        assert!(r.inode_readahead_off, "{r:?}");
        assert_eq!(value(), "32");
        // Not asked for: left alone.
        let r = prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(false));
        assert!(!r.inode_readahead_off);
    }

    #[test]
    fn stop_flag_stops_early() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![1u8; 4096]).unwrap();
        let plan = plan_for(
            vec![FileId::of(&a).unwrap()],
            vec![Entry::Data {
                file: 0,
                offset: 0,
                len: 4096,
            }],
        );
        let r = prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(true));
        assert!(r.stopped_early);
        assert_eq!(r.entries_done, 0);
    }

    #[test]
    fn unopenable_device_falls_back_to_filesystem_metadata() {
        let mut plan = plan_for(
            vec![],
            vec![Entry::Meta {
                device: 0,
                offset: 0,
                len: 4096,
            }],
        );
        plan.devices.push(BlockDevice {
            path: "/nonexistent/dev".into(),
            dev: Dev {
                major: 254,
                minor: 0,
            },
        });
        let r = prefetch(&plan, &PrefetchOptions::default(), &AtomicBool::new(false));
        assert_eq!(r.metadata_mode, MetadataMode::Filesystem);
        assert_eq!(r.metadata_bytes, 0);
    }

    #[test]
    fn window_waits_for_the_oldest_ranges_once_over_budget() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![7u8; 64 * 1024]).unwrap();
        let fd = Arc::new(OwnedFd::from(std::fs::File::open(&a).unwrap()));
        let mut w = Window::new(16 * 1024);
        for i in 0..4u64 {
            w.make_room(8192);
            assert!(w.bytes + 8192 <= 16 * 1024 || w.bytes == 0);
            w.issued(fd.clone(), (i + 1) * 8192, 8192);
        }
        assert_eq!(w.bytes, 16 * 1024);
        assert_eq!(w.pending.len(), 2);
        // A range larger than the whole budget drains everything, then goes alone.
        w.make_room(64 * 1024);
        assert_eq!((w.bytes, w.pending.len()), (0, 0));
        // Many small ranges: bounded by count as well.
        let mut small = Window::new(1 << 30);
        for i in 0..200u64 {
            small.make_room(4096);
            small.issued(fd.clone(), (i % 16 + 1) * 4096, 4096);
            assert!(small.pending.len() <= WINDOW_MAX_RANGES);
        }
        let mut unbounded = Window::new(0);
        unbounded.issued(fd, 8192, 8192);
        unbounded.make_room(1 << 30);
        assert_eq!((unbounded.bytes, unbounded.pending.len()), (0, 0));
    }

    #[test]
    fn exec_order_puts_bss_pages_then_data_segments_then_entry_page() {
        use object::read::elf::{FileHeader, ProgramHeader};
        // This test's own executable: every Rust binary has a data segment with a bss.
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let t = exec_order(&exe[..EXE_HEAD.min(exe.len())]);
        let h = object::elf::FileHeader64::<object::Endianness>::parse(&exe[..]).unwrap();
        let e = h.endian().unwrap();
        let ph = h.program_headers(e, &exe[..]).unwrap();
        let load = |f: object::elf::ProgramFlags| {
            ph.iter()
                .find(|p| p.p_type(e) == object::elf::PT_LOAD && p.p_flags(e) & f == f)
                .unwrap()
        };
        let loads: Vec<_> = ph
            .iter()
            .filter(|p| p.p_type(e) == object::elf::PT_LOAD && p.p_filesz(e) > 0)
            .collect();
        let pos = |r: (u64, u64)| t.iter().position(|&x| x == r);
        // Every bss page comes before every writable segment.
        let last_bss = loads
            .iter()
            .filter(|p| p.p_memsz(e) > p.p_filesz(e))
            .map(|p| pos(((p.p_offset(e) + p.p_filesz(e) - 1) / 4096 * 4096, 4096)))
            .max()
            .flatten()
            .expect("a bss page");
        let writable: Vec<_> = loads
            .iter()
            .filter(|p| p.p_flags(e) & object::elf::PF_W == object::elf::PF_W)
            .map(|p| pos((p.p_offset(e), p.p_filesz(e))).expect("each writable segment"))
            .collect();
        assert!(writable.iter().all(|&i| i > last_bss), "{t:?}");
        // The entry page comes last.
        let text = load(object::elf::PF_X);
        let entry = text.p_offset(e) + h.e_entry(e) - text.p_vaddr(e);
        assert_eq!(t.last(), Some(&(entry / 4096 * 4096, 4096)), "{t:?}");
        for &(off, len) in &t {
            assert!(
                off + len <= exe.len() as u64 + 4096,
                "{off} beyond the file"
            );
        }
        // Not ELF, truncated ELF, empty: nothing, and no panic.
        assert!(exec_order(b"#!/bin/sh\necho hi\n").is_empty());
        assert!(exec_order(&exe[..40]).is_empty());
        assert!(exec_order(&[]).is_empty());
    }

    #[test]
    fn warm_executable_follows_the_symlink_and_reads_what_exec_touches() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("exe");
        // A real ELF executable: this test binary.
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
        let f = std::fs::File::open(&exe).unwrap();
        f.sync_all().unwrap();
        let st = f.metadata().unwrap();
        let (size, pages) = (st.len(), st.len().div_ceil(4096));
        let mut head = vec![0u8; EXE_HEAD];
        f.read_exact_at(&mut head, 0).unwrap();
        let ranges = exec_order(&head);
        assert!(!ranges.is_empty());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&exe, &link).unwrap();
        // Evict the (clean, synced) pages, so that what is cached afterwards was read.
        let _ = nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        let cached = |off: u64, len: u64| sys::cachestat(f.as_fd(), off, len).unwrap().cached_pages;
        if cached(0, 0) == pages {
            eprintln!("skipped: this filesystem keeps evicted pages (tmpfs?)");
            return;
        }
        assert!(!warm_executable(&link, None), "evicted: not a warm launch");
        let chunk = readahead_chunk(Dev::from_user(std::os::unix::fs::MetadataExt::dev(&st)));
        let mut asked = 0;
        for (off, len) in ranges {
            let end = (off + len.min(chunk)).min(size);
            let want = end.div_ceil(4096) - off / 4096;
            assert_eq!(
                cached(off, end - off),
                want,
                "range @{off} +{len} requested"
            );
            asked += want;
        }
        // Only those (and the header page): the rest of the binary is left to the plan.
        assert!(
            cached(0, 0) <= asked + 32 && asked + 32 < pages / 2,
            "{} of {pages} pages cached after asking for {asked}",
            cached(0, 0)
        );
        // Asked for once, the next launch finds them in memory.
        assert!(warm_executable(&link, None), "read: a warm launch");
        // Not a regular file: nothing happens, nothing fails.
        assert!(!warm_executable(dir.path(), None));
        assert!(!warm_executable(&dir.path().join("missing"), None));
    }

    /// A 1 MiB file in `dir`, synced and evicted from the page cache, and a count of its
    /// cached pages; None (the test skips) on a filesystem that keeps evicted pages.
    fn evicted_file(dir: &Path) -> Option<(std::path::PathBuf, impl Fn() -> u64)> {
        let path = dir.join("file");
        std::fs::write(&path, vec![b'#'; 1 << 20]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        let _ = nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        let cached = move || sys::cachestat(f.as_fd(), 0, 0).unwrap().cached_pages;
        if cached() != 0 {
            eprintln!("skipped: this filesystem keeps evicted pages (tmpfs?)");
            return None;
        }
        Some((path, cached))
    }

    /// The header read opens no readahead window: a file that is no ELF executable gets
    /// nothing but its first page (the kernel's readahead for a read at offset 0 would have
    /// taken four, and marked one to take more when touched).
    #[test]
    fn warm_executable_reads_only_the_header_page_of_a_non_elf_file() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, cached)) = evicted_file(dir.path()) else {
            return;
        };
        assert!(
            !warm_executable(&path, None),
            "its header page was not in memory"
        );
        assert_eq!(cached(), 1);
        // A script has only its header page to look at: in memory now, a warm launch.
        assert!(warm_executable(&path, None), "its header page in memory");
    }

    /// Waiting for a planned range reads only that range, even at the start of the file.
    #[test]
    fn waiting_for_a_range_reads_only_that_range() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, cached)) = evicted_file(dir.path()) else {
            return;
        };
        let plan = range_plan(&path, 0, 4096);
        assert_eq!(wait_resident(&plan), 1);
        assert_eq!(cached(), 1);
    }

    /// A plan of one data range of the file at `path`.
    fn range_plan(path: &Path, offset: u64, len: u64) -> Plan {
        plan_for(
            vec![FileId::of(path).unwrap()],
            vec![Entry::Data {
                file: 0,
                offset,
                len,
            }],
        )
    }

    /// A planned range whose middle is not in memory (a readahead that ended early) is read
    /// whole by the wait, not only at its ends; and only that range.
    #[test]
    fn waiting_for_a_range_reads_the_pages_missing_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        let Some((path, cached)) = evicted_file(dir.path()) else {
            return;
        };
        let plan = range_plan(&path, 8 * 4096, 64 * 4096);
        // The ends only: what a request cut short leaves.
        let f = std::fs::File::open(&path).unwrap();
        let mut b = [0u8; 1];
        let _ = nix::sys::uio::pread(f.as_fd(), &mut b, 8 * 4096);
        let _ = nix::sys::uio::pread(f.as_fd(), &mut b, 71 * 4096);
        let _ = nix::fcntl::posix_fadvise(
            &f,
            9 * 4096,
            62 * 4096,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        );
        let inside = || {
            sys::cachestat(f.as_fd(), 8 * 4096, 64 * 4096)
                .unwrap()
                .cached_pages
        };
        if inside() == 64 {
            eprintln!("skipped: this filesystem keeps evicted pages");
            return;
        }
        assert_eq!(wait_resident(&plan), 1);
        assert_eq!(inside(), 64);
        // Nothing far outside it (the kernel's readahead of a missing page may add a little).
        assert!(cached() <= 64 + 32, "{} pages cached", cached());
    }
}
