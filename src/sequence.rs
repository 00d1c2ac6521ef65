//! Stage 2, sequence: turn a traced launch into its launch sequence, the ordered list of first
//! accesses (file data ranges and block-device metadata ranges) with their time since exec;
//! and extract the common sequence of N runs (FAST 4.1.2: keep only what every run read, in the
//! order of the first run).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::sys::{Dev, Exit, Usage};
use crate::trace::{EndReason, EventKind, TracedLaunch};

/// What an access touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Target {
    /// Data of a file, by (filesystem device, inode).
    File { dev: Dev, ino: u64 },
    /// Filesystem metadata: pages of a block device, offset = byte offset on the disk.
    Meta { bdev: Dev },
}

/// One first access: a byte range of a target, in page units.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    pub target: Target,
    /// First page index.
    pub page: u64,
    /// Number of pages.
    pub pages: u64,
    /// Nanoseconds since exec.
    pub t: u64,
    /// Read from disk (a page-cache insert), as opposed to found cached (fault, lookup).
    pub from_disk: bool,
    /// The launch used these pages (a fault, fault-around or read() touched them). Pages the
    /// kernel's readahead brought in but nobody touched are `used: false`. Metadata pages
    /// have no access events and always count as used.
    pub used: bool,
}

/// ext4 read an inode (from the inode table) at `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InodeLoad {
    pub t: u64,
    pub dev: Dev,
    pub ino: u64,
}

/// A file or directory the launch opened, with the path fanotify gave for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    pub t: u64,
    pub dev: Dev,
    pub ino: u64,
    pub is_dir: bool,
    #[serde(with = "crate::codec::path_bytes")]
    pub path: PathBuf,
    /// Opened by the traced tree (not by an unrelated process during the recording).
    pub by_tree: bool,
}

/// A block request with its issue and completion time (ns since exec).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockReq {
    pub issue: u64,
    pub complete: Option<u64>,
    pub dev: Dev,
    pub sector: u64,
    pub sectors: u32,
    pub metadata: bool,
}

/// One learning run, kept in the store so strategies can re-plan without re-learning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawRun {
    pub page_size: u64,
    pub accesses: Vec<Access>,
    pub inode_loads: Vec<InodeLoad>,
    pub opens: Vec<Opened>,
    pub execs: Vec<String>,
    pub block: Vec<BlockReq>,
    /// Synchronous readaheads (the app waited on a miss).
    pub sync_readaheads: u32,
    pub duration_ns: u64,
    pub ended: EndReason,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub usage: Usage,
    /// Wall-clock start of the run (ms since the epoch): files modified after it were
    /// written by the launch itself.
    pub started_unix_ms: u64,
}

impl RawRun {
    pub fn exit(&self) -> Exit {
        match (self.exit_code, self.exit_signal) {
            (_, Some(s)) => Exit::Signal(s),
            (Some(c), _) => Exit::Code(c),
            _ => Exit::Code(0),
        }
    }

    /// The traced launch's duration: until the tree exited, or until its last file access
    /// when tracing stopped on idle or timeout (the idle tail is not part of the launch).
    pub fn launch_ms(&self) -> f64 {
        let end = match self.ended {
            EndReason::Exited => self.duration_ns,
            _ => self
                .accesses
                .iter()
                .map(|a| a.t)
                .max()
                .unwrap_or(self.duration_ns),
        };
        end as f64 / 1e6
    }

    /// A warm launch shows the pages it touched, while a cold launch of the same files also
    /// reads around them, and a plan keeps an unused stretch of at most `max_pages`
    /// (`schedule::KEEP_UNUSED_GAP_PAGES`) beside the pages used: a file's head or tail
    /// short of its first or last used page, the part of a longer hole next to a used range.
    /// The page cache still holds what the app's earlier (cold) launch read around, so for a
    /// mostly warm run this adds, per file it accessed, each stretch of at most `max_pages`
    /// pages in memory but not accessed that borders an accessed range and ends at a page
    /// not in memory or at the file's end (a longer one is the kind a plan drops), as
    /// unused accesses at the time of the range it borders. Returns the pages added. The
    /// daemon learns from warm launches; with this its plans hold more of what `record`'s
    /// do (docs/measurements.md, 2026-11-27, seventh entry).
    pub fn fill_resident(&mut self, max_pages: u64, residency: &dyn Residency) -> u64 {
        if !self.mostly_warm() {
            return 0;
        }
        let mut paths: HashMap<(Dev, u64), &std::path::Path> = HashMap::new();
        for o in self.opens.iter().filter(|o| !o.is_dir) {
            paths.entry((o.dev, o.ino)).or_insert(&o.path);
        }
        let mut by_file: HashMap<(Dev, u64), Vec<Span>> = HashMap::new();
        for a in &self.accesses {
            if let (Target::File { dev, ino }, true) = (a.target, a.pages > 0) {
                by_file.entry((dev, ino)).or_default().push(Span {
                    first: a.page,
                    end: a.page + a.pages,
                    t_first: a.t,
                    t_end: a.t,
                });
            }
        }
        let mut fills = Vec::new();
        for ((dev, ino), spans) in by_file {
            let Some(res) = paths
                .get(&(dev, ino))
                .and_then(|p| residency.resident(p, dev, ino))
            else {
                continue;
            };
            let target = Target::File { dev, ino };
            fills.extend(
                resident_fills(merge_spans(spans), &res, max_pages)
                    .into_iter()
                    .map(|(page, pages, t)| Access {
                        target,
                        page,
                        pages,
                        t,
                        from_disk: false,
                        used: false,
                    }),
            );
        }
        let added = fills.iter().map(|a| a.pages).sum();
        self.accesses.extend(fills);
        // Stable: a fill follows the accesses of its instant.
        self.accesses.sort_by_key(|a| a.t);
        added
    }

    /// A cold launch that lists a directory often stats entries of it that it never opens
    /// (python stats each module's source and opens only its bytecode), and each stat of an
    /// inode not in memory waits on its inode-table block; a warm launch shows none of these
    /// reads (its inodes are cached), so a plan learned from warm launches lacked them
    /// (python-imports: 7 inodes by handle in the daemon's plan against 136 in `record`'s).
    /// For a mostly warm run this adds, at the time the launch opened each directory (by its
    /// tree), an inode load of each entry whose inode-table block (`INODES_PER_BLOCK`
    /// consecutive inode numbers) no inode the launch opened or loaded shares: at most
    /// `max_per_dir` entries looked at per directory and `max_total` loads in all. Read at
    /// learning time, off the launch. Returns the loads added.
    pub fn add_listed_inodes(&mut self, max_per_dir: usize, max_total: usize) -> usize {
        use std::os::unix::fs::DirEntryExt;
        if !self.mostly_warm() {
            return 0;
        }
        let block = |dev: Dev, ino: u64| (dev, ino.saturating_sub(1) / INODES_PER_BLOCK);
        let mut covered: HashSet<(Dev, u64)> = self
            .opens
            .iter()
            .map(|o| block(o.dev, o.ino))
            .chain(self.inode_loads.iter().map(|l| block(l.dev, l.ino)))
            .collect();
        let mut listed: HashSet<(Dev, u64)> = HashSet::new();
        let mut added = Vec::new();
        for o in self.opens.iter().filter(|o| o.is_dir && o.by_tree) {
            if added.len() >= max_total || !listed.insert((o.dev, o.ino)) {
                continue;
            }
            let Ok(dir) = std::fs::read_dir(&o.path) else {
                continue;
            };
            for e in dir.take(max_per_dir).flatten() {
                if added.len() >= max_total {
                    break;
                }
                if covered.insert(block(o.dev, e.ino())) {
                    added.push(InodeLoad {
                        t: o.t,
                        dev: o.dev,
                        ino: e.ino(),
                    });
                }
            }
        }
        let n = added.len();
        self.inode_loads.extend(added);
        self.inode_loads.sort_by_key(|l| l.t);
        n
    }

