//! Attribution: every nanosecond of a traced launch, per task of its process tree, given to
//! what it was spent on (on the CPU, waiting for a CPU and for whom, waiting on a page being
//! prefetched, on a page the launch read itself, on metadata, a lock, another process), and
//! the launch's critical path: the root's time, where a wait on another task of the tree is
//! replaced by what that task was doing meanwhile.
//!
//! Pure: a function of the decoded events, the plan's pages, a sector map and the kernel's
//! symbols, so that it can be tested on made-up event sequences.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::ksyms::Ksyms;
use super::sectors::{FileKey, SectorMap};
use crate::plan::{Entry, Plan};
use crate::trace::event::{STATE_INTERRUPTIBLE, STATE_PREEMPTED, STATE_UNINTERRUPTIBLE};
use crate::trace::{Event, EventKind};

/// Who a task works for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The application's process tree.
    App,
    /// warmstart: the front before it execs the application, and the prefetcher it forks.
    Warmstart,
    Other,
}

/// Who had the CPUs while a task was waiting for one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Whom {
    /// Other threads and processes of the application.
    App,
    Warmstart,
    /// Kernel threads (kworker, ksoftirqd, ...).
    Kernel,
    /// No task: the waiting task was not allowed on the idle CPU.
    Idle,
    /// The tracer that records this launch (`explain` itself).
    Tracer,
    /// Another process, by name.
    Other(String),
}

/// Which metadata an uninterruptible sleep waited for (from its kernel stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetaKind {
    Directory,
    Inode,
    Bitmap,
    Extent,
    Journal,
    Other,
}

/// What a stretch of a task's time was spent on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "detail")]
pub enum Cause {
    /// Running the application.
    OnCpu,
    /// Running warmstart's front, before it execs the application.
    FrontOnCpu,
    /// Off the CPU in warmstart's front, before it execs the application, and why.
    Front(Box<Cause>),
    /// Runnable, waiting for a CPU.
    WaitCpu(Whom),
    /// A file page the prefetch had issued and the device had not yet delivered.
    PagePrefetching,
    /// A planned page the launch read itself: the prefetch had not issued it yet (an
    /// accessing-prefetching order inversion that cost a read of its own).
    PagePlannedReadByApp,
    /// A page the plan lacks, read by the launch itself (a miss).
    PageMiss,
    /// A page the launch read itself, in a launch without a prefetch.
    PageRead,
    /// A page being read by someone else (another process, writeback) or a page lock.
    PageOther,
    /// Filesystem metadata; `own`: the launch read it itself (else it was in flight).
    Metadata { kind: MetaKind, own: bool },
    /// The block layer had no free request (the device queue was full).
    QueueFull,
    /// A kernel lock (mutex, rwsem), named by the function that took it.
    Lock(String),
    /// Memory reclaim.
    Reclaim,
    /// Waiting for another task of the application (replaced by that task's time on the
    /// critical path).
    Tree,
    /// Waiting for warmstart (the front waiting for a held head, say).
    Warmstart,
    /// Woken by an interrupt or a timer: a sleep the launch asked for, or an event.
    Timer,
    /// Woken by another process, by name.
    OtherProcess(String),
    /// Another uninterruptible sleep, named by its first meaningful kernel frame.
    OtherSleep(String),
    /// Not seen (before the task's first event, say).
    Unknown,
}

impl Cause {
    /// Off the CPU (everything but running).
    pub fn off_cpu(&self) -> bool {
        !matches!(self, Cause::OnCpu | Cause::FrontOnCpu)
    }

    /// Waiting on file data or metadata.
    pub fn io(&self) -> bool {
        matches!(
            self,
            Cause::PagePrefetching
                | Cause::PagePlannedReadByApp
                | Cause::PageMiss
                | Cause::PageRead
                | Cause::PageOther
                | Cause::Metadata { .. }
                | Cause::QueueFull
        )
    }

    /// A short human label.
    pub fn label(&self) -> String {
        match self {
            Cause::OnCpu => "on CPU".into(),
            Cause::FrontOnCpu => "on CPU: warmstart's front".into(),
            Cause::Front(c) => format!("warmstart's front: {}", c.label()),
            Cause::WaitCpu(w) => format!(
                "waiting for a CPU: {}",
                match w {
                    Whom::App => "the app's other threads".to_string(),
                    Whom::Warmstart => "warmstart".to_string(),
                    Whom::Kernel => "kernel threads".to_string(),
                    Whom::Idle => "none (CPU affinity)".to_string(),
                    Whom::Tracer => "the tracer (explain itself)".to_string(),
                    Whom::Other(c) => c.clone(),
                }
            ),
            Cause::PagePrefetching => "page in flight from the prefetch".into(),
            Cause::PagePlannedReadByApp => "planned page read by the app first".into(),
            Cause::PageMiss => "page not in the plan (miss)".into(),
            Cause::PageRead => "page read by the app".into(),
            Cause::PageOther => "page read by another process".into(),
            Cause::Metadata { kind, own } => format!(
                "{} ({})",
                match kind {
                    MetaKind::Directory => "directory block",
                    MetaKind::Inode => "inode table block",
                    MetaKind::Bitmap => "allocation bitmap",
                    MetaKind::Extent => "extent tree block",
                    MetaKind::Journal => "journal",
                    MetaKind::Other => "other metadata",
                },
                if *own { "read by the app" } else { "in flight" }
            ),
            Cause::QueueFull => "device queue full".into(),
            Cause::Lock(f) => format!("kernel lock in {f}"),
            Cause::Reclaim => "memory reclaim".into(),
            Cause::Tree => "waiting on its own threads/processes".into(),
            Cause::Warmstart => "waiting on warmstart".into(),
            Cause::Timer => "timer or interrupt".into(),
            Cause::OtherProcess(c) => format!("waiting on {c}"),
            Cause::OtherSleep(f) => format!("other sleep in {f}"),
            Cause::Unknown => "unknown".into(),
        }
    }
}

/// A stretch of one task's time.
#[derive(Clone, Debug)]
struct Interval {
    start: u64,
    end: u64,
    cause: Cause,
    /// For a sleep that a task of the tree ended: that task (followed on the critical path).
    waker: Option<i32>,
    /// For `WaitCpu`: how the wait splits by who had the CPUs (filled in at the end).
    split: Vec<(Whom, f64)>,
    /// For `WaitCpu`: the CPU it got at the end (whose runqueue it waited on).
    cpu: Option<u16>,
}

#[derive(Clone, Debug)]
enum St {
    Running,
    Runnable,
    /// Asleep; `d`: uninterruptible, with its kernel stack.
    Asleep {
        d: bool,
        stack: Vec<u64>,
    },
    Dead,
}

#[derive(Clone, Debug)]
struct Task {
    role: Role,
    /// The task that forked it (None for the root).
    parent: Option<i32>,
    /// Past `sched_process_exit`: still on the CPU until its last switch.
    exiting: bool,
    st: St,
    since: u64,
    intervals: Vec<Interval>,
    /// Pages this task put in the page cache since it last got a CPU: what it issued itself
    /// before sleeping.
    own_inserts: Vec<(FileKey, u64)>,
    /// The file pages of its last fault or read.
    last_access: Option<(FileKey, u64, u64)>,
}

/// What the plan holds, page by page, and its data entries in plan order.
#[derive(Clone, Debug, Default)]
pub struct PlanPages {
    ranges: HashMap<FileKey, Vec<(u64, u64)>>,
    /// (entry index, file, first page, last page) of each data entry.
    entries: Vec<(usize, FileKey, u64, u64)>,
    pages: u64,
}

