use crate::embedding::ModelTask;

/// Why `submit` refused a request. Returned at once, before any model work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    #[error("the waiting queue is full ({capacity} requests waiting); retry later")]
    QueueFull { capacity: usize },
    /// Predicted to start later than the server's queueing bound (`--max-queue-ms`).
    #[error(
        "the server is at capacity: this request would wait about {predicted_ms} ms for its first token, over \
         the limit of {limit_ms} ms; retry later"
    )]
    WouldWaitTooLong { predicted_ms: u64, limit_ms: u64 },
    /// Admitted on the prediction, it reached the head of the queue too late: what it
    /// waited plus its own prefill is over the bound.
    #[error(
        "the server is at capacity: this request waited {waited_ms} ms in the queue and would get its first \
         token after about {predicted_ms} ms, over the limit of {limit_ms} ms; retry later"
    )]
    WaitedTooLong { waited_ms: u64, predicted_ms: u64, limit_ms: u64 },
    #[error(
        "prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceeds the context \
         of {context} tokens per sequence"
    )]
    ContextOverflow { prompt_tokens: usize, max_tokens: usize, context: usize },
    /// A request's choices run side by side, one sequence each.
    #[error("n = {n} choices is outside 1 to {max}, the sequences this server runs at once")]
    TooManyChoices { n: u32, max: u32 },
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("{0}")]
    InvalidRequest(String),
    /// A field other than the prompt is wrong in a way only the engine can tell (a
    /// `logit_bias` token outside the vocabulary); `param` names it.
    #[error("{message}")]
    InvalidField { param: &'static str, message: String },
    /// The request's constraint (schema, regex, grammar) could not be compiled; the
    /// message is the compiler's own.
    #[error("{0}")]
    InvalidConstraint(String),
    /// The served model does another task: an embedding model asked to generate, a
    /// generating model asked for embeddings.
    #[error("{}", wrong_task_message(*served, *asked))]
    WrongTask { served: ModelTask, asked: ModelTask },
    #[error("the engine is shutting down")]
    ShuttingDown,
    /// The engine stopped on a fault; nothing more will run until the process restarts.
    #[error("the engine has stopped: {0}")]
    EngineFailed(String),
}

fn wrong_task_message(served: ModelTask, asked: ModelTask) -> String {
    let what = match served {
        ModelTask::Generate => "a generating model",
        ModelTask::Embed => "an embedding model",
        ModelTask::Rerank => "a reranker",
    };
    let hint = match (served, asked) {
        (ModelTask::Generate, ModelTask::Embed) => {
            " (serve an embedding model, or this one with `--pooling last` for its last-token embeddings)"
        }
        (ModelTask::Embed, ModelTask::Rerank) => " (serve a reranker: a cross-encoder whose GGUF pools by `rank`)",
        _ => "",
    };
    if asked == ModelTask::Generate {
        return format!("the served model is {what}: it does not generate text (it serves {})", served.endpoint());
    }
    format!("the served model is {what}: it serves {}, not `{}` requests{hint}", served.endpoint(), asked.name())
}