    /// The launch found most of what it accessed already cached (a warm launch): it read
    /// less than half of its pages from disk.
    pub fn mostly_warm(&self) -> bool {
        let all: u64 = self.accesses.iter().map(|a| a.pages).sum();
        let disk: u64 = self
            .accesses
            .iter()
            .filter(|a| a.from_disk)
            .map(|a| a.pages)
            .sum();
        disk * 2 < all
    }

    /// What a mostly warm run shows less of than a cold one, added to it: the pages around
    /// its own still in memory (`fill_resident`, stretches of at most `max_gap_pages`) and
    /// the inodes of the directories it listed (`add_listed_inodes`, under `LISTED_PER_DIR`
    /// and `LISTED_LOADS`). One step for every learner from warm launches (the daemon,
    /// `record --no-drop-caches`), so they learn alike. Returns (pages, inode loads) added.
    pub fn complete_warm(&mut self, max_gap_pages: u64, residency: &dyn Residency) -> (u64, usize) {
        let pages = self.fill_resident(max_gap_pages, residency);
        let loads = self.add_listed_inodes(LISTED_PER_DIR, LISTED_LOADS);
        (pages, loads)
    }

    /// Bytes first-accessed from disk.
    pub fn disk_bytes(&self) -> u64 {
        self.accesses
            .iter()
            .filter(|a| a.from_disk)
            .map(|a| a.pages * self.page_size)
            .sum()
    }
}

/// Consecutive inode numbers that share an inode-table block: ext4's default 256-byte inodes
/// in 4 KiB blocks. Where a filesystem packs more per block, two loads may share one.
pub const INODES_PER_BLOCK: u64 = 16;

/// Caps of `RawRun::add_listed_inodes`: entries looked at per directory, loads per run. The
/// bench daemon's stored runs added 0-330 loads per app under them (python-imports 330,
/// gimp 227; docs/measurements.md, 2026-11-28, sixth entry): the caps bound a launch that
/// lists huge directories, not the suite's.
const LISTED_PER_DIR: usize = 1024;
const LISTED_LOADS: usize = 4096;

/// Pages `[first, end)` of a file a run accessed, with the times of the accesses at each end.
#[derive(Clone, Copy)]
struct Span {
    first: u64,
    end: u64,
    t_first: u64,
    t_end: u64,
}

/// A file's accessed spans in page order, overlapping or touching ones joined.
fn merge_spans(mut spans: Vec<Span>) -> Vec<Span> {
    spans.sort_unstable_by_key(|s| (s.first, s.end));
    let mut merged: Vec<Span> = Vec::with_capacity(spans.len());
    for r in spans {
        match merged.last_mut() {
            Some(m) if r.first <= m.end => {
                if r.end > m.end {
                    (m.end, m.t_end) = (r.end, r.t_end);
                }
            }
            _ => merged.push(r),
        }
    }
    merged
}

/// The stretches `(first page, pages, time)` of at most `max_pages` pages in memory (`res`,
/// one flag per page of the file) that border a span of `merged` and end at a page not in
/// memory, the file's edge or the next span, each at the time of the span it borders.
fn resident_fills(merged: Vec<Span>, res: &[bool], max_pages: u64) -> Vec<(u64, u64, u64)> {
    let n = res.len() as u64;
    // The length of the run of pages in memory from `from` towards `to` (exclusive: down
    // from `from - 1`, or up from `from`), 0 if it is longer than `max_pages`.
    let stretch = |from: u64, to: u64, down: bool| -> u64 {
        let room = if down { from - to } else { to - from };
        let mut len = 0;
        while len < room {
            let p = if down { from - len - 1 } else { from + len };
            if !res.get(p as usize).copied().unwrap_or(false) {
                break;
            }
            len += 1;
            if len > max_pages {
                return 0;
            }
        }
        len
    };
    let mut out = Vec::new();
    let (Some(first), Some(last)) = (merged.first(), merged.last()) else {
        return out;
    };
    let head = stretch(first.first, 0, true);
    if head > 0 {
        out.push((first.first - head, head, first.t_first));
    }
    for w in merged.windows(2) {
        let (a, b) = (w[0], w[1]);
        let left = stretch(a.end, b.first.min(n).max(a.end), false);
        if left > 0 {
            out.push((a.end, left, a.t_end));
        }
        if a.end + left < b.first {
            let right = stretch(b.first, a.end + left, true);
            if right > 0 {
                out.push((b.first - right, right, b.t_first));
            }
        }
    }
    if last.end < n {
        let tail = stretch(last.end, n, false);
        if tail > 0 {
            out.push((last.end, tail, last.t_end));
        }
    }
    out
}

/// Single-event ranges longer than this are clipped (a read() past EOF reports the request,
/// not the file); resolution clips to the real size later.
const MAX_RANGE_PAGES: u64 = 1 << 18;

/// Pages read from disk but first used this much later are placed at their use, not at their
/// read: the kernel's read-around brings megabytes of a binary in at its first fault (8 MB
/// windows here), and replaying all of it first queues the launch's early metadata and small
/// files behind pages it needs only later. Use times are rounded down to this step so pages
/// used together still form one range.
pub const USE_STEP_NS: u64 = 4_000_000;

/// Builds first-access ranges, coalescing consecutive pages of the same target.
#[derive(Default)]
struct Builder {
    seen: HashSet<(Target, u64)>,
    /// First use of each used page (ns since exec).
    used: HashMap<(Target, u64), u64>,
    out: Vec<Access>,
}

impl Builder {
    /// Pages the launch touched at `t` (faults, fault-around, read lookups).
    fn mark_used(&mut self, target: Target, first: u64, last: u64, t: u64) {
        let last = last.min(first.saturating_add(MAX_RANGE_PAGES - 1));
        for page in first..=last {
            let u = self.used.entry((target, page)).or_insert(t);
            *u = (*u).min(t);
        }
    }

    /// The accesses in the order the launch needed them, each split where the pages change
    /// between used and unused. A page read from disk takes the time of its first use when
    /// that came more than `USE_STEP_NS` after the read; an unused page follows the page
    /// before it in its range.
    fn finish(self) -> Vec<Access> {
        let mut pages: Vec<Access> = Vec::new();
        for a in self.out {
            let mut carried = a.t;
            for page in a.page..a.page + a.pages {
                let first_use = match a.target {
                    Target::Meta { .. } => Some(a.t),
                    Target::File { .. } => self.used.get(&(a.target, page)).copied(),
                };
                let t = match first_use {
                    Some(u) if a.from_disk && u >= a.t.saturating_add(USE_STEP_NS) => {
                        u / USE_STEP_NS * USE_STEP_NS
                    }
                    Some(_) => a.t,
                    None => carried,
                };
                carried = t;
                pages.push(Access {
                    page,
                    pages: 1,
                    t,
                    used: first_use.is_some(),
                    ..a
                });
            }
        }
        pages.sort_by_key(|a| a.t);
        let mut out: Vec<Access> = Vec::with_capacity(pages.len());
        for p in pages {
            match out.last_mut() {
                Some(l)
                    if l.target == p.target
                        && l.from_disk == p.from_disk
                        && l.used == p.used
                        && l.page + l.pages == p.page
                        && l.t == p.t =>
                {
                    l.pages += 1
                }
                _ => out.push(p),
            }
        }
        out
    }