impl PlanPages {
    pub fn of(plan: &Plan) -> PlanPages {
        let mut p = PlanPages::default();
        for (i, e) in plan.entries.iter().enumerate() {
            if let Entry::Data { file, offset, len } = *e {
                let Some(f) = plan.files.get(file as usize) else {
                    continue;
                };
                if len == 0 {
                    continue;
                }
                let key = (f.dev, f.ino);
                let (a, b) = (offset / 4096, (offset + len - 1) / 4096);
                p.ranges.entry(key).or_default().push((a, b));
                p.entries.push((i, key, a, b));
            }
        }
        for v in p.ranges.values_mut() {
            v.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::with_capacity(v.len());
            for &(a, b) in v.iter() {
                match merged.last_mut() {
                    Some(m) if a <= m.1 + 1 => m.1 = m.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *v = merged;
        }
        p.pages = p.ranges.values().flatten().map(|(a, b)| b - a + 1).sum();
        p
    }

    pub fn contains(&self, f: FileKey, page: u64) -> bool {
        self.ranges.get(&f).is_some_and(|v| {
            let i = v.partition_point(|r| r.1 < page);
            v.get(i).is_some_and(|r| r.0 <= page)
        })
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }
}

/// What to attribute.
pub struct Input<'a> {
    /// The tree's own events (process events, faults, reads), time-ordered.
    pub tree: &'a [Event],
    /// The machine's switches, wakeups, page-cache inserts and block requests, time-ordered.
    pub system: &'a [Event],
    pub root: i32,
    /// When the command was released (the launch's start).
    pub start: u64,
    /// When tracing stopped (the launch's end if the root has not exited by then).
    pub end: u64,
    /// The launch is `warmstart run`: the root's first image is warmstart's front, and what
    /// it forks before it execs the application is the prefetcher.
    pub prefetched: bool,
    pub plan: Option<&'a PlanPages>,
    pub sectors: &'a SectorMap,
    pub syms: &'a Ksyms,
    /// Threads of the tracing process itself (its time is the measurement's, not the
    /// launch's competition).
    pub tracer: &'a HashSet<i32>,
}

/// One plan entry's timeline, ms from the launch's start.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EntryTimes {
    pub entry: usize,
    pub issued_ms: Option<f64>,
    pub completed_ms: Option<f64>,
    pub needed_ms: Option<f64>,
    pub state: EntryState,
}

/// How a plan entry the launch used fared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryState {
    /// Not used by the launch.
    #[default]
    Unused,
    /// In memory before it was needed (prefetched in time, or cached all along).
    InTime,
    /// Needed while its read was in flight: the launch waited for the prefetch.
    InFlight,
    /// Needed before the prefetch issued it: the launch read it itself.
    AppFirst,
}

/// Pages the launch read from disk that the plan lacks, in one file.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Missed {
    pub dev: String,
    pub ino: u64,
    /// The file's path, when the launch opened it while traced or the plan holds it.
    pub path: Option<String>,
    pub pages: u64,
    /// Page ranges, first-read order.
    pub ranges: Vec<(u64, u64)>,
    /// Critical-path time spent waiting on them.
    pub waited_ms: f64,
}

/// A planned entry the launch waited on because it read it itself (an inversion that cost
/// time), and how far the prefetch had issued the plan when the wait began.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Late {
    pub entry: usize,
    pub dev: String,
    pub ino: u64,
    pub path: Option<String>,
    /// The first page waited on, and when (ms from the launch's start).
    pub page: u64,
    pub at_ms: f64,
    /// Critical or not: every wait of the launch's tasks on the entry.
    pub waited_ms: f64,
    /// The furthest plan entry the prefetch had put in memory by then (None: nothing yet).
    pub issued_front: Option<usize>,
}

/// The result.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Attribution {
    pub wall_ms: f64,
    /// The critical path: sums to `wall_ms`.
    pub critical: BTreeMap<String, f64>,
    /// Every task of the application, summed (waits of idle thread pools included).
    pub all_tasks: BTreeMap<String, f64>,
    /// Machine-readable forms of the keys above, in the same order of appearance.
    pub critical_causes: Vec<(Cause, f64)>,
    pub tasks: usize,
    pub entries: Vec<EntryTimes>,
    pub plan_pages: u64,
    /// Pages the launch read from disk itself that the plan lacks.
    pub missed_pages: u64,
    pub missed: Vec<Missed>,
    /// Planned entries the launch read itself and waited on, longest wait first.
    pub late: Vec<Late>,
    /// Pages the prefetch read that the launch never touched.
    pub wasted_pages: u64,
    /// Pages the prefetch read.
    pub prefetched_pages: u64,
    /// Pages the launch read from disk itself (planned or not; not warmstart's front).
    pub app_read_pages: u64,
    /// When the prefetch put its first and last page in the page cache, ms.
    pub prefetch_first_ms: Option<f64>,
    pub prefetch_last_ms: Option<f64>,
    /// Stacks that named no function (symbols unreadable) make the causes coarse.
    pub unnamed_stacks: u64,
    /// When the root exec'd the application (after warmstart's front, when prefetched), ms.
    pub app_exec_ms: Option<f64>,
}

fn is_bdev(k: &FileKey) -> bool {
    // Block-device pages (metadata) live on the bdev pseudo filesystem: major 0.
    k.0.major == 0
}

fn kernel_comm(c: &str) -> bool {
    [
        "kworker",
        "ksoftirqd",
        "rcu",
        "migration",
        "irq/",
        "kthreadd",
        "jbd2",
        "kcompactd",
        "khugepaged",
        "kswapd",
        "watchdog",
        "cpuhp",
        "idle_inject",
        "kauditd",
        "oom_reaper",
        "writeback",
        "kblockd",
        "scsi_",
        "ext4-",
    ]
    .iter()
    .any(|p| c.starts_with(p))
}

/// Frames of the scheduler and the wait primitives, skipped when naming a sleep.
const PLUMBING: &[&str] = &[
    "trace_event_raw_event_sched_switch",
    "__traceiter_sched_switch",
    "__schedule",
    "schedule",
    "io_schedule",
    "schedule_timeout",
    "io_schedule_timeout",
    "schedule_preempt_disabled",
    "bit_wait_io",
    "__wait_on_bit",
    "out_of_line_wait_on_bit",
    "__wait_on_buffer",
    "wait_on_buffer",
    "folio_wait_bit_common",
    "rwsem_down_read_slowpath",
    "rwsem_down_write_slowpath",
    "__mutex_lock",
    "__mutex_lock_slowpath",
    "mutex_lock",
    "down_read",
    "down_write",
    "wait_for_completion",
    "wait_for_completion_io",
    "wait_for_completion_io_timeout",
    "__wait_for_common",
    "wait_for_common_io",
];

struct Ctx<'a> {
    input: &'a Input<'a>,
    roles: HashMap<i32, Role>,
    comm: HashMap<i32, String>,
    tasks: HashMap<i32, Task>,
    root_execs: u32,
    app_exec: Option<u64>,
    /// Per page: when it was first inserted and by whom.
    inserted: HashMap<(FileKey, u64), (u64, Role)>,
    completed: HashMap<(FileKey, u64), u64>,
    needed: HashMap<(FileKey, u64), u64>,
    touched: HashSet<(FileKey, u64)>,
    /// Per CPU: the task running since when, and every finished span (start, end, tid).
    cpu_cur: HashMap<u16, (i32, u64)>,
    spans: HashMap<u16, Vec<(u64, u64, i32)>>,
    missed: BTreeMap<FileKey, Missed>,
    miss_order: Vec<FileKey>,
    /// Waits on planned pages the launch read itself: (start, ns, file, page).
    late_waits: Vec<(u64, u64, FileKey, u64)>,
    /// Pages warmstart's front read itself before the application's exec.
    front_reads: HashSet<(FileKey, u64)>,
    unnamed: u64,
}

