//! Reading `/v1/embeddings`' `input` and `/v1/rerank`'s `query` and `documents` into the
//! backend's inputs, with a 400 naming the field for every shape that is not one of
//! OpenAI's (or Jina's and Cohere's).

use rillm_backend::{EmbedInput, TokenId};
use serde_json::Value;

use crate::error::ApiError;

const INPUT_SHAPES: &str =
    "`input` must be a string, an array of strings, an array of token ids or an array of arrays of token ids";

/// OpenAI's four shapes of `input`: a string, strings, token ids, arrays of token ids.
/// Empty strings and empty arrays are refused (OpenAI refuses them too); so are more than
/// `max_inputs` inputs.
pub fn embedding_inputs(input: Option<Value>, max_inputs: usize) -> Result<Vec<EmbedInput>, ApiError> {
    let input = input.ok_or_else(|| ApiError::invalid("input", "`input` is required"))?;
    let inputs = match input {
        Value::String(text) => vec![text_input(text, 0)?],
        Value::Array(items) if items.is_empty() => return Err(ApiError::invalid("input", "`input` is an empty array")),
        Value::Array(items) if items.iter().all(Value::is_number) => vec![EmbedInput::Tokens(token_ids(&items, 0)?)],
        Value::Array(items) => {
            items.into_iter().enumerate().map(|(i, item)| one_input(item, i)).collect::<Result<_, _>>()?
        }
        _ => return Err(ApiError::invalid("input", INPUT_SHAPES)),
    };
    if inputs.len() > max_inputs {
        return Err(ApiError::invalid(
            "input",
            format!("{} inputs is over this server's limit of {max_inputs} per request", inputs.len()),
        ));
    }
    Ok(inputs)
}

fn one_input(item: Value, index: usize) -> Result<EmbedInput, ApiError> {
    match item {
        Value::String(text) => text_input(text, index),
        Value::Array(ids) if !ids.is_empty() => Ok(EmbedInput::Tokens(token_ids(&ids, index)?)),
        Value::Array(_) => Err(ApiError::invalid("input", format!("input {index} is an empty array of token ids"))),
        _ => Err(ApiError::invalid("input", format!("input {index}: {INPUT_SHAPES}"))),
    }
}

fn text_input(text: String, index: usize) -> Result<EmbedInput, ApiError> {
    if text.is_empty() {
        return Err(ApiError::invalid("input", format!("input {index} is an empty string")));
    }
    Ok(EmbedInput::Text(text))
}

fn token_ids(ids: &[Value], index: usize) -> Result<Vec<TokenId>, ApiError> {
    ids.iter().map(|id| id.as_u64().and_then(|id| TokenId::try_from(id).ok())).collect::<Option<Vec<_>>>().ok_or_else(
        || ApiError::invalid("input", format!("input {index} holds a token id that is not a non-negative integer")),
    )
}

/// A reranker's pairs: the query beside each document, documents as strings or `{"text"}`
/// objects (Jina's and Cohere's shapes). Returns the pairs and the documents' texts.
pub fn rerank_pairs(
    query: Option<Value>,
    documents: Option<Value>,
    max_inputs: usize,
) -> Result<(Vec<EmbedInput>, Vec<String>), ApiError> {
    let query = match query {
        Some(Value::String(query)) if !query.is_empty() => query,
        Some(Value::String(_)) => return Err(ApiError::invalid("query", "`query` is an empty string")),
        Some(_) => return Err(ApiError::invalid("query", "`query` must be a string")),
        None => return Err(ApiError::invalid("query", "`query` is required")),
    };
    let documents = match documents {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(ApiError::invalid("documents", "`documents` is an empty array")),
        Some(_) => {
            return Err(ApiError::invalid(
                "documents",
                "`documents` must be an array of strings or of {\"text\"} objects",
            ))
        }
        None => return Err(ApiError::invalid("documents", "`documents` is required")),
    };
    if documents.len() > max_inputs {
        return Err(ApiError::invalid(
            "documents",
            format!("{} documents is over this server's limit of {max_inputs} per request", documents.len()),
        ));
    }
    let texts = documents.into_iter().enumerate().map(|(i, d)| document_text(d, i)).collect::<Result<Vec<_>, _>>()?;
    let pairs =
        texts.iter().map(|document| EmbedInput::Pair { query: query.clone(), document: document.clone() }).collect();
    Ok((pairs, texts))
}

/// vLLM's `/score` pairs: `text_1` beside each `text_2`, one to one when both are arrays
/// of the same length (a one-element `text_1` goes beside every `text_2`).
pub fn score_pairs(
    text_1: Option<Value>,
    text_2: Option<Value>,
    max_inputs: usize,
) -> Result<Vec<EmbedInput>, ApiError> {
    let firsts = score_texts(text_1, "text_1")?;
    let seconds = score_texts(text_2, "text_2")?;
    if firsts.len() != 1 && firsts.len() != seconds.len() {
        return Err(ApiError::invalid(
            "text_2",
            format!(
                "`text_1` has {} texts and `text_2` {}: give one `text_1` or as many as `text_2`",
                firsts.len(),
                seconds.len()
            ),
        ));
    }
    if seconds.len() > max_inputs {
        return Err(ApiError::invalid(
            "text_2",
            format!("{} pairs is over this server's limit of {max_inputs}", seconds.len()),
        ));
    }
    let query = |i: usize| firsts[if firsts.len() == 1 { 0 } else { i }].clone();
    Ok(seconds.into_iter().enumerate().map(|(i, document)| EmbedInput::Pair { query: query(i), document }).collect())
}