    fn touch(&mut self, target: Target, first: u64, last: u64, t: u64, from_disk: bool) {
        let last = last.min(first.saturating_add(MAX_RANGE_PAGES - 1));
        for page in first..=last {
            if !self.seen.insert((target, page)) {
                continue;
            }
            match self.out.last_mut() {
                Some(a)
                    if a.target == target
                        && a.from_disk == from_disk
                        && a.page + a.pages == page =>
                {
                    a.pages += 1
                }
                _ => self.out.push(Access {
                    target,
                    page,
                    pages: 1,
                    t,
                    from_disk,
                    used: true,
                }),
            }
        }
    }
}

/// Classifies a page-cache (dev, ino) as a block device (metadata) or a file.
pub trait DeviceMap {
    /// If (dev, ino) is the page cache of a block device, that device.
    fn block_device(&self, dev: Dev, ino: u64) -> Option<Dev>;
}

/// The real machine: block-device inodes live on a pseudo filesystem (major 0) and their
/// inode number is the disk's kernel dev_t, which /sys/dev/block lists.
pub struct SysBlockDevices;

impl DeviceMap for SysBlockDevices {
    fn block_device(&self, dev: Dev, ino: u64) -> Option<Dev> {
        if dev.major != 0 || ino > u32::MAX as u64 {
            return None;
        }
        let bdev = Dev::from_kernel(ino);
        std::path::Path::new(&format!("/sys/dev/block/{bdev}"))
            .exists()
            .then_some(bdev)
    }
}

/// Which pages of a launch's files are in the page cache now (`RawRun::fill_resident`).
pub trait Residency {
    /// One flag per page of the file at `path`, if that is still the regular file
    /// (`dev`, `ino`).
    fn resident(&self, path: &std::path::Path, dev: Dev, ino: u64) -> Option<Vec<bool>>;
}

/// The real page cache, asked through `open_planned` (no link followed, nothing but a
/// regular file opened, for reading).
pub struct SysResidency;

impl Residency for SysResidency {
    fn resident(&self, path: &std::path::Path, dev: Dev, ino: u64) -> Option<Vec<bool>> {
        use nix::sys::stat::SFlag;
        use std::os::fd::AsFd;
        let same = |st: &nix::sys::stat::FileStat| {
            SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
                && Dev::from_user(st.st_dev) == dev
                && st.st_ino == ino
        };
        let (fd, st) = crate::sys::open_planned_if(path, nix::fcntl::OFlag::empty(), same).ok()?;
        crate::sys::resident_pages(fd.as_fd(), st.st_size as u64).ok()
    }
}

impl RawRun {
    /// This run without the files under `prefixes` (directory paths ending in '/', or any
    /// path prefix), except `keep` (the app's executable and script): their openings are
    /// dropped, so their paths are not stored and their pages cannot resolve into a plan.
    pub fn without_paths(mut self, prefixes: &[String], keep: &[&std::path::Path]) -> RawRun {
        if prefixes.is_empty() {
            return self;
        }
        let excluded = |p: &std::path::Path| {
            let s = p.to_string_lossy();
            !keep.contains(&p) && prefixes.iter().any(|x| s.starts_with(x.as_str()))
        };
        let dropped: HashSet<(Dev, u64)> = self
            .opens
            .iter()
            .filter(|o| excluded(&o.path))
            .map(|o| (o.dev, o.ino))
            .collect();
        self.opens.retain(|o| !dropped.contains(&(o.dev, o.ino)));
        // Their pages go too: known only by inode, they would never resolve anyway.
        self.accesses.retain(|a| match a.target {
            Target::File { dev, ino } => !dropped.contains(&(dev, ino)),
            Target::Meta { .. } => true,
        });
        self
    }

    pub fn from_trace(t: &TracedLaunch, page_size: u64, devices: &dyn DeviceMap) -> RawRun {
        let exec = t.exec_ts();
        let rel = |ts: u64| ts.saturating_sub(exec);
        // Before its exec the traced process is still the launcher (warmstart's gate, a
        // shell): its reads belong to the launch only for files the launch goes on to use
        // (the exec itself reads the new binary and its loader first).
        let file_of = |k: &EventKind| match k {
            EventKind::PageCacheAdd { dev, ino, .. }
            | EventKind::MapPages { dev, ino, .. }
            | EventKind::GetPages { dev, ino, .. }
            | EventKind::Fault { dev, ino, .. }
            | EventKind::InodeLoad { dev, ino } => Some((*dev, *ino)),
            _ => None,
        };
        let after_exec: HashSet<(Dev, u64)> = t
            .events
            .iter()
            .filter(|e| e.ts >= exec)
            .filter_map(|e| file_of(&e.kind))
            .collect();
        let target = |dev: Dev, ino: u64| match devices.block_device(dev, ino) {
            Some(bdev) => Target::Meta { bdev },
            None => Target::File { dev, ino },
        };
        // A kernel without the filemap access events (before ~6.12, or masked) shows only
        // the pages a launch read from disk: on a cold launch each was read because the launch
        // (or readahead for it) wanted it, so each insert counts as used.
        let inserts_only = !t.events.iter().any(|e| e.kind.used_pages().is_some());
        let mut b = Builder::default();
        let mut inode_loads = Vec::new();
        let mut execs = Vec::new();
        let mut tree: HashSet<i32> = HashSet::from([t.root_pid]);
        let mut sync_readaheads = 0;
        for e in &t.events {
            if e.ts < exec
                && file_of(&e.kind).is_some_and(|f| {
                    !after_exec.contains(&f) && devices.block_device(f.0, f.1).is_none()
                })
            {
                continue;
            }
            match &e.kind {
                EventKind::PageCacheAdd {
                    dev,
                    ino,
                    index,
                    order,
                } => {
                    let n = 1u64 << (*order).min(20);
                    let tg = target(*dev, *ino);
                    b.touch(tg, *index, index + n - 1, rel(e.ts), true);
                    if inserts_only {
                        b.mark_used(tg, *index, index + n - 1, rel(e.ts));
                    }
                }
                EventKind::MapPages { .. }
                | EventKind::GetPages { .. }
                | EventKind::Fault { .. } => {
                    if let Some((dev, ino, first, last)) = e.kind.used_pages() {
                        let tg = target(dev, ino);
                        b.touch(tg, first, last, rel(e.ts), false);
                        b.mark_used(tg, first, last, rel(e.ts));
                    }
                }
                EventKind::SyncReadahead { .. } => sync_readaheads += 1,
                EventKind::InodeLoad { dev, ino } => inode_loads.push(InodeLoad {
                    t: rel(e.ts),
                    dev: *dev,
                    ino: *ino,
                }),
                EventKind::ExtentLoad { .. } => {}
                EventKind::Exec { filename, pid } => {
                    tree.insert(*pid);
                    execs.push(filename.clone())
                }
                EventKind::Fork { child, .. } => {
                    tree.insert(*child);
                }
                EventKind::Exit { .. }
                | EventKind::BlockIssue(_)
                | EventKind::BlockComplete(_)
                | EventKind::Switch { .. }
                | EventKind::Waking { .. }
                | EventKind::Stack(_) => {}
            }
        }
        // Pair block issues with their completions by (device, sector), first in first out.
        let mut block: Vec<BlockReq> = Vec::new();
        let mut pending: HashMap<(Dev, u64), Vec<usize>> = HashMap::new();
        for e in &t.block {
            match &e.kind {
                EventKind::BlockIssue(rq) if rq.is_read() => {
                    pending
                        .entry((rq.dev, rq.sector))
                        .or_default()
                        .push(block.len());
                    block.push(BlockReq {
                        issue: rel(e.ts),
                        complete: None,
                        dev: rq.dev,
                        sector: rq.sector,
                        sectors: rq.sectors,
                        metadata: rq.is_metadata(),
                    });
                }
                EventKind::BlockComplete(rq) if rq.is_read() => {
                    if let Some(q) = pending.get_mut(&(rq.dev, rq.sector)) {
                        if !q.is_empty() {
                            let i = q.remove(0);
                            block[i].complete = Some(rel(e.ts));
                        }
                    }
                }
                _ => {}
            }
        }
        let opens = t
            .opens
            .iter()
            .map(|o| Opened {
                t: rel(o.t),
                dev: o.dev,
                ino: o.ino,
                is_dir: o.is_dir,
                path: o.path.clone(),
                by_tree: tree.contains(&o.pid),
            })
            .collect();
        let (exit_code, exit_signal) = match t.exit {
            Exit::Code(c) => (Some(c), None),
            Exit::Signal(s) => (None, Some(s)),
        };
        RawRun {
            page_size,
            accesses: b.finish(),
            inode_loads,
            opens,
            execs,
            block,
            sync_readaheads,
            duration_ns: t.end_ts.saturating_sub(exec),
            ended: t.ended,
            exit_code,
            exit_signal,
            usage: t.usage,
            started_unix_ms: {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                now.saturating_sub(
                    crate::sys::monotonic_ns().saturating_sub(t.start_ts) / 1_000_000,
                )
            },
        }
    }
}

