//! `warmstart prefetch APP`: the plan replayed now, without a launch (the benchmark's
//! prefetch-only, t_ssd). The front runs it itself, as it runs a plain `run`: the command's
//! own start is part of what it measures.

use std::path::Path;

use serde_json::json;

use super::plan::open_existing;
use super::{code, fail, human_bytes, PrefetchArgs};

pub fn prefetch_cmd(db: &Path, a: PrefetchArgs) -> anyhow::Result<i32> {
    let store = open_existing(db)?;
    let row = store.find_app(&a.app)?;
    let plan = store.plan(&row)?.ok_or_else(|| {
        fail(
            code::NOT_FOUND,
            format!("`{}` has no plan (record it first)", row.key),
        )
    })?;
    drop(store);
    let t0 = std::time::Instant::now();
    let opts = crate::prefetch::PrefetchOptions {
        jobs: a.jobs as usize,
        window: a.window_kb.saturating_mul(1024),
        meta_jobs: a.meta_jobs as usize,
        inode_readahead_off: Some(crate::prefetch::KnobHold::Take(Default::default())),
        ..Default::default()
    };
    let report =
        crate::prefetch::prefetch(&plan, &opts, &std::sync::atomic::AtomicBool::new(false));
    let waited = a.wait.then(|| crate::prefetch::wait_resident(&plan));
    let total_ms = t0.elapsed().as_secs_f64() * 1e3;
    if a.json {
        println!(
            "{}",
            json!({"app": row.key, "total_ms": total_ms, "waited_ranges": waited, "prefetch": report,
                   "peak_rss_kb": crate::sys::peak_rss_kb()})
        );
    } else {
        println!(
            "prefetched {} data + {} metadata ({} lookups, {} listings, {} inodes) of {} in {:.1} ms{}",
            human_bytes(report.data_bytes),
            human_bytes(report.metadata_bytes),
            report.lookups,
            report.listings,
            report.inodes,
            row.key,
            total_ms,
            if a.wait {
                " (all resident)"
            } else {
                " (requests issued)"
            }
        );
    }
    Ok(code::OK)
}
