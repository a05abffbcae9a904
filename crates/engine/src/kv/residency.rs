//! KV residency: which tokens' KV cells each slot holds, which prefixes are saved in host
//! memory, and which slots are mid-copy; and the reuse policy over them: where a new
//! request's longest cached prefix comes from (its slot, another slot's KV stream, or a
//! state saved in host memory), and saving a slot's content to host memory before it is
//! overwritten, unless another slot keeps it. Apart from the batching loop because it is a policy of its own: what is
//! worth copying, restoring or saving. Running sequences are the scheduler's; what they
//! hold is read from them (`Sequence::kv_tokens`).

use std::collections::HashSet;

use crate::kv::host_cache::{block_hashes, HostCache, PrefixId, COPY_SHARE};
use crate::kv::kept_prefixes::Lease;
use crate::kv::prefix_index::{reusable, PrefixCache};
use crate::request::sequence::Sequence;
use crate::runtime::{Executor, TokenId};
use crate::stats::EngineStats;
use rillm_backend::PrefixCacheFlush;

/// Copying another slot's KV stream costs about as much as prefilling a few tokens; below
/// this many extra reusable tokens it is not worth it.
const MIN_COPY_GAIN: usize = 8;

/// Restoring a saved state costs a copy of its whole KV; below this many extra reusable
/// tokens over what the slots offer, prefilling them is as cheap.
const MIN_RESTORE_GAIN: usize = 16;

/// A slot's content is saved to the host tier before it is overwritten only if at least
/// this many of its tokens would otherwise be lost.
const MIN_SAVE_TOKENS: usize = 32;

/// A slot's end of a pending KV copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyEnd {
    Source,
    Target,
}

/// The running sequences, by slot (`None`: idle).
pub(crate) type Slots = [Option<Sequence>];

pub(crate) struct KvResidency<S> {
    prefix_caching: bool,
    /// What idle slots hold (a running slot's entry is stale until it is released).
    idle: PrefixCache,
    /// KV states saved from slots before they were overwritten (`None`: tier off).
    host: Option<HostCache<S>>,
    host_budget: usize,
    /// Each slot's part in a KV copy not yet carried out: llama.cpp copies stream buffers
    /// at the next decode, so a target's buffer holds nothing worth saving until then, and
    /// neither end may be restored into.
    copy_pending: Vec<Option<CopyEnd>>,
    /// What the slots or the host tier hold changed since `take_changed` last said so.
    changed: bool,
    /// Where the host tier goes when the engine stops (`kv::kept_prefixes`).
    kept: Option<Lease<S>>,
}

impl<S> KvResidency<S> {
    pub fn new(slots: usize, prefix_caching: bool, host_bytes: usize, stats: &EngineStats) -> Self {
        let host_budget = if prefix_caching { host_bytes } else { 0 };
        stats.set_host_cache(host_budget, Default::default());
        Self {
            prefix_caching,
            idle: PrefixCache::new(slots),
            host: (host_budget > 0).then(|| HostCache::new(host_budget)),
            host_budget,
            copy_pending: vec![None; slots],
            changed: false,
            kept: None,
        }
    }

    /// Starts the host tier from `cache` (what the model's last engine left), if any, and
    /// hands the tier back through `lease` at [`KvResidency::hand_back`].
    pub fn keeping(&mut self, lease: Lease<S>, cache: Option<HostCache<S>>, stats: &EngineStats) {
        if let (Some(host), Some(mut cache)) = (self.host.as_mut(), cache) {
            cache.set_budget(self.host_budget);
            tracing::info!(
                entries = cache.counts().entries,
                bytes = cache.counts().bytes,
                "prefix cache kept from the model's last engine"
            );
            *host = cache;
            stats.set_host_cache(self.host_budget, host.counts());
            self.changed = true;
        }
        self.kept = Some(lease);
    }

    /// The engine is stopping (nothing runs): what idle slots hold is saved to the host
    /// tier, and the tier handed to the keeper for the model's next engine.
    pub fn hand_back<E: Executor<Snapshot = S>>(&mut self, executor: &mut E, stats: &EngineStats, slots: &Slots) {
        let Some(lease) = self.kept.take() else { return };
        for slot in (0..slots.len()).filter(|&s| slots[s].is_none()) {
            self.preserve(executor, stats, slot, 0, None);
        }
        if let Some(cache) = self.host.take() {
            tracing::info!(
                entries = cache.counts().entries,
                bytes = cache.counts().bytes,
                "prefix cache kept for the model's next engine"
            );
            lease.hand_back(cache);
        }
    }

