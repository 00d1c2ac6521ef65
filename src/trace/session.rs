//! One traced launch: drop caches, zero ext4 inode readahead, create private instances that
//! follow the command's process tree (set_event_pid + event-fork), start the command, stream
//! the per-CPU raw buffers until the tree exits, goes idle, or times out, then undo every
//! kernel change. Lost events are an error, never silence.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::event::{Decoder, Event, EventKind, BLOCK_EVENTS, LAUNCH_EVENTS, SCHED_EVENTS};
use super::format::{EventFormat, PageHeader};
use super::knobs::KnobGuard;
use super::opens::{OpenMonitor, OpenRecord};
use super::ringbuf::parse_page;
use super::tracefs::{Instance, Tracefs};
use super::TraceError;
use crate::launch::spawn_gated;
use crate::sys::{self, monotonic_ns, Exit, Usage};

/// How a recording is run (FAST's T_idle and T_timeout, and the buffer size).
#[derive(Clone, Debug)]
pub struct TraceConfig {
    /// Per-CPU ring buffer size of the launch instance.
    pub buffer_kb: u32,
    /// Stop when no file access happened for this long (FAST T_idle).
    pub idle: Duration,
    /// Stop after this long regardless (FAST T_timeout).
    pub timeout: Duration,
    /// Drop the page cache first, so the trace sees a cold launch.
    pub drop_caches: bool,
    /// Where the knob-restore journal lives (normally /run/warmstart).
    pub run_dir: PathBuf,
    /// Where ext4's per-filesystem knobs live (normally /sys/fs/ext4).
    pub sys_ext4: PathBuf,
    /// Run the command with stdin, stdout and stderr on /dev/null.
    pub quiet: bool,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            buffer_kb: 16384,
            idle: Duration::from_secs(2),
            timeout: Duration::from_secs(30),
            drop_caches: true,
            run_dir: PathBuf::from(super::knobs::RUN_DIR),
            sys_ext4: PathBuf::from("/sys/fs/ext4"),
            quiet: false,
        }
    }
}

/// Why tracing stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The whole process tree exited.
    Exited,
    /// No file access for `idle`.
    Idle,
    /// `timeout` elapsed.
    Timeout,
}

/// Everything one traced launch produced.
#[derive(Debug)]
pub struct TracedLaunch {
    pub root_pid: i32,
    /// CLOCK_MONOTONIC ns when the command was released to exec.
    pub start_ts: u64,
    /// When tracing stopped.
    pub end_ts: u64,
    /// Launch events of the traced tree, in time order.
    pub events: Vec<Event>,
    /// Block request events of the whole system during the launch, in time order.
    pub block: Vec<Event>,
    pub opens: Vec<OpenRecord>,
    pub opens_overflowed: bool,
    pub ended: EndReason,
    pub exit: Exit,
    pub usage: Usage,
    /// Threads of this (the tracing) process while it traced: its own time on the CPU is
    /// the measurement's.
    pub tracer_tids: Vec<i32>,
}

/// The threads of this process now (`/proc/self/task`).
fn own_tids() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

impl TracedLaunch {
    /// Timestamp of the root's exec (falls back to the release time).
    pub fn exec_ts(&self) -> u64 {
        self.events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::Exec { pid, .. } if *pid == self.root_pid => Some(e.ts),
                _ => None,
            })
            .unwrap_or(self.start_ts)
    }
}

/// Streams one instance's per-CPU buffers into decoded events.
struct Reader {
    fds: Vec<(usize, OwnedFd)>,
    decoder: Decoder,
    header: PageHeader,
    buf: Vec<u8>,
    events: Vec<Event>,
    missed: u64,
}

impl Reader {
    fn new(
        inst: &Instance,
        formats: &[EventFormat],
        header: PageHeader,
    ) -> Result<Reader, TraceError> {
        let mut fds = Vec::new();
        for cpu in inst.cpus() {
            fds.push((cpu, inst.open_raw(cpu)?));
        }
        Ok(Reader {
            fds,
            decoder: Decoder::new(formats)?,
            header,
            buf: vec![0u8; inst.subbuf_bytes()],
            events: Vec::new(),
            missed: 0,
        })
    }

    /// Read everything available now; returns the newest file-access timestamp seen.
    fn drain(&mut self) -> Result<Option<u64>, TraceError> {
        let mut newest = None;
        for (cpu, fd) in &self.fds {
            loop {
                let n = match nix::unistd::read(fd, &mut self.buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(nix::errno::Errno::EAGAIN) => break,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(TraceError::Format(format!(
                            "reading cpu{cpu} ring buffer: {e}"
                        )))
                    }
                };
                let mut err = None;
                let events = &mut self.events;
                let info = parse_page(&self.buf[..n], &self.header, |ts, rec| {
                    match self.decoder.decode(ts, rec) {
                        Ok(Some(mut e)) => {
                            if is_access(&e.kind) {
                                newest = Some(newest.map_or(e.ts, |t: u64| t.max(e.ts)));
                            }
                            match &mut e.kind {
                                EventKind::Switch { cpu: c, .. } => *c = *cpu as u16,
                                EventKind::Stack(frames) => {
                                    // A stack follows its event in the same CPU's buffer,
                                    // and this loop reads one CPU at a time.
                                    if let Some(Event {
                                        kind: EventKind::Switch { stack, .. },
                                        ..
                                    }) = events.last_mut()
                                    {
                                        *stack = std::mem::take(frames);
                                    }
                                    return;
                                }
                                _ => {}
                            }
                            events.push(e)
                        }
                        Ok(None) => {}
                        Err(e) => err = Some(e),
                    }
                })?;
                if let Some(e) = err {
                    return Err(e);
                }
                self.missed += info.missed.unwrap_or(0);
            }
        }
        Ok(newest)
    }

    fn into_sorted(mut self) -> Vec<Event> {
        self.events.sort_by_key(|e| e.ts);
        self.events
    }
}

