//! warmstart: a Linux application-launch prefetcher. It learns which file pages and
//! filesystem metadata an application reads while it starts (stock tracepoints, no kernel
//! patch), turns that into a prefetch plan, and replays the plan with asynchronous readahead
//! concurrently with the next launch.
//!
//! Data flow, one module per stage:
//! [`trace`] → [`sequence`] → [`resolve`] → [`schedule`] → [`plan`] → [`prefetch`];
//! [`placement`] keeps a launch and its prefetcher on separate CPUs; [`store`] keeps apps,
//! runs and plans; [`learn`] runs the learning cycle; [`bench`] measures; [`emulate`] replays
//! recorded launches on the device without the page cache (IEICE 2015's platform);
//! [`cluster`] mines the read bursts of running applications and prefetches each when its
//! trigger file is opened (ClusterFetch).

pub mod app;
pub mod bench;
pub mod cli;
pub mod cluster;
pub mod codec;
pub mod daemon;
pub mod device;
pub mod elf;
pub mod emulate;
pub mod explain;
pub mod ext4;
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzz;
pub mod launch;
pub mod learn;
pub mod placement;
pub mod plan;
pub mod prefetch;
pub mod resolve;
pub mod schedule;
pub mod sequence;
pub mod serve;
pub mod store;
pub mod sys;
pub mod trace;

#[cfg(test)]
pub(crate) mod testutil {
    /// Skip a test whose kernel feature or privilege is missing: prints `skipped: <reason>`,
    /// and fails instead when WARMSTART_REQUIRE_PRIVILEGED=1 (CI on a machine that has it).
    pub fn skip(reason: &str) {
        if std::env::var("WARMSTART_REQUIRE_PRIVILEGED").as_deref() == Ok("1") {
            panic!("required test could not run: {reason}");
        }
        eprintln!("skipped: {reason}");
    }

    /// Write `path`'s pages back and drop them from the page cache (clean pages go).
    pub fn evict(path: &std::path::Path) {
        let f = std::fs::File::open(path).unwrap();
        f.sync_all().unwrap();
        nix::fcntl::posix_fadvise(
            &f,
            0,
            0,
            nix::fcntl::PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .unwrap();
    }
}
