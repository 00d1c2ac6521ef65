//! Stage 5, schedule: turn a launch sequence plus resolved files into ordered plans. The base
//! is the launch's own first-access order (FAST's concurrent replay): metadata lookups and
//! directory listings are placed at the moment the launch needed them, data ranges are
//! clipped to the file size and never-used readahead is dropped; every item carries its time
//! and disk address. Each strategy (`strategy`) orders the base into a plan.

pub mod auto;
pub mod strategy;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::plan::{BlockDevice, Entry, Plan, Provenance};
use crate::resolve::{DirOwner, FileId, FileKind, Resolver};
use crate::sequence::{LaunchSequence, Target};
use crate::sys::Dev;
pub use strategy::{Item, ParalfetchSettings, Strategy};

/// Where a block device's node is (for metadata readahead).
pub trait DevicePaths {
    fn path_of(&self, dev: Dev) -> Option<PathBuf>;
}

/// /sys/dev/block/M:m/uevent names the device node under /dev.
pub struct SysDevicePaths;

impl DevicePaths for SysDevicePaths {
    fn path_of(&self, dev: Dev) -> Option<PathBuf> {
        let uevent = std::fs::read_to_string(format!("/sys/dev/block/{dev}/uevent")).ok()?;
        let name = uevent.lines().find_map(|l| l.strip_prefix("DEVNAME="))?;
        Some(PathBuf::from("/dev").join(name))
    }
}

/// Unused ranges (read by the kernel's readahead, never touched by the launch) up to this
/// many pages are kept: they fill gaps between used ranges so requests stay large. Longer
/// ones are dropped (Paralfetch's accurate tracing: prefetch what the launch used).
pub const KEEP_UNUSED_GAP_PAGES: u64 = 32;

#[derive(Clone, Copy)]
enum Step {
    Access(usize),
    Lookup(Dev, u64),
    ListDir(Dev, u64),
}

/// Disk addresses of file data, for the strategies that sort by them.
pub trait DiskMap {
    /// Disk byte address of `file`'s byte `offset`.
    fn physical(&mut self, file: &FileId, offset: u64) -> Option<u64>;
}

/// FIEMAP of each file, asked once per file at plan-build time.
#[derive(Default)]
pub struct FiemapDisk {
    extents: HashMap<(Dev, u64), Vec<crate::sys::Extent>>,
}

impl DiskMap for FiemapDisk {
    fn physical(&mut self, file: &FileId, offset: u64) -> Option<u64> {
        let ext = self.extents.entry((file.dev, file.ino)).or_insert_with(|| {
            use std::os::fd::AsFd;
            std::fs::File::open(&file.path)
                .ok()
                .and_then(|f| crate::sys::fiemap(f.as_fd()).ok())
                .unwrap_or_default()
        });
        ext.iter()
            .find(|e| e.logical <= offset && offset < e.logical + e.len)
            .map(|e| e.physical + (offset - e.logical))
    }
}

/// No disk addresses (tests; filesystems without FIEMAP): sorting keeps launch order.
pub struct NoDisk;

impl DiskMap for NoDisk {
    fn physical(&mut self, _: &FileId, _: u64) -> Option<u64> {
        None
    }
}

/// The launch-order plan before a strategy orders it.
#[derive(Clone, Debug)]
pub struct Base {
    /// Files, devices and provenance; `entries` empty.
    pub skeleton: Plan,
    pub items: Vec<Item>,
}

/// The plan of `app` in launch order with neighbours merged (the `trace` strategy).
pub fn build_plan(
    app: &str,
    seq: &LaunchSequence,
    resolver: &Resolver,
    devices: &dyn DevicePaths,
    dirs: &dyn DirOwner,
    runs: Vec<i64>,
) -> Plan {
    let base = build_base(app, seq, resolver, devices, dirs, &mut NoDisk, runs);
    let mut plan = base.skeleton;
    plan.entries = strategy::trace(&base.items)
        .into_iter()
        .map(|i| i.entry)
        .collect();
    plan.strategy = Strategy::Trace.name().into();
    plan
}

