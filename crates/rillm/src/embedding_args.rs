//! `rillm serve`'s options for embedding models and rerankers.

use rillm_engine::Pooling;
use rillm_server::EmbeddingOptions;

#[derive(clap::Args, Debug, Clone)]
pub struct EmbeddingArgs {
    /// How an input's token states become its vector: mean, cls, last or rank (a
    /// cross-encoder's score). Default: what the GGUF declares; given for a generating
    /// model, it serves that model's embeddings instead (`last` for Qwen3-Embedding-style
    /// decoders).
    #[arg(long, value_parser = parse_pooling)]
    pooling: Option<Pooling>,
    /// Send embeddings as the model pools them, not scaled to unit length (a request's
    /// `normalize` still decides for itself).
    #[arg(long)]
    no_normalize: bool,
    /// Sizes the embedding model was trained to be cut to (Matryoshka), e.g. 256,128: the
    /// `dimensions` a request may ask for. Without it `dimensions` must be the full width.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    matryoshka_dims: Vec<usize>,
    /// Most inputs in one /v1/embeddings request (documents in one /v1/rerank request).
    #[arg(long, default_value_t = EmbeddingOptions::default().max_inputs)]
    max_embedding_inputs: usize,
}

fn parse_pooling(name: &str) -> Result<Pooling, String> {
    Pooling::from_name(name).ok_or_else(|| format!("unknown pooling `{name}`; one of: {}", Pooling::NAMES.join(", ")))
}

impl EmbeddingArgs {
    pub fn pooling(&self) -> Option<Pooling> {
        self.pooling
    }

    pub fn options(&self) -> EmbeddingOptions {
        EmbeddingOptions {
            normalize: !self.no_normalize,
            matryoshka_dims: self.matryoshka_dims.clone(),
            max_inputs: self.max_embedding_inputs.max(1),
        }
    }
}