fn is_access(k: &EventKind) -> bool {
    matches!(
        k,
        EventKind::PageCacheAdd { .. }
            | EventKind::MapPages { .. }
            | EventKind::Fault { .. }
            | EventKind::GetPages { .. }
    )
}

/// The events a recording can do without: ext4's (only when ext4 is built in), and the
/// filemap access events and synchronous readahead (Linux 6.12 or so; older kernels have only
/// the page-cache inserts, and a launch is then learned from those: `RawRun::from_trace`).
pub fn optional_event(system: &str, event: &str) -> bool {
    system == "ext4"
        || ACCESS_EVENTS.contains(&(system, event))
        || (system, event) == ("readahead", "page_cache_sync_ra")
}

/// The filemap access events this kernel lacks (or `WARMSTART_HIDE_EVENTS` hides): empty on
/// a kernel where learning sees every page a launch uses, not only those it reads from disk.
pub fn missing_access_events(tfs: &Tracefs) -> Vec<String> {
    ACCESS_EVENTS
        .iter()
        .filter(|(s, e)| tfs.event_format(s, e).is_err())
        .map(|(s, e)| format!("{s}:{e}"))
        .collect()
}

fn formats(tfs: &Tracefs, list: &[(&str, &str)]) -> Result<Vec<EventFormat>, TraceError> {
    let mut out = Vec::new();
    for (sys, ev) in list {
        match tfs.event_format(sys, ev) {
            Ok(f) => out.push(f),
            Err(TraceError::MissingEvent(name)) if optional_event(sys, ev) => {
                tracing::debug!("tracepoint {name} absent; not tracing it")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

fn configure(
    inst: &Instance,
    formats: &[EventFormat],
    buffer_kb: u32,
    systems: &[(&str, &str)],
) -> Result<(), TraceError> {
    inst.write("trace_clock", "mono")?;
    inst.write("buffer_size_kb", &buffer_kb.to_string())?;
    // Producer/consumer mode: a full buffer drops new events and counts them, which we check.
    inst.write("options/overwrite", "0")?;
    for (sys, ev) in systems {
        // ftrace entries (kernel_stack) are written by triggers, not enabled.
        if *sys != "ftrace" && formats.iter().any(|f| f.name == *ev) {
            inst.enable_event(sys, ev)?;
        }
    }
    Ok(())
}

/// The private instances, readers and open monitor of one recording. Fields drop in this
/// order: the readers' descriptors must be closed before their instance can be removed.
struct Tracing {
    reader: Reader,
    blk_reader: Option<Reader>,
    inst: Instance,
    blk: Option<Instance>,
    monitor: OpenMonitor,
    knobs: Option<KnobGuard>,
}

/// What a finished recording collected.
struct Collected {
    events: Vec<Event>,
    block: Vec<Event>,
    opens: Vec<OpenRecord>,
    opens_overflowed: bool,
}

impl Tracing {
    /// Set up (tracing still off): drop caches and zero ext4 inode readahead when asked,
    /// create the instances, start the open monitor.
    fn start(
        tfs: &Tracefs,
        cfg: &TraceConfig,
        with_block: bool,
        change_knobs: bool,
    ) -> Result<Tracing, TraceError> {
        Tracing::start_with(tfs, cfg, with_block, change_knobs, false)
    }

    /// `start`; with `sched`, the unfiltered instance also records every switch (with the
    /// kernel stack of each uninterruptible sleep), wakeup and page-cache insert (`explain`).
    fn start_with(
        tfs: &Tracefs,
        cfg: &TraceConfig,
        with_block: bool,
        change_knobs: bool,
        sched: bool,
    ) -> Result<Tracing, TraceError> {
        let launch_formats = formats(tfs, LAUNCH_EVENTS)?;
        let header = tfs.page_header()?;
        if cfg.drop_caches {
            sys::drop_caches()
                .map_err(|e| TraceError::io(Path::new("/proc/sys/vm/drop_caches"), e))?;
        }
        let knobs = if change_knobs {
            Some(KnobGuard::inode_readahead_off(&cfg.sys_ext4, &cfg.run_dir)?)
        } else {
            None
        };
        let tag = format!("{}", monotonic_ns() % 1_000_000_000);
        let inst = tfs.create_instance(&format!("{tag}-launch"))?;
        configure(&inst, &launch_formats, cfg.buffer_kb, LAUNCH_EVENTS)?;
        inst.write("options/event-fork", "1")?;
        let reader = Reader::new(&inst, &launch_formats, header)?;
        let (blk, blk_reader) = if with_block {
            let mut list: Vec<(&str, &str)> = BLOCK_EVENTS.to_vec();
            if sched {
                list.extend(SCHED_EVENTS);
            }
            let block_formats = formats(tfs, &list)?;
            let blk = tfs.create_instance(&format!("{tag}-block"))?;
            // Every switch of the machine, not only the launch's: a larger buffer.
            let kb = if sched {
                cfg.buffer_kb.max(16384)
            } else {
                (cfg.buffer_kb / 4).max(1024)
            };
            configure(&blk, &block_formats, kb, &list)?;
            if sched {
                // The stack tells what an uninterruptible sleep waited for (a page, a
                // directory block, an inode, a lock); only those sleeps need one.
                blk.set_trigger(
                    "sched",
                    "sched_switch",
                    &format!(
                        "stacktrace if prev_state & {}",
                        super::event::STATE_UNINTERRUPTIBLE
                    ),
                )?;
            }
            let r = Reader::new(&blk, &block_formats, header)?;
            (Some(blk), Some(r))
        } else {
            (None, None)
        };
        // Marked only when following starts: until then the system's opens cost nothing.
        let monitor = OpenMonitor::prepare()?;
        Ok(Tracing {
            inst,
            blk,
            reader,
            blk_reader,
            monitor,
            knobs,
        })
    }

    /// Follow `pid` with the threads and descendants it has now, and everything they fork
    /// from now on. `set_event_pid` filters by thread, and `event-fork` adds only the tasks a
    /// followed one forks after it is followed: a tracer attached after the exec (the
    /// daemon, 6-20 ms later) otherwise missed every thread started before, such as the one
    /// `java` runs the JVM in from ~5 ms after its exec: the daemon's plan of the suite's
    /// java held 19.8 MiB against `record`'s 47.5 (docs/measurements.md, 2026-11-28, second
    /// entry).
    fn follow(&mut self, pid: i32) -> Result<(), TraceError> {
        self.monitor.begin()?;
        let mut followed = sys::tasks_of_tree(pid, FOLLOW_MAX_PROCESSES);
        if !followed.contains(&pid) {
            followed.insert(0, pid);
        }
        self.inst.write("set_event_pid", &pid_list(&followed))?;
        self.inst.set_on(true)?;
        if let Some(b) = &self.blk {
            b.set_on(true)?;
        }
        list_until_settled(&self.inst, "set_event_pid", &mut followed, || {
            sys::tasks_of_tree(pid, FOLLOW_MAX_PROCESSES)
        })
    }

    /// Read what is available; returns the newest file-access timestamp seen.
    fn poll(&mut self) -> Result<Option<u64>, TraceError> {
        let t = self.reader.drain()?;
        if let Some(r) = self.blk_reader.as_mut() {
            r.drain()?;
        }
        Ok(t)
    }

    fn off(&self) {
        let _ = self.inst.set_on(false);
        if let Some(b) = &self.blk {
            let _ = b.set_on(false);
        }
    }

    /// Stop, drain, check for lost events, remove the instances, restore the knobs.
    fn finish(mut self, buffer_kb: u32) -> Result<Collected, TraceError> {
        self.off();
        self.poll()?;
        let mut lost = self.reader.missed;
        for cpu in self.inst.cpus() {
            lost += self.inst.cpu_stats(cpu)?.lost();
        }
        let mut blk_lost = self.blk_reader.as_ref().map_or(0, |r| r.missed);
        if let Some(b) = &self.blk {
            for cpu in b.cpus() {
                blk_lost += b.cpu_stats(cpu)?.lost();
            }
        }
        let Tracing {
            inst,
            blk,
            reader,
            blk_reader,
            monitor,
            knobs,
        } = self;
        let events = reader.into_sorted();
        let block = blk_reader.map(Reader::into_sorted).unwrap_or_default();
        // Readers are gone; the instances can be removed.
        drop(inst);
        drop(blk);
        if let Some(mut k) = knobs {
            if let Err(e) = k.restore() {
                tracing::error!("restoring inode_readahead_blks: {e}");
            }
        }
        let (opens, opens_overflowed) = monitor.finish()?;
        if lost > 0 {
            return Err(TraceError::LostEvents { lost, buffer_kb });
        }
        if blk_lost > 0 {
            tracing::warn!("the block-request trace lost {blk_lost} events; device timings of this run are incomplete");
        }
        if opens_overflowed {
            tracing::warn!("the fanotify queue overflowed; some files may stay unresolved");
        }
        Ok(Collected {
            events,
            block,
            opens,
            opens_overflowed,
        })
    }
}

/// Why to stop streaming, checked between drains.
fn stop_reason(now: u64, start: u64, last_access: u64, cfg: &TraceConfig) -> Option<EndReason> {
    if now.saturating_sub(last_access) >= cfg.idle.as_nanos() as u64 {
        Some(EndReason::Idle)
    } else if now.saturating_sub(start) >= cfg.timeout.as_nanos() as u64 {
        Some(EndReason::Timeout)
    } else {
        None
    }
}

/// Trace one launch of `exe argv...`. `interrupt` holds a signal number when the user asked
/// to stop (Ctrl-C): the command's tree is terminated and everything is cleaned up.
pub fn trace_launch(
    tfs: &Tracefs,
    exe: &Path,
    argv: &[OsString],
    cfg: &TraceConfig,
    interrupt: &AtomicUsize,
) -> Result<TracedLaunch, TraceError> {
    trace_launch_with(tfs, exe, argv, cfg, interrupt, true, false)
}

/// A launch traced for `explain`: as it would run untraced (no kernel setting changed, the
/// cache dropped if `cfg` says so), with every switch, wakeup and page-cache insert of the
/// machine recorded beside the tree's own events (`TracedLaunch::block`).
pub fn trace_explained(
    tfs: &Tracefs,
    exe: &Path,
    argv: &[OsString],
    cfg: &TraceConfig,
    interrupt: &AtomicUsize,
) -> Result<TracedLaunch, TraceError> {
    trace_launch_with(tfs, exe, argv, cfg, interrupt, false, true)
}

fn trace_launch_with(
    tfs: &Tracefs,
    exe: &Path,
    argv: &[OsString],
    cfg: &TraceConfig,
    interrupt: &AtomicUsize,
    change_knobs: bool,
    sched: bool,
) -> Result<TracedLaunch, TraceError> {
    let mut tr = Tracing::start_with(tfs, cfg, true, change_knobs, sched)?;
    let child = spawn_gated(exe, argv, cfg.quiet)?;
    let root = child.pid();
    tr.follow(root)?;
    let tracer_tids = own_tids();
    let start_ts = monotonic_ns();
    child.release()?;

    let mut last_access = start_ts;
    let mut root_exit: Option<(Exit, Usage)> = None;
    let ended;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(t) = tr.poll()? {
            last_access = last_access.max(t);
        }
        let mut tree_gone = false;
        loop {
            match sys::wait4(-1, true) {
                Ok(Some((pid, exit, usage))) => {
                    if pid == root {
                        root_exit = Some((exit, usage));
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    // ECHILD: the root and every descendant (we are their subreaper) are gone.
                    tree_gone = true;
                    break;
                }
            }
        }
        if let sig @ 1.. = interrupt.load(Ordering::SeqCst) {
            tr.off();
            kill_tree(root);
            return Err(TraceError::Interrupted(sig as i32));
        }
        if tree_gone {
            ended = EndReason::Exited;
            break;
        }
        if let Some(r) = stop_reason(monotonic_ns(), start_ts, last_access, cfg) {
            ended = r;
            break;
        }
    }
    let end_ts = monotonic_ns();
    let c = match tr.finish(cfg.buffer_kb) {
        Ok(c) => c,
        Err(e) => {
            kill_tree(root);
            return Err(e);
        }
    };
    let (exit, usage) = match root_exit {
        Some(x) => x,
        // Explaining a launch that is still running at the timeout (a GUI app): the window
        // traced is the launch; the app is closed.
        None if sched => {
            kill_tree(root);
            (Exit::Signal(libc::SIGTERM), Usage::default())
        }
        // The timeout is the recording's upper bound: a command still running then (a
        // server, `sleep infinity`) is closed, as the user asked for the launch to end there;
        // waiting for it would wait forever (issue #30).
        None if ended == EndReason::Timeout => {
            tracing::info!("launch recorded (timeout reached); closing the command");
            kill_tree(root);
            (Exit::Signal(libc::SIGTERM), Usage::default())
        }
        None => {
            if ended != EndReason::Exited {
                tracing::info!(
                    "launch recorded (no file access for the idle period); waiting for the \
                     command to exit (close it to go on)"
                );
            }
            wait_root(root, interrupt)?
        }
    };
    // What the command left running after it exited (it daemonised: the copies were adopted
    // by us, its subreaper) is closed: a learning run must not leave a copy behind per run
    // (issue #30, item 12), nor have it read during the next run's trace.
    let left: Vec<i32> = sys::descendants(std::process::id() as i32)
        .into_iter()
        .filter(|p| *p != std::process::id() as i32)
        .collect();
    if !left.is_empty() {
        tracing::info!(
            "closing {} process(es) the command left running after it exited",
            left.len()
        );
        kill_tree(root);
    }
    Ok(TracedLaunch {
        root_pid: root,
        start_ts,
        end_ts,
        events: c.events,
        block: c.block,
        opens: c.opens,
        opens_overflowed: c.opens_overflowed,
        ended,
        exit,
        usage,
        tracer_tids,
    })
}

/// A tracing setup made in advance (instances configured, open monitor running, tracing
/// off), so that following a just-exec'd process costs two writes to tracefs.
pub struct Prepared(Tracing);

impl Prepared {
    /// For attaching to running processes: no cache drop, no kernel knob change.
    pub fn new(tfs: &Tracefs, cfg: &TraceConfig) -> Result<Prepared, TraceError> {
        Ok(Prepared(Tracing::start(tfs, cfg, false, false)?))
    }
}

/// Trace a process that is already running (the daemon learning from an ordinary launch):
/// caches are not dropped and no kernel knob changes; what happened before this call is
/// missed (the daemon calls it within a millisecond of the exec). Ends when the process
/// exits, after `cfg.idle` without file access, at `cfg.timeout`, or when `stop` is set.
pub fn trace_attached(
    tfs: &Tracefs,
    pid: i32,
    exec_ts: u64,
    cfg: &TraceConfig,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<TracedLaunch, TraceError> {
    trace_prepared(Prepared::new(tfs, cfg)?, pid, exec_ts, cfg, stop)
}

/// `trace_attached` with a setup made in advance.
pub fn trace_prepared(
    prepared: Prepared,
    pid: i32,
    exec_ts: u64,
    cfg: &TraceConfig,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<TracedLaunch, TraceError> {
    prepared.attach(pid)?.trace(exec_ts, cfg, stop)
}

/// A prepared setup already following a process: events are being recorded. Dropping it
/// abandons the recording (and removes its instance).
pub struct Attached {
    tr: Tracing,
    pid: i32,
    /// What the process had mapped when tracing began (`trace::mapped`).
    early: Vec<super::mapped::MappedFile>,
    /// The program it was running then (`/proc/PID/exe`).
    exe: String,
}

impl Prepared {
    /// Start following `pid` now; decide later whether to keep the recording. What it
    /// mapped before (its first faults, missed) is read from its page tables once it is
    /// followed. Setting the pid filter takes under a millisecond, but 30-200 ms while any
    /// process makes or removes a tracefs instance (the kernel's tracing locks), long
    /// enough for a script front to run its helpers and exec its program, whose mappings
    /// replace the interpreter's: meanwhile the tree's mappings are sampled every few ms.
    pub fn attach(self, pid: i32) -> Result<Attached, TraceError> {
        let mut tr = self.0;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let done = std::sync::atomic::AtomicBool::new(false);
        let (followed, sampled) = std::thread::scope(|s| {
            let sampler = std::thread::Builder::new()
                .name("warmstart-maps".into())
                .spawn_scoped(s, || sample_while(pid, &done));
            let r = tr.follow(pid);
            done.store(true, Ordering::SeqCst);
            let sampled = match sampler {
                Ok(h) => {
                    h.thread().unpark();
                    h.join().unwrap_or_default()
                }
                Err(_) => Vec::new(),
            };
            (r, sampled)
        });
        followed?;
        let early =
            super::mapped::merge(sampled, super::mapped::mapped_files(pid, sys::page_size()));
        Ok(Attached {
            tr,
            pid,
            early,
            exe,
        })
    }
}

/// Most processes of a launch's tree whose threads are followed at the attach (`sys::tree_of`).
const FOLLOW_MAX_PROCESSES: usize = 64;
/// Most times the tasks are listed again for threads started while a pid filter was written.
const FOLLOW_RESCANS: usize = 4;

/// Pids as `set_event_pid` takes them: separated by spaces.
fn pid_list(pids: &[i32]) -> String {
    pids.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// How often the tree's mappings are read while the pid filter is being set.
const SAMPLE_EVERY: Duration = Duration::from_millis(3);

/// The file pages `pid` and its descendants map, sampled every `SAMPLE_EVERY` until `done`
/// (nothing if it is set within the first period, the usual case).
fn sample_while(pid: i32, done: &std::sync::atomic::AtomicBool) -> Vec<super::mapped::MappedFile> {
    let mut seen = Vec::new();
    loop {
        std::thread::park_timeout(SAMPLE_EVERY);
        if done.load(Ordering::SeqCst) {
            return seen;
        }
        for p in sys::tree_of(pid, 64) {
            seen = super::mapped::merge(seen, super::mapped::mapped_files(p, sys::page_size()));
        }
    }
}

impl Attached {
    /// Record until the process exits, goes idle, times out, or `stop` is set.
    pub fn trace(
        self,
        exec_ts: u64,
        cfg: &TraceConfig,
        stop: &std::sync::atomic::AtomicBool,
    ) -> Result<TracedLaunch, TraceError> {
        let mut t = stream_attached(self.tr, self.pid, exec_ts, cfg, stop)?;
        add_early(&mut t, &self.early, exec_ts, &self.exe);
        Ok(t)
    }
}

/// Pages mapped before tracing began count as used at the exec, ahead of every traced
/// access (fault-around events, which is what a fault on a cached page looks like), and
/// their files as opened by the process (the open-file monitor started after they were).
/// The exec the tracer was attached for (the daemon's exec event, missed by the trace) is
/// recorded first, so that it is the launch's exec: a script front's interpreter that execs
/// the program later (R, soffice, chromium) is the launch, not a launcher whose reads are
/// dropped (`RawRun::from_trace`).
pub(crate) fn add_early(
    t: &mut TracedLaunch,
    early: &[super::mapped::MappedFile],
    exec_ts: u64,
    exe: &str,
) {
    let mut events = vec![Event {
        ts: exec_ts,
        tid: t.root_pid,
        kind: EventKind::Exec {
            pid: t.root_pid,
            filename: exe.to_string(),
        },
    }];
    for f in early {
        for &(index, last) in &f.runs {
            events.push(Event {
                ts: exec_ts,
                tid: t.root_pid,
                kind: EventKind::MapPages {
                    dev: f.dev,
                    ino: f.ino,
                    index,
                    last,
                },
            });
        }
        t.opens.push(OpenRecord {
            t: exec_ts,
            pid: t.root_pid,
            dev: f.dev,
            ino: f.ino,
            is_dir: false,
            path: f.path.clone(),
        });
    }
    events.append(&mut t.events);
    t.events = events;
}

fn stream_attached(
    mut tr: Tracing,
    pid: i32,
    exec_ts: u64,
    cfg: &TraceConfig,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<TracedLaunch, TraceError> {
    let start_ts = exec_ts.min(monotonic_ns());
    let pidfd = sys::pidfd_open(pid).ok();
    let mut last_access = monotonic_ns();
    let ended;
    let mut end_ts;
    loop {
        // Sleep on the process's exit (or 20 ms) rather than polling blindly.
        let gone = match &pidfd {
            Some(fd) => {
                use std::os::fd::AsFd;
                let mut fds = [nix::poll::PollFd::new(
                    fd.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(20u16)), Ok(n) if n > 0)
            }
            None => {
                std::thread::sleep(Duration::from_millis(20));
                !Path::new(&format!("/proc/{pid}")).exists()
            }
        };
        // Before the buffers are read: the launch's end, to the millisecond, for the daemon
        // to time a learning launch by (reading them can take milliseconds more).
        end_ts = monotonic_ns();
        if let Some(t) = tr.poll()? {
            last_access = last_access.max(t);
        }
        if stop.load(Ordering::SeqCst) {
            tr.off();
            return Err(TraceError::Interrupted(libc::SIGTERM));
        }
        if gone {
            ended = EndReason::Exited;
            break;
        }
        if let Some(r) = stop_reason(monotonic_ns(), start_ts, last_access, cfg) {
            ended = r;
            end_ts = monotonic_ns();
            break;
        }
    }
    let c = tr.finish(cfg.buffer_kb)?;
    Ok(TracedLaunch {
        root_pid: pid,
        start_ts,
        end_ts,
        events: c.events,
        block: c.block,
        opens: c.opens,
        opens_overflowed: c.opens_overflowed,
        ended,
        exit: Exit::Code(0),
        usage: Usage::default(),
        tracer_tids: own_tids(),
    })
}

/// Wait for the root to exit, still honouring Ctrl-C.
fn wait_root(root: i32, interrupt: &AtomicUsize) -> Result<(Exit, Usage), TraceError> {
    loop {
        match sys::wait4(root, true) {
            Ok(Some((_, exit, usage))) => return Ok((exit, usage)),
            Ok(None) => {}
            Err(e) => return Err(TraceError::io(Path::new("wait4"), e)),
        }
        if let sig @ 1.. = interrupt.load(Ordering::SeqCst) {
            kill_tree(root);
            return Err(TraceError::Interrupted(sig as i32));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Terminate `root` and every process below it (and any orphan we adopted as subreaper):
/// SIGTERM, a grace period, then SIGKILL; reaps them all.
pub fn kill_tree(root: i32) {
    let me = std::process::id() as i32;
    let targets = |_: ()| -> Vec<i32> {
        let mut pids = crate::sys::descendants(me);
        pids.retain(|p| *p != me);
        if !pids.contains(&root) && std::path::Path::new(&format!("/proc/{root}")).exists() {
            pids.push(root);
        }
        pids
    };
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        for p in targets(()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(p, sig) };
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(3);
        while std::time::Instant::now() < deadline {
            match sys::wait4(-1, true) {
                Ok(Some(_)) => continue,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => return,
            }
        }
    }
}

/// The whole system's page-cache inserts (each a read from disk, of file data or of a block
/// device's metadata) and file openings, streamed: ClusterFetch's I/O miner reads these.
/// Fields drop in this order: the reader's descriptors before the instance.
pub struct SystemTrace {
    reader: Reader,
    inst: Instance,
    monitor: OpenMonitor,
    lost: u64,
}

const SYSTEM_EVENTS: &[(&str, &str)] = &[("filemap", "mm_filemap_add_to_page_cache")];

impl SystemTrace {
    /// Start tracing every page-cache insert of the machine into a `buffer_kb` per-CPU ring,
    /// and every opening on block-backed filesystems.
    pub fn start(tfs: &Tracefs, buffer_kb: u32) -> Result<SystemTrace, TraceError> {
        let fmts = formats(tfs, SYSTEM_EVENTS)?;
        let header = tfs.page_header()?;
        let tag = format!("{}-miner", monotonic_ns() % 1_000_000_000);
        let inst = tfs.create_instance(&tag)?;
        configure(&inst, &fmts, buffer_kb, SYSTEM_EVENTS)?;
        exclude_own(&inst);
        let reader = Reader::new(&inst, &fmts, header)?;
        let mut monitor = OpenMonitor::prepare_every()?;
        monitor.begin()?;
        inst.set_on(true)?;
        Ok(SystemTrace {
            reader,
            inst,
            monitor,
            lost: 0,
        })
    }

    /// The inserts and openings since the last call, each in time order (CLOCK_MONOTONIC).
    pub fn poll(&mut self) -> Result<(Vec<Event>, Vec<OpenRecord>), TraceError> {
        self.reader.drain()?;
        let mut events = std::mem::take(&mut self.reader.events);
        events.sort_by_key(|e| e.ts);
        let (opens, overflowed) = self.monitor.take();
        if overflowed {
            self.lost += 1;
        }
        Ok((events, opens))
    }

    /// Events lost so far (ring buffer full, fanotify queue overflowed).
    pub fn lost(&self) -> u64 {
        let mut n = self.reader.missed + self.lost;
        for cpu in self.inst.cpus() {
            n += self.inst.cpu_stats(cpu).map_or(0, |s| s.lost());
        }
        n
    }
}

/// Keep this process's own page-cache inserts out of a system-wide trace, in the kernel
/// (`set_event_notrace_pid`; with `event-fork`, every thread its threads start later too,
/// and any process they fork: the daemon and `bursts mine` start none while they mine).
/// The miner drops them anyway (`LiveMiner::reader_pid`), and while the daemon prefetches a
/// launch they are most of the machine's inserts (chromium's plan, ~62K pages, against the
/// ~10K its prefetched launch reads itself): each was written to the ring, read, parsed and
/// dropped beside the launch it served. Over a cold chromium launch the miner's thread took
/// 16.8 ms of CPU before, 1.7 after, the whole daemon ~120 ms before and ~90 after
/// (docs/measurements.md, 2026-12-08). Best effort: where this fails (an older kernel, a pid
/// namespace whose numbers are not the kernel's) the miner still drops them itself.
fn exclude_own(inst: &Instance) {
    // In a pid namespace of its own (NSpid lists more than one number) this process's ids
    // are not those the kernel's filter compares.
    let in_initial_ns =
        sys::status_field(None, "NSpid").is_some_and(|v| v.split_whitespace().count() == 1);
    if !in_initial_ns {
        return;
    }
    let r = inst.write("options/event-fork", "1").and_then(|()| {
        list_until_settled(inst, "set_event_notrace_pid", &mut Vec::new(), own_tids)
    });
    if let Err(e) = r {
        tracing::debug!("the system trace keeps this process's own reads: {e}");
    }
}

/// Add to a pid filter of `inst` (`set_event_pid`, `set_event_notrace_pid`) every task
/// `tasks` lists that `listed` lacks, and look again until nothing new turns up: a thread
/// started between a listing and its write was started by one not yet listed.
fn list_until_settled(
    inst: &Instance,
    filter: &str,
    listed: &mut Vec<i32>,
    tasks: impl Fn() -> Vec<i32>,
) -> Result<(), TraceError> {
    for _ in 0..=FOLLOW_RESCANS {
        let new: Vec<i32> = tasks()
            .into_iter()
            .filter(|t| !listed.contains(t))
            .collect();
        if new.is_empty() {
            break;
        }
        inst.append(filter, &pid_list(&new))?;
        listed.extend(new);
    }
    Ok(())
}

/// Accesses (faults, fault-around, read lookups) to a few files by any process, for as long
/// as it lives: how much of a prefetched burst was used.
pub struct AccessWatch {
    reader: Reader,
    inst: Instance,
}

const ACCESS_EVENTS: &[(&str, &str)] = &[
    ("filemap", "mm_filemap_fault"),
    ("filemap", "mm_filemap_map_pages"),
    ("filemap", "mm_filemap_get_pages"),
];

impl AccessWatch {
    /// Make the instance now, tracing nothing yet: arming it later costs a few writes, so
    /// that a watch can start at the moment it is needed.
    pub fn prepare(tfs: &Tracefs) -> Result<AccessWatch, TraceError> {
        let fmts = formats(tfs, ACCESS_EVENTS)?;
        if fmts.is_empty() {
            // Without access events there is nothing to judge a burst by.
            return Err(TraceError::MissingEvent("filemap:mm_filemap_fault".into()));
        }
        let header = tfs.page_header()?;
        let tag = format!("{}-check", monotonic_ns() % 1_000_000_000);
        // A check can be skipped (its burst is prefetched unchecked); a launch's learning
        // trace cannot wait: one instance is always left for it. Without this the daemon's
        // checks and their prepared watch held every instance and an app launched every few
        // seconds was never learned (docs/measurements.md, 2026-11-26, fifth entry).
        let inst = tfs.create_instance_leaving(&tag, 1)?;
        configure(&inst, &fmts, 1024, ACCESS_EVENTS)?;
        let reader = Reader::new(&inst, &fmts, header)?;
        Ok(AccessWatch { reader, inst })
    }

    /// Start watching the files with these inode numbers (a kernel-side filter, so the rest
    /// of the system's accesses cost nothing here).
    pub fn arm(&self, inos: &[u64]) -> Result<(), TraceError> {
        let filter = inos
            .iter()
            .map(|i| format!("i_ino == {i}"))
            .collect::<Vec<_>>()
            .join(" || ");
        if !filter.is_empty() {
            for (sys, ev) in ACCESS_EVENTS {
                self.inst
                    .write(&format!("events/{sys}/{ev}/filter"), &filter)?;
            }
        }
        self.inst.set_on(true)
    }

    /// `prepare` and `arm` at once.
    pub fn start(tfs: &Tracefs, inos: &[u64]) -> Result<AccessWatch, TraceError> {
        let w = AccessWatch::prepare(tfs)?;
        w.arm(inos)?;
        Ok(w)
    }

    /// Everything seen so far.
    pub fn events(&mut self) -> Result<Vec<Event>, TraceError> {
        self.reader.drain()?;
        Ok(std::mem::take(&mut self.reader.events))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::time::Instant;

    use crate::sys::Dev;

    /// Tracefs, or None with the skip said: these tests trace, which needs root.
    fn tracefs_as_root() -> Option<Tracefs> {
        if !nix::unistd::geteuid().is_root() {
            crate::testutil::skip("tracing needs root");
            return None;
        }
        let t = Tracefs::open().ok();
        if t.is_none() {
            crate::testutil::skip("tracefs is not available");
        }
        t
    }

    #[test]
    fn pid_lists_are_separated_by_spaces() {
        assert_eq!(pid_list(&[7, 42, 9]), "7 42 9");
        assert_eq!(pid_list(&[]), "");
    }

    /// The system-wide trace (the burst miner's) leaves this process's own reads out in the
    /// kernel, those of a thread started after it began too, and keeps another process's:
    /// the daemon's prefetches are its own.
    #[test]
    fn a_system_trace_leaves_out_this_processs_own_reads() {
        let Some(tfs) = tracefs_as_root() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| {
            let f = dir.path().join(name);
            std::fs::write(&f, vec![7u8; 256 << 10]).unwrap();
            crate::testutil::evict(&f);
            let md = std::fs::metadata(&f).unwrap();
            (f, Dev::from_user(md.dev()), md.ino())
        };
        let (mine, m_dev, m_ino) = file("read-by-this-process");
        let (later, l_dev, l_ino) = file("read-by-a-later-thread");
        let (theirs, t_dev, t_ino) = file("read-by-another-process");
        // Started before the trace (what this process forks later is left out too), it
        // reads once told to.
        let script = format!("read go; cat '{}' > /dev/null", theirs.display());
        let mut other = std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut trace = SystemTrace::start(&tfs, 1024).unwrap();
        std::fs::read(&mine).unwrap();
        std::thread::spawn(move || std::fs::read(&later).unwrap())
            .join()
            .unwrap();
        use std::io::Write;
        other.stdin.take().unwrap().write_all(b"go\n").unwrap();
        assert!(other.wait().unwrap().success());
        let (mut seen_mine, mut seen_theirs) = (false, false);
        let t = Instant::now();
        while !seen_theirs && t.elapsed() < Duration::from_secs(10) {
            let (events, _) = trace.poll().unwrap();
            for e in events {
                if let EventKind::PageCacheAdd { dev, ino, .. } = e.kind {
                    seen_mine |= (dev, ino) == (m_dev, m_ino) || (dev, ino) == (l_dev, l_ino);
                    seen_theirs |= (dev, ino) == (t_dev, t_ino);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(seen_theirs, "another process's reads are not in the trace");
        assert!(!seen_mine, "this process's own reads are in the trace");
    }

    /// A tracer attached after the exec follows what the process started before (a thread,
    /// here a subshell forked at once), not only the process itself: `cat` is forked by the
    /// subshell after the attach, and its reads are in the trace. With the pid alone in the
    /// filter the subshell and its `cat` went untraced.
    #[test]
    fn an_attached_trace_follows_what_the_process_started_before() {
        let Some(tfs) = tracefs_as_root() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("read-later");
        std::fs::write(&file, vec![7u8; 64 << 10]).unwrap();
        let md = std::fs::metadata(&file).unwrap();
        let (dev, ino) = (Dev::from_user(md.dev()), md.ino());
        let script = format!("(sleep 1; cat '{}' > /dev/null) & wait", file.display());
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // The subshell is forked first thing; wait until it is there.
        let t = Instant::now();
        while sys::tree_of(pid, 8).len() < 2 && t.elapsed() < Duration::from_secs(1) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let cfg = TraceConfig {
            drop_caches: false,
            idle: Duration::from_secs(5),
            timeout: Duration::from_secs(10),
            quiet: true,
            ..TraceConfig::default()
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let traced = trace_attached(&tfs, pid, monotonic_ns(), &cfg, &stop);
        let _ = child.wait();
        let traced = traced.unwrap();
        let read = traced.events.iter().any(|e| {
            e.kind
                .used_pages()
                .is_some_and(|(d, i, _, _)| d == dev && i == ino)
        });
        assert!(read, "the subshell's cat is not in the trace");
    }
}
