//! Where a prefetched launch and its prefetcher run. A disk with one hardware queue raises
//! its completion interrupts on one CPU, and the completion work (ending the bios, unlocking
//! the pages, waking the waiters) runs there, charged to whatever it interrupts: ~1000
//! prefetch completions per demo launch. While the plan is issued, the application is kept
//! off that CPU and the prefetcher on it; then the application gets its CPUs back. Measured
//! on the demo (docs/measurements.md): 1.9-7.5 ms off a launch in five paired runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::{Entry, Plan};
use crate::sys::{affinity, cpus_without, set_affinity, Dev};

/// CPUs for the application and for the prefetcher while the prefetch runs, and the
/// application's CPUs before (what it gets back).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub app: Vec<usize>,
    pub prefetcher: Vec<usize>,
    pub before: Vec<usize>,
}

/// The placement for a launch of `plan` from this process: `None` when the interrupts of the
/// disk the plan reads most from do not go to one CPU this process may use, or when that is
/// the only one.
pub fn for_plan(plan: &Plan) -> Option<Placement> {
    for_launch(0, plan)
}

/// The placement for a launch already running (`pid`, found by the daemon after its exec; 0
/// for this process): as `for_plan`, split from the CPUs the launch may use.
pub fn for_launch(pid: i32, plan: &Plan) -> Option<Placement> {
    let before = affinity(pid)?;
    let irq = irq_cpu(
        Path::new("/sys"),
        Path::new("/proc/interrupts"),
        main_device(plan)?,
    )?;
    split(&before, irq)
}

/// Move a running launch to `cpus`: every thread of `pid` and of its descendants. Returns
/// how many threads were moved. (`run` starts its application on them instead.)
pub fn pin(pid: i32, cpus: &[usize]) -> usize {
    crate::sys::tree_threads(pid)
        .into_iter()
        .filter(|&tid| set_affinity(tid, cpus))
        .count()
}

/// The device holding most of the plan's data bytes.
fn main_device(plan: &Plan) -> Option<Dev> {
    let mut bytes: HashMap<Dev, u64> = HashMap::new();
    for e in &plan.entries {
        if let Entry::Data { file, len, .. } = *e {
            if let Some(f) = plan.files.get(file as usize) {
                *bytes.entry(f.dev).or_default() += len;
            }
        }
    }
    bytes
        .into_iter()
        .max_by_key(|&(d, n)| (n, d))
        .map(|(d, _)| d)
}

fn split(before: &[usize], irq: usize) -> Option<Placement> {
    Some(Placement {
        app: cpus_without(before, irq)?,
        prefetcher: vec![irq],
        before: before.to_vec(),
    })
}

/// The launched process, as `restore` recognises what it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Launch {
    /// When it started (`sys::start_time`, clock ticks since boot).
    pub start: u64,
    /// Its session: what it starts stays in it unless it detaches itself (`setsid`).
    pub session: i32,
}

impl Launch {
    pub fn of(pid: i32) -> Option<Launch> {
        Some(Launch {
            start: crate::sys::start_time(pid)?,
            session: crate::sys::session_of(pid)?,
        })
    }
}

/// Give the application's CPUs back: every thread of every process of the launch's session
/// started since the launch, still on exactly `p.app`, gets `p.before`. That is the
/// application's tree, and also what it left behind if it exited first (reparented, no
/// longer its descendants); a process started meanwhile in another session (another
/// terminal's `taskset`) is left alone, even when pinned to exactly those CPUs. Threads
/// started while this runs inherit whatever their creator had; a second pass catches them.
/// Returns how many threads were changed.
pub fn restore(launch: Launch, p: &Placement) -> usize {
    restore_except(launch, p, &[])
}

