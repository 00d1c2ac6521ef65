//! The trace-replay emulation platform (IEICE 2015, section 4): a recorded launch replayed on
//! the real device without touching the page cache. The emulated application is the recorded
//! launch as a list of steps (compute for a while, then need some pages); the pages the kernel
//! read for it in one go during the recording are one read unit. A page it needs that is not
//! in the simulated cache is read with `O_DIRECT` (its whole unit, as the kernel did), and the
//! application waits; a prefetcher thread pool replays a plan into the same simulated cache,
//! so the application waits only for what is not there yet. Nothing is written, nothing
//! enters the page cache and no cache is dropped: it can run on a user's busy system.
//!
//! What it cannot read is emulated by the device model (`DeviceFacts`): block-device
//! metadata (the device node refuses reads on some machines, and reading it would cache it),
//! and files that no longer exist. Computation is emulated by sleeping, so the prefetcher's
//! own CPU use does not slow the emulated application as it slows a real one on few CPUs.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::codec::CodecError;
use crate::device::DeviceFacts;
use crate::plan::{Entry, Plan};
use crate::sequence::{RawRun, Target};

#[derive(Debug, thiserror::Error)]
pub enum EmulateError {
    #[error("the recorded launch has no file accesses to replay")]
    Empty,
    #[error("cannot allocate a buffer for O_DIRECT reads: {0}")]
    Buffer(std::io::Error),
    #[error("{0}")]
    Codec(#[from] CodecError),
}

/// Inserts of one read unit arrive within this of each other (one readahead call inserts its
/// folios back to back; the next miss comes after at least one device round trip).
const UNIT_GAP_NS: u64 = 200_000;
/// Requests of the launch's own readaheads in flight at once.
const KERNEL_QUEUE: usize = 8;
/// Largest `O_DIRECT` read (the floor's piece size).
const PIECE: u64 = 1 << 20;

type PageKey = (Target, u64);

/// A contiguous range the kernel read in one go during the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Unit {
    target: Target,
    page: u64,
    pages: u64,
}

/// One step of the emulated application: compute for `cpu_ns`, then need `pages` pages of
/// `target` from `page`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub cpu_ns: u64,
    pub target: Target,
    pub page: u64,
    pub pages: u64,
    /// The recorded launch waited for these pages. An insert it did not wait for (the
    /// kernel's asynchronous readahead, which runs ahead of the launch) only starts the read.
    pub blocking: bool,
}

/// A recorded launch as the emulator replays it.
#[derive(Clone, Debug)]
pub struct LaunchModel {
    pub page_size: u64,
    pub steps: Vec<Step>,
    /// Computation after the last step until the launch ended.
    pub tail_ns: u64,
    /// The recorded launch's duration.
    pub recorded_ms: f64,
    /// The recorded time spent waiting for reads (what emulation replaces with real ones).
    pub recorded_wait_ms: f64,
    /// Time the device had a request of the recorded launch in flight, and bytes read.
    pub recorded_busy_ms: f64,
    pub recorded_read_bytes: u64,
    units: Vec<Unit>,
    unit_of: HashMap<PageKey, u32>,
}

impl LaunchModel {
    /// Build the model of one recorded (cold) launch. The computation before a step is the
    /// time since the previous step minus the previous step's wait for its read, which the
    /// trace's block requests show (issue to completion), never more than the gap.
    pub fn from_run(run: &RawRun) -> Result<LaunchModel, EmulateError> {
        Self::build(run, false)
    }

    /// A warm launch (nothing read from disk; the daemon learns from such launches) modelled
    /// as if its cache had been dropped: every page it used is read, in the pieces it
    /// touched them, and waited for. Its gaps are computation only.
    pub fn from_warm_run(run: &RawRun) -> Result<LaunchModel, EmulateError> {
        Self::build(run, true)
    }

