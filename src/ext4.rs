//! ext4's on-disk structures, read from the block device, as far as Paralfetch's
//! missing-metadata step needs them (its section 3.1): where a file's inode lives (the
//! superblock and the group descriptors locate its inode-table block) and which blocks hold
//! its extent tree below the inode (read from the inode's extent header). Everything is
//! bounds-checked: a device that is not ext4, or a damaged structure, is an error.

use std::io;
use std::os::unix::fs::FileExt;

const SUPERBLOCK: u64 = 1024;
const MAGIC: u16 = 0xEF53;
const INCOMPAT_64BIT: u32 = 0x80;
const EXTENTS_FL: u32 = 0x80000;
const EXTENT_MAGIC: u16 = 0xF30A;
/// Tree nodes followed per file at most (a 4-level tree of a huge file is not a launch file).
const MAX_NODES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum Ext4Error {
    #[error("reading {what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("not an ext4 filesystem (superblock magic {0:#06x})")]
    NotExt4(u16),
    #[error("damaged ext4 structure: {0}")]
    Damaged(String),
}

/// Positional reads (a block device, or an image file in tests).
pub trait ReadAt {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2)
        .and_then(|x| x.try_into().ok())
        .map(u16::from_le_bytes)
        .unwrap_or(0)
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4)
        .and_then(|x| x.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0)
}

/// The superblock facts needed to find inodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ext4 {
    pub block_size: u64,
    pub inodes_per_group: u32,
    pub inodes_count: u32,
    pub inode_size: u64,
    desc_size: u64,
    gdt_offset: u64,
    is64: bool,
}

impl Ext4 {
    pub fn open(r: &dyn ReadAt) -> Result<Ext4, Ext4Error> {
        let mut sb = [0u8; 1024];
        r.read_exact_at(&mut sb, SUPERBLOCK)
            .map_err(|source| Ext4Error::Io {
                what: "the superblock",
                source,
            })?;
        let magic = u16_at(&sb, 0x38);
        if magic != MAGIC {
            return Err(Ext4Error::NotExt4(magic));
        }
        let log = u32_at(&sb, 0x18);
        if log > 6 {
            return Err(Ext4Error::Damaged(format!("block size 1024 << {log}")));
        }
        let block_size = 1024u64 << log;
        let inodes_per_group = u32_at(&sb, 0x28);
        let inode_size = if u32_at(&sb, 0x4C) == 0 {
            128
        } else {
            u16_at(&sb, 0x58) as u64
        };
        let is64 = u32_at(&sb, 0x60) & INCOMPAT_64BIT != 0;
        let desc_size = if is64 { u16_at(&sb, 0xFE) as u64 } else { 32 };
        if inodes_per_group == 0
            || !(128..=block_size).contains(&inode_size)
            || !(32..=1024).contains(&desc_size)
        {
            return Err(Ext4Error::Damaged(format!(
                "{inodes_per_group} inodes per group, inode size {inode_size}, descriptor size {desc_size}"
            )));
        }
        // The group descriptors follow the block holding the superblock.
        let gdt_offset = (u32_at(&sb, 0x14) as u64 + 1) * block_size;
        Ok(Ext4 {
            block_size,
            inodes_per_group,
            inodes_count: u32_at(&sb, 0x0),
            inode_size,
            desc_size,
            gdt_offset,
            is64,
        })
    }

    /// Byte offset of inode `ino` on the device.
    pub fn inode_offset(&self, r: &dyn ReadAt, ino: u64) -> Result<u64, Ext4Error> {
        if ino == 0 || ino > self.inodes_count as u64 {
            return Err(Ext4Error::Damaged(format!("inode {ino} out of range")));
        }
        let group = (ino - 1) / self.inodes_per_group as u64;
        let index = (ino - 1) % self.inodes_per_group as u64;
        let mut d = vec![0u8; self.desc_size as usize];
        r.read_exact_at(&mut d, self.gdt_offset + group * self.desc_size)
            .map_err(|source| Ext4Error::Io {
                what: "a group descriptor",
                source,
            })?;
        let mut table = u32_at(&d, 0x8) as u64;
        if self.is64 && self.desc_size >= 64 {
            table |= (u32_at(&d, 0x28) as u64) << 32;
        }
        if table == 0 {
            return Err(Ext4Error::Damaged(format!(
                "group {group} has no inode table"
            )));
        }
        Ok(table * self.block_size + index * self.inode_size)
    }

    /// The block-aligned range of the inode-table block holding inode `ino`.
    pub fn inode_block(&self, r: &dyn ReadAt, ino: u64) -> Result<(u64, u64), Ext4Error> {
        let off = self.inode_offset(r, ino)?;
        Ok((off / self.block_size * self.block_size, self.block_size))
    }

