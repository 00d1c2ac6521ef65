//! Kernel settings warmstart changes, and their restoration. ext4's `inode_readahead_blks`
//! is held at 0 while anything needs it so: a recording (Paralfetch 4.2: the trace shows
//! exactly the inode-table blocks the launch needs) or a prefetch (each inode-table block
//! the plan reads costs 4 KiB of the disk, not the 128 KiB around it).
//!
//! Several holders may overlap (a recording, launches, the daemon), each a shared `flock`
//! on `knobs.lock`: the first saves the original values in a journal under /run/warmstart
//! before changing them, the last out puts them back. A holder that died without restoring
//! (SIGKILL) holds no lock, so the next holder, or `recover_journal`, finding a journal and
//! no holder, restores it; a guard restores on every other exit path (return, error, panic
//! unwind, Ctrl-C).
//!
//! Also here: the lock that serialises recordings (they drop caches, so two at once would
//! corrupt each other's traces).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::TraceError;

pub const RUN_DIR: &str = "/run/warmstart";
/// Where ext4 lists its mounted filesystems' settings.
pub const SYS_EXT4: &str = "/sys/fs/ext4";
const JOURNAL: &str = "restore-knobs";
const LOCK: &str = "record.lock";
/// Shared-locked by every holder of the changed knobs.
const HOLDERS: &str = "knobs.lock";
/// Exclusive around taking and releasing a hold, so "am I the first / the last" is exact.
const SETUP: &str = "knobs.setup.lock";

fn lock_file(p: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)
}

/// Hold the setup lock of `run_dir` (blocking: every holder keeps it for microseconds).
fn setup_lock(run_dir: &Path) -> Result<Flock<fs::File>, TraceError> {
    fs::create_dir_all(run_dir).map_err(|e| TraceError::io(run_dir, e))?;
    let p = run_dir.join(SETUP);
    let f = lock_file(&p).map_err(|e| TraceError::io(&p, e))?;
    Flock::lock(f, FlockArg::LockExclusive).map_err(|(_, e)| TraceError::io(&p, io::Error::from(e)))
}

/// With the setup lock held: is anyone holding the knobs? (Probed with an exclusive try,
/// released at once.)
fn holders_alive(run_dir: &Path) -> Result<bool, TraceError> {
    let p = run_dir.join(HOLDERS);
    let f = lock_file(&p).map_err(|e| TraceError::io(&p, e))?;
    match Flock::lock(f, FlockArg::LockExclusiveNonblock) {
        Ok(_probe) => Ok(false),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(true),
        Err((_, e)) => Err(TraceError::io(&p, io::Error::from(e))),
    }
}

/// Holds `inode_readahead_blks` at 0 on every ext4 filesystem; restores it when the last
/// holder drops.
#[derive(Debug)]
pub struct KnobGuard {
    holder: Option<Flock<fs::File>>,
    run_dir: PathBuf,
}

