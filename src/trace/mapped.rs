//! What a running process has already mapped of its files: the pages present in its page
//! tables (`/proc/PID/pagemap`) in each file mapping (`/proc/PID/maps`). A tracer that
//! attaches after the exec (the daemon) misses the launch's first faults, and on a warm
//! system those are the executable's and the loader's and libraries' pages, mapped within
//! the first milliseconds; every page present in a mapping was faulted in or mapped around a
//! fault, so the snapshot taken as tracing starts recovers them.

use std::io::{BufRead, Read, Seek, SeekFrom};
use std::path::PathBuf;

use crate::sys::Dev;

/// One file's pages present in the process's mappings at the snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    pub path: PathBuf,
    pub dev: Dev,
    pub ino: u64,
    /// Runs of file page indices, `first..=last`, in the order the mappings appear.
    pub runs: Vec<(u64, u64)>,
}

/// A file mapping of `/proc/PID/maps`: start, end, file offset, device, inode, path.
#[derive(Debug, PartialEq, Eq)]
struct Vma {
    start: u64,
    end: u64,
    offset: u64,
    dev: Dev,
    ino: u64,
    path: PathBuf,
}

fn parse_maps_line(line: &str) -> Option<Vma> {
    let mut f = line.splitn(6, ' ');
    let (range, _perms, offset, dev, ino) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
    let path = f.next()?.trim_start();
    // Only real files: not anonymous memory, [heap], [stack], or a file deleted since.
    if !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    let ino: u64 = ino.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let (major, minor) = dev.split_once(':')?;
    Some(Vma {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: Dev {
            major: u32::from_str_radix(major, 16).ok()?,
            minor: u32::from_str_radix(minor, 16).ok()?,
        },
        ino,
        path: PathBuf::from(path),
    })
}

/// A pagemap entry's "present" bit (Documentation/admin-guide/mm/pagemap.rst): the page is
/// in the page tables. Swapped pages (bit 62) are anonymous copies, not file pages read.
const PM_PRESENT: u64 = 1 << 63;

/// At most this many pages of mappings are looked at (8 bytes of pagemap each: 4 GiB of
/// mappings, 8 MiB read), so a process with huge file mappings costs a bounded time.
const MAX_PAGES: u64 = 1 << 20;

/// The file pages `pid` has mapped now. Empty if the process is gone or its maps cannot be
/// read; a mapping whose pagemap cannot be read is left out.
pub fn mapped_files(pid: i32, page_size: u64) -> Vec<MappedFile> {
    let Ok(maps) = std::fs::File::open(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let Ok(mut pagemap) = std::fs::File::open(format!("/proc/{pid}/pagemap")) else {
        return Vec::new();
    };
    let mut out: Vec<MappedFile> = Vec::new();
    let mut budget = MAX_PAGES;
    let mut buf = Vec::new();
    for line in std::io::BufReader::new(maps).lines() {
        let Ok(line) = line else { break };
        let Some(v) = parse_maps_line(&line) else {
            continue;
        };
        let pages = ((v.end - v.start) / page_size).min(budget);
        if pages == 0 {
            continue;
        }
        budget -= pages;
        buf.resize(pages as usize * 8, 0);
        if pagemap
            .seek(SeekFrom::Start(v.start / page_size * 8))
            .and_then(|_| pagemap.read_exact(&mut buf))
            .is_err()
        {
            continue;
        }
        let first_page = v.offset / page_size;
        let present = buf
            .chunks_exact(8)
            .enumerate()
            .filter(|(_, e)| {
                u64::from_ne_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]) & PM_PRESENT
                    != 0
            })
            .map(|(i, _)| first_page + i as u64);
        let runs = to_runs(present);
        if runs.is_empty() {
            continue;
        }
        match out.iter_mut().find(|m| m.dev == v.dev && m.ino == v.ino) {
            Some(m) => m.runs.extend(runs),
            None => out.push(MappedFile {
                path: v.path,
                dev: v.dev,
                ino: v.ino,
                runs,
            }),
        }
    }
    out
}

