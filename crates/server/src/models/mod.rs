//! Several models behind one endpoint: which models this server knows, which are loaded,
//! loading one when a request names it, and unloading the least recently used past
//! `--models-max`.
//!
//! The server knows models by name only: loading is the [`ModelLoader`]'s (the CLI starts
//! an engine), so the HTTP layer still compiles no llama.cpp. A request binds its model for
//! its whole life ([`BoundModel`]): the engine stays up, and the model counts as busy,
//! until the request's last event is sent. Unloading therefore drains: the registry lets
//! go of the engine at once, and the engine stops when the last request using it ends.

mod entry;
mod memory;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rillm_backend::Backend;

use crate::error::ApiError;
use entry::{Acquired, ModelEntry};
pub use entry::{BoundModel, ModelStatus};

/// What SGLang's model gateway (and vllm-router) puts in `model` when a client named none
/// (its `UNKNOWN_MODEL_ID`): read as no name, unless a model is called that.
const ROUTER_UNNAMED_MODEL: &str = "unknown";

/// The name a request's `model` gives: none when it is empty, or the router's stand-in for
/// no name that `serves` knows no model by. One rule for one model and for several.
pub fn named_model(requested: Option<&str>, serves: impl Fn(&str) -> bool) -> Option<&str> {
    requested.filter(|&name| !name.is_empty() && (name != ROUTER_UNNAMED_MODEL || serves(name)))
}

/// Starts a model's engine, by name. Blocking: it takes seconds.
pub trait ModelLoader: Send + Sync + 'static {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>, String>;
}

/// A model the server may serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSpec {
    pub name: String,
    /// Other names requests may use for it.
    pub aliases: Vec<String>,
    /// Never unloaded to make room.
    pub pinned: bool,
    /// Its file's size (0: unknown yet): the least its load takes (`--models-memory-mib`).
    pub file_bytes: u64,
    /// Its tool-call format, over `--tool-call-parser` (`--models-config`).
    pub tool_call_parser: Option<rillm_backend::ToolCallFormat>,
    /// How its thought is read, over `--reasoning-parser` (`--models-config`).
    pub reasoning_parser: Option<crate::ReasoningParser>,
}

/// A model as the registry has it now.
pub struct ModelState {
    pub spec: ModelSpec,
    pub status: ModelStatus,
    /// Its engine, while loaded.
    pub backend: Option<Arc<dyn Backend>>,
    /// What it took in memory when it last loaded (`memory`), once it has.
    pub measured_bytes: Option<u64>,
}

/// How many models may be loaded and how long a request waits for a load.
#[derive(Debug, Clone, Copy)]
pub struct ModelLimits {
    /// Loaded models at most (`--models-max`); the least recently used idle one makes room.
    pub max_loaded: Option<usize>,
    /// How long a request waits for its model to load before a 503 (`--load-timeout`).
    pub load_timeout: Duration,
    /// A loaded model no request used for this long is unloaded (`--idle-unload`);
    /// probes and `/metrics` are not uses.
    pub idle_unload: Option<Duration>,
    /// The loaded models' memory at most (`--models-memory-mib`), as `memory` measures it.
    pub memory_bytes: Option<u64>,
    /// Each model's prefix-cache RAM budget, counted against `memory_bytes` in full.
    pub prefix_cache_bytes: u64,
}

/// How often a load waiting for room looks again.
const ROOM_POLL: Duration = Duration::from_millis(20);

pub struct ModelRegistry {
    entries: Vec<Arc<ModelEntry>>,
    loader: Arc<dyn ModelLoader>,
    limits: ModelLimits,
    clock: Instant,
    /// Held by a load from making room to its end: loads run one at a time, so each one's
    /// room is counted with the one before it loaded (two at once would each wait for the
    /// other's room).
    one_load: std::sync::Mutex<()>,
}

impl ModelRegistry {
    pub fn new(specs: Vec<ModelSpec>, loader: Arc<dyn ModelLoader>, limits: ModelLimits) -> Self {
        let entries = specs.into_iter().map(|spec| Arc::new(ModelEntry::new(spec))).collect();
        Self { entries, loader, limits, clock: Instant::now(), one_load: std::sync::Mutex::new(()) }
    }

