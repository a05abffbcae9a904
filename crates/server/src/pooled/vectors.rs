//! What the server does to the model's pooled vectors before they go out: the Matryoshka
//! cut (`dimensions`), L2 normalisation, the wire encoding, a reranker's score.

use base64::Engine as _;
use serde_json::Value;

use crate::error::ApiError;

/// `dimensions` checked against the model: honoured only where the model was declared
/// Matryoshka-trained (`--matryoshka-dims`), as a cut of any other model's vector is not
/// an embedding of that size (llama-server ignores the field silently; OpenAI refuses it
/// for models that cannot).
pub fn checked_dimensions(asked: Option<i64>, width: usize, matryoshka: &[usize]) -> Result<Option<usize>, ApiError> {
    let Some(asked) = asked else { return Ok(None) };
    let fits = usize::try_from(asked).ok().filter(|&d| d == width || (d < width && matryoshka.contains(&d)));
    match fits {
        Some(d) if d == width => Ok(None),
        Some(d) => Ok(Some(d)),
        None if matryoshka.is_empty() => Err(ApiError::invalid(
            "dimensions",
            format!("this model's embeddings have {width} dimensions and it was not declared Matryoshka-trained (--matryoshka-dims), so `dimensions` can only be {width}"),
        )),
        None => Err(ApiError::invalid(
            "dimensions",
            format!("`dimensions` must be one of {matryoshka:?} or {width}, the sizes this model was trained to be cut to"),
        )),
    }
}

/// The vector as sent: cut to `dimensions`, then scaled to unit length (`normalize`), as
/// sentence-transformers and vLLM do in that order.
pub fn finish_vector(mut vector: Vec<f32>, dimensions: Option<usize>, normalize: bool) -> Vec<f32> {
    if let Some(d) = dimensions {
        vector.truncate(d);
    }
    if normalize {
        let norm = vector.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
        if norm > 0.0 {
            vector.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
        }
    }
    vector
}

/// How `embedding` is written: a JSON array, or base64 of little-endian f32s (what the
/// openai SDK asks for by default and decodes with numpy's `frombuffer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Float,
    Base64,
}

impl Encoding {
    pub fn from_field(value: Option<&str>) -> Result<Self, ApiError> {
        match value {
            None | Some("float") => Ok(Self::Float),
            Some("base64") => Ok(Self::Base64),
            Some(other) => Err(ApiError::invalid(
                "encoding_format",
                format!("`encoding_format` is `float` or `base64`, not `{other}`"),
            )),
        }
    }

    pub fn encode(self, vector: &[f32]) -> Value {
        match self {
            Self::Float => Value::from(vector.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
            Self::Base64 => {
                let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
        }
    }
}

/// A cross-encoder's relevance: the sigmoid of its classifier's first output, in [0, 1]
/// as vLLM and sentence-transformers' CrossEncoder give it (llama-server sends the logit;
/// the order is the same).
pub fn relevance(vector: &[f32]) -> f64 {
    let logit = vector.first().copied().map_or(0.0, f64::from);
    1.0 / (1.0 + (-logit).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_then_normalised() {
        let v = finish_vector(vec![3.0, 4.0, 12.0], Some(2), true);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(finish_vector(vec![3.0, 4.0], None, false), vec![3.0, 4.0]);
        assert_eq!(finish_vector(vec![0.0, 0.0], None, true), vec![0.0, 0.0], "a zero vector stays zero");
    }

    #[test]
    fn base64_is_little_endian_f32() {
        let encoded = Encoding::Base64.encode(&[1.0, -2.5]);
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(encoded.as_str().expect("a string")).expect("base64");
        assert_eq!(bytes, [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat());
        assert_eq!(Encoding::Float.encode(&[0.5]), serde_json::json!([0.5]));
        assert!(Encoding::from_field(Some("binary")).is_err());
    }

    #[test]
    fn dimensions_only_for_declared_matryoshka_sizes() {
        assert_eq!(checked_dimensions(None, 384, &[]).ok(), Some(None));
        assert_eq!(checked_dimensions(Some(384), 384, &[]).ok(), Some(None));
        assert!(checked_dimensions(Some(128), 384, &[]).is_err());
        assert_eq!(checked_dimensions(Some(128), 384, &[256, 128]).ok(), Some(Some(128)));
        assert!(checked_dimensions(Some(100), 384, &[256, 128]).is_err());
        assert!(checked_dimensions(Some(-1), 384, &[256]).is_err());
    }

    #[test]
    fn relevance_is_the_sigmoid_of_the_logit() {
        assert!((relevance(&[0.0]) - 0.5).abs() < 1e-12);
        assert!(relevance(&[4.0]) > relevance(&[1.0]));
    }
}
