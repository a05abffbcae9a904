//! The one seam between HTTP and inference: handlers see only this trait.

use rillm_engine::{Engine, GenerateRequest, Prompt, Rejected, RequestStream, StatsSnapshot};

pub trait Backend: Send + Sync + 'static {
    fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected>;
    /// The token ids generation would see for `prompt` (chat prompts rendered with the
    /// template); `add_special` says whether a text prompt gets BOS.
    fn tokenize(&self, prompt: &Prompt, add_special: bool) -> Result<Vec<u32>, Rejected>;
    fn detokenize(&self, tokens: &[u32]) -> Result<String, Rejected>;
    /// The name clients use in `model` and that `/v1/models` lists.
    fn model_name(&self) -> &str;
    fn context_length(&self) -> u32;
    fn stats(&self) -> StatsSnapshot;
    /// The engine thread is alive and, if it has work, making progress.
    fn is_healthy(&self) -> bool;
    /// Cancels everything and stops the engine.
    fn shutdown(&self);
}

impl Backend for Engine {
    fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected> {
        Engine::submit(self, request)
    }

    fn tokenize(&self, prompt: &Prompt, add_special: bool) -> Result<Vec<u32>, Rejected> {
        match prompt {
            Prompt::Text(text) if !add_special => Ok(self.tokenize_text(text, false)),
            _ => self.tokenize_prompt(prompt),
        }
    }

    fn detokenize(&self, tokens: &[u32]) -> Result<String, Rejected> {
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

    fn is_healthy(&self) -> bool {
        // A step on this model takes milliseconds; ten seconds without one means stuck.
        Engine::stats(self).is_healthy(std::time::Duration::from_secs(10))
    }

    fn shutdown(&self) {
        Engine::shutdown(self);
    }
}