    /// The model a request names (or, with one model only, the one it need not name).
    fn find(&self, requested: Option<&str>) -> Result<&Arc<ModelEntry>, ApiError> {
        match named_model(requested, |name| self.entries.iter().any(|e| e.answers_to(name))) {
            None if self.entries.len() == 1 => Ok(&self.entries[0]),
            None => Err(ApiError::invalid(
                "model",
                format!("`model` is required: this server serves {}", self.names().join(", ")),
            )),
            Some(name) => {
                self.entries.iter().find(|e| e.answers_to(name)).ok_or_else(|| ApiError::model_not_found(name))
            }
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.spec.name.clone()).collect()
    }

    /// The named model, loaded first if it is not (other requests for it wait for the
    /// same load), bound to the caller until the returned handle drops.
    pub async fn acquire(self: &Arc<Self>, requested: Option<&str>) -> Result<Arc<BoundModel>, ApiError> {
        let entry = Arc::clone(self.find(requested)?);
        let _waiting = entry.wait_for();
        let deadline = tokio::time::Instant::now() + self.limits.load_timeout;
        loop {
            let changed = entry.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match entry.try_bind(self.now_ms()) {
                Acquired::Bound(bound) => return Ok(bound),
                Acquired::Failed(reason) => {
                    return Err(ApiError::unavailable(format!("model `{}` failed to load: {reason}", entry.spec.name)))
                }
                Acquired::StartLoad => self.start_load(&entry),
                Acquired::Loading => {}
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Err(ApiError::unavailable(format!(
                    "model `{}` is still loading after {:?} (--load-timeout); retry later",
                    entry.spec.name, self.limits.load_timeout
                )));
            }
        }
    }

    /// Loads `entry` on the blocking pool, one load at a time, once there is room for it
    /// (`--models-max`): if every other loaded model is busy or pinned, the load waits for
    /// one to go idle, up to `--load-timeout`, rather than go past the limit.
    fn start_load(self: &Arc<Self>, entry: &Arc<ModelEntry>) {
        let (registry, entry) = (Arc::clone(self), Arc::clone(entry));
        tokio::task::spawn_blocking(move || {
            let _one_load = registry.one_load.lock().unwrap_or_else(|p| p.into_inner());
            if !registry.wait_for_room(&entry) {
                entry.abandon_load();
                return;
            }
            let started = Instant::now();
            let anon_before = memory::anon_resident_bytes();
            let loaded = registry.loader.load(&entry.spec.name);
            let seconds = started.elapsed().as_secs_f64();
            if let (Ok(_), Some(before), Some(after)) = (&loaded, anon_before, memory::anon_resident_bytes()) {
                entry.set_measured_bytes(entry.spec.file_bytes + after.saturating_sub(before));
            }
            match &loaded {
                Ok(_) => tracing::info!(model = %entry.spec.name, seconds, "model loaded"),
                Err(reason) => tracing::error!(model = %entry.spec.name, %reason, "model failed to load"),
            }
            crate::metrics::record_model_load(&entry.spec.name, loaded.is_ok(), seconds);
            entry.finish_load(loaded, registry.now_ms());
            // Measured now: if it takes more than its file said, idle models make room.
            registry.make_room(&entry);
        });
    }

    /// Makes room for `entry` (`make_room`), polling while the loaded models are busy;
    /// whether room came within `--load-timeout`.
    fn wait_for_room(&self, entry: &Arc<ModelEntry>) -> bool {
        let deadline = Instant::now() + self.limits.load_timeout;
        let mut said = false;
        while !self.make_room(entry) {
            if Instant::now() >= deadline {
                tracing::warn!(model = %entry.spec.name, "no loaded model went idle within --load-timeout: load given up");
                return false;
            }
            if !std::mem::replace(&mut said, true) {
                tracing::info!(model = %entry.spec.name, "the loaded models are busy or pinned: the load waits for one to go idle (--models-max)");
            }
            std::thread::sleep(ROOM_POLL);
        }
        true
    }

