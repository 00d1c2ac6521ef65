//! `auto`: pick, per app, the strategy whose launches have been fastest, trying the others now
//! and then. Before there is history, the device class decides the order strategies are
//! tried in (queueing devices favour concurrent replay, non-queueing ones sorted fetching).

use super::Strategy;
use crate::bench::stats::Spread;
use crate::emulate::Ranking;
use crate::store::mode::{DAEMON, RUN};
use crate::store::{LaunchRecord, Store, StoreError, StoredChoice};

/// Samples of each strategy needed before it is compared.
pub const MIN_SAMPLES: usize = 2;
/// Every this many automatic launches, one goes to the contender tried least recently.
pub const EXPLORE_EVERY: usize = 10;
/// A contender is within this factor of the best median; a clearly slower strategy costs a
/// user a slow launch each time it is re-tried, so it is re-tried only every
/// `EXPLORE_EVERY * SLOW_RETRY` launches (in case the app or the device changed).
pub const CONTENDER: f64 = 1.10;
pub const SLOW_RETRY: usize = 5;
/// A plain baseline of fewer launches than this (`record`'s two, timed in one moment) is
/// re-timed at the exploring launches until it has them, however slow it looked: timed
/// while the machine was slow (pdflatex: 173 ms at `record`, 139 ms cold in the bench that
/// followed, bench/results), it would otherwise keep a plain launch out for good.
pub const PLAIN_SAMPLES: usize = 5;
/// ... but only while it is within this factor of the launch chosen: a slow moment made
/// pdflatex's baseline 24% high (173 against 139 ms), while a plain launch far slower than
/// every strategy is what a cold start costs, and re-timing it cost each app up to three
/// cold launches. In a suite run (docs/measurements.md, 2026-11-26, seventh entry) those
/// re-timed plain launches were 2 of the 5 `warmstart` rounds of most apps (python-imports
/// 2491 and 2653 ms against 1478-1774 for its strategy), and `auto` closed 54% of the gap
/// against 70-74% for the strategies it chose between.
pub const PLAIN_RETIME: f64 = 1.3;
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

/// What `auto` chose for a launch: a strategy's plan replayed beside it, or (`None`) a
/// plain launch, when no strategy has beaten one (recorded as strategy `none`).
pub type Choice = Option<Strategy>;

/// The name plain launches are recorded under.
pub const PLAIN: &str = "none";

/// The name a choice is recorded and shown under.
pub fn name_of(c: Choice) -> &'static str {
    c.map_or(PLAIN, |s| s.name())
}

/// The order strategies are tried in, by device class. A queueing device (an SSD, or this
/// VM's disk) is tried only with the concurrent strategies: `sorted` and `hybrid` hold the
/// application until (part of) the plan is in memory, serialising I/O and computation that
/// such a device overlaps. Measured: in the committed suite run `sorted` closed 26% of the
/// gap against 40-45% for the others, and a traced python-imports launch waited 336 ms on a
/// held head (docs/measurements.md, 2026-11-25, fourth entry). They stay available by name.
pub fn preference(queueing: bool) -> Vec<Strategy> {
    if queueing {
        vec![Strategy::Paralfetch, Strategy::Trace, Strategy::Fast]
    } else {
        vec![
            Strategy::Hybrid,
            Strategy::Sorted,
            Strategy::Paralfetch,
            Strategy::Trace,
            Strategy::Fast,
        ]
    }
}

