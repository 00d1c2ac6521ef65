//! The miner fed by the live system: every page-cache insert (a disk read) and every opening
//! on block-backed filesystems, merged in time order; and a detected burst turned into a
//! plan the prefetch engine replays.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::miner::{Burst, Input, Miner, MinerConfig, Opened, Read};
use crate::plan::{Entry, Plan, Provenance};
use crate::resolve::FileId;
use crate::store::NewBurst;
use crate::sys::Dev;
use crate::trace::session::SystemTrace;
use crate::trace::tracefs::Tracefs;
use crate::trace::{EventKind, TraceError};

/// Per-CPU ring of the system-wide insert trace, KiB.
const BUFFER_KB: u32 = 4096;
/// Paths remembered for files read in bursts (a file's path comes from its opening).
const MAX_PATHS: usize = 65536;
/// A file opened by this many different programs is no trigger (section 2.1: files used by
/// many programs, such as locale data, are not tied to one application's burst).
pub const SHARED_BY: usize = 3;
/// Files whose openers are remembered.
const MAX_OPENERS: usize = 65536;
/// No log entry for the time a smallest burst takes (`length_threshold / iops_threshold`),
/// and at least this, ends the activity: what the log holds is examined and the log
/// restarts, so a file opened before a pause does not become the trigger of what follows.
pub const MIN_IDLE: Duration = Duration::from_millis(200);
/// How long the slower of the two event streams may lag behind the other: the openings
/// come in batches (`opens::BATCH`, stamped with their first's time), read within this.
const LAG: Duration = crate::trace::opens::BATCH.saturating_add(Duration::from_millis(100));

/// The system's reads and openings, streamed into a `Miner`.
pub struct LiveMiner {
    trace: SystemTrace,
    miner: Miner,
    paths: HashMap<(Dev, u64), PathBuf>,
    /// Thread id -> its process, None for warmstart's own (its prefetching is not mined:
    /// this process, and the prefetchers `warmstart run` starts).
    own: HashMap<i32, Option<i32>>,
    pid: i32,
    /// Per file, the programs (comm) seen opening it, up to `SHARED_BY`.
    openers: HashMap<(Dev, u64), Vec<String>>,
    /// Entries not yet in the log (newer than the horizon), each stream in time order.
    pending_reads: std::collections::VecDeque<(u64, Read)>,
    pending_opens: std::collections::VecDeque<Opened>,
    /// Time of the newest entry given to the log.
    last_t: Option<u64>,
    idle: Duration,
    /// Where the miner's inputs are written, if anywhere (`save_log`).
    log_to: Option<std::io::BufWriter<std::fs::File>>,
    pub reads: u64,
    pub opens: u64,
}

/// Whether process `tgid` is warmstart's own prefetching (the front and its prefetchers run
/// as `warmstart` or `warmstart-cli`; the bench and the synthetic workload are applications).
fn is_warmstart(tgid: i32) -> bool {
    crate::sys::comm_of(tgid).is_some_and(|c| matches!(c.as_str(), "warmstart" | "warmstart-cli"))
}

fn tgid_of(tid: i32) -> Option<i32> {
    crate::sys::status_field(Some(tid), "Tgid")?.parse().ok()
}

impl LiveMiner {
    pub fn start(tfs: &Tracefs, cfg: MinerConfig) -> Result<LiveMiner, TraceError> {
        let idle =
            Duration::from_secs_f64(cfg.length_threshold as f64 / cfg.iops_threshold).max(MIN_IDLE);
        Ok(LiveMiner {
            idle,
            trace: SystemTrace::start(tfs, BUFFER_KB)?,
            miner: Miner::new(cfg),
            paths: HashMap::new(),
            own: HashMap::new(),
            pid: std::process::id() as i32,
            openers: HashMap::new(),
            pending_reads: Default::default(),
            pending_opens: Default::default(),
            last_t: None,
            log_to: None,
            reads: 0,
            opens: 0,
        })
    }

    /// The process of thread `tid`; None if it is warmstart's own.
    fn reader_pid(&mut self, tid: i32) -> Option<i32> {
        if tid == self.pid {
            return None;
        }
        if self.own.len() > 4096 {
            self.own.clear();
        }
        let pid = self.pid;
        *self.own.entry(tid).or_insert_with(|| {
            let t = tgid_of(tid).unwrap_or(tid);
            (t != pid && !is_warmstart(t)).then_some(t)
        })
    }

    fn is_own(&mut self, pid: i32) -> bool {
        self.reader_pid(pid).is_none()
    }

