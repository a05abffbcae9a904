//! How a JSON Schema is read when it shapes output. By default as vLLM's xgrammar (strict
//! mode) and llama.cpp read it: an object generates only the properties it names unless its
//! schema says otherwise (`additionalProperties`, `patternProperties`,
//! `unevaluatedProperties`), and an array with `prefixItems` only those items unless `items`
//! says otherwise. That departs from JSON Schema's letter, which allows any other key; given
//! that freedom a small model invents keys (`"skills": ["Java", "Java", ...]`) and runs to
//! `max_tokens`, and a call's arguments carry keys its function does not declare.
//! `--literal-json-schemas` reads schemas to the letter. This is the one place that decides.

use serde_json::{Map, Value};

/// How JSON Schemas given for output are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SchemaReading {
    /// Only what the schema names (the default).
    #[default]
    Closed,
    /// JSON Schema's letter: unnamed properties and items allowed.
    Literal,
}

impl SchemaReading {
    /// `schema` as it will be compiled.
    pub fn read(self, mut schema: Value) -> Value {
        if self == SchemaReading::Closed {
            close(&mut schema, false);
        }
        schema
    }
}

/// Keywords whose value is one subschema.
const ONE: &[&str] = &["additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames"];
/// Keywords whose value is a list of subschemas (`allOf` apart: see `close`).
const LIST: &[&str] = &["anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
const MAP: &[&str] = &["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/// Closes `schema` and every subschema in it. A member of `allOf` is left open (closing each
/// part would refuse the properties the others name), and so is a schema with an `allOf`
/// of its own.
fn close(schema: &mut Value, in_all_of: bool) {
    let Value::Object(object) = schema else { return };
    if !in_all_of && !object.contains_key("allOf") {
        close_object(object);
    }
    for key in ONE {
        if let Some(sub) = object.get_mut(*key) {
            close(sub, false);
        }
    }
    for key in LIST {
        if let Some(Value::Array(subs)) = object.get_mut(*key) {
            subs.iter_mut().for_each(|sub| close(sub, false));
        }
    }
    for key in MAP {
        if let Some(Value::Object(subs)) = object.get_mut(*key) {
            subs.values_mut().for_each(|sub| close(sub, false));
        }
    }
    if let Some(Value::Array(parts)) = object.get_mut("allOf") {
        parts.iter_mut().for_each(|part| close(part, true));
    }
}

/// An object that names its properties generates only those; an array that names its
/// first items, only those.
fn close_object(object: &mut Map<String, Value>) {
    let open_keys = ["additionalProperties", "patternProperties", "unevaluatedProperties"];
    if object.get("properties").is_some_and(Value::is_object) && !open_keys.iter().any(|k| object.contains_key(*k)) {
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    let open_items = ["items", "unevaluatedItems"];
    if object.get("prefixItems").is_some_and(Value::is_array) && !open_items.iter().any(|k| object.contains_key(*k)) {
        object.insert("items".into(), Value::Bool(false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_and_tuples_generate_only_what_they_name_unless_they_say_otherwise() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "address": {"type": "object", "properties": {"city": {"type": "string"}}},
                "tags": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {}}}},
                "free": {"type": "object"},
                "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
                "rest": {"type": "array", "prefixItems": [{"type": "number"}], "items": {"type": "string"}},
                "either": {"anyOf": [{"type": "object", "properties": {"a": {}}}, {"type": "null"}]},
                "both": {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
            },
            "$defs": {"Item": {"type": "object", "properties": {"id": {"type": "integer"}}}}
        });
        let closed = SchemaReading::Closed.read(schema.clone());
        let at = |path: &str| closed.pointer(path).cloned().unwrap_or(Value::Null);
        assert_eq!(at("/additionalProperties"), json!(false));
        assert_eq!(at("/properties/address/additionalProperties"), json!(false));
        assert_eq!(at("/properties/tags/additionalProperties/additionalProperties"), json!(false));
        assert_eq!(at("/properties/tags/additionalProperties/type"), json!("object"), "its own schema stays");
        assert_eq!(at("/properties/free"), json!({"type": "object"}), "an object naming nothing stays free");
        assert_eq!(at("/properties/point/items"), json!(false));
        assert_eq!(at("/properties/rest/items"), json!({"type": "string"}));
        assert_eq!(at("/properties/either/anyOf/0/additionalProperties"), json!(false));
        assert_eq!(at("/properties/both/allOf/0/additionalProperties"), Value::Null, "allOf parts stay open");
        assert_eq!(at("/$defs/Item/additionalProperties"), json!(false));
        // What says otherwise is kept, and the literal reading changes nothing.
        let open = json!({"properties": {"a": {}}, "patternProperties": {"^x": {}}});
        assert_eq!(SchemaReading::Closed.read(open.clone()), open);
        assert_eq!(SchemaReading::Literal.read(schema.clone()), schema);
        assert_eq!(SchemaReading::Closed.read(json!(true)), json!(true));
    }
}
