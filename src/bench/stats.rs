//! Order statistics and the papers' derived measures.

use serde::Serialize;

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
    fn geometric_mean() {
        let g = geomean(&[1.0, 4.0]).unwrap();
        assert!((g - 2.0).abs() < 1e-12);
        assert_eq!(geomean(&[]), None);
        assert_eq!(geomean(&[0.0, -1.0]), None);
    }
}