fn score_texts(value: Option<Value>, param: &'static str) -> Result<Vec<String>, ApiError> {
    let texts = match value {
        Some(Value::String(text)) => vec![text],
        Some(Value::Array(items)) => {
            items.into_iter().map(|i| i.as_str().map(str::to_string)).collect::<Option<Vec<_>>>().unwrap_or_default()
        }
        Some(_) | None => Vec::new(),
    };
    if texts.is_empty() || texts.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            param,
            format!("`{param}` must be a non-empty string or array of non-empty strings"),
        ));
    }
    Ok(texts)
}

fn document_text(document: Value, index: usize) -> Result<String, ApiError> {
    let text = match document {
        Value::String(text) => Some(text),
        Value::Object(mut fields) => match fields.remove("text") {
            Some(Value::String(text)) => Some(text),
            _ => None,
        },
        _ => None,
    };
    match text {
        Some(text) if !text.is_empty() => Ok(text),
        Some(_) => Err(ApiError::invalid("documents", format!("document {index} is empty"))),
        None => Err(ApiError::invalid(
            "documents",
            format!("document {index} is neither a string nor a {{\"text\"}} object"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn param(result: Result<impl std::fmt::Debug, ApiError>) -> String {
        let error = result.expect_err("refused");
        assert_eq!(error.status.as_u16(), 400);
        error.body()["error"]["param"].as_str().unwrap_or_default().to_string()
    }

    #[test]
    fn reads_the_four_openai_shapes() {
        let text = |s: &str| EmbedInput::Text(s.into());
        assert_eq!(embedding_inputs(Some(json!("a")), 8).ok(), Some(vec![text("a")]));
        assert_eq!(embedding_inputs(Some(json!(["a", "b"])), 8).ok(), Some(vec![text("a"), text("b")]));
        assert_eq!(embedding_inputs(Some(json!([1, 2])), 8).ok(), Some(vec![EmbedInput::Tokens(vec![1, 2])]));
        assert_eq!(
            embedding_inputs(Some(json!([[1], [2, 3]])), 8).ok(),
            Some(vec![EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])])
        );
    }

    #[test]
    fn every_other_shape_is_a_400_naming_input() {
        for bad in [
            json!(""),
            json!([]),
            json!([""]),
            json!(["a", 1]),
            json!([[]]),
            json!([-1]),
            json!(3),
            json!({"a": 1}),
            json!([1.5]),
        ] {
            assert_eq!(param(embedding_inputs(Some(bad.clone()), 8)), "input", "{bad}");
        }
        assert_eq!(param(embedding_inputs(None, 8)), "input");
        assert_eq!(param(embedding_inputs(Some(json!(["a", "b", "c"])), 2)), "input");
    }

    #[test]
    fn rerank_takes_strings_and_text_objects() {
        let (pairs, texts) = rerank_pairs(Some(json!("q")), Some(json!(["a", {"text": "b"}])), 8).expect("valid");
        assert_eq!(texts, vec!["a", "b"]);
        assert_eq!(pairs[1], EmbedInput::Pair { query: "q".into(), document: "b".into() });
    }

    #[test]
    fn score_pairs_one_to_many_and_one_to_one() {
        let pair = |q: &str, d: &str| EmbedInput::Pair { query: q.into(), document: d.into() };
        let many = score_pairs(Some(json!("q")), Some(json!(["a", "b"])), 8).expect("valid");
        assert_eq!(many, vec![pair("q", "a"), pair("q", "b")]);
        let zipped = score_pairs(Some(json!(["x", "y"])), Some(json!(["a", "b"])), 8).expect("valid");
        assert_eq!(zipped, vec![pair("x", "a"), pair("y", "b")]);
        assert_eq!(param(score_pairs(Some(json!(["x", "y"])), Some(json!(["a", "b", "c"])), 8)), "text_2");
        assert_eq!(param(score_pairs(None, Some(json!("a")), 8)), "text_1");
        assert_eq!(param(score_pairs(Some(json!("q")), Some(json!([1])), 8)), "text_2");
    }

    #[test]
    fn rerank_refusals_name_their_field() {
        assert_eq!(param(rerank_pairs(None, Some(json!(["a"])), 8)), "query");
        assert_eq!(param(rerank_pairs(Some(json!("")), Some(json!(["a"])), 8)), "query");
        assert_eq!(param(rerank_pairs(Some(json!("q")), None, 8)), "documents");
        assert_eq!(param(rerank_pairs(Some(json!("q")), Some(json!([])), 8)), "documents");
        assert_eq!(param(rerank_pairs(Some(json!("q")), Some(json!([{"txt": "a"}])), 8)), "documents");
        assert_eq!(param(rerank_pairs(Some(json!("q")), Some(json!(["a", "b"])), 1)), "documents");
    }
}