/// The base of every strategy: the launch-order items of `app`. A directory block read (per
/// `dirs`) also yields a listing of that directory at the same point, the form of that
/// metadata read that works without access to the block device.
pub fn build_base(
    app: &str,
    seq: &LaunchSequence,
    resolver: &Resolver,
    devices: &dyn DevicePaths,
    dirs: &dyn DirOwner,
    disk: &mut dyn DiskMap,
    runs: Vec<i64>,
) -> Base {
    build_base_with(
        app,
        seq,
        resolver,
        devices,
        dirs,
        disk,
        runs,
        &BaseOptions::default(),
    )
}

/// Options of `build_base_with`.
#[derive(Clone, Debug, Default)]
pub struct BaseOptions {
    /// Files modified at or after this wall-clock time (ns) were written by the launch itself
    /// during learning: marked volatile.
    pub volatile_since_ns: Option<i64>,
    /// Add a lookup of each file's path before its first data (a launch learned from a warm
    /// cache shows no metadata reads; this derives them).
    pub derive_lookups: bool,
}

#[allow(clippy::too_many_arguments)]
pub fn build_base_with(
    app: &str,
    seq: &LaunchSequence,
    resolver: &Resolver,
    devices: &dyn DevicePaths,
    dirs: &dyn DirOwner,
    disk: &mut dyn DiskMap,
    runs: Vec<i64>,
    bo: &BaseOptions,
) -> Base {
    let ps = seq.page_size.max(512);
    // One timeline of everything the launch needed, by time since exec. Metadata items sort
    // before a data access at the same instant: the data depends on them.
    let mut timeline: Vec<(u64, u8, Step)> = Vec::new();
    for (i, a) in seq.accesses.iter().enumerate() {
        timeline.push((a.t, 1, Step::Access(i)));
    }
    for l in &seq.inode_loads {
        timeline.push((l.t, 0, Step::Lookup(l.dev, l.ino)));
    }
    for d in &seq.dir_opens {
        timeline.push((d.t, 0, Step::ListDir(d.dev, d.ino)));
    }
    timeline.sort_by_key(|(t, k, _)| (*t, *k));

    let mut files: Vec<FileId> = Vec::new();
    let mut file_index: HashMap<(Dev, u64), u32> = HashMap::new();
    let mut devs: Vec<BlockDevice> = Vec::new();
    let mut dev_index: HashMap<Dev, Option<u32>> = HashMap::new();
    let mut items: Vec<Item> = Vec::new();
    let mut prov = Provenance {
        runs,
        dropped_pages: seq.dropped_pages,
        ..Provenance::default()
    };
    let mut unresolved = std::collections::HashSet::new();
    let mut looked_up = std::collections::HashSet::new();
    let mut listed = std::collections::HashSet::new();

    // Per filesystem, the directory whose fd names it for `Entry::Inode`: the shortest path
    // (its mount point, usually), so the choice does not depend on hash order.
    let mut anchors: HashMap<Dev, &FileId> = HashMap::new();
    for d in resolver.dirs() {
        let a = anchors.entry(d.dev).or_insert(d);
        if (d.path.as_os_str().len(), &d.path) < (a.path.as_os_str().len(), &a.path) {
            *a = d;
        }
    }
    let anchor_of = |dev: Dev| anchors.get(&dev).copied();
    // The directories by path, for the listings a warm learning run derives.
    let dir_at: HashMap<&Path, &FileId> = if bo.derive_lookups {
        resolver.dirs().map(|d| (d.path.as_path(), d)).collect()
    } else {
        HashMap::new()
    };
    let volatile_since = bo.volatile_since_ns;
    let mut file_idx = |id: &FileId, files: &mut Vec<FileId>| -> u32 {
        *file_index.entry((id.dev, id.ino)).or_insert_with(|| {
            let mut f = id.clone();
            f.volatile =
                f.kind == FileKind::Regular && volatile_since.is_some_and(|t| f.mtime_ns >= t);
            files.push(f);
            (files.len() - 1) as u32
        })
    };

    for (t, _, step) in timeline {
        match step {
            Step::Access(i) => {
                let a = seq.accesses[i];
                match a.target {
                    Target::File { dev, ino } => {
                        prov.traced_data_bytes += a.pages * ps;
                        let Some(id) = resolver
                            .get(dev, ino)
                            .filter(|f| f.kind == FileKind::Regular)
                        else {
                            prov.unresolved_pages += a.pages;
                            unresolved.insert((dev, ino));
                            continue;
                        };
                        if !a.used && a.pages > KEEP_UNUSED_GAP_PAGES {
                            prov.unused_pages_dropped += a.pages;
                            continue;
                        }
                        let offset = a.page * ps;
                        if offset >= id.size {
                            continue; // beyond EOF: a read() request longer than the file
                        }
                        let len = (a.pages * ps).min(id.size - offset);
                        let file = file_idx(id, &mut files);
                        if bo.derive_lookups && looked_up.insert((dev, ino)) {
                            // A cold launch reads the blocks of each directory on the way to
                            // the file (its name, and the names it missed there: a loader's
                            // or an interpreter's search), which a warm one reads from memory:
                            // `record`'s plans list them, from those reads; the daemon's held
                            // 4 of the 43 listings of `record`'s R plan (docs/measurements.md,
                            // 2026-11-29). Outermost first, as a path walk reads them;
                            // directories on a block device only.
                            let up: Vec<&Path> = id.path.ancestors().skip(1).collect();
                            for d in up.into_iter().rev().filter_map(|a| dir_at.get(a)) {
                                if d.dev.major != 0 && listed.insert((d.dev, d.ino)) {
                                    let dir = file_idx(d, &mut files);
                                    items.push(Item {
                                        entry: Entry::ListDir { file: dir },
                                        t,
                                        disk: None,
                                    });
                                }
                            }
                            items.push(Item {
                                entry: Entry::Lookup { file },
                                t,
                                disk: None,
                            });
                        }
                        items.push(Item {
                            entry: Entry::Data { file, offset, len },
                            t,
                            disk: disk.physical(id, offset),
                        });
                    }
                    Target::Meta { bdev } => {
                        let slot = *dev_index.entry(bdev).or_insert_with(|| {
                            devices.path_of(bdev).map(|path| {
                                devs.push(BlockDevice { path, dev: bdev });
                                (devs.len() - 1) as u32
                            })
                        });
                        if let Some(device) = slot {
                            items.push(Item {
                                entry: Entry::Meta {
                                    device,
                                    offset: a.page * ps,
                                    len: a.pages * ps,
                                },
                                t,
                                disk: Some(a.page * ps),
                            });
                        }
                        let owner = dirs
                            .dir_owning(bdev, a.page * ps, a.pages * ps)
                            .and_then(|(d, i)| resolver.get(d, i));
                        if let Some(id) = owner {
                            if listed.insert((id.dev, id.ino)) {
                                let file = file_idx(id, &mut files);
                                items.push(Item {
                                    entry: Entry::ListDir { file },
                                    t,
                                    disk: None,
                                });
                            }
                        }
                    }
                }
            }
            Step::Lookup(dev, ino) => {
                if !looked_up.insert((dev, ino)) {
                    continue;
                }
                if let Some(id) = resolver.get(dev, ino) {
                    let file = file_idx(id, &mut files);
                    items.push(Item {
                        entry: Entry::Lookup { file },
                        t,
                        disk: None,
                    });
                } else if let Some(anchor) = anchor_of(dev) {
                    // No path (stat-only files: python stats each module's source and opens
                    // only its cached bytecode): the inode by handle, through any planned
                    // directory of the same filesystem.
                    let file = file_idx(anchor, &mut files);
                    items.push(Item {
                        entry: Entry::Inode { file, ino },
                        t,
                        disk: None,
                    });
                }
            }
            Step::ListDir(dev, ino) => {
                if let Some(id) = resolver
                    .get(dev, ino)
                    .filter(|f| f.kind == FileKind::Directory)
                {
                    if listed.insert((dev, ino)) {
                        let file = file_idx(id, &mut files);
                        items.push(Item {
                            entry: Entry::ListDir { file },
                            t,
                            disk: None,
                        });
                    }
                }
            }
        }
    }
    prov.unresolved_files = unresolved.len() as u32;
    for (dev, ino) in &unresolved {
        tracing::debug!("unresolved: inode {ino} on {dev} (opened before tracing, or not by path)");
    }
    Base {
        skeleton: Plan {
            app: app.to_string(),
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            strategy: String::new(),
            page_size: ps as u32,
            files,
            devices: devs,
            entries: Vec::new(),
            provenance: prov,
            hold_entries: 0,
            segments: Vec::new(),
            t_exp_ms: None,
            notes: Vec::new(),
        },
        items,
    }
}