/// `restore`, leaving alone what belongs to the launches `live` (served now by a running
/// prefetcher): a process of one of their sessions started since one of them began. A note
/// left by a killed prefetcher must not give back the CPUs of a later launch of the same
/// session (the same shell, or parallel tests) while that one is pinned.
fn restore_except(launch: Launch, p: &Placement, live: &[Launch]) -> usize {
    let mut changed = 0;
    for _ in 0..2 {
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return changed;
        };
        for e in rd.filter_map(Result::ok) {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                continue;
            };
            // The start time (a /proc text read) only for a process with a pinned thread.
            let mut since_launch = None;
            for t in tasks.filter_map(Result::ok) {
                let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else {
                    continue;
                };
                if affinity(tid).as_deref() != Some(&p.app[..]) {
                    continue;
                }
                let ours = *since_launch.get_or_insert_with(|| {
                    let start = crate::sys::start_time(pid);
                    let session = crate::sys::session_of(pid);
                    start.is_some_and(|t| t >= launch.start)
                        && session == Some(launch.session)
                        && !live.iter().any(|l| {
                            session == Some(l.session) && start.is_some_and(|t| t >= l.start)
                        })
                });
                if !ours {
                    break;
                }
                if set_affinity(tid, &p.before) {
                    changed += 1;
                }
            }
        }
    }
    changed
}

/// Where a prefetcher notes the application it pinned, so that a prefetcher killed before
/// giving the CPUs back (SIGKILL, an abort) has them given back by the next one (`recover`).
const JOURNALS: &str = "placements";

#[derive(Serialize, Deserialize)]
struct Noted {
    /// The prefetcher's start time: its pid alone may be reused.
    prefetcher_start: u64,
    launch: Launch,
    placement: Placement,
}

/// A prefetcher's note of the application it pinned (`RUN_DIR/placements/<pid>-<n>`), removed
/// when it is done. Dropped without `done` (an early return, a panic), it gives the CPUs back
/// itself.
pub struct Journal {
    path: PathBuf,
    launch: Launch,
    placement: Placement,
    done: bool,
}

/// The name of the note `note_for` writes for a prefetcher it started.
fn started_note(dir: &Path, prefetcher: i32) -> PathBuf {
    dir.join(format!("{prefetcher}-started"))
}

fn write_note(path: &Path, prefetcher: i32, launch: Launch, p: &Placement) -> Option<()> {
    let noted = Noted {
        prefetcher_start: crate::sys::start_time(prefetcher)?,
        launch,
        placement: p.clone(),
    };
    std::fs::write(path, serde_json::to_vec(&noted).ok()?).ok()
}

/// Note, for the prefetcher `prefetcher` this process has just started, the launch it will
/// serve, before the launch is pinned: `run`'s front pins itself, then execs the app, while
/// the prefetcher may not have run yet; killed before its own note, it would leave the app
/// pinned with nothing for a later prefetcher to find. The prefetcher takes the note over
/// (`Journal::note`). None if the run directory cannot be written (not root).
pub fn note_for(run_dir: &Path, prefetcher: i32, launch: Launch, p: &Placement) -> Option<()> {
    let dir = run_dir.join(JOURNALS);
    std::fs::create_dir_all(&dir).ok()?;
    write_note(&started_note(&dir, prefetcher), prefetcher, launch, p)
}

impl Journal {
    /// Note the pinned launch; None if the run directory cannot be written (not root). A
    /// note of this launch that the process which started this one wrote (`note_for`) is
    /// taken over.
    pub fn note(run_dir: &Path, launch: Launch, p: &Placement) -> Option<Journal> {
        let me = std::process::id() as i32;
        let dir = run_dir.join(JOURNALS);
        let started = started_note(&dir, me);
        let adopted = std::fs::read(&started)
            .ok()
            .and_then(|b| serde_json::from_slice::<Noted>(&b).ok())
            .is_some_and(|n| n.launch == launch && n.placement == *p);
        let path = if adopted {
            started
        } else {
            std::fs::create_dir_all(&dir).ok()?;
            // One note per launch: the daemon serves several at once.
            static NOTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NOTES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = dir.join(format!("{me}-{n}"));
            write_note(&path, me, launch, p)?;
            // One not of this launch (it cannot be, but is never left behind).
            let _ = std::fs::remove_file(&started);
            path
        };
        Some(Journal {
            path,
            launch,
            placement: p.clone(),
            done: false,
        })
    }

