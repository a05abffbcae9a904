//! Which slot a new request should take, so that the KV cells of a shared prompt prefix
//! (a system prompt, a chat history, a retried request) are reused instead of recomputed.
//!
//! Each slot owns its own KV stream, so a finished request's cells cost nothing to keep:
//! they are reclaimed by simply being overwritten. This module only remembers which tokens
//! each idle slot holds and picks the best free slot for a prompt.

use crate::backend::TokenId;

#[derive(Debug)]
pub struct PrefixCache {
    /// Tokens whose KV each slot currently holds (for an idle slot: what its last request left).
    held: Vec<Vec<TokenId>>,
    last_used: Vec<u64>,
    clock: u64,
}

impl PrefixCache {
    pub fn new(slots: usize) -> Self {
        Self { held: vec![Vec::new(); slots], last_used: vec![0; slots], clock: 0 }
    }

    /// The free slot sharing the longest prefix with `prompt` (least recently used on a
    /// tie, so cold slots are overwritten first), and how many prompt tokens it can reuse.
    /// At least one prompt token is always left to compute, since its logits are needed.
    pub fn choose(&self, free: impl IntoIterator<Item = usize>, prompt: &[TokenId]) -> Option<(usize, usize)> {
        free.into_iter()
            .map(|slot| (slot, common_prefix(&self.held[slot], prompt)))
            .max_by_key(|&(slot, shared)| (shared, std::cmp::Reverse(self.last_used[slot])))
            .map(|(slot, shared)| (slot, shared.min(prompt.len().saturating_sub(1))))
    }

    /// Records what `slot` holds after its request ends.
    pub fn store(&mut self, slot: usize, tokens: Vec<TokenId>) {
        self.clock += 1;
        self.held[slot] = tokens;
        self.last_used[slot] = self.clock;
    }

    /// Marks `slot` as holding only its first `keep` tokens (a new request took it).
    pub fn truncate(&mut self, slot: usize, keep: usize) {
        self.held[slot].truncate(keep);
    }

    pub fn clear(&mut self, slot: usize) {
        self.held[slot].clear();
    }
}

fn common_prefix(a: &[TokenId], b: &[TokenId]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_longest_shared_prefix_and_keeps_one_token_to_compute() {
        let mut c = PrefixCache::new(3);
        c.store(0, vec![1, 2, 3, 9]);
        c.store(1, vec![1, 2, 3, 4, 5]);
        assert_eq!(c.choose([0, 1, 2], &[1, 2, 3, 4, 6]), Some((1, 4)));
        // The whole prompt is cached: one token is still recomputed for its logits.
        assert_eq!(c.choose([0, 1, 2], &[1, 2, 3, 4, 5]), Some((1, 4)));
        // Only free slots are candidates.
        assert_eq!(c.choose([0, 2], &[1, 2, 3, 4, 5]), Some((0, 3)));
    }

    #[test]
    fn without_a_shared_prefix_the_least_recently_used_slot_is_taken() {
        let mut c = PrefixCache::new(3);
        c.store(2, vec![7]);
        c.store(0, vec![8]);
        c.store(1, vec![9]);
        assert_eq!(c.choose([0, 1, 2], &[5, 5]), Some((2, 0)));
        c.clear(1);
        c.truncate(0, 0);
        assert_eq!(c.choose([0, 1], &[8, 1]), Some((0, 0)));
        assert_eq!(c.choose([], &[1]), None);
    }
}