/// What a strategy needs besides the base: the device's class and timings, the app's
/// Paralfetch thresholds and the files' missing metadata.
pub struct StrategyContext<'a> {
    pub queueing: bool,
    pub paralfetch: ParalfetchSettings,
    pub disk: &'a mut dyn strategy::DiskTimer,
    pub missing: &'a MissingMeta,
}

/// (index into `MissingMeta::Found::devices`, byte offset, length).
pub type MetaRange = (usize, u64, u64);

/// Paralfetch's missing metadata (its 3.1) of a plan's files. Finding it reads the block
/// device (`learn::missing_metadata`), so it is looked up outside the strategies.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MissingMeta {
    #[default]
    NotLooked,
    /// Per file index: (index into `devices`, byte offset, length) of its inode-table block
    /// and extent-tree blocks. `skipped` says which filesystems could not be read.
    Found {
        devices: Vec<BlockDevice>,
        per_file: Vec<(u32, Vec<MetaRange>)>,
        skipped: Vec<String>,
    },
    /// Nothing could be read; why.
    Skipped(String),
}

/// Put `missing` into a paralfetch plan's items (adding its block devices to `plan`) and note
/// what was done in `plan.notes`.
pub fn with_missing_metadata(plan: &mut Plan, items: &[Item], missing: &MissingMeta) -> Vec<Item> {
    match missing {
        MissingMeta::NotLooked => items.to_vec(),
        MissingMeta::Skipped(why) => {
            plan.notes.push(format!(
                "missing metadata: not added ({why}); the prefetcher's open of each file before its first data loads its inode instead"
            ));
            items.to_vec()
        }
        MissingMeta::Found {
            devices,
            per_file,
            skipped,
        } => {
            let mut index = Vec::with_capacity(devices.len());
            for d in devices {
                let i = match plan.devices.iter().position(|p| p.dev == d.dev) {
                    Some(i) => i,
                    None => {
                        plan.devices.push(d.clone());
                        plan.devices.len() - 1
                    }
                };
                index.push(i as u32);
            }
            let mut map: HashMap<u32, Vec<Entry>> = HashMap::new();
            for (file, ranges) in per_file {
                let v = map.entry(*file).or_default();
                for &(d, offset, len) in ranges {
                    if let Some(&device) = index.get(d) {
                        v.push(Entry::Meta {
                            device,
                            offset,
                            len,
                        });
                    }
                }
            }
            let (out, added) =
                strategy::insert_missing_metadata(items, &map, plan.page_size as u64);
            let mut note = format!(
                "missing metadata: {added} inode-table and extent-tree blocks not in the trace added before their files' first data (ext4 on-disk structures)"
            );
            if !skipped.is_empty() {
                note.push_str(&format!("; skipped: {}", skipped.join("; ")));
            }
            plan.notes.push(note);
            out
        }
    }
}

