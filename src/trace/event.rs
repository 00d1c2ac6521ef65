//! Typed trace events and their decoder. The decoder is built from the `format` files of the
//! events we enable; each record is matched on its `common_type` id and its fields are read at
//! the offsets the kernel published.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::format::{EventFormat, FieldRef};
use super::TraceError;
use crate::sys::Dev;

/// The tracepoints a recording enables, as (system, event).
pub const LAUNCH_EVENTS: &[(&str, &str)] = &[
    ("filemap", "mm_filemap_add_to_page_cache"),
    ("filemap", "mm_filemap_map_pages"),
    ("filemap", "mm_filemap_fault"),
    ("filemap", "mm_filemap_get_pages"),
    ("readahead", "page_cache_sync_ra"),
    ("ext4", "ext4_load_inode"),
    ("ext4", "ext4_ext_load_extent"),
    ("sched", "sched_process_exec"),
    ("sched", "sched_process_fork"),
    ("sched", "sched_process_exit"),
];

/// Block events run in interrupt context for completions, where a pid filter would drop them,
/// so they go to their own unfiltered instance.
pub const BLOCK_EVENTS: &[(&str, &str)] =
    &[("block", "block_rq_issue"), ("block", "block_rq_complete")];

/// What `explain` adds to the unfiltered instance: every switch (with a kernel stack for each
/// uninterruptible sleep) and wakeup, so that the time of every task, and who had the CPU
/// meanwhile, is known; and every page-cache insert with the thread that made it (prefetcher,
/// application or anyone else).
pub const SCHED_EVENTS: &[(&str, &str)] = &[
    ("sched", "sched_switch"),
    ("sched", "sched_waking"),
    ("filemap", "mm_filemap_add_to_page_cache"),
    ("ftrace", "kernel_stack"),
];

/// `prev_state` of a task that was preempted while runnable (`TASK_REPORT_MAX`, shown "R+").
pub const STATE_PREEMPTED: i64 = 0x100;
/// `prev_state` bits: interruptible (S) and uninterruptible (D) sleep, idle kthread (I).
pub const STATE_INTERRUPTIBLE: i64 = 0x1;
pub const STATE_UNINTERRUPTIBLE: i64 = 0x2;

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Timestamp in the instance's trace clock (`mono`: CLOCK_MONOTONIC ns).
    pub ts: u64,
    /// The thread the event happened in (`common_pid`).
    pub tid: i32,
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    /// A folio of `1 << order` pages was inserted into the page cache: a read from disk.
    /// Block-device pages (metadata) have a pseudo-fs `dev` and `ino` = the disk's dev_t.
    PageCacheAdd {
        dev: Dev,
        ino: u64,
        index: u64,
        order: u8,
    },
    /// Fault-around mapped cached pages `index..=last`.
    MapPages {
        dev: Dev,
        ino: u64,
        index: u64,
        last: u64,
    },
    /// A page fault on a file mapping.
    Fault {
        dev: Dev,
        ino: u64,
        index: u64,
    },
    /// A read() looked up pages `index..=last`, cached or not.
    GetPages {
        dev: Dev,
        ino: u64,
        index: u64,
        last: u64,
    },
    /// Synchronous readahead: the reader waited on a cache miss.
    SyncReadahead {
        dev: Dev,
        ino: u64,
        index: u64,
        pages: u32,
    },
    /// ext4 read an inode from its inode table.
    InodeLoad {
        dev: Dev,
        ino: u64,
    },
    /// ext4 read an extent-tree block of an inode.
    ExtentLoad {
        dev: Dev,
        ino: u64,
        lblk: u32,
    },
    Exec {
        pid: i32,
        filename: String,
    },
    Fork {
        parent: i32,
        child: i32,
    },
    Exit {
        pid: i32,
    },
    BlockIssue(BlockRq),
    BlockComplete(BlockRq),
    /// CPU `cpu` switched from `prev` (leaving in `prev_state`, see `STATE_*`) to `next`;
    /// `stack` holds the kernel stack of an uninterruptible sleep when one was recorded.
    Switch {
        cpu: u16,
        prev: i32,
        prev_comm: String,
        prev_state: i64,
        next: i32,
        next_comm: String,
        stack: Vec<u64>,
    },
    /// `pid` is being woken; the event's `tid` is the waker (sched_waking runs in its
    /// context), unless `irq`: woken from an interrupt, in whatever task it interrupted.
    Waking {
        pid: i32,
        irq: bool,
    },
    /// A kernel stack recorded by a `stacktrace` trigger, for the event just before it on the
    /// same CPU (the reader attaches it to that `Switch`).
    Stack(Vec<u64>),
}

