//! The engine as a [`Backend`]: what the HTTP server sees of it.

use rillm_backend::{Backend, GenerateRequest, Health, Prompt, Rejected, RequestStream, StatsSnapshot, TokenId};

use crate::engine::Engine;

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

    fn context_length(&self) -> u32 {
        self.ctx_per_sequence()
    }

    fn stats(&self) -> StatsSnapshot {
        Engine::stats(self).snapshot()
    }

    fn health(&self) -> Health {
        Engine::stats(self).health()
    }

    fn shutdown(&self) {
        Engine::shutdown(self);
    }
}