impl Ctx<'_> {
    fn role(&self, tid: i32) -> Role {
        self.roles.get(&tid).copied().unwrap_or(Role::Other)
    }

    fn whom(&self, tid: i32) -> Whom {
        match self.role(tid) {
            Role::App => Whom::App,
            Role::Warmstart => Whom::Warmstart,
            Role::Other if tid == 0 => Whom::Idle,
            Role::Other if self.input.tracer.contains(&tid) => Whom::Tracer,
            Role::Other => {
                let c = self.comm.get(&tid).cloned().unwrap_or_default();
                if kernel_comm(&c) {
                    Whom::Kernel
                } else {
                    Whom::Other(c)
                }
            }
        }
    }

    fn names<'s>(&'s self, stack: &[u64]) -> Vec<&'s str> {
        stack
            .iter()
            .filter_map(|a| self.input.syms.name(*a))
            .collect()
    }

    /// Close a task's current state at `t` with `cause` (and the waker, for a sleep a task of
    /// the tree ended).
    fn close(&mut self, tid: i32, t: u64, cause: Cause, waker: Option<i32>) {
        let in_front = self.in_front(tid);
        let Some(task) = self.tasks.get_mut(&tid) else {
            return;
        };
        let start = task.since.max(self.input.start);
        let end = t.min(self.input.end);
        let cause = match cause {
            Cause::FrontOnCpu | Cause::Front(_) => cause,
            c if in_front => Cause::Front(Box::new(c)),
            c => c,
        };
        if end > start {
            task.intervals.push(Interval {
                start,
                end,
                cause,
                waker,
                split: Vec::new(),
                cpu: None,
            });
        }
        task.since = t;
    }

    /// Why task `tid`, asleep since `since` (uninterruptible with `stack` when `d`), slept
    /// until woken by `waker` (None: still asleep at the end).
    fn sleep_cause(&mut self, tid: i32, d: bool, stack: &[u64], waker: Option<i32>) -> Cause {
        let waker_role = waker.map(|w| self.role(w));
        if !d {
            return match (waker, waker_role) {
                (Some(_), Some(Role::App)) => Cause::Tree,
                (Some(_), Some(Role::Warmstart)) => Cause::Warmstart,
                (Some(w), _) => match self.whom(w) {
                    Whom::Idle | Whom::Kernel | Whom::Tracer => Cause::Timer,
                    Whom::Other(c) => Cause::OtherProcess(c),
                    _ => Cause::Timer,
                },
                (None, _) => Cause::Unknown,
            };
        }
        let names = self.names(stack);
        if names.is_empty() {
            if !stack.is_empty() {
                self.unnamed += 1;
            }
            return match waker_role {
                Some(Role::App) => Cause::Tree,
                _ => Cause::OtherSleep("?".into()),
            };
        }
        let has = |p: &str| names.iter().any(|n| n.contains(p));
        let task = &self.tasks[&tid];
        let own_meta = task.own_inserts.iter().any(|(k, _)| is_bdev(k));
        if has("blk_mq_get_tag") || has("__blk_mq_alloc_requests") {
            return Cause::QueueFull;
        }
        let meta = if has("jbd2") {
            Some(MetaKind::Journal)
        } else if has("ext4_get_inode_loc") || has("__ext4_iget") || has("ext4_iget") {
            Some(MetaKind::Inode)
        } else if has("bitmap") || has("ext4_mb_") {
            Some(MetaKind::Bitmap)
        } else if has("ext4_find_extent") || has("extent_tree_block") || has("ext4_ext_map") {
            Some(MetaKind::Extent)
        } else if has("d_alloc_parallel")
            || has("ext4_bread")
            || has("ext4_find_entry")
            || has("ext4_lookup")
            || has("ext4_readdir")
            || has("dx_probe")
            || has("ext4_read_dirblock")
            || has("htree")
        {
            Some(MetaKind::Directory)
        } else if names
            .iter()
            .any(|n| n.starts_with("ext4_") || n.starts_with("__ext4_"))
            && !has("filemap")
            && !has("mutex")
            && !has("rwsem")
            && (has("bit_wait_io") || has("wait_on_buffer") || has("bh_"))
        {
            // Waiting on a buffer head ext4 reads: metadata we have no finer name for.
            Some(MetaKind::Other)
        } else {
            None
        };
        if let Some(kind) = meta {
            return Cause::Metadata {
                kind,
                own: own_meta,
            };
        }
        if has("folio_wait") || has("filemap_") || has("folio_lock") || has("wait_on_page") {
            return self.page_cause(tid);
        }
        if has("vfork") || waker_role == Some(Role::App) && !has("mutex") && !has("rwsem") {
            return Cause::Tree;
        }
        if has("shrink_") || has("try_to_free_pages") || has("reclaim") {
            return Cause::Reclaim;
        }
        let first = names
            .iter()
            .find(|n| !PLUMBING.contains(n))
            .copied()
            .unwrap_or("?")
            .to_string();
        if has("mutex") || has("rwsem") || has("down_read") || has("down_write") {
            return Cause::Lock(first);
        }
        Cause::OtherSleep(first)
    }

    /// The pages a task's wait on a file page is for: those it inserted since it last ran,
    /// or else the first of its last access that was read during the trace.
    fn waited_pages(&self, tid: i32) -> Vec<(FileKey, u64)> {
        let Some(task) = self.tasks.get(&tid) else {
            return Vec::new();
        };
        let own: Vec<(FileKey, u64)> = task
            .own_inserts
            .iter()
            .filter(|(k, _)| !is_bdev(k))
            .copied()
            .collect();
        if !own.is_empty() {
            own
        } else if let Some((f, a, b)) = task.last_access {
            // A read of many pages waits on the first that is not in memory: the first
            // inserted during the trace.
            (a..=b.min(a + 4096))
                .map(|i| (f, i))
                .filter(|k| self.inserted.contains_key(k))
                .take(1)
                .collect()
        } else {
            Vec::new()
        }
    }

    /// A wait on a file page: which page, and who was reading it.
    fn page_cause(&mut self, tid: i32) -> Cause {
        let pages = self.waited_pages(tid);
        let Some(&first) = pages.first() else {
            return Cause::PageOther;
        };
        match self.inserted.get(&first).map(|x| x.1) {
            Some(Role::Warmstart) => Cause::PagePrefetching,
            Some(Role::App) if !self.input.prefetched => Cause::PageRead,
            Some(Role::App) => {
                let planned = self
                    .input
                    .plan
                    .is_some_and(|p| pages.iter().any(|(f, i)| p.contains(*f, *i)));
                if planned {
                    Cause::PagePlannedReadByApp
                } else {
                    Cause::PageMiss
                }
            }
            _ => Cause::PageOther,
        }
    }

    fn note_miss_wait(&mut self, tid: i32, ns: u64) {
        let Some(task) = self.tasks.get(&tid) else {
            return;
        };
        let f = task
            .own_inserts
            .iter()
            .find(|(k, _)| !is_bdev(k))
            .map(|x| x.0)
            .or(task.last_access.map(|x| x.0));
        if let Some(f) = f {
            if let Some(m) = self.missed.get_mut(&f) {
                m.waited_ms += ns as f64 / 1e6;
            }
        }
    }

    fn track(&mut self, tid: i32, parent: Option<i32>, role: Role, t: u64, st: St) {
        self.roles.insert(tid, role);
        if role == Role::Other {
            return;
        }
        self.tasks.insert(
            tid,
            Task {
                role,
                parent,
                exiting: false,
                st,
                since: t,
                intervals: Vec::new(),
                own_inserts: Vec::new(),
                last_access: None,
            },
        );
    }

    fn event(&mut self, e: &Event) {
        let t = e.ts;
        match &e.kind {
            EventKind::Exec { pid, .. } if *pid == self.input.root => {
                if self.input.prefetched && self.root_execs == 1 {
                    // The front becomes the application: its time so far was warmstart's.
                    if let Some(St::Running) = self.tasks.get(pid).map(|t| &t.st) {
                        self.close(*pid, t, Cause::FrontOnCpu, None);
                    }
                }
                self.root_execs += 1;
                if self.root_execs == if self.input.prefetched { 2 } else { 1 } {
                    self.app_exec = Some(t);
                }
            }
            EventKind::Fork { parent, child } => {
                let role =
                    if *parent == self.input.root && self.input.prefetched && self.root_execs < 2 {
                        Role::Warmstart
                    } else {
                        match self.role(*parent) {
                            Role::Other => Role::App,
                            r => r,
                        }
                    };
                self.track(*child, Some(*parent), role, t, St::Runnable);
            }
            EventKind::Exit { pid } => {
                // It runs on (releasing its memory, waking its parent) until its last switch.
                if let Some(task) = self.tasks.get_mut(pid) {
                    task.exiting = true;
                }
            }
            EventKind::Switch {
                cpu,
                prev,
                prev_comm,
                prev_state,
                next,
                next_comm,
                stack,
            } => {
                self.comm.insert(*prev, prev_comm.clone());
                self.comm.insert(*next, next_comm.clone());
                if let Some((tid, since)) = self.cpu_cur.insert(*cpu, (*next, t)) {
                    self.spans.entry(*cpu).or_default().push((since, t, tid));
                }
                let alive = |t: &Task| !matches!(t.st, St::Dead);
                if self.tasks.get(prev).is_some_and(alive) {
                    let cause = self.running_cause(*prev);
                    self.close(*prev, t, cause, None);
                    let st = if prev_state & STATE_UNINTERRUPTIBLE != 0 {
                        St::Asleep {
                            d: true,
                            stack: stack.clone(),
                        }
                    } else if prev_state & STATE_INTERRUPTIBLE != 0 {
                        St::Asleep {
                            d: false,
                            stack: Vec::new(),
                        }
                    } else if *prev_state == 0 || prev_state & STATE_PREEMPTED != 0 {
                        St::Runnable
                    } else {
                        // Stopped, traced, dying: not waiting for anything we can name.
                        St::Asleep {
                            d: false,
                            stack: Vec::new(),
                        }
                    };
                    if let Some(task) = self.tasks.get_mut(prev) {
                        task.st = if task.exiting { St::Dead } else { st };
                    }
                }
                if let Some(task) = self.tasks.get(next) {
                    match task.st.clone() {
                        St::Runnable => {
                            let n = task.intervals.len();
                            self.close(*next, t, Cause::WaitCpu(Whom::Idle), None);
                            if let Some(iv) = self
                                .tasks
                                .get_mut(next)
                                .and_then(|t| t.intervals.get_mut(n))
                            {
                                iv.cpu = Some(*cpu);
                            }
                        }
                        St::Asleep { d, stack } => {
                            // Its wakeup was not seen: the sleep ends here.
                            let c = self.sleep_cause(*next, d, &stack, None);
                            self.close(*next, t, c, None);
                        }
                        St::Running | St::Dead => {}
                    }
                    if let Some(task) = self.tasks.get_mut(next) {
                        task.st = St::Running;
                        task.since = t;
                        task.own_inserts.clear();
                    }
                }
            }
            EventKind::Waking { pid, irq } => {
                let Some(task) = self.tasks.get(pid) else {
                    return;
                };
                if let St::Asleep { d, stack } = task.st.clone() {
                    let since = task.since;
                    // Woken from an interrupt: by no task (tid 0 reads as the idle task).
                    let waker = if *irq { 0 } else { e.tid };
                    let cause = self.sleep_cause(*pid, d, &stack, Some(waker));
                    if cause == Cause::PageMiss || cause == Cause::PagePlannedReadByApp {
                        self.note_miss_wait(*pid, t.saturating_sub(since));
                    }
                    if cause == Cause::PagePlannedReadByApp {
                        let planned = self
                            .waited_pages(*pid)
                            .into_iter()
                            .find(|(f, i)| self.input.plan.is_some_and(|p| p.contains(*f, *i)));
                        if let Some((f, i)) = planned {
                            self.late_waits.push((since, t.saturating_sub(since), f, i));
                        }
                    }
                    let waker = (self.role(waker) == Role::App).then_some(waker);
                    self.close(*pid, t, cause, waker);
                    if let Some(task) = self.tasks.get_mut(pid) {
                        task.st = St::Runnable;
                    }
                }
            }
            EventKind::PageCacheAdd {
                dev,
                ino,
                index,
                order,
            } => {
                let role = self.role(e.tid);
                let n = 1u64 << (*order).min(9);
                let f = (*dev, *ino);
                for i in *index..index + n {
                    self.inserted.entry((f, i)).or_insert((t, role));
                }
                if role == Role::App {
                    if let Some(task) = self.tasks.get_mut(&e.tid) {
                        task.own_inserts.push((f, *index));
                    }
                    // The front's own binary and database are not the plan's to hold: its
                    // reads are warmstart's cost (the critical path shows it), not misses.
                    let front = self.in_front(e.tid);
                    if front {
                        for i in *index..index + n {
                            self.front_reads.insert((f, i));
                        }
                    }
                    if !front
                        && !is_bdev(&f)
                        && !self.input.plan.is_some_and(|p| p.contains(f, *index))
                    {
                        let m = self.missed.entry(f).or_insert_with(|| {
                            self.miss_order.push(f);
                            Missed {
                                dev: f.0.to_string(),
                                ino: f.1,
                                ..Missed::default()
                            }
                        });
                        m.pages += n;
                        match m.ranges.last_mut() {
                            Some(r) if r.1 + 1 == *index => r.1 = index + n - 1,
                            _ => m.ranges.push((*index, index + n - 1)),
                        }
                    }
                }
            }
            EventKind::Fault { dev, ino, index } if self.role(e.tid) == Role::App => {
                let f = (*dev, *ino);
                self.needed.entry((f, *index)).or_insert(t);
                self.touched.insert((f, *index));
                if let Some(task) = self.tasks.get_mut(&e.tid) {
                    task.last_access = Some((f, *index, *index));
                }
            }
            EventKind::GetPages {
                dev,
                ino,
                index,
                last,
            } if self.role(e.tid) == Role::App => {
                let f = (*dev, *ino);
                let last = (*last).max(*index);
                for i in *index..=last.min(index + 65536) {
                    self.needed.entry((f, i)).or_insert(t);
                    self.touched.insert((f, i));
                }
                if let Some(task) = self.tasks.get_mut(&e.tid) {
                    task.last_access = Some((f, *index, last));
                }
            }
            EventKind::MapPages {
                dev,
                ino,
                index,
                last,
            } if self.role(e.tid) == Role::App => {
                let f = (*dev, *ino);
                for i in *index..=(*last).max(*index).min(index + 65536) {
                    self.touched.insert((f, i));
                }
            }
            EventKind::BlockComplete(rq) if rq.is_read() => {
                let completed = &mut self.completed;
                self.input
                    .sectors
                    .pages(rq.dev, rq.sector, rq.sectors, |f, a, b| {
                        for i in a..=b {
                            completed.entry((f, i)).or_insert(t);
                        }
                    });
            }
            _ => {}
        }
    }

    /// `tid` is warmstart's front: the launch's root before it execs the application.
    fn in_front(&self, tid: i32) -> bool {
        tid == self.input.root && self.input.prefetched && self.root_execs < 2
    }

    fn running_cause(&self, tid: i32) -> Cause {
        let front = self.in_front(tid);
        if front || self.role(tid) == Role::Warmstart {
            Cause::FrontOnCpu
        } else {
            Cause::OnCpu
        }
    }

    /// Split every wait for a CPU by who ran on the CPUs meanwhile.
    fn split_waits(&mut self) {
        for v in self.spans.values_mut() {
            v.sort_unstable_by_key(|s| s.0);
        }
        type Split = Vec<(Whom, f64)>;
        let mut out: Vec<(i32, usize, Split)> = Vec::new();
        for (tid, task) in &self.tasks {
            for (k, iv) in task.intervals.iter().enumerate() {
                if !matches!(iv.cause, Cause::WaitCpu(_)) {
                    continue;
                }
                let mut by: BTreeMap<Whom, u64> = BTreeMap::new();
                // The CPU it waited on when known (it got that one), else all of them.
                let cpus = self
                    .spans
                    .iter()
                    .filter(|(c, _)| iv.cpu.is_none_or(|w| w == **c))
                    .map(|(_, v)| v);
                for spans in cpus {
                    let i = spans.partition_point(|s| s.1 <= iv.start);
                    for s in &spans[i..] {
                        if s.0 >= iv.end {
                            break;
                        }
                        if s.2 == *tid {
                            continue;
                        }
                        let o = s.1.min(iv.end) - s.0.max(iv.start);
                        *by.entry(self.whom(s.2)).or_default() += o;
                    }
                }
                let total: u64 = by.values().sum();
                let split = if total == 0 {
                    vec![(Whom::Idle, 1.0)]
                } else {
                    by.into_iter()
                        .map(|(w, o)| (w, o as f64 / total as f64))
                        .collect()
                };
                out.push((*tid, k, split));
            }
        }
        for (tid, k, split) in out {
            if let Some(t) = self.tasks.get_mut(&tid) {
                t.intervals[k].split = split;
            }
        }
    }

    /// Add `[s, e)` of task `tid`'s time to `out`, following waits on the tree's tasks.
    fn blame(&self, tid: i32, s: u64, e: u64, depth: u32, out: &mut BTreeMap<Cause, u64>) {
        let Some(task) = self.tasks.get(&tid) else {
            tracing::trace!("explain: untracked tid {tid} {s}..{e}");
            *out.entry(Cause::Unknown).or_default() += e - s;
            return;
        };
        let mut covered = s;
        // Before it existed, what it waits for was being prepared by whoever forked it.
        let born = task.intervals.first().map_or(e, |iv| iv.start);
        if born > s {
            let b = born.min(e);
            match task.parent {
                Some(p) if depth < 12 && self.tasks.contains_key(&p) => {
                    self.blame(p, s, b, depth + 1, out)
                }
                _ => *out.entry(Cause::Unknown).or_default() += b - s,
            }
            covered = b;
        }
        let i = task.intervals.partition_point(|iv| iv.end <= s);
        for iv in &task.intervals[i..] {
            if iv.start >= e {
                break;
            }
            let (a, b) = (iv.start.max(s), iv.end.min(e));
            if a > covered {
                tracing::trace!("explain: tid {tid} unaccounted {covered}..{a} (depth {depth})");
                *out.entry(Cause::Unknown).or_default() += a - covered;
            }
            covered = covered.max(b);
            if b <= a {
                continue;
            }
            match (&iv.cause, iv.waker) {
                (Cause::Tree, Some(w)) if depth < 12 && w != tid => {
                    self.blame(w, a, b, depth + 1, out)
                }
                (Cause::WaitCpu(_), _) if !iv.split.is_empty() => {
                    let d = (b - a) as f64;
                    for (whom, share) in &iv.split {
                        *out.entry(Cause::WaitCpu(whom.clone())).or_default() +=
                            (d * share).round() as u64;
                    }
                }
                (c, _) => *out.entry(c.clone()).or_default() += b - a,
            }
        }
        if e > covered {
            tracing::trace!("explain: tid {tid} unaccounted {covered}..{e} (depth {depth})");
            *out.entry(Cause::Unknown).or_default() += e - covered;
        }
    }
}

