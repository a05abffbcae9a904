//! The host-memory tier of the prefix cache: KV states of token sequences that no slot
//! holds any more, kept in RAM to be restored instead of recomputed.
//!
//! A slot's cells are overwritten whenever a new request takes it; before that, the
//! scheduler saves what the slot held here. Entries are found by token prefix through a
//! chain of block hashes (as vLLM's automatic prefix caching does): the hash of block `i`
//! covers blocks `0..=i`, so the deepest block hash of a prompt found in the index names
//! the entries that share that many whole blocks with it, whichever conversation or system
//! prompt they came from. The exact reusable length is then counted token by token.
//!
//! Bounded in bytes, and an entry whose tokens are a prefix of a newer one (the previous
//! turn of the same conversation) is dropped for it. When something must go, entries that
//! are mostly a copy of another's tokens go first (least recently used first among them),
//! then the least recently used: every question asked under one system prompt leaves an
//! entry holding its own copy of that prompt's KV, and under plain LRU a few busy prompts'
//! copies push every other prompt out. Dropping a copy loses only its own tail.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use crate::kv::prefix_index::reusable;
use crate::runtime::TokenId;
use crate::stats::HostCacheCounts;

/// Tokens per hashed block. Small, so a match is found close to its true length; the
/// exact length is counted from the tokens anyway.
pub const BLOCK_TOKENS: usize = 16;

/// Whether at least [`COPY_SHARE`] of the `len` tokens whose chained block hashes are
/// `hashes` are held elsewhere (`held`). Block hashes are chained, so the deepest block held
/// elsewhere says how many leading blocks are.
fn mostly_held(hashes: &[u64], len: usize, held: impl Fn(&u64) -> bool) -> bool {
    let held_blocks = hashes.iter().rposition(held).map_or(0, |i| i + 1);
    len > 0 && (held_blocks * BLOCK_TOKENS) as f64 >= COPY_SHARE * len as f64
}

/// One id per prompt prefix in a log, without its text: the chained hash of its first
/// blocks (up to 256 tokens), so the turns of one conversation, or the requests under one
/// system prompt, read as one id.
pub(crate) struct PrefixId(u64);

impl PrefixId {
    const TOKENS: usize = 256;

    pub fn of(tokens: &[TokenId]) -> Self {
        Self(block_hashes(&tokens[..tokens.len().min(Self::TOKENS)]).last().copied().unwrap_or(0))
    }
}

impl std::fmt::Display for PrefixId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// An entry sharing at least this share of its tokens with another entry is a copy, first
/// to go when room is needed: restoring the other and prefilling the rest loses at most a
/// quarter of what it held.
pub(crate) const COPY_SHARE: f64 = 0.75;

struct Entry<S> {
    tokens: Vec<TokenId>,
    state: S,
    bytes: usize,
    last_used: u64,
    block_hashes: Vec<u64>,
}

pub struct HostCache<S> {
    budget_bytes: usize,
    bytes: usize,
    next_id: u64,
    clock: u64,
    entries: HashMap<u64, Entry<S>>,
    /// Chained block hash → entries holding that chain.
    index: HashMap<u64, HashSet<u64>>,
    saves: u64,
    evictions: u64,
}

/// Chained hashes of the whole blocks of `tokens`.
pub fn block_hashes(tokens: &[TokenId]) -> Vec<u64> {
    let mut prev = 0u64;
    tokens
        .chunks_exact(BLOCK_TOKENS)
        .map(|block| {
            let mut h = DefaultHasher::new();
            prev.hash(&mut h);
            block.hash(&mut h);
            prev = h.finish();
            prev
        })
        .collect()
}

impl<S> HostCache<S> {
    pub fn new(budget_bytes: usize) -> Self {
        Self {
            budget_bytes,
            bytes: 0,
            next_id: 0,
            clock: 0,
            entries: HashMap::new(),
            index: HashMap::new(),
            saves: 0,
            evictions: 0,
        }
    }

    /// Drops every entry and returns what was held; the save and eviction counts stay.
    pub fn clear(&mut self) -> HostCacheCounts {
        let held = self.counts();
        self.entries.clear();
        self.index.clear();
        self.bytes = 0;
        held
    }

