//! What a request changes about the model's logits before its sampler picks a token,
//! greedy or not: vLLM's `allowed_token_ids`, logit bias and repetition penalties
//! (`SamplingParams::logit_bias`, `Penalties`) in vLLM's order and formulas (bias, then
//! repetition, frequency and presence), and `min_tokens`' ban on ending tokens. They depend on the tokens produced so
//! far, so the sequence keeps the counts and every row it samples reads them: a draft's row
//! sees the drafts kept before it, exactly as plain decoding would have.

use std::collections::{HashMap, HashSet};

use rillm_backend::{Penalties, SamplingParams};

use rillm_backend::TokenId;

#[derive(Debug, Clone)]
pub struct LogitAdjust {
    bias: Vec<(TokenId, f32)>,
    /// Sorted; the only tokens that may be sampled (empty: any).
    allowed: Vec<TokenId>,
    penalties: Penalties,
    /// How often each token is in the output so far (kept only under a penalty).
    output_counts: HashMap<TokenId, u32>,
    /// The prompt's tokens, which the repetition penalty counts too (as vLLM does); empty
    /// without it.
    prompt_tokens: HashSet<TokenId>,
    /// Output tokens so far, and how many must come before an ending token may.
    output_len: u32,
    min_tokens: u32,
    /// Banned with end of generation while the output is shorter than `min_tokens`.
    stop_token_ids: Vec<TokenId>,
}

impl LogitAdjust {
    /// `None` when the request asks for nothing that changes the logits: its sampler then
    /// reads the model's row in place. `stop_token_ids` matter only before `min_tokens`.
    pub(crate) fn new(
        sampling: &SamplingParams,
        prompt: &[TokenId],
        min_tokens: u32,
        stop_token_ids: &[TokenId],
    ) -> Option<Self> {
        let nothing_asked = sampling.logit_bias.is_empty()
            && sampling.allowed_token_ids.is_empty()
            && sampling.penalties.is_neutral()
            && min_tokens == 0;
        if nothing_asked {
            return None;
        }
        let mut allowed = sampling.allowed_token_ids.clone();
        allowed.sort_unstable();
        let prompt_tokens =
            if sampling.penalties.repetition != 1.0 { prompt.iter().copied().collect() } else { HashSet::new() };
        Some(Self {
            bias: sampling.logit_bias.clone(),
            allowed,
            penalties: sampling.penalties,
            output_counts: HashMap::new(),
            prompt_tokens,
            output_len: 0,
            min_tokens,
            stop_token_ids: stop_token_ids.to_vec(),
        })
    }

    /// A token of the output, sampled or forced.
    pub(crate) fn observe(&mut self, token: TokenId) {
        self.output_len += 1;
        if !self.penalties.is_neutral() {
            *self.output_counts.entry(token).or_default() += 1;
        }
    }