    /// Unloads least recently used idle, unpinned models other than `keep` until the loaded
    /// ones and `keep` fit under `--models-max` and `--models-memory-mib`; whether they do.
    /// Runs on the loading thread: a victim's engine is stopped before this returns, so the
    /// load's memory is measured without it.
    fn make_room(&self, keep: &Arc<ModelEntry>) -> bool {
        loop {
            let others: Vec<&Arc<ModelEntry>> =
                self.entries.iter().filter(|e| !Arc::ptr_eq(e, keep) && e.is_loaded()).collect();
            let count_fits = self.limits.max_loaded.is_none_or(|max| others.len() < max.max(1));
            let footprint = |e: &ModelEntry| e.footprint_bytes() + self.limits.prefix_cache_bytes;
            // A model larger than the whole budget still loads, alone.
            let memory_fits = others.is_empty()
                || self
                    .limits
                    .memory_bytes
                    .is_none_or(|budget| others.iter().map(|e| footprint(e)).sum::<u64>() + footprint(keep) <= budget);
            if count_fits && memory_fits {
                return true;
            }
            let victim = self
                .entries
                .iter()
                .filter(|e| !Arc::ptr_eq(e, keep) && e.is_evictable())
                .min_by_key(|e| e.last_used_ms());
            let Some(victim) = victim else { return false };
            tracing::info!(model = %victim.spec.name, for_model = %keep.spec.name, "unloading to make room");
            if victim.unload_now() {
                crate::metrics::record_model_unload(&victim.spec.name);
            }
        }
    }

    /// Unloads `name`: requests using it finish first (they keep its engine up).
    pub fn unload(&self, requested: &str) -> Result<bool, ApiError> {
        let entry = self.find(Some(requested))?;
        Ok(self.unload_entry(entry))
    }

    fn unload_entry(&self, entry: &ModelEntry) -> bool {
        let unloaded = entry.unload();
        if unloaded {
            crate::metrics::record_model_unload(&entry.spec.name);
        }
        unloaded
    }

    /// Unloads the loaded, unpinned models that no request used for `--idle-unload`;
    /// returns how many. Called every second by the server.
    pub fn unload_idle(&self) -> usize {
        let Some(idle) = self.limits.idle_unload else { return 0 };
        let now = self.now_ms();
        let idle_ms = idle.as_millis() as u64;
        let stale: Vec<&Arc<ModelEntry>> = self
            .entries
            .iter()
            .filter(|e| e.is_evictable() && now.saturating_sub(e.last_used_ms()) >= idle_ms)
            .collect();
        for entry in &stale {
            tracing::info!(model = %entry.spec.name, idle_s = idle.as_secs(), "unloading an idle model");
            self.unload_entry(entry);
        }
        stale.len()
    }

    /// Loads `name` now (`POST /models/load`), as a request for it would; a model that
    /// failed to load is tried again (requests for it get the failure until then, rather
    /// than each reading a broken file again).
    pub async fn load(self: &Arc<Self>, requested: &str) -> Result<(), ApiError> {
        let entry = self.find(Some(requested))?;
        if matches!(entry.status(), ModelStatus::Failed(_)) {
            self.unload_entry(entry);
        }
        self.acquire(Some(requested)).await.map(drop)
    }

    /// Every model with its status and, when loaded, its backend.
    pub fn statuses(&self) -> Vec<ModelState> {
        self.entries
            .iter()
            .map(|e| ModelState {
                spec: e.spec.clone(),
                status: e.status(),
                backend: e.backend(),
                measured_bytes: e.measured_bytes(),
            })
            .collect()
    }

    /// The loaded models' backends (metrics, health, shutdown).
    pub fn loaded(&self) -> Vec<Arc<dyn Backend>> {
        self.entries.iter().filter_map(|e| e.backend()).collect()
    }

    fn now_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }
}

#[cfg(test)]
mod tests;