impl EventKind {
    /// The pages an access event says were used: `(dev, ino, first, last)` of a fault, a
    /// fault-around or a read lookup; None for every other event (a page-cache insert is a
    /// read from disk, not a use). Learning and the burst check read accesses the same way.
    pub fn used_pages(&self) -> Option<(Dev, u64, u64, u64)> {
        match *self {
            EventKind::Fault { dev, ino, index } => Some((dev, ino, index, index)),
            EventKind::MapPages {
                dev,
                ino,
                index,
                last,
            }
            | EventKind::GetPages {
                dev,
                ino,
                index,
                last,
            } => Some((dev, ino, index, last.max(index))),
            _ => None,
        }
    }
}

/// A block request as the block layer saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockRq {
    pub dev: Dev,
    pub sector: u64,
    pub sectors: u32,
    /// The `rwbs` flags: R read, W write, M metadata, S sync, A readahead, ...
    pub rwbs: String,
}

impl BlockRq {
    pub fn is_read(&self) -> bool {
        self.rwbs.contains('R')
    }
    pub fn is_metadata(&self) -> bool {
        self.rwbs.contains('M')
    }
}

#[derive(Clone, Debug)]
enum Layout {
    Add {
        dev: FieldRef,
        ino: FieldRef,
        index: FieldRef,
        order: Option<FieldRef>,
    },
    Range {
        map_pages: bool,
        dev: FieldRef,
        ino: FieldRef,
        index: FieldRef,
        last: FieldRef,
    },
    Fault {
        dev: FieldRef,
        ino: FieldRef,
        index: FieldRef,
    },
    SyncRa {
        dev: FieldRef,
        ino: FieldRef,
        index: FieldRef,
        size: FieldRef,
    },
    InodeLoad {
        dev: FieldRef,
        ino: FieldRef,
    },
    ExtentLoad {
        dev: FieldRef,
        ino: FieldRef,
        lblk: FieldRef,
    },
    Exec {
        filename: FieldRef,
        pid: FieldRef,
    },
    Fork {
        parent: FieldRef,
        child: FieldRef,
    },
    Exit {
        pid: FieldRef,
    },
    Block {
        complete: bool,
        dev: FieldRef,
        sector: FieldRef,
        sectors: FieldRef,
        rwbs: FieldRef,
    },
    Switch {
        prev: FieldRef,
        prev_comm: FieldRef,
        prev_state: FieldRef,
        next: FieldRef,
        next_comm: FieldRef,
    },
    Waking {
        pid: FieldRef,
    },
    Stack {
        size: FieldRef,
        caller: FieldRef,
    },
}

/// Decodes raw records of the events it was built for; records of other ids are ignored.
#[derive(Clone, Debug)]
pub struct Decoder {
    common_type: FieldRef,
    common_pid: FieldRef,
    common_flags: Option<FieldRef>,
    layouts: HashMap<u16, Layout>,
}

