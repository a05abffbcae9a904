//! Math over one row of logits, shared by the runtime, which holds the rows, and the
//! requests, which own what is done to them: the adjustments a request asks for before
//! sampling (`logit_adjust`: logit bias, repetition penalties over its own tokens,
//! `min_tokens`' ban on ending) and the log-softmax its reported log-probabilities come
//! from (`log_softmax`). Nothing here knows a sequence or a model.

pub(crate) mod log_softmax;
pub(crate) mod logit_adjust;