    fn build(run: &RawRun, warm: bool) -> Result<LaunchModel, EmulateError> {
        let mut acc: Vec<_> = run.accesses.iter().filter(|a| a.pages > 0).collect();
        if acc.is_empty() {
            return Err(EmulateError::Empty);
        }
        acc.sort_by_key(|a| a.t);
        let mut units: Vec<Unit> = Vec::new();
        let mut unit_of: HashMap<PageKey, u32> = HashMap::new();
        let mut last_insert: HashMap<Target, (usize, u64)> = HashMap::new();
        for a in acc.iter().filter(|a| a.from_disk || (warm && a.used)) {
            let idx = match last_insert.get(&a.target) {
                Some(&(u, t))
                    if a.t.saturating_sub(t) <= UNIT_GAP_NS
                        && units[u].page + units[u].pages == a.page =>
                {
                    units[u].pages += a.pages;
                    u
                }
                _ => {
                    units.push(Unit {
                        target: a.target,
                        page: a.page,
                        pages: a.pages,
                    });
                    units.len() - 1
                }
            };
            last_insert.insert(a.target, (idx, a.t));
            for p in a.page..a.page + a.pages {
                unit_of.entry((a.target, p)).or_insert(idx as u32);
            }
        }
        let mut block: Vec<_> = run.block.iter().filter(|b| b.complete.is_some()).collect();
        block.sort_by_key(|b| b.issue);
        let (mut busy, mut until) = (0u64, 0u64);
        for b in &block {
            let c = b.complete.unwrap_or(b.issue);
            if c > until {
                busy += c - b.issue.max(until);
                until = c;
            }
        }
        let read_bytes = block.iter().map(|b| b.sectors as u64 * 512).sum();
        // The wait after a miss at `t`, before the next step at `next`: until the last block
        // request that completed in between (the launch's thread sleeps on its pages; what
        // completes while it sleeps is what it was waiting for, or queued ahead of it).
        let mut completions: Vec<u64> = block.iter().filter_map(|b| b.complete).collect();
        completions.sort_unstable();
        let wait_after = |t: u64, next: u64| -> u64 {
            let i = completions.partition_point(|&c| c <= next);
            match completions[..i].last() {
                Some(&c) if c > t => c - t,
                _ => 0,
            }
        };
        // Steps: what the launch used, in order (an insert nobody touched is only read with
        // its unit).
        let used: Vec<_> = acc.iter().filter(|a| a.used).collect();
        let mut steps = Vec::with_capacity(used.len());
        let mut prev_t = 0u64;
        let mut prev_wait = 0u64;
        let mut waited = 0u64;
        for (k, a) in used.iter().enumerate() {
            let gap = a.t.saturating_sub(prev_t);
            waited += prev_wait.min(gap);
            let next_t = used.get(k + 1).map_or(run.duration_ns, |n| n.t);
            let cpu_ns = gap.saturating_sub(prev_wait);
            prev_wait = if a.from_disk {
                wait_after(a.t, next_t).min(next_t.saturating_sub(a.t))
            } else {
                0
            };
            steps.push(Step {
                cpu_ns,
                target: a.target,
                page: a.page,
                pages: a.pages,
                blocking: prev_wait > 0 || warm,
            });
            prev_t = a.t;
        }
        let end = (run.launch_ms() * 1e6) as u64;
        let tail_ns = end.saturating_sub(prev_t).saturating_sub(prev_wait);
        waited += prev_wait.min(end.saturating_sub(prev_t));
        Ok(LaunchModel {
            page_size: run.page_size.max(512),
            steps,
            tail_ns,
            recorded_ms: run.launch_ms(),
            recorded_wait_ms: waited as f64 / 1e6,
            recorded_busy_ms: busy as f64 / 1e6,
            recorded_read_bytes: read_bytes,
            units,
            unit_of,
        })
    }

    /// The launch with no waits at all: the computation-only bound.
    pub fn cpu_ms(&self) -> f64 {
        (self.steps.iter().map(|s| s.cpu_ns).sum::<u64>() + self.tail_ns) as f64 / 1e6
    }

    /// Pages the recorded launch read from disk.
    pub fn disk_pages(&self) -> u64 {
        self.units.iter().map(|u| u.pages).sum()
    }

    /// Share of the pages this launch used from disk that `plan` lacks (the paper's miss
    /// rate when the plan was learned from other launches).
    pub fn miss_rate(&self, plan: &Plan) -> f64 {
        let planned = planned_pages(plan, self.page_size);
        let needed: HashSet<PageKey> = self
            .steps
            .iter()
            .flat_map(|s| (s.page..s.page + s.pages).map(move |p| (s.target, p)))
            .filter(|k| self.unit_of.contains_key(k))
            .collect();
        let total = needed.len() as u64;
        let missed = needed.iter().filter(|k| !planned.contains(k)).count() as u64;
        if total == 0 {
            0.0
        } else {
            missed as f64 / total as f64
        }
    }
}

/// The pages (in `page_size` units) a plan's data and block-metadata entries cover.
fn planned_pages(plan: &Plan, page_size: u64) -> HashSet<PageKey> {
    let mut s = HashSet::new();
    for e in &plan.entries {
        if let Some((t, a, b)) = entry_pages(plan, e, page_size) {
            s.extend((a..b).map(|p| (t, p)));
        }
    }
    s
}

/// An entry's target and page range `[a, b)`, for entries that read bytes.
fn entry_pages(plan: &Plan, e: &Entry, ps: u64) -> Option<(Target, u64, u64)> {
    let (t, off, len) = match *e {
        Entry::Data { file, offset, len } => {
            let f = plan.files.get(file as usize)?;
            (
                Target::File {
                    dev: f.dev,
                    ino: f.ino,
                },
                offset,
                len,
            )
        }
        Entry::Meta {
            device,
            offset,
            len,
        } => (
            Target::Meta {
                bdev: plan.devices.get(device as usize)?.dev,
            },
            offset,
            len,
        ),
        _ => return None,
    };
    (len > 0).then(|| (t, off / ps, (off + len).div_ceil(ps)))
}

