//! A model's host-tier prefix cache kept across its engine's stops.
//!
//! Whoever starts engines for a model (the server's model registry, which unloads an idle
//! model and loads it again on demand) holds one [`KeptPrefixes`] per model and passes it in
//! `EngineConfig::inherit`. An engine leases it at start and, stopping, hands back its host
//! tier plus what its idle slots held. The next engine for the same file starts from it, so
//! a model swapped back answers a recurring prompt from RAM instead of prefilling it again
//! (llama-server's router drops its children's caches with them: llama.cpp #28998). The
//! cache is tied to the model file's fingerprint: a file replaced between loads starts cold.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::kv::host_cache::HostCache;
use crate::stats::HostCacheCounts;

/// The kept cache, shared by the holder and the engine leasing it. Cheap to clone.
pub struct KeptPrefixes<S = llama_cpp_2::SeqState> {
    shared: Arc<Shared<S>>,
}

struct Shared<S> {
    state: Mutex<State<S>>,
    /// A lease ended: the next engine may take what it left.
    lease_ended: Condvar,
}

struct State<S> {
    kept: Option<Kept<S>>,
    /// An engine holds the cache: it is handed back when that engine stops.
    leased: bool,
}

struct Kept<S> {
    fingerprint: String,
    cache: HostCache<S>,
}

/// One engine's hold on the kept cache, from its start to its stop.
pub(crate) struct Lease<S> {
    shared: Arc<Shared<S>>,
    fingerprint: String,
}

impl<S> Clone for KeptPrefixes<S> {
    fn clone(&self) -> Self {
        Self { shared: Arc::clone(&self.shared) }
    }
}

impl<S> Default for KeptPrefixes<S> {
    fn default() -> Self {
        let state = Mutex::new(State { kept: None, leased: false });
        Self { shared: Arc::new(Shared { state, lease_ended: Condvar::new() }) }
    }
}

impl<S> std::fmt::Debug for KeptPrefixes<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptPrefixes").field("held", &self.counts()).finish()
    }
}

impl<S> KeptPrefixes<S> {
    /// What is kept between engines (nothing while an engine holds the cache).
    pub fn counts(&self) -> HostCacheCounts {
        self.shared.lock().kept.as_ref().map(|k| k.cache.counts()).unwrap_or_default()
    }

    /// Leases the cache to an engine of the model with this fingerprint, and the cache kept
    /// for it if there is one (one kept for other weights is dropped). The model's previous
    /// engine may still be stopping (its last requests drain first): its lease is waited
    /// for up to `wait`, then this engine starts without what that one leaves.
    pub(crate) fn lease(&self, fingerprint: String, wait: Duration) -> (Lease<S>, Option<HostCache<S>>) {
        let deadline = Instant::now() + wait;
        let mut state = self.shared.lock();
        while state.leased {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                tracing::warn!(
                    waited_s = wait.as_secs_f64(),
                    "the model's previous engine is still stopping: starting without its prefix cache"
                );
                break;
            }
            state = self.shared.lease_ended.wait_timeout(state, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        state.leased = true;
        let cache = state.kept.take().filter(|k| k.fingerprint == fingerprint).map(|k| k.cache);
        (Lease { shared: Arc::clone(&self.shared), fingerprint }, cache)
    }
}

impl<S> Shared<S> {
    fn lock(&self) -> MutexGuard<'_, State<S>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<S> Lease<S> {
    /// The engine stops: `cache` is kept for the model's next engine.
    pub(crate) fn hand_back(self, cache: HostCache<S>) {
        self.shared.lock().kept = Some(Kept { fingerprint: self.fingerprint.clone(), cache });
    }
}

impl<S> Drop for Lease<S> {
    /// Handed back or not (an engine that failed keeps nothing), the lease ends.
    fn drop(&mut self) {
        self.shared.lock().leased = false;
        self.shared.lease_ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_of(bytes: usize) -> HostCache<&'static str> {
        let mut cache = HostCache::new(1 << 20);
        assert!(cache.insert((0..32).collect(), "state", bytes));
        cache
    }

    #[test]
    fn a_cache_comes_back_only_for_the_same_model() {
        let kept: KeptPrefixes<&str> = KeptPrefixes::default();
        let (lease, none) = kept.lease("model-a".into(), Duration::ZERO);
        assert!(none.is_none());
        lease.hand_back(cache_of(100));
        assert_eq!(kept.counts().entries, 1);
        let (lease, back) = kept.clone().lease("model-a".into(), Duration::ZERO);
        assert_eq!(back.expect("same model").counts().bytes, 100);
        assert_eq!(kept.counts().entries, 0, "leased: the engine holds it now");
        lease.hand_back(cache_of(100));
        let (_lease, other) = kept.lease("model-b".into(), Duration::ZERO);
        assert!(other.is_none(), "another file's states are not restored");
        assert_eq!(kept.counts().entries, 0, "and are dropped");
    }

    #[test]
    fn the_next_engine_waits_for_the_stopping_one_to_hand_back() {
        let kept: KeptPrefixes<&str> = KeptPrefixes::default();
        let (stopping, _) = kept.lease("m".into(), Duration::ZERO);
        let handed = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stopping.hand_back(cache_of(7));
        });
        let (_next, cache) = kept.lease("m".into(), Duration::from_secs(10));
        assert_eq!(cache.expect("what the stopping engine left").counts().bytes, 7);
        handed.join().expect("joined");

        // A lease that ends without handing back (a failed engine) frees the next at once.
        let kept: KeptPrefixes<&str> = KeptPrefixes::default();
        drop(kept.lease("m".into(), Duration::ZERO).0);
        let started = Instant::now();
        let (_lease, cache) = kept.lease("m".into(), Duration::from_secs(10));
        assert!(cache.is_none() && started.elapsed() < Duration::from_secs(5));
        // One never handed back is waited for only so long.
        let (_next, cache) = kept.lease("m".into(), Duration::from_millis(50));
        assert!(cache.is_none());
    }
}