impl Decoder {
    /// Build from the parsed formats of the enabled events. Unknown event names are an error
    /// so that a typo cannot silently record nothing.
    pub fn new(formats: &[EventFormat]) -> Result<Decoder, TraceError> {
        let first = formats
            .first()
            .ok_or_else(|| TraceError::Format("no event formats".into()))?;
        let common_type = first.require("common_type")?;
        let common_pid = first.require("common_pid")?;
        let common_flags = first.field("common_flags").map(FieldRef::from);
        let mut layouts = HashMap::new();
        for f in formats {
            let r = |n: &str| f.require(n);
            let layout = match f.name.as_str() {
                "mm_filemap_add_to_page_cache" => Layout::Add {
                    dev: r("s_dev")?,
                    ino: r("i_ino")?,
                    index: r("index")?,
                    order: f.field("order").map(FieldRef::from),
                },
                "mm_filemap_map_pages" | "mm_filemap_get_pages" => Layout::Range {
                    map_pages: f.name == "mm_filemap_map_pages",
                    dev: r("s_dev")?,
                    ino: r("i_ino")?,
                    index: r("index")?,
                    last: r("last_index")?,
                },
                "mm_filemap_fault" => Layout::Fault {
                    dev: r("s_dev")?,
                    ino: r("i_ino")?,
                    index: r("index")?,
                },
                "page_cache_sync_ra" => Layout::SyncRa {
                    dev: r("s_dev")?,
                    ino: r("i_ino")?,
                    index: r("index")?,
                    size: r("size")?,
                },
                "ext4_load_inode" => Layout::InodeLoad {
                    dev: r("dev")?,
                    ino: r("ino")?,
                },
                "ext4_ext_load_extent" => Layout::ExtentLoad {
                    dev: r("dev")?,
                    ino: r("ino")?,
                    lblk: r("lblk")?,
                },
                "sched_process_exec" => Layout::Exec {
                    filename: r("filename")?,
                    pid: r("pid")?,
                },
                "sched_process_fork" => Layout::Fork {
                    parent: r("parent_pid")?,
                    child: r("child_pid")?,
                },
                "sched_process_exit" => Layout::Exit { pid: r("pid")? },
                "block_rq_issue" | "block_rq_complete" => Layout::Block {
                    complete: f.name == "block_rq_complete",
                    dev: r("dev")?,
                    sector: r("sector")?,
                    sectors: r("nr_sector")?,
                    rwbs: r("rwbs")?,
                },
                "sched_switch" => Layout::Switch {
                    prev: r("prev_pid")?,
                    prev_comm: r("prev_comm")?,
                    prev_state: r("prev_state")?,
                    next: r("next_pid")?,
                    next_comm: r("next_comm")?,
                },
                "sched_waking" => Layout::Waking { pid: r("pid")? },
                "kernel_stack" => Layout::Stack {
                    size: r("size")?,
                    caller: r("caller")?,
                },
                other => return Err(TraceError::Format(format!("no decoder for event {other}"))),
            };
            layouts.insert(f.id, layout);
        }
        Ok(Decoder {
            common_type,
            common_pid,
            common_flags,
            layouts,
        })
    }

