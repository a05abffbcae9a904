//! What every handler shares: the backend (once loaded), the lifecycle phase, settings.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::error::ApiError;
use crate::responses::ResponseStore;
use crate::shape::ShapeRules;
use crate::tools::ToolDialect;
use crate::ServerConfig;
use rillm_backend::Backend;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Loading = 0,
    Ready = 1,
    Draining = 2,
}

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    backend: OnceLock<Arc<dyn Backend>>,
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
        &self.0
    }
}

impl AppState {
    pub fn new(config: ServerConfig) -> Self {
        Self(Arc::new(Shared {
            backend: OnceLock::new(),
            phase: AtomicU8::new(Phase::Loading as u8),
            in_flight: Arc::new(AtomicUsize::new(0)),
            responses: Arc::new(ResponseStore::new(config.responses_store_bytes)),
            config,
        }))
    }

    pub fn set_backend(&self, backend: Arc<dyn Backend>) {
        let _ = self.0.backend.set(backend);
        // Never leave Draining for Ready: a shutdown during load must stick.
        let _ =
            self.0.phase.compare_exchange(Phase::Loading as u8, Phase::Ready as u8, Ordering::SeqCst, Ordering::SeqCst);
    }

    pub fn begin_draining(&self) {
        self.0.phase.store(Phase::Draining as u8, Ordering::SeqCst);
    }

    pub fn phase(&self) -> Phase {
        match self.0.phase.load(Ordering::SeqCst) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            _ => Phase::Draining,
        }
    }

    pub fn backend(&self) -> Option<&Arc<dyn Backend>> {
        self.0.backend.get()
    }

    /// How tools reach the model and calls come back: `--tool-call-parser`'s format, else
    /// the one the chat template writes, else Hermes (see `tools::prompt`).
    pub fn tool_dialect(&self) -> ToolDialect {
        let template = self.backend().and_then(|b| b.chat_template_tools());
        ToolDialect { format: self.config.outputs.tool_call_parser.or(template).unwrap_or_default(), template }
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

    /// Name reported in responses: `--served-model-name`, else the model file's stem.
    pub fn model_name(&self) -> String {
        match (&self.config.served_model_name, self.backend()) {
            (Some(name), _) => name.clone(),
            (None, Some(b)) => b.model_name().to_string(),
            (None, None) => String::new(),
        }
    }

    /// OpenAI requests may name the model; a name other than ours is a 404, as in vLLM.
    pub fn check_model(&self, requested: Option<&str>) -> Result<(), ApiError> {
        match requested {
            None | Some("") => Ok(()),
            Some(name) if name == self.model_name() => Ok(()),
            Some(name) => Err(ApiError::model_not_found(name)),
        }
    }
}
