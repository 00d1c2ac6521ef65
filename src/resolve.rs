//! Stage 3, resolve: map (device, inode) pairs of a launch sequence to paths, without walking
//! the filesystem. Candidates are what the traced tree opened (fanotify) and executed (exec
//! events), plus their parent directories; each is verified by `lstat` (same device and inode)
//! before it is used, so a path that now names another file is never trusted.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sequence::RawRun;
use crate::sys::Dev;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileKind {
    Regular,
    Directory,
}

/// A file as identified at record time; the prefetcher checks all of this before reading.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    #[serde(with = "crate::codec::path_bytes")]
    pub path: PathBuf,
    pub dev: Dev,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub kind: FileKind,
    /// Written by the launch itself during learning (a profile, a cache): only its identity
    /// is checked, since its size and time change on every launch.
    pub volatile: bool,
}

impl FileId {
    /// Identify what `path` names now, without following a final symlink.
    pub fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::symlink_metadata(path).ok()?;
        Self::from_metadata(path, &m)
    }

    pub fn from_metadata(path: &Path, m: &std::fs::Metadata) -> Option<FileId> {
        let kind = if m.file_type().is_file() {
            FileKind::Regular
        } else if m.file_type().is_dir() {
            FileKind::Directory
        } else {
            return None;
        };
        Some(FileId {
            path: path.to_path_buf(),
            dev: Dev::from_user(m.dev()),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
            kind,
            volatile: false,
        })
    }

    /// Whether `other` (a fresh identification) is still the same, unchanged file.
    pub fn unchanged(&self, other: &FileId) -> bool {
        self.dev == other.dev
            && self.ino == other.ino
            && self.kind == other.kind
            && (self.kind == FileKind::Directory
                || self.volatile
                || (self.size == other.size && self.mtime_ns == other.mtime_ns))
    }
}

/// Verified (device, inode) → file map for a set of learning runs.
#[derive(Debug, Default)]
pub struct Resolver {
    map: HashMap<(Dev, u64), FileId>,
}

impl Resolver {
    pub fn from_runs(runs: &[RawRun]) -> Resolver {
        let mut r = Resolver::default();
        // The tree's own opens first, then the rest (an unrelated process may have opened the
        // same file by another path; any verified path will do).
        for by_tree in [true, false] {
            for run in runs {
                for o in run.opens.iter().filter(|o| o.by_tree == by_tree) {
                    r.add_expected(&o.path, o.dev, o.ino);
                }
            }
        }
        for run in runs {
            for e in &run.execs {
                if let Ok(p) = std::fs::canonicalize(e) {
                    r.add(&p);
                }
            }
        }
        let paths: Vec<PathBuf> = r.map.values().map(|f| f.path.clone()).collect();
        for p in paths {
            for a in p.ancestors().skip(1) {
                r.add(a);
            }
        }
        r
    }

    /// Add `path` if it still names (dev, ino).
    pub fn add_expected(&mut self, path: &Path, dev: Dev, ino: u64) {
        if self.map.contains_key(&(dev, ino)) {
            return;
        }
        if let Some(id) = FileId::of(path) {
            if id.dev == dev && id.ino == ino {
                self.map.insert((dev, ino), id);
            }
        }
    }

    /// Add whatever `path` names now.
    pub fn add(&mut self, path: &Path) {
        if let Some(id) = FileId::of(path) {
            self.map.entry((id.dev, id.ino)).or_insert(id);
        }
    }