    /// The CPUs were given back: forget the note.
    pub fn done(mut self) {
        self.done = true;
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        if !self.done {
            restore(self.launch, &self.placement);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Give back the CPUs of launches whose prefetcher died before it could (its note is left,
/// its process gone). Returns how many launches were repaired.
pub fn recover(run_dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(run_dir.join(JOURNALS)) else {
        return 0;
    };
    let mut live = Vec::new();
    let mut dead = Vec::new();
    for e in rd.filter_map(Result::ok) {
        // `<prefetcher pid>-<n>`, `<prefetcher pid>-started` (`note_for`), or `<pid>`, as
        // older versions wrote it.
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name.split('-').next().unwrap_or_default().parse::<i32>() else {
            continue;
        };
        let noted = std::fs::read(e.path())
            .ok()
            .and_then(|b| serde_json::from_slice::<Noted>(&b).ok());
        let Some(noted) = noted else {
            // Written in part by a killed prefetcher: nothing to act on.
            let _ = std::fs::remove_file(e.path());
            continue;
        };
        if crate::sys::running_since(pid, noted.prefetcher_start) {
            live.push(noted.launch);
        } else {
            dead.push((e.path(), noted));
        }
    }
    for (path, noted) in &dead {
        restore_except(noted.launch, &noted.placement, &live);
        let _ = std::fs::remove_file(path);
    }
    dead.len()
}

/// A prefetcher that will not serve the launch noted for it (`note_for`: its application
/// was gone before it started, or it could not start) settles the note now: the launch's
/// leftovers get their CPUs back and the note goes, instead of waiting for a later
/// prefetcher to find it.
pub fn settle_started(run_dir: &Path) {
    let me = std::process::id() as i32;
    let path = started_note(&run_dir.join(JOURNALS), me);
    let Ok(b) = std::fs::read(&path) else {
        return;
    };
    if let Ok(noted) = serde_json::from_slice::<Noted>(&b) {
        restore(noted.launch, &noted.placement);
    }
    let _ = std::fs::remove_file(&path);
}

/// The CPU that takes (nearly) all the interrupts of the disk holding `dev`, if it has a
/// single hardware queue. `sys` and `interrupts` are /sys and /proc/interrupts (tests pass
/// a fake tree).
fn irq_cpu(sys: &Path, interrupts: &Path, dev: Dev) -> Option<usize> {
    let mut disk = std::fs::canonicalize(sys.join(format!("dev/block/{dev}"))).ok()?;
    if disk.join("partition").exists() {
        disk = disk.parent()?.to_path_buf();
    }
    // Several hardware queues: completions go back to (near) the submitting CPU.
    let queues = std::fs::read_dir(disk.join("mq"))
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .count();
    if queues != 1 {
        return None;
    }
    let irqs = device_irqs(&std::fs::canonicalize(disk.join("device")).ok()?, sys);
    if irqs.is_empty() {
        return None;
    }
    let per_cpu = irq_counts(&std::fs::read_to_string(interrupts).ok()?, &irqs);
    let total: u64 = per_cpu.iter().map(|&(_, n)| n).sum();
    let &(cpu, most) = per_cpu.iter().max_by_key(|&&(_, n)| n)?;
    // Spread interrupts (irqbalance, several vectors on several CPUs): no one CPU to avoid.
    (total > 0 && most * 10 >= total * 9).then_some(cpu)
}

/// The interrupt numbers of the PCI function a block device sits on (its `msi_irqs`), from
/// the device's directory up towards `sys`.
fn device_irqs(device: &Path, sys: &Path) -> Vec<u32> {
    let mut dir: Option<PathBuf> = Some(device.to_path_buf());
    while let Some(d) = dir {
        if !d.starts_with(sys) || d == sys {
            break;
        }
        if let Ok(rd) = std::fs::read_dir(d.join("msi_irqs")) {
            let mut v: Vec<u32> = rd
                .filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            v.sort_unstable();
            return v;
        }
        dir = d.parent().map(Path::to_path_buf);
    }
    Vec::new()
}

/// (CPU, sum of the counts of `irqs`) for each CPU column of /proc/interrupts text. The
/// columns are the online CPUs, named in the header ("CPU0 CPU2" with CPU 1 offline).
fn irq_counts(text: &str, irqs: &[u32]) -> Vec<(usize, u64)> {
    let mut lines = text.lines();
    let mut sum: Vec<(usize, u64)> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map_while(|c| c.strip_prefix("CPU")?.parse().ok())
        .map(|c| (c, 0))
        .collect();
    for l in lines {
        let mut tok = l.split_whitespace();
        let Some(n) = tok
            .next()
            .and_then(|t| t.strip_suffix(':'))
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        if !irqs.contains(&n) {
            continue;
        }
        for ((_, s), t) in sum.iter_mut().zip(tok) {
            match t.parse::<u64>() {
                Ok(v) => *s += v,
                Err(_) => break,
            }
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    static PINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A pinning test's start: one at a time (restoring gives back the CPUs of every process
    /// of this session started since a launch: these tests would give back each other's),
    /// this process's CPUs and a placement over them; None (skipped) with fewer than two.
    fn pinning() -> Option<(std::sync::MutexGuard<'static, ()>, Vec<usize>, Placement)> {
        let one = PINNING.lock().unwrap_or_else(|e| e.into_inner());
        let before = affinity(0).expect("affinity");
        if before.len() < 2 {
            crate::testutil::skip("needs two CPUs");
            return None;
        }
        let p = split(&before, before[before.len() - 1]).expect("placement");
        Some((one, before, p))
    }

    fn sleeper() -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap()
    }

    /// A sleeper started after clock tick `t0` (start times have clock-tick resolution).
    fn sleeper_after(t0: u64) -> std::process::Child {
        loop {
            let mut c = sleeper();
            if crate::sys::start_time(c.id() as i32).unwrap() > t0 {
                return c;
            }
            let _ = c.kill();
            let _ = c.wait();
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    // This machine's /proc/interrupts (Linux 6.18, Firecracker virtio-blk on PCI), abridged.
    const INTERRUPTS: &str = "           CPU0       CPU1       
  28:          0          0 PCI-MSIX-0000:00:01.0   0-edge      virtio0-config
  35:          0          1 PCI-MSIX-0000:00:02.0   0-edge      virtio1-config
  36:          0   15712447 PCI-MSIX-0000:00:02.0   1-edge      virtio1-req.0
  39:      16324          0 PCI-MSIX-0000:00:03.0   2-edge      virtio2-output.0
 NMI:          0          0   Non-maskable interrupts
 LOC:    5176251    5383410   Local timer interrupts
";

    #[test]
    fn sums_the_counts_of_the_device_irqs_per_cpu() {
        assert_eq!(
            irq_counts(INTERRUPTS, &[35, 36]),
            vec![(0, 0), (1, 15712448)]
        );
        assert_eq!(irq_counts(INTERRUPTS, &[39]), vec![(0, 16324), (1, 0)]);
        assert_eq!(irq_counts(INTERRUPTS, &[99]), vec![(0, 0), (1, 0)]);
        assert_eq!(irq_counts("", &[36]), vec![]);
        // CPU 1 offline: the second column is CPU 2.
        let offline = INTERRUPTS.replace("CPU1", "CPU2");
        assert_eq!(irq_counts(&offline, &[36]), vec![(0, 0), (2, 15712447)]);
    }

    /// A fake /sys: /sys/dev/block/254:1 -> a partition of vda on a PCI function with two
    /// MSI vectors, and this machine's /proc/interrupts. Returns the directory (keep it),
    /// the /sys root and the interrupts file.
    fn fake_sys(queues: usize) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(t.path()).unwrap();
        let pci = root.join("devices/pci0000:00/0000:00:02.0");
        let disk = pci.join("virtio1/block/vda");
        std::fs::create_dir_all(disk.join("vda1")).unwrap();
        std::fs::write(disk.join("vda1/partition"), "1\n").unwrap();
        for q in 0..queues {
            std::fs::create_dir_all(disk.join(format!("mq/{q}"))).unwrap();
        }
        std::fs::create_dir_all(pci.join("msi_irqs")).unwrap();
        for n in ["35", "36"] {
            std::fs::write(pci.join("msi_irqs").join(n), "msix\n").unwrap();
        }
        std::os::unix::fs::symlink(pci.join("virtio1"), disk.join("device")).unwrap();
        std::fs::create_dir_all(root.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(disk.join("vda1"), root.join("dev/block/254:1")).unwrap();
        let irqs = root.join("interrupts");
        std::fs::write(&irqs, INTERRUPTS).unwrap();
        (t, root, irqs)
    }

    const VDA1: Dev = Dev {
        major: 254,
        minor: 1,
    };

    #[test]
    fn finds_the_interrupt_cpu_of_a_single_queue_disk() {
        let (_t, root, irqs) = fake_sys(1);
        assert_eq!(irq_cpu(&root, &irqs, VDA1), Some(1));
        // Interrupts spread over the CPUs: nothing to avoid.
        std::fs::write(
            &irqs,
            INTERRUPTS.replace("       0   15712447", "  7000000    8712447"),
        )
        .unwrap();
        assert_eq!(irq_cpu(&root, &irqs, VDA1), None);
    }

    #[test]
    fn a_multi_queue_disk_has_no_interrupt_cpu() {
        let (_t, root, irqs) = fake_sys(2);
        assert_eq!(irq_cpu(&root, &irqs, VDA1), None);
    }

    #[test]
    fn splits_the_cpus_around_the_interrupt_cpu() {
        assert_eq!(
            split(&[0, 1], 1),
            Some(Placement {
                app: vec![0],
                prefetcher: vec![1],
                before: vec![0, 1]
            })
        );
        assert_eq!(split(&[0, 2, 3], 2).map(|p| p.app), Some(vec![0, 3]));
        // Only the interrupt CPU, or not allowed to use it: leave things as they are.
        assert_eq!(split(&[1], 1), None);
        assert_eq!(split(&[0, 2], 1), None);
    }

    #[test]
    fn restores_what_was_pinned_since_the_launch_and_nothing_else() {
        let Some((_one, before, p)) = pinning() else {
            return;
        };
        // Started before the launch, and pinned like it: not the launch's.
        let mut old = sleeper();
        let launch_start = {
            let mut c = sleeper_after(crate::sys::start_time(old.id() as i32).unwrap());
            let t = crate::sys::start_time(c.id() as i32).unwrap();
            let _ = c.kill();
            let _ = c.wait();
            t
        };
        let (mut a, mut b) = (sleeper(), sleeper());
        // Started since, pinned like the launch, but in a session of its own (another
        // terminal's `taskset`): not the launch's either.
        // setsid(1) execs `sleep` in place: the child is not a process-group leader.
        let mut other = std::process::Command::new("setsid")
            .args(["sleep", "5"])
            .spawn()
            .unwrap();
        let mine = crate::sys::session_of(std::process::id() as i32);
        while crate::sys::session_of(other.id() as i32) == mine {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let (po, pa, pb, px) = (
            old.id() as i32,
            a.id() as i32,
            b.id() as i32,
            other.id() as i32,
        );
        for pid in [po, pa, pb, px] {
            assert!(set_affinity(pid, &p.app));
        }
        // `b` chose its own CPUs since: restore must leave it alone.
        assert!(set_affinity(pb, &p.prefetcher));
        let launch = Launch {
            start: launch_start,
            session: crate::sys::session_of(std::process::id() as i32).unwrap(),
        };
        assert!(restore(launch, &p) >= 1);
        assert_eq!(affinity(pa), Some(before.clone()));
        assert_eq!(affinity(pb), Some(p.prefetcher.clone()));
        assert_eq!(affinity(po), Some(p.app.clone()));
        assert_eq!(
            affinity(px),
            Some(p.app.clone()),
            "another session's process"
        );
        // A prefetcher killed before giving the CPUs back: the next one does, from its note.
        let run = tempfile::tempdir().unwrap();
        assert!(set_affinity(pa, &p.app));
        let note = Journal::note(run.path(), launch, &p).unwrap();
        let path = note.path.clone();
        std::mem::forget(note); // as if killed: no drop
        assert_eq!(
            recover(run.path()),
            0,
            "its prefetcher (this process) still runs"
        );
        let dead = run
            .path()
            .join("placements")
            .join(format!("{}-7", i32::MAX));
        std::fs::rename(&path, &dead).unwrap();
        assert_eq!(recover(run.path()), 1);
        assert_eq!(affinity(pa), Some(before.clone()));
        assert!(!dead.exists());
        // One dropped without `done` gives them back itself.
        assert!(set_affinity(pa, &p.app));
        drop(Journal::note(run.path(), launch, &p).unwrap());
        assert_eq!(affinity(pa), Some(before.clone()));
        assert_eq!(
            std::fs::read_dir(run.path().join("placements"))
                .unwrap()
                .count(),
            0
        );
        for c in [&mut old, &mut a, &mut b, &mut other] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[test]
    fn a_prefetcher_killed_before_its_own_note_is_covered_by_its_starters() {
        let Some((_one, before, p)) = pinning() else {
            return;
        };
        let run = tempfile::tempdir().unwrap();
        let dir = run.path().join(JOURNALS);
        let notes = || std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        let mut app = sleeper();
        let app_pid = app.id() as i32;
        let launch = Launch::of(app_pid).unwrap();
        // `run`'s intermediate child notes the launch for the prefetcher it started; the
        // front then pins itself; the prefetcher is killed before it ran at all.
        let mut prefetcher = sleeper();
        note_for(run.path(), prefetcher.id() as i32, launch, &p).unwrap();
        assert!(set_affinity(app_pid, &p.app));
        assert_eq!(recover(run.path()), 0, "its prefetcher still runs");
        prefetcher.kill().unwrap();
        prefetcher.wait().unwrap();
        assert_eq!(recover(run.path()), 1);
        assert_eq!(affinity(app_pid), Some(before.clone()));
        assert_eq!(notes(), 0);
        // A prefetcher that does run takes its note over: one note, gone when it is done.
        let me = std::process::id() as i32;
        note_for(run.path(), me, launch, &p).unwrap();
        let j = Journal::note(run.path(), launch, &p).unwrap();
        assert_eq!(j.path, started_note(&dir, me));
        assert_eq!(notes(), 1);
        j.done();
        assert_eq!(notes(), 0);
        // One its prefetcher will not serve (the app gone first): settled at once.
        assert!(set_affinity(app_pid, &p.app));
        note_for(run.path(), me, launch, &p).unwrap();
        settle_started(run.path());
        assert_eq!(affinity(app_pid), Some(before.clone()));
        assert_eq!(notes(), 0);
        // A note of another launch is not taken over, and not left behind.
        let other = Launch {
            start: launch.start + 1,
            ..launch
        };
        note_for(run.path(), me, other, &p).unwrap();
        let j = Journal::note(run.path(), launch, &p).unwrap();
        assert_ne!(j.path, started_note(&dir, me));
        assert_eq!(notes(), 1);
        j.done();
        assert_eq!(notes(), 0);
        let _ = app.kill();
        let _ = app.wait();
    }

    #[test]
    fn a_dead_prefetchers_note_leaves_a_live_later_launch_pinned() {
        let Some((_one, before, p)) = pinning() else {
            return;
        };
        // Two launches of one session, the second a clock tick after the first.
        let mut first = sleeper();
        let mut second = sleeper_after(crate::sys::start_time(first.id() as i32).unwrap());
        let (a, b) = (first.id() as i32, second.id() as i32);
        let (la, lb) = (Launch::of(a).unwrap(), Launch::of(b).unwrap());
        assert!(set_affinity(a, &p.app) && set_affinity(b, &p.app));
        let run = tempfile::tempdir().unwrap();
        // The first launch's prefetcher was killed; the second's serves it now (this process).
        let mut killed = sleeper();
        note_for(run.path(), killed.id() as i32, la, &p).unwrap();
        killed.kill().unwrap();
        killed.wait().unwrap();
        note_for(run.path(), std::process::id() as i32, lb, &p).unwrap();
        assert_eq!(recover(run.path()), 1);
        assert_eq!(affinity(a), Some(before.clone()), "the dead one's launch");
        assert_eq!(affinity(b), Some(p.app.clone()), "the live one's launch");
        for c in [&mut first, &mut second] {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
