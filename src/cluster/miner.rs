//! ClusterFetch's I/O miner (IEEE TC 2018, sections 2.1-2.3): a bounded circular log of disk
//! reads and of the openings of trigger-file candidates, and the detection of full and
//! partial I/O bursts in it (Algorithms 1 and 2). A burst is tied to the file opened just
//! before it (the trigger) and the next three opened in it (alternatives).

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sys::Dev;

/// The miner's thresholds (the paper's `queue_size`, `iops_threshold`, `length_threshold`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MinerConfig {
    /// Log entries kept (the circular queue).
    pub queue_size: usize,
    /// Log entries per second a stretch must reach to be a burst.
    pub iops_threshold: f64,
    /// Log entries a partial burst must hold at least.
    pub length_threshold: usize,
    /// Paths that exclude a file from being a trigger (section 2.1): a prefix if it starts
    /// with '/', else a part of the path; beyond the
    /// built-in ones (pseudo files, the window system's icons, desktop files and fonts,
    /// shared libraries).
    pub exclude: Vec<String>,
}

impl Default for MinerConfig {
    /// The paper's 6000 entries and its length threshold of 100. Its IOPS threshold (100, for
    /// a 2012 hard disk) depends on the device: see `for_device`.
    fn default() -> MinerConfig {
        MinerConfig {
            queue_size: 6000,
            iops_threshold: 100.0,
            length_threshold: 100,
            exclude: Vec::new(),
        }
    }
}

impl MinerConfig {
    /// Defaults for a measured device: the paper's threshold was the lowest IOPS of its
    /// bursts on a disk that served ~100-200 random reads per second, about half of its
    /// depth-1 rate; the same share of this device's depth-1 rate, never below the paper's.
    pub fn for_device(iops_qd1: f64) -> MinerConfig {
        MinerConfig {
            iops_threshold: (iops_qd1 * IOPS_SHARE).max(100.0),
            ..MinerConfig::default()
        }
    }
}

/// Share of the device's depth-1 IOPS a burst must reach (see `MinerConfig::for_device`).
pub const IOPS_SHARE: f64 = 0.02;

/// A file as the miner knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    pub dev: Dev,
    pub ino: u64,
    pub path: PathBuf,
    /// Nanoseconds, the clock of the log.
    pub t: u64,
    /// The process that opened it.
    pub pid: i32,
    /// Its program (`comm`), when known: a burst's trigger fires for that program's
    /// openings only, and for execs of the trigger (`service::fires_for`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
}

/// A run of pages read from disk (`ino` 0 with a block device's `dev`: metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Read {
    pub dev: Dev,
    pub ino: u64,
    pub page: u64,
    pub pages: u64,
    /// The process whose access read it.
    pub pid: i32,
}

/// A detected burst: its trigger, up to three alternatives, and what it read, in order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub trigger: Opened,
    pub alternatives: Vec<Opened>,
    pub reads: Vec<Read>,
    /// The burst's first and last log times (ns).
    pub start: u64,
    pub end: u64,
    /// Full (the whole queue met the IOPS threshold) or partial.
    pub full: bool,
    /// The process that did most of its reads.
    #[serde(default)]
    pub reader: Option<i32>,
}

#[derive(Clone, Debug)]
enum Log {
    Io { t: u64, read: Read },
    Open(Opened),
}

impl Log {
    fn t(&self) -> u64 {
        match self {
            Log::Io { t, .. } => *t,
            Log::Open(o) => o.t,
        }
    }
}

/// Whether a path can be a trigger file (section 2.1).
pub fn is_trigger_candidate(path: &Path, extra_exclude: &[String]) -> bool {
    let Some(s) = path.to_str() else {
        return false;
    };
    if s.starts_with("/proc/") || s.starts_with("/sys/") || s.starts_with("/dev/") {
        return false;
    }
    // The window system's files: icons, desktop entries, fonts.
    let lower = s.to_ascii_lowercase();
    if ["icons", "desktop", "font"]
        .iter()
        .any(|w| lower.contains(w))
    {
        return false;
    }
    // Shared libraries, and the loader's cache which every program opens.
    if s.contains(".so.") || s.ends_with(".so") {
        return false;
    }
    // An entry starting with '/' is a path prefix (a directory such as /tmp/), any other a
    // part of the path.
    !extra_exclude.iter().any(|x| {
        !x.is_empty()
            && if x.starts_with('/') {
                s.starts_with(x.as_str())
            } else {
                s.contains(x.as_str())
            }
    })
}