/// The waits on planned pages the launch read itself, by plan entry, with where the prefetch
/// stood at the first of them.
fn late_entries(cx: &Ctx, entries: &[EntryTimes], start: u64) -> Vec<Late> {
    let Some(plan) = cx.input.plan else {
        return Vec::new();
    };
    let rel = |t: u64| (t.saturating_sub(start)) as f64 / 1e6;
    // The prefetch's front over time: entries in order of their first page put in memory.
    let mut issued: Vec<(f64, usize)> = entries
        .iter()
        .filter_map(|e| e.issued_ms.map(|t| (t, e.entry)))
        .collect();
    issued.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut front = Vec::with_capacity(issued.len());
    let mut best = None;
    for (t, e) in issued {
        best = best.max(Some(e));
        front.push((t, best));
    }
    let front_at = |t: f64| {
        let i = front.partition_point(|x| x.0 <= t);
        i.checked_sub(1).and_then(|i| front[i].1)
    };
    let mut by_entry: BTreeMap<usize, Late> = BTreeMap::new();
    for &(since, ns, f, page) in &cx.late_waits {
        let Some(&(idx, ..)) = plan
            .entries
            .iter()
            .find(|(_, ef, a, b)| *ef == f && (*a..=*b).contains(&page))
        else {
            continue;
        };
        let at = rel(since);
        let l = by_entry.entry(idx).or_insert_with(|| Late {
            entry: idx,
            dev: f.0.to_string(),
            ino: f.1,
            path: None,
            page,
            at_ms: at,
            waited_ms: 0.0,
            issued_front: front_at(at),
        });
        l.waited_ms += ns as f64 / 1e6;
    }
    let mut late: Vec<Late> = by_entry.into_values().collect();
    late.sort_by(|a, b| b.waited_ms.total_cmp(&a.waited_ms));
    late
}

