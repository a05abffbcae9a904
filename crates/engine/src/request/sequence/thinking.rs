//! How a sequence closes a reasoning model's thought: at its budget, or where a shaped
//! reply would end its turn inside it. A child of `sequence`, so it reads the sequence's
//! fields as its own methods do.

use super::Sequence;
use crate::runtime::{TokenId, Tokenizer};
use rillm_backend::{FinishReason, TokenLogprob};

impl Sequence {
    /// Whether `token` would end the turn inside a thought when the request asked for its
    /// answer in a shape (tools, a format): a reply with no answer would break that promise.
    pub(super) fn ends_turn_in_thought(&self, token: TokenId, tokenizer: &dyn Tokenizer) -> bool {
        tokenizer.is_end_of_generation(token)
            && self.request.constraint.is_some()
            && self.output.is_thinking()
            && !self.closed_thought
    }

    /// Whether the thought has spent its budget.
    pub(super) fn budget_spent(&self) -> bool {
        let budget = self.request.thinking.as_ref().and_then(|plan| plan.budget);
        budget.is_some_and(|limit| limit <= self.output.thinking_tokens())
    }

    /// Closes the thought: the closing marker's tokens are taken as generated without
    /// sampling, fed with the next step (as jump-forward feeds a grammar's forced tokens),
    /// and the model answers after them. Once per output. With log-probabilities each
    /// forced token gets 0 (it was certain) and no alternatives.
    pub(super) fn close_thought(&mut self, tokenizer: &dyn Tokenizer, ctx_limit: u32) -> Option<FinishReason> {
        if self.closed_thought || !self.output.is_thinking() {
            return None;
        }
        self.closed_thought = true;
        let close = self.request.thinking.as_ref()?.close.clone();
        for token in close {
            if self.request.logprobs.is_some() {
                let mut bytes = Vec::new();
                tokenizer.append_token_bytes(token, &mut bytes);
                self.output.note_logprob(TokenLogprob { token, bytes, logprob: 0.0, top: Vec::new() });
            }
            if let Some(reason) = self.push_generated(token, tokenizer, ctx_limit) {
                return Some(reason);
            }
        }
        None
    }
}
