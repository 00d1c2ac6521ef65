//! Device facts, measured rather than read from sysfs (this VM's virtio disk says
//! rotational=1 but queues like an SSD): 4 KiB random-read latency at queue depth 1, IOPS at
//! depth 1 and 32, sequential bandwidth. From them: whether the device queues commands
//! (Paralfetch Table 2) and a model of how long a set of requests takes (IEICE's
//! DISK_ACCESS for the hybrid segmentation).

use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::schedule::strategy::{DiskTimer, Item};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// Mean 4 KiB random read latency at queue depth 1, µs.
    pub qd1_latency_us: f64,
    pub iops_qd1: f64,
    pub iops_qd32: f64,
    /// Sequential read bandwidth, MiB/s.
    pub seq_mib_s: f64,
}

impl DeviceFacts {
    /// What is assumed of a device that could not be measured (no room for the probe file):
    /// a SATA SSD's figures, queueing. Not stored, so the device is measured once it can be.
    pub fn unmeasured() -> DeviceFacts {
        DeviceFacts {
            qd1_latency_us: 100.0,
            iops_qd1: 10_000.0,
            iops_qd32: 40_000.0,
            seq_mib_s: 500.0,
        }
    }

    /// A device that serves many queued requests much faster than one at a time.
    pub fn queueing(&self) -> bool {
        self.iops_qd32 > 2.0 * self.iops_qd1
    }

    /// Parallel speed-up at depth 32.
    pub fn parallelism(&self) -> f64 {
        (self.iops_qd32 / self.iops_qd1.max(1.0)).max(1.0)
    }
}

/// The fetch-time model of a set of sorted requests: per-request latency (shared by the
/// device's parallelism) plus transfer time.
pub struct Model(pub DeviceFacts);

impl DiskTimer for Model {
    fn fetch_ms(&mut self, items: &[Item]) -> f64 {
        let f = &self.0;
        let n = items.len() as f64;
        let bytes: u64 = items.iter().map(|i| i.bytes(4096)).sum();
        let latency_ms = n * f.qd1_latency_us / 1000.0 / f.parallelism().min(n.max(1.0));
        latency_ms + bytes as f64 / (f.seq_mib_s.max(1.0) * 1024.0 * 1024.0) * 1000.0
    }
}

const PROBE_MB: u64 = 128;
/// The probe file takes at most a quarter of the free space beside the database, and is not
/// made below this size: on a 16 MiB filesystem a full-size probe filled it to 100%, and
/// the next write of the database failed (issue #30).
const PROBE_MIN_MB: u64 = 16;

/// The probe file's size in MiB for `avail` free bytes, None when there is no room for one.
fn probe_mb(avail: u64) -> Option<u64> {
    let mb = (avail / 4 / (1024 * 1024)).min(PROBE_MB);
    (mb >= PROBE_MIN_MB).then_some(mb)
}

/// Measurements taken; the best of each figure is kept.
const PROBE_RUNS: usize = 3;

/// Measure the device holding `dir` with O_DIRECT reads of a scratch file in `dir`, removed
/// afterwards (the result is stored per device, so it is measured once).
///
/// Other I/O only ever slows a probe down, so it is taken `PROBE_RUNS` times, after a `sync`,
/// and the best of each figure kept. Measured once right after a build (its writeback still
/// going), a single probe saw 146 µs at depth 1 and 1.3x at depth 32 on a device that gives
/// 35 µs and 2.6x, and called it non-queueing.
pub fn measure(dir: &Path) -> std::io::Result<DeviceFacts> {
    nix::unistd::sync();
    std::fs::create_dir_all(dir)?;
    let st = nix::sys::statvfs::statvfs(dir)?;
    let avail = st.blocks_available() as u64 * st.fragment_size() as u64;
    let mb = probe_mb(avail).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::StorageFull,
            format!(
                "{} MiB free in {}: measuring the disk needs {} MiB (a scratch file of a quarter of the free space)",
                avail >> 20,
                dir.display(),
                PROBE_MIN_MB * 4
            ),
        )
    })?;
    let runs = (0..PROBE_RUNS)
        .map(|_| measure_once(dir, mb))
        .collect::<std::io::Result<Vec<_>>>();
    // Nothing large is left on disk, whatever the outcome.
    let _ = std::fs::remove_file(dir.join("device-probe"));
    Ok(best_of(&runs?))
}