/// Order `base` with strategy `s`.
pub fn plan_for(base: &Base, s: Strategy, cx: &mut StrategyContext<'_>) -> Plan {
    let block = base.skeleton.page_size as u64;
    let mut plan = base.skeleton.clone();
    plan.strategy = s.name().into();
    let items = match s {
        Strategy::Fast => strategy::fast(&base.items),
        Strategy::Trace => strategy::trace(&base.items),
        Strategy::Sorted => {
            let v = strategy::sorted(&base.items);
            // The application waits (capped) until all of it is in memory.
            plan.hold_entries = v.len() as u32;
            v
        }
        Strategy::Paralfetch => {
            plan.notes.push(format!(
                "metadata shift {} KiB, I/O distance {} ({} device)",
                cx.paralfetch.shift_bytes / 1024,
                cx.paralfetch.distance,
                if cx.queueing {
                    "queueing"
                } else {
                    "non-queueing"
                }
            ));
            let items = with_missing_metadata(&mut plan, &base.items, cx.missing);
            strategy::paralfetch(&items, cx.paralfetch, block)
        }
        Strategy::Hybrid => {
            let disk = &mut *cx.disk;
            let io: Vec<f64> = base
                .items
                .iter()
                .map(|i| disk.fetch_ms(std::slice::from_ref(i)))
                .collect();
            let cpu = strategy::cpu_times_with(&base.items, &io);
            let seg = strategy::hybrid(&base.items, &cpu, disk);
            plan.hold_entries = seg.segments.first().copied().unwrap_or(0) as u32;
            plan.segments = seg.segments.iter().map(|&n| n as u32).collect();
            plan.t_exp_ms = Some(seg.t_exp_ms);
            seg.items
        }
    };
    plan.entries = items.into_iter().map(|i| i.entry).collect();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::{Access, InodeLoad, Opened};

    const D: Dev = Dev {
        major: 254,
        minor: 0,
    };

    struct FakeDevs;
    impl DevicePaths for FakeDevs {
        fn path_of(&self, dev: Dev) -> Option<PathBuf> {
            (dev == D).then(|| PathBuf::from("/dev/vda"))
        }
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

    #[test]
    fn builds_ordered_clipped_merged_plan() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![1u8; 10_000]).unwrap(); // 3 pages, last one partial
        let mut r = Resolver::default();
        r.add(&a);
        r.add(dir.path());
        let ida = FileId::of(&a).unwrap();
        let idd = FileId::of(dir.path()).unwrap();
        let fa = Target::File {
            dev: ida.dev,
            ino: ida.ino,
        };
        let meta = Target::Meta { bdev: D };
        let seq = LaunchSequence {
            page_size: 4096,
            accesses: vec![
                acc(meta, 100, 1, 5),
                acc(meta, 101, 1, 6), // contiguous: merged
                acc(fa, 0, 1, 10),
                acc(fa, 1, 4, 20), // merged, clipped to the size
                acc(
                    Target::File {
                        dev: D,
                        ino: 999_999_999,
                    },
                    0,
                    3,
                    30,
                ), // unresolved
                acc(fa, 7, 1, 40), // beyond EOF: dropped
            ],
            inode_loads: vec![InodeLoad {
                t: 8,
                dev: ida.dev,
                ino: ida.ino,
            }],
            dir_opens: vec![Opened {
                t: 1,
                dev: idd.dev,
                ino: idd.ino,
                is_dir: true,
                path: dir.path().to_path_buf(),
                by_tree: true,
            }],
            dropped_pages: 2,
        };
        let p = build_plan(
            "app",
            &seq,
            &r,
            &FakeDevs,
            &crate::resolve::NoDirs,
            vec![4, 5],
        );
        p.validate().unwrap();
        assert_eq!(
            p.entries,
            vec![
                Entry::ListDir { file: 0 },
                Entry::Meta {
                    device: 0,
                    offset: 100 * 4096,
                    len: 8192
                },
                Entry::Lookup { file: 1 },
                Entry::Data {
                    file: 1,
                    offset: 0,
                    len: 10_000
                },
            ]
        );
        assert_eq!(p.files[1].path, a);
        assert_eq!(p.devices[0].path, PathBuf::from("/dev/vda"));
        assert_eq!(p.provenance.unresolved_pages, 3);
        assert_eq!(p.provenance.unresolved_files, 1);
        assert_eq!(p.provenance.traced_data_bytes, (1 + 4 + 3 + 1) * 4096);
        assert_eq!(p.provenance.runs, vec![4, 5]);
        assert_eq!(p.provenance.dropped_pages, 2);
    }

    /// A run learned warm reads no directory block, so the directories on the way to each file
    /// it read are listed before the file's lookup, outermost first, once each; a cold run's
    /// listings come from the blocks it read.
    #[test]
    fn a_warm_run_lists_the_directories_on_the_way_to_its_files() {
        // In the source tree: a block device's filesystem, as an app's files are.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let a = sub.join("a");
        let b = sub.join("b");
        std::fs::write(&a, vec![1u8; 8192]).unwrap();
        std::fs::write(&b, vec![1u8; 4096]).unwrap();
        let mut r = Resolver::default();
        for p in [&a, &b, &sub, &dir.path().to_path_buf()] {
            r.add(p);
        }
        let id = |p: &Path| FileId::of(p).unwrap();
        let file = |p: &Path| Target::File {
            dev: id(p).dev,
            ino: id(p).ino,
        };
        let seq = LaunchSequence {
            page_size: 4096,
            accesses: vec![acc(file(&a), 0, 2, 10), acc(file(&b), 0, 1, 20)],
            ..LaunchSequence::default()
        };
        let build = |derive_lookups| {
            let bo = BaseOptions {
                derive_lookups,
                ..BaseOptions::default()
            };
            let base = build_base_with(
                "app",
                &seq,
                &r,
                &FakeDevs,
                &crate::resolve::NoDirs,
                &mut NoDisk,
                vec![],
                &bo,
            );
            let files = base.skeleton.files.clone();
            base.items
                .iter()
                .map(|i| match i.entry {
                    Entry::ListDir { file } => {
                        format!("list {}", files[file as usize].path.display())
                    }
                    Entry::Lookup { file } => {
                        format!("lookup {}", files[file as usize].path.display())
                    }
                    Entry::Data { file, .. } => {
                        format!("data {}", files[file as usize].path.display())
                    }
                    e => format!("{e:?}"),
                })
                .collect::<Vec<String>>()
        };
        assert!(
            id(dir.path()).dev.major != 0,
            "the source tree is on a block device"
        );
        let d = dir.path().display();
        assert_eq!(
            build(true),
            vec![
                format!("list {d}"),
                format!("list {d}/sub"),
                format!("lookup {d}/sub/a"),
                format!("data {d}/sub/a"),
                format!("lookup {d}/sub/b"),
                format!("data {d}/sub/b"),
            ]
        );
        assert_eq!(
            build(false),
            vec![format!("data {d}/sub/a"), format!("data {d}/sub/b")]
        );
    }

    #[test]
    fn inodes_without_a_path_are_loaded_by_handle_through_a_planned_directory() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let statted = sub.join("only_statted");
        std::fs::write(&statted, b"x").unwrap();
        let mut r = Resolver::default();
        r.add(&sub);
        r.add(dir.path());
        let ids = FileId::of(&statted).unwrap();
        let load = |t, ino| InodeLoad {
            t,
            dev: ids.dev,
            ino,
        };
        let seq = LaunchSequence {
            page_size: 4096,
            // The stat-only file (no path known), twice; then one on a filesystem with no
            // planned directory (skipped).
            inode_loads: vec![
                load(3, ids.ino),
                load(4, ids.ino),
                InodeLoad {
                    t: 5,
                    dev: Dev { major: 7, minor: 7 },
                    ino: 12,
                },
            ],
            ..LaunchSequence::default()
        };
        let p = build_plan("app", &seq, &r, &FakeDevs, &crate::resolve::NoDirs, vec![]);
        p.validate().unwrap();
        // The anchor is the shortest planned directory path on that filesystem.
        assert_eq!(
            p.entries,
            vec![Entry::Inode {
                file: 0,
                ino: ids.ino
            }]
        );
        assert_eq!(p.files[0].path, dir.path());
        assert_eq!(p.summary().inodes, 1);
        let back = Plan::decode(&p.encode().unwrap()).unwrap();
        assert_eq!(back.entries, p.entries);
    }

    #[test]
    fn directory_blocks_become_listings() {
        struct OwnsPage100(Dev, u64);
        impl DirOwner for OwnsPage100 {
            fn dir_owning(&self, _: Dev, offset: u64, _: u64) -> Option<(Dev, u64)> {
                (offset == 100 * 4096).then_some((self.0, self.1))
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let mut r = Resolver::default();
        r.add(dir.path());
        let idd = FileId::of(dir.path()).unwrap();
        let meta = Target::Meta { bdev: D };
        let seq = LaunchSequence {
            page_size: 4096,
            accesses: vec![
                acc(meta, 100, 1, 5),
                acc(meta, 300, 1, 6),
                acc(meta, 100, 1, 7),
            ],
            ..LaunchSequence::default()
        };
        let p = build_plan(
            "app",
            &seq,
            &r,
            &FakeDevs,
            &OwnsPage100(idd.dev, idd.ino),
            vec![],
        );
        assert_eq!(
            p.entries,
            vec![
                Entry::Meta {
                    device: 0,
                    offset: 100 * 4096,
                    len: 4096
                },
                Entry::ListDir { file: 0 },
                Entry::Meta {
                    device: 0,
                    offset: 300 * 4096,
                    len: 4096
                },
                Entry::Meta {
                    device: 0,
                    offset: 100 * 4096,
                    len: 4096
                },
            ]
        );
    }

    #[test]
    fn long_unused_ranges_are_dropped_short_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, vec![1u8; 200 * 4096]).unwrap();
        let mut r = Resolver::default();
        r.add(&a);
        let id = FileId::of(&a).unwrap();
        let fa = Target::File {
            dev: id.dev,
            ino: id.ino,
        };
        let unused = |page, pages| Access {
            used: false,
            ..acc(fa, page, pages, 1)
        };
        let seq = LaunchSequence {
            page_size: 4096,
            accesses: vec![
                acc(fa, 0, 4, 1),
                unused(4, 8),
                acc(fa, 12, 4, 1),
                unused(16, 100),
            ],
            ..LaunchSequence::default()
        };
        let p = build_plan("app", &seq, &r, &FakeDevs, &crate::resolve::NoDirs, vec![]);
        assert_eq!(
            p.entries,
            vec![Entry::Data {
                file: 0,
                offset: 0,
                len: 16 * 4096
            }]
        );
        assert_eq!(p.provenance.unused_pages_dropped, 100);
    }

    #[test]
    fn merge_only_contiguous_same_target() {
        let it = |file, offset, len| Item {
            entry: Entry::Data { file, offset, len },
            t: 0,
            disk: None,
        };
        let v: Vec<Entry> = strategy::trace(&[
            it(0, 0, 4096),
            it(1, 4096, 4096),
            it(1, 16384, 4096),
            it(1, 20480, 4096),
        ])
        .into_iter()
        .map(|i| i.entry)
        .collect();
        assert_eq!(
            v,
            vec![
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 4096
                },
                Entry::Data {
                    file: 1,
                    offset: 4096,
                    len: 4096
                },
                Entry::Data {
                    file: 1,
                    offset: 16384,
                    len: 8192
                },
            ]
        );
    }
}
