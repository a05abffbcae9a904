//! One request's generation state, from admission to its final event: where its prompt is,
//! what it has generated and streamed (`sequence`), how new tokens become text and stop
//! strings are held back (`text_stream`), a reasoning model's thought read apart from its
//! answer (`thinking`), the grammar its output follows (`constraint`), and
//! the events its caller receives (`output`); it owns its logit adjustments (the math is
//! `logits`'). What a step feeds and when is not decided here: the
//! scheduler asks a `Sequence` and tells it what happened; nothing outside this folder
//! writes a sequence's fields.

pub(crate) mod constraint;
pub(crate) mod output;
pub(crate) mod pending;
pub(crate) mod sequence;
pub(crate) mod text_stream;
pub(crate) mod thinking;