/// Attribute a traced launch.
pub fn attribute(input: &Input<'_>) -> Attribution {
    let mut cx = Ctx {
        input,
        roles: HashMap::new(),
        comm: HashMap::new(),
        tasks: HashMap::new(),
        root_execs: 0,
        app_exec: None,
        inserted: HashMap::new(),
        completed: HashMap::new(),
        needed: HashMap::new(),
        touched: HashSet::new(),
        cpu_cur: HashMap::new(),
        spans: HashMap::new(),
        missed: BTreeMap::new(),
        late_waits: Vec::new(),
        front_reads: HashSet::new(),
        miss_order: Vec::new(),
        unnamed: 0,
    };
    // The root waits at its gate until released: asleep until its wakeup.
    cx.track(
        input.root,
        None,
        Role::App,
        input.start,
        St::Asleep {
            d: false,
            stack: Vec::new(),
        },
    );
    let (mut i, mut j) = (0, 0);
    let mut root_exit = None;
    loop {
        let (next, from_tree) = match (input.tree.get(i), input.system.get(j)) {
            (Some(a), Some(b)) if a.ts <= b.ts => {
                i += 1;
                (a, true)
            }
            (Some(a), None) => {
                i += 1;
                (a, true)
            }
            (_, Some(b)) => {
                j += 1;
                (b, false)
            }
            (None, None) => break,
        };
        if next.ts < input.start {
            continue;
        }
        // Page-cache inserts are taken from the machine's stream, which has everyone's (the
        // tree's own stream repeats the tree's).
        if from_tree && matches!(next.kind, EventKind::PageCacheAdd { .. }) {
            continue;
        }
        if let EventKind::Exit { pid } = next.kind {
            if pid == input.root && root_exit.is_none() {
                root_exit = Some(next.ts);
            }
        }
        cx.event(next);
    }
    let end = root_exit
        .unwrap_or(input.end)
        .min(input.end)
        .max(input.start);
    // Close whatever is still open at the end.
    let open: Vec<(i32, St)> = cx
        .tasks
        .iter()
        .map(|(tid, t)| (*tid, t.st.clone()))
        .collect();
    for (tid, st) in open {
        let cause = match st {
            St::Running => cx.running_cause(tid),
            St::Runnable => Cause::WaitCpu(Whom::Idle),
            St::Asleep { d, stack } => cx.sleep_cause(tid, d, &stack, None),
            St::Dead => continue,
        };
        cx.close(tid, input.end, cause, None);
    }
    for t in cx.tasks.values_mut() {
        t.intervals.sort_by_key(|iv| iv.start);
    }
    cx.split_waits();

    let mut crit: BTreeMap<Cause, u64> = BTreeMap::new();
    cx.blame(input.root, input.start, end, 0, &mut crit);
    let mut all: BTreeMap<Cause, u64> = BTreeMap::new();
    for task in cx.tasks.values().filter(|t| t.role == Role::App) {
        for iv in &task.intervals {
            let (a, b) = (iv.start.max(input.start), iv.end.min(end));
            if b <= a {
                continue;
            }
            if let Cause::WaitCpu(_) = iv.cause {
                for (whom, share) in &iv.split {
                    *all.entry(Cause::WaitCpu(whom.clone())).or_default() +=
                        ((b - a) as f64 * share).round() as u64;
                }
            } else {
                *all.entry(iv.cause.clone()).or_default() += b - a;
            }
        }
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    let rel = |t: u64| (t.saturating_sub(input.start)) as f64 / 1e6;
    let mut critical_causes: Vec<(Cause, f64)> =
        crit.iter().map(|(c, ns)| (c.clone(), ms(*ns))).collect();
    critical_causes.sort_by(|a, b| b.1.total_cmp(&a.1));

    // The plan's timeline, entry by entry.
    let mut entries = Vec::new();
    if let Some(plan) = input.plan {
        for &(idx, f, a, b) in &plan.entries {
            let mut et = EntryTimes {
                entry: idx,
                ..EntryTimes::default()
            };
            let mut state = EntryState::Unused;
            for p in a..=b {
                let k = (f, p);
                let ins = cx.inserted.get(&k);
                if let Some(&(ti, Role::Warmstart)) = ins {
                    et.issued_ms = Some(et.issued_ms.map_or(rel(ti), |x: f64| x.min(rel(ti))));
                    if let Some(&tc) = cx.completed.get(&k) {
                        et.completed_ms =
                            Some(et.completed_ms.map_or(rel(tc), |x: f64| x.max(rel(tc))));
                    }
                }
                let Some(&tn) = cx.needed.get(&k) else {
                    continue;
                };
                et.needed_ms = Some(et.needed_ms.map_or(rel(tn), |x: f64| x.min(rel(tn))));
                let s = match ins {
                    Some(&(_, Role::App)) => EntryState::AppFirst,
                    Some(&(ti, Role::Warmstart)) if ti > tn => EntryState::AppFirst,
                    Some(&(_, Role::Warmstart)) => match cx.completed.get(&k) {
                        Some(&tc) if tc > tn => EntryState::InFlight,
                        _ => EntryState::InTime,
                    },
                    _ => EntryState::InTime,
                };
                state = state.max(s);
            }
            et.state = state;
            entries.push(et);
        }
    }
    // Of the plan's files only: warmstart also reads its own database and binary.
    let planned_file = |k: &(FileKey, u64)| input.plan.is_some_and(|p| p.ranges.contains_key(&k.0));
    let prefetched: Vec<u64> = cx
        .inserted
        .iter()
        .filter(|(k, v)| v.1 == Role::Warmstart && planned_file(k))
        .map(|(_, v)| v.0)
        .collect();
    let wasted = cx
        .inserted
        .iter()
        .filter(|(k, v)| v.1 == Role::Warmstart && planned_file(k) && !cx.touched.contains(k))
        .count() as u64;
    let app_read = cx
        .inserted
        .iter()
        .filter(|(k, v)| v.1 == Role::App && !is_bdev(&k.0) && !cx.front_reads.contains(k))
        .count() as u64;
    let mut missed: Vec<Missed> = cx
        .miss_order
        .iter()
        .filter_map(|f| cx.missed.get(f).cloned())
        .collect();
    missed.sort_by(|a, b| {
        b.waited_ms
            .total_cmp(&a.waited_ms)
            .then(b.pages.cmp(&a.pages))
    });
    let late = late_entries(&cx, &entries, input.start);
    Attribution {
        wall_ms: ms(end - input.start),
        critical: crit.iter().map(|(c, ns)| (c.label(), ms(*ns))).collect(),
        all_tasks: all.iter().map(|(c, ns)| (c.label(), ms(*ns))).collect(),
        critical_causes,
        tasks: cx.tasks.values().filter(|t| t.role == Role::App).count(),
        entries,
        plan_pages: input.plan.map_or(0, |p| p.pages()),
        missed_pages: missed.iter().map(|m| m.pages).sum(),
        missed,
        late,
        wasted_pages: wasted,
        prefetched_pages: prefetched.len() as u64,
        app_read_pages: app_read,
        prefetch_first_ms: prefetched.iter().min().map(|t| rel(*t)),
        prefetch_last_ms: prefetched.iter().max().map(|t| rel(*t)),
        unnamed_stacks: cx.unnamed,
        app_exec_ms: cx.app_exec.map(rel),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Provenance;
    use crate::resolve::{FileId, FileKind};
    use crate::sys::Dev;
    use crate::trace::BlockRq;

    const MS: u64 = 1_000_000;
    const ROOT: i32 = 100;
    const PREFETCHER: i32 = 200;
    const FS: Dev = Dev {
        major: 254,
        minor: 0,
    };

    fn syms() -> Ksyms {
        Ksyms::parse(
            "ffffffff81000000 T __schedule\n\
             ffffffff81001000 T io_schedule\n\
             ffffffff81002000 T folio_wait_bit_common\n\
             ffffffff81003000 T filemap_fault\n\
             ffffffff81004000 T __ext4_find_entry\n\
             ffffffff81005000 T bit_wait_io\n\
             ffffffff81006000 T mutex_lock\n\
             ffffffff81007000 T ext4_file_write_iter\n",
        )
    }
    const PAGE_WAIT: [u64; 3] = [0xffffffff81001000, 0xffffffff81002010, 0xffffffff81003020];
    const DIR_WAIT: [u64; 2] = [0xffffffff81005000, 0xffffffff81004010];
    const LOCK_WAIT: [u64; 3] = [0xffffffff81000010, 0xffffffff81006010, 0xffffffff81007010];

    fn ev(ms10: u64, tid: i32, kind: EventKind) -> Event {
        // Times in tenths of a millisecond.
        Event {
            ts: ms10 * MS / 10,
            tid,
            kind,
        }
    }

    fn switch(ms10: u64, cpu: u16, prev: i32, state: i64, next: i32, stack: &[u64]) -> Event {
        ev(
            ms10,
            prev,
            EventKind::Switch {
                cpu,
                prev,
                prev_comm: format!("t{prev}"),
                prev_state: state,
                next,
                next_comm: format!("t{next}"),
                stack: stack.to_vec(),
            },
        )
    }

    fn waking(ms10: u64, waker: i32, pid: i32, irq: bool) -> Event {
        ev(ms10, waker, EventKind::Waking { pid, irq })
    }

    /// The tracer (tid 1) releasing the gated root.
    fn release() -> Event {
        switch(0, 1, 1, STATE_INTERRUPTIBLE, 0, &[])
    }

    fn add(ms10: u64, tid: i32, ino: u64, index: u64) -> Event {
        ev(
            ms10,
            tid,
            EventKind::PageCacheAdd {
                dev: FS,
                ino,
                index,
                order: 0,
            },
        )
    }

    fn fault(ms10: u64, tid: i32, ino: u64, index: u64) -> Event {
        ev(
            ms10,
            tid,
            EventKind::Fault {
                dev: FS,
                ino,
                index,
            },
        )
    }

    /// `tid` reads `pages` of file `ino` itself at `ms10` and sleeps on them until `wake`.
    fn read_and_wait(ms10: u64, tid: i32, ino: u64, pages: &[u64], wake: u64) -> Vec<Event> {
        let mut v: Vec<Event> = pages.iter().map(|p| add(ms10, tid, ino, *p)).collect();
        v.extend([
            switch(ms10 + 1, 0, tid, STATE_UNINTERRUPTIBLE, 0, &PAGE_WAIT),
            waking(wake, 0, tid, true),
            switch(wake, 0, 0, 0, tid, &[]),
        ]);
        v
    }

    /// A `warmstart run` launch's start: the front's exec, its fork of the prefetcher and,
    /// at `app_exec`, its exec of the app.
    fn front_then_app(app_exec: u64) -> Vec<Event> {
        let exec = |ms10, filename: &str| {
            ev(
                ms10,
                ROOT,
                EventKind::Exec {
                    pid: ROOT,
                    filename: filename.into(),
                },
            )
        };
        vec![
            exec(0, "/bin/warmstart"),
            ev(
                0,
                ROOT,
                EventKind::Fork {
                    parent: ROOT,
                    child: PREFETCHER,
                },
            ),
            exec(app_exec, "/bin/app"),
        ]
    }

    fn plan(entries: Vec<(u64, u64, u64)>) -> Plan {
        let file = |ino: u64| FileId {
            path: format!("/f{ino}").into(),
            dev: FS,
            ino,
            size: 1 << 20,
            mtime_ns: 0,
            kind: FileKind::Regular,
            volatile: false,
        };
        let mut inos: Vec<u64> = entries.iter().map(|e| e.0).collect();
        inos.dedup();
        Plan {
            app: "t".into(),
            created_unix: 0,
            strategy: "trace".into(),
            page_size: 4096,
            files: inos.iter().map(|i| file(*i)).collect(),
            devices: vec![],
            entries: entries
                .iter()
                .map(|(ino, page, pages)| Entry::Data {
                    file: inos.iter().position(|i| i == ino).unwrap() as u32,
                    offset: page * 4096,
                    len: pages * 4096,
                })
                .collect(),
            provenance: Provenance::default(),
            hold_entries: 0,
            segments: vec![],
            t_exp_ms: None,
            notes: vec![],
        }
    }

    fn run(tree: Vec<Event>, system: Vec<Event>, plan: Option<&Plan>, end_ms: u64) -> Attribution {
        run_as(tree, system, plan, end_ms, true)
    }

    fn run_as(
        tree: Vec<Event>,
        system: Vec<Event>,
        plan: Option<&Plan>,
        end_ms: u64,
        prefetched: bool,
    ) -> Attribution {
        let pages = plan.map(PlanPages::of);
        let k = syms();
        let sectors = SectorMap::default();
        attribute(&Input {
            tree: &tree,
            system: &system,
            root: ROOT,
            start: 0,
            end: end_ms * MS,
            prefetched,
            plan: pages.as_ref(),
            sectors: &sectors,
            syms: &k,
            tracer: &HashSet::new(),
        })
    }

    fn get(a: &Attribution, c: Cause) -> f64 {
        a.critical_causes
            .iter()
            .find(|x| x.0 == c)
            .map_or(0.0, |x| x.1)
    }

    fn sums_to_wall(a: &Attribution) {
        let sum: f64 = a.critical.values().sum();
        assert!(
            (sum - a.wall_ms).abs() < 0.01,
            "{sum} vs {}: {a:?}",
            a.wall_ms
        );
    }

    /// The front forks the prefetcher and execs the app; the app waits on a page the
    /// prefetcher inserted, then for a CPU the prefetcher holds, then runs to its exit.
    #[test]
    fn a_wait_on_a_page_in_flight_and_for_the_prefetchers_cpu() {
        let p = plan(vec![(7, 5, 1)]);
        let tree = vec![
            ev(
                0,
                ROOT,
                EventKind::Exec {
                    pid: ROOT,
                    filename: "/usr/bin/warmstart".into(),
                },
            ),
            ev(
                5,
                ROOT,
                EventKind::Fork {
                    parent: ROOT,
                    child: PREFETCHER,
                },
            ),
            ev(
                10,
                ROOT,
                EventKind::Exec {
                    pid: ROOT,
                    filename: "/usr/bin/app".into(),
                },
            ),
            fault(110, ROOT, 7, 5),
            ev(200, ROOT, EventKind::Exit { pid: ROOT }),
        ];
        let system = vec![
            release(),
            waking(1, 1, ROOT, false),
            switch(2, 0, 0, 0, ROOT, &[]),
            switch(6, 1, 0, 0, PREFETCHER, &[]),
            add(20, PREFETCHER, 7, 5),
            // 0.2 .. 11.5 ms on the CPU (1 ms of it the front's), then asleep on the page.
            switch(115, 0, ROOT, STATE_UNINTERRUPTIBLE, 0, &PAGE_WAIT),
            // The prefetcher takes CPU 0 too; the page arrives at 14 ms (an interrupt).
            switch(120, 0, 0, 0, PREFETCHER, &[]),
            waking(140, PREFETCHER, ROOT, true),
            switch(142, 0, PREFETCHER, STATE_INTERRUPTIBLE, ROOT, &[]),
        ];
        let a = run(tree, system, Some(&p), 30);
        assert!((a.wall_ms - 20.0).abs() < 1e-9, "{a:?}");
        sums_to_wall(&a);
        assert!(
            (get(&a, Cause::PagePrefetching) - 2.5).abs() < 1e-6,
            "{a:?}"
        );
        assert!(
            (get(&a, Cause::WaitCpu(Whom::Warmstart)) - 0.2).abs() < 1e-6,
            "{a:?}"
        );
        assert!((get(&a, Cause::FrontOnCpu) - 0.8).abs() < 1e-6, "{a:?}");
        assert!((get(&a, Cause::OnCpu) - (10.5 + 5.8)).abs() < 1e-6, "{a:?}");
        // Gated until the tracer's wakeup.
        let gate = Cause::Front(Box::new(Cause::OtherProcess("t1".into())));
        assert!((get(&a, gate) - 0.1).abs() < 1e-6, "{a:?}");
        assert_eq!(a.prefetched_pages, 1);
        assert_eq!(a.wasted_pages, 0);
        assert_eq!(a.entries.len(), 1);
        assert_eq!(a.entries[0].needed_ms, Some(11.0));
        assert_eq!(a.entries[0].issued_ms, Some(2.0));
    }

    /// A page the app read itself: a miss when the plan lacks it, an inversion when the
    /// plan has it but the prefetch had not issued it.
    #[test]
    fn pages_the_app_read_itself_are_misses_or_inversions() {
        let p = plan(vec![(7, 0, 4)]);
        let mut tree = front_then_app(0);
        tree.extend([
            fault(20, ROOT, 9, 3),
            fault(60, ROOT, 7, 2),
            ev(100, ROOT, EventKind::Exit { pid: ROOT }),
        ]);
        let mut system = vec![switch(0, 0, 0, 0, ROOT, &[])];
        system.extend(read_and_wait(21, ROOT, 9, &[3, 4], 52));
        system.extend(read_and_wait(61, ROOT, 7, &[2], 72));
        // The prefetch issues the rest of the entry afterwards: never needed.
        system.push(add(80, PREFETCHER, 7, 3));
        let a = run(tree, system, Some(&p), 20);
        sums_to_wall(&a);
        assert!((get(&a, Cause::PageMiss) - 3.0).abs() < 1e-6, "{a:?}");
        assert!(
            (get(&a, Cause::PagePlannedReadByApp) - 1.0).abs() < 1e-6,
            "{a:?}"
        );
        assert_eq!(a.missed_pages, 2);
        assert_eq!(a.missed[0].ranges, vec![(3, 4)]);
        assert!((a.missed[0].waited_ms - 3.0).abs() < 1e-6);
        assert_eq!(a.entries[0].state, EntryState::AppFirst);
        // The inversion's wait, on entry 0's page 2, before the prefetch had issued anything.
        assert_eq!(a.late.len(), 1, "{:?}", a.late);
        let l = &a.late[0];
        assert_eq!((l.entry, l.ino, l.page, l.issued_front), (0, 7, 2, None));
        assert!(
            (l.waited_ms - 1.0).abs() < 1e-6 && (l.at_ms - 6.2).abs() < 1e-6,
            "{l:?}"
        );
        assert_eq!(a.wasted_pages, 1);
        assert_eq!(a.app_read_pages, 3);
    }

    /// What warmstart's front reads before the application's exec (its own binary, its
    /// database) is its cost, shown on the critical path, not a miss of the plan.
    #[test]
    fn the_fronts_own_reads_are_not_misses() {
        let p = plan(vec![(7, 0, 4)]);
        let mut tree = front_then_app(30);
        tree.extend([
            fault(50, ROOT, 9, 3),
            ev(100, ROOT, EventKind::Exit { pid: ROOT }),
        ]);
        let mut system = vec![switch(0, 0, 0, 0, ROOT, &[])];
        system.extend(read_and_wait(10, ROOT, 5, &[0, 1], 21));
        system.extend(read_and_wait(51, ROOT, 9, &[3], 62));
        let a = run(tree, system, Some(&p), 10);
        sums_to_wall(&a);
        assert_eq!(a.missed_pages, 1, "{:?}", a.missed);
        assert_eq!(a.missed[0].ino, 9);
        assert_eq!(a.app_read_pages, 1);
        let front_miss = Cause::Front(Box::new(Cause::PageMiss));
        assert!((get(&a, front_miss) - 1.0).abs() < 1e-6, "{a:?}");
        assert!((get(&a, Cause::PageMiss) - 1.0).abs() < 1e-6, "{a:?}");
    }

    /// A parent waiting for its child: the child's time stands in on the critical path.
    #[test]
    fn a_wait_on_a_child_follows_the_child() {
        let child = 101;
        let tree = vec![
            ev(
                10,
                ROOT,
                EventKind::Fork {
                    parent: ROOT,
                    child,
                },
            ),
            ev(90, child, EventKind::Exit { pid: child }),
            ev(100, ROOT, EventKind::Exit { pid: ROOT }),
        ];
        let system = vec![
            switch(0, 0, 0, 0, ROOT, &[]),
            switch(12, 0, ROOT, STATE_INTERRUPTIBLE, child, &[]),
            // The child waits on a directory block, then a lock, then runs.
            switch(30, 0, child, STATE_UNINTERRUPTIBLE, 0, &DIR_WAIT),
            waking(50, 0, child, true),
            switch(50, 0, 0, 0, child, &[]),
            switch(60, 0, child, STATE_UNINTERRUPTIBLE, 0, &LOCK_WAIT),
            waking(70, 0, child, true),
            switch(70, 0, 0, 0, child, &[]),
            waking(90, child, ROOT, false),
            switch(91, 0, child, 0, ROOT, &[]),
        ];
        let mut a = run_as(tree, system, None, 20, false);
        sums_to_wall(&a);
        assert!(
            (get(
                &a,
                Cause::Metadata {
                    kind: MetaKind::Directory,
                    own: false
                }
            ) - 2.0)
                .abs()
                < 1e-6,
            "{a:?}"
        );
        assert!(
            (get(&a, Cause::Lock("ext4_file_write_iter".into())) - 1.0).abs() < 1e-6,
            "{a:?}"
        );
        // Root 1.2 + 0.9, child 1.2 (from its first CPU at 1.2 ms: runnable since the fork at
        // 1.0 ms) + 1.0 + 2.0 on the CPU.
        assert!(
            (get(&a, Cause::OnCpu) - (1.2 + 0.9 + 1.8 + 1.0 + 2.0)).abs() < 1e-6,
            "{a:?}"
        );
        assert!(
            a.critical.keys().all(|k| !k.contains("own threads")),
            "{a:?}"
        );
        a.critical.retain(|_, v| *v > 0.0);
        assert_eq!(a.tasks, 2);
    }

    #[test]
    fn a_request_completion_times_the_entry() {
        // Without a sector map no completion is known; with the prefetch inserting the page
        // after the app needed it, the entry counts as the app's first.
        let p = plan(vec![(7, 0, 1), (7, 1, 1)]);
        let tree = vec![
            fault(50, ROOT, 7, 0),
            fault(60, ROOT, 7, 1),
            ev(100, ROOT, EventKind::Exit { pid: ROOT }),
        ];
        let mut system = vec![
            switch(0, 0, 0, 0, ROOT, &[]),
            add(10, PREFETCHER, 7, 0),
            add(70, PREFETCHER, 7, 1),
        ];
        system.push(ev(
            80,
            0,
            EventKind::BlockComplete(BlockRq {
                dev: FS,
                sector: 0,
                sectors: 8,
                rwbs: "R".into(),
            }),
        ));
        let mut tree = tree;
        tree.insert(
            0,
            ev(
                0,
                ROOT,
                EventKind::Fork {
                    parent: ROOT,
                    child: PREFETCHER,
                },
            ),
        );
        let a = run(tree, system, Some(&p), 20);
        assert_eq!(a.entries[0].state, EntryState::InTime);
        assert_eq!(a.entries[1].state, EntryState::AppFirst);
        assert_eq!(a.entries[1].needed_ms, Some(6.0));
    }
}
