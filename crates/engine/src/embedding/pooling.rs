//! How a model's token states become one vector per input, and what that makes the model
//! serve: read from the GGUF, or chosen with `--pooling`.

use rillm_backend::ModelTask;

/// llama.cpp's pooling types (`llama_pooling_type`), named as `--pooling` takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The mean of the input's token states (sentence-transformers' usual choice).
    Mean,
    /// The first token's state (`[CLS]`).
    Cls,
    /// The last token's state: decoder models served for embeddings (Qwen3-Embedding).
    Last,
    /// A cross-encoder's classifier over `[CLS]`: one relevance score per pair.
    Rank,
}

impl Pooling {
    pub const NAMES: [&'static str; 4] = ["mean", "cls", "last", "rank"];

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "mean" => Some(Self::Mean),
            "cls" => Some(Self::Cls),
            "last" => Some(Self::Last),
            "rank" => Some(Self::Rank),
            _ => None,
        }
    }

    /// From the GGUF's `{arch}.pooling_type` value (llama.cpp's numbering); 0 (none) and
    /// unknown values pool nothing.
    pub(crate) fn from_gguf(value: u32) -> Option<Self> {
        match value {
            1 => Some(Self::Mean),
            2 => Some(Self::Cls),
            3 => Some(Self::Last),
            4 => Some(Self::Rank),
            _ => None,
        }
    }

    pub(crate) fn llama(self) -> llama_cpp_2::context::params::LlamaPoolingType {
        use llama_cpp_2::context::params::LlamaPoolingType as P;
        match self {
            Self::Mean => P::Mean,
            Self::Cls => P::Cls,
            Self::Last => P::Last,
            Self::Rank => P::Rank,
        }
    }

    pub fn task(self) -> ModelTask {
        match self {
            Self::Rank => ModelTask::Rerank,
            Self::Mean | Self::Cls | Self::Last => ModelTask::Embed,
        }
    }
}

/// What the GGUF says of the model, as far as choosing its task goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PoolingFacts {
    /// `{arch}.pooling_type`, when present.
    pub pooling_type: Option<u32>,
    /// `{arch}.attention.causal`, when present (encoders say false).
    pub causal: Option<bool>,
}

/// The pooling a model is served with, or `None` when it generates. `--pooling` decides
/// where given (a decoder served for embeddings); otherwise a GGUF that declares a pooling
/// type or non-causal attention is an encoder, pooled as it declares (mean where it
/// declares none: what sentence-transformers models are trained with).
pub(crate) fn served_pooling(facts: PoolingFacts, chosen: Option<Pooling>) -> Option<Pooling> {
    if chosen.is_some() {
        return chosen;
    }
    let declared = facts.pooling_type.and_then(Pooling::from_gguf);
    match (declared, facts.causal) {
        (Some(pooling), _) => Some(pooling),
        (None, Some(false)) => Some(Pooling::Mean),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chat_model_generates_unless_pooling_is_chosen() {
        let decoder = PoolingFacts { pooling_type: None, causal: None };
        assert_eq!(served_pooling(decoder, None), None);
        assert_eq!(served_pooling(decoder, Some(Pooling::Last)), Some(Pooling::Last));
    }

    #[test]
    fn an_encoder_pools_as_its_gguf_declares_and_pooling_overrides_it() {
        let bert = PoolingFacts { pooling_type: Some(1), causal: Some(false) };
        assert_eq!(served_pooling(bert, None), Some(Pooling::Mean));
        assert_eq!(served_pooling(bert, Some(Pooling::Cls)), Some(Pooling::Cls));
        let reranker = PoolingFacts { pooling_type: Some(4), causal: Some(false) };
        assert_eq!(served_pooling(reranker, None).map(Pooling::task), Some(ModelTask::Rerank));
    }

    #[test]
    fn a_non_causal_model_without_a_pooling_type_is_mean_pooled() {
        let encoder = PoolingFacts { pooling_type: Some(0), causal: Some(false) };
        assert_eq!(served_pooling(encoder, None), Some(Pooling::Mean));
    }

    #[test]
    fn names_round_trip() {
        for name in Pooling::NAMES {
            assert!(Pooling::from_name(name).is_some(), "{name}");
        }
        assert_eq!(Pooling::from_name("max"), None);
    }
}