    pub fn counts(&self) -> HostCacheCounts {
        HostCacheCounts { entries: self.entries.len(), bytes: self.bytes, saves: self.saves, evictions: self.evictions }
    }

    /// The entry sharing the longest reusable prefix with `prompt`, and that length. Only
    /// entries sharing at least one whole block are considered.
    pub fn lookup(&self, prompt: &[TokenId]) -> Option<(u64, usize)> {
        let hashes = block_hashes(prompt);
        let candidates = hashes.iter().rev().find_map(|h| self.index.get(h))?;
        candidates
            .iter()
            .map(|&id| (id, reusable(self.entries[&id].tokens.iter().copied(), prompt)))
            .max_by_key(|&(id, n)| (n, self.entries[&id].last_used))
    }

    /// The chained block hashes of everything held (see [`block_hashes`]).
    pub fn held_block_hashes(&self) -> impl Iterator<Item = u64> + '_ {
        self.index.keys().copied()
    }

    /// An entry already holds `tokens` or more: saving them again would add nothing.
    pub fn covers(&self, tokens: &[TokenId]) -> bool {
        let Some(&last) = block_hashes(tokens).last() else { return false };
        self.index.get(&last).is_some_and(|ids| ids.iter().any(|id| self.entries[id].tokens.starts_with(tokens)))
    }

    /// Marks entry `id` as just used.
    pub fn touch(&mut self, id: u64) {
        self.clock += 1;
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.last_used = self.clock;
        }
    }

    /// The state and tokens of entry `id`, marked as just used.
    pub fn take_for_restore(&mut self, id: u64) -> Option<(&S, &[TokenId])> {
        self.touch(id);
        let entry = self.entries.get(&id)?;
        Some((&entry.state, &entry.tokens))
    }

    /// Keeps `state` (the KV of `tokens`, `bytes` long). Entries that are prefixes of
    /// `tokens` go; least recently used entries go until it fits; one larger than the whole
    /// budget is not kept. Returns whether it was kept. (The engine saves through
    /// [`HostCache::insert_beside`], which knows what the slots hold.)
    #[cfg(test)]
    pub fn insert(&mut self, tokens: Vec<TokenId>, state: S, bytes: usize) -> bool {
        self.insert_beside(tokens, state, bytes, &HashSet::new())
    }

    /// [`HostCache::insert`], knowing the chained block hashes of what the KV slots hold
    /// (`in_slots`): an entry the slots mostly hold is a copy, first to go when room is
    /// needed; and a new entry that is such a copy is kept only where room is made without
    /// evicting anything but copies (it would otherwise push out the only copy of another
    /// prompt to keep the old tail of one a slot still holds).
    pub fn insert_beside(&mut self, tokens: Vec<TokenId>, state: S, bytes: usize, in_slots: &HashSet<u64>) -> bool {
        if bytes > self.budget_bytes || tokens.len() < BLOCK_TOKENS || self.covers(&tokens) {
            return false;
        }
        let block_hashes = block_hashes(&tokens);
        let copy = mostly_held(&block_hashes, tokens.len(), |h| in_slots.contains(h));
        if copy && !self.room_from_copies(bytes, in_slots) {
            return false;
        }
        let superseded: Vec<u64> = block_hashes
            .iter()
            .filter_map(|h| self.index.get(h))
            .flatten()
            .copied()
            .collect::<HashSet<u64>>()
            .into_iter()
            .filter(|id| tokens.starts_with(&self.entries[id].tokens))
            .collect();
        for id in superseded {
            self.remove(id);
        }
        self.evict_until_fits(bytes, in_slots);
        self.clock += 1;
        let id = self.next_id;
        self.next_id += 1;
        for &h in &block_hashes {
            self.index.entry(h).or_default().insert(id);
        }
        self.entries.insert(id, Entry { tokens, state, bytes, last_used: self.clock, block_hashes });
        self.bytes += bytes;
        self.saves += 1;
        true
    }

    /// Sets the budget, evicting the least recently used entries down to it (a cache kept
    /// from an engine that had a larger one: `kept_prefixes`).
    pub fn set_budget(&mut self, budget_bytes: usize) {
        self.budget_bytes = budget_bytes;
        self.evict_until_fits(0, &HashSet::new());
    }

    /// Whether `extra` more bytes fit once every copy (of another entry or of what the
    /// slots hold) is gone.
    fn room_from_copies(&self, extra: usize, in_slots: &HashSet<u64>) -> bool {
        let copies: usize =
            self.entries.iter().filter(|&(&id, _)| self.is_copy(id, in_slots)).map(|(_, e)| e.bytes).sum();
        self.bytes - copies + extra <= self.budget_bytes
    }

    /// Evicts entries until `extra` more bytes fit the budget: copies of another entry's
    /// tokens or of what the slots hold first, then the least recently used.
    fn evict_until_fits(&mut self, extra: usize, in_slots: &HashSet<u64>) {
        while self.bytes + extra > self.budget_bytes {
            let victim = self
                .entries
                .iter()
                .min_by_key(|&(&id, e)| (!self.is_copy(id, in_slots), e.last_used))
                .map(|(&id, _)| id);
            let Some(victim) = victim else { break };
            let entry = &self.entries[&victim];
            tracing::debug!(tokens = entry.tokens.len(), prefix = %PrefixId::of(&entry.tokens), "host tier evicts");
            self.remove(victim);
            self.evictions += 1;
        }
    }

    /// Whether entry `id` shares at least [`COPY_SHARE`] of its tokens with another entry
    /// or with what the slots hold (`in_slots`).
    fn is_copy(&self, id: u64, in_slots: &HashSet<u64>) -> bool {
        let entry = &self.entries[&id];
        mostly_held(&entry.block_hashes, entry.tokens.len(), |h| {
            in_slots.contains(h) || self.index.get(h).is_some_and(|ids| ids.len() > 1)
        })
    }

    fn remove(&mut self, id: u64) {
        let Some(entry) = self.entries.remove(&id) else { return };
        self.bytes -= entry.bytes;
        for h in entry.block_hashes {
            if let Some(ids) = self.index.get_mut(&h) {
                ids.remove(&id);
                if ids.is_empty() {
                    self.index.remove(&h);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(range: std::ops::Range<u32>) -> Vec<TokenId> {
        range.collect()
    }

    #[test]
    fn finds_the_longest_shared_prefix_across_entries() {
        let mut c = HostCache::new(1 << 20);
        let system = toks(0..40);
        let a: Vec<TokenId> = system.iter().copied().chain(100..130).collect();
        let b: Vec<TokenId> = system.iter().copied().chain(200..260).collect();
        assert!(c.insert(a.clone(), "a", 10));
        assert!(c.insert(b.clone(), "b", 10));
        // A new conversation with the same system prompt shares 40 tokens with either.
        let new: Vec<TokenId> = system.iter().copied().chain(300..340).collect();
        let (_, n) = c.lookup(&new).unwrap();
        assert_eq!(n, 40);
        // The next turn of conversation b finds all of b.
        let next: Vec<TokenId> = b.iter().copied().chain(900..920).collect();
        let (id, n) = c.lookup(&next).unwrap();
        assert_eq!(n, b.len());
        assert_eq!(c.take_for_restore(id).unwrap().0, &"b");
        // Less than one whole block in common finds nothing.
        assert!(c.lookup(&toks(0..10)).is_none());
        assert!(c.lookup(&toks(500..600)).is_none());
    }

    #[test]
    fn a_longer_turn_supersedes_its_prefix_and_covered_tokens_are_not_saved_twice() {
        let mut c = HostCache::new(1 << 20);
        assert!(c.insert(toks(0..32), 1, 100));
        assert!(c.covers(&toks(0..32)) && c.covers(&toks(0..16)));
        assert!(!c.insert(toks(0..20), 2, 100), "covered by the first");
        assert!(c.insert(toks(0..64), 3, 100));
        assert_eq!(c.counts().entries, 1, "the 32-token entry was a prefix of the 64-token one");
        assert_eq!(c.counts().bytes, 100);
        assert!(!c.insert(toks(0..8), 4, 1), "shorter than a block");
    }

    #[test]
    fn never_holds_more_than_its_budget_and_evicts_the_least_recently_used() {
        let mut c = HostCache::new(250);
        assert!(c.insert(toks(0..16), 'a', 100));
        assert!(c.insert(toks(100..116), 'b', 100));
        let (id, _) = c.lookup(&toks(0..20)).unwrap();
        c.take_for_restore(id); // `a` is now the most recently used
        assert!(c.insert(toks(200..216), 'c', 100));
        let counts = c.counts();
        assert_eq!((counts.entries, counts.bytes, counts.evictions), (2, 200, 1));
        assert!(c.lookup(&toks(100..116)).is_none(), "b was least recently used");
        assert!(c.lookup(&toks(0..16)).is_some());
        assert!(!c.insert(toks(300..316), 'd', 251), "larger than the whole budget");
        assert!(c.counts().bytes <= 250);
        c.set_budget(150);
        assert_eq!((c.counts().entries, c.counts().bytes), (1, 100), "a smaller budget evicts down to it");
        assert!(c.lookup(&toks(200..216)).is_some(), "keeping the most recently used");
    }

    #[test]
    fn copies_of_a_shared_prompt_go_before_another_prompt() {
        // Two system prompts of 64 tokens; each question adds 16. Room for three entries.
        let question = |system: u32, q: u32| -> Vec<TokenId> { (system..system + 64).chain(q..q + 16).collect() };
        let mut c = HostCache::new(300);
        assert!(c.insert(question(1000, 0), "b1", 100));
        assert!(c.insert(question(0, 100), "a1", 100));
        assert!(c.insert(question(0, 200), "a2", 100));
        // Plain LRU would drop b1, the oldest, and with it the only copy of prompt b.
        assert!(c.insert(question(0, 300), "a3", 100));
        let (id, n) = c.lookup(&question(1000, 500)).expect("prompt b is still held");
        assert_eq!((n, c.take_for_restore(id).unwrap().0), (64, &"b1"));
        assert!(c.lookup(&question(0, 100)).is_some_and(|(_, n)| n == 64), "a1's own tail went with it");
        assert_eq!(c.counts().evictions, 1);
        // c1 drops the other copy, a2; then, with no copies left, d1 drops the least
        // recently used: a3, as b1 was just restored.
        assert!(c.insert(question(2000, 0), "c1", 100));
        assert!(c.insert(question(3000, 0), "d1", 100));
        assert!(c.lookup(&question(0, 0)).is_none(), "prompt a went last");
        assert!(c.lookup(&question(1000, 0)).is_some() && c.lookup(&question(2000, 0)).is_some());
        assert_eq!(c.counts().entries, 3);
    }

    #[test]
    fn what_the_slots_hold_goes_first_and_an_old_tail_never_pushes_out_another_prompt() {
        let question = |system: u32, q: u32| -> Vec<TokenId> { (system..system + 64).chain(q..q + 16).collect() };
        let in_slots = |tokens: &[TokenId]| -> HashSet<u64> { block_hashes(tokens).into_iter().collect() };
        let mut c = HostCache::new(300);
        assert!(c.insert(question(0, 100), "a1", 100));
        assert!(c.insert(question(1000, 0), "b1", 100));
        assert!(c.insert(question(2000, 0), "c1", 100));
        // A slot holds prompt b (its system prompt, 64 of b1's 80 tokens): b1 goes first,
        // though a1 is older.
        assert!(c.insert_beside(question(3000, 0), "d1", 100, &in_slots(&question(1000, 900)[..64])));
        assert!(c.lookup(&question(1000, 0)).is_none() && c.lookup(&question(0, 100)).is_some());
        // A slot reused in place for prompt e's next question keeps e's system prompt: the
        // old question's tail (e1) is saved only if that evicts nothing but copies. Here
        // room would cost a1, c1 or d1, each the only copy of its prompt.
        let e_kept = in_slots(&question(4000, 0)[..64]);
        assert!(!c.insert_beside(question(4000, 0), "e1", 100, &e_kept));
        assert_eq!((c.counts().entries, c.counts().evictions), (3, 1));
        // With room to spare, it is kept.
        c.set_budget(400);
        assert!(c.insert_beside(question(4000, 0), "e1", 100, &e_kept));
        // Where the slot keeps prompt a, a1 is a copy too: the tail of a's next question
        // takes a1's place.
        let a_kept = in_slots(&question(0, 200)[..64]);
        assert!(c.insert_beside(question(0, 200), "a2", 100, &a_kept));
        assert!(c.lookup(&question(0, 100)).is_some_and(|(_, n)| n == 64), "a1 went, a2 came");
        assert_eq!(c.counts().entries, 4);
    }
}
