//! `explain`: where a launch's time goes. Trace one launch with every switch, wakeup and
//! page-cache insert of the machine (and the kernel stack of each uninterruptible sleep), then
//! attribute every millisecond of the launch's critical path and of each of its tasks
//! ([`attribute`]): on the CPU, waiting for one (and for whom), waiting on a page the
//! prefetch had issued, on a page the launch read itself (planned but not yet issued: an
//! accessing-prefetching order inversion; or not planned: a miss), on metadata, on locks and
//! other processes. Plus the prefetcher's timeline: when each plan entry was issued and read,
//! against when the launch first needed it, and for each inversion the launch waited on, how
//! far the prefetch had got. What warmstart's front reads before the app's exec (its binary,
//! its database) is its own cost, not a miss of the plan.

pub mod attribute;
pub mod ksyms;
pub mod sectors;

use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::AtomicUsize;

use serde::Serialize;

pub use attribute::{Attribution, Cause, EntryState, PlanPages};

use crate::plan::Plan;
use crate::trace::tracefs::Tracefs;
use crate::trace::{TraceConfig, TraceError};

/// One traced launch, attributed.
#[derive(Clone, Debug, Serialize)]
pub struct Explained {
    /// `cold`, `warm` or `warmstart`.
    pub scenario: String,
    #[serde(flatten)]
    pub attribution: Attribution,
    /// Entries of the plan by state (how many the launch needed in time, in flight, first).
    pub entry_states: EntryCounts,
    /// How the launched command ended.
    #[serde(skip)]
    pub exit: crate::sys::Exit,
    /// CPU time of the root process (user + system, from its rusage), ms: what the
    /// attribution's time on the CPU can be checked against.
    pub root_cpu_ms: f64,
}

/// Plan entries by how they fared in a launch.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct EntryCounts {
    pub unused: usize,
    pub in_time: usize,
    pub in_flight: usize,
    pub app_first: usize,
}

impl EntryCounts {
    pub fn of(a: &Attribution) -> EntryCounts {
        let mut c = EntryCounts::default();
        for e in &a.entries {
            match e.state {
                EntryState::Unused => c.unused += 1,
                EntryState::InTime => c.in_time += 1,
                EntryState::InFlight => c.in_flight += 1,
                EntryState::AppFirst => c.app_first += 1,
            }
        }
        c
    }

    /// Accessing-prefetching order inversions (TPP): entries the launch needed before the
    /// prefetch had them in memory.
    pub fn inversions(&self) -> usize {
        self.in_flight + self.app_first
    }
}

/// Trace `exe argv` (a plain launch, or `warmstart run` when `prefetched`) and attribute it.
/// With `cold`, the page cache is dropped first.
#[allow(clippy::too_many_arguments)]
pub fn trace_and_attribute(
    tfs: &Tracefs,
    exe: &Path,
    argv: &[OsString],
    plan: Option<&Plan>,
    prefetched: bool,
    cold: bool,
    timeout: std::time::Duration,
    interrupt: &AtomicUsize,
    syms: &ksyms::Ksyms,
) -> Result<Explained, TraceError> {
    let cfg = TraceConfig {
        drop_caches: cold,
        quiet: true,
        timeout,
        // Idle periods are part of a launch here: only the tree's exit or the timeout ends it.
        idle: timeout,
        ..TraceConfig::default()
    };
    let traced = crate::trace::trace_explained(tfs, exe, argv, &cfg, interrupt)?;
    let tracer: std::collections::HashSet<i32> = traced.tracer_tids.iter().copied().collect();
    let pages = plan.map(PlanPages::of);
    let sectors = plan
        .map(|p| {
            sectors::SectorMap::build(p.files.iter().map(|f| (f.path.as_path(), f.dev, f.ino)))
        })
        .unwrap_or_default();
    let mut a = attribute::attribute(&attribute::Input {
        tree: &traced.events,
        system: &traced.block,
        root: traced.root_pid,
        start: traced.start_ts,
        end: traced.end_ts,
        prefetched,
        plan: pages.as_ref(),
        sectors: &sectors,
        syms,
        tracer: &tracer,
    });
    let path_of = |dev: &str, ino: u64| {
        traced
            .opens
            .iter()
            .find(|o| o.dev.to_string() == dev && o.ino == ino)
            .map(|o| o.path.display().to_string())
            .or_else(|| {
                plan?
                    .files
                    .iter()
                    .find(|f| f.dev.to_string() == dev && f.ino == ino)
                    .map(|f| f.path.display().to_string())
            })
    };
    for m in &mut a.missed {
        m.path = path_of(&m.dev, m.ino);
    }
    for l in &mut a.late {
        l.path = path_of(&l.dev, l.ino);
    }
    Ok(Explained {
        scenario: match (prefetched, cold) {
            (true, _) => "warmstart",
            (false, true) => "cold",
            (false, false) => "warm",
        }
        .into(),
        entry_states: EntryCounts::of(&a),
        attribution: a,
        exit: traced.exit,
        root_cpu_ms: (traced.usage.user_us + traced.usage.sys_us) as f64 / 1e3,
    })
}

