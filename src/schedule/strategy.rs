//! Scheduling strategies: pure functions from the launch-order items of an app (each entry
//! with the time the launch first needed it and its disk address) to an ordered plan.
//!
//! - `fast`: FAST as published: launch order, one request per traced range.
//! - `trace`: launch order, ranges contiguous in order and position merged.
//! - `sorted`: the whole plan by disk address, adjacent ranges merged, fetched before the
//!   application runs (GSoC prefetch, the Windows prefetcher: the HDD baseline).
//! - `paralfetch`: metadata shift (Paralfetch Alg. 1) and range merge (Alg. 2), with the
//!   thresholds of its Table 2 by device class, tuned per app by dynamic scheduling.
//! - `hybrid`: the IEICE segmentation (Alg. 1): segments taken from the tail so that, after
//!   the first segment is fetched, CPU and disk stay busy; each segment sorted by address.

use serde::{Deserialize, Serialize};

use crate::plan::Entry;

/// One entry of the launch-order plan, with what strategies reorder it by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub entry: Entry,
    /// Nanoseconds since exec when the launch first needed it.
    pub t: u64,
    /// Disk byte address of its first block (FIEMAP for data, the offset for metadata), when
    /// known. Filesystem-level metadata operations have none.
    pub disk: Option<u64>,
}

impl Item {
    pub fn is_metadata(&self) -> bool {
        !matches!(self.entry, Entry::Data { .. })
    }

