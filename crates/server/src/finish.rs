//! How a finish reason is spelled on the wire and in metrics. Below the response and
//! request-following modules, which both need it.

use rillm_backend::FinishReason;

/// The OpenAI spelling of a finish reason: `stop` and `length` for a finished
/// completion, as vLLM sends; `abort` and `error` for the rest.
pub fn openai_finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Stop | FinishReason::Eos => "stop",
        FinishReason::Cancelled => "abort",
        FinishReason::Error => "error",
    }
}
