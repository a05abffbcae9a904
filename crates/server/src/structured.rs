//! Structured-output fields, in every spelling clients send: OpenAI's `response_format`,
//! vLLM's `structured_outputs` and its older `guided_*` fields, llama.cpp's `json_schema`.
//! All become one engine [`Constraint`]; a form rillm cannot honour is a 400 naming the
//! field, never ignored, and so is a second constraint beside the first. Beside tools the
//! constraint is composed with the calls in `shape`.

use rillm_backend::Constraint;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// The constraint fields of a request body (flattened into each endpoint's body).
#[derive(Debug, Default, Deserialize)]
pub struct ConstraintFields {
    response_format: Option<Value>,
    structured_outputs: Option<Value>,
    guided_json: Option<Value>,
    guided_regex: Option<Value>,
    guided_choice: Option<Value>,
    guided_grammar: Option<Value>,
    guided_decoding_backend: Option<Value>,
    json_schema: Option<Value>,
    grammar: Option<Value>,
}

/// A constraint and the field it came from (a compile error names that field).
#[derive(Debug, Clone, PartialEq)]
pub struct RequestedConstraint {
    pub constraint: Constraint,
    pub param: String,
}

/// vLLM's names for its structured-output backends; rillm's is llguidance ("guidance").
const BACKENDS: &[&str] = &["auto", "guidance", "llguidance"];

impl ConstraintFields {
    pub fn into_constraint(self) -> Result<Option<RequestedConstraint>, ApiError> {
        if let Some(backend) = self.guided_decoding_backend.filter(|v| !v.is_null()) {
            if !backend.as_str().is_some_and(|b| BACKENDS.contains(&b)) {
                return Err(ApiError::invalid(
                    "guided_decoding_backend",
                    format!("rillm decodes with llguidance; `guided_decoding_backend` may be one of {BACKENDS:?}"),
                ));
            }
        }
        if self.grammar.as_ref().is_some_and(|g| !g.is_null()) {
            return Err(ApiError::invalid(
                "grammar",
                "GBNF grammars are not supported; send a Lark grammar in `structured_outputs.grammar`",
            ));
        }
        let mut found: Vec<RequestedConstraint> = Vec::new();
        let mut add = |constraint: Constraint, param: &str| {
            found.push(RequestedConstraint { constraint, param: param.to_string() });
        };
        if let Some(format) = present(self.response_format) {
            if let Some((constraint, param)) = response_format(format)? {
                add(constraint, param);
            }
        }
        if let Some(outputs) = present(self.structured_outputs) {
            let (constraint, param) = structured_outputs(outputs)?;
            add(constraint, &param);
        }
        if let Some(schema) = present(self.guided_json) {
            add(Constraint::JsonSchema(schema_value(schema, "guided_json")?), "guided_json");
        }
        if let Some(regex) = present(self.guided_regex) {
            add(Constraint::Regex(string(regex, "guided_regex")?), "guided_regex");
        }
        if let Some(choice) = present(self.guided_choice) {
            add(Constraint::Choice(choices(choice, "guided_choice")?), "guided_choice");
        }
        if let Some(grammar) = present(self.guided_grammar) {
            add(Constraint::Lark(string(grammar, "guided_grammar")?), "guided_grammar");
        }
        if let Some(schema) = present(self.json_schema) {
            add(Constraint::JsonSchema(schema_value(schema, "json_schema")?), "json_schema");
        }
        if found.len() > 1 {
            let names: Vec<&str> = found.iter().map(|c| c.param.as_str()).collect();
            return Err(ApiError::invalid(
                found[1].param.clone(),
                format!("at most one output constraint per request; got {}", names.join(" and ")),
            ));
        }
        Ok(found.pop())
    }
}

fn present(value: Option<Value>) -> Option<Value> {
    value.filter(|v| !v.is_null())
}

/// OpenAI's `response_format`: `text`, `json_object` or `json_schema`. llama.cpp's
/// `{"type": "json_object", "schema": ...}` is taken too. With the field a compile error
/// is about.
fn response_format(format: Value) -> Result<Option<(Constraint, &'static str)>, ApiError> {
    let Value::Object(mut format) = format else {
        return Err(ApiError::invalid("response_format", "`response_format` must be an object with a `type`"));
    };
    let kind = format.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    match kind.as_str() {
        "text" => Ok(None),
        "json_object" => match format.remove("schema").filter(|s| !s.is_null()) {
            Some(schema) => Ok(Some((
                Constraint::JsonSchema(schema_value(schema, "response_format.schema")?),
                "response_format.schema",
            ))),
            None => Ok(Some((Constraint::JsonObject, "response_format"))),
        },
        "json_schema" => {
            let Some(Value::Object(mut spec)) = format.remove("json_schema") else {
                return Err(ApiError::invalid(
                    "response_format.json_schema",
                    "`response_format.json_schema` must be an object with `name` and `schema`",
                ));
            };
            if spec.get("strict").is_some_and(|s| !s.is_boolean() && !s.is_null()) {
                return Err(ApiError::invalid("response_format.json_schema.strict", "`strict` must be a boolean"));
            }
            let schema = spec.remove("schema").filter(|s| !s.is_null()).ok_or_else(|| {
                ApiError::invalid(
                    "response_format.json_schema.schema",
                    "`response_format.json_schema.schema` is required: the JSON Schema the output must match",
                )
            })?;
            let param = "response_format.json_schema.schema";
            Ok(Some((Constraint::JsonSchema(schema_value(schema, param)?), param)))
        }
        "" => Err(ApiError::invalid("response_format.type", "`response_format.type` is required")),
        other => Err(ApiError::invalid(
            "response_format.type",
            format!("`response_format.type` `{other}` is not supported; use text, json_object or json_schema"),
        )),
    }
}

