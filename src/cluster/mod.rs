//! ClusterFetch (IEEE TC 2018): the intensive read bursts of running applications, mined
//! system-wide and tied to the file whose opening starts them (the trigger file), so that the
//! next opening of that file prefetches the burst. It needs no notion of "an app".

pub mod live;
pub mod miner;
pub mod service;

/// A trigger whose burst failed its check this many times is never learned again.
pub const BLACKLIST_AFTER: u64 = 3;
