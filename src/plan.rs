//! Stage 4, plan: what the prefetcher will do for an app, as a compact, versioned,
//! checksummed blob. A file table (path, device, inode, size, mtime), a block-device table,
//! and ordered entries: data ranges of files, metadata ranges of block devices, and the
//! filesystem-level metadata operations used where a block device cannot be read
//! (FAST Table 1: a lookup loads a path's directories and inode, a listing reads a directory).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::codec::{self, CodecError};
use crate::resolve::{FileId, FileKind};
use crate::sys::Dev;

pub const MAGIC: [u8; 4] = *b"WSPL";
pub const VERSION: u16 = 5;
/// Version 5 added `Entry::Inode`; version 4 plans decode unchanged.
pub const OLDEST_VERSION: u16 = 4;

/// A block device holding filesystem metadata the plan prefetches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDevice {
    #[serde(with = "crate::codec::path_bytes")]
    pub path: PathBuf,
    pub dev: Dev,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Entry {
    /// Read `[offset, offset+len)` of file `file` (index into `files`).
    Data { file: u32, offset: u64, len: u64 },
    /// Read `[offset, offset+len)` of block device `device` (filesystem metadata).
    Meta { device: u32, offset: u64, len: u64 },
    /// Look up a path (loads its directories' blocks and its inode).
    Lookup { file: u32 },
    /// Read a whole directory listing.
    ListDir { file: u32 },
    /// Load inode `ino` of the filesystem holding file `file` (by handle, no path: a file the
    /// launch stats but never opens has none in the plan). Reads its inode-table block.
    Inode { file: u32, ino: u64 },
}

impl Entry {
    pub fn bytes(&self) -> u64 {
        match self {
            Entry::Data { len, .. } | Entry::Meta { len, .. } => *len,
            Entry::Lookup { .. } | Entry::ListDir { .. } | Entry::Inode { .. } => 0,
        }
    }

    /// Metadata through the filesystem (a path, a directory, an inode number), not a byte
    /// range: the prefetcher's metadata pass does these.
    pub fn is_fs_level(&self) -> bool {
        matches!(
            self,
            Entry::Lookup { .. } | Entry::ListDir { .. } | Entry::Inode { .. }
        )
    }
}

/// Where a plan came from and what it could not include.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// Store ids of the learning runs.
    pub runs: Vec<i64>,
    /// File-data bytes in the extracted launch sequence (before resolution).
    pub traced_data_bytes: u64,
    /// Pages of files whose path could not be resolved (left out of the plan).
    pub unresolved_pages: u64,
    pub unresolved_files: u32,
    /// Pages dropped because not every learning run read them.
    pub dropped_pages: u64,
    /// Pages the kernel read ahead during learning that the launch never used (dropped).
    pub unused_pages_dropped: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub app: String,
    pub created_unix: u64,
    /// The scheduling strategy that ordered the entries.
    pub strategy: String,
    pub page_size: u32,
    pub files: Vec<FileId>,
    pub devices: Vec<BlockDevice>,
    pub entries: Vec<Entry>,
    pub provenance: Provenance,
    /// The application waits (up to a cap) until the first `hold_entries` entries are in
    /// memory: all of them for `sorted`, the first segment for `hybrid`, none otherwise.
    pub hold_entries: u32,
    /// `hybrid`: entries per segment, in fetch order.
    pub segments: Vec<u32>,
    /// `hybrid`: the expected launch time (IEICE Alg. 1), ms.
    pub t_exp_ms: Option<f64>,
    /// What `plan show` should say about how this plan was made.
    pub notes: Vec<String>,
}

/// Totals shown by `plan show` and used by the prefetcher's memory cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub entries: usize,
    pub bytes: u64,
    pub data_bytes: u64,
    pub metadata_bytes: u64,
    pub files: usize,
    pub directories: usize,
    pub lookups: usize,
    pub listings: usize,
    /// Inodes loaded by handle (files the launch stats but never opens).
    pub inodes: usize,
}