    /// Forgets every prefix no running sequence uses: idle slots' cells and the host tier.
    /// A slot with a KV copy pending keeps its cells: the next decode reads or writes them.
    pub fn flush<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        slots: &Slots,
    ) -> PrefixCacheFlush {
        let mut flushed = PrefixCacheFlush::default();
        for (slot, running) in slots.iter().enumerate() {
            if running.is_some() {
                flushed.running += 1;
            } else if self.copy_pending[slot].is_none() && !self.idle.held(slot).is_empty() {
                executor.truncate_sequence(slot, 0);
                self.idle.clear(slot);
                flushed.slots += 1;
            }
        }
        if let Some(host) = self.host.as_mut() {
            let dropped = host.clear();
            (flushed.host_entries, flushed.host_bytes) = (dropped.entries as u64, dropped.bytes as u64);
            stats.set_host_cache(self.host_budget, host.counts());
        }
        self.changed = true;
        flushed
    }

    /// The free slot a new sequence with `prompt` takes, by these in turn:
    /// - not one with a KV copy pending when another is free: it cannot be restored into
    ///   before the next decode, and an idle donor keeps its prefix in place;
    /// - one that leaves the running slots in the fewest runs of consecutive slots: llama.cpp
    ///   makes a pass over the weights per run (`runtime::ubatch_passes`);
    /// - the one already holding most of `prompt`: it is reused in place, where taking
    ///   another slot would copy it there and leave two copies of one prefix;
    /// - one whose content is kept elsewhere (another slot or the host tier): overwriting
    ///   it loses nothing, and nothing has to be saved;
    /// - the lowest.
    pub fn free_slot(&self, slots: &Slots, prompt: &[TokenId]) -> Option<usize> {
        let free: Vec<usize> = (0..slots.len()).filter(|&s| slots[s].is_none()).collect();
        let settled: Vec<usize> = free.iter().copied().filter(|&s| self.copy_pending[s].is_none()).collect();
        let candidates = if settled.is_empty() { free } else { settled };
        let fewest_runs = candidates.iter().map(|&s| runs_with(slots, s)).min()?;
        candidates.into_iter().filter(|&s| runs_with(slots, s) == fewest_runs).min_by_key(|&s| {
            let own = reusable(self.idle.held(s).iter().copied(), prompt);
            let own = if own >= MIN_COPY_GAIN { own } else { 0 };
            (std::cmp::Reverse(own), !self.kept_elsewhere(slots, s), s)
        })
    }

    /// Whether overwriting idle `slot` loses nothing worth keeping: it holds little, or the
    /// host tier or another slot holds (most of) the same.
    fn kept_elsewhere(&self, slots: &Slots, slot: usize) -> bool {
        let held = self.idle.held(slot);
        held.len() < MIN_SAVE_TOKENS
            || self.host.as_ref().is_some_and(|cache| cache.covers(held))
            || self.held_by_another_slot(slots, slot, held)
    }

    /// Puts the longest cached prefix of `prompt` into `slot` and returns its length: what
    /// the slot already holds, a copy of another slot's cells, or a state restored from the
    /// host tier, whichever reuses most for its cost. What the slot held is saved to the
    /// host tier first if it is about to be lost.
    pub fn load_prefix<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        slots: &Slots,
        slot: usize,
        prompt: &[TokenId],
    ) -> usize {
        let (reused, source) = self.load_longest_prefix(executor, stats, slots, slot, prompt);
        // Where each prompt's prefix came from, and which prefix it was (a hash of its first
        // tokens, never the text): enough to tell, from a replica's debug log, a prefix this
        // replica lost from one it never saw.
        tracing::debug!(
            slot,
            prompt = prompt.len(),
            reused,
            source = source.as_str(),
            prefix = %PrefixId::of(prompt),
            "prefix reuse"
        );
        reused
    }

    /// [`KvResidency::load_prefix`], saying where the prefix came from.
    fn load_longest_prefix<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        slots: &Slots,
        slot: usize,
        prompt: &[TokenId],
    ) -> (usize, PrefixSource) {
        self.changed = true;
        let own = reusable(self.idle.held(slot).iter().copied(), prompt);
        if !self.prefix_caching {
            return (own, PrefixSource::Slot);
        }
        let donor = self.best_donor(slots, prompt, slot).filter(|&(_, shared)| shared >= own + MIN_COPY_GAIN);
        let in_slots = donor.map_or(own, |(_, shared)| shared);
        let restorable = self.host.as_ref().and_then(|c| c.lookup(prompt));
        let restore = restorable
            .filter(|&(_, shared)| shared >= in_slots + MIN_RESTORE_GAIN && self.copy_pending[slot].is_none());
        let keep = if donor.is_some() || restore.is_some() { 0 } else { own };
        if let (Some((id, _)), Some(cache)) = (restore, self.host.as_mut()) {
            // Saving what the slot holds must not evict the entry about to be restored.
            cache.touch(id);
        }
        self.preserve(executor, stats, slot, keep, Some(slots));
        if let Some((id, shared)) = restore {
            let restored = self.restore(executor, stats, slot, id, shared);
            return (if restored { shared } else { 0 }, PrefixSource::Host);
        }
        match donor {
            Some((donor, shared)) => {
                executor.copy_sequence(donor, slot);
                self.mark_copy(donor, slot);
                self.idle.store(slot, slot_tokens(&self.idle, slots, donor));
                (shared, PrefixSource::OtherSlot)
            }
            None => (own, PrefixSource::Slot),
        }
    }

    /// `slot` is about to receive a copy of another sequence's KV (a fork of `n` choices):
    /// what it held is saved if worth it, then forgotten.
    pub fn clear_for_copy<E: Executor<Snapshot = S>>(&mut self, executor: &mut E, stats: &EngineStats, slot: usize) {
        self.preserve(executor, stats, slot, 0, None);
        executor.truncate_sequence(slot, 0);
        self.idle.clear(slot);
        self.changed = true;
    }

    /// Moves a running sequence's KV from `from` down to the free slot `to`; `from` keeps
    /// its cells and becomes an idle slot caching `tokens`.
    pub fn move_sequence<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        from: usize,
        to: usize,
        tokens: Vec<TokenId>,
    ) {
        self.preserve(executor, stats, to, 0, None);
        executor.move_sequence(from, to);
        self.mark_copy(from, to);
        if self.prefix_caching {
            self.idle.store(from, tokens);
        } else {
            executor.truncate_sequence(from, 0);
        }
        self.idle.clear(to);
        self.changed = true;
    }

    /// A sequence left `slot`: its cells stay as an idle slot's cache of `tokens`, unless
    /// they cannot be trusted (`failed`: after a failed decode) or caching is off.
    pub fn release<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        slot: usize,
        tokens: Vec<TokenId>,
        failed: bool,
    ) {
        if failed || !self.prefix_caching {
            executor.truncate_sequence(slot, 0);
            self.idle.clear(slot);
        } else {
            self.idle.store(slot, tokens);
        }
        self.changed = true;
    }

    /// Records a copy from `source` to `target` that the next decode carries out; a slot
    /// that is already a target stays one (its buffer is not valid before the decode either).
    pub fn mark_copy(&mut self, source: usize, target: usize) {
        if self.copy_pending[source].is_none() {
            self.copy_pending[source] = Some(CopyEnd::Source);
        }
        self.copy_pending[target] = Some(CopyEnd::Target);
    }

    /// A decode ran: llama.cpp carried out the pending copies at its start.
    pub fn copies_done(&mut self) {
        self.copy_pending.iter_mut().for_each(|p| *p = None);
    }

    /// Whether what is held changed since the last call.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// Chained block hashes of every prompt prefix held in KV: the host tier's entries,
    /// idle slots' contents and running sequences' prompts.
    pub fn held_blocks(&self, slots: &Slots) -> HashSet<u64> {
        let mut blocks: HashSet<u64> = self.host.iter().flat_map(HostCache::held_block_hashes).collect();
        for (slot, seq) in slots.iter().enumerate() {
            let tokens = seq.as_ref().map_or(self.idle.held(slot), |seq| &seq.request().prompt[..]);
            blocks.extend(block_hashes(tokens));
        }
        blocks
    }

    /// Saves what `slot` holds to the host tier before its cells past `keep` are lost, when
    /// that is worth it ([`KvResidency::worth_saving`]).
    fn preserve<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        slot: usize,
        keep: usize,
        slots: Option<&Slots>,
    ) {
        if !self.worth_saving(slot, keep, slots) {
            return;
        }
        let in_slots = slots.map(|slots| self.blocks_in_slots(slots, slot, keep)).unwrap_or_default();
        let (Some(cache), held) = (self.host.as_mut(), self.idle.held(slot)) else { return };
        match executor.save_sequence(slot) {
            Ok((state, bytes)) => {
                let kept = cache.insert_beside(held.to_vec(), state, bytes, &in_slots);
                tracing::debug!(slot, tokens = held.len(), kept, prefix = %PrefixId::of(held), "host tier saves");
                self.changed |= kept;
                stats.set_host_cache(self.host_budget, cache.counts());
            }
            Err(error) => tracing::warn!(%error, slot, "could not save a slot's KV to the host cache"),
        }
    }

    /// Whether the host tier should keep what `slot` holds: not when that is little beyond
    /// `keep`, already saved, mid-copy, or mostly held by another of `slots` (given where
    /// the other slots stay as they are): a tenant's questions fill several slots with
    /// copies of its system prompt, and saving each would push other prompts out of the
    /// tier while the slot left keeps this one (it is saved in turn before it is overwritten).
    fn worth_saving(&self, slot: usize, keep: usize, slots: Option<&Slots>) -> bool {
        let Some(cache) = self.host.as_ref() else { return false };
        let held = self.idle.held(slot);
        // A copy's source still holds its own cells (the copy reads them at the next decode),
        // so an idle donor about to be overwritten is saved like any other slot.
        let copy_target = self.copy_pending[slot] == Some(CopyEnd::Target);
        held.len() >= keep + MIN_SAVE_TOKENS
            && !copy_target
            && !cache.covers(held)
            && !slots.is_some_and(|slots| self.held_by_another_slot(slots, slot, held))
    }

    /// Chained block hashes of what the slots hold once `slot` keeps only its first `keep`
    /// tokens: the host tier counts an entry they mostly hold as a copy.
    fn blocks_in_slots(&self, slots: &Slots, slot: usize, keep: usize) -> HashSet<u64> {
        let held = self.idle.held(slot);
        let mut blocks: HashSet<u64> = block_hashes(&held[..keep.min(held.len())]).into_iter().collect();
        for other in (0..slots.len()).filter(|&s| s != slot) {
            blocks.extend(block_hashes(&slot_tokens(&self.idle, slots, other)));
        }
        blocks
    }

    /// Whether another slot, running or idle, holds at least [`COPY_SHARE`] of `held`.
    fn held_by_another_slot(&self, slots: &Slots, slot: usize, held: &[TokenId]) -> bool {
        let enough = (COPY_SHARE * held.len() as f64).ceil() as usize;
        (0..slots.len()).filter(|&s| s != slot).any(|s| self.reusable_from(slots, s, held) >= enough)
    }

    /// How much of `tokens` slot `s`'s cells can give, running or idle.
    fn reusable_from(&self, slots: &Slots, s: usize, tokens: &[TokenId]) -> usize {
        match &slots[s] {
            Some(seq) => reusable(seq.kv_tokens(), tokens),
            None => reusable(self.idle.held(s).iter().copied(), tokens),
        }
    }

    /// Restores host-tier entry `id` into `slot`; on failure the slot is left empty and the
    /// prompt is prefilled in full.
    fn restore<E: Executor<Snapshot = S>>(
        &mut self,
        executor: &mut E,
        stats: &EngineStats,
        slot: usize,
        id: u64,
        shared: usize,
    ) -> bool {
        let Some((state, tokens)) = self.host.as_mut().and_then(|c| c.take_for_restore(id)) else {
            self.idle.clear(slot);
            return false;
        };
        let started = std::time::Instant::now();
        let restored = executor.restore_sequence(slot, state);
        stats.record_host_restore(shared, started.elapsed(), restored.is_ok());
        match restored {
            Ok(()) => {
                let tokens = tokens.to_vec();
                self.idle.store(slot, tokens);
                true
            }
            Err(error) => {
                tracing::warn!(%error, slot, "restoring a saved prefix failed; prefilling instead");
                executor.truncate_sequence(slot, 0);
                self.idle.clear(slot);
                false
            }
        }
    }

    /// The other slot, running or idle, whose KV shares the longest reusable prefix with
    /// `prompt`: a cold slot can copy it instead of recomputing a shared system prompt.
    fn best_donor(&self, slots: &Slots, prompt: &[TokenId], except: usize) -> Option<(usize, usize)> {
        (0..slots.len())
            .filter(|&s| s != except)
            .map(|s| (s, self.reusable_from(slots, s, prompt)))
            .max_by_key(|&(s, shared)| (shared, std::cmp::Reverse(s)))
            .filter(|&(_, shared)| shared > 0)
    }
}

/// How many runs of consecutive busy slots there would be with `extra` busy too.
fn runs_with(slots: &Slots, extra: usize) -> usize {
    let busy = |s: usize| s == extra || slots[s].is_some();
    (0..slots.len()).filter(|&s| busy(s) && (s == 0 || !busy(s - 1))).count()
}

/// Where a new sequence's reused prefix came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PrefixSource {
    /// The slot's own cells (possibly none of them).
    Slot,
    /// A copy of another slot's cells.
    OtherSlot,
    /// A state saved in host memory.
    Host,
}

impl PrefixSource {
    fn as_str(self) -> &'static str {
        match self {
            PrefixSource::Slot => "slot",
            PrefixSource::OtherSlot => "other_slot",
            PrefixSource::Host => "host",
        }
    }
}

/// Tokens whose KV cells `slot` holds, running or idle.
fn slot_tokens(idle: &PrefixCache, slots: &Slots, slot: usize) -> Vec<TokenId> {
    match &slots[slot] {
        Some(seq) => seq.kv_tokens().collect(),
        None => idle.held(slot).to_vec(),
    }
}