    /// Adds the bias and penalties to `logits`, one entry per token of the vocabulary, and
    /// while the output is shorter than `min_tokens` bans `end_of_generation` and the
    /// request's stop tokens (vLLM's `min_tokens`).
    pub fn apply(&self, logits: &mut [f32], end_of_generation: &[TokenId]) {
        if !self.allowed.is_empty() {
            for (token, l) in logits.iter_mut().enumerate() {
                if self.allowed.binary_search(&(token as TokenId)).is_err() {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        if self.output_len < self.min_tokens {
            for &token in end_of_generation.iter().chain(&self.stop_token_ids) {
                if let Some(l) = logits.get_mut(token as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        for &(token, bias) in &self.bias {
            if let Some(l) = logits.get_mut(token as usize) {
                *l += bias;
            }
        }
        let Penalties { presence, frequency, repetition } = self.penalties;
        let repeat = |l: &mut f32| *l = if *l > 0.0 { *l / repetition } else { *l * repetition };
        if repetition != 1.0 {
            for &token in &self.prompt_tokens {
                if let Some(l) = logits.get_mut(token as usize) {
                    repeat(l);
                }
            }
        }
        for (&token, &count) in &self.output_counts {
            let Some(l) = logits.get_mut(token as usize) else { continue };
            if repetition != 1.0 && !self.prompt_tokens.contains(&token) {
                repeat(l);
            }
            *l -= frequency * count as f32 + presence;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adjust(bias: Vec<(TokenId, f32)>, presence: f32, frequency: f32, repetition: f32) -> Option<LogitAdjust> {
        let sampling = SamplingParams {
            logit_bias: bias,
            penalties: Penalties { presence, frequency, repetition },
            ..Default::default()
        };
        LogitAdjust::new(&sampling, &[1, 2, 2], 0, &[])
    }

    #[test]
    fn nothing_asked_nothing_to_adjust() {
        assert!(adjust(Vec::new(), 0.0, 0.0, 1.0).is_none());
        assert!(adjust(vec![(0, 1.0)], 0.0, 0.0, 1.0).is_some());
        assert!(adjust(Vec::new(), 0.5, 0.0, 1.0).is_some());
    }

    #[test]
    fn bias_is_added_and_ids_past_the_row_are_skipped() {
        let a = adjust(vec![(0, 2.5), (3, -100.0), (99, 5.0)], 0.0, 0.0, 1.0).expect("bias");
        let mut logits = [1.0, 1.0, 1.0, 1.0];
        a.apply(&mut logits, &[]);
        assert_eq!(logits, [3.5, 1.0, 1.0, -99.0]);
    }

    #[test]
    fn frequency_and_presence_count_the_output_only() {
        let mut a = adjust(Vec::new(), 0.5, 0.25, 1.0).expect("penalties");
        for t in [3, 3, 3, 0] {
            a.observe(t);
        }
        let mut logits = [1.0; 4];
        a.apply(&mut logits, &[]);
        // Token 3 came three times, token 0 once; the prompt's 1 and 2 are not penalised.
        assert_eq!(logits, [1.0 - 0.25 - 0.5, 1.0, 1.0, 1.0 - 0.75 - 0.5]);
    }

    #[test]
    fn repetition_scales_prompt_and_output_tokens_once_each() {
        let mut a = adjust(Vec::new(), 0.0, 0.0, 2.0).expect("penalty");
        // 2 is in the prompt and the output: divided once, not twice.
        for t in [2, 3, 3] {
            a.observe(t);
        }
        let mut logits = [4.0, 4.0, 4.0, -4.0, 4.0];
        a.apply(&mut logits, &[]);
        assert_eq!(logits, [4.0, 2.0, 2.0, -8.0, 4.0]);
    }

    #[test]
    fn ending_tokens_are_banned_until_min_tokens() {
        let mut a = LogitAdjust::new(&SamplingParams::default(), &[1, 2, 2], 2, &[4]).expect("min_tokens");
        let fresh = || [0.0_f32; 5];
        for _ in 0..2 {
            let mut logits = fresh();
            a.apply(&mut logits, &[0]);
            // End of generation (0) and the stop token (4) cannot be sampled yet.
            assert_eq!(logits, [f32::NEG_INFINITY, 0.0, 0.0, 0.0, f32::NEG_INFINITY]);
            a.observe(3);
        }
        let mut logits = fresh();
        a.apply(&mut logits, &[0]);
        assert_eq!(logits, fresh(), "two tokens out: anything may end it");
    }

    #[test]
    fn only_allowed_tokens_keep_their_logits() {
        let sampling = SamplingParams { allowed_token_ids: vec![3, 1], ..Default::default() };
        let a = LogitAdjust::new(&sampling, &[], 0, &[]).expect("allowed");
        let mut logits = [1.0, 2.0, 3.0, 4.0];
        a.apply(&mut logits, &[]);
        assert_eq!(logits, [f32::NEG_INFINITY, 2.0, f32::NEG_INFINITY, 4.0]);
    }

    #[test]
    fn bias_comes_before_the_penalties() {
        let mut a = adjust(vec![(3, 2.0)], 0.0, 0.0, 2.0).expect("both");
        a.observe(3);
        let mut logits = [0.0, 0.0, 0.0, -1.0];
        a.apply(&mut logits, &[]);
        // (-1 + 2) / 2, as vLLM applies the bias first.
        assert_eq!(logits[3], 0.5);
    }
}
