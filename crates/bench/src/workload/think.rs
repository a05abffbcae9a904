//! Think time between a reply and a session's next turn, in milliseconds: `MS` (fixed),
//! `exp:MEAN` (exponential) or `uniform:MIN-MAX`.
//!
//! A fixed think time sends the next turns of sessions whose replies ended together at the
//! same instant (three turns in one millisecond were seen in the session-rate runs), a
//! burst real users do not make. An exponential pause, the memoryless think time of open
//! user models, spreads them as independent users would.

use std::str::FromStr;

use rand::Rng;
use rand_distr::{Distribution, Exp};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ThinkTime {
    Fixed { ms: f64 },
    Exp { mean_ms: f64 },
    Uniform { min_ms: f64, max_ms: f64 },
}

impl ThinkTime {
    pub fn sample(&self, rng: &mut impl Rng) -> f64 {
        match *self {
            Self::Fixed { ms } => ms,
            // A positive mean makes a valid rate; a zero mean is no pause at all.
            Self::Exp { mean_ms } => Exp::new(1.0 / mean_ms).map_or(0.0, |e| e.sample(rng)),
            Self::Uniform { min_ms, max_ms } => rng.gen_range(min_ms..=max_ms),
        }
    }
}

impl FromStr for ThinkTime {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected MS, exp:MEAN or uniform:MIN-MAX (milliseconds, not negative), got {s:?}");
        let ms = |t: &str| t.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(bad);
        if let Some(mean) = s.strip_prefix("exp:") {
            let mean_ms = ms(mean)?;
            return if mean_ms > 0.0 {
                Ok(Self::Exp { mean_ms })
            } else {
                Err(format!("exp:MEAN needs a mean above 0 ms, got {s:?}"))
            };
        }
        if let Some(range) = s.strip_prefix("uniform:") {
            let (lo, hi) = range.split_once('-').ok_or_else(bad)?;
            let (min_ms, max_ms) = (ms(lo)?, ms(hi)?);
            return if min_ms <= max_ms {
                Ok(Self::Uniform { min_ms, max_ms })
            } else {
                Err(format!("uniform:MIN-MAX needs MIN <= MAX, got {s:?}"))
            };
        }
        Ok(Self::Fixed { ms: ms(s)? })
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn draws(t: &str, n: usize) -> Vec<f64> {
        let think: ThinkTime = t.parse().unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        (0..n).map(|_| think.sample(&mut rng)).collect()
    }

    #[test]
    fn a_plain_number_is_a_fixed_pause() {
        assert_eq!(draws("2000", 3), [2000.0; 3]);
        assert_eq!(draws("0", 1), [0.0]);
    }

    #[test]
    fn exponential_pauses_spread_around_their_mean() {
        let d = draws("exp:2000", 4000);
        let mean = d.iter().sum::<f64>() / d.len() as f64;
        assert!((mean - 2000.0).abs() < 120.0, "{mean}");
        // Memoryless: about e^-1 of the pauses outlast the mean, and some are very short.
        let longer = d.iter().filter(|&&x| x > 2000.0).count() as f64 / d.len() as f64;
        assert!((longer - 0.368).abs() < 0.03, "{longer}");
        assert!(d.iter().any(|&x| x < 100.0) && d.iter().all(|&x| x >= 0.0));
    }

    #[test]
    fn uniform_pauses_stay_in_their_range() {
        let d = draws("uniform:500-1500", 1000);
        assert!(d.iter().all(|x| (500.0..=1500.0).contains(x)));
        assert!(d.iter().any(|&x| x < 600.0) && d.iter().any(|&x| x > 1400.0));
    }

    #[test]
    fn bad_think_times_are_refused() {
        for bad in ["", "x", "-5", "exp:0", "exp:-1", "exp:", "uniform:9-5", "uniform:3", "NaN", "inf"] {
            assert!(bad.parse::<ThinkTime>().is_err(), "{bad}");
        }
    }
}
