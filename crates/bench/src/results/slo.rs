//! Service-level objectives a run is judged by, and whether one request met them. Apart
//! from the result so that the caveats (`limits`) can name them without the result.
//!
//! A fixed TTFT objective measures the CPU more than the server: a cold 300-token prompt
//! alone takes ~1.1 s on two cores. Calibrated objectives (`--slo-scale`) are multiples of
//! the target's own idle TTFT, by prompt length, and idle TPOT, so they mean the same on
//! every machine; `--slos-from` judges several servers by one server's objectives.

use serde::{Deserialize, Serialize};

use crate::run::record::{RequestRecord, Status};

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slos {
    /// TTFT objective, or its fixed part when `ttft_per_prompt_token_ms` is given.
    pub ttft_ms: f64,
    /// Added to `ttft_ms` for each prompt token: a longer prompt may take longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_per_prompt_token_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// What they were calibrated from, when they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
}

/// The target's idle latency, measured one request at a time before the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// The objectives are this many times the idle figures.
    pub scale: f64,
    /// Idle TTFT = `idle_ttft_ms` + `idle_ttft_per_prompt_token_ms` x prompt tokens (a
    /// least-squares line through the calibration requests).
    pub idle_ttft_ms: f64,
    pub idle_ttft_per_prompt_token_ms: f64,
    /// Median TPOT of the calibration requests.
    pub idle_tpot_ms: f64,
    /// Calibration requests that completed with a TTFT (and, for the TPOT, a token count).
    pub requests: usize,
}

impl Calibration {
    /// From completed calibration requests; `None` when fewer than two have a TTFT and a
    /// prompt length, or none a TPOT.
    pub fn fit(records: &[RequestRecord], scale: f64) -> Option<Self> {
        let points: Vec<(f64, f64)> = records
            .iter()
            .filter(|r| r.status == Status::Completed)
            .filter_map(|r| Some((f64::from(r.usage.prompt_tokens?), r.timing.ttft_ms?)))
            .collect();
        let mut tpots: Vec<f64> =
            records.iter().filter(|r| r.status == Status::Completed).filter_map(|r| r.tpot_ms()).collect();
        if points.len() < 2 || tpots.is_empty() {
            return None;
        }
        let n = points.len() as f64;
        let (mean_x, mean_y) =
            (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
        let spread: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
        let slope = if spread > 0.0 {
            (points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum::<f64>() / spread).max(0.0)
        } else {
            0.0
        };
        tpots.sort_by(f64::total_cmp);
        Some(Self {
            scale,
            idle_ttft_ms: round((mean_y - slope * mean_x).max(0.0)),
            idle_ttft_per_prompt_token_ms: round(slope),
            idle_tpot_ms: round(tpots[tpots.len() / 2]),
            requests: points.len(),
        })
    }

    /// The objectives: `scale` times the idle figures (an end-to-end one stays as given).
    pub fn slos(&self, e2e_ms: Option<f64>) -> Slos {
        Slos {
            ttft_ms: round(self.scale * self.idle_ttft_ms),
            ttft_per_prompt_token_ms: Some(round(self.scale * self.idle_ttft_per_prompt_token_ms)),
            tpot_ms: Some(round(self.scale * self.idle_tpot_ms)),
            e2e_ms,
            calibration: Some(*self),
        }
    }
}

/// To 0.0001 ms: short decimals read back from a result file exactly, so a run judged by
/// another's objectives (`--slos-from`) has the very same ones.
fn round(ms: f64) -> f64 {
    (ms * 1e4).round() / 1e4
}

impl Slos {
    /// The TTFT objective of a request with `prompt_tokens` (the fixed part alone when the
    /// server did not say how many).
    pub fn ttft_limit_ms(&self, prompt_tokens: Option<u32>) -> f64 {
        self.ttft_ms + self.ttft_per_prompt_token_ms.unwrap_or(0.0) * f64::from(prompt_tokens.unwrap_or(0))
    }

    /// The TTFT objective in words.
    pub fn ttft_text(&self) -> String {
        match self.ttft_per_prompt_token_ms {
            Some(per_token) => format!("{:.0} ms + {per_token:.2} ms per prompt token", self.ttft_ms),
            None => format!("{} ms", self.ttft_ms),
        }
    }

    /// `from_schedule`: open loop counts TTFT from the scheduled send, so time the request
    /// spent waiting in the client cannot flatter the server.
    pub(crate) fn ttft_met(&self, r: &RequestRecord, from_schedule: bool) -> bool {
        let lag = if from_schedule { r.dispatch_lag_ms() } else { 0.0 };
        r.status == Status::Completed
            && r.timing.ttft_ms.is_some_and(|t| t + lag <= self.ttft_limit_ms(r.usage.prompt_tokens))
    }

    /// Every SLO given is met. A TPOT SLO with no token count is not met.
    pub(crate) fn all_met(&self, r: &RequestRecord, from_schedule: bool) -> bool {
        let lag = if from_schedule { r.dispatch_lag_ms() } else { 0.0 };
        self.ttft_met(r, from_schedule)
            && self.tpot_ms.is_none_or(|slo| r.tpot_ms().is_some_and(|t| t <= slo))
            && self.e2e_ms.is_none_or(|slo| r.timing.e2e_ms + lag <= slo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::result::tests::completed;

    fn with_prompt(prompt_tokens: u32, ttft_ms: f64) -> RequestRecord {
        // 11 tokens, 200 ms after the first: a TPOT of 20 ms.
        let mut record = completed(0.0, 0.0, ttft_ms, ttft_ms + 200.0, 11);
        record.usage.prompt_tokens = Some(prompt_tokens);
        record
    }

    #[test]
    fn calibrated_objectives_are_multiples_of_the_idle_line_and_tpot() {
        let idle = [with_prompt(100, 300.0), with_prompt(300, 700.0), with_prompt(500, 1100.0)];
        let calibration = Calibration::fit(&idle, 2.0).expect("fits");
        assert!((calibration.idle_ttft_per_prompt_token_ms - 2.0).abs() < 1e-9, "{calibration:?}");
        assert!((calibration.idle_ttft_ms - 100.0).abs() < 1e-9, "{calibration:?}");
        assert!((calibration.idle_tpot_ms - 20.0).abs() < 1e-9, "{calibration:?}");
        let slos = calibration.slos(None);
        assert_eq!((slos.ttft_ms, slos.ttft_per_prompt_token_ms, slos.tpot_ms), (200.0, Some(4.0), Some(40.0)));
        // A 200-token prompt may take 200 + 4 x 200 = 1000 ms to its first token.
        assert!(slos.all_met(&with_prompt(200, 990.0), false));
        assert!(!slos.all_met(&with_prompt(200, 1010.0), false));
        assert_eq!(slos.ttft_text(), "200 ms + 4.00 ms per prompt token");
        // One point is no line; equal lengths give a flat one.
        assert_eq!(Calibration::fit(&idle[..1], 2.0), None);
        let flat = Calibration::fit(&[with_prompt(100, 300.0), with_prompt(100, 500.0)], 1.0).expect("fits");
        assert_eq!((flat.idle_ttft_ms, flat.idle_ttft_per_prompt_token_ms), (400.0, 0.0));
    }
}