    /// Decode one record. Ok(None) for events this decoder was not built for; Err for a
    /// record too short for its own layout.
    pub fn decode(&self, ts: u64, rec: &[u8]) -> Result<Option<Event>, TraceError> {
        let short = || TraceError::Format("record shorter than its format".into());
        let Some(id) = self.common_type.uint(rec) else {
            return Err(short());
        };
        let Some(layout) = self.layouts.get(&(id as u16)) else {
            return Ok(None);
        };
        let tid = self.common_pid.int(rec).ok_or_else(short)? as i32;
        let u = |f: &FieldRef| f.uint(rec).ok_or_else(short);
        let i = |f: &FieldRef| f.int(rec).map(|v| v as i32).ok_or_else(short);
        let dev = |f: &FieldRef| u(f).map(Dev::from_kernel);
        let kind = match layout {
            Layout::Add {
                dev: d,
                ino,
                index,
                order,
            } => EventKind::PageCacheAdd {
                dev: dev(d)?,
                ino: u(ino)?,
                index: u(index)?,
                order: match order {
                    Some(o) => u(o)? as u8,
                    None => 0,
                },
            },
            Layout::Range {
                map_pages,
                dev: d,
                ino,
                index,
                last,
            } => {
                let (dev, ino, index, last) = (dev(d)?, u(ino)?, u(index)?, u(last)?);
                if *map_pages {
                    EventKind::MapPages {
                        dev,
                        ino,
                        index,
                        last,
                    }
                } else {
                    EventKind::GetPages {
                        dev,
                        ino,
                        index,
                        last,
                    }
                }
            }
            Layout::Fault { dev: d, ino, index } => EventKind::Fault {
                dev: dev(d)?,
                ino: u(ino)?,
                index: u(index)?,
            },
            Layout::SyncRa {
                dev: d,
                ino,
                index,
                size,
            } => EventKind::SyncReadahead {
                dev: dev(d)?,
                ino: u(ino)?,
                index: u(index)?,
                pages: u(size)? as u32,
            },
            Layout::InodeLoad { dev: d, ino } => EventKind::InodeLoad {
                dev: dev(d)?,
                ino: u(ino)?,
            },
            Layout::ExtentLoad { dev: d, ino, lblk } => EventKind::ExtentLoad {
                dev: dev(d)?,
                ino: u(ino)?,
                lblk: u(lblk)? as u32,
            },
            Layout::Exec { filename, pid } => EventKind::Exec {
                pid: i(pid)?,
                filename: filename.string(rec).ok_or_else(short)?,
            },
            Layout::Fork { parent, child } => EventKind::Fork {
                parent: i(parent)?,
                child: i(child)?,
            },
            Layout::Exit { pid } => EventKind::Exit { pid: i(pid)? },
            Layout::Block {
                complete,
                dev: d,
                sector,
                sectors,
                rwbs,
            } => {
                let rq = BlockRq {
                    dev: dev(d)?,
                    sector: u(sector)?,
                    sectors: u(sectors)? as u32,
                    rwbs: rwbs.string(rec).ok_or_else(short)?,
                };
                if *complete {
                    EventKind::BlockComplete(rq)
                } else {
                    EventKind::BlockIssue(rq)
                }
            }
            Layout::Switch {
                prev,
                prev_comm,
                prev_state,
                next,
                next_comm,
            } => EventKind::Switch {
                cpu: 0,
                prev: i(prev)?,
                prev_comm: prev_comm.string(rec).ok_or_else(short)?,
                prev_state: prev_state.int(rec).ok_or_else(short)?,
                next: i(next)?,
                next_comm: next_comm.string(rec).ok_or_else(short)?,
                stack: Vec::new(),
            },
            Layout::Waking { pid } => EventKind::Waking {
                pid: i(pid)?,
                // TRACE_FLAG_HARDIRQ | TRACE_FLAG_SOFTIRQ (kernel/trace/trace.h).
                irq: self
                    .common_flags
                    .and_then(|f| f.uint(rec))
                    .is_some_and(|fl| fl & 0x18 != 0),
            },
            Layout::Stack { size, caller } => {
                // `caller` is declared as 8 entries but holds `size` of them: the record is
                // as long as the stack (read no further than the record goes).
                let n = u(size)? as usize;
                let words = rec.get(caller.offset..).unwrap_or(&[]).chunks_exact(8);
                EventKind::Stack(
                    words
                        .take(n)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
                        .collect(),
                )
            }
        };
        Ok(Some(Event { ts, tid, kind }))
    }
}

/// A `sched_process_exec` event as tracefs writes it in text (`trace`, `trace_pipe`), for the
/// readers that take the text instead of the binary ring: the daemon's exec detection and
/// the bench's clock of the launcher.
#[derive(Debug, PartialEq)]
pub struct ExecText<'a> {
    /// The trace clock's time, seconds.
    pub ts: f64,
    pub filename: &'a str,
    /// The process's id after the exec (a thread that execs takes its group leader's).
    pub pid: i32,
}