/// One input of the miner, as `LiveMiner` gives it. A recording of these (`warmstart bursts
/// mine --save-log`: the configuration on its first line, then one input per line) replays
/// a mining exactly: the recorded fixtures of the tests.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Input {
    Read {
        t: u64,
        read: Read,
    },
    Open(Opened),
    /// A pause in the system's activity: what the log holds is examined, then forgotten.
    Pause,
}

/// The circular log and its burst detection.
pub struct Miner {
    cfg: MinerConfig,
    log: VecDeque<Log>,
    /// Openings in `log` (kept, so that logging an opening stays O(1)).
    opens: usize,
    bursts: Vec<Burst>,
    /// The last burst, held back for `PHASE_GAP`: a burst of the same reader starting within
    /// it is the next phase of the same loading and joins it.
    pending: Option<Burst>,
}

/// A loading computes between its stretches of reads: GIMP importing a PDF read for 123 ms
/// (its PDF plug-in starting), computed for 300-730 ms, then read 166 ms more (poppler's data,
/// fonts), all in the plug-in's process (`warmstart bursts mine -v`, bench/suite.toml's
/// gimp-open-pdf). Each stretch is a burst by Algorithm 2, and the second's trigger opens only
/// once the first is done: its prefetch then starts with the reads it should have spared.
/// So a burst whose reader (the process that did most of its reads) also read in the last
/// burst, starting within this long after that one ended, is joined to it: one burst,
/// prefetched on the first trigger (FAST's T_idle for a launch's end is 2 s too). Which of
/// GIMP's two processes did most of a phase's reads varies from run to run; that the
/// plug-in read in both does not.
pub const PHASE_GAP_NS: u64 = 2_000_000_000;

impl Miner {
    pub fn new(cfg: MinerConfig) -> Miner {
        let cap = cfg.queue_size.max(2);
        Miner {
            cfg: MinerConfig {
                queue_size: cap,
                ..cfg
            },
            log: VecDeque::with_capacity(cap),
            opens: 0,
            bursts: Vec::new(),
            pending: None,
        }
    }

    /// Take one input.
    pub fn feed(&mut self, input: Input) {
        match input {
            Input::Read { t, read } => self.read(t, read),
            Input::Open(o) => self.open(o),
            Input::Pause => {
                self.flush();
                self.clear();
            }
        }
    }

    pub fn config(&self) -> &MinerConfig {
        &self.cfg
    }

    /// Entries in the log now.
    pub fn len(&self) -> usize {
        self.log.len()
    }

    pub fn is_empty(&self) -> bool {
        self.log.is_empty()
    }

    /// Bursts detected since the last call, and the held-back one if `now` (the log's
    /// clock, ns) is `PHASE_GAP_NS` past its end; `None`: it too (mining ends).
    pub fn take_bursts(&mut self, now: Option<u64>) -> Vec<Burst> {
        let due = self
            .pending
            .as_ref()
            .is_some_and(|p| now.is_none_or(|n| n.saturating_sub(p.end) > PHASE_GAP_NS));
        if due {
            self.bursts.extend(self.pending.take());
        }
        std::mem::take(&mut self.bursts)
    }

    /// A detected burst: joined to the held-back one if it is that one's next phase.
    fn offer(&mut self, b: Burst) {
        match self.pending.take() {
            Some(mut p)
                if b.reader.is_some_and(|r| p.reads.iter().any(|x| x.pid == r))
                    && b.start.saturating_sub(p.end) <= PHASE_GAP_NS =>
            {
                tracing::debug!(
                    "burst after {} joins the one after {} (its reader read there too, {} ms later)",
                    b.trigger.path.display(),
                    p.trigger.path.display(),
                    b.start.saturating_sub(p.end) / 1_000_000
                );
                p.reads.extend(b.reads);
                p.end = p.end.max(b.end);
                p.full &= b.full;
                self.pending = Some(p);
            }
            Some(p) => {
                self.bursts.push(p);
                self.pending = Some(b);
            }
            None => self.pending = Some(b),
        }
    }

