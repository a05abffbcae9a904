//! Drafts from what earlier requests said: a bounded pool of finished sequences' tokens
//! (prompt and output), indexed by every run of `KEY_TOKENS` tokens in them. A sequence
//! whose last `KEY_TOKENS` tokens occurred in an earlier request is likely to go on as that
//! one did: the same question asked again (a retry, a recurring prompt) is answered the
//! same way under greedy decoding, and templated outputs, boilerplate and quoted code
//! recur across requests. This is llama.cpp's `ngram-mod` idea (one table shared by every
//! sequence and kept across requests) with whole continuations stored, so a draft is a
//! slice, not a chain of lookups. Drafts are verified like any other, so what one request
//! said never reaches another's output: only the model's own tokens are emitted.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};

use crate::runtime::TokenId;

/// Tokens a sequence's end must share with an earlier request's tokens to draft from them:
/// as long as the copy match of `lookup`, so a pooled draft is as likely to be right.
pub(crate) const KEY_TOKENS: usize = 16;

/// Tokens the pool holds by default: 1 MB of token ids, and an index entry (24 bytes, plus
/// the hash table's spare room) for nearly every token.
pub(crate) const DEFAULT_POOL_TOKENS: usize = 1 << 18;

/// Finished sequences' tokens, oldest first, and where each key run ends in them.
#[derive(Debug)]
pub(crate) struct NgramPool {
    runs: VecDeque<Run>,
    next_run: u64,
    held_tokens: usize,
    budget_tokens: usize,
    /// Hash of a key run -> the latest place it occurred (a collision is caught on lookup).
    index: HashMap<u64, Place>,
}

#[derive(Debug)]
struct Run {
    id: u64,
    tokens: Vec<TokenId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    run: u64,
    /// Where the key run ends (exclusive): the draft starts here.
    end: usize,
}

impl Default for NgramPool {
    fn default() -> Self {
        Self::new(DEFAULT_POOL_TOKENS)
    }
}

impl NgramPool {
    pub fn new(budget_tokens: usize) -> Self {
        Self { runs: VecDeque::new(), next_run: 0, held_tokens: 0, budget_tokens, index: HashMap::new() }
    }

    /// Tokens held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held_tokens
    }

    /// Adds a finished sequence's tokens, dropping the oldest sequences beyond the budget.
    pub fn insert(&mut self, tokens: &[TokenId]) {
        if tokens.len() <= KEY_TOKENS || tokens.len() > self.budget_tokens {
            return;
        }
        let id = self.next_run;
        self.next_run += 1;
        for end in KEY_TOKENS..tokens.len() {
            self.index.insert(key(&tokens[end - KEY_TOKENS..end]), Place { run: id, end });
        }
        self.held_tokens += tokens.len();
        self.runs.push_back(Run { id, tokens: tokens.to_vec() });
        while self.held_tokens > self.budget_tokens {
            let Some(old) = self.runs.pop_front() else { break };
            self.held_tokens -= old.tokens.len();
            for end in KEY_TOKENS..old.tokens.len() {
                let k = key(&old.tokens[end - KEY_TOKENS..end]);
                // A later run that holds the same key keeps its entry.
                if self.index.get(&k).is_some_and(|place| place.run == old.id) {
                    self.index.remove(&k);
                }
            }
        }
    }

    /// What followed the latest pooled occurrence of `history`'s last `KEY_TOKENS` tokens,
    /// at most `max` tokens; empty when they occur nowhere in the pool.
    pub fn lookup(&self, history: &[TokenId], max: usize) -> &[TokenId] {
        let Some(suffix) = history.len().checked_sub(KEY_TOKENS).map(|start| &history[start..]) else {
            return &[];
        };
        let Some(place) = self.index.get(&key(suffix)) else { return &[] };
        let Some(run) = self.runs.front().and_then(|first| self.runs.get((place.run - first.id) as usize)) else {
            return &[];
        };
        if &run.tokens[place.end - KEY_TOKENS..place.end] != suffix {
            return &[];
        }
        &run.tokens[place.end..(place.end + max).min(run.tokens.len())]
    }
}

fn key(tokens: &[TokenId]) -> u64 {
    let mut hasher = DefaultHasher::new();
    tokens.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(from: TokenId, len: usize) -> Vec<TokenId> {
        (from..from + len as TokenId).collect()
    }

    #[test]
    fn a_sequence_ending_like_an_earlier_request_drafts_what_followed_there() {
        let mut pool = NgramPool::new(1000);
        let earlier = run(100, 60);
        pool.insert(&earlier);
        // Another request whose end is 16 of the earlier one's tokens.
        let mut history = vec![1, 2, 3];
        history.extend_from_slice(&earlier[10..26]);
        assert_eq!(pool.lookup(&history, 8), &earlier[26..34]);
        assert_eq!(pool.lookup(&history, 100), &earlier[26..], "up to the earlier request's end");
        // One token fewer in common, or none: nothing.
        assert!(pool.lookup(&history[4..], 8).is_empty());
        assert!(pool.lookup(&[7; 20], 8).is_empty());
        assert!(pool.lookup(&earlier[..10], 8).is_empty(), "shorter than a key");
        // At the earlier request's very end nothing followed.
        assert!(pool.lookup(&earlier, 8).is_empty());
    }

    #[test]
    fn the_latest_occurrence_wins_and_the_oldest_requests_go_past_the_budget() {
        let mut pool = NgramPool::new(100);
        let shared = run(500, 16);
        let first: Vec<TokenId> = shared.iter().copied().chain([1, 1, 1]).collect();
        let second: Vec<TokenId> = shared.iter().copied().chain([2, 2, 2]).collect();
        pool.insert(&first);
        pool.insert(&second);
        assert_eq!(pool.lookup(&shared, 3), [2, 2, 2]);
        // Short sequences and ones over the whole budget are not kept.
        pool.insert(&shared);
        pool.insert(&run(0, 101));
        assert_eq!(pool.len(), 38);
        // 90 more tokens: the first two requests (38 tokens) no longer fit beside them.
        let third = run(2000, 90);
        pool.insert(&third);
        assert_eq!(pool.len(), 90);
        assert!(pool.lookup(&shared, 3).is_empty(), "evicted with its request");
        assert_eq!(pool.lookup(&third[..30], 2), [2030, 2031]);
        // Evicting an old request keeps a later request's entry for the same key.
        let mut pool = NgramPool::new(40);
        pool.insert(&first);
        pool.insert(&second);
        pool.insert(&run(9000, 19));
        assert_eq!(pool.lookup(&shared, 3), [2, 2, 2]);
    }
}