/// The best of each figure over several probes.
fn best_of(runs: &[DeviceFacts]) -> DeviceFacts {
    let best = |f: fn(&DeviceFacts) -> f64| runs.iter().map(f).fold(0.0, f64::max);
    let iops_qd1 = best(|f| f.iops_qd1);
    DeviceFacts {
        qd1_latency_us: if iops_qd1 > 0.0 { 1e6 / iops_qd1 } else { 0.0 },
        iops_qd1,
        iops_qd32: best(|f| f.iops_qd32),
        seq_mib_s: best(|f| f.seq_mib_s),
    }
}

fn measure_once(dir: &Path, probe_mb: u64) -> std::io::Result<DeviceFacts> {
    let path = dir.join("device-probe");
    let size = probe_mb * 1024 * 1024;
    if std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) != size {
        // Real blocks (not a sparse file), written once for all the probe runs.
        use std::io::Write;
        let mut f = std::fs::File::create(&path)?;
        let chunk: Vec<u8> = (0..1024 * 1024).map(|i| (i * 7 + 13) as u8).collect();
        for _ in 0..probe_mb {
            f.write_all(&chunk)?;
        }
        f.sync_all()?;
    }
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)
    };
    let blocks = size / 4096;
    // O_DIRECT needs an aligned buffer.
    let aligned = |n: usize| -> Vec<u8> { vec![0u8; n + 4096] };
    let offset_of = |v: &Vec<u8>| (4096 - (v.as_ptr() as usize % 4096)) % 4096;
    let rand_reads = |count: u64, seed: u64| -> std::io::Result<()> {
        let f = open()?;
        let mut buf = aligned(4096);
        let o = offset_of(&buf);
        let mut x = seed | 1;
        for _ in 0..count {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let off = (x % blocks) * 4096;
            nix::sys::uio::pread(f.as_fd(), &mut buf[o..o + 4096], off as i64)?;
        }
        Ok(())
    };
    let t = Instant::now();
    let n1 = 400u64;
    rand_reads(n1, 0x1234_5678)?;
    let qd1 = t.elapsed().as_secs_f64();
    let threads = 32u64;
    let per = 40u64;
    let t = Instant::now();
    std::thread::scope(|s| -> std::io::Result<()> {
        let hs: Vec<_> = (0..threads)
            .map(|i| s.spawn(move || rand_reads(per, 0x9e37_79b9 + i * 7919)))
            .collect();
        for h in hs {
            h.join()
                .map_err(|_| std::io::Error::other("probe thread panicked"))??;
        }
        Ok(())
    })?;
    let qd32 = t.elapsed().as_secs_f64();
    let f = open()?;
    let mut buf = aligned(1024 * 1024);
    let o = offset_of(&buf);
    let t = Instant::now();
    let seq_mb = (probe_mb / 2).max(1);
    for i in 0..seq_mb {
        nix::sys::uio::pread(
            f.as_fd(),
            &mut buf[o..o + 1024 * 1024],
            (i * 1024 * 1024) as i64,
        )?;
    }
    let seq = t.elapsed().as_secs_f64();
    Ok(DeviceFacts {
        qd1_latency_us: qd1 / n1 as f64 * 1e6,
        iops_qd1: n1 as f64 / qd1,
        iops_qd32: (threads * per) as f64 / qd32,
        seq_mib_s: seq_mb as f64 / seq,
    })
}

/// What the device needs, at best, for a plan: its data read with `O_DIRECT` (nothing enters
/// the page cache) into huge-page buffers at the best of several queue depths, its metadata
/// blocks at the 4 KiB random-read rate of that depth, and the longest chain of dependent
/// metadata reads (a directory block, then the inode-table block of the next component, per
/// path component) at depth-1 latency. A prefetch engine can approach it but not beat it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    pub data_bytes: u64,
    /// Requests after merging adjacent ranges and splitting at `FLOOR_PIECE`.
    pub requests: usize,
    pub metadata_blocks: u64,
    pub chain_reads: u32,
    /// The depth with the fastest data pass.
    pub depth: usize,
    pub data_ms: f64,
    pub metadata_ms: f64,
    pub chain_ms: f64,
    pub qd1_latency_us: f64,
    /// `data_ms + metadata_ms + chain_ms`.
    pub floor_ms: f64,
    /// The data pass at each depth tried, ms.
    pub by_depth: Vec<(usize, f64)>,
    /// Planned files that were not the planned file any more (left out).
    pub files_skipped: usize,
}