    /// Block numbers of the extent-tree nodes stored outside the inode (index and leaf
    /// blocks), in the order the kernel would read them; empty for a tree that fits in the
    /// inode or a file without extents.
    pub fn extent_blocks(&self, r: &dyn ReadAt, ino: u64) -> Result<Vec<u64>, Ext4Error> {
        let mut inode = vec![0u8; self.inode_size as usize];
        r.read_exact_at(&mut inode, self.inode_offset(r, ino)?)
            .map_err(|source| Ext4Error::Io {
                what: "an inode",
                source,
            })?;
        if u32_at(&inode, 0x20) & EXTENTS_FL == 0 {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        self.walk(r, &inode[0x28..0x28 + 60], &mut out)?;
        Ok(out)
    }

    fn walk(&self, r: &dyn ReadAt, node: &[u8], out: &mut Vec<u64>) -> Result<(), Ext4Error> {
        if u16_at(node, 0) != EXTENT_MAGIC {
            return Err(Ext4Error::Damaged("bad extent header".into()));
        }
        let depth = u16_at(node, 6);
        if depth == 0 {
            return Ok(());
        }
        if depth > 5 {
            return Err(Ext4Error::Damaged(format!("extent tree depth {depth}")));
        }
        let entries = u16_at(node, 2) as usize;
        if 12 + entries * 12 > node.len() {
            return Err(Ext4Error::Damaged(format!(
                "{entries} extent index entries in a {}-byte node",
                node.len()
            )));
        }
        for i in 0..entries {
            let e = 12 + i * 12;
            let child = u32_at(node, e + 4) as u64 | (u16_at(node, e + 8) as u64) << 32;
            if out.len() >= MAX_NODES {
                return Ok(());
            }
            out.push(child);
            let mut b = vec![0u8; self.block_size as usize];
            r.read_exact_at(&mut b, child * self.block_size)
                .map_err(|source| Ext4Error::Io {
                    what: "an extent tree block",
                    source,
                })?;
            if u16_at(&b, 6) + 1 != depth {
                return Err(Ext4Error::Damaged(format!(
                    "extent block {child} at the wrong depth"
                )));
            }
            self.walk(r, &b, out)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use std::process::Command;

    /// e2fsprogs' tools live in sbin, which a non-login PATH may lack.
    fn tool(name: &str) -> Option<std::path::PathBuf> {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    }

    fn debugfs_cmd() -> Command {
        Command::new(tool("debugfs").unwrap_or_else(|| "debugfs".into()))
    }

    fn debugfs(img: &Path, req: &str) -> String {
        let o = debugfs_cmd().args(["-R", req]).arg(img).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// An ext4 image in `dir` with a file, /big, fragmented enough to need an extent block:
    /// made with mkfs.ext4 and debugfs (no mount, no root). None (skipped) without them.
    pub(crate) fn fragmented_image(dir: &Path) -> Option<std::path::PathBuf> {
        let (Some(mkfs), Some(_)) = (tool("mkfs.ext4"), tool("debugfs")) else {
            crate::testutil::skip("mkfs.ext4 and debugfs (e2fsprogs) are not installed");
            return None;
        };
        let src = dir.join("src");
        std::fs::create_dir(&src).unwrap();
        for i in 0..40 {
            std::fs::write(src.join(format!("s{i}")), vec![i as u8; 8192]).unwrap();
        }
        let img = dir.join("img");
        let st = Command::new(mkfs)
            .args(["-q", "-F", "-b", "4096", "-d"])
            .arg(&src)
            .arg(&img)
            .arg("16M")
            .status()
            .unwrap();
        assert!(st.success());
        for i in (0..40).step_by(2) {
            let o = debugfs_cmd()
                .args(["-w", "-R", &format!("rm /s{i}")])
                .arg(&img)
                .output()
                .unwrap();
            assert!(o.status.success());
        }
        let big = dir.join("big");
        std::fs::write(&big, (0..300_000u32).map(|i| i as u8).collect::<Vec<_>>()).unwrap();
        let o = debugfs_cmd()
            .args(["-w", "-R", &format!("write {} big", big.display())])
            .arg(&img)
            .output()
            .unwrap();
        assert!(o.status.success());
        Some(img)
    }

    /// The inode number of `name` in `img`, from debugfs.
    pub(crate) fn ino_of(img: &Path, name: &str) -> u64 {
        let imap = debugfs(img, &format!("imap {name}"));
        let s = imap.split("Inode ").nth(1).unwrap();
        s[..s.find(' ').unwrap()].parse().unwrap()
    }

    /// Checked against debugfs's own answers.
    #[test]
    fn finds_inodes_and_extent_blocks_like_debugfs() {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = fragmented_image(dir.path()) else {
            return;
        };
        let f = std::fs::File::open(&img).unwrap();
        let fs = Ext4::open(&f).unwrap();
        assert_eq!(fs.block_size, 4096);
        for name in ["/big", "/s1", "/s39"] {
            // "Inode 12 is part of block group 0\n\tlocated at block 35, offset 0x0b00"
            let imap = debugfs(&img, &format!("imap {name}"));
            let num = |after: &str, radix: u32| {
                let s = imap.split(after).nth(1).unwrap().trim_start();
                let s = s.trim_start_matches("0x");
                let end = s.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(s.len());
                u64::from_str_radix(&s[..end], radix).unwrap()
            };
            let ino = num("Inode ", 10);
            let want = num("located at block ", 10) * 4096 + num("offset ", 16);
            assert_eq!(fs.inode_offset(&f, ino).unwrap(), want, "{name}: {imap}");
            // Extent nodes: debugfs `ex` lists the index entries of level 0 of a deeper
            // tree with the physical block of their child.
            let ex = debugfs(&img, &format!("ex {name}"));
            let want: Vec<u64> = ex
                .lines()
                .filter(|l| {
                    let t = l.trim_start();
                    t.starts_with("0/") && !t.starts_with("0/ 0")
                })
                .map(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    // "0/ 1 1/ 1 0 - 73 1308 74"
                    cols[cols.len() - 2].parse().unwrap()
                })
                .collect();
            assert_eq!(fs.extent_blocks(&f, ino).unwrap(), want, "{name}: {ex}");
            if name == "/big" {
                assert!(
                    !want.is_empty(),
                    "the fragmented file has no extent block: {ex}"
                );
            }
        }
        assert!(fs.inode_offset(&f, 0).is_err());
    }

    /// The paralfetch strategy's step end to end on the image: learn's lookup of every
    /// planned file's metadata, then its insertion before each file's first data.
    #[test]
    fn missing_metadata_of_a_plan_comes_from_the_image() {
        use crate::plan::Entry;
        use crate::schedule::{with_missing_metadata, DevicePaths, Item, MissingMeta};
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = fragmented_image(dir.path()) else {
            return;
        };
        struct ImageDev(std::path::PathBuf);
        impl DevicePaths for ImageDev {
            fn path_of(&self, _: crate::sys::Dev) -> Option<std::path::PathBuf> {
                Some(self.0.clone())
            }
        }
        let mut plan = crate::plan::tests::sample_plan();
        plan.devices.clear();
        plan.files[0].ino = ino_of(&img, "/big");
        plan.files[1].ino = ino_of(&img, "/s1");
        let missing = crate::learn::missing_metadata(&plan, &ImageDev(img.clone()));
        let MissingMeta::Found { per_file, .. } = &missing else {
            panic!("{missing:?}");
        };
        let f = std::fs::File::open(&img).unwrap();
        let fs = Ext4::open(&f).unwrap();
        let big = ino_of(&img, "/big");
        let ext = fs.extent_blocks(&f, big).unwrap();
        assert_eq!(
            per_file[0].1,
            [
                vec![(0, fs.inode_block(&f, big).unwrap().0, 4096)],
                ext.iter().map(|b| (0, b * 4096, 4096)).collect()
            ]
            .concat()
        );
        let items = vec![Item {
            entry: Entry::Data {
                file: 0,
                offset: 0,
                len: 8192,
            },
            t: 0,
            disk: None,
        }];
        let out = with_missing_metadata(&mut plan, &items, &missing);
        assert_eq!(plan.devices.len(), 1);
        assert_eq!(plan.devices[0].path, img);
        assert_eq!(out.len(), 1 + 1 + ext.len(), "{out:?}");
        assert!(out[..out.len() - 1]
            .iter()
            .all(|i| matches!(i.entry, Entry::Meta { device: 0, .. })));
        assert!(
            plan.notes.last().unwrap().contains("2 inode-table"),
            "{:?}",
            plan.notes
        );
        // An unreadable device: skipped, and said so.
        let none = crate::learn::missing_metadata(&plan, &ImageDev(dir.path().join("absent")));
        assert!(
            matches!(&none, MissingMeta::Skipped(w) if w.contains("cannot read")),
            "{none:?}"
        );
    }

    struct Bytes(Vec<u8>);
    impl ReadAt for Bytes {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let o = offset as usize;
            let s = self
                .0
                .get(o..o + buf.len())
                .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
            buf.copy_from_slice(s);
            Ok(())
        }
    }

    #[test]
    fn rejects_what_is_not_ext4_or_is_damaged() {
        assert!(matches!(
            Ext4::open(&Bytes(vec![0; 4096])),
            Err(Ext4Error::NotExt4(0))
        ));
        assert!(matches!(
            Ext4::open(&Bytes(vec![0; 100])),
            Err(Ext4Error::Io { .. })
        ));
        let mut sb = vec![0u8; 8192];
        sb[1024 + 0x38..1024 + 0x3A].copy_from_slice(&MAGIC.to_le_bytes());
        sb[1024 + 0x18] = 40; // absurd block size
        assert!(matches!(
            Ext4::open(&Bytes(sb.clone())),
            Err(Ext4Error::Damaged(_))
        ));
        sb[1024 + 0x18] = 2; // 4 KiB blocks, but no inodes per group
        assert!(matches!(Ext4::open(&Bytes(sb)), Err(Ext4Error::Damaged(_))));
    }
}