    pub fn get(&self, dev: Dev, ino: u64) -> Option<&FileId> {
        self.map.get(&(dev, ino))
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The resolved directories.
    pub fn dirs(&self) -> impl Iterator<Item = &FileId> {
        self.map.values().filter(|f| f.kind == FileKind::Directory)
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Which known directory a metadata block belongs to: FAST's LBA-to-inode map (4.2), built
/// only for the directories an app's launch involved, from FIEMAP at record time. It lets a
/// traced directory-block read be replayed as a listing of that directory where the block
/// device itself cannot be read.
pub trait DirOwner {
    /// The (device, inode) of the directory holding disk bytes `[offset, offset+len)` of
    /// the filesystem on block device `bdev`.
    fn dir_owning(&self, bdev: Dev, offset: u64, len: u64) -> Option<(Dev, u64)>;
}

/// A directory's disk extent: (disk start, disk end, the directory's (device, inode)).
type DirExtent = (u64, u64, (Dev, u64));

#[derive(Debug, Default)]
pub struct DirBlocks {
    /// Per filesystem device, sorted by start.
    extents: HashMap<Dev, Vec<DirExtent>>,
}

impl DirBlocks {
    pub fn build<'a>(dirs: impl Iterator<Item = &'a FileId>) -> DirBlocks {
        use std::os::fd::AsFd;
        let mut map = DirBlocks::default();
        for d in dirs {
            let Ok(f) = std::fs::File::open(&d.path) else {
                continue;
            };
            let Ok(ext) = crate::sys::fiemap(f.as_fd()) else {
                continue;
            };
            let v = map.extents.entry(d.dev).or_default();
            for e in ext {
                v.push((e.physical, e.physical + e.len, (d.dev, d.ino)));
            }
        }
        for v in map.extents.values_mut() {
            v.sort_unstable();
        }
        map
    }

    pub fn len(&self) -> usize {
        self.extents.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl DirOwner for DirBlocks {
    fn dir_owning(&self, bdev: Dev, offset: u64, len: u64) -> Option<(Dev, u64)> {
        // A filesystem on a whole disk or a partition reads its metadata through the page
        // cache of that same block device, so the filesystem's st_dev is the bdev.
        let v = self.extents.get(&bdev)?;
        let end = offset.checked_add(len)?;
        // Last extent starting before `end`; extents of one filesystem do not overlap.
        let i = v.partition_point(|(s, _, _)| *s < end);
        let (s, e, id) = v.get(i.checked_sub(1)?)?;
        (*s < end && offset < *e).then_some(*id)
    }
}

/// No directory map (tests, or filesystems without FIEMAP).
pub struct NoDirs;

impl DirOwner for NoDirs {
    fn dir_owning(&self, _: Dev, _: u64, _: u64) -> Option<(Dev, u64)> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sequence::Opened;
    use crate::sys::Usage;
    use crate::trace::EndReason;

    fn run_with_opens(opens: Vec<Opened>) -> RawRun {
        RawRun {
            page_size: 4096,
            accesses: vec![],
            inode_loads: vec![],
            opens,
            execs: vec![],
            block: vec![],
            sync_readaheads: 0,
            duration_ns: 0,
            ended: EndReason::Exited,
            exit_code: Some(0),
            exit_signal: None,
            usage: Usage::default(),
            started_unix_ms: 0,
        }
    }

    #[test]
    fn verifies_paths_by_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::fs::write(&a, b"aaaa").unwrap();
        std::fs::write(&b, b"bb").unwrap();
        let ida = FileId::of(&a).unwrap();
        let idb = FileId::of(&b).unwrap();
        let opened = |p: &Path, id: &FileId| Opened {
            t: 0,
            dev: id.dev,
            ino: id.ino,
            is_dir: false,
            path: p.to_path_buf(),
            by_tree: true,
        };
        // b is recorded with a's inode: a lie the resolver must not believe.
        let mut lie = opened(&b, &ida);
        lie.ino = ida.ino;
        let r = Resolver::from_runs(&[run_with_opens(vec![lie, opened(&a, &ida)])]);
        assert_eq!(r.get(ida.dev, ida.ino).unwrap().path, a);
        assert!(r.get(idb.dev, idb.ino).is_none());
        // Ancestors are resolved too.
        let d = FileId::of(dir.path()).unwrap();
        assert_eq!(r.get(d.dev, d.ino).unwrap().kind, FileKind::Directory);
        assert_eq!(ida.size, 4);
    }

    #[test]
    fn dir_blocks_find_the_owner() {
        let d = Dev { major: 8, minor: 1 };
        let mut m = DirBlocks::default();
        m.extents
            .insert(d, vec![(4096, 8192, (d, 10)), (40960, 49152, (d, 11))]);
        assert_eq!(m.dir_owning(d, 4096, 4096), Some((d, 10)));
        assert_eq!(m.dir_owning(d, 45056, 4096), Some((d, 11)));
        assert_eq!(m.dir_owning(d, 0, 4096), None);
        assert_eq!(m.dir_owning(d, 8192, 4096), None);
        assert_eq!(m.dir_owning(Dev { major: 8, minor: 2 }, 4096, 4096), None);
        assert_eq!(m.dir_owning(d, u64::MAX, 2), None);
    }

    #[test]
    fn dir_blocks_of_a_real_directory() {
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let id = FileId::of(dir.path()).unwrap();
        let m = DirBlocks::build(std::iter::once(&id));
        if m.is_empty() {
            return crate::testutil::skip("no FIEMAP for directories on this filesystem");
        }
        let (s, e, owner) = m.extents[&id.dev][0];
        assert_eq!(owner, (id.dev, id.ino));
        assert_eq!(m.dir_owning(id.dev, s, e - s), Some((id.dev, id.ino)));
    }

    #[test]
    fn unchanged_detects_edits_and_replacement() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::write(&a, b"one").unwrap();
        let before = FileId::of(&a).unwrap();
        assert!(before.unchanged(&FileId::of(&a).unwrap()));
        std::fs::write(&a, b"three").unwrap();
        assert!(!before.unchanged(&FileId::of(&a).unwrap()));
        let volatile = FileId {
            volatile: true,
            ..before.clone()
        };
        assert!(
            volatile.unchanged(&FileId::of(&a).unwrap()),
            "a volatile file may change"
        );
        let tmp = dir.path().join("tmp");
        std::fs::write(&tmp, b"three").unwrap();
        std::fs::rename(&tmp, &a).unwrap();
        let now = FileId::of(&a).unwrap();
        assert_ne!(now.ino, before.ino);
        assert!(!before.unchanged(&now));
        assert!(FileId::of(&dir.path().join("missing")).is_none());
    }
}
