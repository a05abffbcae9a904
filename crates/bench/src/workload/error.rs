//! Why the workload could not be built: a bad argument, or a dataset, trace or tokenizer
//! that could not be read.

use crate::workload::{dataset, tokens, trace};

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error("{0}")]
    Args(String),
    #[error(transparent)]
    Dataset(#[from] dataset::DatasetError),
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    #[error(transparent)]
    Tokenizer(#[from] tokens::TokenizerError),
}