/// The holes of at most `max_pages` between two accessed ranges of a file, as unused
/// accesses at the time of the range before each (see `LaunchSequence::fill_gaps`).
fn gap_fills(accesses: &[Access], max_pages: u64) -> Vec<Access> {
    // Per file: (first page, end page, time of the access reaching that end).
    let mut by_file: HashMap<Target, Vec<(u64, u64, u64)>> = HashMap::new();
    for a in accesses {
        if matches!(a.target, Target::File { .. }) && a.pages > 0 {
            by_file
                .entry(a.target)
                .or_default()
                .push((a.page, a.page + a.pages, a.t));
        }
    }
    let mut fills = Vec::new();
    for (target, mut ranges) in by_file {
        ranges.sort_unstable();
        let mut cur = ranges[0];
        for &(first, end, t) in &ranges[1..] {
            if first <= cur.1 {
                if end > cur.1 {
                    cur = (cur.0, end, t);
                }
                continue;
            }
            let hole = first - cur.1;
            if hole <= max_pages {
                fills.push(Access {
                    target,
                    page: cur.1,
                    pages: hole,
                    t: cur.2,
                    from_disk: false,
                    used: false,
                });
            }
            cur = (first, end, t);
        }
    }
    fills
}

/// The launch sequence of an app: what every learning run read, in the first run's order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LaunchSequence {
    pub page_size: u64,
    pub accesses: Vec<Access>,
    pub inode_loads: Vec<InodeLoad>,
    /// Directories the launch listed (opened as directories), in the first run's order.
    pub dir_opens: Vec<Opened>,
    /// Pages the first run read that some other run did not (dropped as noise).
    pub dropped_pages: u64,
}

impl LaunchSequence {
    pub fn pages(&self) -> u64 {
        self.accesses.iter().map(|a| a.pages).sum()
    }

    /// A warm run (nothing read from disk) shows only the pages its launch used, and warm
    /// runs of one launch differ in them (the kernel maps large cached folios around a
    /// fault without an event for the pages beyond the fault-around window). A cold run
    /// also shows what the readahead read between the used ranges, and a plan keeps such
    /// an unused stretch when it is short (`schedule::KEEP_UNUSED_GAP_PAGES`) so that
    /// requests stay large. Learned with warm runs, a plan lacked those stretches: 13% of
    /// a cold recording's bytes on inkscape, in holes of up to 32 pages (docs/measurements.md,
    /// 2026-11-26, fifth entry). This adds the holes of at most `max_pages` between two
    /// accessed ranges of a file as unused accesses, at the time of the range before each.
    pub fn fill_gaps(&mut self, max_pages: u64) {
        let fills = gap_fills(&self.accesses, max_pages);
        if fills.is_empty() {
            return;
        }
        self.accesses.extend(fills);
        // Stable: a fill follows the accesses of its instant.
        self.accesses.sort_by_key(|a| a.t);
    }
}

/// The pages these accesses touched.
fn pages_of<'a>(accesses: impl Iterator<Item = &'a Access>) -> HashSet<(Target, u64)> {
    accesses
        .flat_map(|a| (a.page..a.page + a.pages).map(move |p| (a.target, p)))
        .collect()
}

/// The pages any of the runs used (a page counts as used if any run used it).
fn used_pages(runs: &[RawRun]) -> HashSet<(Target, u64)> {
    pages_of(
        runs.iter()
            .flat_map(|r| r.accesses.iter().filter(|a| a.used)),
    )
}