impl Plan {
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(MAGIC, VERSION, self)
    }

    /// Decode and validate; any malformed input is an error.
    pub fn decode(bytes: &[u8]) -> Result<Plan, CodecError> {
        let p: Plan = codec::decode_since(MAGIC, OLDEST_VERSION, VERSION, bytes)?;
        p.validate()?;
        Ok(p)
    }

    /// Internal consistency: indices in range, ranges non-empty and not overflowing.
    pub fn validate(&self) -> Result<(), CodecError> {
        let bad = |m: String| Err(CodecError::Invalid(m));
        if self.hold_entries as usize > self.entries.len() {
            return bad(format!(
                "holds {} of {} entries",
                self.hold_entries,
                self.entries.len()
            ));
        }
        if !self.page_size.is_power_of_two() || self.page_size < 512 {
            return bad(format!("page size {}", self.page_size));
        }
        for (i, e) in self.entries.iter().enumerate() {
            let (idx, n, len, off) = match *e {
                Entry::Data { file, offset, len } => (file, self.files.len(), len, offset),
                Entry::Meta {
                    device,
                    offset,
                    len,
                } => (device, self.devices.len(), len, offset),
                Entry::Lookup { file } | Entry::ListDir { file } | Entry::Inode { file, .. } => {
                    (file, self.files.len(), 1, 0)
                }
            };
            if idx as usize >= n {
                return bad(format!("entry {i} refers to table index {idx} of {n}"));
            }
            if len == 0 || off.checked_add(len).is_none() {
                return bad(format!("entry {i} has an empty or overflowing range"));
            }
            if let Entry::ListDir { file } = *e {
                if self.files[file as usize].kind != FileKind::Directory {
                    return bad(format!("entry {i} lists a non-directory"));
                }
            }
            if let Entry::Data { file, .. } = *e {
                if self.files[file as usize].kind != FileKind::Regular {
                    return bad(format!("entry {i} reads data of a directory"));
                }
            }
        }
        Ok(())
    }

    pub fn summary(&self) -> Summary {
        let mut s = Summary {
            entries: self.entries.len(),
            ..Summary::default()
        };
        let mut used = vec![false; self.files.len()];
        for e in &self.entries {
            match *e {
                Entry::Data { file, len, .. } => {
                    s.data_bytes += len;
                    used[file as usize] = true;
                }
                Entry::Meta { len, .. } => s.metadata_bytes += len,
                Entry::Lookup { .. } => s.lookups += 1,
                Entry::ListDir { .. } => s.listings += 1,
                Entry::Inode { .. } => s.inodes += 1,
            }
        }
        s.bytes = s.data_bytes + s.metadata_bytes;
        s.files = used.iter().filter(|u| **u).count();
        s.directories = self
            .files
            .iter()
            .filter(|f| f.kind == FileKind::Directory)
            .count();
        s
    }

    /// The file pages the plan reads, by path (two databases' plans of one app share paths,
    /// not necessarily inode numbers). Each page once.
    fn data_pages(&self) -> std::collections::HashSet<(&std::path::Path, u64)> {
        let ps = u64::from(self.page_size);
        let mut pages = std::collections::HashSet::new();
        for e in &self.entries {
            if let Entry::Data { file, offset, len } = *e {
                let path = self.files[file as usize].path.as_path();
                pages.extend((offset / ps..(offset + len).div_ceil(ps)).map(|p| (path, p)));
            }
        }
        pages
    }

    /// The files whose data `other` reads and this plan does not, most bytes first: (path,
    /// bytes), at most `n`.
    pub fn lacks_of(&self, other: &Plan, n: usize) -> Vec<(PathBuf, u64)> {
        let mine = self.data_pages();
        let mut by_file: std::collections::HashMap<&std::path::Path, u64> =
            std::collections::HashMap::new();
        for (path, page) in other.data_pages() {
            if !mine.contains(&(path, page)) {
                *by_file.entry(path).or_default() += u64::from(other.page_size);
            }
        }
        let mut v: Vec<(PathBuf, u64)> = by_file
            .into_iter()
            .map(|(p, b)| (p.to_path_buf(), b))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(n);
        v
    }

    /// How much of its file data this plan has in common with `other`, each way.
    pub fn overlap(&self, other: &Plan) -> Overlap {
        let (a, b) = (self.data_pages(), other.data_pages());
        let common = a.intersection(&b).count() as u64;
        let (ps_a, ps_b) = (u64::from(self.page_size), u64::from(other.page_size));
        fn files(p: &Plan) -> std::collections::HashSet<&std::path::Path> {
            p.entries
                .iter()
                .filter_map(|e| match *e {
                    Entry::Data { file, .. } => Some(p.files[file as usize].path.as_path()),
                    _ => None,
                })
                .collect()
        }
        let (fa, fb) = (files(self), files(other));
        Overlap {
            bytes: a.len() as u64 * ps_a,
            other_bytes: b.len() as u64 * ps_b,
            common_bytes: common * ps_a,
            files: fa.len(),
            other_files: fb.len(),
            common_files: fa.intersection(&fb).count(),
        }
    }
}

