//! Which file pages a block request read: a FIEMAP map of the plan's files from disk bytes
//! to (file, offset), so that a request's completion can be credited to the plan entries it
//! served (the prefetcher's "completed" timeline).

use std::os::fd::AsFd;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::SFlag;

use crate::sys::{self, Dev};

/// A file, as the kernel names it in trace events.
pub type FileKey = (Dev, u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// The whole disk the request queue belongs to, and the byte on it where the run starts.
    disk: Dev,
    start: u64,
    len: u64,
    file: FileKey,
    logical: u64,
}

/// Disk byte ranges of files, sorted by (disk, start).
#[derive(Clone, Debug, Default)]
pub struct SectorMap {
    runs: Vec<Run>,
}

/// The disk a filesystem device lives on and the byte where it starts there: block requests
/// name the whole disk and count sectors from its start, FIEMAP counts from the partition's.
fn disk_of(dev: Dev) -> (Dev, u64) {
    let base = format!("/sys/dev/block/{dev}");
    let start = std::fs::read_to_string(format!("{base}/start"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    match start {
        Some(sectors) => {
            let disk = std::fs::read_to_string(format!("{base}/../dev"))
                .ok()
                .and_then(|s| {
                    let (ma, mi) = s.trim().split_once(':')?;
                    Some(Dev {
                        major: ma.parse().ok()?,
                        minor: mi.parse().ok()?,
                    })
                })
                .unwrap_or(dev);
            (disk, sectors * 512)
        }
        None => (dev, 0),
    }
}

impl SectorMap {
    /// Map the regular files among `files` (path, device, inode) that are still the same
    /// file; anything else is left out (its pages then have no completion time).
    pub fn build<'a>(files: impl IntoIterator<Item = (&'a Path, Dev, u64)>) -> SectorMap {
        let mut runs = Vec::new();
        let mut disks = std::collections::HashMap::new();
        for (path, dev, ino) in files {
            let Ok((fd, st)) = sys::open_planned(path, OFlag::empty()) else {
                continue;
            };
            let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
            if !regular || Dev::from_user(st.st_dev) != dev || st.st_ino != ino {
                continue;
            }
            let (disk, base) = *disks.entry(dev).or_insert_with(|| disk_of(dev));
            for e in sys::fiemap(fd.as_fd()).unwrap_or_default() {
                runs.push(Run {
                    disk,
                    start: base + e.physical,
                    len: e.len,
                    file: (dev, ino),
                    logical: e.logical,
                });
            }
        }
        SectorMap::from_runs(runs)
    }

    fn from_runs(mut runs: Vec<Run>) -> SectorMap {
        runs.sort_unstable_by_key(|r| (r.disk, r.start));
        SectorMap { runs }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Call `f(file, first_page, last_page)` for each file range a read of `sectors`
    /// 512-byte sectors at `sector` of `disk` covered.
    pub fn pages(
        &self,
        disk: Dev,
        sector: u64,
        sectors: u32,
        mut f: impl FnMut(FileKey, u64, u64),
    ) {
        let (lo, hi) = (sector * 512, (sector + sectors as u64) * 512);
        if hi <= lo {
            return;
        }
        // Runs of a file do not overlap one another, so the first that may reach `lo` is
        // found by its start; scan on while runs start before `hi`.
        let mut i = self
            .runs
            .partition_point(|r| (r.disk, r.start) < (disk, lo));
        i = i.saturating_sub(1);
        while let Some(r) = self.runs.get(i) {
            i += 1;
            if r.disk != disk || r.start + r.len <= lo {
                if r.disk > disk || (r.disk == disk && r.start >= hi) {
                    break;
                }
                continue;
            }
            if r.start >= hi {
                break;
            }
            let a = lo.max(r.start) - r.start + r.logical;
            let b = hi.min(r.start + r.len) - r.start + r.logical;
            f(r.file, a / 4096, (b - 1) / 4096);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(minor: u32) -> Dev {
        Dev { major: 254, minor }
    }

    #[test]
    fn a_request_is_credited_to_the_pages_it_covered() {
        let m = SectorMap::from_runs(vec![
            // file 1: logical 0..16K at disk 1M; logical 16K..24K at disk 2M.
            Run {
                disk: dev(0),
                start: 1 << 20,
                len: 16384,
                file: (dev(0), 1),
                logical: 0,
            },
            Run {
                disk: dev(0),
                start: 2 << 20,
                len: 8192,
                file: (dev(0), 1),
                logical: 16384,
            },
            // file 2 right after file 1's first run.
            Run {
                disk: dev(0),
                start: (1 << 20) + 16384,
                len: 4096,
                file: (dev(0), 2),
                logical: 0,
            },
        ]);
        let hits = |sector: u64, n: u32| {
            let mut v = Vec::new();
            m.pages(dev(0), sector, n, |f, a, b| v.push((f.1, a, b)));
            v
        };
        // 8 KiB from the start of file 1's first run: its pages 0-1.
        assert_eq!(hits((1 << 20) / 512, 16), vec![(1, 0, 1)]);
        // Across the end of file 1's run into file 2.
        assert_eq!(
            hits(((1 << 20) + 12288) / 512, 16),
            vec![(1, 3, 3), (2, 0, 0)]
        );
        // The second run: logical pages 4-5.
        assert_eq!(hits((2 << 20) / 512, 16), vec![(1, 4, 5)]);
        // Elsewhere, or another disk: nothing.
        assert!(hits(0, 8).is_empty());
        let mut other = 0;
        m.pages(dev(1), (1 << 20) / 512, 8, |_, _, _| other += 1);
        assert_eq!(other, 0);
    }

    #[test]
    fn maps_a_real_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 3 * 4096]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        f.sync_all().unwrap();
        let id = crate::resolve::FileId::of(&p).unwrap();
        let m = SectorMap::build([(p.as_path(), id.dev, id.ino)]);
        // tmpfs has no FIEMAP: then the map is empty, which is allowed.
        if let Some(r) = m.runs.first() {
            assert_eq!(r.file, (id.dev, id.ino));
            let mut seen = Vec::new();
            m.pages(r.disk, r.start / 512, 8, |f, a, b| seen.push((f, a, b)));
            assert_eq!(seen, vec![((id.dev, id.ino), 0, 0)]);
        }
    }
}