    /// Note that program `comm` opened a file; whether it is now known as shared by
    /// several programs.
    fn shared(&mut self, dev: Dev, ino: u64, comm: &str) -> bool {
        if self.openers.len() >= MAX_OPENERS {
            self.openers.clear();
        }
        let v = self.openers.entry((dev, ino)).or_default();
        if v.len() < SHARED_BY && !v.iter().any(|x| x == comm) {
            v.push(comm.to_string());
        }
        v.len() >= SHARED_BY
    }

    /// Feed what arrived since the last call; the bursts detected. `flush`: examine what the
    /// log holds now (stopping).
    pub fn step(&mut self, flush: bool) -> Result<Vec<Burst>, TraceError> {
        let (events, opens) = self.trace.poll()?;
        let mut reads: Vec<(u64, Read)> = Vec::with_capacity(events.len());
        for e in events {
            if let EventKind::PageCacheAdd {
                dev,
                ino,
                index,
                order,
            } = e.kind
            {
                let Some(pid) = self.reader_pid(e.tid) else {
                    continue;
                };
                reads.push((
                    e.ts,
                    Read {
                        dev,
                        ino,
                        page: index,
                        pages: 1u64 << order.min(20),
                        pid,
                    },
                ));
            }
        }
        let mut opened: Vec<Opened> = Vec::new();
        // A launch opens hundreds of files from one process: its name read once per step
        // (three syscalls each, ~1,400 times for python's imports).
        let mut comms: HashMap<i32, Option<String>> = HashMap::new();
        for o in opens {
            if o.is_dir || self.is_own(o.pid) {
                continue;
            }
            if self.paths.len() >= MAX_PATHS {
                self.paths.clear();
            }
            self.paths.insert((o.dev, o.ino), o.path.clone());
            // A process already gone cannot be told from another program: no trigger.
            let Some(comm) = comms
                .entry(o.pid)
                .or_insert_with(|| crate::sys::comm_of(o.pid))
                .clone()
            else {
                continue;
            };
            if self.shared(o.dev, o.ino, &comm) {
                continue;
            }
            opened.push(Opened {
                dev: o.dev,
                ino: o.ino,
                path: o.path,
                t: o.t,
                pid: o.pid,
                comm: Some(comm),
            });
        }
        self.reads += reads.len() as u64;
        self.opens += opened.len() as u64;
        self.pending_reads.extend(reads);
        self.pending_opens.extend(opened);
        // The two streams arrive by different paths (the trace ring, the fanotify thread):
        // only what is older than `LAG` is complete in both, and goes to the log in time order.
        let horizon = if flush {
            u64::MAX
        } else {
            crate::sys::monotonic_ns().saturating_sub(LAG.as_nanos() as u64)
        };
        let idle = self.idle.as_nanos() as u64;
        loop {
            let r = self.pending_reads.front().map(|r| r.0);
            let o = self.pending_opens.front().map(|o| o.t);
            let t = match (r, o) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if t > horizon {
                break;
            }
            // A pause in the log's activity ends what it holds: examined, then forgotten,
            // so that a file opened before the pause is no trigger for what follows.
            if self.last_t.is_some_and(|l| t.saturating_sub(l) >= idle) && !self.miner.is_empty() {
                self.feed(Input::Pause);
            }
            self.last_t = Some(t);
            if r == Some(t) {
                if let Some((t, read)) = self.pending_reads.pop_front() {
                    self.feed(Input::Read { t, read });
                }
            } else if let Some(op) = self.pending_opens.pop_front() {
                self.feed(Input::Open(op));
            }
        }
        let quiet = self.last_t.is_some_and(|l| {
            crate::sys::monotonic_ns().saturating_sub(l) >= idle + LAG.as_nanos() as u64
        });
        if flush || (quiet && !self.miner.is_empty()) {
            self.feed(Input::Pause);
        }
        // A held-back burst waits for a next phase until PHASE_GAP past its end (on the
        // log's clock, which lags by up to LAG).
        let now =
            (!flush).then(|| crate::sys::monotonic_ns().saturating_sub(LAG.as_nanos() as u64));
        Ok(self.miner.take_bursts(now))
    }

    /// Write every input of the miner to `w` from now on, one JSON line each after one of
    /// the miner's configuration (`bursts mine --save-log`).
    pub fn save_log(&mut self, mut w: std::io::BufWriter<std::fs::File>) -> std::io::Result<()> {
        use std::io::Write;
        serde_json::to_writer(&mut w, self.miner.config())?;
        w.write_all(b"\n")?;
        self.log_to = Some(w);
        Ok(())
    }

