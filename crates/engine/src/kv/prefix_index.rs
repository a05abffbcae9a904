//! What each slot's KV cells hold, so that a shared prompt prefix (a system prompt, a chat
//! history, a retried request) is reused instead of recomputed.
//!
//! Each slot owns its own KV stream, so a finished request's cells cost nothing to keep:
//! they are reclaimed by simply being overwritten. This module only remembers which tokens
//! each idle slot holds; the scheduler decides where a request goes and what it copies.

use crate::runtime::TokenId;

#[derive(Debug)]
pub struct PrefixCache {
    /// Tokens whose KV each idle slot holds (what its last request left).
    held: Vec<Vec<TokenId>>,
}

impl PrefixCache {
    pub fn new(slots: usize) -> Self {
        Self { held: vec![Vec::new(); slots] }
    }

    /// Records what `slot` holds.
    pub fn store(&mut self, slot: usize, tokens: Vec<TokenId>) {
        self.held[slot] = tokens;
    }

    pub fn held(&self, slot: usize) -> &[TokenId] {
        &self.held[slot]
    }

    pub fn clear(&mut self, slot: usize) {
        self.held[slot].clear();
    }
}

/// Prompt tokens that can be reused from KV cells holding `held`. At least one prompt
/// token is always left to compute, since its logits are needed.
pub fn reusable(held: impl IntoIterator<Item = TokenId>, prompt: &[TokenId]) -> usize {
    let shared = held.into_iter().zip(prompt).take_while(|(x, y)| x == *y).count();
    shared.min(prompt.len().saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_stops_at_the_first_difference_and_keeps_one_token_to_compute() {
        assert_eq!(reusable([1, 2, 3, 9], &[1, 2, 3, 4, 6]), 3);
        assert_eq!(reusable([1, 2, 3, 4, 5], &[1, 2, 3, 4, 5]), 4);
        assert_eq!(reusable([1, 2, 3, 4, 5, 6], &[1, 2]), 1);
        assert_eq!(reusable([], &[1, 2]), 0);
        assert_eq!(reusable([7], &[]), 0);
    }

    #[test]
    fn store_and_clear_track_what_a_slot_holds() {
        let mut c = PrefixCache::new(2);
        c.store(1, vec![4, 5]);
        assert_eq!(c.held(1), &[4, 5]);
        assert!(c.held(0).is_empty());
        c.clear(1);
        assert!(c.held(1).is_empty());
    }
}
