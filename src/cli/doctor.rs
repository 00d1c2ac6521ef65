//! `warmstart doctor`: what this machine offers warmstart (kernel, tracefs and each event,
//! fanotify, the process-events connector, block-device access, ext4, cgroups, I/O
//! priorities, root), probed without changing anything, and what each gap means for a user.

use std::path::Path;

use serde::Serialize;
use serde_json::json;

use super::code;
use crate::trace::event::{BLOCK_EVENTS, LAUNCH_EVENTS, SCHED_EVENTS};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Status {
    /// Works.
    Ok,
    /// Missing, and warmstart works without it, less well (the meaning says how).
    Degraded,
    /// Missing, and something the user asks for cannot work.
    Missing,
}

#[derive(Debug, Serialize)]
struct Check {
    check: String,
    status: Status,
    detail: String,
    /// What the status means for a user (empty when all is well).
    meaning: String,
}

fn check(name: &str, ok: bool, detail: String, if_not: Status, meaning: &str) -> Check {
    Check {
        check: name.to_string(),
        status: if ok { Status::Ok } else { if_not },
        detail,
        meaning: if ok {
            String::new()
        } else {
            meaning.to_string()
        },
    }
}

/// The tracefs mount, as `Tracefs::open` would find it (without mounting one).
fn tracefs_root() -> Option<&'static Path> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.join("events/header_page").exists())
}

/// What the kernel lacking an event costs, by event.
fn event_meaning(system: &str, event: &str) -> (Status, &'static str) {
    match (system, event) {
        ("ext4", _) => (
            Status::Degraded,
            "inode loads are not traced: the plan's metadata comes from path lookups only",
        ),
        ("block", _) => (
            Status::Degraded,
            "`explain` cannot tell disk time apart and `plan floor` cannot measure",
        ),
        ("sched", "sched_switch" | "sched_waking") | ("ftrace", _) => {
            (Status::Degraded, "`explain` cannot attribute off-CPU time")
        }
        _ => (
            Status::Missing,
            "learning needs it (`record` and the daemon fail); the filemap access events \
             appeared around Linux 6.12",
        ),
    }
}

fn probes() -> Vec<Check> {
    let mut out = Vec::new();
    let uname = nix::sys::utsname::uname().ok();
    let release = uname
        .as_ref()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    out.push(check(
        "kernel",
        true,
        format!("Linux {release}"),
        Status::Ok,
        "",
    ));
    let root = nix::unistd::geteuid().is_root();
    out.push(check(
        "root",
        root,
        if root { "running as root" } else { "not root" }.into(),
        Status::Missing,
        "`record`, `explain`, `bench`, `demo`, the daemon and most of these probes need root; \
         run `sudo warmstart doctor`",
    ));
    let tfs = tracefs_root();
    out.push(check(
        "tracefs",
        tfs.is_some(),
        tfs.map_or("not mounted".into(), |p| {
            format!("mounted at {}", p.display())
        }),
        Status::Degraded,
        "warmstart mounts it at /sys/kernel/tracing when it needs it (root)",
    ));
    let mut events: Vec<(&str, &str)> = LAUNCH_EVENTS.to_vec();
    events.extend(BLOCK_EVENTS.iter().copied());
    events.extend(SCHED_EVENTS.iter().copied());
    events.dedup();
    if !root {
        // tracefs is root's: an absent event and an unreadable one look the same from here.
        out.push(check(
            "trace events",
            false,
            "unknown".into(),
            Status::Degraded,
            "tracefs is readable by root only: run `sudo warmstart doctor`",
        ));
        events.clear();
    }
    let mut seen = std::collections::HashSet::new();
    for (system, event) in events {
        if !seen.insert((system, event)) {
            continue;
        }
        let name = format!("event {system}:{event}");
        let present = tfs.is_some_and(|t| t.join("events").join(system).join(event).exists());
        let (if_not, meaning) = event_meaning(system, event);
        out.push(check(
            &name,
            present,
            if present { "present" } else { "absent" }.into(),
            if_not,
            meaning,
        ));
    }
    let fan = nix::sys::fanotify::Fanotify::init(
        nix::sys::fanotify::InitFlags::FAN_CLASS_NOTIF,
        nix::sys::fanotify::EventFFlags::O_RDONLY,
    );
    out.push(check(
        "fanotify",
        fan.is_ok(),
        fan.as_ref()
            .map_or_else(|e| e.to_string(), |_| "works".into()),
        if root {
            Status::Missing
        } else {
            Status::Degraded
        },
        if root {
            "recording cannot turn inodes into paths, and the daemon cannot watch execs or bursts"
        } else {
            "needs root: run `sudo warmstart doctor`"
        },
    ));
    drop(fan);
    let pc = crate::daemon::procconn::ProcConnector::open();
    out.push(check(
        "process-events connector",
        pc.is_ok(),
        pc.as_ref()
            .map_or_else(|e| e.to_string(), |_| "works".into()),
        Status::Degraded,
        "the daemon sees interpreters' launches (python, shells, java) only by their exec open",
    ));
    drop(pc);
    let (blk_ok, blk_detail) = root_block_device();
    out.push(check(
        "block device read",
        blk_ok,
        blk_detail,
        Status::Degraded,
        "metadata is prefetched by path lookups, directory listings and inode handles instead of \
         the exact blocks: works, a little slower",
    ));
    let ext4 = Path::new(crate::trace::knobs::SYS_EXT4);
    let knobs = std::fs::read_dir(ext4)
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("inode_readahead_blks").exists())
                .count()
        })
        .unwrap_or(0);
    out.push(check(
        "ext4",
        knobs > 0,
        format!("{knobs} mounted ext4 filesystem(s) with inode_readahead_blks"),
        Status::Degraded,
        "on other filesystems the inode-readahead hold during a prefetch does not apply",
    ));
    // cachestat answers only the file's owner, a writer or root (like mincore).
    let cachestat = std::fs::File::open("/bin/sh")
        .map_err(|e| e.to_string())
        .and_then(|f| {
            crate::sys::cachestat(std::os::fd::AsFd::as_fd(&f), 0, 4096).map_err(|e| e.to_string())
        });
    out.push(check(
        "cachestat(2)",
        cachestat.is_ok(),
        cachestat
            .as_ref()
            .map_or_else(Clone::clone, |_| "works".into()),
        Status::Degraded,
        if root {
            "absent before Linux 6.5: warm launches are not told apart from cold ones"
        } else {
            "needs root: run `sudo warmstart doctor`"
        },
    ));
    let (launcher, launcher_ok) = launcher_linking();
    out.push(check(
        "launcher",
        launcher_ok,
        launcher,
        Status::Degraded,
        "each cold prefetched launch waits ~2 ms more for the launcher's own loading (its \
         loader and libgcc_s); link it statically: `cargo rustc --release --bin warmstart -- \
         -C target-feature=+crt-static`, then install again",
    ));
    let controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").ok();
    out.push(check(
        "cgroup v2",
        controllers.is_some(),
        controllers
            .as_deref()
            .map_or("not mounted at /sys/fs/cgroup".into(), |c| {
                format!("controllers: {}", c.trim())
            }),
        Status::Degraded,
        "cgroup I/O controls are unavailable (warmstart does not use them today)",
    ));
    // SAFETY: ioprio_get takes two integers and returns one; it touches no memory.
    let prio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, 0) };
    out.push(check(
        "I/O priorities",
        prio >= 0,
        if prio >= 0 {
            format!("ioprio_get works (this process: {prio:#x})")
        } else {
            std::io::Error::last_os_error().to_string()
        },
        Status::Degraded,
        "the prefetch cannot be given a lower I/O priority than the application",
    ));
    out
}

