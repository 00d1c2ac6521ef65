//! Serving one launch: its plan prefetched beside it, where the launch and the prefetcher
//! run meanwhile (`placement`), and the launch watched until the plan is issued or the
//! application exits. One orchestration for `run`'s detached prefetcher (and so the bench's
//! launches), `run --stats` and the daemon: what one gives a launch, all give it.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::placement::{self, Placement};
use crate::plan::Plan;
use crate::prefetch::{PrefetchOptions, PrefetchReport, Running};
use crate::sys;

/// How long after its start a launch still counts as timed (FAST's T_timeout): a longer-lived
/// process (an interactive app) gives no launch time.
pub const TIMED_LAUNCH: Duration = Duration::from_secs(30);

/// How long after its start a launch is watched closely for a warm start (the plan's first
/// data found in memory), to give the application its CPUs back at once.
const WARM_WATCH: Duration = Duration::from_millis(100);

/// A launch being served.
pub struct Serving {
    pid: i32,
    pidfd: Option<OwnedFd>,
    running: Running,
    /// Fires once the plan's head is in memory; taken by a caller that waits elsewhere.
    head: Option<Receiver<()>>,
    place: Option<(Placement, placement::Launch)>,
    journal: Option<placement::Journal>,
    restored: bool,
    waits: u64,
    /// When the application was seen to exit while it was served.
    exited_at: Option<Instant>,
}

/// What serving a launch did.
pub struct Served {
    pub report: PrefetchReport,
    /// The application exited while it was served.
    pub exited: bool,
    /// Voluntary context switches of the launch's process tree (how often it slept, mostly
    /// on I/O), sampled while it was served.
    pub waits: u64,
    /// When it exited, if it did while it was served (its launch time's end).
    pub exited_at: Option<Instant>,
    /// The launch's pidfd, to wait for its end afterwards (`ended_before`).
    pidfd: Option<OwnedFd>,
}

impl Served {
    /// When the launch ended: as seen while it was served, else waited for (asleep) until
    /// `deadline` at the most, looking at `stop` every 200 ms: the end of a launch timed as
    /// `run` and the daemon time theirs. None if it runs on, or if `stop` says so first.
    pub fn ended_before(&self, deadline: Instant, stop: &dyn Fn() -> bool) -> Option<Instant> {
        if self.exited {
            return Some(self.exited_at.unwrap_or_else(Instant::now));
        }
        exit_before(self.pidfd.as_ref()?, deadline, stop)
    }
}

/// When the process of `pidfd` exited, waited for (asleep) until `deadline` at the most,
/// looking at `stop` every 200 ms. None if it runs on, or if `stop` says so first.
pub fn exit_before(pidfd: &OwnedFd, deadline: Instant, stop: &dyn Fn() -> bool) -> Option<Instant> {
    while !stop() {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        let ms = left.as_millis().min(200) as u16;
        if matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0) {
            return Some(Instant::now());
        }
        if left.is_zero() {
            break;
        }
    }
    None
}

impl Serving {
    /// Start serving the running process `pid` (or the process about to exec it): give back
    /// the CPUs of launches whose prefetcher was killed, note this launch's placement (so a
    /// later prefetcher can repair it too), and start the prefetch. With `pin`, the
    /// application's threads are moved to the placement's CPUs here (a launch found after
    /// its exec, by the daemon); `run` starts the application there itself. The prefetch
    /// threads run where `opts.placement` or `opts.avoid_cpu` says.
    pub fn start(
        pid: i32,
        plan: Arc<Plan>,
        opts: PrefetchOptions,
        pin: bool,
    ) -> std::io::Result<Serving> {
        let run_dir = Path::new(crate::trace::knobs::RUN_DIR);
        recover_placements();
        let pidfd = sys::pidfd_open(pid).ok();
        let place = opts
            .placement
            .clone()
            .zip(placement::Launch::of(pid))
            .filter(|_| pidfd.is_some());
        let journal = place
            .as_ref()
            .and_then(|(p, l)| placement::Journal::note(run_dir, *l, p));
        if journal.is_none() {
            // A note written for this prefetcher that it did not take over.
            placement::settle_started(run_dir);
        }
        if let (true, Some((p, _))) = (pin, &place) {
            placement::pin(pid, &p.app);
        }
        let (running, head) = Running::start_holding(plan, opts)?;
        Ok(Serving {
            pid,
            pidfd,
            running,
            head: Some(head),
            place,
            journal,
            restored: false,
            waits: 0,
            exited_at: None,
        })
    }

