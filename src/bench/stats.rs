//! Order statistics and the papers' derived measures.

use serde::{Deserialize, Serialize};

/// Median, min and max of a set of timings (ms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Spread {
            n,
            median,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// `(cold - t) / (cold - warm)`: 1.0 is a warm start, 0.0 no better than cold. None when
/// cold and warm do not differ (nothing to close).
pub fn gap_closed(cold: f64, warm: f64, t: f64) -> Option<f64> {
    let gap = cold - warm;
    (gap > 0.0).then(|| (cold - t) / gap)
}

/// A percentile-bootstrap interval for the gap closed of paired rounds `(cold, warm, t)`:
/// each of `resamples` draws rounds with replacement (a round's three launches stay together)
/// and computes the gap closed from the draw's medians, as the point estimate is computed.
/// Returns the central `level` share of those values, or None with fewer than two rounds or
/// when most draws show no cold-warm gap. The seed is fixed by the caller, so the same
/// timings always give the same interval.
pub fn gap_closed_interval(
    rounds: &[(f64, f64, f64)],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<(f64, f64)> {
    let n = rounds.len();
    if n < 2 || resamples == 0 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut gaps = Vec::with_capacity(resamples);
    let (mut c, mut w, mut t) = (vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    for _ in 0..resamples {
        for i in 0..n {
            let r = rounds[rng.usize(..n)];
            (c[i], w[i], t[i]) = r;
        }
        let med = |v: &[f64]| Spread::of(v).map(|s| s.median);
        if let (Some(mc), Some(mw), Some(mt)) = (med(&c), med(&w), med(&t)) {
            if let Some(g) = gap_closed(mc, mw, mt) {
                gaps.push(g);
            }
        }
    }
    if gaps.len() * 2 < resamples {
        return None;
    }
    gaps.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    Some((percentile(&gaps, tail)?, percentile(&gaps, 1.0 - tail)?))
}

/// The value at share `q` of sorted `v` (nearest rank), None when `v` is empty.
fn percentile(v: &[f64], q: f64) -> Option<f64> {
    let last = v.len().checked_sub(1)?;
    v.get(((q * last as f64).round() as usize).min(last))
        .copied()
}

/// Paired launches of two scenarios, `a` against `b` (see `paired_ratio`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairedRatio {
    /// Geometric mean of the pairs' `a / b`.
    pub ratio: f64,
    /// Its percentile-bootstrap interval.
    pub lo: f64,
    pub hi: f64,
    pub pairs: usize,
    /// Pairs in which `a` took longer.
    pub slower: usize,
}

/// `a / b` of paired launches (both in one round: the VM's speed drifts between rounds by
/// more than most differences between scenarios), as the geometric mean over every group's
/// (an app's) pairs, with a percentile-bootstrap interval at `level` that redraws each
/// group's pairs from its own (so an app's share of the pairs stays, and the apps' levels
/// are not taken for noise). Non-positive times are left out. None without a pair; the
/// seed is fixed by the caller, so the same timings give the same interval.
pub fn paired_ratio(
    groups: &[Vec<(f64, f64)>],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<PairedRatio> {
    let logs: Vec<Vec<f64>> = groups
        .iter()
        .map(|g| {
            g.iter()
                .filter(|(a, b)| *a > 0.0 && *b > 0.0 && a.is_finite() && b.is_finite())
                .map(|(a, b)| (a / b).ln())
                .collect::<Vec<f64>>()
        })
        .filter(|g| !g.is_empty())
        .collect();
    let pairs: usize = logs.iter().map(Vec::len).sum();
    if pairs == 0 || !(0.0..1.0).contains(&level) {
        return None;
    }
    let mean = |sum: f64| (sum / pairs as f64).exp();
    let ratio = mean(logs.iter().flatten().sum());
    let slower = logs.iter().flatten().filter(|l| **l > 0.0).count();
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut draws: Vec<f64> = (0..resamples)
        .map(|_| {
            mean(
                logs.iter()
                    .map(|g| (0..g.len()).map(|_| g[rng.usize(..g.len())]).sum::<f64>())
                    .sum(),
            )
        })
        .collect();
    draws.sort_by(f64::total_cmp);
    let tail = (1.0 - level) / 2.0;
    Some(PairedRatio {
        ratio,
        lo: percentile(&draws, tail).unwrap_or(ratio),
        hi: percentile(&draws, 1.0 - tail).unwrap_or(ratio),
        pairs,
        slower,
    })
}

/// Geometric mean of positive values.
pub fn geomean(values: &[f64]) -> Option<f64> {
    let pos: Vec<f64> = values.iter().copied().filter(|v| *v > 0.0).collect();
    if pos.is_empty() {
        return None;
    }
    Some((pos.iter().map(|v| v.ln()).sum::<f64>() / pos.len() as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread() {
        let s = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (3, 2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).unwrap().median, 2.5);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[f64::NAN]), None);
    }

    #[test]
    fn gap() {
        assert_eq!(gap_closed(100.0, 50.0, 60.0), Some(0.8));
        assert_eq!(gap_closed(100.0, 50.0, 100.0), Some(0.0));
        assert_eq!(gap_closed(100.0, 50.0, 40.0), Some(1.2));
        assert_eq!(gap_closed(50.0, 50.0, 50.0), None);
    }

    #[test]
    fn gap_interval_is_tight_for_steady_rounds_and_wide_for_noisy_ones() {
        // Every round: warmstart exactly halfway between cold and warm.
        let steady: Vec<_> = (0..5)
            .map(|i| (900.0 + i as f64, 500.0 + i as f64, 700.0 + i as f64))
            .collect();
        assert_eq!(gap_closed_interval(&steady, 0.9, 500, 1), Some((0.5, 0.5)));
        let noisy = [
            (700.0, 500.0, 560.0),
            (860.0, 610.0, 800.0),
            (720.0, 470.0, 480.0),
            (900.0, 700.0, 620.0),
            (650.0, 560.0, 600.0),
        ];
        let (lo, hi) = gap_closed_interval(&noisy, 0.9, 2000, 7).unwrap();
        let point = gap_closed(
            Spread::of(&noisy.map(|r| r.0)).unwrap().median,
            Spread::of(&noisy.map(|r| r.1)).unwrap().median,
            Spread::of(&noisy.map(|r| r.2)).unwrap().median,
        )
        .unwrap();
        assert!(lo < point && point < hi, "{lo} < {point} < {hi}");
        assert!(
            hi - lo > 0.3,
            "five noisy rounds cannot pin it down: {lo}..{hi}"
        );
        // Deterministic for a given seed.
        assert_eq!(gap_closed_interval(&noisy, 0.9, 2000, 7), Some((lo, hi)));
    }

    #[test]
    fn gap_interval_needs_rounds_and_a_gap() {
        assert_eq!(
            gap_closed_interval(&[(900.0, 500.0, 700.0)], 0.9, 100, 1),
            None
        );
        let no_gap = [(500.0, 500.0, 500.0); 4];
        assert_eq!(gap_closed_interval(&no_gap, 0.9, 100, 1), None);
        assert_eq!(gap_closed_interval(&[], 0.9, 100, 1), None);
    }

    #[test]
    fn paired_ratio_is_the_mean_of_each_rounds_ratio() {
        // Every pair 10% slower, whatever the round's speed: exactly 1.1, however redrawn.
        let steady = vec![
            vec![(110.0, 100.0), (220.0, 200.0), (165.0, 150.0)],
            vec![(1100.0, 1000.0), (550.0, 500.0)],
        ];
        let p = paired_ratio(&steady, 0.9, 500, 3).unwrap();
        assert!((p.ratio - 1.1).abs() < 1e-9 && (p.lo - 1.1).abs() < 1e-9);
        assert!((p.hi - 1.1).abs() < 1e-9);
        assert_eq!((p.pairs, p.slower), (5, 5));
        // Unpaired medians would see the rounds' drift; pairs see 0.9 and 1.1 alike.
        let mixed = vec![vec![
            (90.0, 100.0),
            (330.0, 300.0),
            (180.0, 200.0),
            (110.0, 100.0),
        ]];
        let p = paired_ratio(&mixed, 0.9, 2000, 5).unwrap();
        assert!((p.ratio - (0.9f64 * 1.1 * 0.9 * 1.1).powf(0.25)).abs() < 1e-9);
        assert!(p.lo < p.ratio && p.ratio < p.hi, "{p:?}");
        assert_eq!(p.slower, 2);
        assert_eq!(paired_ratio(&mixed, 0.9, 2000, 5), Some(p));
    }

    #[test]
    fn paired_ratio_needs_a_pair() {
        assert_eq!(paired_ratio(&[], 0.9, 100, 1), None);
        assert_eq!(paired_ratio(&[vec![], vec![(0.0, 5.0)]], 0.9, 100, 1), None);
        assert!(paired_ratio(&[vec![(5.0, 4.0)]], 0.9, 0, 1).is_some());
    }

    #[test]
    fn geometric_mean() {
        let g = geomean(&[1.0, 4.0]).unwrap();
        assert!((g - 2.0).abs() < 1e-12);
        assert_eq!(geomean(&[]), None);
        assert_eq!(geomean(&[0.0, -1.0]), None);
    }
}