    /// Algorithm 1 for a disk read: merged into the previous entry when it continues it;
    /// dropped when no trigger candidate precedes it.
    pub fn read(&mut self, t: u64, read: Read) {
        if let Some(Log::Io { read: last, .. }) = self.log.back_mut() {
            if last.dev == read.dev
                && last.ino == read.ino
                && last.pid == read.pid
                && last.page + last.pages == read.page
            {
                last.pages += read.pages;
                return;
            }
        }
        if self.log.len() >= self.cfg.queue_size {
            self.handle_burst();
        }
        if self.log.is_empty() {
            return;
        }
        self.log.push_back(Log::Io { t, read });
    }

    /// Algorithm 1 for an opening: only trigger candidates are logged. When the log holds a
    /// single opening at its front, the stretch from it to this one must meet the IOPS
    /// threshold, or the log restarts at this opening (a file opened while the disk was
    /// quiet is no trigger for what follows later).
    pub fn open(&mut self, o: Opened) {
        if !is_trigger_candidate(&o.path, &self.cfg.exclude) {
            return;
        }
        if self.log.len() >= self.cfg.queue_size {
            self.handle_burst();
        }
        let lone_front = self.opens == 1;
        self.log.push_back(Log::Open(o));
        self.opens += 1;
        // The log always starts with an opening, so one opening is the front one.
        if lone_front && !self.meet_iops(0, self.log.len() - 1) {
            self.drain_to(self.log.len() - 1);
        }
    }

    /// The end of activity (idle, or stopping): detect in what the log holds as if full, burst
    /// after burst (a pause ends a stretch that can hold several loadings).
    pub fn flush(&mut self) {
        while self.log.len() > 1 {
            let before = self.log.len();
            self.handle_burst();
            if self.log.len() >= before {
                break;
            }
        }
    }

    /// Drop the entries before `i`.
    fn drain_to(&mut self, i: usize) {
        self.log.drain(..i);
        self.opens = self
            .log
            .iter()
            .filter(|l| matches!(l, Log::Open(_)))
            .count();
    }

    /// Forget the log (after a pause in activity, once examined).
    pub fn clear(&mut self) {
        self.log.clear();
        self.opens = 0;
    }

