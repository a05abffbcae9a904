//! The error a bench run ends with: its arguments, its workload, a file it could not
//! write, or the HTTP client it could not build.

use crate::files::WriteError;
use crate::workload::error::WorkloadError;
use crate::workload::tokens;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Args(String),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Tokenizer(#[from] tokens::TokenizerError),
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}
