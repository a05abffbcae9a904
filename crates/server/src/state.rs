//! What every handler shares: the backend (once loaded) or the models (several), the
//! lifecycle phase, settings; and, bound to one request, the model it named.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::ApiError;
use crate::models::{named_model, BoundModel, ModelRegistry};
use crate::responses::ResponseStore;
use crate::shape::ShapeRules;
use crate::tools::ToolDialect;
use crate::ServerConfig;
use rillm_backend::{Backend, TemplateThinking, ThinkingStart};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Loading = 0,
    Ready = 1,
    Draining = 2,
}

/// The shared state, and the model a request is bound to once its route resolved `model`
/// ([`AppState::for_model`]): several models' requests each see their own backend.
#[derive(Clone)]
pub struct AppState {
    shared: Arc<Shared>,
    bound: Option<Arc<BoundModel>>,
}

pub struct Shared {
    backend: OnceLock<Arc<dyn Backend>>,
    /// Several models (`--model NAME=PATH`, `--models-dir`): requests are routed by `model`.
    models: OnceLock<Arc<ModelRegistry>>,
    phase: AtomicU8,
    /// Requests admitted and not yet finished or dropped (streaming or not).
    pub in_flight: Arc<AtomicUsize>,
    /// Responses kept for `previous_response_id`.
    pub responses: Arc<ResponseStore>,
    pub config: ServerConfig,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

impl AppState {
    pub fn new(config: ServerConfig) -> Self {
        let shared = Arc::new(Shared {
            backend: OnceLock::new(),
            models: OnceLock::new(),
            phase: AtomicU8::new(Phase::Loading as u8),
            in_flight: Arc::new(AtomicUsize::new(0)),
            responses: Arc::new(ResponseStore::new(config.responses_store_bytes)),
            config,
        });
        Self { shared, bound: None }
    }

    /// Serves several models, loaded as requests name them; ready at once.
    pub fn set_models(&self, models: Arc<ModelRegistry>) {
        let _ = self.shared.models.set(models);
        self.mark_ready();
    }

    pub fn models(&self) -> Option<&Arc<ModelRegistry>> {
        self.shared.models.get()
    }

    /// This state bound to the model `requested` names: with several models it is loaded
    /// first if need be (the request waits, bounded by `--load-timeout`) and stays up until
    /// the request ends; with one, a name other than its own is a 404, as in vLLM.
    pub async fn for_model(&self, requested: Option<&str>) -> Result<AppState, ApiError> {
        let Some(models) = self.models() else {
            self.check_model(requested)?;
            return Ok(self.clone());
        };
        if self.phase() == Phase::Draining {
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        let bound = models.acquire(requested).await?;
        Ok(Self { shared: Arc::clone(&self.shared), bound: Some(bound) })
    }

    /// The model this request is bound to (kept with its stream: `observe`).
    pub fn bound(&self) -> Option<Arc<BoundModel>> {
        self.bound.clone()
    }

    pub fn set_backend(&self, backend: Arc<dyn Backend>) {
        let _ = self.shared.backend.set(backend);
        self.mark_ready();
    }

    /// Loading → Ready; never Draining → Ready: a shutdown during load must stick.
    fn mark_ready(&self) {
        let (loading, ready) = (Phase::Loading as u8, Phase::Ready as u8);
        let _ = self.shared.phase.compare_exchange(loading, ready, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub fn begin_draining(&self) {
        self.shared.phase.store(Phase::Draining as u8, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        match self.shared.phase.load(Ordering::SeqCst) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    /// The bound model's backend, else the one model's.
    pub fn backend(&self) -> Option<&Arc<dyn Backend>> {
        match &self.bound {
            Some(bound) => Some(bound.backend()),
            None => self.shared.backend.get(),
        }
    }

    /// The one model's backend, or every loaded one of several.
    pub fn serving_backends(&self) -> Vec<Arc<dyn Backend>> {
        match self.models() {
            Some(models) => models.loaded(),
            None => self.backend().cloned().into_iter().collect(),
        }
    }

    /// How tools reach the model and calls come back: the bound model's own format
    /// (`--models-config`), else `--tool-call-parser`'s, else the one the chat template
    /// writes, else Hermes (see `tools::prompt`).
    pub fn tool_dialect(&self) -> ToolDialect {
        let template = self.backend().and_then(|b| b.chat_template_tools());
        let own = self.bound.as_ref().and_then(|b| b.tool_call_parser);
        ToolDialect { format: own.or(self.config.outputs.tool_call_parser).or(template).unwrap_or_default(), template }
    }

    /// How the bound model's unmarked output reads (`None`: its output is not split into
    /// thought and answer), and what its chat template does with thinking.
    /// The bound model's own parser (`--models-config`) wins over `--reasoning-parser`.
    pub fn reasoning_reading(&self) -> (Option<ThinkingStart>, Option<TemplateThinking>) {
        let template = self.backend().and_then(|b| b.chat_template_thinking());
        let own = self.bound.as_ref().and_then(|b| b.reasoning_parser);
        (own.unwrap_or(self.config.reasoning.parser).unmarked_start(template), template)
    }

    /// How this server composes a request's tools and answer format (`shape`).
    pub fn shape_rules(&self) -> ShapeRules {
        let outputs = &self.config.outputs;
        ShapeRules {
            call_format: self.tool_dialect().format,
            schemas: outputs.schemas,
            keep_repeated_calls: outputs.keep_repeated_calls,
        }
    }

    /// The backend if new work may start now, else the 503 to send.
    pub fn ready_backend(&self) -> Result<&Arc<dyn Backend>, ApiError> {
        match (self.phase(), self.backend()) {
            (Phase::Ready, Some(backend)) => Ok(backend),
            (Phase::Draining, _) => Err(ApiError::unavailable("the server is shutting down")),
            _ => Err(ApiError::unavailable("the model is still loading")),
        }
    }

    /// Name reported in responses: the bound model's, else `--served-model-name`, else the
    /// model file's stem.
    pub fn model_name(&self) -> String {
        if let Some(bound) = &self.bound {
            return bound.name.clone();
        }
        match (&self.config.served_model_name, self.backend()) {
            (Some(name), _) => name.clone(),
            (None, Some(b)) => b.model_name().to_string(),
            (None, None) => String::new(),
        }
    }

    /// OpenAI requests may name the model; a name other than ours is a 404, as in vLLM.
    fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        let served = self.model_name();
        match named_model(requested, |name| name == served) {
            None => Ok(()),
            Some(name) if name == served => Ok(()),
            Some(name) => Err(ApiError::model_not_found(name)),
        }
    }
}