/// Two plans' file data in common (`Plan::overlap`); bytes are whole pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Overlap {
    pub bytes: u64,
    pub other_bytes: u64,
    pub common_bytes: u64,
    pub files: usize,
    pub other_files: usize,
    pub common_files: usize,
}

impl Overlap {
    /// The share of this plan's bytes the other one has too.
    pub fn held_by_other(&self) -> f64 {
        self.common_bytes as f64 / self.bytes.max(1) as f64
    }

    /// The share of the other plan's bytes this one has too.
    pub fn holds_of_other(&self) -> f64 {
        self.common_bytes as f64 / self.other_bytes.max(1) as f64
    }
}

/// What a launch looks at before it starts, kept beside its plan so that telling a warm launch
/// from a cold one does not decode the whole plan: python's plan (3244 entries, 1377 files,
/// 227 KB inflated) took the launcher 1.1-1.3 ms to read and decode, pdflatex's 0.14 ms
/// (`cargo run --release --example front_cost`, docs/measurements.md, 2026-11-29 fourth
/// entry), on every warm launch, before the app's exec.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Look {
    /// The files the ranges below name (indices into this table, not the plan's).
    pub files: Vec<FileId>,
    /// `LOOK_SAMPLES` data ranges spread over the whole plan, in plan order: (file, offset,
    /// len).
    pub samples: Vec<(u32, u64, u64)>,
    /// The data ranges among the plan's first `LOOK_HEAD` entries, in plan order: where the
    /// executable's first pages are.
    pub head: Vec<(u32, u64, u64)>,
}

pub const LOOK_MAGIC: [u8; 4] = *b"WSLK";
pub const LOOK_VERSION: u16 = 1;
/// Data entries sampled across the whole plan to tell a warm launch (see
/// `prefetch::sample_residency`).
pub const LOOK_SAMPLES: usize = 16;
/// How many of the plan's first entries `prefetch::warm_executable` looks through.
pub const LOOK_HEAD: usize = 128;

impl Look {
    pub fn encode(&self) -> Result<Vec<u8>, CodecError> {
        codec::encode(LOOK_MAGIC, LOOK_VERSION, self)
    }

    /// Decode and validate; any malformed input is an error.
    pub fn decode(bytes: &[u8]) -> Result<Look, CodecError> {
        let l: Look = codec::decode(LOOK_MAGIC, LOOK_VERSION, bytes)?;
        let n = l.files.len();
        for &(file, offset, len) in l.samples.iter().chain(&l.head) {
            if file as usize >= n || len == 0 || offset.checked_add(len).is_none() {
                return Err(CodecError::Invalid(format!(
                    "look range ({file}, {offset}, {len}) of {n} files"
                )));
            }
        }
        Ok(l)
    }

    /// The data ranges of file (`dev`, `ino`) in the plan's head, in plan order.
    pub fn head_of(&self, dev: Dev, ino: u64) -> Vec<(u64, u64)> {
        self.head
            .iter()
            .filter(|&&(file, _, _)| {
                self.files
                    .get(file as usize)
                    .is_some_and(|f| f.dev == dev && f.ino == ino)
            })
            .map(|&(_, offset, len)| (offset, len))
            .collect()
    }
}

