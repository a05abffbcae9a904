//! `--max-queue-ms` for the embedding engine: the wait a new request would have before its
//! first batch (the generating engine's bound is on the wait for a first token), from the
//! tokens queued ahead of it and the rate the engine measured, so a request that would
//! wait far past the bound is refused at once (a 429 with Retry-After) instead of queued.
//! Its own size does not count: a large request is not refused for being large.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A request is refused at once only when predicted to wait this many times the bound:
/// the forecast errs both ways, as the generating engine's does.
pub(crate) const ADMISSION_SLACK: f64 = 1.5;

/// How much of each new batch's rate the running estimate takes.
const NEW_WEIGHT: f64 = 0.2;

/// Shared by submitters (reading) and the engine thread (writing).
#[derive(Default)]
pub(crate) struct EmbedForecast {
    /// Tokens the engine thread holds and has not computed (requests taken off the queue).
    active_tokens: AtomicU64,
    /// Milliseconds a token, as f64 bits; 0 until a batch was measured.
    ms_per_token_bits: AtomicU64,
}

impl EmbedForecast {
    /// One batch of `tokens` took `ms`.
    pub(crate) fn record_batch(&self, tokens: usize, ms: f64) {
        if tokens == 0 || ms <= 0.0 {
            return;
        }
        let measured = ms / tokens as f64;
        let before = f64::from_bits(self.ms_per_token_bits.load(Relaxed));
        let estimate = if before > 0.0 { before + NEW_WEIGHT * (measured - before) } else { measured };
        self.ms_per_token_bits.store(estimate.to_bits(), Relaxed);
    }

    pub(crate) fn set_active_tokens(&self, tokens: usize) {
        self.active_tokens.store(tokens as u64, Relaxed);
    }

    /// The predicted wait, in ms, before a new request's first batch, with `waiting`
    /// tokens queued ahead of it; `None` before any batch was measured.
    pub(crate) fn predicted_ms(&self, waiting: usize) -> Option<f64> {
        let per_token = f64::from_bits(self.ms_per_token_bits.load(Relaxed));
        let ahead = self.active_tokens.load(Relaxed) as usize + waiting;
        (per_token > 0.0).then_some(ahead as f64 * per_token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn predicts_nothing_until_a_batch_was_measured() {
        let forecast = EmbedForecast::default();
        assert_eq!(forecast.predicted_ms(1000), None);
    }

    #[test]
    fn the_wait_is_the_work_ahead_at_the_measured_rate() {
        let forecast = EmbedForecast::default();
        forecast.record_batch(200, 50.0); // 0.25 ms a token
        forecast.set_active_tokens(300);
        assert_eq!(forecast.predicted_ms(700), Some(250.0));
        forecast.record_batch(100, 50.0); // 0.5 ms a token, weighted in: 0.3
        let predicted = forecast.predicted_ms(1000);
        assert!(predicted.is_some_and(|ms| (ms - (300.0 + 1000.0) * 0.3).abs() < 1e-9), "{predicted:?}");
    }
}
