//! When requests are sent: seeded open-loop arrival processes.

use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arrival {
    /// Exponential gaps: independent arrivals, the usual model of real traffic.
    Poisson,
    /// Evenly spaced.
    Constant,
    /// Gamma gaps with shape `burstiness`: < 1 burstier than Poisson, > 1 smoother.
    Gamma,
}

/// Seconds from the start of the run at which each request arrives: the first at 0, then
/// gaps drawn from the process with mean `1 / rate`, until `count` arrivals or past
/// `horizon_s`.
pub fn arrival_times(
    arrival: Arrival,
    rate: f64,
    burstiness: f64,
    seed: u64,
    count: Option<usize>,
    horizon_s: Option<f64>,
) -> Vec<f64> {
    assert!(rate > 0.0 && rate.is_finite(), "rate must be positive");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let shape = if arrival == Arrival::Gamma { burstiness.max(1e-3) } else { 1.0 };
    let gamma = Gamma::new(shape, 1.0 / (rate * shape)).expect("positive shape and scale");
    let exp = Exp::new(rate).expect("positive rate");
    let mut times = Vec::new();
    let mut t = 0.0;
    loop {
        if count.is_some_and(|n| times.len() >= n) || horizon_s.is_some_and(|h| t > h) {
            break;
        }
        times.push(t);
        t += match arrival {
            Arrival::Constant => 1.0 / rate,
            Arrival::Poisson => exp.sample(&mut rng),
            Arrival::Gamma => gamma.sample(&mut rng),
        };
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_gap(times: &[f64]) -> f64 {
        (times[times.len() - 1] - times[0]) / (times.len() - 1) as f64
    }

    #[test]
    fn seeded_poisson_has_the_right_mean_gap_and_repeats() {
        let t = arrival_times(Arrival::Poisson, 4.0, 1.0, 7, Some(20_000), None);
        assert!((mean_gap(&t) - 0.25).abs() < 0.01, "{}", mean_gap(&t));
        assert_eq!(t, arrival_times(Arrival::Poisson, 4.0, 1.0, 7, Some(20_000), None));
        assert_ne!(t, arrival_times(Arrival::Poisson, 4.0, 1.0, 8, Some(20_000), None));
        // Exponential gaps: the coefficient of variation is about 1.
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let var = gaps.iter().map(|g| (g - 0.25).powi(2)).sum::<f64>() / gaps.len() as f64;
        assert!((var.sqrt() / 0.25 - 1.0).abs() < 0.05);
    }

    #[test]
    fn constant_and_gamma_keep_the_rate() {
        let c = arrival_times(Arrival::Constant, 2.0, 1.0, 0, Some(6), None);
        assert_eq!(c, vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5]);
        let g = arrival_times(Arrival::Gamma, 10.0, 0.25, 3, Some(20_000), None);
        assert!((mean_gap(&g) - 0.1).abs() < 0.01);
    }

    #[test]
    fn horizon_bounds_the_arrivals() {
        let t = arrival_times(Arrival::Constant, 10.0, 1.0, 0, None, Some(1.0));
        assert_eq!(t.len(), 11);
        assert!(t.iter().all(|&x| x <= 1.0 + 1e-9));
    }
}