/// The plan's timeline in `slices` slices of plan order: per slice, the median issue,
/// completion and first-need times (ms) and the inversions.
#[derive(Clone, Debug, Serialize)]
pub struct Slice {
    pub entries: std::ops::Range<usize>,
    pub issued_ms: Option<f64>,
    pub completed_ms: Option<f64>,
    pub needed_ms: Option<f64>,
    pub needed: usize,
    pub inversions: usize,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

pub fn slices(a: &Attribution, n: usize) -> Vec<Slice> {
    let total = a.entries.len();
    if total == 0 {
        return Vec::new();
    }
    let n = n.clamp(1, total);
    (0..n)
        .map(|k| {
            let r = k * total / n..(k + 1) * total / n;
            let es = &a.entries[r.clone()];
            Slice {
                entries: r,
                issued_ms: median(es.iter().filter_map(|e| e.issued_ms).collect()),
                completed_ms: median(es.iter().filter_map(|e| e.completed_ms).collect()),
                needed_ms: median(es.iter().filter_map(|e| e.needed_ms).collect()),
                needed: es.iter().filter(|e| e.needed_ms.is_some()).count(),
                inversions: es
                    .iter()
                    .filter(|e| matches!(e.state, EntryState::InFlight | EntryState::AppFirst))
                    .count(),
            }
        })
        .collect()
}

/// The human-readable report of one or more launches of the same command, side by side.
pub fn render(launches: &[Explained]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let fmt_ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    // Causes in order of the largest share in any launch.
    let mut causes: Vec<(String, f64)> = Vec::new();
    for l in launches {
        for (c, ms) in &l.attribution.critical {
            match causes.iter_mut().find(|x| &x.0 == c) {
                Some(x) => x.1 = x.1.max(*ms),
                None => causes.push((c.clone(), *ms)),
            }
        }
    }
    causes.sort_by(|a, b| b.1.total_cmp(&a.1));
    let width = causes.iter().map(|c| c.0.len()).max().unwrap_or(10).max(28);
    let _ = writeln!(
        s,
        "The launch's critical path (ms): the root process's time, a wait on another process or\n\
         thread of the app replaced by what that one was doing meanwhile.\n"
    );
    let _ = write!(s, "{:width$}", "");
    for l in launches {
        let _ = write!(s, " {:>10}", l.scenario);
    }
    let _ = writeln!(s);
    let _ = write!(s, "{:width$}", "wall time");
    for l in launches {
        let _ = write!(s, " {:>10.1}", l.attribution.wall_ms);
    }
    let _ = writeln!(s);
    let _ = write!(s, "{:width$}", "off the CPU");
    for l in launches {
        let off: f64 = l
            .attribution
            .critical_causes
            .iter()
            .filter(|c| c.0.off_cpu())
            .map(|c| c.1)
            .sum();
        let _ = write!(s, " {off:>10.1}");
    }
    let _ = writeln!(s);
    for (c, max) in &causes {
        if *max < 0.05 {
            continue;
        }
        let _ = write!(s, "  {c:w$}", w = width - 2);
        for l in launches {
            let v = l.attribution.critical.get(c).copied();
            let _ = write!(s, " {:>10}", fmt_ms(v));
        }
        let _ = writeln!(s);
    }
    for l in launches {
        let a = &l.attribution;
        let io: f64 = a
            .all_tasks
            .iter()
            .filter(|(k, _)| {
                k.starts_with("page")
                    || k.contains("block")
                    || k.contains("bitmap")
                    || k.contains("metadata")
                    || k.contains("journal")
                    || k.contains("queue full")
            })
            .map(|(_, v)| v)
            .sum();
        let cpu_wait: f64 = a
            .all_tasks
            .iter()
            .filter(|(k, _)| k.starts_with("waiting for a CPU"))
            .map(|(_, v)| v)
            .sum();
        let _ = writeln!(
            s,
            "\n{}: {} task(s) of the app; across all of them {io:.1} ms waiting on I/O, {cpu_wait:.1} ms waiting for a CPU.",
            l.scenario, a.tasks
        );
        if a.unnamed_stacks > 0 {
            let _ = writeln!(
                s,
                "  ({} sleeps had kernel stacks that could not be named: /proc/kallsyms unreadable?)",
                a.unnamed_stacks
            );
        }
        if let Some(t) = a.app_exec_ms {
            let _ = writeln!(s, "  the application exec'd at {t:.1} ms");
        }
        if l.scenario != "warmstart" {
            let _ = writeln!(
                s,
                "  read from disk by the app itself: {} pages",
                a.app_read_pages
            );
        } else {
            let _ = writeln!(
                s,
                "  read from disk by the app itself: {} pages, of them {} not in the plan (miss ratio {:.1}% of the plan's {} pages)",
                a.app_read_pages,
                a.missed_pages,
                ratio(a.missed_pages, a.plan_pages),
                a.plan_pages
            );
        }
        if l.scenario == "warmstart" {
            let c = &l.entry_states;
            let _ = writeln!(
                s,
                "  prefetched: {} pages, first at {} ms, last at {} ms; never touched by the launch: {} (waste {:.1}% of the plan)",
                a.prefetched_pages,
                fmt_ms(a.prefetch_first_ms),
                fmt_ms(a.prefetch_last_ms),
                a.wasted_pages,
                ratio(a.wasted_pages, a.plan_pages)
            );
            let _ = writeln!(
                s,
                "  plan data entries the launch used: {} in time, {} in flight when needed, {} needed before the prefetch issued them ({} inversions); {} unused",
                c.in_time,
                c.in_flight,
                c.app_first,
                c.inversions(),
                c.unused
            );
            let sl = slices(a, 10);
            if !sl.is_empty() {
                let _ = writeln!(
                    s,
                    "  by plan position (median ms):   entries    issued  complete    needed  inversions"
                );
                for x in &sl {
                    let _ = writeln!(
                        s,
                        "  {:>28} {:>9} {:>9} {:>9} {:>11}",
                        format!("{}-{}", x.entries.start, x.entries.end),
                        fmt_ms(x.issued_ms),
                        fmt_ms(x.completed_ms),
                        fmt_ms(x.needed_ms),
                        format!("{}/{}", x.inversions, x.needed)
                    );
                }
            }
        }
        if !a.missed.is_empty() && l.scenario == "warmstart" {
            let _ = writeln!(s, "  misses (pages the plan lacks), most waited for first:");
            for m in a.missed.iter().take(8) {
                let name = m
                    .path
                    .clone()
                    .unwrap_or_else(|| format!("dev {} inode {}", m.dev, m.ino));
                let ranges: Vec<String> = m
                    .ranges
                    .iter()
                    .take(4)
                    .map(|(a, b)| format!("{}K+{}K", a * 4, (b - a + 1) * 4))
                    .collect();
                let _ = writeln!(
                    s,
                    "    {:>7.1} ms {:>6} pages  {name} @ {}{}",
                    m.waited_ms,
                    m.pages,
                    ranges.join(", "),
                    if m.ranges.len() > 4 { ", ..." } else { "" }
                );
            }
        }
        if !a.late.is_empty() && l.scenario == "warmstart" {
            let _ = writeln!(
                s,
                "  inversions waited for (planned, read by the app before the prefetch issued them), longest first:"
            );
            for x in a.late.iter().take(8) {
                let name = x
                    .path
                    .clone()
                    .unwrap_or_else(|| format!("dev {} inode {}", x.dev, x.ino));
                let _ = writeln!(
                    s,
                    "    {:>7.1} ms  entry {} ({name} @ {}K) at {:.1} ms, the prefetch at entry {}",
                    x.waited_ms,
                    x.entry,
                    x.page * 4,
                    x.at_ms,
                    x.issued_front
                        .map_or_else(|| "none yet".to_string(), |e| e.to_string())
                );
            }
        }
    }
    s
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}
