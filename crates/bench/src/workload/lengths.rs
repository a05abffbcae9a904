//! Synthetic token lengths: `MEAN[,STDDEV]` (normal, clamped to at least one token) or
//! `uniform:MIN-MAX`, as vLLM's `random` and SGLang's `generated-shared-prefix` datasets draw them.

use std::str::FromStr;

use rand::Rng;
use rand_distr::{Distribution, Normal};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum LengthDist {
    Normal { mean: f64, stddev: f64 },
    Uniform { min: u32, max: u32 },
}

impl LengthDist {
    pub fn fixed(n: u32) -> Self {
        Self::Normal { mean: f64::from(n), stddev: 0.0 }
    }

    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            Self::Normal { mean, stddev } if stddev > 0.0 => {
                let normal =
                    Normal::new(mean, stddev).unwrap_or_else(|_| Normal::new(mean, 0.0).expect("zero stddev is valid"));
                normal.sample(rng).round().max(1.0) as u32
            }
            Self::Normal { mean, .. } => mean.round().max(1.0) as u32,
            Self::Uniform { min, max } => rng.gen_range(min..=max),
        }
    }
}

impl FromStr for LengthDist {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected MEAN[,STDDEV] or uniform:MIN-MAX, got {s:?}");
        if let Some(range) = s.strip_prefix("uniform:") {
            let (lo, hi) = range.split_once('-').ok_or_else(bad)?;
            let (min, max): (u32, u32) = (lo.trim().parse().map_err(|_| bad())?, hi.trim().parse().map_err(|_| bad())?);
            if min == 0 || min > max {
                return Err(format!("uniform:MIN-MAX needs 1 <= MIN <= MAX, got {s:?}"));
            }
            return Ok(Self::Uniform { min, max });
        }
        let mut parts = s.split(',');
        let mean: f64 = parts.next().ok_or_else(bad)?.trim().parse().map_err(|_| bad())?;
        let stddev: f64 = parts.next().map_or(Ok(0.0), |p| p.trim().parse().map_err(|_| bad()))?;
        if parts.next().is_some() || !(mean >= 1.0 && mean.is_finite()) || !(stddev >= 0.0 && stddev.is_finite()) {
            return Err(format!("{}: the mean must be at least 1 and the stddev not negative", bad()));
        }
        Ok(Self::Normal { mean, stddev })
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn parses_and_samples_each_form() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert_eq!("128".parse::<LengthDist>().unwrap().sample(&mut rng), 128);
        let n: LengthDist = "100,20".parse().unwrap();
        let draws: Vec<u32> = (0..4000).map(|_| n.sample(&mut rng)).collect();
        let mean = draws.iter().map(|&d| f64::from(d)).sum::<f64>() / draws.len() as f64;
        assert!((mean - 100.0).abs() < 2.0, "{mean}");
        assert!(draws.iter().any(|&d| d < 80) && draws.iter().any(|&d| d > 120));
        let wide: LengthDist = "2,50".parse().unwrap();
        assert!((0..500).all(|_| wide.sample(&mut rng) >= 1), "clamped to one token");
        let u: LengthDist = "uniform:5-9".parse().unwrap();
        let draws: Vec<u32> = (0..500).map(|_| u.sample(&mut rng)).collect();
        assert!(draws.iter().all(|d| (5..=9).contains(d)) && draws.contains(&5) && draws.contains(&9));
        for bad in ["", "x", "0", "10,-1", "uniform:9-5", "uniform:0-3", "1,2,3"] {
            assert!(bad.parse::<LengthDist>().is_err(), "{bad}");
        }
    }
}