    /// Bytes it reads (filesystem-level metadata operations count as one block).
    pub fn bytes(&self, block: u64) -> u64 {
        match self.entry.bytes() {
            0 => block,
            n => n,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Strategy {
    Fast,
    Trace,
    Sorted,
    Paralfetch,
    Hybrid,
}

impl Strategy {
    pub const ALL: [Strategy; 5] = [
        Strategy::Fast,
        Strategy::Trace,
        Strategy::Sorted,
        Strategy::Paralfetch,
        Strategy::Hybrid,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Strategy::Fast => "fast",
            Strategy::Trace => "trace",
            Strategy::Sorted => "sorted",
            Strategy::Paralfetch => "paralfetch",
            Strategy::Hybrid => "hybrid",
        }
    }

    pub fn parse(s: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// Paralfetch's per-app thresholds (Table 2), raised by dynamic scheduling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParalfetchSettings {
    /// Metadata shift size in bytes.
    pub shift_bytes: u64,
    /// I/O distance threshold for range merge (positions in the sequence).
    pub distance: u64,
}

impl ParalfetchSettings {
    /// Table 2: a device with command queueing starts at a 64 KB shift and distance 8 (the
    /// shift grows); one without starts at a 4 KB shift and distance 8 (the distance grows).
    pub fn defaults(queueing: bool) -> ParalfetchSettings {
        ParalfetchSettings {
            shift_bytes: if queueing { 64 * 1024 } else { 4 * 1024 },
            distance: 8,
        }
    }

    /// Dynamic scheduling (3.3): the launch waited too often, schedule more aggressively.
    pub fn raise(self, queueing: bool) -> ParalfetchSettings {
        if queueing {
            ParalfetchSettings {
                shift_bytes: self.shift_bytes + 16 * 1024,
                ..self
            }
        } else {
            ParalfetchSettings {
                distance: self.distance + 4,
                ..self
            }
        }
    }
}

/// Launch order, one request per traced range: the items as they are.
pub fn fast(items: &[Item]) -> Vec<Item> {
    items.to_vec()
}

/// Merge `b` into `a` when they are the same file (or device) and contiguous.
fn try_merge(a: &mut Item, b: &Item) -> bool {
    match (&mut a.entry, b.entry) {
        (
            Entry::Data {
                file: f1,
                offset: o1,
                len: l1,
            },
            Entry::Data {
                file: f2,
                offset: o2,
                len: l2,
            },
        ) if *f1 == f2 && *o1 + *l1 == o2 => {
            *l1 += l2;
            true
        }
        (
            Entry::Meta {
                device: d1,
                offset: o1,
                len: l1,
            },
            Entry::Meta {
                device: d2,
                offset: o2,
                len: l2,
            },
        ) if *d1 == d2 && *o1 + *l1 == o2 => {
            *l1 += l2;
            true
        }
        _ => false,
    }
}

/// Launch order, neighbours that continue each other merged into one request.
pub fn trace(items: &[Item]) -> Vec<Item> {
    let mut out: Vec<Item> = Vec::with_capacity(items.len());
    for it in items {
        if let Some(last) = out.last_mut() {
            if try_merge(last, it) {
                continue;
            }
        }
        out.push(*it);
    }
    out
}

/// Everything by disk address, adjacent ranges merged. Filesystem-level metadata operations
/// (no address) go first, in launch order: data requests depend on them.
pub fn sorted(items: &[Item]) -> Vec<Item> {
    let (mut meta, mut rest): (Vec<Item>, Vec<Item>) = items.iter().partition(|i| i.disk.is_none());
    rest.sort_by_key(|i| (i.disk, i.t));
    meta.extend(rest);
    let mut out: Vec<Item> = Vec::with_capacity(meta.len());
    for it in meta {
        if let Some(last) = out.last_mut() {
            if try_merge(last, &it) {
                continue;
            }
        }
        out.push(it);
    }
    out
}

/// Paralfetch Algorithm 1 (metadata shift): metadata entries move to the output at once; a
/// data entry waits until `shift` more bytes of metadata have been emitted after it arrived
/// (or until the end), so metadata is requested ahead of the data that depends on it.
pub fn metadata_shift(items: &[Item], shift: u64, block: u64) -> Vec<Item> {
    let mut out = Vec::with_capacity(items.len());
    let mut wait: std::collections::VecDeque<(u64, Item)> = Default::default();
    let mut out_meta = 0u64;
    for it in items {
        if it.is_metadata() {
            out.push(*it);
            out_meta += it.bytes(block);
            while wait.front().is_some_and(|(expire, _)| *expire <= out_meta) {
                if let Some((_, w)) = wait.pop_front() {
                    out.push(w);
                }
            }
        } else {
            wait.push_back((out_meta + shift, *it));
        }
    }
    out.extend(wait.into_iter().map(|(_, w)| w));
    out
}

/// Paralfetch Algorithm 2 (range merge): in address order, a range that continues the
/// current one of the same file or device is merged into it when their positions in the
/// sequence are at most `distance` apart; the merged request takes the earlier position.
pub fn range_merge(items: &[Item], distance: u64) -> Vec<Item> {
    let key = |it: &Item| match it.entry {
        Entry::Data { file, offset, .. } => Some((0u8, file, offset)),
        Entry::Meta { device, offset, .. } => Some((1u8, device, offset)),
        _ => None,
    };
    let mut order: Vec<usize> = (0..items.len())
        .filter(|&i| key(&items[i]).is_some())
        .collect();
    order.sort_by_key(|&i| key(&items[i]));
    let mut slot: Vec<Option<Item>> = items.iter().copied().map(Some).collect();
    let mut cur: Option<usize> = None;
    for &i in &order {
        if let Some(c) = cur {
            if let Some(a) = slot[c] {
                let mut m = a;
                if (i as u64).abs_diff(c as u64) <= distance && try_merge(&mut m, &items[i]) {
                    let pos = c.min(i);
                    m.t = a.t.min(items[i].t);
                    slot[c] = None;
                    slot[i] = None;
                    slot[pos] = Some(m);
                    cur = Some(pos);
                    continue;
                }
            }
        }
        cur = Some(i);
    }
    slot.into_iter().flatten().collect()
}

/// The Paralfetch schedule: metadata shift, then range merge.
pub fn paralfetch(items: &[Item], s: ParalfetchSettings, block: u64) -> Vec<Item> {
    range_merge(&metadata_shift(items, s.shift_bytes, block), s.distance)
}

/// Paralfetch 3.1, missing metadata: before each file's first data entry, the metadata its
/// data depends on (`missing[file]`: inode-table and extent blocks) that the sequence does not
/// already hold, at page granularity. Returns the items and how many entries were added.
pub fn insert_missing_metadata(
    items: &[Item],
    missing: &std::collections::HashMap<u32, Vec<Entry>>,
    page: u64,
) -> (Vec<Item>, usize) {
    let page = page.max(1);
    let pages_of = |offset: u64, len: u64| (offset / page)..(offset + len.max(1)).div_ceil(page);
    let mut have: std::collections::HashSet<(u32, u64)> = Default::default();
    for it in items {
        if let Entry::Meta {
            device,
            offset,
            len,
        } = it.entry
        {
            have.extend(pages_of(offset, len).map(|p| (device, p)));
        }
    }
    let mut seen: std::collections::HashSet<u32> = Default::default();
    let mut out = Vec::with_capacity(items.len());
    let mut added = 0;
    for it in items {
        if let Entry::Data { file, .. } = it.entry {
            if seen.insert(file) {
                for m in missing.get(&file).into_iter().flatten() {
                    let Entry::Meta {
                        device,
                        offset,
                        len,
                    } = *m
                    else {
                        continue;
                    };
                    // Only what no earlier entry brought in yet.
                    let new: Vec<u64> = pages_of(offset, len)
                        .filter(|p| !have.contains(&(device, *p)))
                        .collect();
                    let (Some(&first), Some(&last)) = (new.first(), new.last()) else {
                        continue;
                    };
                    have.extend(new.iter().map(|p| (device, *p)));
                    out.push(Item {
                        entry: Entry::Meta {
                            device,
                            offset: first * page,
                            len: (last + 1 - first) * page,
                        },
                        t: it.t,
                        disk: Some(first * page),
                    });
                    added += 1;
                }
            }
        }
        out.push(*it);
    }
    (out, added)
}

/// What the hybrid segmentation needs from the device: the time to fetch a set of requests
/// sorted by address. `record` measures it (cold) on this machine.
pub trait DiskTimer {
    fn fetch_ms(&mut self, sorted_items: &[Item]) -> f64;
}

/// Result of the IEICE segmentation.
#[derive(Clone, Debug, PartialEq)]
pub struct Segmented {
    pub items: Vec<Item>,
    /// Entry counts of the segments after sorting and merging, in fetch order (the first is
    /// fetched before the launch).
    pub segments: Vec<usize>,
    /// Expected launch time (Alg. 1 line 12), ms.
    pub t_exp_ms: f64,
}

/// CPU time the launch spent after each item before needing the next one, ms: the gap to the
/// next item's time, less that item's own fetch time (`io_ms`, per item) as the trace was cold.
pub fn cpu_times_with(items: &[Item], io_ms: &[f64]) -> Vec<f64> {
    (0..items.len())
        .map(|i| match items.get(i + 1) {
            Some(n) => ((n.t.saturating_sub(items[i].t)) as f64 / 1e6
                - io_ms.get(i + 1).copied().unwrap_or(0.0))
            .max(0.0),
            None => 0.0,
        })
        .collect()
}

fn sort_segment(seg: &[Item]) -> Vec<Item> {
    sorted(seg)
}

/// IEICE Algorithm 1: take segments from the tail; each next segment is the longest run
/// (going backwards) whose CPU time covers the fetch time of the segment after it.
pub fn hybrid(items: &[Item], cpu_ms: &[f64], disk: &mut dyn DiskTimer) -> Segmented {
    let n = items.len();
    if n == 0 {
        return Segmented {
            items: vec![],
            segments: vec![],
            t_exp_ms: 0.0,
        };
    }
    // Segment boundaries k: q_i = items[k_i .. k_{i-1}] (0-based, half-open).
    let mut bounds = vec![n, n - 1]; // q1 = (p_n)
    let mut times = Vec::new();
    loop {
        let (hi, lo) = (bounds[bounds.len() - 2], bounds[bounds.len() - 1]);
        let t = disk.fetch_ms(&sort_segment(&items[lo..hi]));
        times.push(t);
        if lo == 0 {
            break;
        }
        // GET_NEXT_SUBSEQUENCE: move k back until the CPU time of items[k..lo] reaches t.
        let mut k = lo;
        let mut acc = 0.0;
        loop {
            k -= 1;
            acc += cpu_ms[k];
            if acc >= t || k == 0 {
                break;
            }
        }
        bounds.push(k);
    }
    // bounds = [n, k1, k2, ..., 0]; segments from the head: q_m .. q_1.
    let m = times.len();
    let mut segs: Vec<usize> = bounds.windows(2).map(|w| w[0] - w[1]).collect();
    segs.reverse();
    let mut out = Vec::with_capacity(n);
    let mut out_lens = Vec::with_capacity(segs.len());
    let mut at = 0;
    for len in &segs {
        let sorted_seg = sort_segment(&items[at..at + len]);
        out_lens.push(sorted_seg.len());
        out.extend(sorted_seg);
        at += len;
    }
    // t_exp = t_m + t_{m-1} + CPU time of everything after the first segment.
    let first_len = segs[0];
    let t_m = times[m - 1];
    let t_m1 = if m >= 2 { times[m - 2] } else { 0.0 };
    let cpu_after: f64 = cpu_ms[first_len.min(n)..].iter().sum();
    Segmented {
        items: out,
        segments: out_lens,
        t_exp_ms: t_m + t_m1 + cpu_after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(file: u32, offset: u64, len: u64, t: u64, disk: u64) -> Item {
        Item {
            entry: Entry::Data { file, offset, len },
            t,
            disk: Some(disk),
        }
    }

    fn meta(offset: u64, t: u64) -> Item {
        Item {
            entry: Entry::Meta {
                device: 0,
                offset,
                len: 4096,
            },
            t,
            disk: Some(offset),
        }
    }

    /// The IEICE paper's example sequence: LBAs (10, 5, 9, 4, 8, 3, 7, 2, 6, 1) in launch
    /// order, one block each.
    fn ieice() -> Vec<Item> {
        [10u64, 5, 9, 4, 8, 3, 7, 2, 6, 1]
            .iter()
            .enumerate()
            .map(|(i, lba)| data(*lba as u32, 0, 4096, i as u64 * 1_000_000, *lba * 4096))
            .collect()
    }

    fn lbas(v: &[Item]) -> Vec<u64> {
        v.iter().map(|i| i.disk.unwrap() / 4096).collect()
    }

    #[test]
    fn missing_metadata_goes_before_each_files_first_data_once() {
        let d = |f, off| data(f, off, 4096, 0, 0);
        // File 1's inode block (page 7) is already traced; files 1 and 2 share an extent
        // block (page 9), fetched once, before the first of them.
        let v = vec![meta(7 * 4096, 0), d(1, 0), d(2, 0), d(1, 4096)];
        let mut m = std::collections::HashMap::new();
        let me = |p: u64| Entry::Meta {
            device: 0,
            offset: p * 4096,
            len: 4096,
        };
        m.insert(1u32, vec![me(7), me(9)]);
        m.insert(2u32, vec![me(8), me(9)]);
        let show = |out: &[Item]| -> Vec<String> {
            out.iter()
                .map(|i| match i.entry {
                    Entry::Data { file, offset, .. } => format!("D{file}@{}", offset / 4096),
                    Entry::Meta { offset, len, .. } => {
                        format!("M{}+{}", offset / 4096, len / 4096)
                    }
                    _ => "?".into(),
                })
                .collect()
        };
        let (out, added) = insert_missing_metadata(&v, &m, 4096);
        assert_eq!(show(&out), ["M7+1", "M9+1", "D1@0", "M8+1", "D2@0", "D1@1"]);
        assert_eq!(added, 2);
        // An inode straddling a page boundary brings both pages.
        m.clear();
        m.insert(
            2u32,
            vec![Entry::Meta {
                device: 0,
                offset: 5 * 4096 + 3584,
                len: 1024,
            }],
        );
        let (out, added) = insert_missing_metadata(&v, &m, 4096);
        assert_eq!(show(&out), ["M7+1", "D1@0", "M5+2", "D2@0", "D1@1"]);
        assert_eq!(added, 1);
    }

    #[test]
    fn metadata_shift_follows_algorithm_1() {
        let d = |f| data(f, 0, 4096, 0, f as u64 * 4096);
        let v = vec![d(1), meta(100, 0), d(2), meta(200, 0), meta(300, 0), d(3)];
        let out = metadata_shift(&v, 8192, 4096);
        let names: Vec<String> = out
            .iter()
            .map(|i| match i.entry {
                Entry::Data { file, .. } => format!("D{file}"),
                Entry::Meta { offset, .. } => format!("M{offset}"),
                _ => "?".into(),
            })
            .collect();
        // D1 waits for 8 KiB of metadata (M100, M200); D2 for 8 KiB after M100 (until M300).
        assert_eq!(names, ["M100", "M200", "D1", "M300", "D2", "D3"]);
        // A zero shift changes nothing.
        assert_eq!(metadata_shift(&v, 0, 4096).len(), 6);
    }

    #[test]
    fn range_merge_follows_algorithm_2() {
        // Sequence: A=(f1 @0), B=(f2 @0), C=(f1 @4K), D=(f1 @8K).
        let v = vec![
            data(1, 0, 4096, 0, 0),
            data(2, 0, 4096, 1, 9000),
            data(1, 4096, 4096, 2, 4096),
            data(1, 8192, 4096, 3, 8192),
        ];
        let m = range_merge(&v, 2);
        assert_eq!(
            m[0].entry,
            Entry::Data {
                file: 1,
                offset: 0,
                len: 8192
            },
            "C joins A (distance 2)"
        );
        assert_eq!(m.len(), 3, "D is 3 positions from A: kept apart");
        let m = range_merge(&v, 8);
        assert_eq!(
            m[0].entry,
            Entry::Data {
                file: 1,
                offset: 0,
                len: 12288
            }
        );
        assert_eq!(
            m[1].entry,
            Entry::Data {
                file: 2,
                offset: 0,
                len: 4096
            }
        );
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn paralfetch_settings_follow_table_2() {
        let q = ParalfetchSettings::defaults(true);
        assert_eq!((q.shift_bytes, q.distance), (64 * 1024, 8));
        assert_eq!(q.raise(true).shift_bytes, 80 * 1024);
        let n = ParalfetchSettings::defaults(false);
        assert_eq!((n.shift_bytes, n.distance), (4 * 1024, 8));
        assert_eq!(n.raise(false).distance, 12);
    }

    #[test]
    fn fast_keeps_the_launch_order() {
        assert_eq!(lbas(&fast(&ieice())), vec![10, 5, 9, 4, 8, 3, 7, 2, 6, 1]);
    }

    #[test]
    fn sorted_orders_by_address_and_puts_fs_metadata_first() {
        let mut v = ieice();
        v.push(Item {
            entry: Entry::Lookup { file: 0 },
            t: 99,
            disk: None,
        });
        let s = sorted(&v);
        assert_eq!(s[0].entry, Entry::Lookup { file: 0 });
        assert_eq!(lbas(&s[1..]), vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    }

    #[test]
    fn trace_and_sorted_merge_contiguous_ranges() {
        let v = vec![
            data(1, 0, 4096, 0, 100),
            data(1, 4096, 4096, 1, 104),
            data(2, 0, 4096, 2, 50),
            data(1, 8192, 4096, 3, 108),
        ];
        let t = trace(&v);
        assert_eq!(t.len(), 3);
        assert_eq!(
            t[0].entry,
            Entry::Data {
                file: 1,
                offset: 0,
                len: 8192
            }
        );
        let s = sorted(&v);
        assert_eq!(s.len(), 2);
        assert_eq!(
            s[1].entry,
            Entry::Data {
                file: 1,
                offset: 0,
                len: 12288
            }
        );
    }

    /// The IEICE example: with CPU time 1 per item and a disk that takes 1 per block, the
    /// segmentation from the tail gives shrinking segments toward the end, each sorted.
    #[test]
    fn hybrid_segments_the_ieice_example() {
        struct PerBlock(f64);
        impl DiskTimer for PerBlock {
            fn fetch_ms(&mut self, items: &[Item]) -> f64 {
                self.0 * items.len() as f64
            }
        }
        let items = ieice();
        let cpu = vec![1.0; 10];
        let s = hybrid(&items, &cpu, &mut PerBlock(1.0));
        // q1 = (1); q2 covers t1 = 1 → (6); q3 covers 1 → (2) ... every segment one item when
        // the disk is as fast as the CPU: the sequence stays in launch order.
        assert_eq!(s.segments.iter().sum::<usize>(), 10);
        assert_eq!(lbas(&s.items), vec![10, 5, 9, 4, 8, 3, 7, 2, 6, 1]);
        // A disk three times slower than the CPU: q1 = (p10), t1 = 3; p9, p8, p7 give CPU
        // time 3, so q2 = (p7..p9), t2 = 9; the six left cannot cover 9: q3 = (p1..p6).
        let s = hybrid(&items, &cpu, &mut PerBlock(3.0));
        assert_eq!(s.segments, vec![6, 3, 1]);
        assert_eq!(lbas(&s.items), vec![3, 4, 5, 8, 9, 10, 2, 6, 7, 1]);
        // t_exp = t3 + t2 + CPU time after the first segment = 18 + 9 + 4.
        assert!((s.t_exp_ms - 31.0).abs() < 1e-9, "{}", s.t_exp_ms);
    }
}
