//! Kernel settings a recording changes, and their restoration. ext4's `inode_readahead_blks`
//! is set to 0 while learning (Paralfetch 4.2) so the trace shows exactly the inode-table
//! blocks the launch needs. The original values are journaled under /run/warmstart before
//! they change, so even a SIGKILLed recorder is repaired by the next warmstart run; a guard
//! restores them on every other exit path (return, error, panic unwind, Ctrl-C).
//!
//! Also here: the lock that serialises recordings (they drop caches and change these knobs,
//! so two at once would corrupt each other's traces and restores).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::TraceError;

pub const RUN_DIR: &str = "/run/warmstart";
const JOURNAL: &str = "restore-knobs";
const LOCK: &str = "record.lock";

/// Saved original values of sysfs knobs; restores them when dropped.
#[derive(Debug)]
pub struct KnobGuard {
    saved: Vec<(PathBuf, String)>,
    journal: PathBuf,
}

impl KnobGuard {
    /// Set every ext4 filesystem's `inode_readahead_blks` under `sys_ext4` (normally
    /// /sys/fs/ext4) to `value`, journaling the originals in `run_dir`.
    pub fn set_inode_readahead(
        sys_ext4: &Path,
        run_dir: &Path,
        value: u32,
    ) -> Result<KnobGuard, TraceError> {
        let mut knobs: Vec<PathBuf> = fs::read_dir(sys_ext4)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .map(|e| e.path().join("inode_readahead_blks"))
                    .filter(|p| p.exists())
                    .collect()
            })
            .unwrap_or_default();
        knobs.sort();
        let mut saved = Vec::new();
        for k in &knobs {
            let v = fs::read_to_string(k).map_err(|e| TraceError::io(k, e))?;
            saved.push((k.clone(), v.trim().to_string()));
        }
        let guard = KnobGuard {
            saved,
            journal: run_dir.join(JOURNAL),
        };
        guard.write_journal(run_dir)?;
        for k in &knobs {
            fs::write(k, format!("{value}\n")).map_err(|e| TraceError::io(k, e))?;
        }
        tracing::debug!(
            "inode_readahead_blks set to {value} on {} filesystem(s)",
            knobs.len()
        );
        Ok(guard)
    }

    fn write_journal(&self, run_dir: &Path) -> Result<(), TraceError> {
        if self.saved.is_empty() {
            return Ok(());
        }
        fs::create_dir_all(run_dir).map_err(|e| TraceError::io(run_dir, e))?;
        let mut text = String::new();
        for (p, v) in &self.saved {
            text.push_str(&format!("{}\t{}\n", p.display(), v));
        }
        let tmp = self.journal.with_extension("tmp");
        fs::write(&tmp, text).map_err(|e| TraceError::io(&tmp, e))?;
        fs::rename(&tmp, &self.journal).map_err(|e| TraceError::io(&self.journal, e))
    }

    /// Restore now (also done on drop); returns the first error but tries every knob.
    pub fn restore(&mut self) -> io::Result<()> {
        let mut first_err = None;
        for (p, v) in self.saved.drain(..) {
            if let Err(e) = fs::write(&p, format!("{v}\n")) {
                tracing::error!("could not restore {} to {v}: {e}", p.display());
                first_err.get_or_insert(e);
            }
        }
        if first_err.is_none() {
            let _ = fs::remove_file(&self.journal);
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for KnobGuard {
    fn drop(&mut self) {
        let _ = self.restore();
    }
}

/// Restore knobs journaled by a recorder that died before restoring them. Call with the
/// record lock held. Returns how many values were restored.
pub fn recover_journal(run_dir: &Path) -> usize {
    let journal = run_dir.join(JOURNAL);
    let Ok(text) = fs::read_to_string(&journal) else {
        return 0;
    };
    let mut n = 0;
    for line in text.lines() {
        if let Some((p, v)) = line.split_once('\t') {
            match fs::write(p, format!("{v}\n")) {
                Ok(()) => {
                    n += 1;
                    tracing::warn!("restored {p} to {v} (left changed by an interrupted recording)")
                }
                Err(e) => tracing::error!("could not restore {p} to {v}: {e}"),
            }
        }
    }
    let _ = fs::remove_file(&journal);
    n
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
        let open = || {
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&p)
                .map_err(|e| TraceError::io(&p, e))
        };
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
            let _g = KnobGuard::set_inode_readahead(sys.path(), run.path(), 0).unwrap();
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
            let _g = KnobGuard::set_inode_readahead(&s, &r, 0).unwrap();
            panic!("boom");
        });
        assert!(res.is_err());
        assert_eq!(val(sys.path(), "vda"), "32");
    }

    #[test]
    fn journal_recovers_after_a_killed_recorder() {
        let sys = fake_sysfs(&[("vda", "32")]);
        let run = tempfile::tempdir().unwrap();
        let g = KnobGuard::set_inode_readahead(sys.path(), run.path(), 0).unwrap();
        std::mem::forget(g); // as if SIGKILLed: no destructor runs
        assert_eq!(val(sys.path(), "vda"), "0");
        assert_eq!(recover_journal(run.path()), 1);
        assert_eq!(val(sys.path(), "vda"), "32");
        assert_eq!(recover_journal(run.path()), 0);
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