    fn open_positions(&self) -> Vec<usize> {
        self.log
            .iter()
            .enumerate()
            .filter(|(_, l)| matches!(l, Log::Open(_)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Entries from `a` to `b` inclusive, per second of the time between them.
    fn meet_iops(&self, a: usize, b: usize) -> bool {
        let n = (b - a + 1) as f64;
        let dt = self.log[b].t().saturating_sub(self.log[a].t()) as f64 / 1e9;
        dt <= 0.0 || n / dt >= self.cfg.iops_threshold
    }

    fn meet_length(&self, a: usize, b: usize) -> bool {
        b - a + 1 >= self.cfg.length_threshold
    }

    /// Algorithm 2: a full burst, else the longest partial one, else drop the front opening.
    fn handle_burst(&mut self) {
        if !self.handle_full() && !self.handle_partial() {
            // No burst starts at any opening before the last: keep from the last on; a lone
            // opening at the front is dropped with its reads (the paper's front_idx moving to
            // the next opening).
            match self.open_positions().last() {
                Some(&l) if l > 0 => self.drain_to(l),
                _ => self.clear(),
            }
        }
    }

    /// The whole log within `queue_size / iops_threshold` seconds, and long enough.
    fn handle_full(&mut self) -> bool {
        let n = self.log.len();
        if n < self.cfg.length_threshold || !matches!(self.log.front(), Some(Log::Open(_))) {
            return false;
        }
        let limit = self.cfg.queue_size as f64 / self.cfg.iops_threshold;
        let span = self.log[n - 1].t().saturating_sub(self.log[0].t()) as f64 / 1e9;
        // A log that is not full has proportionally less time to be a burst.
        if span > limit * n as f64 / self.cfg.queue_size as f64 {
            return false;
        }
        self.emit(0, n, true);
        self.clear();
        true
    }

    /// The shortest stretch between two openings meeting both thresholds, then extended
    /// opening by opening while the IOPS threshold still holds.
    fn handle_partial(&mut self) -> bool {
        let opens = self.open_positions();
        let (mut si, mut ei) = (0usize, 1usize);
        let mut found = false;
        while ei < opens.len() {
            let (s, e) = (opens[si], opens[ei]);
            if self.meet_length(s, e) {
                if self.meet_iops(s, e) {
                    found = true;
                    break;
                }
                si += 1;
                if si == ei {
                    ei += 1;
                }
                continue;
            }
            ei += 1;
        }
        if !found {
            return false;
        }
        let mut longest = ei;
        while longest + 1 < opens.len() && self.meet_iops(opens[si], opens[longest + 1]) {
            longest += 1;
        }
        let (s, e) = (opens[si], opens[longest]);
        self.emit(s, e, false);
        // The log restarts at the burst's closing opening.
        self.drain_to(e);
        true
    }

    /// Record entries `a..b` as a burst. The trigger is the first opening in it by the
    /// process that did most of its reads (on a busy system the first opening of the
    /// stretch can be another program's: ClusterFetch's noise, section 2.4), the
    /// alternatives the next three openings.
    fn emit(&mut self, a: usize, b: usize, full: bool) {
        let mut reads: Vec<Read> = Vec::new();
        let mut by_pid: std::collections::HashMap<i32, u64> = Default::default();
        for l in self.log.range(a..b) {
            if let Log::Io { read, .. } = l {
                reads.push(*read);
                *by_pid.entry(read.pid).or_default() += read.pages;
            }
        }
        let reader = by_pid
            .iter()
            .max_by_key(|(pid, n)| (**n, -**pid))
            .map(|(p, _)| *p);
        let opens: Vec<&Opened> = self
            .log
            .range(a..b)
            .filter_map(|l| match l {
                Log::Open(o) => Some(o),
                _ => None,
            })
            .collect();
        let Some(ti) = opens
            .iter()
            .position(|o| Some(o.pid) == reader)
            .or((!opens.is_empty()).then_some(0))
        else {
            return;
        };
        let trigger = opens[ti].clone();
        let alternatives: Vec<Opened> = opens[ti + 1..]
            .iter()
            .filter(|o| (o.dev, o.ino) != (trigger.dev, trigger.ino))
            .take(3)
            .map(|o| (*o).clone())
            .collect();
        if reads.is_empty() {
            return;
        }
        tracing::debug!(
            "burst after {} (t {}, reader {reader:?}, opener {}): entries {a}..{b} of {}, {} ms, openings {:?}",
            trigger.path.display(),
            trigger.t,
            trigger.pid,
            self.log.len(),
            (self.log[b - 1].t().saturating_sub(trigger.t)) / 1_000_000,
            self.log
                .iter()
                .filter_map(|l| match l {
                    Log::Open(o) => Some((
                        o.path.file_name().map(|n| n.to_string_lossy().into_owned()),
                        o.t / 1_000_000
                    )),
                    _ => None,
                })
                .take(8)
                .collect::<Vec<_>>()
        );
        let end = self.log[b - 1].t();
        self.offer(Burst {
            start: trigger.t,
            end,
            trigger,
            alternatives,
            reads,
            full,
            reader,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const DEV: Dev = Dev { major: 8, minor: 1 };

    fn cfg() -> MinerConfig {
        MinerConfig {
            queue_size: 50,
            iops_threshold: 1000.0,
            length_threshold: 10,
            exclude: vec!["/home/x/cache".into()],
        }
    }

    fn open(m: &mut Miner, t: u64, ino: u64, path: &str) {
        open_by(m, 1, t, ino, path)
    }

    fn open_by(m: &mut Miner, pid: i32, t: u64, ino: u64, path: &str) {
        m.open(Opened {
            dev: DEV,
            ino,
            path: path.into(),
            t,
            pid,
            comm: None,
        });
    }

    /// `n` non-contiguous reads of file `ino`, one every `gap` ns from `t`.
    fn reads(m: &mut Miner, t: u64, ino: u64, n: u64, gap: u64) -> u64 {
        reads_by(m, 1, t, ino, n, gap)
    }

    /// `reads` by process `pid`.
    fn reads_by(m: &mut Miner, pid: i32, t: u64, ino: u64, n: u64, gap: u64) -> u64 {
        for i in 0..n {
            m.read(
                t + i * gap,
                Read {
                    dev: DEV,
                    ino,
                    page: i * 10,
                    pages: 1,
                    pid,
                },
            );
        }
        t + n * gap
    }

    #[test]
    fn trigger_candidates_exclude_special_window_system_and_library_files() {
        let x = vec!["/home/x/cache".to_string(), "/tmp/".to_string()];
        for p in [
            "/proc/interrupts",
            "/sys/class/net",
            "/dev/null",
            "/usr/share/icons/hicolor/16x16/apps/evince.png",
            "/usr/share/applications/gnubg.desktop",
            "/usr/share/fonts/DejaVuSans.ttf",
            "/opt/game/core/Fonts/system.ttf",
            "/usr/lib/libgtk-3.so.0",
            "/opt/app/plugin.so",
            "/etc/ld.so.cache",
            "/home/x/cache/thumb.png",
        ] {
            assert!(!is_trigger_candidate(Path::new(p), &x), "{p}");
        }
        assert!(!is_trigger_candidate(Path::new("/tmp/x.dat"), &x));
        for p in [
            "/home/u/map.dat",
            "/usr/lib/python3/json/__init__.py",
            "/opt/sol.iso",
            "/work/target/tmp/level.map",
        ] {
            assert!(is_trigger_candidate(Path::new(p), &x), "{p}");
        }
    }

    /// Two stretches of reads by one process, a computation between them (each stretch a
    /// burst, the log flushed by the pause as the live miner does): one burst under the first
    /// trigger, held back until the gap has passed; another reader's burst stays its own.
    #[test]
    fn the_next_phase_of_a_loading_joins_its_burst() {
        let mut m = Miner::new(MinerConfig {
            queue_size: 1000,
            ..cfg()
        });
        open_by(&mut m, 7, 0, 10, "/data/doc.pdf");
        let t = reads_by(&mut m, 7, 10_000, 11, 20, 10_000);
        m.flush();
        m.clear();
        // Held back: a next phase may follow.
        assert!(m.take_bursts(Some(t + MS)).is_empty());
        let t2 = t + 700 * MS;
        open_by(&mut m, 7, t2, 12, "/usr/share/poppler/Greek");
        let t3 = reads_by(&mut m, 7, t2 + 10_000, 13, 20, 10_000);
        m.flush();
        m.clear();
        assert!(m.take_bursts(Some(t3 + MS)).is_empty());
        // Another program's burst right after: the loading's burst is done.
        let t4 = t3 + 100 * MS;
        open_by(&mut m, 8, t4, 14, "/data/other.cfg");
        let t5 = reads_by(&mut m, 8, t4 + 10_000, 15, 20, 10_000);
        m.flush();
        m.clear();
        let b = m.take_bursts(Some(t5 + MS));
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].trigger.path, Path::new("/data/doc.pdf"));
        assert_eq!(b[0].reads.len(), 40);
        assert_eq!(b[0].reader, Some(7));
        // The other one is released once PHASE_GAP has passed without a next phase.
        assert!(m.take_bursts(Some(t5 + PHASE_GAP_NS / 2)).is_empty());
        let b = m.take_bursts(Some(t5 + PHASE_GAP_NS + MS));
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].trigger.path, Path::new("/data/other.cfg"));
        // A phase after more than PHASE_GAP is a burst of its own.
        let t6 = t5 + 3 * PHASE_GAP_NS;
        open_by(&mut m, 8, t6, 16, "/data/again.cfg");
        reads_by(&mut m, 8, t6 + 10_000, 17, 20, 10_000);
        m.flush();
        assert_eq!(m.take_bursts(None).len(), 1);
    }

    /// The whole queue fills within queue_size / iops_threshold: one full burst, triggered
    /// by the first opening, with the next openings as alternatives.
    #[test]
    fn a_full_burst() {
        let mut m = Miner::new(cfg());
        open(&mut m, 0, 1, "/data/level1.map");
        let t = reads(&mut m, 10_000, 2, 20, 10_000);
        open(&mut m, t, 3, "/data/tex.pak");
        open(&mut m, t + 1000, 4, "/data/snd.pak");
        // Fill the queue and one more: detection runs when it is full.
        reads(&mut m, t + 2000, 5, 40, 10_000);
        let b = m.take_bursts(None);
        assert_eq!(b.len(), 1, "{b:?}");
        assert!(b[0].full);
        assert_eq!(b[0].trigger.path, Path::new("/data/level1.map"));
        assert_eq!(
            b[0].alternatives.iter().map(|o| o.ino).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(b[0].reads.len(), 47, "the queue's reads up to full");
    }

    /// Slow reads before and after a fast stretch: the partial burst is the stretch between
    /// the openings around it, extended while the rate holds.
    #[test]
    fn a_partial_burst_between_openings() {
        let mut m = Miner::new(cfg());
        open(&mut m, 0, 1, "/data/a");
        // 10 reads at 100/s: too slow.
        let t = reads(&mut m, 10 * MS, 2, 10, 10 * MS);
        open(&mut m, t, 3, "/data/doc.odt");
        // 20 reads at 100 000/s: a burst.
        let t = reads(&mut m, t + 10_000, 4, 20, 10_000);
        open(&mut m, t, 5, "/data/style.xml");
        let t = reads(&mut m, t + 10_000, 6, 5, 10_000);
        open(&mut m, t, 7, "/data/idle.txt");
        // Then slow again, until the queue fills.
        reads(&mut m, t + 50 * MS, 8, 40, 50 * MS);
        let b = m.take_bursts(None);
        assert_eq!(b.len(), 1, "{b:?}");
        assert!(!b[0].full);
        assert_eq!(b[0].trigger.path, Path::new("/data/doc.odt"));
        // Extended through style.xml's reads, up to the next opening.
        assert_eq!(b[0].reads.len(), 25, "{:?}", b[0].reads);
        assert_eq!(b[0].alternatives.len(), 1);
    }

    /// Reads below the IOPS threshold: no burst, and the log does not grow without bound.
    #[test]
    fn no_burst_below_the_iops_threshold() {
        let mut m = Miner::new(cfg());
        for k in 0..10 {
            open(&mut m, k * 1000 * MS, 10 + k, "/data/f");
            reads(&mut m, k * 1000 * MS + MS, 100 + k, 30, 5 * MS);
        }
        m.flush();
        assert!(m.take_bursts(None).is_empty());
        assert!(m.len() <= 50);
    }

    /// Enough IOPS but too few entries between openings: no partial burst.
    #[test]
    fn short_fast_stretches_are_no_burst() {
        let mut m = Miner::new(MinerConfig {
            length_threshold: 40,
            ..cfg()
        });
        // Openings 1 ms apart keep the log (7000 entries/s), but 36 entries in all.
        for k in 0..6 {
            open(&mut m, k * MS, 10 + k, "/data/f");
            reads(&mut m, k * MS + 10_000, 100 + k, 5, 10_000);
        }
        assert_eq!(m.len(), 36);
        m.flush();
        assert!(m.take_bursts(None).is_empty());
    }

    #[test]
    fn reads_without_a_preceding_opening_are_not_logged_and_contiguous_ones_merge() {
        let mut m = Miner::new(cfg());
        reads(&mut m, 0, 1, 5, 1000);
        assert_eq!(m.len(), 0);
        open(&mut m, MS, 2, "/data/x");
        for p in 0..8 {
            m.read(
                MS + p * 100,
                Read {
                    dev: DEV,
                    ino: 3,
                    page: p,
                    pages: 1,
                    pid: 1,
                },
            );
        }
        assert_eq!(m.len(), 2, "one opening, one merged read");
        // An excluded file is not an opening of the log.
        open(&mut m, 2 * MS, 4, "/usr/lib/libz.so.1");
        assert_eq!(m.len(), 2);
    }

    /// Another program's opening just before the burst (a concurrent exec) is not taken as
    /// its trigger: the opening of the process that did the reads is.
    #[test]
    fn the_trigger_is_opened_by_the_process_that_reads() {
        let mut m = Miner::new(cfg());
        m.open(Opened {
            dev: DEV,
            ino: 50,
            path: "/usr/bin/other".into(),
            t: 0,
            pid: 9,
            comm: None,
        });
        open(&mut m, 1000, 1, "/data/level.map");
        reads(&mut m, 2000, 2, 60, 1000);
        m.flush();
        let b = m.take_bursts(None);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!(b[0].trigger.path, Path::new("/data/level.map"));
    }

    #[test]
    fn the_device_sets_the_iops_threshold() {
        assert_eq!(MinerConfig::for_device(1000.0).iops_threshold, 100.0);
        assert_eq!(MinerConfig::for_device(25000.0).iops_threshold, 500.0);
    }

    /// A mining recorded on this kernel (`warmstart bursts mine --seconds 12 --save-log F`
    /// while the suite's python-load loading ran after a cache drop: a waiting Python process
    /// opens project.cfg and imports numpy, pandas, matplotlib and sympy; 1836 ms, 12 s of
    /// the whole system), consecutive contiguous reads merged as the miner merges them,
    /// zlib-compressed. Replayed, it gives the burst the daemon keeps for that loading.
    #[test]
    fn a_recorded_loading_is_one_burst_under_its_trigger() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/linux-6.18/miner-python-load.jsonl.zlib"
        );
        let packed = std::fs::read(path).unwrap();
        let text = miniz_oxide::inflate::decompress_to_vec_zlib(&packed).unwrap();
        let text = String::from_utf8(text).unwrap();
        let mut lines = text.lines();
        let cfg: MinerConfig = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!((cfg.queue_size, cfg.length_threshold), (6000, 100));
        let inputs: Vec<Input> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
        let loader = inputs
            .iter()
            .find_map(|i| match i {
                Input::Open(o) if o.path.ends_with("project.cfg") => Some(o.pid),
                _ => None,
            })
            .expect("the trigger's opening is in the recording");
        let mut m = Miner::new(cfg.clone());
        for i in inputs.iter().cloned() {
            m.feed(i);
        }
        m.flush();
        let bursts = m.take_bursts(None);
        let b = bursts
            .iter()
            .find(|b| b.trigger.path.ends_with("project.cfg"))
            .unwrap_or_else(|| panic!("no burst under project.cfg: {bursts:?}"));
        assert_eq!(b.trigger.pid, loader);
        assert_eq!(b.reader, Some(loader));
        // The imports read ~128 MiB from the disk (254:0), nearly all by the loader.
        let disk = |r: &&Read| {
            r.dev
                == Dev {
                    major: 254,
                    minor: 0,
                }
        };
        let mib = |pages: u64| (pages * 4096) >> 20;
        let all: u64 = b.reads.iter().filter(disk).map(|r| r.pages).sum();
        let own: u64 = b
            .reads
            .iter()
            .filter(disk)
            .filter(|r| r.pid == loader)
            .map(|r| r.pages)
            .sum();
        assert!(mib(all) >= 100, "{} MiB", mib(all));
        assert!(own * 10 >= all * 9, "{own} of {all} pages by the loader");
        // Below the IOPS threshold by far, the same log holds no burst.
        let mut slow = Miner::new(MinerConfig {
            iops_threshold: 1e7,
            ..cfg
        });
        for i in inputs {
            slow.feed(i);
        }
        slow.flush();
        assert!(slow.take_bursts(None).is_empty());
    }
}