/// What a learner from warm launches keeps (the daemon): every page any run accessed of a
/// file at least `support` runs accessed, and the metadata pages at least `support` runs
/// read. A warm launch shows less than a cold one of the same files (a cold launch is
/// slower, so more of the app's code runs before it is ready: inkscape's cold launch used
/// 1428 pages of libgtk, its warm launches 490, all of the rest in its last 40 ms), and
/// FAST's intersection of a cold and a warm run (4.1.2; `extract`) dropped those pages;
/// FAST needed it to leave out other processes' reads, which the traced tree's own do not
/// include. An app launched two ways (GIMP headless and with its window, LibreOffice
/// converting and editing) keeps the files of each way once two launches have shown it,
/// while a file a single launch read (its document) stays out. A page takes its place and
/// time from the first run that has it.
///
/// Metadata (directory and inode-table blocks, inode loads) shows only in what a launch read
/// from disk: a warm or prefetched launch shows the part that was not in memory, a different
/// part each time, so a mostly warm run is no evidence against it: a block or inode load
/// needs as many runs as read at least half of their pages from disk (at least one, at most
/// `support`), whichever runs they are. With `support` runs, the bench daemon's plans,
/// learned from warm launches and prefetched cold checks, kept 7 of python's 55 inodes by
/// handle and 5 of java's 10 directory listings (docs/measurements.md, 2026-11-28, fourth
/// entry).
pub fn extract_supported(runs: &[RawRun], support: usize) -> LaunchSequence {
    let support = support.clamp(1, runs.len().max(1));
    if runs.is_empty() {
        return LaunchSequence::default();
    }
    let cold_runs = runs.iter().filter(|r| !r.mostly_warm()).count();
    let meta_support = support.min(cold_runs.max(1));
    let mut files: HashMap<Target, usize> = HashMap::new();
    let mut meta: HashMap<(Target, u64), usize> = HashMap::new();
    for r in runs {
        let pages = pages_of(r.accesses.iter());
        let mut in_run: HashSet<Target> = HashSet::new();
        for (t, p) in pages {
            match t {
                Target::File { .. } => {
                    in_run.insert(t);
                }
                Target::Meta { .. } => *meta.entry((t, p)).or_default() += 1,
            }
        }
        for t in in_run {
            *files.entry(t).or_default() += 1;
        }
    }
    let kept = |k: &(Target, u64)| match k.0 {
        Target::File { .. } => files.get(&k.0).is_some_and(|n| *n >= support),
        Target::Meta { .. } => meta.get(k).is_some_and(|n| *n >= meta_support),
    };
    let used_anywhere = used_pages(runs);
    let mut b = Builder::default();
    for r in runs {
        for a in &r.accesses {
            for p in a.page..a.page + a.pages {
                if kept(&(a.target, p)) {
                    // `touch` keeps the first run's place for a page seen before.
                    b.touch(a.target, p, p, a.t, a.from_disk);
                    if used_anywhere.contains(&(a.target, p)) {
                        b.mark_used(a.target, p, p, a.t);
                    }
                }
            }
        }
    }
    let all: HashSet<(Target, u64)> = runs
        .iter()
        .flat_map(|r| pages_of(r.accesses.iter()))
        .collect();
    let dropped = all.iter().filter(|k| !kept(k)).count() as u64;
    let mut n_inode: HashMap<(Dev, u64), usize> = HashMap::new();
    let mut n_dir: HashMap<(Dev, u64), usize> = HashMap::new();
    for r in runs {
        let inodes: HashSet<(Dev, u64)> = r.inode_loads.iter().map(|l| (l.dev, l.ino)).collect();
        for k in inodes {
            *n_inode.entry(k).or_default() += 1;
        }
        let dirs: HashSet<(Dev, u64)> = r
            .opens
            .iter()
            .filter(|o| o.is_dir && o.by_tree)
            .map(|o| (o.dev, o.ino))
            .collect();
        for k in dirs {
            *n_dir.entry(k).or_default() += 1;
        }
    }
    let (mut seen_i, mut seen_d) = (HashSet::new(), HashSet::new());
    let mut inode_loads = Vec::new();
    let mut dir_opens = Vec::new();
    for r in runs {
        inode_loads.extend(
            r.inode_loads.iter().copied().filter(|l| {
                n_inode[&(l.dev, l.ino)] >= meta_support && seen_i.insert((l.dev, l.ino))
            }),
        );
        dir_opens.extend(
            r.opens
                .iter()
                .filter(|o| {
                    o.is_dir
                        && o.by_tree
                        && n_dir[&(o.dev, o.ino)] >= support
                        && seen_d.insert((o.dev, o.ino))
                })
                .cloned(),
        );
    }
    LaunchSequence {
        page_size: runs[0].page_size,
        accesses: b.finish(),
        inode_loads,
        dir_opens,
        dropped_pages: dropped,
    }
}