/// The files the emulator reads, opened `O_DIRECT` once (checked against the plan, or by
/// identity for files only the recording names).
#[derive(Default)]
pub struct Files {
    fds: HashMap<Target, Arc<OwnedFd>>,
}

impl Files {
    pub fn open(plans: &[&Plan], runs: &[&RawRun]) -> Files {
        let mut fds = HashMap::new();
        for p in plans {
            for f in &p.files {
                let t = Target::File {
                    dev: f.dev,
                    ino: f.ino,
                };
                if let std::collections::hash_map::Entry::Vacant(v) = fds.entry(t) {
                    if let Some(fd) = crate::device::open_direct(f) {
                        v.insert(Arc::new(fd));
                    }
                }
            }
        }
        for r in runs {
            for o in r.opens.iter().filter(|o| !o.is_dir) {
                let t = Target::File {
                    dev: o.dev,
                    ino: o.ino,
                };
                if fds.contains_key(&t) {
                    continue;
                }
                let Some(f) = crate::resolve::FileId::of(&o.path) else {
                    continue;
                };
                if f.dev != o.dev || f.ino != o.ino {
                    continue;
                }
                if let Some(fd) = crate::device::open_direct(&f) {
                    fds.insert(t, Arc::new(fd));
                }
            }
        }
        Files { fds }
    }