    /// Wait until the plan's head (its `hold_entries`) is fetched, at most `cap`; false if
    /// it was not.
    pub fn wait_head(&self, cap: Duration) -> bool {
        self.head
            .as_ref()
            .is_some_and(|h| h.recv_timeout(cap).is_ok())
    }

    /// The end of the head's wait as a channel, for a caller that waits elsewhere.
    pub fn take_head(&mut self) -> Option<Receiver<()>> {
        self.head.take()
    }

    /// Whether the application has exited, waiting up to `ms` for it.
    pub fn app_gone(&self, ms: u16) -> bool {
        let Some(fd) = &self.pidfd else {
            return true;
        };
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
    }

    /// Serve until the plan is issued, the application exits (true) or `stop` says so. The
    /// launch gets its CPUs back once the plan is issued, or as soon as the prefetch finds
    /// its plan in memory (a warm launch).
    pub fn watch(&mut self, started: Instant, stop: &dyn Fn() -> bool) -> bool {
        let mut last_sample = Instant::now();
        while !self.running.is_finished() && !stop() {
            // Looked at often until the warm check has had its chance.
            let ms = if self.restored || started.elapsed() > WARM_WATCH {
                20
            } else {
                4
            };
            if self.app_gone(ms) {
                self.exited_at = self.pidfd.is_some().then(Instant::now);
                return true;
            }
            if !self.restored && self.running.is_warm() {
                self.give_back();
            }
            if last_sample.elapsed() >= Duration::from_millis(100) {
                self.waits = self.waits.max(tree_waits(self.pid));
                last_sample = Instant::now();
            }
        }
        // The plan is issued: nothing left to keep the launch off the interrupt CPU for.
        if !self.restored {
            self.give_back();
        }
        false
    }

    /// Give the application its CPUs back (once).
    fn give_back(&mut self) {
        if let Some((p, l)) = &self.place {
            placement::restore(*l, p);
        }
        self.restored = true;
    }

    /// Stop serving: the application gets its CPUs back (also when it has exited: what it
    /// started may still run on the pinned CPUs), the prefetch stops, and with it the inode
    /// readahead hold it had.
    pub fn finish(mut self, exited: bool) -> Served {
        if !exited {
            self.waits = self.waits.max(tree_waits(self.pid));
        }
        if let Some((p, l)) = &self.place {
            placement::restore(*l, p);
        }
        if let Some(j) = self.journal.take() {
            j.done();
        }
        Served {
            report: self.running.stop(),
            exited,
            waits: self.waits,
            exited_at: self.exited_at,
            pidfd: self.pidfd.take(),
        }
    }
}

/// Give back the CPUs of launches whose prefetcher was killed before it could (their notes
/// under the run directory). `Serving::start` does it; a prefetcher whose application is
/// already gone does it too, before it returns.
pub fn recover_placements() {
    let repaired = placement::recover(Path::new(crate::trace::knobs::RUN_DIR));
    if repaired > 0 {
        tracing::info!(
            "gave back the CPUs of {repaired} launch(es) a killed prefetcher had pinned"
        );
    }
}

/// Voluntary context switches of `pid` and its descendants, all threads: how often the
/// launch slept (mostly waiting for I/O while it starts).
pub fn tree_waits(pid: i32) -> u64 {
    sys::tree_threads(pid)
        .into_iter()
        .filter_map(|tid| {
            sys::status_field(Some(tid), "voluntary_ctxt_switches")?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
