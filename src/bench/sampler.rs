//! CPU-busy and disk-busy over time during one launch (FAST fig. 7), sampled from
//! /proc/stat and /proc/diskstats every few milliseconds by a background thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// One interval: how many CPUs were busy (0..=ncpu) and whether the disk was (0..=1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Point {
    pub t_ms: f64,
    pub cpu_busy: f64,
    pub disk_busy: f64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Raw {
    busy_ticks: u64,
    total_ticks: u64,
    io_ms: u64,
}

fn parse_cpu(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().take(8).sum();
    let idle = v[3] + v[4]; // idle + iowait
    Some((total - idle, total))
}

/// Milliseconds the device was busy (diskstats field 13, io_ticks).
fn parse_io_ms(diskstats: &str, dev: &str) -> Option<u64> {
    diskstats.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&dev))
            .then(|| f.get(12)?.parse().ok())
            .flatten()
    })
}

fn read(dev: &str) -> Raw {
    let (busy_ticks, total_ticks) = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| parse_cpu(&s))
        .unwrap_or_default();
    let io_ms = std::fs::read_to_string("/proc/diskstats")
        .ok()
        .and_then(|s| parse_io_ms(&s, dev))
        .unwrap_or_default();
    Raw {
        busy_ticks,
        total_ticks,
        io_ms,
    }
}

/// Samples until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Point>>>,
}

impl Sampler {
    /// Sample every `period` for block device `dev` (a /proc/diskstats name, e.g. "vda").
    pub fn start(dev: String, period: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let ncpu = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1) as f64;
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let mut prev = read(&dev);
            let mut prev_t = t0;
            let mut out = Vec::new();
            while !s2.load(Ordering::Relaxed) {
                std::thread::sleep(period);
                let now = read(&dev);
                let t = Instant::now();
                let dt_ms = (t - prev_t).as_secs_f64() * 1e3;
                let dtotal = now.total_ticks.saturating_sub(prev.total_ticks);
                let cpu_busy = if dtotal > 0 {
                    ncpu * now.busy_ticks.saturating_sub(prev.busy_ticks) as f64 / dtotal as f64
                } else {
                    // /proc/stat ticks (10 ms) are coarser than the period: carry the last value.
                    out.last().map_or(0.0, |p: &Point| p.cpu_busy)
                };
                let disk_busy =
                    (now.io_ms.saturating_sub(prev.io_ms) as f64 / dt_ms.max(1e-3)).min(1.0);
                out.push(Point {
                    t_ms: (t - t0).as_secs_f64() * 1e3,
                    cpu_busy,
                    disk_busy,
                });
                if dtotal > 0 {
                    prev = now;
                    prev_t = t;
                } else {
                    prev.io_ms = now.io_ms;
                }
            }
            out
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> Vec<Point> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The /proc/diskstats name of the block device holding `path` (e.g. "vda").
pub fn disk_of(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let dev = crate::sys::Dev::from_user(std::fs::metadata(path).ok()?.dev());
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{dev}/uevent")).ok()?;
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
        assert_eq!(parse_cpu(stat), Some((150, 1000)));
        let ds = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n 254       0 vda 3187 1159 245914 1433 592 392 21448 1051 0 1690 2484 0 0 0 0 0 0\n";
        assert_eq!(parse_io_ms(ds, "vda"), Some(1690));
        assert_eq!(parse_io_ms(ds, "sdz"), None);
    }

    #[test]
    fn samples_something() {
        let s = Sampler::start("vda".into(), Duration::from_millis(5));
        let t = Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(60) {
            x = x.wrapping_add(1);
        }
        let pts = s.finish();
        assert!(pts.len() >= 3, "{} points ({x})", pts.len());
        assert!(pts.iter().all(|p| p.cpu_busy >= 0.0 && p.disk_busy <= 1.0));
    }
}