/// Strategies real launches compare. Without an emulated ranking: the device class's order,
/// each tried at the exploring launches. With one: its best two, ties (within
/// `SWITCH_MARGIN`, the emulator's own spread between replays) broken by the device class's
/// order, so no real launch goes to a strategy emulation ranked worse (issue #28).
pub fn contenders(queueing: bool, emulated: Option<&Ranking>) -> Vec<Strategy> {
    let order = preference(queueing);
    let Some(r) = emulated else { return order };
    let mut ranked: Vec<(Strategy, f64)> = r
        .strategies
        .iter()
        .filter_map(|(n, ms)| Strategy::parse(n).map(|s| (s, *ms)))
        .filter(|(_, ms)| ms.is_finite())
        .collect();
    let Some(best) = ranked.iter().map(|r| r.1).min_by(f64::total_cmp) else {
        return order;
    };
    let pref = |s: Strategy| order.iter().position(|&o| o == s).unwrap_or(order.len());
    let tie = |ms: f64| ms <= best * (1.0 + SWITCH_MARGIN);
    ranked.sort_by(|a, b| {
        (!tie(a.1), pref(a.0), a.1)
            .partial_cmp(&(!tie(b.1), pref(b.0), b.1))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    // Outside the ties, emulated time alone orders them.
    let n_tie = ranked.iter().filter(|r| tie(r.1)).count();
    ranked[n_tie..].sort_by(|a, b| a.1.total_cmp(&b.1));
    ranked.into_iter().take(2).map(|r| r.0).collect()
}

/// Load an app's history and emulated ranking from the store and `choose`.
pub fn choose_stored(
    store: &Store,
    app_id: i64,
    queueing: bool,
) -> Result<(Choice, String), StoreError> {
    choose_stored_as(store, app_id, queueing, true, RUN)
}

/// The daemon's choice for an app's next launch: as `choose_stored`, from the launches the
/// daemon itself timed. Its launches start after the exec, `run`'s before it: each compares
/// strategies by its own launches, so that neither's head start decides the other's choice.
pub fn choose_for_daemon(
    store: &Store,
    app_id: i64,
    queueing: bool,
) -> Result<(Choice, String), StoreError> {
    choose_stored_as(store, app_id, queueing, true, DAEMON)
}

/// `choose_settled` from the store: the choice for a traced launch.
pub fn choose_stored_settled(
    store: &Store,
    app_id: i64,
    queueing: bool,
) -> Result<(Choice, String), StoreError> {
    choose_stored_as(store, app_id, queueing, false, RUN)
}

fn choose_stored_as(
    store: &Store,
    app_id: i64,
    queueing: bool,
    explore: bool,
    timed_by: &str,
) -> Result<(Choice, String), StoreError> {
    let history = store.launches(app_id, 200)?;
    let emulated = store.app_settings(app_id)?.emulated;
    Ok(choose_as(
        &history,
        queueing,
        emulated.as_ref(),
        explore,
        timed_by,
    ))
}

/// The choice for the app's next launch: the one made when its last launch was recorded
/// (`remember`), else from its history. A launch's front reads one row instead of the 200 of
/// its history: ~1.5 ms less of a cold launch's start on pdflatex (paired median of 14
/// rounds; docs/measurements.md, 2026-11-27, fourth entry).
/// A traced launch takes the choice without exploration (`choose_settled`), from the history.
pub fn choose_for_launch(
    store: &Store,
    app_id: i64,
    traced: bool,
    queueing: impl FnOnce() -> bool,
) -> Result<(Choice, String), StoreError> {
    if traced {
        return choose_stored_settled(store, app_id, queueing());
    }
    if let Some(c) = store.auto_choice(app_id)? {
        match c.strategy.as_deref().map(Strategy::parse) {
            None => return Ok((None, c.why)),
            Some(Some(s)) => return Ok((Some(s), c.why)),
            // A strategy this version does not know: choose afresh.
            Some(None) => {}
        }
    }
    choose_stored(store, app_id, queueing())
}

/// Make and keep the choice for the app's next launch, once a launch is recorded.
pub fn remember(store: &mut Store, app_id: i64, queueing: bool) -> Result<(), StoreError> {
    store
        .put_auto_choice(app_id, |s| {
            let (c, why) = choose_stored(s, app_id, queueing)?;
            Ok(StoredChoice {
                strategy: c.map(|s| s.name().to_string()),
                why,
            })
        })
        .map(|_| ())
}

/// Choose how to launch an app from its launch history (most recent first) and say why.
/// Plain launches (`none`) come from `record`'s timed cold launches and from launches `auto`
/// itself made plain: once the strategies are tried, a plain launch is chosen when its
/// median is `SWITCH_MARGIN` faster than the best strategy's (prefetching that app does
/// harm), and the best strategy is re-tried every `EXPLORE_EVERY` launches after that.
pub fn choose(
    history: &[LaunchRecord],
    queueing: bool,
    emulated: Option<&Ranking>,
) -> (Choice, String) {
    choose_as(history, queueing, emulated, true, RUN)
}

/// `choose` without its exploring launches: the choice itself, for a traced launch
/// (`explain`, `run --traced`). A traced launch is not counted among the launches that
/// make the next one an exploring one, so an exploring choice would stay until an untraced
/// launch came, and every traced launch meanwhile would show the exploration (a plain
/// launch re-timed, say) instead of how the app is launched: in one suite run 6 of 11
/// `explain` launches hit the 50th-launch re-timing of a plain launch and prefetched
/// nothing (docs/measurements.md, 2026-11-27, fifth entry).
pub fn choose_settled(
    history: &[LaunchRecord],
    queueing: bool,
    emulated: Option<&Ranking>,
) -> (Choice, String) {
    choose_as(history, queueing, emulated, false, RUN)
}

fn choose_as(
    history: &[LaunchRecord],
    queueing: bool,
    emulated: Option<&Ranking>,
    explore: bool,
    timed_by: &str,
) -> (Choice, String) {
    let order = contenders(queueing, emulated);
    let first_why = match emulated {
        Some(_) if order.len() == 2 => format!(
            "the emulator's first choice; {} second, only these two are timed",
            order[1].name()
        ),
        _ => format!(
            "the {} device class's first choice",
            if queueing { "queueing" } else { "non-queueing" }
        ),
    };
    let samples = |name: &str| -> Vec<f64> {
        history
            .iter()
            .filter(|l| {
                l.mode == timed_by
                    && l.wall_ms > 0.0
                    && l.strategy.as_deref() == Some(name)
                    && counts(l)
            })
            .take(20)
            .map(|l| l.wall_ms)
            .collect()
    };
    // The device class's first choice is timed first; the other strategies only at the
    // exploring launches. The concurrent strategies differ by less than this machine's
    // launch-to-launch noise (bench/results: fast 54%, paralfetch 47%, trace 41% of the gap,
    // each ±80 points between runs), so trying each twice up front cost a new app its first
    // launches for no better choice (docs/measurements.md, 2026-11-26).
    let first = order[0];
    let n_first = samples(first.name()).len();
    if n_first < MIN_SAMPLES {
        return (
            Some(first),
            format!(
                "trying {} ({n_first} of {MIN_SAMPLES} timed launches so far; {first_why})",
                first.name(),
            ),
        );
    }
    let mut ranked: Vec<(f64, Strategy, usize)> = order
        .iter()
        .filter_map(|&s| {
            let v = samples(s.name());
            (v.len() >= MIN_SAMPLES)
                .then(|| Spread::of(&v).map(|sp| (sp.median, s, v.len())))
                .flatten()
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
    let plain = samples(PLAIN);
    let plain_ms = (plain.len() >= MIN_SAMPLES)
        .then(|| Spread::of(&plain).map(|s| s.median))
        .flatten();
    let choice: Choice = match plain_ms {
        Some(p) if p * (1.0 + SWITCH_MARGIN) <= best_ms => None,
        _ => Some(best),
    };
    // The pace is counted in the history itself: the launches of this mode since the last
    // one that was not the choice. A count of launches modulo `EXPLORE_EVERY` saturated with
    // the history's window (the last 200): an app past 200 launches then never explored
    // again, or, with `record`'s and traced launches leaving the window one by one, explored
    // at every launch for as long as the count stood at a 9.
    if explore && streak(history, timed_by, choice) >= EXPLORE_EVERY - 1 {
        // Candidates other than the choice: strategies, and a plain launch, timed or not: a
        // launcher with no plain launches of its own (the daemon's start after the exec; a
        // plan `run` uses that the daemon learned) would otherwise never find out that
        // prefetching an app does harm.
        let mut others: Vec<Choice> = order.iter().map(|&s| Some(s)).collect();
        others.push(None);
        others.retain(|c| *c != choice);
        let median_of = |c: Choice| match c {
            Some(s) => ranked.iter().find(|r| r.1 == s).map(|r| r.0),
            None => plain_ms,
        };
        let chosen_ms = median_of(choice).unwrap_or(best_ms);
        let untried = |c: Choice| samples(name_of(c)).len() < MIN_SAMPLES;
        // How many launches ago its latest sample was: the candidate whose latest sample is
        // oldest goes first, one without its timed launches before it (a warm launch is a
        // sample, but not a timed one).
        let age = |c: Choice| {
            history
                .iter()
                .position(|l| l.strategy.as_deref() == Some(name_of(c)))
                .unwrap_or(usize::MAX)
        };
        // A clearly slower one is worth a look once its latest sample is this old.
        let stale = |c: Choice| age(c) >= EXPLORE_EVERY * SLOW_RETRY - 1;
        // One timed launch that much slower than the choice is evidence enough: its second
        // waits until it is stale too. The daemon's python-imports re-timed a plain launch
        // (2843 ms against 1700 for its strategy) at its next exploring launch, a cold start
        // in one of the bench's five rounds (bench/results, 2026-11-29).
        let one_slow = |c: Choice| {
            let v = samples(name_of(c));
            v.len() == 1 && v[0] > chosen_ms * PLAIN_RETIME
        };
        let contender = |c: Choice| {
            stale(c)
                || (untried(c) && !one_slow(c))
                // A plain launch chosen: the best strategy is always worth another look.
                || (choice.is_none() && c == Some(best))
                || (c.is_none()
                    && plain.len() < PLAIN_SAMPLES
                    && plain_ms.is_some_and(|p| p <= chosen_ms * PLAIN_RETIME))
                || median_of(c).is_some_and(|m| m <= chosen_ms * CONTENDER)
        };
        // Reversed: among candidates never timed, the device order's earlier one.
        if let Some(&c) = others
            .iter()
            .rev()
            .filter(|&&c| contender(c))
            .max_by_key(|&&c| (untried(c), age(c)))
        {
            let n = samples(name_of(c)).len();
            let what = if untried(c) {
                format!(
                    "trying {} ({n} of {MIN_SAMPLES} timed launches so far)",
                    name_of(c)
                )
            } else {
                format!(
                    "re-trying {} (last timed {} launches ago)",
                    name_of(c),
                    age(c)
                )
            };
            return (
                c,
                format!("{what}; best is {} at {:.0} ms", name_of(choice), chosen_ms),
            );
        }
    }
    if choice.is_none() {
        return (
            None,
            format!(
                "plain launch: {:.0} ms over {} launches without prefetching, against {:.0} ms \
                 for {}, the best strategy (prefetching does not pay for this app)",
                plain_ms.unwrap_or(0.0),
                plain.len(),
                best_ms,
                best.name()
            ),
        );
    }
    if best != fastest.1 {
        return (
            Some(best),
            format!(
                "{}: {first_why}, {:.0} ms over {} launches; {} at {:.0} ms is not {:.0}% faster",
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
    let plain_note = plain_ms
        .map(|p| format!("; a plain launch {p:.0} ms"))
        .unwrap_or_default();
    (
        Some(best),
        format!(
            "{}: fastest median, {:.0} ms over {} launches{}{}",
            best.name(),
            best_ms,
            n,
            next,
            plain_note
        ),
    )
}

/// The latest launches of `mode` (`run`'s untraced ones, or the daemon's) that went to
/// `choice`, up to the first that did not: once `EXPLORE_EVERY - 1` are behind, the next
/// launch explores.
fn streak(history: &[LaunchRecord], mode: &str, choice: Choice) -> usize {
    history
        .iter()
        .filter(|l| l.mode == mode)
        .take_while(|l| l.strategy.as_deref() == Some(name_of(choice)))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(s: Strategy, ms: f64) -> LaunchRecord {
        rec_named(s.name(), ms)
    }

    fn rec_named(name: &str, ms: f64) -> LaunchRecord {
        LaunchRecord {
            mode: crate::store::mode::RUN.into(),
            wall_ms: ms,
            strategy: Some(name.into()),
            ..LaunchRecord::default()
        }
    }

    /// A launch the daemon timed.
    fn daemon_named(name: &str, ms: f64) -> LaunchRecord {
        LaunchRecord {
            mode: DAEMON.into(),
            ..rec_named(name, ms)
        }
    }

    /// Two timed launches of each strategy, the second `jitter` ms slower.
    fn each_twice(times: &[(Strategy, f64)], jitter: f64) -> Vec<LaunchRecord> {
        times
            .iter()
            .flat_map(|&(s, ms)| [rec(s, ms), rec(s, ms + jitter)])
            .collect()
    }

    /// Two timed plain launches (`record`'s cold ones, say), far slower than the strategies.
    fn baseline(ms: f64) -> Vec<LaunchRecord> {
        vec![rec_named(PLAIN, ms), rec_named(PLAIN, ms)]
    }

    #[test]
    fn explores_in_device_order_first() {
        let (s, why) = choose(&[], true, None);
        assert_eq!(s, Some(Strategy::Paralfetch));
        assert!(why.contains("trying"), "{why}");
        assert_eq!(choose(&[], false, None).0, Some(Strategy::Hybrid));
        // Timed twice: the first choice is kept; the others are tried only at the exploring
        // launches (the one timed longest ago, device order first, a never-timed plain launch
        // after the strategies), never at the launches between.
        let mut h = vec![
            rec(Strategy::Paralfetch, 100.0),
            rec(Strategy::Paralfetch, 110.0),
        ];
        let mut tried = Vec::new();
        while h.len() < 6 * EXPLORE_EVERY {
            let (c, why) = choose(&h, true, None);
            if h.len() % EXPLORE_EVERY != EXPLORE_EVERY - 1 {
                assert_eq!(
                    c,
                    Some(Strategy::Paralfetch),
                    "launch {}: {why}",
                    h.len() + 1
                );
            } else {
                assert!(why.contains("trying"), "{why}");
                tried.push(name_of(c));
            }
            h.insert(
                0,
                rec_named(name_of(c), if c.is_some() { 100.0 } else { 300.0 }),
            );
        }
        // The plain launch timed once, three times slower: not timed again before its
        // sample is 50 launches old.
        assert_eq!(tried, ["trace", "fast", "none", "trace", "fast", "trace"]);
    }

    fn ranking(times: &[(Strategy, f64)]) -> Ranking {
        let mut strategies: Vec<(String, f64)> =
            times.iter().map(|(s, ms)| (s.name().into(), *ms)).collect();
        strategies.sort_by(|a, b| a.1.total_cmp(&b.1));
        Ranking {
            at_unix: 0,
            launches: 1,
            from_warm: false,
            cold_ms: 2000.0,
            strategies,
        }
    }

    #[test]
    fn the_emulated_best_two_are_the_only_strategies_timed() {
        // Emulation ranks trace clearly first and sorted second; a queueing device's order
        // would start with paralfetch and never time sorted.
        let r = ranking(&[
            (Strategy::Trace, 800.0),
            (Strategy::Sorted, 900.0),
            (Strategy::Paralfetch, 1000.0),
            (Strategy::Fast, 1000.0),
            (Strategy::Hybrid, 1100.0),
        ]);
        assert_eq!(
            contenders(true, Some(&r)),
            [Strategy::Trace, Strategy::Sorted]
        );
        let (first, why) = choose(&[], true, Some(&r));
        assert_eq!(first, Some(Strategy::Trace));
        assert!(why.contains("emulator"), "{why}");
        let mut h = Vec::new();
        let mut timed = std::collections::BTreeSet::new();
        for _ in 0..6 * EXPLORE_EVERY * SLOW_RETRY {
            let (c, _) = choose(&h, true, Some(&r));
            let Some(s) = c else {
                // The plain launches are timed too (slow ones here).
                h.insert(0, rec_named(PLAIN, 300.0));
                continue;
            };
            timed.insert(s.name());
            h.insert(0, rec(s, if s == Strategy::Trace { 100.0 } else { 130.0 }));
        }
        assert_eq!(
            timed.into_iter().collect::<Vec<_>>(),
            ["sorted", "trace"],
            "only the emulated best two are timed on real launches"
        );
        // Real launches overturn the emulator's order: the second becomes the choice.
        let h: Vec<LaunchRecord> =
            each_twice(&[(Strategy::Trace, 130.0), (Strategy::Sorted, 100.0)], 1.0);
        assert_eq!(choose(&h, true, Some(&r)).0, Some(Strategy::Sorted));
    }

    #[test]
    fn emulated_ties_go_to_the_device_order() {
        // The concurrent strategies emulate within 1% of each other (docs/measurements.md,
        // 2026-11-25, sixth entry): the device class's order decides among them.
        let r = ranking(&[
            (Strategy::Fast, 1000.0),
            (Strategy::Hybrid, 1002.0),
            (Strategy::Trace, 1005.0),
            (Strategy::Paralfetch, 1008.0),
            (Strategy::Sorted, 1300.0),
        ]);
        assert_eq!(
            contenders(true, Some(&r)),
            [Strategy::Paralfetch, Strategy::Trace]
        );
        assert_eq!(
            contenders(false, Some(&r)),
            [Strategy::Hybrid, Strategy::Paralfetch]
        );
        // An empty or unparsable ranking is no ranking.
        let none = Ranking {
            strategies: vec![("warp".into(), 1.0)],
            ..r
        };
        assert_eq!(contenders(true, Some(&none)), preference(true));
    }

    #[test]
    fn a_queueing_device_never_tries_the_holding_strategies() {
        let mut h = Vec::new();
        for _ in 0..60 {
            let (c, _) = choose(&h, true, None);
            let Some(s) = c else {
                h.insert(0, rec_named(PLAIN, 300.0));
                continue;
            };
            assert!(
                !matches!(s, Strategy::Sorted | Strategy::Hybrid),
                "{} tried after {} launches",
                s.name(),
                h.len()
            );
            h.insert(0, rec(s, 100.0));
        }
    }

    #[test]
    fn then_keeps_the_fastest_and_sometimes_retries() {
        let mut h = baseline(300.0);
        h.extend(each_twice(
            &[
                (Strategy::Paralfetch, 100.0),
                (Strategy::Trace, 90.0),
                (Strategy::Fast, 95.0),
            ],
            2.0,
        ));
        let (s, why) = choose(&h, true, None);
        assert_eq!(s, Some(Strategy::Trace), "{why}");
        assert!(why.contains("fastest"), "{why}");
        // With 9 launches of the choice behind, the 10th explores: the contender (within 10% of
        // the best) sampled longest ago.
        for _ in 0..EXPLORE_EVERY - 1 {
            h.insert(0, rec(Strategy::Trace, 91.0));
        }
        let (s, why) = choose(&h, true, None);
        assert_eq!(s, Some(Strategy::Fast), "{why}");
        assert!(why.contains("re-trying"), "{why}");
        // Between those, no re-try at all when nothing else is close; one sampled 49 launches
        // ago or longer is re-tried at the next exploring launch, slow or not.
        let mut lone = baseline(300.0);
        lone.extend(each_twice(
            &[
                (Strategy::Paralfetch, 150.0),
                (Strategy::Fast, 160.0),
                (Strategy::Trace, 50.0),
            ],
            0.0,
        ));
        for _ in 0..11 {
            lone.insert(0, rec(Strategy::Trace, 50.0));
        }
        assert_eq!(lone.len(), 19);
        assert_eq!(choose(&lone, true, None).0, Some(Strategy::Trace));
        for _ in 0..30 {
            lone.insert(0, rec(Strategy::Trace, 50.0));
        }
        // Paralfetch's, fast's latest samples 43 and 45 launches ago: not yet.
        assert_eq!(choose(&lone, true, None).0, Some(Strategy::Trace));
        for _ in 0..4 {
            lone.insert(0, rec(Strategy::Trace, 50.0));
        }
        // Fast's latest sample is 49 launches old, paralfetch's 47.
        let (s, why) = choose(&lone, true, None);
        assert_eq!(s, Some(Strategy::Fast), "{why}");
        assert!(why.contains("re-trying"), "{why}");
    }

    /// The history `auto` reads is an app's last 200 launches. Explorations were paced by
    /// the count of `run`'s launches in it modulo 10, which stops at 200 (never again) or,
    /// with `record`'s launches among them, stood at 199 for as long as one stayed in the
    /// window (every launch an exploring one). Now: one in ten, however long the history.
    #[test]
    fn the_pace_of_exploring_holds_past_the_history_window() {
        let learn = LaunchRecord {
            mode: crate::store::mode::RECORD.into(),
            wall_ms: 300.0,
            strategy: None,
            ..LaunchRecord::default()
        };
        let mut h: Vec<LaunchRecord> = Vec::new();
        let mut explored = Vec::new();
        for launch in 0..600 {
            // Re-learned now and then: `record`'s launches go into the history too.
            if launch % 97 == 0 {
                h.insert(0, learn.clone());
            }
            h.truncate(200);
            let (c, why) = choose(&h, true, None);
            if why.contains("trying") && launch >= 10 {
                explored.push(launch);
            }
            let ms = match c {
                Some(Strategy::Paralfetch) => 100.0,
                Some(_) => 104.0,
                None => 300.0,
            };
            h.insert(0, rec_named(name_of(c), ms));
        }
        let late: Vec<usize> = explored.iter().copied().filter(|&l| l >= 200).collect();
        assert!(
            (36..=44).contains(&late.len()),
            "{} exploring launches among the 400 past the window: {late:?}",
            late.len()
        );
        assert!(
            late.windows(2).all(|w| w[1] - w[0] >= EXPLORE_EVERY),
            "two exploring launches closer than {EXPLORE_EVERY}: {late:?}"
        );
    }

    /// A contender timed once and far slower than the choice (a plain launch's cold start)
    /// is not timed again at the next exploring launch, only once its sample is stale.
    #[test]
    fn one_launch_far_slower_is_not_re_timed_at_once() {
        let daemon = daemon_named;
        let mut h: Vec<LaunchRecord> = (0..9).map(|_| daemon("paralfetch", 1700.0)).collect();
        h.extend([
            daemon(PLAIN, 2843.0),
            daemon("trace", 1750.0),
            daemon("fast", 1760.0),
            daemon("paralfetch", 1700.0),
            daemon("trace", 1740.0),
            daemon("fast", 1770.0),
        ]);
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert!(c.is_some() && why.contains("re-trying"), "{why}");
        // Within the margin, one sample is not enough: timed again.
        h[9] = daemon(PLAIN, 2000.0);
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert_eq!(c, None, "{why}");
        assert!(why.contains("trying none (1 of 2"), "{why}");
        // Stale: timed again however slow.
        h[9] = daemon(PLAIN, 2843.0);
        let mut old = h.split_off(9);
        for _ in 0..45 {
            h.push(daemon("paralfetch", 1700.0));
        }
        h.append(&mut old);
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert_eq!(c, None, "{why}");
    }

    #[test]
    fn ignores_untimed_and_other_modes() {
        let mut r = rec(Strategy::Paralfetch, 0.0);
        r.wall_ms = 0.0;
        let learn = LaunchRecord {
            mode: crate::store::mode::RECORD.into(),
            wall_ms: 50.0,
            strategy: Some("paralfetch".into()),
            ..LaunchRecord::default()
        };
        assert_eq!(
            choose(&[r.clone(), r, learn], true, None).0,
            Some(Strategy::Paralfetch)
        );
    }

    #[test]
    fn keeps_the_device_choice_unless_another_is_clearly_faster() {
        let mut h = each_twice(
            &[
                (Strategy::Paralfetch, 100.0),
                (Strategy::Trace, 97.0),
                (Strategy::Fast, 99.0),
            ],
            0.0,
        );
        let (s, why) = choose(&h, true, None);
        assert_eq!(s, Some(Strategy::Paralfetch), "{why}");
        assert!(why.contains("first choice"), "{why}");
        // 6% faster is clearly faster.
        for r in h
            .iter_mut()
            .filter(|r| r.strategy.as_deref() == Some("trace"))
        {
            r.wall_ms = 94.0;
        }
        assert_eq!(choose(&h, true, None).0, Some(Strategy::Trace));
    }

    /// Do no harm: when plain launches are clearly faster than the best strategy, launch
    /// plainly; not when they are about as fast; and come back to the best strategy now and
    /// then.
    #[test]
    fn a_plain_launch_when_no_strategy_beats_it() {
        let strategies = each_twice(
            &[
                (Strategy::Paralfetch, 200.0),
                (Strategy::Trace, 205.0),
                (Strategy::Fast, 210.0),
            ],
            0.0,
        );
        let with_plain = |ms: f64| {
            let mut h = vec![rec_named(PLAIN, ms), rec_named(PLAIN, ms)];
            h.extend(strategies.iter().cloned());
            h
        };
        let (c, why) = choose(&with_plain(180.0), true, None);
        assert_eq!(c, None, "{why}");
        assert!(why.contains("plain launch"), "{why}");
        assert_eq!(name_of(c), "none");
        // Within the margin: keep prefetching.
        let (c, why) = choose(&with_plain(195.0), true, None);
        assert_eq!(c, Some(Strategy::Paralfetch), "{why}");
        assert!(why.contains("a plain launch 195 ms"), "{why}");
        // Plain chosen: the 10th launch re-tries the best strategy.
        let mut h = with_plain(180.0);
        while streak(&h, RUN, None) < EXPLORE_EVERY - 1 {
            h.insert(0, rec_named(PLAIN, 180.0));
        }
        let (c, why) = choose(&h, true, None);
        assert_eq!(c, Some(Strategy::Paralfetch), "{why}");
        assert!(why.contains("re-trying"), "{why}");
        // One plain sample is not enough to stop prefetching.
        let mut h = strategies.clone();
        h.insert(0, rec_named(PLAIN, 100.0));
        assert!(choose(&h, true, None).0.is_some());
    }

    /// Paralfetch, trace and fast timed twice (paralfetch once more, the newest), then
    /// record's two plain launches, the oldest: the next launch is an exploring one.
    fn thin_plain(ms: [f64; 3], plain: [f64; 2]) -> Vec<LaunchRecord> {
        let mut h = each_twice(
            &[
                (Strategy::Paralfetch, ms[0]),
                (Strategy::Trace, ms[1]),
                (Strategy::Fast, ms[2]),
            ],
            0.0,
        );
        // Paralfetch chosen for the launches since: the next one explores.
        for _ in 2..EXPLORE_EVERY - 1 {
            h.insert(0, rec(Strategy::Paralfetch, ms[0]));
        }
        h.extend(plain.map(|ms| rec_named(PLAIN, ms)));
        h
    }

    #[test]
    fn a_thin_plain_baseline_is_re_timed_however_slow_it_looked() {
        // The plain launches 14% slower than the best strategy.
        let h = thin_plain([152.0, 150.0, 155.0], [173.0, 173.0]);
        let (c, why) = choose(&h, true, None);
        assert_eq!(c, None, "{why}");
        assert!(why.contains("re-trying none"), "{why}");
        // With enough plain launches, that slow it is no contender any more.
        let mut h2 = h.clone();
        h2.extend([173.0, 174.0, 175.0, 173.0, 176.0].map(|ms| rec_named(PLAIN, ms)));
        let (c, why) = choose(&h2, true, None);
        assert!(c.is_some(), "{why}");
        assert!(why.contains("re-trying"), "an exploring launch: {why}");
    }

    #[test]
    fn a_thin_plain_baseline_far_slower_than_the_strategies_is_not_re_timed() {
        // The plain launches a cold start's 2500 ms: 56% slower than the best.
        let h = thin_plain([1600.0, 1650.0, 1700.0], [2500.0, 2480.0]);
        assert_eq!(
            streak(&h, RUN, Some(Strategy::Paralfetch)),
            EXPLORE_EVERY - 1,
            "an exploring launch"
        );
        let (c, why) = choose(&h, true, None);
        assert!(c.is_some(), "{why}");
        assert!(!why.contains("none"), "{why}");
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
        let (s, why) = choose(&h, true, None);
        assert_eq!(s, Some(Strategy::Paralfetch), "{why}");
    }

    /// The daemon compares strategies by the launches it timed, `run` by its own: `run`'s
    /// head start (its prefetch begins before the exec) decides neither's choice.
    #[test]
    fn the_daemon_and_run_each_choose_by_their_own_launches() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = Store::open(&dir.path().join("ws.db")).unwrap();
        let app = st
            .upsert_app(&crate::app::AppKey::named(
                "a",
                std::path::Path::new("/usr/bin/x"),
            ))
            .unwrap();
        let daemon = |s: Strategy, ms: f64| daemon_named(s.name(), ms);
        // run: trace clearly fastest. The daemon: fast clearly fastest, paralfetch (the
        // device class's first) timed too.
        for ms in [100.0, 104.0] {
            st.add_launch(app, &rec(Strategy::Paralfetch, ms + 40.0))
                .unwrap();
            st.add_launch(app, &rec(Strategy::Trace, ms)).unwrap();
            st.add_launch(app, &daemon(Strategy::Paralfetch, ms + 60.0))
                .unwrap();
            st.add_launch(app, &daemon(Strategy::Fast, ms + 20.0))
                .unwrap();
        }
        let (by_run, why) = choose_stored(&st, app, true).unwrap();
        assert_eq!(by_run, Some(Strategy::Trace), "{why}");
        let (by_daemon, why) = choose_for_daemon(&st, app, true).unwrap();
        assert_eq!(by_daemon, Some(Strategy::Fast), "{why}");
        assert!(why.contains("2 launches"), "{why}");
        // Untimed daemon launches (an app still running at T_timeout, a checked launch) count
        // for nothing but the exploring launches.
        let mut h: Vec<LaunchRecord> = (0..4).map(|_| daemon(Strategy::Trace, 0.0)).collect();
        h.push(daemon(Strategy::Paralfetch, 140.0));
        h.push(daemon(Strategy::Paralfetch, 150.0));
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert_eq!(c, Some(Strategy::Paralfetch), "{why}");
        assert!(why.contains("over 2 launches"), "{why}");
    }

    /// The daemon has no plain launches from `record`: it times some of its own at the
    /// exploring launches, and stops prefetching an app whose plain launches are clearly
    /// faster; a warm plain launch tells nothing and is tried again.
    #[test]
    fn the_daemon_times_plain_launches_and_stops_prefetching_when_they_win() {
        let daemon = daemon_named;
        // Explored so far: trace and fast, twice each (strategies go before a plain launch
        // never timed); paralfetch chosen for the 9 launches since.
        let mut h: Vec<LaunchRecord> = (0..9).map(|_| daemon("paralfetch", 200.0)).collect();
        h.extend([
            daemon("trace", 210.0),
            daemon("fast", 220.0),
            daemon("paralfetch", 200.0),
            daemon("trace", 205.0),
            daemon("fast", 215.0),
        ]);
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert_eq!(c, None, "{why}");
        assert!(why.contains("trying none (0 of 2"), "{why}");
        // A warm plain launch does not count: plain is still untried at the next exploring one.
        let warm = LaunchRecord {
            prefetched_bytes: 1000,
            resident_bytes: Some(900),
            ..daemon(PLAIN, 150.0)
        };
        h.insert(0, warm);
        for _ in 0..9 {
            h.insert(0, daemon("paralfetch", 200.0));
        }
        assert_eq!(choose_as(&h, true, None, true, DAEMON).0, None);
        // Two cold plain launches 20% faster than every strategy: plain from now on.
        h.insert(0, daemon(PLAIN, 160.0));
        h.insert(0, daemon(PLAIN, 162.0));
        let (c, why) = choose_as(&h, true, None, true, DAEMON);
        assert_eq!(c, None, "{why}");
        assert!(why.contains("plain launch: 161 ms"), "{why}");
        // `run`'s launches are not the daemon's.
        let (c, _) = choose_as(&h, true, None, true, RUN);
        assert_eq!(c, Some(Strategy::Paralfetch));
    }

    #[test]
    fn a_launch_uses_the_choice_kept_after_the_last_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut st = Store::open(&dir.path().join("ws.db")).unwrap();
        let app = st
            .upsert_app(&crate::app::AppKey::named(
                "a",
                std::path::Path::new("/usr/bin/x"),
            ))
            .unwrap();
        for ms in [100.0, 110.0, 105.0, 120.0, 98.0] {
            st.add_launch(app, &rec(Strategy::Trace, ms)).unwrap();
            st.add_launch(app, &rec(Strategy::Fast, ms + 50.0)).unwrap();
        }
        let fresh = choose_stored(&st, app, true).unwrap();
        // Nothing kept yet: chosen from the history, with the device class asked for.
        let mut asked = false;
        let got = choose_for_launch(&st, app, false, || {
            asked = true;
            true
        })
        .unwrap();
        assert!(asked);
        assert_eq!(got, fresh);
        // Kept: the same choice, without the history or the device class.
        remember(&mut st, app, true).unwrap();
        let got = choose_for_launch(&st, app, false, || panic!("the device class was looked up"));
        assert_eq!(got.unwrap(), fresh);
        // A strategy this version does not know: chosen afresh.
        st.put_auto_choice(app, |_| {
            Ok(StoredChoice {
                strategy: Some("telepathy".into()),
                why: String::new(),
            })
        })
        .unwrap();
        assert_eq!(choose_for_launch(&st, app, false, || true).unwrap(), fresh);
        // A plain launch kept is a plain launch.
        st.put_auto_choice(app, |_| {
            Ok(StoredChoice {
                strategy: None,
                why: "plain".into(),
            })
        })
        .unwrap();
        assert_eq!(
            choose_for_launch(&st, app, false, || true).unwrap(),
            (None, "plain".to_string())
        );
        // A traced launch: the choice from the history, without exploration, whatever is
        // kept for the next untraced one.
        assert_eq!(
            choose_for_launch(&st, app, true, || true).unwrap(),
            choose_stored_settled(&st, app, true).unwrap()
        );
        assert!(
            choose_for_launch(&st, app, true, || true)
                .unwrap()
                .0
                .is_some(),
            "not the plain launch kept"
        );
    }

    /// A traced launch is never an exploring one: it is not counted towards the next
    /// exploring launch, so an exploring choice would stay for every traced launch until an
    /// untraced one came (the bench's `explain` launches re-timed plain launches).
    #[test]
    fn a_traced_launch_takes_the_choice_not_an_exploration() {
        let h = thin_plain([152.0, 150.0, 155.0], [173.0, 173.0]);
        let (c, why) = choose(&h, true, None);
        assert_eq!(c, None, "an exploring launch: {why}");
        let (c, why) = choose_settled(&h, true, None);
        assert_eq!(c, Some(Strategy::Paralfetch), "{why}");
        assert!(!why.contains("re-trying"), "{why}");
        // Where there is no exploration (the launch after one), the two agree.
        let mut h2 = h.clone();
        h2.insert(0, rec_named(PLAIN, 173.0));
        assert_eq!(choose(&h2, true, None), choose_settled(&h2, true, None));
    }
}