/// Two snapshots of one process as one: `later`'s runs not already in `earlier` added after
/// it (a program exec'd in between maps other files; a page mapped in both counts once).
pub fn merge(mut earlier: Vec<MappedFile>, later: Vec<MappedFile>) -> Vec<MappedFile> {
    for f in later {
        match earlier
            .iter_mut()
            .find(|m| m.dev == f.dev && m.ino == f.ino)
        {
            Some(m) => {
                for r in f.runs {
                    if !m.runs.contains(&r) {
                        m.runs.push(r);
                    }
                }
            }
            None => earlier.push(f),
        }
    }
    earlier
}

/// Consecutive indices as `first..=last` runs.
fn to_runs(idx: impl Iterator<Item = u64>) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for i in idx {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == i => *last = i,
            _ => runs.push((i, i)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_mappings_and_skips_the_rest() {
        let v = parse_maps_line(
            "7f1c2a000000-7f1c2a028000 r--p 00002000 fd:01 1835057                    /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            v,
            Vma {
                start: 0x7f1c_2a00_0000,
                end: 0x7f1c_2a02_8000,
                offset: 0x2000,
                dev: Dev {
                    major: 0xfd,
                    minor: 1
                },
                ino: 1_835_057,
                path: PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            }
        );
        for skip in [
            "55d0c4a1e000-55d0c4a3f000 rw-p 00000000 00:00 0                          [heap]",
            "7ffd5a9e0000-7ffd5aa01000 rw-p 00000000 00:00 0                          [stack]",
            "7f1c2a200000-7f1c2a201000 rw-p 00000000 00:00 0 ",
            "7f1c2a200000-7f1c2a201000 r--p 00000000 fd:01 42                         /tmp/x (deleted)",
            "garbage",
        ] {
            assert_eq!(parse_maps_line(skip), None, "{skip}");
        }
        // A path with spaces is kept whole.
        let v = parse_maps_line("1000-2000 r--p 00000000 fd:01 7 /opt/My App/lib.so").unwrap();
        assert_eq!(v.path, PathBuf::from("/opt/My App/lib.so"));
    }

    #[test]
    fn runs_join_consecutive_pages() {
        assert_eq!(
            to_runs([3, 4, 5, 9, 11, 12].into_iter()),
            vec![(3, 5), (9, 9), (11, 12)]
        );
        assert!(to_runs(std::iter::empty()).is_empty());
    }

    #[test]
    fn snapshots_merge_by_file_keeping_the_first_order() {
        let d = Dev {
            major: 254,
            minor: 0,
        };
        let f = |ino, runs: Vec<(u64, u64)>| MappedFile {
            path: PathBuf::from(format!("/f{ino}")),
            dev: d,
            ino,
            runs,
        };
        let m = merge(
            vec![f(1, vec![(0, 3)]), f(2, vec![(5, 5)])],
            vec![f(3, vec![(0, 0)]), f(1, vec![(0, 3), (8, 9)])],
        );
        assert_eq!(
            m,
            vec![
                f(1, vec![(0, 3), (8, 9)]),
                f(2, vec![(5, 5)]),
                f(3, vec![(0, 0)])
            ]
        );
    }

    #[test]
    fn this_process_has_its_own_executable_mapped() {
        let ps = crate::sys::page_size();
        let files = mapped_files(std::process::id() as i32, ps);
        let exe = std::fs::canonicalize("/proc/self/exe").unwrap();
        let me = files.iter().find(|f| f.path == exe);
        let me = me.unwrap_or_else(|| panic!("{} not among {files:?}", exe.display()));
        assert!(!me.runs.is_empty());
        use std::os::unix::fs::MetadataExt;
        assert_eq!(me.ino, std::fs::metadata(&exe).unwrap().ino());
        assert!(mapped_files(i32::MAX, ps).is_empty(), "no such process");
    }
}