/// Parse one text line `COMM-PID [CPU] FLAGS TS: sched_process_exec: filename=F pid=P
/// old_pid=P`; any other line gives None. The file name may hold spaces: the pid is the one
/// after its last " pid=".
pub fn parse_exec_text(line: &str) -> Option<ExecText<'_>> {
    let (head, rest) = line.split_once(": sched_process_exec: filename=")?;
    let ts = head.rsplit(' ').next()?.parse().ok()?;
    let (filename, ids) = rest.rsplit_once(" pid=")?;
    let pid = ids.split(' ').next()?.trim_end().parse().ok()?;
    Some(ExecText { ts, filename, pid })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::PageHeader;
    use crate::trace::ringbuf::parse_page;

    const FIX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/linux-6.18");

    fn fixture_decoder() -> Decoder {
        let mut formats = Vec::new();
        for (sys, ev) in LAUNCH_EVENTS.iter().chain(BLOCK_EVENTS) {
            let text = std::fs::read_to_string(format!("{FIX}/formats/{sys}/{ev}")).unwrap();
            formats.push(EventFormat::parse(&text).unwrap());
        }
        Decoder::new(&formats).unwrap()
    }

    fn fixture_events() -> Vec<Event> {
        let hdr =
            PageHeader::parse(&std::fs::read_to_string(format!("{FIX}/header_page")).unwrap())
                .unwrap();
        let dec = fixture_decoder();
        let mut events = Vec::new();
        for cpu in 0.. {
            let Ok(raw) = std::fs::read(format!("{FIX}/capture/cpu{cpu}.raw")) else {
                break;
            };
            for page in raw.chunks(4096) {
                parse_page(page, &hdr, |ts, rec| {
                    if let Some(e) = dec.decode(ts, rec).unwrap() {
                        events.push(e)
                    }
                })
                .unwrap();
            }
        }
        events.sort_by_key(|e| e.ts);
        events
    }

    /// The kernel's own text rendering of the same capture, one line per event.
    fn text_lines() -> Vec<String> {
        std::fs::read_to_string(format!("{FIX}/capture/trace.txt"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn decodes_recorded_capture_like_the_kernel_text() {
        let events = fixture_events();
        let lines = text_lines();
        assert_eq!(events.len(), lines.len(), "every record decodes");
        // Compare a rendering of each decoded event with the kernel's text for it.
        for (e, line) in events.iter().zip(&lines) {
            let want = match &e.kind {
                EventKind::PageCacheAdd {
                    dev,
                    ino,
                    index,
                    order,
                } => format!(
                    "mm_filemap_add_to_page_cache: dev {dev} ino {ino:x} ofs={} order={order}",
                    index << 12
                ),
                EventKind::MapPages {
                    dev,
                    ino,
                    index,
                    last,
                } => format!(
                    "mm_filemap_map_pages: dev={dev} ino={ino:x} ofs={}-{}",
                    index << 12,
                    ((last + 1) << 12) - 1
                ),
                EventKind::GetPages {
                    dev,
                    ino,
                    index,
                    last,
                } => format!(
                    "mm_filemap_get_pages: dev={dev} ino={ino:x} ofs={}-{}",
                    index << 12,
                    ((last + 1) << 12) - 1
                ),
                EventKind::Fault { dev, ino, index } => format!(
                    "mm_filemap_fault: dev={dev} ino={ino:x} ofs={}",
                    index << 12
                ),
                EventKind::SyncReadahead {
                    dev, ino, index, ..
                } => {
                    format!("page_cache_sync_ra: dev={dev} ino={ino:x} index={index}")
                }
                EventKind::InodeLoad { dev, ino } => {
                    format!("ext4_load_inode: dev {},{} ino {ino}", dev.major, dev.minor)
                }
                EventKind::ExtentLoad { dev, ino, lblk } => format!(
                    "ext4_ext_load_extent: dev {},{} ino {ino} lblk {lblk}",
                    dev.major, dev.minor
                ),
                EventKind::Exec { pid, filename } => {
                    format!("sched_process_exec: filename={filename} pid={pid}")
                }
                EventKind::Fork { parent, child } => {
                    format!("sched_process_fork: comm= pid={parent} child_comm= child_pid={child}")
                }
                EventKind::Exit { pid } => format!("sched_process_exit: comm= pid={pid}"),
                EventKind::BlockIssue(rq) => {
                    format!(
                        "block_rq_issue: {},{} {}",
                        rq.dev.major, rq.dev.minor, rq.rwbs
                    ) + &format!(" {} + {}", rq.sector, rq.sectors)
                }
                EventKind::BlockComplete(rq) => format!(
                    "block_rq_complete: {},{} {}",
                    rq.dev.major, rq.dev.minor, rq.rwbs
                ),
                EventKind::Switch { .. } | EventKind::Waking { .. } | EventKind::Stack(_) => {
                    panic!("not enabled in this capture: {e:?}")
                }
            };
            // Every piece of our rendering must appear, in order, in the kernel's line.
            let mut rest = line.as_str();
            for piece in want.split(' ').filter(|p| !p.is_empty()) {
                let piece = piece.trim_end_matches('=');
                match rest.find(piece) {
                    Some(i) => rest = &rest[i + piece.len()..],
                    None => panic!("decoded {e:?}\n  expected piece {piece:?} in\n  {line}"),
                }
            }
            assert!(
                line.contains(&format!("-{} ", e.tid)),
                "tid {} in {line}",
                e.tid
            );
        }
    }

    #[test]
    fn capture_has_the_expected_kinds() {
        let events = fixture_events();
        let count = |f: &dyn Fn(&EventKind) -> bool| events.iter().filter(|e| f(&e.kind)).count();
        assert!(count(&|k| matches!(k, EventKind::PageCacheAdd { .. })) > 100);
        assert!(count(&|k| matches!(k, EventKind::Exec { .. })) >= 1);
        assert!(count(&|k| matches!(k, EventKind::Fork { .. })) >= 1);
        // Metadata: block-device pages (pseudo-fs dev, major 0) are present in a cold capture.
        assert!(count(&|k| matches!(k, EventKind::PageCacheAdd { dev, .. } if dev.major == 0)) > 0);
        // Timestamps are monotonic after sorting and in the mono clock (seconds since boot).
        assert!(events.first().unwrap().ts > 1_000_000);
    }

    #[test]
    fn short_records_error() {
        let dec = fixture_decoder();
        assert!(dec.decode(0, &[]).is_err());
        // A known id (add_to_page_cache = 600 in the fixture) with a truncated body.
        let mut rec = vec![0u8; 12];
        rec[0..2].copy_from_slice(&600u16.to_le_bytes());
        assert!(dec.decode(0, &rec).is_err());
        // An unknown id is ignored.
        let mut rec = vec![0u8; 64];
        rec[0..2].copy_from_slice(&1u16.to_le_bytes());
        assert_eq!(dec.decode(0, &rec).unwrap(), None);
    }

    #[test]
    fn exec_text_lines_as_this_kernel_writes_them() {
        let l = "        pdflatex-30247   [000] ..... 36208.138146: sched_process_exec: \
                 filename=/usr/bin/pdf tex pid=30247 old_pid=30247\n";
        assert_eq!(
            parse_exec_text(l),
            Some(ExecText {
                ts: 36208.138146,
                filename: "/usr/bin/pdf tex",
                pid: 30247
            })
        );
        assert_eq!(
            parse_exec_text("sh-1 [000] ..... 1.0: sched_process_fork: pid=1 child_pid=2"),
            None
        );
        assert_eq!(parse_exec_text("# tracer: nop"), None);
    }
}
