use std::path::PathBuf;

/// Why the engine could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("model file {path}: {reason}")]
    Model { path: PathBuf, reason: String },
    #[error("llama.cpp: {0}")]
    Backend(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("engine thread: {0}")]
    Thread(String),
}
