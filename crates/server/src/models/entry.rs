//! One model the registry knows: its state (unloaded, loading, loaded, failed), when it was
//! last used, and the requests using it now.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rillm_backend::{Backend, Health};
use tokio::sync::Notify;

use super::ModelSpec;

/// What `/v1/models` says of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelStatus {
    Unloaded,
    Loading,
    Loaded,
    Failed(String),
}

impl ModelStatus {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Unloaded => "unloaded",
            Self::Loading => "loading",
            Self::Loaded => "loaded",
            Self::Failed(_) => "failed",
        }
    }
}

enum Slot {
    Unloaded,
    Loading,
    Loaded(Arc<dyn Backend>),
    Failed(String),
}

pub(super) struct ModelEntry {
    pub(super) spec: ModelSpec,
    slot: Mutex<Slot>,
    /// Woken when a load ends (loaded or failed).
    pub(super) changed: Notify,
    last_used_ms: AtomicU64,
    /// Requests bound to it now ([`BoundModel`]s alive).
    in_flight: Arc<AtomicUsize>,
    /// What it took in memory at its last load (0: not loaded yet; `models::memory`).
    measured_bytes: AtomicU64,
    /// Requests waiting in `acquire` for it: a model just loaded for them is theirs, not
    /// the next load's victim before they bind.
    waiting: AtomicUsize,
}

/// A request counted as waiting for its model while this lives.
pub(super) struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What binding a request to a model found.
pub(super) enum Acquired {
    Bound(Arc<BoundModel>),
    /// Nobody is loading it: the caller starts the load (the slot says `Loading` now).
    StartLoad,
    Loading,
    Failed(String),
}

impl ModelEntry {
    pub(super) fn new(spec: ModelSpec) -> Self {
        Self {
            spec,
            slot: Mutex::new(Slot::Unloaded),
            changed: Notify::new(),
            last_used_ms: AtomicU64::new(0),
            in_flight: Arc::new(AtomicUsize::new(0)),
            waiting: AtomicUsize::new(0),
            measured_bytes: AtomicU64::new(0),
        }
    }

    pub(super) fn set_measured_bytes(&self, bytes: u64) {
        self.measured_bytes.store(bytes, Ordering::Relaxed);
    }

    pub(super) fn measured_bytes(&self) -> Option<u64> {
        Some(self.measured_bytes.load(Ordering::Relaxed)).filter(|&b| b > 0)
    }

    /// Its memory for `--models-memory-mib`: as measured, else its file's size.
    pub(super) fn footprint_bytes(&self) -> u64 {
        self.measured_bytes().unwrap_or(self.spec.file_bytes)
    }

