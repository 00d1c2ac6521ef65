//! `auto`: pick, per app, the strategy whose launches have been fastest, trying the others now
//! and then. Before there is history, the device class decides the order strategies are
//! tried in (queueing devices favour concurrent replay, non-queueing ones sorted fetching).

use super::Strategy;
use crate::bench::stats::Spread;
use crate::store::LaunchRecord;

/// Samples of each strategy needed before it is compared.
pub const MIN_SAMPLES: usize = 2;
/// Every this many automatic launches, one goes to the contender tried least recently.
pub const EXPLORE_EVERY: usize = 10;
/// A contender is within this factor of the best median; a clearly slower strategy costs a
/// user a slow launch each time it is re-tried, so it is re-tried only every
/// `EXPLORE_EVERY * SLOW_RETRY` launches (in case the app or the device changed).
pub const CONTENDER: f64 = 1.10;
pub const SLOW_RETRY: usize = 5;
/// Launches on this machine vary by ±10% from one to the next, so medians of a few launches
/// rank near-equal strategies at random: another strategy replaces the device class's first
/// choice only when its median is at least this much faster.
pub const SWITCH_MARGIN: f64 = 0.05;
/// A launch that found more than this share of its plan already in the page cache (a warm
/// launch) says nothing about how well a strategy prefetches: it is not counted.
pub const MAX_RESIDENT_SHARE: f64 = 0.5;

/// Whether a launch timed a cold-enough start to compare strategies by.
pub fn counts(l: &LaunchRecord) -> bool {
    match l.resident_bytes {
        Some(r) if l.prefetched_bytes > 0 => {
            (r as f64) <= MAX_RESIDENT_SHARE * l.prefetched_bytes as f64
        }
        _ => true,
    }
}

/// The order strategies are tried in, by device class.
pub fn preference(queueing: bool) -> [Strategy; 5] {
    if queueing {
        [
            Strategy::Paralfetch,
            Strategy::Trace,
            Strategy::Fast,
            Strategy::Hybrid,
            Strategy::Sorted,
        ]
    } else {
        [
            Strategy::Hybrid,
            Strategy::Sorted,
            Strategy::Paralfetch,
            Strategy::Trace,
            Strategy::Fast,
        ]
    }
}