/// FAST 4.1.2: keep what every run accessed, in the order (and timing) of the first run.
pub fn extract(runs: &[RawRun]) -> LaunchSequence {
    let Some(first) = runs.first() else {
        return LaunchSequence::default();
    };
    let others: Vec<HashSet<(Target, u64)>> = runs[1..]
        .iter()
        .map(|r| pages_of(r.accesses.iter()))
        .collect();
    let used_anywhere = used_pages(runs);
    let mut b = Builder::default();
    let mut dropped = 0;
    for a in &first.accesses {
        for p in a.page..a.page + a.pages {
            if others.iter().all(|s| s.contains(&(a.target, p))) {
                b.touch(a.target, p, p, a.t, a.from_disk);
                if used_anywhere.contains(&(a.target, p)) {
                    b.mark_used(a.target, p, p, a.t);
                }
            } else {
                dropped += 1;
            }
        }
    }
    let in_all_inodes = |dev: Dev, ino: u64| {
        runs[1..]
            .iter()
            .all(|r| r.inode_loads.iter().any(|l| l.dev == dev && l.ino == ino))
    };
    let mut seen = HashSet::new();
    let inode_loads = first
        .inode_loads
        .iter()
        .filter(|l| seen.insert((l.dev, l.ino)) && in_all_inodes(l.dev, l.ino))
        .copied()
        .collect();
    let in_all_dirs = |o: &Opened| {
        runs[1..].iter().all(|r| {
            r.opens
                .iter()
                .any(|x| x.is_dir && x.by_tree && x.dev == o.dev && x.ino == o.ino)
        })
    };
    let mut seen = HashSet::new();
    let dir_opens = first
        .opens
        .iter()
        .filter(|o| o.is_dir && o.by_tree && seen.insert((o.dev, o.ino)) && in_all_dirs(o))
        .cloned()
        .collect();
    LaunchSequence {
        page_size: first.page_size,
        accesses: b.finish(),
        inode_loads,
        dir_opens,
        dropped_pages: dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Dev = Dev {
        major: 254,
        minor: 0,
    };

    fn f(ino: u64) -> Target {
        Target::File { dev: D, ino }
    }

    fn acc(target: Target, page: u64, pages: u64, t: u64) -> Access {
        Access {
            target,
            page,
            pages,
            t,
            from_disk: true,
            used: true,
        }
    }

    fn run(accesses: Vec<Access>) -> RawRun {
        RawRun {
            page_size: 4096,
            accesses,
            inode_loads: vec![],
            opens: vec![],
            execs: vec![],
            block: vec![],
            sync_readaheads: 0,
            duration_ns: 0,
            ended: EndReason::Exited,
            exit_code: Some(0),
            exit_signal: None,
            usage: Usage::default(),
            started_unix_ms: 0,
        }
    }

    /// Files under an excluded directory leave the run, paths and pages; the executable
    /// kept by name stays, and so do files the run knows only by inode.
    #[test]
    fn excluded_paths_leave_a_run() {
        let opened = |ino: u64, p: &str| Opened {
            t: 0,
            dev: D,
            ino,
            is_dir: false,
            path: p.into(),
            by_tree: true,
        };
        let mut r = run(vec![
            acc(f(1), 0, 1, 0),
            acc(f(2), 0, 1, 1),
            acc(f(3), 0, 1, 2),
            acc(f(4), 0, 1, 3),
        ]);
        r.opens = vec![
            opened(1, "/usr/lib/libx.so"),
            opened(2, "/home/u/secret.txt"),
            opened(3, "/home/u/bin/tool"),
        ];
        let r = r.without_paths(
            &["/home/".into()],
            &[std::path::Path::new("/home/u/bin/tool")],
        );
        let paths: Vec<_> = r
            .opens
            .iter()
            .map(|o| o.path.display().to_string())
            .collect();
        assert_eq!(paths, ["/usr/lib/libx.so", "/home/u/bin/tool"]);
        let inos: Vec<u64> = r
            .accesses
            .iter()
            .map(|a| match a.target {
                Target::File { ino, .. } => ino,
                Target::Meta { .. } => 0,
            })
            .collect();
        assert_eq!(inos, [1, 3, 4]);
        // Nothing excluded: unchanged.
        let r2 = r.clone().without_paths(&[], &[]);
        assert_eq!(r2.opens.len(), 2);
    }

    #[test]
    fn builder_coalesces_and_dedups() {
        let mut b = Builder::default();
        b.touch(f(1), 0, 3, 10, true);
        b.touch(f(1), 2, 5, 20, true); // 2,3 seen; 4,5 extend the run
        b.touch(f(2), 0, 0, 30, true);
        b.touch(f(1), 6, 6, 40, true); // not adjacent in order: a new entry
        b.touch(f(1), 0, 6, 50, false); // all seen
        assert_eq!(
            b.out,
            vec![
                acc(f(1), 0, 6, 10),
                acc(f(2), 0, 1, 30),
                acc(f(1), 6, 1, 40)
            ]
        );
    }

    #[test]
    fn short_holes_between_accessed_ranges_are_filled() {
        const MS: u64 = 1_000_000;
        // Accessed: pages 0-15 at 1 ms, 40-55 at 2 ms (a 20-page hole after the overlap
        // below), 200-215 at 3 ms (a 144-page hole, longer than the limit), 16-19 at 4 ms.
        let mut seq = LaunchSequence {
            page_size: 4096,
            accesses: vec![
                acc(f(1), 0, 16, MS),
                acc(f(1), 40, 16, 2 * MS),
                acc(f(1), 200, 16, 3 * MS),
                acc(f(1), 16, 4, 4 * MS),
                acc(f(2), 0, 1, 5 * MS),
            ],
            ..LaunchSequence::default()
        };
        seq.fill_gaps(32);
        let fills: Vec<(u64, u64, u64)> = seq
            .accesses
            .iter()
            .filter(|a| !a.used)
            .map(|a| (a.page, a.pages, a.t))
            .collect();
        // The hole 20..40 follows the range reaching page 19 (the access at 4 ms).
        assert_eq!(fills, [(20, 20, 4 * MS)]);
        assert!(seq.accesses.windows(2).all(|w| w[0].t <= w[1].t));
    }

    /// A fake page cache: per inode, the resident pages of a file of `len` pages.
    struct Cached(HashMap<u64, (u64, Vec<(u64, u64)>)>);

    impl Residency for Cached {
        fn resident(&self, _: &std::path::Path, _: Dev, ino: u64) -> Option<Vec<bool>> {
            let (len, ranges) = self.0.get(&ino)?;
            Some(
                (0..*len)
                    .map(|p| ranges.iter().any(|r| (r.0..r.1).contains(&p)))
                    .collect(),
            )
        }
    }

    /// A warm run that listed a directory loads the inodes of its entries, one per
    /// inode-table block not already shared by an inode the launch opened, within the caps;
    /// a cold run shows its own loads and gets none.
    #[test]
    fn a_warm_run_loads_the_inodes_of_the_directories_it_listed() {
        use std::os::unix::fs::MetadataExt;
        use std::path::Path;
        // A directory of any machine, with entries in many inode-table blocks.
        let dir = Path::new("/usr/bin");
        let m = std::fs::metadata(dir).unwrap();
        let dev = Dev::from_user(m.dev());
        let warm = |a: Access| Access {
            from_disk: false,
            ..a
        };
        let mut r = run(vec![warm(acc(f(1), 0, 10, 0))]);
        let entries: HashSet<u64> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| std::os::unix::fs::DirEntryExt::ino(&e))
            .collect();
        let opened_ino = *entries.iter().next().unwrap();
        let open = |ino: u64, is_dir: bool, path: &Path| Opened {
            t: 7,
            dev,
            ino,
            is_dir,
            path: path.to_path_buf(),
            by_tree: true,
        };
        r.opens = vec![
            open(m.ino(), true, dir),
            open(opened_ino, false, &dir.join("x")),
        ];
        let mut cold = r.clone();
        let n = r.add_listed_inodes(100_000, 100_000);
        assert!(n > 0, "no inode of {} loaded", dir.display());
        assert_eq!(n, r.inode_loads.len());
        let block = |ino: u64| (ino - 1) / INODES_PER_BLOCK;
        let mut blocks = HashSet::new();
        for l in &r.inode_loads {
            assert!(entries.contains(&l.ino), "{} is no entry", l.ino);
            assert_eq!((l.t, l.dev), (7, dev));
            assert!(blocks.insert(block(l.ino)), "two loads of one block");
        }
        assert!(!blocks.contains(&block(opened_ino)) && !blocks.contains(&block(m.ino())));
        // Listed again (a second open of the same directory): nothing more.
        r.opens.push(open(m.ino(), true, dir));
        assert_eq!(r.add_listed_inodes(100_000, 100_000), 0);
        // Within its caps.
        let mut capped = cold.clone();
        assert_eq!(capped.add_listed_inodes(100_000, 1), 1);
        // A cold run read its inodes itself.
        cold.accesses[0].from_disk = true;
        assert_eq!(cold.add_listed_inodes(100_000, 100_000), 0);
    }

    #[test]
    fn a_warm_run_takes_the_short_stretches_in_memory_beside_its_pages() {
        const MS: u64 = 1_000_000;
        let warm = |a: Access| Access {
            from_disk: false,
            ..a
        };
        // File 1, 300 pages: accessed 10-19 at 1 ms, 100-109 at 2 ms, 250-259 at 3 ms.
        // In memory: 0-59 (the head 0-9 and 20-59, too long a stretch after 10-19),
        // 80-129 (80-99 before 100-109 is 20 pages; 110-129 after it), 240-299 (240-249
        // before 250-259; 260-299, 40 pages to the end, too long).
        // File 2, 50 pages: accessed 0-39 at 4 ms and 30-41 just after (one span to 41),
        // in memory whole: its tail 42-49, at the time of the access reaching 41.
        // File 3: accessed, in memory, but never opened (no path): nothing.
        let mut r = run(vec![
            warm(acc(f(1), 10, 10, MS)),
            warm(acc(f(1), 100, 10, 2 * MS)),
            warm(acc(f(1), 250, 10, 3 * MS)),
            warm(acc(f(2), 0, 40, 4 * MS)),
            warm(acc(f(2), 30, 12, 4 * MS + 1)),
            warm(acc(f(3), 0, 1, 5 * MS)),
        ]);
        let opened = |ino: u64| Opened {
            t: 0,
            dev: D,
            ino,
            is_dir: false,
            path: format!("/f{ino}").into(),
            by_tree: true,
        };
        r.opens = vec![opened(1), opened(2)];
        let cache = Cached(HashMap::from([
            (1, (300, vec![(0, 60), (80, 130), (240, 300)])),
            (2, (50, vec![(0, 50)])),
            (3, (10, vec![(0, 10)])),
        ]));
        let added = r.fill_resident(32, &cache);
        let mut fills: Vec<(u64, u64, u64, u64)> = r
            .accesses
            .iter()
            .filter(|a| !a.used)
            .map(|a| (ino_of(a.target), a.page, a.pages, a.t))
            .collect();
        fills.sort_unstable();
        assert_eq!(
            fills,
            [
                (1, 0, 10, MS),
                (1, 80, 20, 2 * MS),
                (1, 110, 20, 2 * MS),
                (1, 240, 10, 3 * MS),
                (2, 42, 8, 4 * MS + 1),
            ]
        );
        assert_eq!(added, 68);
        assert!(r.accesses.windows(2).all(|w| w[0].t <= w[1].t));
        // A cold run (read from disk) is left as it is.
        let mut cold = run(vec![acc(f(2), 0, 40, 4 * MS)]);
        cold.opens = vec![opened(2)];
        assert_eq!(cold.fill_resident(32, &cache), 0);
        assert_eq!(cold.accesses.len(), 1);
    }

    fn ino_of(t: Target) -> u64 {
        match t {
            Target::File { ino, .. } => ino,
            Target::Meta { .. } => u64::MAX,
        }
    }

    /// The real page cache: a file read whole is in memory page for page, one evicted is
    /// not, and a path that no longer names the inode gives nothing.
    #[test]
    fn the_page_cache_tells_a_files_pages_in_memory() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("data");
        std::fs::write(&p, vec![7u8; 5 * 4096 + 100]).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        let dev = Dev::from_user(m.dev());
        let _ = std::fs::read(&p).unwrap();
        let res = SysResidency.resident(&p, dev, m.ino()).unwrap();
        assert_eq!(res.len(), 6);
        assert!(res.iter().all(|r| *r), "{res:?}");
        assert!(SysResidency.resident(&p, dev, m.ino() + 1).is_none());
        let f = std::fs::File::open(&p).unwrap();
        f.sync_all().unwrap();
        nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .unwrap();
        let res = SysResidency.resident(&p, dev, m.ino()).unwrap();
        if res.iter().any(|r| *r) {
            // tmpfs keeps its pages (it has no disk to drop them to).
            println!(
                "{}: tmpfs keeps its pages; eviction not checked",
                p.display()
            );
        } else {
            assert_eq!(res.len(), 6);
        }
    }

    #[test]
    fn pages_read_early_but_used_late_move_to_their_use() {
        const MS: u64 = 1_000_000;
        let mut b = Builder::default();
        // A fault at 1 ms reads a window of 8 pages (read-around); pages 0-1 are used at
        // once, 2-3 at 50 ms (fault-around of one fault), 4 at 51 ms, 5 never, 6-7 at 2 ms.
        b.touch(f(1), 0, 7, MS, true);
        b.mark_used(f(1), 0, 1, MS);
        b.mark_used(f(1), 2, 3, 50 * MS);
        b.mark_used(f(1), 4, 4, 51 * MS);
        b.mark_used(f(1), 6, 7, 2 * MS);
        // Another file read and used at 10 ms.
        b.touch(f(2), 0, 1, 10 * MS, true);
        b.mark_used(f(2), 0, 1, 10 * MS);
        let step = |t: u64| t / USE_STEP_NS * USE_STEP_NS;
        let unused = |page, pages, t| Access {
            used: false,
            ..acc(f(1), page, pages, t)
        };
        assert_eq!(
            b.finish(),
            vec![
                // Used within USE_STEP_NS of the read: kept at the read.
                acc(f(1), 0, 2, MS),
                acc(f(1), 6, 2, MS),
                acc(f(2), 0, 2, 10 * MS),
                // Used later: at the use, rounded down so pages used together stay one range;
                // the unused page follows the page before it.
                acc(f(1), 2, 3, step(50 * MS)),
                unused(5, 1, step(50 * MS)),
            ]
        );
    }

    #[test]
    fn extraction_keeps_common_pages_in_first_run_order() {
        let r1 = run(vec![
            acc(f(1), 0, 4, 0),
            acc(f(9), 0, 2, 5), // noise only in run 1
            acc(f(2), 0, 2, 10),
        ]);
        // Run 2 read the same in another order, lacks page 3 of file 1, has its own noise.
        let r2 = run(vec![
            acc(f(2), 0, 2, 0),
            acc(f(1), 0, 3, 3),
            acc(f(7), 0, 8, 4),
        ]);
        let s = extract(&[r1.clone(), r2]);
        assert_eq!(s.accesses, vec![acc(f(1), 0, 3, 0), acc(f(2), 0, 2, 10)]);
        assert_eq!(s.dropped_pages, 3);
        // With one run the sequence is that run.
        let s1 = extract(std::slice::from_ref(&r1));
        assert_eq!(s1.accesses, r1.accesses);
        assert_eq!(extract(&[]).accesses, vec![]);
    }

    #[test]
    fn warm_extraction_keeps_every_page_of_the_files_every_run_read() {
        // A cold launch (more of libgtk's code runs before it is ready) and a warm one.
        let cold = run(vec![
            acc(f(1), 0, 4, 0),
            acc(f(9), 0, 2, 5), // read by the cold launch only
            acc(f(1), 100, 50, 8),
            acc(f(2), 0, 2, 10),
        ]);
        let warm = run(vec![acc(f(2), 0, 2, 0), acc(f(1), 0, 3, 3)]);
        let s = extract_supported(&[cold.clone(), warm.clone()], 2);
        assert_eq!(
            s.accesses,
            vec![
                acc(f(1), 0, 4, 0),
                acc(f(1), 100, 50, 8),
                acc(f(2), 0, 2, 10)
            ]
        );
        assert_eq!(s.dropped_pages, 2);
        // FAST's intersection loses the cold launch's pages of libgtk.
        assert_eq!(
            extract(&[cold, warm]).accesses,
            vec![acc(f(1), 0, 3, 0), acc(f(2), 0, 2, 10)]
        );
    }

    #[test]
    fn a_warm_run_does_not_outvote_a_cold_runs_metadata() {
        let meta = |page, t| acc(Target::Meta { bdev: D }, page, 1, t);
        let load = |ino, t| InodeLoad { t, dev: D, ino };
        let mut cold = run(vec![meta(7, 0), acc(f(1), 0, 4, 1), meta(9, 2)]);
        cold.inode_loads = vec![load(5, 0), load(6, 2)];
        // Warm: its pages were in memory, so it read neither metadata nor inodes.
        let warm = run(vec![Access {
            from_disk: false,
            ..acc(f(1), 0, 4, 1)
        }]);
        assert!(warm.mostly_warm() && !cold.mostly_warm());
        let s = extract_supported(&[cold.clone(), warm.clone()], 2);
        assert_eq!(s.accesses, vec![meta(7, 0), acc(f(1), 0, 4, 1), meta(9, 2)]);
        assert_eq!(s.inode_loads, vec![load(5, 0), load(6, 2)]);
        // Among cold runs the support holds: what one of two read stays out.
        let mut cold2 = run(vec![meta(7, 0), acc(f(1), 0, 4, 1)]);
        cold2.inode_loads = vec![load(5, 0)];
        let s = extract_supported(&[cold, warm, cold2], 2);
        assert_eq!(s.accesses, vec![meta(7, 0), acc(f(1), 0, 4, 1)]);
        assert_eq!(s.inode_loads, vec![load(5, 0)]);
    }

    #[test]
    fn supported_extraction_keeps_what_enough_runs_read() {
        // Two launches one way (files 1 and 2), two another way (files 1 and 3), and a
        // document each (9, 8, 7, 6) read once.
        let r1 = run(vec![
            acc(f(1), 0, 2, 0),
            acc(f(2), 0, 2, 5),
            acc(f(9), 0, 1, 6),
        ]);
        let r2 = run(vec![
            acc(f(1), 0, 2, 0),
            acc(f(2), 0, 2, 4),
            acc(f(8), 0, 1, 6),
        ]);
        let r3 = run(vec![
            acc(f(1), 0, 2, 0),
            acc(f(3), 0, 4, 2),
            acc(f(7), 0, 1, 6),
        ]);
        let r4 = run(vec![
            acc(f(3), 0, 4, 1),
            acc(f(1), 0, 2, 3),
            acc(f(6), 0, 1, 6),
        ]);
        // No more runs than the support: every run's pages, as `extract`.
        let two = [r1.clone(), r2.clone()];
        assert_eq!(extract_supported(&two, 2).accesses, extract(&two).accesses);
        // One way's single launch adds nothing yet...
        let three = [r1.clone(), r2.clone(), r3.clone()];
        assert_eq!(
            extract_supported(&three, 2).accesses,
            vec![acc(f(1), 0, 2, 0), acc(f(2), 0, 2, 5)]
        );
        // ... its second one does, at the time its first run read it; no document.
        let s = extract_supported(&[r1, r2, r3, r4], 2);
        assert_eq!(
            s.accesses,
            vec![acc(f(1), 0, 2, 0), acc(f(3), 0, 4, 2), acc(f(2), 0, 2, 5)]
        );
        assert_eq!(s.dropped_pages, 4);
    }

    #[test]
    fn extraction_of_inodes_and_dirs() {
        let mut r1 = run(vec![]);
        let mut r2 = run(vec![]);
        r1.inode_loads = vec![
            InodeLoad {
                t: 1,
                dev: D,
                ino: 5,
            },
            InodeLoad {
                t: 2,
                dev: D,
                ino: 6,
            },
        ];
        r2.inode_loads = vec![InodeLoad {
            t: 9,
            dev: D,
            ino: 5,
        }];
        let dir = |ino, by_tree| Opened {
            t: 0,
            dev: D,
            ino,
            is_dir: true,
            path: PathBuf::from("/x"),
            by_tree,
        };
        r1.opens = vec![dir(11, true), dir(12, true), dir(13, false)];
        r2.opens = vec![dir(11, true), dir(12, false)];
        let s = extract(&[r1, r2]);
        assert_eq!(
            s.inode_loads,
            vec![InodeLoad {
                t: 1,
                dev: D,
                ino: 5
            }]
        );
        assert_eq!(
            s.dir_opens.iter().map(|o| o.ino).collect::<Vec<_>>(),
            vec![11]
        );
    }

    /// A launch of pid 100 traced from 1000 to 9000 ns that exited cleanly.
    fn traced(events: Vec<crate::trace::Event>, block: Vec<crate::trace::Event>) -> TracedLaunch {
        TracedLaunch {
            root_pid: 100,
            start_ts: 1000,
            end_ts: 9000,
            events,
            block,
            opens: vec![],
            opens_overflowed: false,
            ended: EndReason::Exited,
            exit: Exit::Code(0),
            usage: Usage::default(),
            tracer_tids: vec![],
        }
    }

    struct FakeDevices;
    impl DeviceMap for FakeDevices {
        fn block_device(&self, dev: Dev, ino: u64) -> Option<Dev> {
            (dev.major == 0 && ino == 0x0fe0_0000).then_some(D)
        }
    }

    /// An event of the launch's thread 100.
    fn ev(ts: u64, kind: EventKind) -> crate::trace::Event {
        crate::trace::Event { ts, tid: 100, kind }
    }

    /// A fault on the first page of inode `ino` of device `D`, by thread 100.
    fn fault(ts: u64, ino: u64) -> crate::trace::Event {
        ev(
            ts,
            EventKind::Fault {
                dev: D,
                ino,
                index: 0,
            },
        )
    }

    #[test]
    fn reads_before_the_exec_count_only_for_files_the_launch_uses() {
        let t = traced(
            vec![
                fault(1010, 99), // the launcher's own binary, before the exec
                fault(1020, 5),  // the new binary, read by the exec itself
                ev(
                    1100,
                    EventKind::Exec {
                        pid: 100,
                        filename: "/bin/x".into(),
                    },
                ),
                fault(1200, 5),
            ],
            vec![],
        );
        let r = RawRun::from_trace(&t, 4096, &FakeDevices);
        let inos: Vec<Target> = r.accesses.iter().map(|a| a.target).collect();
        assert_eq!(inos, vec![f(5)], "{:?}", r.accesses);
    }

    /// The daemon attaches to a script front (bash running /usr/bin/R) after its exec; the
    /// interpreter then runs a helper and execs the program. What the script's process tree
    /// read before that second exec belongs to the launch, as it does when `record` traces
    /// the same command from its first exec (`trace::session::add_early`).
    #[test]
    fn an_attached_script_front_is_the_launch_not_its_launcher() {
        let mut t = traced(
            vec![
                fault(1010, 7), // the script's helper (sed), read by the interpreter's tree
                ev(
                    1100,
                    EventKind::Exec {
                        pid: 100,
                        filename: "/usr/lib/R/bin/exec/R".into(),
                    },
                ),
                fault(1200, 5), // the program
            ],
            vec![],
        );
        let early = [crate::trace::mapped::MappedFile {
            path: "/usr/bin/bash".into(),
            dev: D,
            ino: 3,
            runs: vec![(0, 1)],
        }];
        crate::trace::session::add_early(&mut t, &early, 1000, "/usr/bin/bash");
        assert_eq!(t.exec_ts(), 1000);
        let r = RawRun::from_trace(&t, 4096, &FakeDevices);
        let inos: Vec<Target> = r.accesses.iter().map(|a| a.target).collect();
        assert_eq!(inos, vec![f(3), f(7), f(5)], "{:?}", r.accesses);
        assert_eq!(r.execs, vec!["/usr/bin/bash", "/usr/lib/R/bin/exec/R"]);
    }

    #[test]
    fn from_trace_classifies_metadata_and_pairs_block_requests() {
        use crate::trace::{BlockRq, Event};
        let ev = |ts, kind| Event { ts, tid: 100, kind };
        let bdev_inode = Dev { major: 0, minor: 3 };
        let rq = |sector| BlockRq {
            dev: D,
            sector,
            sectors: 8,
            rwbs: "RM".into(),
        };
        let t = traced(
            vec![
                ev(
                    1100,
                    EventKind::Exec {
                        pid: 100,
                        filename: "/bin/x".into(),
                    },
                ),
                ev(
                    1200,
                    EventKind::PageCacheAdd {
                        dev: bdev_inode,
                        ino: 0x0fe0_0000,
                        index: 7,
                        order: 0,
                    },
                ),
                ev(
                    1300,
                    EventKind::PageCacheAdd {
                        dev: D,
                        ino: 42,
                        index: 0,
                        order: 2,
                    },
                ),
                ev(
                    1400,
                    EventKind::Fault {
                        dev: D,
                        ino: 42,
                        index: 2,
                    },
                ),
                ev(
                    1500,
                    EventKind::GetPages {
                        dev: D,
                        ino: 43,
                        index: 0,
                        last: 1,
                    },
                ),
                ev(
                    1600,
                    EventKind::SyncReadahead {
                        dev: D,
                        ino: 42,
                        index: 0,
                        pages: 4,
                    },
                ),
                ev(1700, EventKind::InodeLoad { dev: D, ino: 43 }),
            ],
            vec![
                ev(1250, EventKind::BlockIssue(rq(56))),
                ev(1290, EventKind::BlockComplete(rq(56))),
            ],
        );
        let r = RawRun::from_trace(&t, 4096, &FakeDevices);
        let a = |target, page, pages, t, from_disk, used| Access {
            target,
            page,
            pages,
            t,
            from_disk,
            used,
        };
        assert_eq!(
            r.accesses,
            vec![
                // Metadata has no access events and always counts as used.
                a(Target::Meta { bdev: D }, 7, 1, 100, true, true),
                // Four pages read in; only page 2 was faulted on.
                a(f(42), 0, 2, 200, true, false),
                a(f(42), 2, 1, 200, true, true),
                a(f(42), 3, 1, 200, true, false),
                a(f(43), 0, 2, 400, false, true),
            ]
        );
        assert_eq!(r.sync_readaheads, 1);
        assert_eq!(
            r.inode_loads,
            vec![InodeLoad {
                t: 600,
                dev: D,
                ino: 43
            }]
        );
        assert_eq!(r.block.len(), 1);
        assert_eq!((r.block[0].issue, r.block[0].complete), (150, Some(190)));
        assert!(r.block[0].metadata);
        assert_eq!(r.execs, vec!["/bin/x".to_string()]);
        assert_eq!(r.duration_ns, 7900);
        assert_eq!(r.disk_bytes(), 5 * 4096);
        assert!((r.launch_ms() - 0.0079).abs() < 1e-9);
    }
}
