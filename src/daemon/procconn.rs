//! Exec and exit notifications from the kernel's process-events connector (netlink
//! NETLINK_CONNECTOR, CN_IDX_PROC). The kernel sends them after the exec has happened and
//! never waits for a listener: a slow or dead daemon cannot delay a launch.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const NETLINK_CONNECTOR: libc::c_int = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;
const NLMSG_HDRLEN: usize = 16;
const CN_MSG_LEN: usize = 20;

/// A process event we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcEvent {
    /// `pid` (a thread group) has just exec'd; `ts` is CLOCK_MONOTONIC ns in the kernel.
    Exec {
        pid: i32,
        ts: u64,
    },
    Exit {
        pid: i32,
    },
}

pub struct ProcConnector {
    fd: OwnedFd,
}

fn cvt(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

impl ProcConnector {
    /// Subscribe (needs CAP_NET_ADMIN).
    pub fn open() -> io::Result<ProcConnector> {
        // SAFETY: socket takes integer arguments and returns a new fd or -1.
        let raw = cvt(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                NETLINK_CONNECTOR,
            )
        } as libc::c_long)?;
        // SAFETY: `raw` is a fresh fd we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
        // SAFETY: sockaddr_nl is plain data; zeroed then filled field by field.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as u16;
        addr.nl_groups = CN_IDX_PROC;
        addr.nl_pid = 0; // the kernel assigns a port id
                         // SAFETY: addr is a valid sockaddr_nl and its size is passed.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        } as libc::c_long)?;
        let mut msg = Vec::with_capacity(NLMSG_HDRLEN + CN_MSG_LEN + 4);
        let total = (NLMSG_HDRLEN + CN_MSG_LEN + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        msg.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        msg.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // ack
        msg.extend_from_slice(&4u16.to_ne_bytes()); // len
        msg.extend_from_slice(&0u16.to_ne_bytes()); // flags
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        // SAFETY: msg is a live buffer of msg.len() bytes.
        cvt(unsafe {
            libc::send(
                fd.as_raw_fd(),
                msg.as_ptr() as *const libc::c_void,
                msg.len(),
                0,
            )
        } as libc::c_long)?;
        Ok(ProcConnector { fd })
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Receive the next batch of events (blocks until one arrives).
    pub fn recv(&self) -> io::Result<Vec<ProcEvent>> {
        let mut buf = [0u8; 8192];
        let n = loop {
            // SAFETY: buf is a live, writable buffer of buf.len() bytes.
            match cvt(unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                )
            } as libc::c_long)
            {
                Ok(n) => break n as usize,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        };
        Ok(parse(&buf[..n]))
    }
}

/// Parse netlink messages carrying proc connector events; unknown or short input is skipped.
pub fn parse(buf: &[u8]) -> Vec<ProcEvent> {
    let u32_at = |b: &[u8], o: usize| {
        b.get(o..o + 4)
            .and_then(|x| x.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let u64_at = |b: &[u8], o: usize| {
        b.get(o..o + 8)
            .and_then(|x| x.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let Some(len) = u32_at(buf, off).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        let msg = &buf[off..off + len];
        // cn_msg: id.idx, id.val, seq, ack, len(u16), flags(u16); then proc_event.
        let cn = NLMSG_HDRLEN;
        if u32_at(msg, cn) == Some(CN_IDX_PROC) {
            let ev = cn + CN_MSG_LEN;
            let what = u32_at(msg, ev);
            let ts = u64_at(msg, ev + 8).unwrap_or(0);
            let data = ev + 16;
            match what {
                Some(PROC_EVENT_EXEC) => {
                    if let Some(tgid) = u32_at(msg, data + 4) {
                        out.push(ProcEvent::Exec {
                            pid: tgid as i32,
                            ts,
                        });
                    }
                }
                Some(PROC_EVENT_EXIT) => {
                    // exit: process_pid, process_tgid, exit_code, exit_signal; only leaders.
                    if let (Some(pid), Some(tgid)) = (u32_at(msg, data), u32_at(msg, data + 4)) {
                        if pid == tgid {
                            out.push(ProcEvent::Exit { pid: tgid as i32 });
                        }
                    }
                }
                _ => {}
            }
        }
        // Messages are 4-byte aligned.
        off += (len + 3) & !3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(what: u32, pid: u32, tgid: u32) -> Vec<u8> {
        let mut m = Vec::new();
        let len = (NLMSG_HDRLEN + CN_MSG_LEN + 16 + 16) as u32;
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&[0u8; 12]);
        m.extend_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m.extend_from_slice(&CN_VAL_PROC.to_ne_bytes());
        m.extend_from_slice(&[0u8; 12]);
        m.extend_from_slice(&what.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&123_456u64.to_ne_bytes());
        m.extend_from_slice(&pid.to_ne_bytes());
        m.extend_from_slice(&tgid.to_ne_bytes());
        m.extend_from_slice(&[0u8; 8]);
        m
    }

    #[test]
    fn parses_exec_and_exit() {
        let mut b = msg(PROC_EVENT_EXEC, 41, 40);
        b.extend(msg(PROC_EVENT_EXIT, 40, 40));
        b.extend(msg(PROC_EVENT_EXIT, 41, 40)); // a thread exiting: ignored
        b.extend(msg(0x1, 5, 5)); // fork: ignored
        assert_eq!(
            parse(&b),
            vec![
                ProcEvent::Exec {
                    pid: 40,
                    ts: 123_456
                },
                ProcEvent::Exit { pid: 40 }
            ]
        );
        assert_eq!(parse(&b[..10]), vec![]);
        assert_eq!(parse(&[0xff; 64]), vec![]);
    }

    #[test]
    fn sees_an_exec() {
        if !crate::sys::is_root() {
            return crate::testutil::skip("the proc connector needs CAP_NET_ADMIN");
        }
        let pc = ProcConnector::open().unwrap();
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut seen = false;
        while !seen && std::time::Instant::now() < deadline {
            let mut fds = [nix::poll::PollFd::new(
                pc.fd(),
                nix::poll::PollFlags::POLLIN,
            )];
            if nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(200u16)).unwrap_or(0) > 0 {
                seen = pc
                    .recv()
                    .unwrap()
                    .iter()
                    .any(|e| matches!(e, ProcEvent::Exec { pid: p, .. } if *p == pid));
            }
        }
        let _ = child.wait_with_output();
        assert!(seen, "no exec event for pid {pid}");
    }
}
