//! Summaries of measured samples. Exact order statistics over all samples: runs are small
//! enough to keep them, and a p99 of 6 samples should visibly be the max.

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Distribution {
    pub count: usize,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Distribution {
    /// `None` for no samples. NaNs are dropped.
    pub fn of(samples: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut v: Vec<f64> = samples.into_iter().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        Some(Self {
            count: v.len(),
            mean,
            min: v[0],
            p50: percentile(&v, 50.0),
            p90: percentile(&v, 90.0),
            p99: percentile(&v, 99.0),
            max: v[v.len() - 1],
        })
    }
}

/// Nearest-rank percentile of sorted samples.
/// The mean of `values`; `None` for none.
pub fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let d = Distribution::of((1..=100).map(f64::from)).unwrap();
        assert_eq!((d.p50, d.p90, d.p99, d.max, d.min), (50.0, 90.0, 99.0, 100.0, 1.0));
        assert_eq!(d.mean, 50.5);
        let small = Distribution::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((small.p50, small.p99), (2.0, 3.0));
        assert!(Distribution::of([]).is_none());
    }
}