/// How the `warmstart` launcher next to this binary is linked: (detail, whether statically).
fn launcher_linking() -> (String, bool) {
    let Some(path) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("warmstart")))
    else {
        return ("cannot find this program's directory".into(), false);
    };
    match crate::launch::statically_linked(&path) {
        Ok(Some(true)) => (format!("{} is linked statically", path.display()), true),
        Ok(Some(false)) => (format!("{} is linked dynamically", path.display()), false),
        Ok(None) => (
            format!("{} is not an ELF executable", path.display()),
            false,
        ),
        Err(e) => (format!("{}: {e}", path.display()), false),
    }
}

/// Whether the root filesystem's block device can be opened for reading.
fn root_block_device() -> (bool, String) {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata("/") else {
        return (false, "cannot stat /".into());
    };
    let (major, minor) = (libc::major(m.dev()), libc::minor(m.dev()));
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"));
    let Some(name) = uevent.ok().and_then(|u| {
        u.lines()
            .find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string))
    }) else {
        return (
            false,
            format!("/ is on {major}:{minor}, not a block device"),
        );
    };
    let node = Path::new("/dev").join(&name);
    match std::fs::File::open(&node) {
        Ok(_) => (true, format!("{} can be read", node.display())),
        Err(e) => (false, format!("{}: {e}", node.display())),
    }
}

pub fn cmd(json_out: bool) -> anyhow::Result<i32> {
    let checks = probes();
    let learn_ok = !checks.iter().any(|c| c.status == Status::Missing);
    if json_out {
        println!("{}", json!({"can_learn": learn_ok, "checks": checks}));
    } else {
        for c in &checks {
            let mark = match c.status {
                Status::Ok => "ok      ",
                Status::Degraded => "degraded",
                Status::Missing => "MISSING ",
            };
            println!("{mark}  {:<46} {}", c.check, c.detail);
            if !c.meaning.is_empty() {
                println!("{:>10}-> {}", "", c.meaning);
            }
        }
        println!(
            "{}",
            if learn_ok {
                "warmstart can learn and prefetch on this machine"
            } else {
                "warmstart cannot learn here: see MISSING above"
            }
        );
    }
    Ok(if learn_ok { code::OK } else { code::ERROR })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_learning_events_are_required() {
        assert_eq!(
            event_meaning("filemap", "mm_filemap_fault").0,
            Status::Missing
        );
        assert_eq!(event_meaning("ext4", "ext4_load_inode").0, Status::Degraded);
        assert_eq!(event_meaning("block", "block_rq_issue").0, Status::Degraded);
        assert_eq!(event_meaning("sched", "sched_switch").0, Status::Degraded);
        assert_eq!(
            event_meaning("sched", "sched_process_exec").0,
            Status::Missing
        );
    }

    #[test]
    fn every_probe_answers_without_root_or_panicking() {
        let checks = probes();
        assert!(checks
            .iter()
            .any(|c| c.check == "event filemap:mm_filemap_fault"));
        assert!(checks
            .iter()
            .all(|c| (c.status == Status::Ok) == c.meaning.is_empty()));
    }
}