    /// Counts the caller as waiting for this model until the guard drops.
    pub(super) fn wait_for(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(&self.waiting)
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn answers_to(&self, name: &str) -> bool {
        self.spec.name == name || self.spec.aliases.iter().any(|a| a == name)
    }

    pub(super) fn try_bind(&self, now_ms: u64) -> Acquired {
        let mut slot = self.slot();
        match &*slot {
            Slot::Loaded(backend) if matches!(backend.health(), Health::Failed(_)) => {
                // Its engine died after loading (its requests got errors): a fresh one loads
                // for this request, as a supervisor would restart a one-model server.
                if let Slot::Loaded(dead) = std::mem::replace(&mut *slot, Slot::Loading) {
                    tracing::warn!(model = %self.spec.name, "the model's engine stopped on a fault: loading it again");
                    drop_when_idle(dead, Arc::clone(&self.in_flight));
                }
                Acquired::StartLoad
            }
            Slot::Loaded(backend) => {
                self.last_used_ms.store(now_ms, Ordering::Relaxed);
                Acquired::Bound(Arc::new(BoundModel::new(&self.spec, Arc::clone(backend), &self.in_flight)))
            }
            Slot::Loading => Acquired::Loading,
            Slot::Failed(reason) => Acquired::Failed(reason.clone()),
            Slot::Unloaded => {
                *slot = Slot::Loading;
                Acquired::StartLoad
            }
        }
    }

    /// The load ended; a loaded model counts as used now (its idle time starts here).
    pub(super) fn finish_load(&self, loaded: Result<Arc<dyn Backend>, String>, now_ms: u64) {
        self.last_used_ms.store(now_ms, Ordering::Relaxed);
        *self.slot() = match loaded {
            Ok(backend) => Slot::Loaded(backend),
            Err(reason) => Slot::Failed(reason),
        };
        self.changed.notify_waiters();
    }

    /// A load given up before it began (no room came within `--load-timeout`): unloaded
    /// again, so the next request tries anew.
    pub(super) fn abandon_load(&self) {
        let mut slot = self.slot();
        if matches!(*slot, Slot::Loading) {
            *slot = Slot::Unloaded;
        }
        drop(slot);
        self.changed.notify_waiters();
    }

    /// Lets go of the engine (requests bound to it keep it up until they end); a failed
    /// model is forgotten too, so the next request tries again. Returns whether it was
    /// loaded or failed.
    pub(super) fn unload(&self) -> bool {
        self.unload_with(drop_when_idle)
    }

    /// [`ModelEntry::unload`], stopping an idle engine on this (blocking) thread: its memory
    /// is back, and its prefix cache kept, before the caller loads another model.
    pub(super) fn unload_now(&self) -> bool {
        self.unload_with(|backend, in_flight| stop_when_idle(backend, &in_flight))
    }

    fn unload_with(&self, stop: impl FnOnce(Arc<dyn Backend>, Arc<AtomicUsize>)) -> bool {
        let previous = std::mem::replace(&mut *self.slot(), Slot::Unloaded);
        match previous {
            Slot::Loaded(backend) => {
                stop(backend, Arc::clone(&self.in_flight));
                true
            }
            Slot::Failed(_) => true,
            Slot::Loading => {
                // A load in progress finishes into the slot; put the marker back.
                *self.slot() = Slot::Loading;
                false
            }
            Slot::Unloaded => false,
        }
    }

    pub(super) fn status(&self) -> ModelStatus {
        match &*self.slot() {
            Slot::Unloaded => ModelStatus::Unloaded,
            Slot::Loading => ModelStatus::Loading,
            Slot::Loaded(backend) => match backend.health() {
                Health::Failed(reason) => ModelStatus::Failed(reason),
                _ => ModelStatus::Loaded,
            },
            Slot::Failed(reason) => ModelStatus::Failed(reason.clone()),
        }
    }

    pub(super) fn backend(&self) -> Option<Arc<dyn Backend>> {
        match &*self.slot() {
            Slot::Loaded(backend) => Some(Arc::clone(backend)),
            _ => None,
        }
    }

    pub(super) fn is_loaded(&self) -> bool {
        matches!(*self.slot(), Slot::Loaded(_))
    }

    /// Loaded, not pinned, and no request uses it or waits for it.
    pub(super) fn is_evictable(&self) -> bool {
        !self.spec.pinned
            && self.is_loaded()
            && self.in_flight.load(Ordering::SeqCst) == 0
            && self.waiting.load(Ordering::SeqCst) == 0
    }

    pub(super) fn last_used_ms(&self) -> u64 {
        self.last_used_ms.load(Ordering::Relaxed)
    }
}

/// Stops the engine once no request uses it, on a blocking thread (joining the engine
/// thread blocks): the registry's handle is kept until then, so it is the last one.
fn drop_when_idle(backend: Arc<dyn Backend>, in_flight: Arc<AtomicUsize>) {
    let stop = move || stop_when_idle(backend, &in_flight);
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(stop)),
        Err(_) => stop(),
    }
}

/// Stops `backend` once no request uses it (blocks until then).
fn stop_when_idle(backend: Arc<dyn Backend>, in_flight: &AtomicUsize) {
    while in_flight.load(Ordering::SeqCst) > 0 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    backend.shutdown();
    drop(backend);
}

/// A model bound to one request: its engine stays up, and the model counts as in use
/// (never unloaded to make room), while this lives.
pub struct BoundModel {
    pub name: String,
    /// Its own tool-call format, where its settings give one.
    pub tool_call_parser: Option<rillm_backend::ToolCallFormat>,
    /// Its own reasoning parser, where its settings give one.
    pub reasoning_parser: Option<crate::ReasoningParser>,
    backend: Option<Arc<dyn Backend>>,
    in_flight: Arc<AtomicUsize>,
}

impl BoundModel {
    fn new(spec: &ModelSpec, backend: Arc<dyn Backend>, in_flight: &Arc<AtomicUsize>) -> Self {
        in_flight.fetch_add(1, Ordering::SeqCst);
        Self {
            name: spec.name.clone(),
            tool_call_parser: spec.tool_call_parser,
            reasoning_parser: spec.reasoning_parser,
            backend: Some(backend),
            in_flight: Arc::clone(in_flight),
        }
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        self.backend.as_ref().expect("set until drop")
    }
}

impl Drop for BoundModel {
    fn drop(&mut self) {
        // This handle goes before the count does: an unload waiting for the count holds
        // the last one, and stops the engine on its blocking thread, not here.
        drop(self.backend.take());
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