impl Plan {
    /// The plan's `Look`: its sampled data ranges and the data ranges of its head.
    pub fn look(&self) -> Look {
        let data: Vec<(u32, u64, u64)> = self
            .entries
            .iter()
            .filter_map(|e| match *e {
                Entry::Data { file, offset, len } => Some((file, offset, len)),
                _ => None,
            })
            .collect();
        let samples: Vec<(u32, u64, u64)> = (1..=LOOK_SAMPLES)
            .filter_map(|k| data.get(k * data.len() / (LOOK_SAMPLES + 1)).copied())
            .collect();
        let head: Vec<(u32, u64, u64)> = self
            .entries
            .iter()
            .take(LOOK_HEAD)
            .filter_map(|e| match *e {
                Entry::Data { file, offset, len } => Some((file, offset, len)),
                _ => None,
            })
            .collect();
        // Only the files these name, renumbered in order of first mention.
        let mut index: Vec<u32> = Vec::new();
        let mut files = Vec::new();
        let mut renumber = |(file, offset, len): (u32, u64, u64)| {
            let i = match index.iter().position(|&f| f == file) {
                Some(i) => i,
                None => {
                    files.push(self.files.get(file as usize)?.clone());
                    index.push(file);
                    index.len() - 1
                }
            };
            Some((i as u32, offset, len))
        };
        let samples = samples.into_iter().filter_map(&mut renumber).collect();
        let head = head.into_iter().filter_map(&mut renumber).collect();
        Look {
            files,
            samples,
            head,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn sample_plan() -> Plan {
        let f = |p: &str, ino, kind| FileId {
            path: PathBuf::from(p),
            dev: Dev {
                major: 254,
                minor: 0,
            },
            ino,
            size: 10_000,
            mtime_ns: 1_700_000_000_123_456_789,
            kind,
            volatile: false,
        };
        Plan {
            app: "/usr/bin/python3.11 -c import json".into(),
            created_unix: 1_800_000_000,
            strategy: "trace".into(),
            page_size: 4096,
            files: vec![
                f("/usr/lib/a.so", 11, FileKind::Regular),
                f("/usr/lib", 2, FileKind::Directory),
            ],
            devices: vec![BlockDevice {
                path: "/dev/vda".into(),
                dev: Dev {
                    major: 254,
                    minor: 0,
                },
            }],
            entries: vec![
                Entry::Lookup { file: 1 },
                Entry::Meta {
                    device: 0,
                    offset: 1 << 20,
                    len: 4096,
                },
                Entry::ListDir { file: 1 },
                Entry::Data {
                    file: 0,
                    offset: 0,
                    len: 8192,
                },
                Entry::Data {
                    file: 0,
                    offset: 8192,
                    len: 1808,
                },
            ],
            provenance: Provenance {
                runs: vec![1, 2],
                traced_data_bytes: 10_000,
                unresolved_pages: 0,
                unresolved_files: 0,
                dropped_pages: 3,
                unused_pages_dropped: 0,
            },
            hold_entries: 0,
            segments: vec![],
            t_exp_ms: None,
            notes: vec!["a note".into()],
        }
    }

    /// A plan's look names only the files of its samples and head, in their order, and
    /// decodes back; a look whose ranges name a file it lacks is refused.
    #[test]
    fn a_plans_look_holds_its_samples_and_head() {
        let mut plan = sample_plan();
        let data = |file, offset| Entry::Data {
            file,
            offset,
            len: 4096,
        };
        plan.entries = (0..200u64)
            .map(|i| data((i % 2) as u32, i * 4096))
            .collect();
        let look = plan.look();
        assert_eq!(look.samples.len(), LOOK_SAMPLES);
        assert_eq!(look.head.len(), LOOK_HEAD);
        // Renumbered by first mention, samples first: the first sample (entry 11) is file 1's.
        assert_eq!(
            look.files,
            vec![plan.files[1].clone(), plan.files[0].clone()]
        );
        // The k-th sample is the k-th of 17 equal parts of the data entries.
        let (f, off, len) = look.samples[0];
        assert_eq!((off, len), (200 / 17 * 4096, 4096));
        assert_eq!(look.files[f as usize], plan.files[(200 / 17 % 2) as usize]);
        assert_eq!(
            look.head_of(plan.files[1].dev, plan.files[1].ino)[0],
            (4096, 4096)
        );
        let bytes = look.encode().unwrap();
        assert_eq!(Look::decode(&bytes).unwrap(), look);
        let mut bad = look.clone();
        bad.head.push((2, 0, 4096));
        assert!(matches!(
            Look::decode(&bad.encode().unwrap()),
            Err(CodecError::Invalid(_))
        ));
        assert!(Look::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(
            Look::decode(&plan.encode().unwrap()).is_err(),
            "a plan is not a look"
        );
        // A plan without data entries looks at nothing.
        plan.entries = vec![Entry::Lookup { file: 1 }];
        let empty = plan.look();
        assert!(empty.samples.is_empty() && empty.head.is_empty() && empty.files.is_empty());
    }

    #[test]
    fn overlap_counts_pages_in_common_each_way() {
        let a = sample_plan(); // a.so pages 0..=2
        let mut b = sample_plan();
        b.entries = vec![
            Entry::Data {
                file: 0,
                offset: 4096,
                len: 4096 * 4,
            },
            Entry::Lookup { file: 1 },
        ];
        // The same pages listed twice count once.
        b.entries.push(b.entries[0]);
        let o = a.overlap(&b);
        assert_eq!(
            (o.bytes, o.other_bytes, o.common_bytes),
            (3 * 4096, 4 * 4096, 2 * 4096)
        );
        assert_eq!((o.files, o.other_files, o.common_files), (1, 1, 1));
        assert!((o.held_by_other() - 2.0 / 3.0).abs() < 1e-9);
        assert!((o.holds_of_other() - 0.5).abs() < 1e-9);
        // Another path: nothing in common.
        b.files[0].path = PathBuf::from("/usr/lib/b.so");
        assert_eq!(a.overlap(&b).common_bytes, 0);
        assert_eq!(a.overlap(&a).held_by_other(), 1.0);
        // What b reads that a lacks, by file.
        assert_eq!(
            a.lacks_of(&b, 5),
            vec![(PathBuf::from("/usr/lib/b.so"), 4 * 4096)]
        );
        assert!(a.lacks_of(&a, 5).is_empty());
    }

    #[test]
    fn round_trip() {
        let p = sample_plan();
        let b = p.encode().unwrap();
        assert_eq!(Plan::decode(&b).unwrap(), p);
        // Compact: a few bytes per entry, not a struct dump.
        assert!(b.len() < 200, "{} bytes", b.len());
    }

    #[test]
    fn version_4_plans_still_decode_and_inode_entries_round_trip() {
        let p = sample_plan();
        // A plan written before `Entry::Inode` existed (version 4) is the same payload.
        let v4 = codec::encode(MAGIC, 4, &p).unwrap();
        assert_eq!(Plan::decode(&v4).unwrap(), p);
        for v in [3, VERSION + 1] {
            let b = codec::encode(MAGIC, v, &p).unwrap();
            assert!(
                matches!(Plan::decode(&b), Err(CodecError::Version { found, .. }) if found == v),
                "version {v}"
            );
        }
        let mut q = sample_plan();
        q.entries.push(Entry::Inode { file: 1, ino: 77 });
        assert_eq!(Plan::decode(&q.encode().unwrap()).unwrap(), q);
        assert_eq!(q.summary().inodes, 1);
        q.entries.push(Entry::Inode { file: 9, ino: 78 });
        assert!(q.validate().is_err(), "anchor index out of range");
    }

    #[test]
    fn summary_counts() {
        let s = sample_plan().summary();
        assert_eq!(s.entries, 5);
        assert_eq!(s.data_bytes, 10_000);
        assert_eq!(s.metadata_bytes, 4096);
        assert_eq!(s.bytes, 14_096);
        assert_eq!(s.files, 1);
        assert_eq!(s.directories, 1);
        assert_eq!((s.lookups, s.listings), (1, 1));
    }

    #[test]
    fn truncations_and_bit_flips_are_errors() {
        let b = sample_plan().encode().unwrap();
        for n in 0..b.len() {
            assert!(Plan::decode(&b[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..b.len() * 8 {
            if (6..8).contains(&(i / 8)) {
                continue; // reserved flag bytes
            }
            let mut c = b.clone();
            c[i / 8] ^= 1 << (i % 8);
            match Plan::decode(&c) {
                Err(_) => {}
                // A flip of the version field onto an older version this build still reads
                // (5 -> 4) leaves the checksummed payload, hence the plan, intact.
                Ok(p) if (4..6).contains(&(i / 8)) => assert_eq!(p, sample_plan(), "bit {i}"),
                Ok(_) => panic!("bit {i} flipped, still decoded"),
            }
        }
    }

    #[test]
    fn random_input_never_panics() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..5000 {
            let len = (next() % 300) as usize;
            let mut b: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if round % 2 == 0 && b.len() >= 16 {
                // Make the header valid so the payload decoder and validator are exercised.
                b[..4].copy_from_slice(&MAGIC);
                b[4..6].copy_from_slice(&VERSION.to_le_bytes());
                let plen = (b.len() - 16) as u32;
                b[8..12].copy_from_slice(&plen.to_le_bytes());
                let crc = crc32c::crc32c(&b[16..]);
                b[12..16].copy_from_slice(&crc.to_le_bytes());
            }
            let _ = Plan::decode(&b);
        }
    }

    #[test]
    fn validation_rejects_inconsistent_plans() {
        let mut p = sample_plan();
        p.entries.push(Entry::Data {
            file: 9,
            offset: 0,
            len: 1,
        });
        assert!(Plan::decode(&p.encode().unwrap()).is_err());
        let mut p = sample_plan();
        p.entries.push(Entry::Data {
            file: 0,
            offset: u64::MAX,
            len: 2,
        });
        assert!(p.validate().is_err());
        let mut p = sample_plan();
        p.entries.push(Entry::ListDir { file: 0 });
        assert!(p.validate().is_err());
        let mut p = sample_plan();
        p.entries.push(Entry::Meta {
            device: 0,
            offset: 0,
            len: 0,
        });
        assert!(p.validate().is_err());
        let mut p = sample_plan();
        p.page_size = 3000;
        assert!(p.validate().is_err());
    }
}
