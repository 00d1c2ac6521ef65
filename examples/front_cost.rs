//! What a warm `run` launch's front does before the app's exec, step by step, in a fresh
//! process as the front runs them (first-time costs included), and what decoding the whole
//! plan would add (docs/measurements.md, 2026-11-29, fourth entry).
//!
//!     cargo run --release --example front_cost -- DB APP

use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let (Some(db), Some(key)) = (a.get(1), a.get(2)) else {
        eprintln!("usage: front_cost DB APP");
        std::process::exit(2);
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let t = Instant::now();
    let store = warmstart::store::Store::open_for_launch(std::path::Path::new(db)).expect("open");
    let open = t.elapsed();
    let app = store.app_by_key(key).expect("app").expect("no such app");
    let strategy = store
        .auto_choice(app.id)
        .expect("choice")
        .and_then(|c| c.strategy)
        .unwrap_or_else(|| "paralfetch".into());
    let chose = t.elapsed();
    let look = store
        .plan_look(&app, &strategy)
        .expect("look")
        .flatten()
        .expect("no look stored");
    let read_look = t.elapsed();
    let warm = warmstart::prefetch::sample_residency(&look).warm();
    let looked = t.elapsed();
    let plan = store
        .plan_for(&app, &strategy)
        .expect("plan")
        .expect("no plan");
    let decoded = t.elapsed();
    println!(
        "open {:.3} choice {:.3} look read {:.3} ({} files) look {:.3} (warm {warm}) | whole plan {:.3} ({} entries)",
        ms(open),
        ms(chose - open),
        ms(read_look - chose),
        look.files.len(),
        ms(looked - read_look),
        ms(decoded - looked),
        plan.entries.len(),
    );
}
