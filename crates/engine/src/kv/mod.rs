//! What the KV cache and host memory hold, and reusing it: an index of the prefixes idle
//! slots hold (`prefix_index`), KV states saved to host memory before a slot is overwritten
//! (`host_cache`) and kept across an engine's stops (`kept_prefixes`), and the policy over both (`residency`): where a new request's longest
//! cached prefix comes from, what is worth copying, restoring or saving. Running sequences
//! are the scheduler's; what they hold is read from them.

pub(crate) mod host_cache;
pub(crate) mod kept_prefixes;
pub(crate) mod prefix_index;
pub(crate) mod residency;
