//! The requests `--slo-scale` measures the target's idle latency with, sent one at a time
//! before the run: prompts of three lengths (for TTFT's line by prompt length), twice
//! each, every one opening with its own number so that no prefix cache serves one from
//! another (nor the run's prompts from them), and answers long enough for a TPOT.

use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::run::record::RequestRecord;
use crate::workload::spec::{PromptSpec, RequestSpec};

/// Words per prompt: a short first one that only warms the server up (its first request
/// pays for setting up buffers), then about 40, 150 and 450 tokens with a BPE tokenizer,
/// twice each, short enough for a 512-token context with the answer.
const WORDS: [usize; 7] = [8, 30, 120, 360, 30, 120, 360];

/// The first request's record is not a measurement.
pub fn measured(records: &[RequestRecord]) -> Vec<RequestRecord> {
    records.iter().filter(|r| r.place.index > 0).cloned().collect()
}
/// Tokens each answer asks for.
pub const ANSWER_TOKENS: u32 = 32;

const VOCABULARY: &[&str] = &[
    "river", "stone", "garden", "lantern", "window", "quiet", "market", "bridge", "morning", "winter", "copper",
    "forest", "harbor", "paper", "candle", "mountain", "valley", "silver", "thunder", "meadow", "orchard", "castle",
    "violin", "shadow", "ember", "compass", "ribbon", "feather", "anchor", "saddle", "velvet", "marble",
];

pub fn requests(seed: u64) -> Vec<RequestSpec> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed_ca11);
    WORDS
        .iter()
        .enumerate()
        .map(|(i, &words)| {
            let body: Vec<&str> = (0..words).filter_map(|_| VOCABULARY.choose(&mut rng).copied()).collect();
            let text = format!("Calibration note {i}-{seed}: {}. Summarise it.", body.join(" "));
            RequestSpec::new(PromptSpec::Text(text), ANSWER_TOKENS)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_prompts_differ_from_their_first_words_and_grow() {
        let specs = requests(7);
        let texts: Vec<String> = specs
            .iter()
            .map(|s| match &s.prompt {
                PromptSpec::Text(t) => t.clone(),
                other => panic!("a text prompt: {other:?}"),
            })
            .collect();
        assert_eq!(texts.len(), 7);
        assert!(texts[0].len() < texts[1].len() && texts[1].len() < texts[2].len() && texts[2].len() < texts[3].len());
        for (i, t) in texts.iter().enumerate() {
            assert!(t.starts_with(&format!("Calibration note {i}-7:")), "{t}");
        }
    }
}