/// Largest request of the floor's data pass.
const FLOOR_PIECE: u64 = 1 << 20;
/// Depths the data pass tries.
const FLOOR_DEPTHS: &[usize] = &[1, 4, 16, 64];

/// Measure `plan`'s floor on the device holding its files (root, for files only root reads).
pub fn floor(plan: &crate::plan::Plan) -> std::io::Result<Floor> {
    use crate::plan::Entry;
    use std::collections::BTreeMap;
    use std::os::fd::OwnedFd;
    let mut ranges: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut meta: Vec<(u32, u64, u64)> = Vec::new();
    for e in &plan.entries {
        match *e {
            Entry::Data { file, offset, len } if len > 0 => {
                let a = offset / 4096 * 4096;
                let b = (offset + len).div_ceil(4096) * 4096;
                ranges.entry(file).or_default().push((a, b));
            }
            Entry::Meta {
                device,
                offset,
                len,
            } if len > 0 => meta.push((device, offset / 4096, (offset + len - 1) / 4096)),
            _ => {}
        }
    }
    meta.sort_unstable();
    meta.dedup();
    let mut metadata_blocks = 0;
    let mut last: Option<(u32, u64)> = None;
    for (d, a, b) in meta {
        let from = match last {
            Some((ld, lb)) if ld == d && lb >= a => lb + 1,
            _ => a,
        };
        if b >= from {
            metadata_blocks += b - from + 1;
        }
        last = Some((d, last.filter(|l| l.0 == d).map_or(b, |l| l.1.max(b))));
    }
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut pieces: Vec<(usize, u64, u64)> = Vec::new();
    let mut files_skipped = 0;
    let mut data_bytes = 0;
    for (file, mut v) in ranges {
        let Some(f) = plan.files.get(file as usize) else {
            continue;
        };
        let Some(fd) = open_direct(f) else {
            files_skipped += 1;
            continue;
        };
        let size = f.size.div_ceil(4096) * 4096;
        v.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for (a, b) in v {
            let b = b.min(size);
            if b <= a {
                continue;
            }
            match merged.last_mut() {
                Some(m) if a <= m.1 => m.1 = m.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        let idx = fds.len();
        fds.push(fd);
        for (a, b) in merged {
            data_bytes += b - a;
            let mut o = a;
            while o < b {
                let l = FLOOR_PIECE.min(b - o);
                pieces.push((idx, o, l));
                o += l;
            }
        }
    }
    // One huge-page buffer per thread of the deepest pass, made before any timing.
    let bufs: Vec<std::sync::Mutex<crate::sys::HugeBuf>> =
        (0..*FLOOR_DEPTHS.iter().max().unwrap_or(&1))
            .map(|_| crate::sys::HugeBuf::new(FLOOR_PIECE as usize).map(std::sync::Mutex::new))
            .collect::<std::io::Result<_>>()?;
    let pass = |depth: usize, work: &[(usize, u64, u64)]| -> std::io::Result<f64> {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let threads = depth.min(work.len()).max(1);
        // Timed from when every thread is ready: spawning is not the device's time.
        let ready = std::sync::Barrier::new(threads + 1);
        std::thread::scope(|s| -> std::io::Result<f64> {
            let hs: Vec<_> = (0..threads)
                .map(|k| {
                    let (next, ready, bufs, fds) = (&next, &ready, &bufs, &fds);
                    s.spawn(move || -> std::io::Result<()> {
                        let mut buf = bufs[k].lock().unwrap_or_else(|p| p.into_inner());
                        ready.wait();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(&(f, off, len)) = work.get(i) else {
                                return Ok(());
                            };
                            // A short read at the end of a file is fine; an error is not.
                            nix::sys::uio::pread(
                                fds[f].as_fd(),
                                &mut buf.as_mut_slice()[..len as usize],
                                off as i64,
                            )?;
                        }
                    })
                })
                .collect();
            ready.wait();
            let t = Instant::now();
            for h in hs {
                h.join()
                    .map_err(|_| std::io::Error::other("floor thread panicked"))??;
            }
            Ok(t.elapsed().as_secs_f64() * 1e3)
        })
    };
    // A first pass brings the device (and any cache below the VM) to the state every
    // measured launch finds after the first; it is not counted.
    pass(16, &pieces)?;
    let mut by_depth = Vec::new();
    for &d in FLOOR_DEPTHS {
        by_depth.push((d, pass(d, &pieces)?));
    }
    let (depth, data_ms) = by_depth
        .iter()
        .copied()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((1, 0.0));
    // 4 KiB reads spread over the plan's data: depth-1 latency, and the rate at `depth`.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let small: Vec<(usize, u64, u64)> = (0..pieces.len().min(512))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let p = pieces[(x % pieces.len() as u64) as usize];
            (p.0, p.1 + (x >> 20) % p.2.div_ceil(4096) * 4096, 4096)
        })
        .collect();
    let (qd1_latency_us, iops) = if small.is_empty() {
        (0.0, 1.0)
    } else {
        let n1 = small.len().min(128);
        let t1 = pass(1, &small[..n1])?;
        let tn = pass(depth, &small)?;
        (
            t1 * 1e3 / n1 as f64,
            small.len() as f64 / (tn / 1e3).max(1e-9),
        )
    };
    let chain_reads = 2 * plan
        .files
        .iter()
        .map(|f| f.path.components().count().saturating_sub(1) as u32)
        .max()
        .unwrap_or(0);
    let metadata_ms = metadata_blocks as f64 / iops * 1e3;
    let chain_ms = chain_reads as f64 * qd1_latency_us / 1e3;
    Ok(Floor {
        data_bytes,
        requests: pieces.len(),
        metadata_blocks,
        chain_reads,
        depth,
        data_ms,
        metadata_ms,
        chain_ms,
        qd1_latency_us,
        floor_ms: data_ms + metadata_ms + chain_ms,
        by_depth,
        files_skipped,
    })
}