impl KnobGuard {
    /// Take a hold: set every ext4 filesystem's `inode_readahead_blks` under `sys_ext4`
    /// (normally /sys/fs/ext4) to 0, journaling the originals in `run_dir` if no other
    /// holder already did.
    pub fn inode_readahead_off(sys_ext4: &Path, run_dir: &Path) -> Result<KnobGuard, TraceError> {
        let _setup = setup_lock(run_dir)?;
        if !holders_alive(run_dir)? {
            // A journal with no holder is a dead holder's.
            restore_journal(run_dir, true);
        }
        let p = run_dir.join(HOLDERS);
        let f = lock_file(&p).map_err(|e| TraceError::io(&p, e))?;
        // Never waits: exclusive holds are only probes, taken under the setup lock.
        let holder = Flock::lock(f, FlockArg::LockShared)
            .map_err(|(_, e)| TraceError::io(&p, io::Error::from(e)))?;
        let guard = KnobGuard {
            holder: Some(holder),
            run_dir: run_dir.to_path_buf(),
        };
        let mut knobs: Vec<PathBuf> = fs::read_dir(sys_ext4)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.path().join("inode_readahead_blks"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        knobs.sort();
        // Journal the original of every knob not journaled yet: all of them for the first
        // holder; for a later one, those of filesystems mounted since.
        let journal = run_dir.join(JOURNAL);
        let mut text = fs::read_to_string(&journal).unwrap_or_default();
        let before = text.len();
        for k in &knobs {
            let listed = text
                .lines()
                .any(|l| l.split_once('\t').is_some_and(|(p, _)| Path::new(p) == k));
            if !listed {
                let v = fs::read_to_string(k).map_err(|e| TraceError::io(k, e))?;
                text.push_str(&format!("{}\t{}\n", k.display(), v.trim()));
            }
        }
        if text.len() != before {
            let tmp = journal.with_extension("tmp");
            fs::write(&tmp, &text).map_err(|e| TraceError::io(&tmp, e))?;
            fs::rename(&tmp, &journal).map_err(|e| TraceError::io(&journal, e))?;
        }
        for k in &knobs {
            // On an error the guard, dropped, puts back what was changed.
            fs::write(k, "0\n").map_err(|e| TraceError::io(k, e))?;
        }
        tracing::debug!(
            "inode_readahead_blks held at 0 on {} filesystem(s)",
            knobs.len()
        );
        Ok(guard)
    }

    /// Release the hold now (also done on drop); the last holder restores the journaled
    /// values.
    pub fn restore(&mut self) -> io::Result<()> {
        let Some(holder) = self.holder.take() else {
            return Ok(());
        };
        let setup = setup_lock(&self.run_dir);
        drop(holder);
        match setup {
            Ok(_setup) => {
                if !holders_alive(&self.run_dir).map_err(io::Error::other)? {
                    restore_journal(&self.run_dir, false);
                }
                Ok(())
            }
            // Without the setup lock, "last out" cannot be told: the next holder repairs.
            Err(e) => Err(io::Error::other(e)),
        }
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            tracing::error!("could not release the inode readahead hold: {e}");
        }
    }
}

/// Put back the values in `run_dir`'s journal and remove it; returns how many.
fn restore_journal(run_dir: &Path, left_by_a_dead_holder: bool) -> usize {
    let journal = run_dir.join(JOURNAL);
    let Ok(text) = fs::read_to_string(&journal) else {
        return 0;
    };
    let mut n = 0;
    let mut failed = false;
    for line in text.lines() {
        if let Some((p, v)) = line.split_once('\t') {
            match fs::write(p, format!("{v}\n")) {
                Ok(()) => {
                    n += 1;
                    if left_by_a_dead_holder {
                        tracing::warn!(
                            "restored {p} to {v} (left changed by an interrupted warmstart)"
                        )
                    }
                }
                // A filesystem unmounted since: nothing left to restore there.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    failed = true;
                    tracing::error!("could not restore {p} to {v}: {e}")
                }
            }
        }
    }
    if !failed {
        let _ = fs::remove_file(&journal);
    }
    n
}

/// Restore knobs journaled by a holder that died before restoring them, unless a live
/// holder still needs them changed. Returns how many values were restored.
pub fn recover_journal(run_dir: &Path) -> usize {
    let Ok(_setup) = setup_lock(run_dir) else {
        return 0;
    };
    match holders_alive(run_dir) {
        Ok(false) => restore_journal(run_dir, true),
        _ => 0,
    }
}

/// Exclusive lock serialising recordings, held until dropped.
pub struct RecordLock {
    _lock: Flock<fs::File>,
}