    pub fn len(&self) -> usize {
        self.fds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Prefetcher threads (the real prefetcher's workers).
    pub jobs: usize,
    pub facts: DeviceFacts,
    /// Most the application waits for a plan's held head (`PrefetchOptions::hold_cap`).
    pub hold_cap: Duration,
}

/// One emulated launch.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    pub launch_ms: f64,
    /// Time the application spent on its own reads (pages nobody had fetched).
    pub own_read_ms: f64,
    /// Time it waited for pages the prefetcher had in flight.
    pub prefetch_wait_ms: f64,
    /// Time it waited for the plan's held head before starting.
    pub hold_ms: f64,
    /// Pages it read itself that the plan lacks (misses) ...
    pub missed_pages: u64,
    /// ... and that the plan has but had not fetched yet (order inversions).
    pub late_pages: u64,
    /// When the prefetcher had replayed the whole plan (None: still running at the end).
    pub prefetch_done_ms: Option<f64>,
    /// Reads done by the device model instead of the device (metadata, vanished files).
    pub modelled_reads: u64,
    pub device_reads: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum St {
    /// Being read, by the launch's own readahead (`true`) or by the prefetcher.
    InFlight(bool),
    Cached,
}

/// The simulated page cache, shared by the application and the prefetcher.
struct Sim {
    pages: Mutex<HashMap<PageKey, St>>,
    cv: Condvar,
}

enum Need {
    Ready,
    /// Some pages are being read; `true` if one of them by the launch's own readahead.
    InFlight(bool),
    /// Pages nobody fetches: their recorded units.
    Absent(Vec<u32>),
}

impl Sim {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PageKey, St>> {
        self.pages.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn need(&self, m: &LaunchModel, s: &Step) -> Need {
        let map = self.lock();
        let mut absent = Vec::new();
        let mut flight: Option<bool> = None;
        for p in s.page..s.page + s.pages {
            match map.get(&(s.target, p)) {
                Some(St::Cached) => {}
                Some(St::InFlight(app)) => flight = Some(flight.unwrap_or(false) | app),
                // A page no unit read was cached before the recording: cached now too.
                None => {
                    if let Some(&u) = m.unit_of.get(&(s.target, p)) {
                        if absent.last() != Some(&u) {
                            absent.push(u);
                        }
                    }
                }
            }
        }
        if !absent.is_empty() {
            absent.dedup();
            Need::Absent(absent)
        } else if let Some(app) = flight {
            Need::InFlight(app)
        } else {
            Need::Ready
        }
    }

    /// Mark the absent pages of `[a, b)` in flight; the contiguous runs claimed.
    fn claim(&self, t: Target, a: u64, b: u64, app: bool) -> Vec<(u64, u64)> {
        let mut map = self.lock();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for p in a..b {
            if let std::collections::hash_map::Entry::Vacant(v) = map.entry((t, p)) {
                v.insert(St::InFlight(app));
                match runs.last_mut() {
                    Some(r) if r.1 == p => r.1 = p + 1,
                    _ => runs.push((p, p + 1)),
                }
            }
        }
        runs
    }

    fn complete(&self, t: Target, runs: &[(u64, u64)]) {
        let mut map = self.lock();
        for &(a, b) in runs {
            for p in a..b {
                map.insert((t, p), St::Cached);
            }
        }
        drop(map);
        self.cv.notify_all();
    }

    fn wait_change(&self, d: Duration) {
        let map = self.lock();
        let _ = self.cv.wait_timeout(map, d);
    }
}

/// Read `runs` of `t` (pages of `ps` bytes) with `O_DIRECT`, or sleep the device model's time
/// for them when the target cannot be read. Returns whether the device was used.
fn read_runs(
    files: &Files,
    t: Target,
    runs: &[(u64, u64)],
    ps: u64,
    buf: &mut crate::sys::HugeBuf,
    facts: &DeviceFacts,
) -> bool {
    let fd = match t {
        Target::File { .. } => files.fds.get(&t),
        Target::Meta { .. } => None,
    };
    let mut device = fd.is_some();
    for &(a, b) in runs {
        let (mut off, end) = (a * ps, b * ps);
        while off < end {
            let len = PIECE.min(end - off);
            let ok = fd.is_some_and(|fd| {
                let slice = &mut buf.as_mut_slice()[..len as usize];
                nix::sys::uio::pread(fd.as_fd(), slice, off as i64).is_ok()
            });
            if !ok {
                device = false;
                std::thread::sleep(model_time(facts, len));
            }
            off += len;
        }
    }
    device
}

/// The device model's time for one request of `bytes`.
fn model_time(f: &DeviceFacts, bytes: u64) -> Duration {
    let transfer = bytes as f64 / (f.seq_mib_s.max(1.0) * 1048576.0);
    Duration::from_secs_f64(f.qd1_latency_us.max(1.0) / 1e6 + transfer)
}

/// Sleep until `due_ns` after `t0`: the last stretch spun, since a wakeup from sleep comes
/// tens of microseconds late on a VM and a launch has hundreds of steps.
fn sleep_until(t0: Instant, due_ns: u64) {
    const SPIN_NS: u64 = 100_000;
    let now = t0.elapsed().as_nanos() as u64;
    if due_ns > now + SPIN_NS {
        std::thread::sleep(Duration::from_nanos(due_ns - now - SPIN_NS));
    }
    while (t0.elapsed().as_nanos() as u64) < due_ns {
        std::hint::spin_loop();
    }
}

/// Emulate one launch of `m`, with `plan` prefetched concurrently (None: a cold launch).
pub fn emulate(
    m: &LaunchModel,
    plan: Option<&Plan>,
    files: &Files,
    o: &Options,
) -> Result<Outcome, EmulateError> {
    // Sleeps of a few microseconds must not round up to the default 50 µs slack.
    let _ = nix::sys::prctl::set_timerslack(1);
    let sim = Sim {
        pages: Mutex::new(HashMap::new()),
        cv: Condvar::new(),
    };
    let planned = plan
        .map(|p| planned_pages(p, m.page_size))
        .unwrap_or_default();
    let mut kq_bufs = (0..KERNEL_QUEUE)
        .map(|_| crate::sys::HugeBuf::new(PIECE as usize))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(EmulateError::Buffer)?;
    let jobs = o.jobs.max(1);
    let mut bufs = Vec::new();
    if plan.is_some() {
        for _ in 0..jobs {
            bufs.push(crate::sys::HugeBuf::new(PIECE as usize).map_err(EmulateError::Buffer)?);
        }
    }
    let stop = AtomicBool::new(false);
    let next = AtomicUsize::new(0);
    let held_done = AtomicUsize::new(0);
    let done_entries = AtomicUsize::new(0);
    let prefetch_done_ns = AtomicU64::new(0);
    let modelled = AtomicU64::new(0);
    let device = AtomicU64::new(0);
    let (kq_tx, kq_rx) = std::sync::mpsc::channel::<(Target, u64, u64)>();
    let kq_rx = Mutex::new(kq_rx);
    let t0 = Instant::now();
    let mut out = Outcome::default();
    std::thread::scope(|s| {
        if let Some(plan) = plan {
            let hold = plan.hold_entries as usize;
            let n = plan.entries.len();
            for mut buf in bufs.drain(..) {
                let (sim, stop, next, held_done, done_entries) =
                    (&sim, &stop, &next, &held_done, &done_entries);
                let (prefetch_done_ns, modelled, device) = (&prefetch_done_ns, &modelled, &device);
                s.spawn(move || {
                    let _ = nix::sys::prctl::set_timerslack(1);
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(e) = plan.entries.get(i) else { return };
                        if let Some((t, a, b)) = entry_pages(plan, e, m.page_size) {
                            let runs = sim.claim(t, a, b, false);
                            if !runs.is_empty() {
                                let dev =
                                    read_runs(files, t, &runs, m.page_size, &mut buf, &o.facts);
                                if dev { device } else { modelled }.fetch_add(1, Ordering::Relaxed);
                                sim.complete(t, &runs);
                            }
                        }
                        if i < hold {
                            held_done.fetch_add(1, Ordering::Relaxed);
                            sim.cv.notify_all();
                        }
                        if done_entries.fetch_add(1, Ordering::Relaxed) + 1 == n {
                            prefetch_done_ns
                                .store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        }
                    }
                });
            }
            // The held head: the launch starts once it is in, or at the cap.
            let want = hold.min(n);
            while held_done.load(Ordering::Relaxed) < want && t0.elapsed() < o.hold_cap {
                sim.wait_change(Duration::from_millis(1));
            }
            out.hold_ms = t0.elapsed().as_secs_f64() * 1e3;
        }
        // The device queue of the launch's own readaheads: a few threads, so that a
        // readahead's requests are in flight together as the kernel submits them.
        for mut buf in kq_bufs.drain(..) {
            let (sim, stop, modelled, device, kq_rx) = (&sim, &stop, &modelled, &device, &kq_rx);
            s.spawn(move || {
                let _ = nix::sys::prctl::set_timerslack(1);
                loop {
                    let job = kq_rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok((t, a, b)) = job else { return };
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let dev = read_runs(files, t, &[(a, b)], m.page_size, &mut buf, &o.facts);
                    if dev { device } else { modelled }.fetch_add(1, Ordering::Relaxed);
                    sim.complete(t, &[(a, b)]);
                }
            });
        }
        let piece_pages = (PIECE / m.page_size).max(1);
        let mut due = t0.elapsed().as_nanos() as u64;
        for st in &m.steps {
            due += st.cpu_ns;
            loop {
                match sim.need(m, st) {
                    Need::Ready => break,
                    Need::InFlight(_) if !st.blocking => break,
                    // Not there yet: first compute up to this step (the prefetcher may bring
                    // it meanwhile), then wait or read.
                    _ if (t0.elapsed().as_nanos() as u64) < due => sleep_until(t0, due),
                    Need::InFlight(app) => {
                        let w = Instant::now();
                        sim.wait_change(Duration::from_millis(5));
                        let waited = w.elapsed().as_secs_f64() * 1e3;
                        if app {
                            out.own_read_ms += waited;
                        } else {
                            out.prefetch_wait_ms += waited;
                        }
                    }
                    Need::Absent(units) => {
                        // The kernel's readahead for a miss: the whole unit is queued at once
                        // (the device serves it in order); the launch then waits for the pages
                        // it needs, as for pages in flight.
                        for u in units {
                            let u = m.units[u as usize];
                            let runs = sim.claim(u.target, u.page, u.page + u.pages, true);
                            for &(a, b) in &runs {
                                for p in a..b {
                                    if planned.contains(&(u.target, p)) {
                                        out.late_pages += 1;
                                    } else {
                                        out.missed_pages += 1;
                                    }
                                }
                                let mut x = a;
                                while x < b {
                                    let y = b.min(x + piece_pages);
                                    let _ = kq_tx.send((u.target, x, y));
                                    x = y;
                                }
                            }
                        }
                        if !st.blocking {
                            break;
                        }
                    }
                }
            }
            due = due.max(t0.elapsed().as_nanos() as u64);
        }
        due += m.tail_ns;
        sleep_until(t0, due);
        out.launch_ms = due as f64 / 1e6;
        stop.store(true, Ordering::Relaxed);
        drop(kq_tx);
    });
    let done = prefetch_done_ns.load(Ordering::Relaxed);
    out.prefetch_done_ms = (done > 0).then(|| done as f64 / 1e6);
    out.modelled_reads = modelled.load(Ordering::Relaxed);
    out.device_reads = device.load(Ordering::Relaxed);
    Ok(out)
}

/// The hybrid segmentation's fetch times from the emulation platform instead of the device
/// model (issue #28): a segment is replayed on the device as a held plan by the emulator's
/// prefetcher (`O_DIRECT`, nothing enters the page cache) and timed until all of it is in.
/// A single item (the segmentation times every one of thousands, a device round trip
/// each) and anything the emulator cannot read keep the model's time.
pub struct EmulatedDisk {
    skeleton: Plan,
    files: Files,
    o: Options,
}

impl EmulatedDisk {
    /// For the items of plans built from `skeleton` (their file indices are its).
    pub fn new(skeleton: &Plan, facts: DeviceFacts, jobs: usize) -> EmulatedDisk {
        let mut skeleton = skeleton.clone();
        skeleton.entries.clear();
        skeleton.hold_entries = 0;
        let files = Files::open(&[&skeleton], &[]);
        EmulatedDisk {
            skeleton,
            files,
            o: Options {
                jobs,
                facts,
                // Timed to the end, however long the segment takes.
                hold_cap: Duration::from_secs(600),
            },
        }
    }
}

impl crate::schedule::strategy::DiskTimer for EmulatedDisk {
    fn fetch_ms(&mut self, items: &[crate::schedule::Item]) -> f64 {
        let mut model = crate::device::Model(self.o.facts);
        if items.len() < 2 {
            return model.fetch_ms(items);
        }
        let mut p = self.skeleton.clone();
        p.entries = items.iter().map(|i| i.entry).collect();
        p.hold_entries = p.entries.len() as u32;
        let idle = LaunchModel {
            page_size: p.page_size as u64,
            steps: Vec::new(),
            tail_ns: 0,
            recorded_ms: 0.0,
            recorded_wait_ms: 0.0,
            recorded_busy_ms: 0.0,
            recorded_read_bytes: 0,
            units: Vec::new(),
            unit_of: HashMap::new(),
        };
        match emulate(&idle, Some(&p), &self.files, &self.o) {
            Ok(o) => o.hold_ms,
            Err(_) => model.fetch_ms(items),
        }
    }
}

/// Strategies ranked by emulation right after learning (`auto` starts with the best and times
/// only the best two on real launches, instead of every strategy).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Ranking {
    pub at_unix: i64,
    /// Recorded launches replayed (each once per scenario, interleaved).
    pub launches: usize,
    /// They were warm launches, modelled as cold (no cold one was recorded).
    #[serde(default)]
    pub from_warm: bool,
    /// The emulated cold launch (no prefetch), mean ms.
    pub cold_ms: f64,
    /// Each plan's emulated launch, mean ms, fastest first.
    pub strategies: Vec<(String, f64)>,
}

/// Replay the last `max_launches` of `runs`, cold and with each of `plans`, interleaved (a
/// slower moment of the device falls on every scenario alike), and rank the plans.
pub fn rank(
    runs: &[RawRun],
    plans: &[Plan],
    o: &Options,
    max_launches: usize,
) -> Result<Ranking, EmulateError> {
    // Cold launches show the kernel's own read sizes and waits; warm ones (the daemon learns
    // from some) are modelled as cold (`LaunchModel::from_warm_run`) only when there is none.
    let cold: Vec<&RawRun> = runs.iter().filter(|r| r.disk_bytes() > 0).collect();
    let from_warm = cold.is_empty();
    let pool: Vec<&RawRun> = if from_warm {
        runs.iter().collect()
    } else {
        cold
    };
    let recent = &pool[pool.len().saturating_sub(max_launches.max(1))..];
    if recent.is_empty() {
        return Err(EmulateError::Empty);
    }
    let models: Vec<LaunchModel> = recent
        .iter()
        .map(|r| {
            if from_warm {
                LaunchModel::from_warm_run(r)
            } else {
                LaunchModel::from_run(r)
            }
        })
        .collect::<Result<_, _>>()?;
    let files = Files::open(&plans.iter().collect::<Vec<_>>(), recent);
    let mut cold = 0.0;
    let mut sums = vec![0.0; plans.len()];
    for m in &models {
        cold += emulate(m, None, &files, o)?.launch_ms;
        for (sum, p) in sums.iter_mut().zip(plans) {
            *sum += emulate(m, Some(p), &files, o)?.launch_ms;
        }
    }
    let n = models.len().max(1) as f64;
    let mut strategies: Vec<(String, f64)> = plans
        .iter()
        .zip(sums)
        .map(|(p, s)| (p.strategy.clone(), s / n))
        .collect();
    strategies.sort_by(|a, b| a.1.total_cmp(&b.1));
    Ok(Ranking {
        at_unix: crate::sys::now_unix(),
        launches: models.len(),
        from_warm,
        cold_ms: cold / n,
        strategies,
    })
}

/// A recorded launch and its plans, exported to be emulated elsewhere
/// (`warmstart emulate --export` / `--trace`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Export {
    pub app: String,
    pub runs: Vec<RawRun>,
    pub plans: Vec<Plan>,
}