/// vLLM's `structured_outputs`: exactly one of `json`, `regex`, `choice`, `grammar`,
/// `json_object`.
fn structured_outputs(outputs: Value) -> Result<(Constraint, String), ApiError> {
    let Value::Object(outputs) = outputs else {
        return Err(ApiError::invalid("structured_outputs", "`structured_outputs` must be an object"));
    };
    let outputs: Map<String, Value> = outputs.into_iter().filter(|(_, v)| !v.is_null()).collect();
    let mut found = Vec::new();
    for (key, value) in outputs {
        let param = format!("structured_outputs.{key}");
        let constraint = match key.as_str() {
            "json" => Constraint::JsonSchema(schema_value(value, &param)?),
            "regex" => Constraint::Regex(string(value, &param)?),
            "choice" => Constraint::Choice(choices(value, &param)?),
            "grammar" => Constraint::Lark(string(value, &param)?),
            "json_object" if value == Value::Bool(true) => Constraint::JsonObject,
            "json_object" if value == Value::Bool(false) => continue,
            _ => {
                return Err(ApiError::invalid(
                    param,
                    format!(
                    "`{key}` is not supported in `structured_outputs`; use json, regex, choice, grammar or json_object"
                ),
                ))
            }
        };
        found.push((constraint, param));
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(ApiError::invalid("structured_outputs", "`structured_outputs` names no constraint")),
        _ => Err(ApiError::invalid(found.remove(1).1, "`structured_outputs` takes one constraint per request")),
    }
}

/// A JSON Schema: an object or a boolean, or (as vLLM takes it) a string holding one.
pub(crate) fn schema_value(value: Value, param: &str) -> Result<Value, ApiError> {
    let value = match value {
        Value::String(text) => serde_json::from_str(&text)
            .map_err(|e| ApiError::invalid(param, format!("`{param}` is not valid JSON: {e}")))?,
        other => other,
    };
    if value.is_object() || value.is_boolean() {
        Ok(value)
    } else {
        Err(ApiError::invalid(param, format!("`{param}` must be a JSON Schema (an object)")))
    }
}

fn string(value: Value, param: &str) -> Result<String, ApiError> {
    match value {
        Value::String(s) if !s.is_empty() => Ok(s),
        _ => Err(ApiError::invalid(param, format!("`{param}` must be a non-empty string"))),
    }
}

fn choices(value: Value, param: &str) -> Result<Vec<String>, ApiError> {
    let list = match value {
        Value::Array(list) if !list.is_empty() => list,
        _ => return Err(ApiError::invalid(param, format!("`{param}` must be a non-empty list of strings"))),
    };
    list.into_iter()
        .map(|v| match v {
            Value::String(s) => Ok(s),
            _ => Err(ApiError::invalid(param, format!("`{param}` must hold only strings"))),
        })
        .collect()
}

