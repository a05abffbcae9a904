//! Prefix reuse for the scheduler: where a new request's longest cached prefix comes from
//! (its slot, another slot's KV stream, or a state saved in host memory), and saving a
//! slot's content to host memory before it is overwritten. Apart from the batching loop
//! because it is a policy of its own: what is worth copying, restoring or saving.

use std::collections::HashSet;

use super::{CopyEnd, Scheduler};
use crate::host_cache::{block_hashes, HostCache};
use crate::prefix_cache::reusable;
use crate::runtime::{Executor, TokenId};

/// Copying another slot's KV stream costs about as much as prefilling a few tokens; below
/// this many extra reusable tokens it is not worth it.
const MIN_COPY_GAIN: usize = 8;

/// Restoring a saved state costs a copy of its whole KV; below this many extra reusable
/// tokens over what the slots offer, prefilling them is as cheap.
const MIN_RESTORE_GAIN: usize = 16;

/// A slot's content is saved to the host tier before it is overwritten only if at least
/// this many of its tokens would otherwise be lost.
const MIN_SAVE_TOKENS: usize = 32;

impl<E: Executor> Scheduler<E> {
    /// Puts the longest cached prefix of `prompt` into `slot` and returns its length: what
    /// the slot already holds, a copy of another slot's cells, or a state restored from the
    /// host tier, whichever reuses most for its cost. What the slot held is saved to the
    /// host tier first if it is about to be lost.
    pub(super) fn load_prefix(&mut self, slot: usize, prompt: &[TokenId]) -> usize {
        let own = reusable(self.prefix_cache.held(slot).iter().copied(), prompt);
        if !self.prefix_caching {
            return own;
        }
        let donor = self.best_donor(prompt, slot).filter(|&(_, shared)| shared >= own + MIN_COPY_GAIN);
        let in_slots = donor.map_or(own, |(_, shared)| shared);
        let restorable = self.host_cache.as_ref().and_then(|c| c.lookup(prompt));
        let restore = restorable
            .filter(|&(_, shared)| shared >= in_slots + MIN_RESTORE_GAIN && self.copy_pending[slot].is_none());
        let keep = if donor.is_some() || restore.is_some() { 0 } else { own };
        if let (Some((id, _)), Some(cache)) = (restore, self.host_cache.as_mut()) {
            // Saving what the slot holds must not evict the entry about to be restored.
            cache.touch(id);
        }
        self.preserve(slot, keep);
        if let Some((id, shared)) = restore {
            if self.restore(slot, id, shared) {
                return shared;
            }
            return 0;
        }
        match donor {
            Some((donor, shared)) => {
                self.executor.copy_sequence(donor, slot);
                self.mark_copy(donor, slot);
                let donor_tokens = self.slot_tokens(donor);
                self.prefix_cache.store(slot, donor_tokens);
                shared
            }
            None => own,
        }
    }

    /// Saves what `slot` holds to the host tier before its cells past `keep` are lost,
    /// unless that is little, already saved, or mid-copy.
    pub(super) fn preserve(&mut self, slot: usize, keep: usize) {
        let Some(cache) = self.host_cache.as_mut() else { return };
        let held = self.prefix_cache.held(slot);
        // A copy's source still holds its own cells (the copy reads them at the next decode),
        // so an idle donor about to be overwritten is saved like any other slot.
        let copy_target = self.copy_pending[slot] == Some(CopyEnd::Target);
        if held.len() < keep + MIN_SAVE_TOKENS || copy_target || cache.covers(held) {
            return;
        }
        match self.executor.save_sequence(slot) {
            Ok((state, bytes)) => {
                self.held_changed |= cache.insert(held.to_vec(), state, bytes);
                self.stats.set_host_cache(self.host_cache_budget, cache.counts());
            }
            Err(error) => tracing::warn!(%error, slot, "could not save a slot's KV to the host cache"),
        }
    }

    /// Restores host-tier entry `id` into `slot`; on failure the slot is left empty and the
    /// prompt is prefilled in full.
    pub(super) fn restore(&mut self, slot: usize, id: u64, shared: usize) -> bool {
        let Some((state, tokens)) = self.host_cache.as_mut().and_then(|c| c.take_for_restore(id)) else {
            self.prefix_cache.clear(slot);
            return false;
        };
        let started = std::time::Instant::now();
        let restored = self.executor.restore_sequence(slot, state);
        self.stats.record_host_restore(shared, started.elapsed(), restored.is_ok());
        match restored {
            Ok(()) => {
                let tokens = tokens.to_vec();
                self.prefix_cache.store(slot, tokens);
                true
            }
            Err(error) => {
                tracing::warn!(%error, slot, "restoring a saved prefix failed; prefilling instead");
                self.executor.truncate_sequence(slot, 0);
                self.prefix_cache.clear(slot);
                false
            }
        }
    }

    /// Records a copy from `source` to `target` that the next decode carries out; a slot
    /// that is already a target stays one (its buffer is not valid before the decode either).
    pub(super) fn mark_copy(&mut self, source: usize, target: usize) {
        if self.copy_pending[source].is_none() {
            self.copy_pending[source] = Some(CopyEnd::Source);
        }
        self.copy_pending[target] = Some(CopyEnd::Target);
    }

    /// Tokens whose KV cells `slot` holds, running or idle.
    pub(super) fn slot_tokens(&self, slot: usize) -> Vec<TokenId> {
        match &self.slots[slot] {
            Some(seq) => seq.kv_tokens().collect(),
            None => self.prefix_cache.held(slot).to_vec(),
        }
    }

    /// Chained block hashes of every prompt prefix held in KV: the host tier's entries,
    /// idle slots' contents and running sequences' prompts.
    pub(super) fn held_blocks(&self) -> HashSet<u64> {
        let mut blocks: HashSet<u64> = self.host_cache.iter().flat_map(HostCache::held_block_hashes).collect();
        for (slot, seq) in self.slots.iter().enumerate() {
            let tokens = seq.as_ref().map_or(self.prefix_cache.held(slot), |seq| &seq.request.prompt[..]);
            blocks.extend(block_hashes(tokens));
        }
        blocks
    }

    /// The other slot, running or idle, whose KV shares the longest reusable prefix with
    /// `prompt`: a cold slot can copy it instead of recomputing a shared system prompt.
    pub(super) fn best_donor(&self, prompt: &[TokenId], except: usize) -> Option<(usize, usize)> {
        (0..self.slots.len())
            .filter(|&s| s != except)
            .map(|s| {
                let shared = match &self.slots[s] {
                    Some(seq) => reusable(seq.kv_tokens(), prompt),
                    None => reusable(self.prefix_cache.held(s).iter().copied(), prompt),
                };
                (s, shared)
            })
            .max_by_key(|&(s, shared)| (shared, std::cmp::Reverse(s)))
            .filter(|&(_, shared)| shared > 0)
    }
}
