//! A level's figures broken down: by endpoint (several `--url`), by model
//! (`--model-mix`), by turn (sessions). Each share is summed the same way.

use serde::{Deserialize, Serialize};

use crate::run::record::{RequestRecord, Status};
use crate::stats::{mean, Distribution};

/// One model's share of a run that mixed several (`--model-mix`).
#[derive(Debug, Serialize, Deserialize)]
pub struct ModelSummary {
    pub model: String,
    #[serde(flatten)]
    pub figures: TargetSummary,
}

/// One endpoint's share of a run with several `--url` (with `url` empty, one model's).
#[derive(Debug, Serialize, Deserialize)]
pub struct TargetSummary {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// Requests sent to it (shed requests were sent nowhere).
    pub sent: usize,
    pub completed: usize,
    pub failed: usize,
    pub rejected_429: usize,
    pub throughput_rps: f64,
    pub goodput_rps: f64,
    pub ttft_ms: Option<Distribution>,
    pub tpot_ms: Option<Distribution>,
}

/// Requests that completed at one turn index of their sessions.
#[derive(Debug, Serialize, Deserialize)]
pub struct TurnSummary {
    pub turn: u32,
    pub completed: usize,
    pub ttft_ms: Option<Distribution>,
    pub mean_prompt_tokens: Option<f64>,
    pub mean_cached_tokens: Option<f64>,
}

pub(crate) fn per_target(
    urls: &[String],
    sent: &[&RequestRecord],
    per_s: impl Fn(usize) -> f64,
    good: impl Fn(&&RequestRecord) -> bool,
) -> Vec<TargetSummary> {
    urls.iter()
        .enumerate()
        .map(|(t, url)| {
            let mine: Vec<&RequestRecord> = sent.iter().copied().filter(|r| r.place.target == t).collect();
            TargetSummary { url: url.clone(), ..group_summary(&mine, &per_s, &good) }
        })
        .collect()
}

/// Each model's share, where the requests named more than one.
pub(crate) fn per_model(
    sent: &[&RequestRecord],
    per_s: impl Fn(usize) -> f64,
    good: impl Fn(&&RequestRecord) -> bool,
) -> Option<Vec<ModelSummary>> {
    let mut models: Vec<&str> = sent.iter().filter_map(|r| r.place.model.as_deref()).collect();
    models.sort_unstable();
    models.dedup();
    (models.len() > 1).then(|| {
        models
            .into_iter()
            .map(|model| {
                let mine: Vec<&RequestRecord> =
                    sent.iter().copied().filter(|r| r.place.model.as_deref() == Some(model)).collect();
                ModelSummary { model: model.to_string(), figures: group_summary(&mine, &per_s, &good) }
            })
            .collect()
    })
}

/// Counts and latencies of some of a level's sent requests.
fn group_summary(
    mine: &[&RequestRecord],
    per_s: &impl Fn(usize) -> f64,
    good: &impl Fn(&&RequestRecord) -> bool,
) -> TargetSummary {
    let count = |s: Status| mine.iter().filter(|r| r.status == s).count();
    let done: Vec<&&RequestRecord> = mine.iter().filter(|r| r.status == Status::Completed).collect();
    TargetSummary {
        url: String::new(),
        sent: mine.len(),
        completed: done.len(),
        failed: count(Status::Failed),
        rejected_429: count(Status::Rejected),
        throughput_rps: per_s(done.len()),
        goodput_rps: per_s(done.iter().filter(|r| good(r)).count()),
        ttft_ms: Distribution::of(done.iter().filter_map(|r| r.timing.ttft_ms)),
        tpot_ms: Distribution::of(done.iter().filter_map(|r| r.tpot_ms())),
    }
}

pub(crate) fn per_turn(done: &[&RequestRecord]) -> Vec<TurnSummary> {
    let last = done.iter().filter_map(|r| r.place.turn).max().unwrap_or(0);
    (1..=last)
        .map(|turn| {
            let at: Vec<&&RequestRecord> = done.iter().filter(|r| r.place.turn == Some(turn)).collect();
            TurnSummary {
                turn,
                completed: at.len(),
                ttft_ms: Distribution::of(at.iter().filter_map(|r| r.timing.ttft_ms)),
                mean_prompt_tokens: mean(at.iter().filter_map(|r| r.usage.prompt_tokens).map(f64::from)),
                mean_cached_tokens: mean(at.iter().filter_map(|r| r.usage.cached_tokens).map(f64::from)),
            }
        })
        .collect()
}