/// Fields clients send that change nothing about the output; accepted, as OpenAI does.
const NO_EFFECT_FIELDS: &[&str] =
    &["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];

/// Whether a field's value is the one rillm always has.
type IsDefault = fn(&Value) -> bool;

/// vLLM's and SGLang's fields whose default is what rillm always does: accepted at that
/// value only (text without special tokens; no priority scheduling, where vLLM too refuses
/// a priority; a reasoning model's thought apart from its answer, streamed as it comes; no
/// hidden states). Routers add SGLang's to every request they forward.
const DEFAULT_ONLY_FIELDS: &[(&str, IsDefault)] = &[
    ("skip_special_tokens", |v| v == &Value::Bool(true)),
    ("spaces_between_special_tokens", |v| v == &Value::Bool(true)),
    ("priority", |v| v.as_i64() == Some(0)),
    ("separate_reasoning", |v| v == &Value::Bool(true)),
    ("stream_reasoning", |v| v == &Value::Bool(true)),
    ("include_reasoning", |v| v == &Value::Bool(true)),
    ("return_hidden_states", |v| v == &Value::Bool(false)),
];

/// Every field of an OpenAI request that the endpoint did not take is refused by name
/// (`prediction`, `reasoning_effort`, `modalities`, ...) unless it cannot change the output:
/// a client must never get plain output for a request it shaped with a field rillm
/// silently dropped. `null` counts as absent.
pub fn refuse_unknown_fields(fields: &Map<String, Value>) -> Result<(), ApiError> {
    for (key, value) in fields.iter().filter(|(k, v)| !v.is_null() && !NO_EFFECT_FIELDS.contains(&k.as_str())) {
        let message = match DEFAULT_ONLY_FIELDS.iter().find(|(name, _)| name == key) {
            Some((_, is_default)) if is_default(value) => continue,
            Some(_) => format!("`{key}` is supported at its default only ({key}: {value} is not)"),
            None => format!("`{key}` is not supported by this server"),
        };
        return Err(ApiError::invalid(key.clone(), message));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<Option<RequestedConstraint>, ApiError> {
        serde_json::from_value::<ConstraintFields>(body).expect("fields").into_constraint()
    }

    fn param_of(body: Value) -> String {
        parse(body).expect_err("refused").param.unwrap_or_default()
    }

    #[test]
    fn every_spelling_becomes_one_constraint() {
        let schema = json!({"type": "object"});
        let cases = [
            (json!({"response_format": {"type": "json_object"}}), Constraint::JsonObject),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
                Constraint::JsonSchema(schema.clone()),
            ),
            (json!({"structured_outputs": {"json": schema}}), Constraint::JsonSchema(schema.clone())),
            (json!({"structured_outputs": {"regex": "a+"}}), Constraint::Regex("a+".into())),
            (json!({"structured_outputs": {"choice": ["a", "b"]}}), Constraint::Choice(vec!["a".into(), "b".into()])),
            (json!({"structured_outputs": {"grammar": "start: \"a\""}}), Constraint::Lark("start: \"a\"".into())),
            (json!({"structured_outputs": {"json_object": true}}), Constraint::JsonObject),
            (json!({"guided_json": "{\"type\": \"object\"}"}), Constraint::JsonSchema(schema.clone())),
            (json!({"guided_regex": "[0-9]+"}), Constraint::Regex("[0-9]+".into())),
            (json!({"guided_choice": ["x"]}), Constraint::Choice(vec!["x".into()])),
            (json!({"json_schema": schema}), Constraint::JsonSchema(schema.clone())),
        ];
        for (body, expected) in cases {
            let got = parse(body.clone()).expect("accepted").expect("a constraint");
            assert_eq!(got.constraint, expected, "{body}");
        }
        assert_eq!(parse(json!({"response_format": {"type": "text"}})).expect("ok"), None);
        assert_eq!(parse(json!({})).expect("ok"), None);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused_by_name() {
        let cases = [
            (json!({"response_format": {"type": "grammar"}}), "response_format.type"),
            (json!({"response_format": {}}), "response_format.type"),
            (json!({"response_format": "json"}), "response_format"),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}),
                "response_format.json_schema.schema",
            ),
            (json!({"response_format": {"type": "json_schema"}}), "response_format.json_schema"),
            (
                json!({"response_format": {"type": "json_schema", "json_schema": {"schema": 3}}}),
                "response_format.json_schema.schema",
            ),
            (json!({"structured_outputs": {"structural_tag": "x"}}), "structured_outputs.structural_tag"),
            (json!({"structured_outputs": {"regex": "a", "choice": ["b"]}}), "structured_outputs.choice"),
            (json!({"structured_outputs": {"choice": []}}), "structured_outputs.choice"),
            (json!({"guided_json": "{not json"}), "guided_json"),
            (json!({"guided_choice": [1, 2]}), "guided_choice"),
            (json!({"grammar": "root ::= \"a\""}), "grammar"),
            (json!({"guided_decoding_backend": "xgrammar"}), "guided_decoding_backend"),
            (json!({"response_format": {"type": "json_object"}, "guided_regex": "a"}), "guided_regex"),
        ];
        for (body, param) in cases {
            assert_eq!(param_of(body.clone()), param, "{body}");
        }
    }

    #[test]
    fn unknown_fields_are_refused_unless_they_change_nothing() {
        let fields = |v: Value| v.as_object().cloned().expect("object");
        assert!(refuse_unknown_fields(&fields(json!({"user": "u", "store": false, "prediction": null}))).is_ok());
        let error =
            refuse_unknown_fields(&fields(json!({"user": "u", "prediction": {"content": "x"}}))).expect_err("refused");
        assert_eq!(error.param.as_deref(), Some("prediction"));
        // vLLM's fields at the value rillm always has are accepted; any other is refused.
        assert!(refuse_unknown_fields(&fields(json!({"skip_special_tokens": true, "priority": 0}))).is_ok());
        // What sglang-router and vllm-router add to every chat request they forward.
        let routed = json!({"separate_reasoning": true, "stream_reasoning": true, "include_reasoning": true,
                            "return_hidden_states": false, "skip_special_tokens": true});
        assert!(refuse_unknown_fields(&fields(routed)).is_ok());
        for (body, param) in [
            (json!({"skip_special_tokens": false}), "skip_special_tokens"),
            (json!({"priority": 5}), "priority"),
            (json!({"return_hidden_states": true}), "return_hidden_states"),
            (json!({"separate_reasoning": false}), "separate_reasoning"),
        ] {
            let error = refuse_unknown_fields(&fields(body)).expect_err("refused");
            assert_eq!(error.param.as_deref(), Some(param));
        }
    }
}
