//! What finding a launch's threads costs beside many other processes (docs/measurements.md,
//! 2026-11-29): `warmstart::sys::tree_threads` (the kernel's children lists) against a scan
//! of every process's parent in /proc, for a small tree of this program's own while N idle
//! processes run.
//!
//!     cargo run --release --example tree_cost -- N

use std::process::Command;
use std::time::{Duration, Instant};

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(400);
    let mut tree = Command::new("sh")
        .args(["-c", "sleep 30 & sleep 30 & sleep 30 & wait"])
        .spawn()
        .expect("sh");
    let mut idle: Vec<_> = (0..n)
        .map(|_| Command::new("sleep").arg("30").spawn().expect("sleep"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let pid = tree.id() as i32;
    for round in 0..5 {
        let t = Instant::now();
        let lists = warmstart::sys::tree_threads(pid);
        let by_lists = t.elapsed();
        let t = Instant::now();
        let mut scan = vec![pid];
        scan.extend(warmstart::sys::descendants(pid));
        let by_scan = t.elapsed();
        println!(
            "round {round}, {n} idle processes: children lists {by_lists:?} ({} threads), \
             scan of /proc {by_scan:?} ({} processes)",
            lists.len(),
            scan.len()
        );
    }
    for p in idle.iter_mut() {
        let _ = p.kill();
        let _ = p.wait();
    }
    let _ = Command::new("pkill")
        .args(["-P", &pid.to_string()])
        .status();
    let _ = tree.kill();
    let _ = tree.wait();
}