impl RecordLock {
    /// Take the lock, waiting (and saying so) if another recording holds it.
    pub fn acquire(run_dir: &Path) -> Result<RecordLock, TraceError> {
        fs::create_dir_all(run_dir).map_err(|e| TraceError::io(run_dir, e))?;
        let p = run_dir.join(LOCK);
        let open = || lock_file(&p).map_err(|e| TraceError::io(&p, e));
        let lock = match Flock::lock(open()?, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                tracing::info!("another warmstart recording is running; waiting for it to finish");
                Flock::lock(open()?, FlockArg::LockExclusive)
                    .map_err(|(_, e)| TraceError::io(&p, io::Error::from(e)))?
            }
            Err((_, e)) => return Err(TraceError::io(&p, io::Error::from(e))),
        };
        Ok(RecordLock { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_sysfs(vals: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (dev, v) in vals {
            let p = d.path().join(dev);
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("inode_readahead_blks"), format!("{v}\n")).unwrap();
        }
        d
    }

    fn val(d: &Path, dev: &str) -> String {
        fs::read_to_string(d.join(dev).join("inode_readahead_blks"))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn guard_sets_and_restores_on_drop() {
        let sys = fake_sysfs(&[("vda", "32"), ("vdb", "64")]);
        let run = tempfile::tempdir().unwrap();
        {
            let _g = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
            assert_eq!(val(sys.path(), "vda"), "0");
            assert_eq!(val(sys.path(), "vdb"), "0");
            assert!(run.path().join(JOURNAL).exists());
        }
        assert_eq!(val(sys.path(), "vda"), "32");
        assert_eq!(val(sys.path(), "vdb"), "64");
        assert!(!run.path().join(JOURNAL).exists());
    }

    #[test]
    fn guard_restores_on_panic() {
        let sys = fake_sysfs(&[("vda", "32")]);
        let run = tempfile::tempdir().unwrap();
        let (s, r) = (sys.path().to_path_buf(), run.path().to_path_buf());
        let res = std::panic::catch_unwind(move || {
            let _g = KnobGuard::inode_readahead_off(&s, &r).unwrap();
            panic!("boom");
        });
        assert!(res.is_err());
        assert_eq!(val(sys.path(), "vda"), "32");
    }

    #[test]
    fn a_filesystem_mounted_during_a_hold_is_restored_too() {
        let sys = fake_sysfs(&[("vda", "32")]);
        let run = tempfile::tempdir().unwrap();
        let first = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        // Mounted while the first hold lasts, then covered by a second holder.
        fs::create_dir_all(sys.path().join("vdb")).unwrap();
        fs::write(sys.path().join("vdb/inode_readahead_blks"), "64\n").unwrap();
        let second = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        assert_eq!(val(sys.path(), "vdb"), "0");
        drop(first);
        drop(second);
        assert_eq!(val(sys.path(), "vda"), "32");
        assert_eq!(val(sys.path(), "vdb"), "64");
        assert!(!run.path().join(JOURNAL).exists());
    }

    #[test]
    fn overlapping_holds_restore_when_the_last_one_ends() {
        let sys = fake_sysfs(&[("vda", "32")]);
        let run = tempfile::tempdir().unwrap();
        let a = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        let b = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        // The first out leaves it off for the other, whose journal still has the original.
        drop(a);
        assert_eq!(val(sys.path(), "vda"), "0");
        // Nor does a repair undo a live holder's setting.
        assert_eq!(recover_journal(run.path()), 0);
        let c = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        drop(b);
        assert_eq!(val(sys.path(), "vda"), "0");
        drop(c);
        assert_eq!(val(sys.path(), "vda"), "32");
        assert!(!run.path().join(JOURNAL).exists());
    }

    /// What a SIGKILLed holder leaves: the knob changed, the journal, no lock.
    fn killed_holder(sys: &Path, run: &Path) {
        let mut g = KnobGuard::inode_readahead_off(sys, run).unwrap();
        drop(g.holder.take()); // the kernel drops a dead process's locks; nothing restores
        std::mem::forget(g);
        assert_eq!(val(sys, "vda"), "0");
    }

    #[test]
    fn a_killed_holders_change_is_repaired() {
        let sys = fake_sysfs(&[("vda", "32")]);
        let run = tempfile::tempdir().unwrap();
        // By the repair daemons and recordings run at start.
        killed_holder(sys.path(), run.path());
        assert_eq!(recover_journal(run.path()), 1);
        assert_eq!(val(sys.path(), "vda"), "32");
        assert_eq!(recover_journal(run.path()), 0);
        // By the next hold, which then restores the true original, not the 0 it found.
        killed_holder(sys.path(), run.path());
        let g = KnobGuard::inode_readahead_off(sys.path(), run.path()).unwrap();
        assert_eq!(val(sys.path(), "vda"), "0");
        drop(g);
        assert_eq!(val(sys.path(), "vda"), "32");
    }

    #[test]
    fn lock_is_exclusive_within_process() {
        let run = tempfile::tempdir().unwrap();
        let a = RecordLock::acquire(run.path()).unwrap();
        let p = run.path().join(LOCK);
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_err());
        drop(a);
        let f = fs::OpenOptions::new().write(true).open(&p).unwrap();
        assert!(Flock::lock(f, FlockArg::LockExclusiveNonblock).is_ok());
    }
}