/// A planned regular file opened for `O_DIRECT` reads, if it is still the planned file.
pub fn open_direct(f: &crate::resolve::FileId) -> Option<std::os::fd::OwnedFd> {
    use nix::fcntl::OFlag;
    use nix::sys::stat::SFlag;
    if f.kind != crate::resolve::FileKind::Regular {
        return None;
    }
    let (fd, st) = crate::sys::open_planned(&f.path, OFlag::O_DIRECT | OFlag::O_NOATIME).ok()?;
    let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
    let now = crate::resolve::FileId {
        path: f.path.clone(),
        dev: crate::sys::Dev::from_user(st.st_dev),
        ino: st.st_ino,
        size: st.st_size as u64,
        mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
        kind: f.kind,
        volatile: false,
    };
    (regular && f.unchanged(&now)).then_some(fd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_takes_a_quarter_of_the_free_space_or_nothing() {
        assert_eq!(probe_mb(10 << 30), Some(PROBE_MB));
        assert_eq!(probe_mb(100 << 20), Some(25));
        assert_eq!(probe_mb(64 << 20), Some(16));
        assert_eq!(probe_mb(40 << 20), None, "a 16 MiB filesystem has no room");
        assert_eq!(probe_mb(0), None);
    }

    #[test]
    fn best_of_keeps_the_best_of_each_figure() {
        let f = |lat: f64, qd32: f64, seq: f64| DeviceFacts {
            qd1_latency_us: lat,
            iops_qd1: 1e6 / lat,
            iops_qd32: qd32,
            seq_mib_s: seq,
        };
        // A probe slowed by other I/O, then two clean ones that differ.
        let b = best_of(&[
            f(146.0, 9_000.0, 292.0),
            f(35.0, 70_000.0, 850.0),
            f(40.0, 74_000.0, 860.0),
        ]);
        assert!((b.qd1_latency_us - 35.0).abs() < 1e-9);
        assert!((b.iops_qd1 - 1e6 / 35.0).abs() < 1e-6);
        assert_eq!(b.iops_qd32, 74_000.0);
        assert_eq!(b.seq_mib_s, 860.0);
        assert!(b.queueing());
        assert!(!f(146.0, 9_000.0, 292.0).queueing());
    }
    use crate::plan::Entry;

    fn facts(q1: f64, q32: f64) -> DeviceFacts {
        DeviceFacts {
            qd1_latency_us: 1e6 / q1,
            iops_qd1: q1,
            iops_qd32: q32,
            seq_mib_s: 1000.0,
        }
    }

    #[test]
    fn classifies_queueing() {
        assert!(facts(16000.0, 75000.0).queueing());
        assert!(!facts(150.0, 200.0).queueing());
    }

    #[test]
    fn model_grows_with_requests_and_bytes() {
        let mut m = Model(facts(10000.0, 40000.0));
        let it = |len| Item {
            entry: Entry::Data {
                file: 0,
                offset: 0,
                len,
            },
            t: 0,
            disk: Some(0),
        };
        let one = m.fetch_ms(&[it(4096)]);
        let many = m.fetch_ms(&vec![it(4096); 64]);
        let big = m.fetch_ms(&[it(64 << 20)]);
        assert!(one > 0.0 && many > one && big > one, "{one} {many} {big}");
        // 64 MiB at 1000 MiB/s is about 64 ms.
        assert!((big - 64.1).abs() < 1.0, "{big}");
    }

    /// The floor reads exactly the plan's ranges (merged, page-aligned) and leaves the page
    /// cache as it found it: `O_DIRECT`.
    #[test]
    fn the_floor_reads_the_plans_ranges_without_caching_them() {
        use crate::plan::{Plan, Provenance};
        use crate::resolve::FileId;
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let mut files = Vec::new();
        for name in ["a", "b"] {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![9u8; 1 << 20]).unwrap();
            crate::testutil::evict(&p);
            files.push(FileId::of(&p).unwrap());
        }
        let data = |file, offset, len| Entry::Data { file, offset, len };
        let plan = Plan {
            app: "t".into(),
            created_unix: 0,
            strategy: "trace".into(),
            page_size: 4096,
            files: files.clone(),
            devices: vec![],
            // a: 0..8K and 4K..16K overlap (16 KiB); 100 bytes at 64K (a page). b: 2 MiB
            // asked of a 1 MiB file (clamped to it).
            entries: vec![
                data(0, 0, 8192),
                data(0, 4096, 12288),
                data(0, 65536, 100),
                data(1, 0, 2 << 20),
            ],
            provenance: Provenance::default(),
            hold_entries: 0,
            segments: vec![],
            t_exp_ms: None,
            notes: vec![],
        };
        let before: Vec<u64> = files
            .iter()
            .map(|f| crate::sys::cached_pages_of(&f.path).unwrap())
            .collect();
        let fl = match floor(&plan) {
            Ok(f) => f,
            // tmpfs and some others refuse O_DIRECT: nothing to measure there.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                return crate::testutil::skip("the build directory's filesystem has no O_DIRECT")
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(fl.data_bytes, 16384 + 4096 + (1 << 20), "{fl:?}");
        assert_eq!(fl.requests, 3, "{fl:?}");
        assert_eq!(fl.files_skipped, 0);
        assert_eq!(fl.by_depth.len(), FLOOR_DEPTHS.len());
        assert!(fl.floor_ms > 0.0 && fl.data_ms > 0.0, "{fl:?}");
        // Two path components under the temp dir at least: a chain of reads.
        assert!(fl.chain_reads >= 4, "{fl:?}");
        let after: Vec<u64> = files
            .iter()
            .map(|f| crate::sys::cached_pages_of(&f.path).unwrap())
            .collect();
        assert_eq!(before, after, "the floor must not fill the page cache");
        // A file changed since the plan was made is left out.
        std::fs::write(&files[1].path, b"changed").unwrap();
        let fl = floor(&plan).unwrap();
        assert_eq!(fl.files_skipped, 1);
        assert_eq!(fl.data_bytes, 16384 + 4096);
    }

    #[test]
    fn measures_this_machine() {
        if !crate::sys::is_root() {
            return crate::testutil::skip("measuring the device reads with O_DIRECT as root");
        }
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let f = measure(dir.path()).unwrap();
        assert!(
            f.iops_qd1 > 0.0 && f.iops_qd32 > 0.0 && f.seq_mib_s > 0.0,
            "{f:?}"
        );
        assert!(f.qd1_latency_us > 0.0);
        assert!(
            !dir.path().join("device-probe").exists(),
            "the 128 MiB probe file is left behind"
        );
    }
}