/// Choose a strategy from the app's launch history (most recent first) and say why.
pub fn choose(history: &[LaunchRecord], queueing: bool) -> (Strategy, String) {
    let order = preference(queueing);
    let samples = |s: Strategy| -> Vec<f64> {
        history
            .iter()
            .filter(|l| {
                l.mode == "run"
                    && l.wall_ms > 0.0
                    && l.strategy.as_deref() == Some(s.name())
                    && counts(l)
            })
            .take(20)
            .map(|l| l.wall_ms)
            .collect()
    };
    for s in order {
        let n = samples(s).len();
        if n < MIN_SAMPLES {
            return (
                s,
                format!(
                    "trying {} ({n} of {MIN_SAMPLES} timed launches so far; {} device order)",
                    s.name(),
                    if queueing { "queueing" } else { "non-queueing" }
                ),
            );
        }
    }
    let mut ranked: Vec<(f64, Strategy, usize)> = order
        .iter()
        .filter_map(|&s| {
            let v = samples(s);
            Spread::of(&v).map(|sp| (sp.median, s, v.len()))
        })
        .collect();
    ranked.sort_by(|a, b| a.0.total_cmp(&b.0));
    let fastest = ranked[0];
    // The device class's first choice stays unless another is clearly faster.
    let default = ranked.iter().copied().find(|r| r.1 == order[0]);
    let (best_ms, best, n) = match default {
        Some(d) if fastest.0 * (1.0 + SWITCH_MARGIN) >= d.0 => d,
        _ => fastest,
    };
    let auto_launches = history.iter().filter(|l| l.mode == "run").count();
    let every = EXPLORE_EVERY * SLOW_RETRY;
    let all_of_them = auto_launches % every == every - 1;
    if auto_launches % EXPLORE_EVERY == EXPLORE_EVERY - 1 {
        let contender = |s: Strategy| {
            all_of_them
                || ranked
                    .iter()
                    .any(|r| r.1 == s && r.0 <= best_ms * CONTENDER)
        };
        // The strategy whose latest sample is oldest (excluding the best).
        let age = |s: Strategy| {
            history
                .iter()
                .position(|l| l.strategy.as_deref() == Some(s.name()))
                .unwrap_or(usize::MAX)
        };
        if let Some(&s) = order
            .iter()
            .filter(|&&s| s != best && contender(s))
            .max_by_key(|&&s| age(s))
        {
            return (
                s,
                format!(
                    "re-trying {} (last timed {} launches ago); best is {} at {:.0} ms",
                    s.name(),
                    age(s),
                    best.name(),
                    best_ms
                ),
            );
        }
    }
    if best != fastest.1 {
        return (
            best,
            format!(
                "{}: the device class's first choice, {:.0} ms over {} launches; {} at {:.0} ms \
                 is not {:.0}% faster",
                best.name(),
                best_ms,
                n,
                fastest.1.name(),
                fastest.0,
                SWITCH_MARGIN * 100.0
            ),
        );
    }
    let next = ranked
        .iter()
        .find(|r| r.1 != best)
        .map(|r| format!("; next {} at {:.0} ms", r.1.name(), r.0))
        .unwrap_or_default();
    (
        best,
        format!(
            "{}: fastest median, {:.0} ms over {} launches{}",
            best.name(),
            best_ms,
            n,
            next
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(s: Strategy, ms: f64) -> LaunchRecord {
        LaunchRecord {
            mode: "run".into(),
            wall_ms: ms,
            strategy: Some(s.name().into()),
            ..LaunchRecord::default()
        }
    }

    /// Two timed launches of each strategy, the second `jitter` ms slower.
    fn each_twice(times: &[(Strategy, f64)], jitter: f64) -> Vec<LaunchRecord> {
        times
            .iter()
            .flat_map(|&(s, ms)| [rec(s, ms), rec(s, ms + jitter)])
            .collect()
    }

    #[test]
    fn explores_in_device_order_first() {
        let (s, why) = choose(&[], true);
        assert_eq!(s, Strategy::Paralfetch);
        assert!(why.contains("trying"), "{why}");
        assert_eq!(choose(&[], false).0, Strategy::Hybrid);
        let h = vec![
            rec(Strategy::Paralfetch, 100.0),
            rec(Strategy::Paralfetch, 110.0),
        ];
        assert_eq!(choose(&h, true).0, Strategy::Trace);
    }

    #[test]
    fn then_keeps_the_fastest_and_sometimes_retries() {
        let mut h = each_twice(
            &[
                (Strategy::Paralfetch, 100.0),
                (Strategy::Trace, 90.0),
                (Strategy::Fast, 95.0),
                (Strategy::Hybrid, 120.0),
                (Strategy::Sorted, 150.0),
            ],
            2.0,
        );
        let (s, why) = choose(&h, true);
        assert_eq!(s, Strategy::Trace, "{why}");
        assert!(why.contains("fastest"), "{why}");
        // With 19 automatic launches behind, the 20th explores: the contender (within 10% of
        // the best) sampled longest ago. History is most recent first: Sorted and Hybrid are
        // older but far slower, so it is Fast.
        for _ in 0..9 {
            h.insert(0, rec(Strategy::Trace, 91.0));
        }
        assert_eq!(h.len(), 19);
        let (s, why) = choose(&h, true);
        assert_eq!(s, Strategy::Fast, "{why}");
        assert!(why.contains("re-trying"), "{why}");
        // Every 50th launch re-tries whatever was sampled longest ago, slow or not.
        for _ in 0..30 {
            h.insert(0, rec(Strategy::Trace, 91.0));
        }
        assert_eq!(h.len(), 49);
        let (s, why) = choose(&h, true);
        assert_eq!(s, Strategy::Sorted, "{why}");
        // Between those, no re-try at all when nothing else is close.
        let mut lone = vec![rec(Strategy::Trace, 50.0), rec(Strategy::Trace, 50.0)];
        for s in [
            Strategy::Paralfetch,
            Strategy::Fast,
            Strategy::Hybrid,
            Strategy::Sorted,
        ] {
            lone.push(rec(s, 100.0));
            lone.push(rec(s, 100.0));
        }
        for _ in 0..9 {
            lone.insert(0, rec(Strategy::Trace, 50.0));
        }
        assert_eq!(lone.len(), 19);
        assert_eq!(choose(&lone, true).0, Strategy::Trace);
    }

    #[test]
    fn ignores_untimed_and_other_modes() {
        let mut r = rec(Strategy::Paralfetch, 0.0);
        r.wall_ms = 0.0;
        let learn = LaunchRecord {
            mode: "record".into(),
            wall_ms: 50.0,
            strategy: Some("paralfetch".into()),
            ..LaunchRecord::default()
        };
        assert_eq!(choose(&[r.clone(), r, learn], true).0, Strategy::Paralfetch);
    }

    #[test]
    fn keeps_the_device_choice_unless_another_is_clearly_faster() {
        let mut h = each_twice(
            &[
                (Strategy::Paralfetch, 100.0),
                (Strategy::Trace, 97.0),
                (Strategy::Fast, 99.0),
                (Strategy::Hybrid, 120.0),
                (Strategy::Sorted, 150.0),
            ],
            0.0,
        );
        let (s, why) = choose(&h, true);
        assert_eq!(s, Strategy::Paralfetch, "{why}");
        assert!(why.contains("first choice"), "{why}");
        // 6% faster is clearly faster.
        for r in h
            .iter_mut()
            .filter(|r| r.strategy.as_deref() == Some("trace"))
        {
            r.wall_ms = 94.0;
        }
        assert_eq!(choose(&h, true).0, Strategy::Trace);
    }

    #[test]
    fn warm_launches_do_not_count() {
        let warm = |s: Strategy, ms: f64| LaunchRecord {
            prefetched_bytes: 1000,
            resident_bytes: Some(900),
            ..rec(s, ms)
        };
        let cold = |s: Strategy, ms: f64| LaunchRecord {
            prefetched_bytes: 1000,
            resident_bytes: Some(100),
            ..rec(s, ms)
        };
        assert!(counts(&cold(Strategy::Trace, 1.0)) && !counts(&warm(Strategy::Trace, 1.0)));
        assert!(
            counts(&rec(Strategy::Trace, 1.0)),
            "older records without the field count"
        );
        let mut h = Vec::new();
        for s in preference(true) {
            h.push(cold(s, 100.0));
            h.push(cold(s, 100.0));
        }
        // Warm launches of trace look 3x faster; they must not make it the choice.
        for _ in 0..5 {
            h.insert(0, warm(Strategy::Trace, 30.0));
        }
        let (s, why) = choose(&h, true);
        assert_eq!(s, Strategy::Paralfetch, "{why}");
    }
}