    fn feed(&mut self, input: Input) {
        if let Some(w) = &mut self.log_to {
            use std::io::Write;
            let ok = serde_json::to_writer(&mut *w, &input).is_ok() && w.write_all(b"\n").is_ok();
            if !ok {
                tracing::warn!("cannot write the miner's log; no longer saved");
                self.log_to = None;
            }
        }
        self.miner.feed(input);
    }

    /// The path a file was opened by, if seen.
    pub fn path_of(&self, dev: Dev, ino: u64) -> Option<&PathBuf> {
        self.paths.get(&(dev, ino))
    }

    pub fn lost(&self) -> u64 {
        self.trace.lost()
    }
}

/// A mined burst and its plan as the store keeps them: under its trigger, with the
/// trigger's opener and alternatives.
pub fn stored_burst(b: &Burst, plan: Plan) -> NewBurst {
    NewBurst {
        dev: b.trigger.dev,
        ino: b.trigger.ino,
        path: b.trigger.path.clone(),
        created_at: crate::sys::now_unix(),
        alternatives: b.alternatives.iter().map(|o| o.path.clone()).collect(),
        plan,
        opener: b.trigger.comm.clone(),
    }
}

/// A burst as a plan: its reads in their original order (the paper's order for SSDs), each
/// file checked and identified as any plan's files are; reads of files whose path is unknown
/// (opened before mining started) or of block-device metadata are left out and counted.
pub fn burst_plan(b: &Burst, path_of: &dyn Fn(Dev, u64) -> Option<PathBuf>) -> Plan {
    let mut files: Vec<FileId> = Vec::new();
    let mut index: HashMap<(Dev, u64), Option<u32>> = HashMap::new();
    let mut entries: Vec<Entry> = Vec::new();
    let mut unresolved = 0u64;
    let mut traced = 0u64;
    for r in &b.reads {
        traced += r.pages * 4096;
        let idx = *index.entry((r.dev, r.ino)).or_insert_with(|| {
            let p = path_of(r.dev, r.ino)?;
            let f = FileId::of(&p).filter(|f| f.dev == r.dev && f.ino == r.ino)?;
            if f.kind != crate::resolve::FileKind::Regular {
                return None;
            }
            files.push(f);
            Some(files.len() as u32 - 1)
        });
        let Some(file) = idx else {
            unresolved += r.pages;
            continue;
        };
        let (offset, len) = (r.page * 4096, r.pages * 4096);
        match entries.last_mut() {
            Some(Entry::Data {
                file: f,
                offset: o,
                len: l,
            }) if *f == file && *o + *l == offset => *l += len,
            _ => entries.push(Entry::Data { file, offset, len }),
        }
    }
    Plan {
        app: b.trigger.path.display().to_string(),
        created_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        strategy: "burst".into(),
        page_size: 4096,
        files,
        devices: vec![],
        entries,
        provenance: Provenance {
            traced_data_bytes: traced,
            unresolved_pages: unresolved,
            ..Provenance::default()
        },
        hold_entries: 0,
        segments: vec![],
        t_exp_ms: None,
        notes: vec![format!(
            "a {} I/O burst of {} reads over {:.0} ms after opening {}",
            if b.full { "full" } else { "partial" },
            b.reads.len(),
            (b.end.saturating_sub(b.start)) as f64 / 1e6,
            b.trigger.path.display()
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_plan_keeps_the_order_merges_and_counts_what_it_cannot_open() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![1u8; 64 << 10]).unwrap();
        let id = FileId::of(&a).unwrap();
        let other = Dev {
            major: 0,
            minor: 99,
        };
        let read = |dev, ino, page, pages| Read {
            dev,
            ino,
            page,
            pages,
            pid: 1,
        };
        let b = Burst {
            trigger: Opened {
                dev: id.dev,
                ino: id.ino,
                path: a.clone(),
                t: 0,
                pid: 1,
                comm: None,
            },
            alternatives: vec![],
            reads: vec![
                read(id.dev, id.ino, 4, 2),
                read(id.dev, id.ino, 6, 2),
                read(other, 7, 0, 3),
                read(id.dev, id.ino, 0, 1),
            ],
            start: 0,
            end: 5_000_000,
            full: false,
            reader: Some(1),
        };
        let p = burst_plan(&b, &|dev, ino| {
            (dev == id.dev && ino == id.ino).then(|| a.clone())
        });
        assert_eq!(p.files.len(), 1);
        assert_eq!(
            p.entries,
            vec![
                Entry::Data {
                    file: 0,
                    offset: 4 * 4096,
                    len: 4 * 4096
                },
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 4096
                }
            ]
        );
        assert_eq!(p.provenance.unresolved_pages, 3);
        assert!(Plan::decode(&p.encode().unwrap()).is_ok());
    }
}
