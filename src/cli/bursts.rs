//! `warmstart bursts mine | list | show | rm`: ClusterFetch's bursts (`crate::cluster`).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use super::plan::{open_existing, open_reading};
use super::{code, fail, fmt_unix, human_bytes, BurstsCommand};
use crate::cluster::live::{burst_plan, stored_burst, LiveMiner};
use crate::cluster::miner::MinerConfig;
use crate::store::{BurstRow, Store};

/// How often the live miner reads what the kernel queued.
const POLL: Duration = Duration::from_millis(100);

fn find(store: &Store, q: &str) -> anyhow::Result<BurstRow> {
    let all = store.bursts()?;
    let hit = match q.parse::<i64>() {
        Ok(id) => all.into_iter().find(|b| b.id == id),
        Err(_) => all.into_iter().find(|b| b.path == Path::new(q)),
    };
    hit.ok_or_else(|| {
        fail(
            code::NOT_FOUND,
            format!("no burst `{q}` (see `warmstart bursts list`)"),
        )
    })
}

pub fn cmd(db: &Path, c: BurstsCommand) -> anyhow::Result<i32> {
    match c {
        BurstsCommand::Mine {
            seconds,
            queue_size,
            iops_threshold,
            length_threshold,
            exclude,
            min_kb,
            json,
            save_log,
        } => {
            if !crate::sys::is_root() {
                return Err(fail(
                    code::NEEDS_ROOT,
                    "mining bursts traces the whole system: run it as root",
                ));
            }
            let mut store = Store::open(db)?;
            let facts = crate::learn::device_facts(&mut store)?;
            let mut cfg = MinerConfig::for_device(facts.iops_qd1);
            cfg.queue_size = queue_size as usize;
            cfg.length_threshold = length_threshold as usize;
            cfg.exclude = exclude;
            if let Some(t) = iops_threshold {
                if !(t > 0.0 && t.is_finite()) {
                    return Err(fail(code::USAGE, "--iops-threshold must be positive"));
                }
                cfg.iops_threshold = t;
            }
            let interrupt = super::record::interrupt_flag()?;
            let tfs = crate::trace::tracefs::Tracefs::open()?;
            tfs.remove_stale_instances();
            let mut live = LiveMiner::start(&tfs, cfg.clone())
                .context("cannot start tracing the system's reads")?;
            if let Some(p) = &save_log {
                let f = std::fs::File::create(p)
                    .with_context(|| format!("cannot create the miner's log {}", p.display()))?;
                live.save_log(std::io::BufWriter::new(f))
                    .with_context(|| format!("cannot write the miner's log {}", p.display()))?;
            }
            if !json {
                eprintln!(
                    "mining for {:.0} s (a burst: at least {} log entries at {:.0} per second or more); Ctrl-C stops",
                    seconds.as_secs_f64(),
                    cfg.length_threshold,
                    cfg.iops_threshold
                );
            }
            let t0 = Instant::now();
            let mut kept = Vec::new();
            loop {
                let stopping = t0.elapsed() >= seconds || interrupt.load(Ordering::Relaxed) != 0;
                let bursts = live.step(stopping)?;
                for b in bursts {
                    let plan = burst_plan(&b, &|d, i| live.path_of(d, i).cloned());
                    let bytes = plan.summary().bytes;
                    if plan.entries.is_empty() || bytes < min_kb.saturating_mul(1024) {
                        tracing::debug!(
                            "burst after {} too small to keep ({} bytes)",
                            b.trigger.path.display(),
                            bytes
                        );
                        continue;
                    }
                    let Some(id) = store.put_burst(
                        &stored_burst(&b, plan.clone()),
                        crate::cluster::BLACKLIST_AFTER,
                    )?
                    else {
                        tracing::info!("{} is blacklisted as a trigger", b.trigger.path.display());
                        continue;
                    };
                    if !json {
                        println!(
                            "burst #{id}: {} after {} ({} files, {} reads over {:.0} ms{})",
                            human_bytes(bytes),
                            b.trigger.path.display(),
                            plan.files.len(),
                            b.reads.len(),
                            (b.end.saturating_sub(b.start)) as f64 / 1e6,
                            if plan.provenance.unresolved_pages > 0 {
                                format!(
                                    "; {} left out: file not opened while mining, or metadata",
                                    human_bytes(plan.provenance.unresolved_pages * 4096)
                                )
                            } else {
                                String::new()
                            }
                        );
                    }
                    kept.push(json!({
                        "id": id,
                        "trigger": b.trigger.path,
                        "alternatives": b.alternatives.iter().map(|o| &o.path).collect::<Vec<_>>(),
                        "full": b.full,
                        "reads": b.reads.len(),
                        "files": plan.files.len(),
                        "bytes": bytes,
                        "unresolved_pages": plan.provenance.unresolved_pages,
                        "duration_ms": (b.end.saturating_sub(b.start)) as f64 / 1e6,
                    }));
                }
                if stopping {
                    break;
                }
                std::thread::sleep(POLL);
            }
            let lost = live.lost();
            if json {
                println!(
                    "{}",
                    json!({"bursts": kept, "reads": live.reads, "opens": live.opens, "lost": lost,
                           "iops_threshold": cfg.iops_threshold, "length_threshold": cfg.length_threshold,
                           "queue_size": cfg.queue_size})
                );
            } else {
                println!(
                    "{} burst(s) kept from {} reads and {} openings{}",
                    kept.len(),
                    live.reads,
                    live.opens,
                    if lost > 0 {
                        format!(" ({lost} events lost: the log has gaps)")
                    } else {
                        String::new()
                    }
                );
            }
            let sig = interrupt.load(Ordering::Relaxed);
            Ok(if sig == libc::SIGINT as usize {
                code::INTERRUPTED
            } else {
                code::OK
            })
        }
        BurstsCommand::List { json } => {
            let store = open_reading(db)?;
            let rows = store.bursts()?;
            if json {
                println!("{}", serde_json::to_string(&rows)?);
                return Ok(code::OK);
            }
            if rows.is_empty() {
                println!("no bursts yet (the daemon mines them, or `warmstart bursts mine`)");
                return Ok(code::OK);
            }
            println!(
                "{:>5} {:>10} {:>6} {:>9} {:>7}  {:<24} trigger",
                "id", "bytes", "hits", "failures", "active", "last check"
            );
            for b in rows {
                println!(
                    "{:>5} {:>10} {:>6} {:>9} {:>7}  {:<24} {}",
                    b.id,
                    human_bytes(b.bytes),
                    b.hits,
                    b.failures,
                    if b.active { "yes" } else { "no" },
                    b.last_check.as_deref().unwrap_or("-"),
                    b.path.display()
                );
            }
            Ok(code::OK)
        }
        BurstsCommand::Show { burst, json } => {
            let store = open_reading(db)?;
            let b = find(&store, &burst)?;
            let plan = store.burst_plan(&b)?;
            let sum = plan.summary();
            if json {
                println!(
                    "{}",
                    json!({"burst": b, "entries": sum.entries, "files": plan.files.iter().map(|f| &f.path).collect::<Vec<_>>(),
                           "unresolved_pages": plan.provenance.unresolved_pages, "notes": plan.notes})
                );
                return Ok(code::OK);
            }
            println!("burst #{} (learned {})", b.id, fmt_unix(b.created_at));
            println!(
                "trigger:      {} (device {}, inode {})",
                b.path.display(),
                b.dev,
                b.ino
            );
            println!(
                "opened by:    {}",
                b.opener
                    .as_deref()
                    .unwrap_or("any program (mined before openers were kept)")
            );
            for a in &b.alternatives {
                println!("alternative:  {}", a.display());
            }
            println!(
                "plan:         {} in {} entries over {} files",
                human_bytes(sum.bytes),
                sum.entries,
                plan.files.len()
            );
            println!("hits:         {} (failed checks: {})", b.hits, b.failures);
            for n in &plan.notes {
                println!("note:         {n}");
            }
            Ok(code::OK)
        }
        BurstsCommand::Rm { burst, all } => {
            let mut store = open_existing(db)?;
            let ids: Vec<i64> = if all {
                store.bursts()?.iter().map(|b| b.id).collect()
            } else {
                vec![find(&store, burst.as_deref().unwrap_or_default())?.id]
            };
            for id in &ids {
                store.remove_burst(*id)?;
            }
            println!("removed {} burst(s)", ids.len());
            Ok(code::OK)
        }
    }
}
