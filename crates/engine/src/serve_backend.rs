//! The engine as a [`Backend`]: what the HTTP server sees of it, and the one entry that
//! starts whichever engine a model needs.

use std::sync::Arc;

use rillm_backend::{
    Backend, CacheLayout, Constraint, GenerateRequest, Health, Prompt, Rejected, RequestStream, StatsSnapshot, TokenId,
    TokenizerInfo,
};

use crate::config::EngineConfig;
use crate::embedding::pooling::{served_pooling, PoolingFacts};
use crate::embedding::{Embedder, Pooling};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::runtime::llama::load_model;

/// Loads the model once and starts the engine its GGUF (or `pooling`) calls for: the
/// generating engine, or the embedding engine for an encoder, a reranker or a decoder
/// served with `--pooling`.
pub fn start_backend(config: EngineConfig, pooling: Option<Pooling>) -> Result<Arc<dyn Backend>, EngineError> {
    let config = config.normalized();
    let model = load_model(&config)?;
    let meta = |key: &str| model.model.meta_val_str(&format!("{}.{key}", model.architecture)).ok();
    let facts = PoolingFacts {
        pooling_type: meta("pooling_type").and_then(|v| v.trim().parse().ok()),
        causal: meta("attention.causal").map(|v| v.trim() != "false"),
    };
    Ok(match served_pooling(facts, pooling) {
        Some(pooling) => Arc::new(Embedder::start(model, &config, pooling)?),
        None => Arc::new(Engine::start_loaded(model, config)?),
    })
}

impl Backend for Engine {
    fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected> {
        Engine::submit(self, request)
    }

    fn tokenize(&self, prompt: &Prompt, add_special: bool) -> Result<Vec<TokenId>, Rejected> {
        match prompt {
            Prompt::Text(text) if !add_special => Ok(self.tokenize_text(text, false)),
            _ => self.tokenize_prompt(prompt),
        }
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<String, Rejected> {
        Engine::detokenize(self, tokens)
    }

    fn model_name(&self) -> &str {
        Engine::model_name(self)
    }

    fn tokenizer_info(&self) -> TokenizerInfo {
        Engine::tokenizer_info(self).clone()
    }

    fn chat_template_tools(&self) -> Option<rillm_backend::ToolCallFormat> {
        Engine::tokenizer_info(self).chat_template_tools
    }

    fn chat_template_thinking(&self) -> Option<rillm_backend::TemplateThinking> {
        Engine::tokenizer_info(self).chat_template_thinking
    }

    fn context_length(&self) -> u32 {
        self.ctx_per_sequence()
    }

    fn check_constraint(&self, constraint: &Constraint) -> Result<(), Rejected> {
        Engine::check_constraint(self, constraint)
    }

    fn stats(&self) -> StatsSnapshot {
        Engine::stats(self).snapshot()
    }

    /// Slots reuse prefixes token by token and the RAM tier by 16-token blocks: blocks of 16
    /// over every slot's cells describe both to a router.
    fn cache_layout(&self) -> Option<CacheLayout> {
        let block = crate::kv::host_cache::BLOCK_TOKENS as u64;
        self.prefix_caching().then(|| CacheLayout {
            block_tokens: block as u32,
            blocks: Engine::stats(self).snapshot().kv_cells_total / block,
        })
    }

    fn flush_prefix_cache(&self) -> Result<rillm_backend::PrefixCacheFlush, Rejected> {
        Engine::flush_prefix_cache(self)
    }

    fn health(&self) -> Health {
        Engine::stats(self).health()
    }

    fn shutdown(&self) {
        Engine::shutdown(self);
    }
}