const EXPORT_MAGIC: [u8; 4] = *b"WSEM";
const EXPORT_VERSION: u16 = 1;

impl Export {
    pub fn encode(&self) -> Result<Vec<u8>, EmulateError> {
        Ok(crate::codec::encode(EXPORT_MAGIC, EXPORT_VERSION, self)?)
    }

    pub fn decode(b: &[u8]) -> Result<Export, EmulateError> {
        Ok(crate::codec::decode(EXPORT_MAGIC, EXPORT_VERSION, b)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Provenance;
    use crate::resolve::FileId;
    use crate::sequence::{Access, BlockReq};
    use crate::sys::{Dev, Usage};
    use crate::trace::EndReason;

    const MS: u64 = 1_000_000;

    /// A file of `bytes` in the build directory, out of the page cache; None when its
    /// filesystem refuses `O_DIRECT`.
    fn direct_file(dir: &std::path::Path, bytes: usize) -> Option<(std::path::PathBuf, FileId)> {
        let p = dir.join("lib.so");
        std::fs::write(&p, vec![7u8; bytes]).unwrap();
        crate::testutil::evict(&p);
        let id = FileId::of(&p).unwrap();
        crate::device::open_direct(&id).map(|_| (p, id))
    }

    fn plan_of(strategy: &str, files: Vec<FileId>, entries: Vec<Entry>, hold_entries: u32) -> Plan {
        Plan {
            app: "t".into(),
            created_unix: 0,
            strategy: strategy.into(),
            page_size: 4096,
            files,
            devices: vec![],
            entries,
            provenance: Provenance::default(),
            hold_entries,
            segments: vec![],
            t_exp_ms: None,
            notes: vec![],
        }
    }

    fn access(target: Target, page: u64, pages: u64, t: u64, from_disk: bool) -> Access {
        Access {
            target,
            page,
            pages,
            t,
            from_disk,
            used: true,
        }
    }

    fn req(issue: u64, complete: u64) -> BlockReq {
        BlockReq {
            issue,
            complete: Some(complete),
            dev: Dev { major: 8, minor: 0 },
            sector: 0,
            sectors: 8,
            metadata: false,
        }
    }

    fn run(accesses: Vec<Access>, block: Vec<BlockReq>, duration_ns: u64) -> RawRun {
        RawRun {
            page_size: 4096,
            accesses,
            inode_loads: vec![],
            opens: vec![],
            execs: vec![],
            block,
            sync_readaheads: 0,
            duration_ns,
            ended: EndReason::Exited,
            exit_code: Some(0),
            exit_signal: None,
            usage: Usage::default(),
            started_unix_ms: 0,
        }
    }

    fn facts() -> DeviceFacts {
        DeviceFacts {
            qd1_latency_us: 50.0,
            iops_qd1: 20000.0,
            iops_qd32: 100000.0,
            seq_mib_s: 1000.0,
        }
    }

    fn opts() -> Options {
        Options {
            jobs: 2,
            facts: facts(),
            hold_cap: Duration::from_secs(10),
        }
    }

    /// The paper's interleaving, recorded: compute 2 ms, a miss waited on for 3 ms, compute
    /// 1 ms, a readahead the launch did not wait for, compute 4 ms, a cached page, then 5 ms
    /// more to the end. The model takes the computation from the gaps minus the waits.
    #[test]
    fn the_model_separates_computation_from_waits() {
        let f = Target::File {
            dev: Dev { major: 8, minor: 1 },
            ino: 12,
        };
        let r = run(
            vec![
                access(f, 0, 4, 2 * MS, true),
                // An asynchronous readahead: its request completes after the next step.
                access(f, 4, 16, 6 * MS, true),
                access(f, 100, 1, 10 * MS, false),
            ],
            vec![req(2 * MS, 5 * MS), req(6 * MS, 11 * MS)],
            15 * MS,
        );
        let m = LaunchModel::from_run(&r).unwrap();
        let cpu: Vec<u64> = m.steps.iter().map(|s| s.cpu_ns).collect();
        // The async request completed at 11 ms, after the cached step at 10 ms: no wait.
        assert_eq!(cpu, vec![2 * MS, MS, 4 * MS]);
        assert_eq!(
            m.steps.iter().map(|s| s.blocking).collect::<Vec<_>>(),
            vec![true, false, false]
        );
        assert_eq!(m.tail_ns, 5 * MS);
        assert_eq!(m.cpu_ms(), 12.0);
        assert_eq!(m.recorded_wait_ms, 3.0);
        assert_eq!(m.disk_pages(), 20);
        // Contiguous inserts 4 ms apart are two readaheads, two units.
        assert_eq!(m.units.len(), 2, "{:?}", m.units);
    }

    #[test]
    fn a_launch_with_no_file_access_cannot_be_emulated() {
        assert!(matches!(
            LaunchModel::from_run(&run(vec![], vec![], MS)),
            Err(EmulateError::Empty)
        ));
    }

    /// Pure computation: every page was cached before the recording, so the emulated launch
    /// reads nothing and lasts at least its computation.
    #[test]
    fn pure_computation_reads_nothing() {
        let f = Target::File {
            dev: Dev { major: 8, minor: 1 },
            ino: 12,
        };
        let r = run(
            (0..10).map(|i| access(f, i, 1, i * MS, false)).collect(),
            vec![],
            12 * MS,
        );
        let m = LaunchModel::from_run(&r).unwrap();
        let o = emulate(&m, None, &Files::default(), &opts()).unwrap();
        assert_eq!(o.device_reads + o.modelled_reads, 0, "{o:?}");
        assert_eq!(o.own_read_ms, 0.0);
        assert!(o.launch_ms >= m.cpu_ms(), "{o:?}");
    }

    /// Pure I/O on a real file: cold, the launch reads every page itself from the device; with
    /// a plan held before the launch (as `sorted` does) it reads nothing itself, misses
    /// nothing; and neither touches the page cache.
    #[test]
    fn replay_reads_the_device_without_caching() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let Some((p, id)) = direct_file(dir.path(), 4 << 20) else {
            return crate::testutil::skip("the build directory's filesystem has no O_DIRECT");
        };
        let f = Target::File {
            dev: id.dev,
            ino: id.ino,
        };
        // Four blocking misses of 1 MiB each, 1 ms of computation apart.
        let r = run(
            (0..4)
                .map(|i| access(f, i * 256, 256, i * 3 * MS, true))
                .collect(),
            (0..4)
                .map(|i| req(i * 3 * MS, i * 3 * MS + 2 * MS))
                .collect(),
            12 * MS,
        );
        let m = LaunchModel::from_run(&r).unwrap();
        assert!(m.steps.iter().all(|s| s.blocking));
        let plan = plan_of(
            "sorted",
            vec![id.clone()],
            vec![Entry::Data {
                file: 0,
                offset: 0,
                len: 4 << 20,
            }],
            1,
        );
        let files = Files::open(&[&plan], &[&r]);
        assert_eq!(files.len(), 1);
        let cold = emulate(&m, None, &files, &opts()).unwrap();
        assert_eq!(cold.missed_pages, 1024, "{cold:?}");
        assert!(
            cold.device_reads >= 4 && cold.modelled_reads == 0,
            "{cold:?}"
        );
        let pre = emulate(&m, Some(&plan), &files, &opts()).unwrap();
        assert_eq!((pre.missed_pages, pre.late_pages), (0, 0), "{pre:?}");
        assert_eq!(pre.own_read_ms, 0.0, "{pre:?}");
        assert!(pre.prefetch_done_ms.is_some(), "{pre:?}");
        assert_eq!(m.miss_rate(&plan), 0.0);
        assert_eq!(
            crate::sys::cached_pages_of(&p).unwrap(),
            0,
            "O_DIRECT cached nothing"
        );
    }

    /// The ranking replays only launches that read from the disk, every plan once per
    /// launch, and lists the plans fastest first; warm launches only when there is no other.
    #[test]
    fn ranking_replays_the_cold_launches_and_sorts_the_plans() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let Some((_p, id)) = direct_file(dir.path(), 1 << 20) else {
            return crate::testutil::skip("the build directory's filesystem has no O_DIRECT");
        };
        let f = Target::File {
            dev: id.dev,
            ino: id.ino,
        };
        let cold = run(
            vec![access(f, 0, 256, MS, true)],
            vec![req(MS, 2 * MS)],
            3 * MS,
        );
        let warm = run(vec![access(f, 0, 256, MS, false)], vec![], 2 * MS);
        let plan =
            |strategy: &str, entries: Vec<Entry>| plan_of(strategy, vec![id.clone()], entries, 0);
        let plans = [
            plan("fast", vec![]),
            plan(
                "trace",
                vec![Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 1 << 20,
                }],
            ),
        ];
        let r = rank(&[cold.clone(), warm.clone()], &plans, &opts(), 2).unwrap();
        assert_eq!(r.launches, 1, "the warm launch is not replayed: {r:?}");
        assert!(r.cold_ms > 0.0, "{r:?}");
        let mut names: Vec<&str> = r.strategies.iter().map(|s| s.0.as_str()).collect();
        names.sort();
        assert_eq!(names, ["fast", "trace"]);
        assert!(r.strategies.windows(2).all(|w| w[0].1 <= w[1].1), "{r:?}");
        assert!(!r.from_warm);
        // Warm launches alone are modelled as cold: every page they used is read.
        let w = rank(std::slice::from_ref(&warm), &plans, &opts(), 2).unwrap();
        assert!(w.from_warm && w.launches == 1, "{w:?}");
        let m = LaunchModel::from_warm_run(&warm).unwrap();
        assert_eq!(m.disk_pages(), 256);
        assert!(m.steps.iter().all(|s| s.blocking));
        let o = emulate(&m, None, &Files::default(), &opts()).unwrap();
        assert!(o.device_reads + o.modelled_reads > 0, "{o:?}");
    }

    /// The hybrid segmentation's timer: a segment is replayed on the device (the page cache
    /// untouched); a single item keeps the device model's time.
    #[test]
    fn a_segment_is_timed_on_the_device_without_caching() {
        use crate::schedule::strategy::DiskTimer;
        use crate::schedule::Item;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let Some((p, id)) = direct_file(dir.path(), 2 << 20) else {
            return crate::testutil::skip("the build directory's filesystem has no O_DIRECT");
        };
        let skeleton = plan_of("hybrid", vec![id], vec![], 0);
        let item = |offset: u64| Item {
            entry: Entry::Data {
                file: 0,
                offset,
                len: 1 << 20,
            },
            t: 0,
            disk: None,
        };
        let facts = opts().facts;
        let mut disk = EmulatedDisk::new(&skeleton, facts, 2);
        let one = [item(0)];
        assert_eq!(
            disk.fetch_ms(&one),
            crate::device::Model(facts).fetch_ms(&one)
        );
        let ms = disk.fetch_ms(&[item(0), item(1 << 20)]);
        assert!(ms > 0.0 && ms.is_finite(), "{ms}");
        assert_eq!(
            crate::sys::cached_pages_of(&p).unwrap(),
            0,
            "O_DIRECT cached nothing"
        );
    }

    #[test]
    fn an_export_round_trips_and_a_damaged_one_is_an_error() {
        let f = Target::File {
            dev: Dev { major: 8, minor: 1 },
            ino: 12,
        };
        let ex = Export {
            app: "a".into(),
            runs: vec![run(
                vec![access(f, 0, 1, MS, true)],
                vec![req(MS, 2 * MS)],
                3 * MS,
            )],
            plans: vec![],
        };
        let mut b = ex.encode().unwrap();
        assert_eq!(Export::decode(&b).unwrap(), ex);
        let n = b.len();
        b[n - 1] ^= 0xff;
        assert!(matches!(Export::decode(&b), Err(EmulateError::Codec(_))));
        assert!(Export::decode(b"nonsense").is_err());
    }
}
