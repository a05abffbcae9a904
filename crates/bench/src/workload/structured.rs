//! Constraint workloads (structured outputs): each request asks for its output in a shape
//! (a JSON Schema, any JSON object, a regex, one of a list), in the form each engine reads
//! (`body::constraint_fields`), and its output is checked against that shape when it comes
//! back. So one run against rillm, vLLM, SGLang or llama-server says how fast each is *and*
//! how often what it produced is valid, which is the point of asking.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::checks::OutputCheck;

/// `--response-format`: what each request's output must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// JSON valid for a schema of `--schemas DIR`, assigned round-robin.
    JsonSchema,
    /// Any JSON object.
    JsonObject,
    /// Text matching `--regex` as a whole.
    Regex,
    /// One of `--choices`.
    Choice,
}

/// One request's constraint: the fields that ask for it, and the check of its output.
pub struct OutputConstraint {
    /// The schema's file name, or the format's name.
    pub name: String,
    format: ResponseFormat,
    schema: Option<Value>,
    validator: Option<jsonschema::Validator>,
    regex: Option<(String, regex::Regex)>,
    choices: Vec<String>,
    /// What the prompt asks for: the schema's `description` or `title`.
    description: String,
}

impl std::fmt::Debug for OutputConstraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputConstraint").field("name", &self.name).field("format", &self.format).finish()
    }
}

impl PartialEq for OutputConstraint {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.format == other.format && self.schema == other.schema
    }
}

impl OutputConstraint {
    pub fn format(&self) -> ResponseFormat {
        self.format
    }

    /// The JSON Schema (`json_schema`).
    pub fn schema(&self) -> Option<&Value> {
        self.schema.as_ref()
    }

    /// The pattern as given (`regex`).
    pub fn pattern(&self) -> Option<&str> {
        self.regex.as_ref().map(|(p, _)| p.as_str())
    }

    pub fn choices(&self) -> &[String] {
        &self.choices
    }

    /// Checks a finished output.
    pub fn check(&self, text: &str) -> OutputCheck {
        match self.format {
            ResponseFormat::JsonSchema | ResponseFormat::JsonObject => match serde_json::from_str::<Value>(text.trim())
            {
                Err(_) => OutputCheck { parses: false, valid: false },
                Ok(value) => {
                    let valid = match &self.validator {
                        Some(validator) => validator.is_valid(&value),
                        None => value.is_object(),
                    };
                    OutputCheck { parses: true, valid }
                }
            },
            ResponseFormat::Regex => {
                let valid = self.regex.as_ref().is_some_and(|(_, r)| r.is_match(text));
                OutputCheck { parses: true, valid }
            }
            ResponseFormat::Choice => OutputCheck { parses: true, valid: self.choices.iter().any(|c| c == text) },
        }
    }

    /// What a prompt asks for, for runs that bring no prompts of their own.
    pub fn prompt_text(&self) -> String {
        match self.format {
            ResponseFormat::JsonSchema | ResponseFormat::JsonObject => {
                format!("{} Reply with a JSON object only.", self.description)
            }
            ResponseFormat::Regex | ResponseFormat::Choice => self.description.clone(),
        }
    }

    fn new(name: String, format: ResponseFormat, description: String) -> Self {
        Self { name, format, schema: None, validator: None, regex: None, choices: Vec::new(), description }
    }
}

/// What `--response-format` and its companions ask for.
pub struct ConstraintArgs<'a> {
    pub format: ResponseFormat,
    pub schemas: Option<&'a Path>,
    pub regex: Option<&'a str>,
    pub choices: &'a [String],
    /// `--prompt`: what regex, choice and json_object requests ask when no prompts are given.
    pub prompt: &'a str,
}

/// The run's constraints, in the order requests take them (round-robin).
pub fn load(args: &ConstraintArgs) -> Result<Vec<Arc<OutputConstraint>>, String> {
    match args.format {
        ResponseFormat::JsonSchema => {
            let dir = args.schemas.ok_or("--response-format json_schema needs --schemas DIR (JSON Schema files)")?;
            load_schemas(dir)
        }
        ResponseFormat::JsonObject => {
            Ok(vec![Arc::new(OutputConstraint::new("json_object".into(), args.format, args.prompt.into()))])
        }
        ResponseFormat::Regex => {
            let pattern = args.regex.ok_or("--response-format regex needs --regex PATTERN")?;
            let anchored = regex::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("--regex: {e}"))?;
            let mut c = OutputConstraint::new("regex".into(), args.format, args.prompt.into());
            c.regex = Some((pattern.to_string(), anchored));
            Ok(vec![Arc::new(c)])
        }
        ResponseFormat::Choice => {
            if args.choices.is_empty() {
                return Err("--response-format choice needs --choices A,B,...".into());
            }
            let mut c = OutputConstraint::new("choice".into(), args.format, args.prompt.into());
            c.choices = args.choices.to_vec();
            Ok(vec![Arc::new(c)])
        }
    }
}

/// Every `*.json` of `dir`, by file name, each a JSON Schema with a validator.
fn load_schemas(dir: &Path) -> Result<Vec<Arc<OutputConstraint>>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("--schemas {}: {e}", dir.display()))?;
    let mut paths: Vec<_> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        return Err(format!("--schemas {}: no .json files", dir.display()));
    }
    paths.iter().map(|path| schema_file(path)).collect()
}

/// One JSON Schema file, named by its stem, with a validator.
pub fn schema_file(path: &Path) -> Result<Arc<OutputConstraint>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let schema: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    json_schema(name, schema).map_err(|e| format!("{}: {e}", path.display()))
}

/// A JSON Schema named `name` (a file's stem, or a recorded request's `json_schema.name`),
/// with a validator.
pub fn json_schema(name: String, schema: Value) -> Result<Arc<OutputConstraint>, String> {
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|e| format!("not a valid JSON Schema: {e}"))?;
    let description = schema["description"].as_str().or(schema["title"].as_str()).unwrap_or(&name).to_string();
    let mut c = OutputConstraint::new(name, ResponseFormat::JsonSchema, description);
    c.schema = Some(schema);
    c.validator = Some(validator);
    Ok(Arc::new(c))
}

/// A recorded chat request's `response_format`, where it asks for a JSON Schema (`None`
/// without one; any other type is refused, so no recorded shape is dropped silently).
pub fn recorded_format(record: &Value) -> Result<Option<Arc<OutputConstraint>>, String> {
    let Some(format) = record.get("response_format").filter(|f| !f.is_null()) else { return Ok(None) };
    match format["type"].as_str() {
        Some("json_schema") => {
            let spec = &format["json_schema"];
            let schema = spec.get("schema").cloned().ok_or("\"response_format.json_schema\" needs \"schema\"")?;
            let name = spec["name"].as_str().unwrap_or("response_format").to_string();
            json_schema(name, schema).map(Some).map_err(|e| format!("\"response_format\": {e}"))
        }
        Some("text") => Ok(None),
        other => Err(format!("\"response_format\" of type {other:?} is not replayed (only json_schema)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schemas_dir() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("schemas")
    }

    #[test]
    fn the_shipped_schemas_load_and_check_outputs() {
        let all = load(&ConstraintArgs {
            format: ResponseFormat::JsonSchema,
            schemas: Some(&schemas_dir()),
            regex: None,
            choices: &[],
            prompt: "",
        })
        .expect("loads");
        assert!(all.len() >= 30, "{}", all.len());
        let person = all.iter().find(|c| c.name == "person").expect("person.json");
        let ok = person.check(r#"{"name": "Ada", "age": 36, "occupation": "mathematician"}"#);
        assert_eq!(ok, OutputCheck { parses: true, valid: true });
        assert!(!person.check(r#"{"name": "Ada", "age": 300, "occupation": "x"}"#).valid, "age > 130");
        assert_eq!(person.check(r#"{"name": "Ada""#), OutputCheck { parses: false, valid: false });
        assert!(person.prompt_text().starts_with("A person mentioned in a news story."));
    }

    #[test]
    fn regex_and_choice_check_the_whole_output() {
        let regex = load(&ConstraintArgs {
            format: ResponseFormat::Regex,
            schemas: None,
            regex: Some("[0-9]{3}"),
            choices: &[],
            prompt: "A number?",
        })
        .expect("loads");
        assert!(regex[0].check("123").valid);
        assert!(!regex[0].check("1234").valid, "anchored");
        assert_eq!(regex[0].pattern(), Some("[0-9]{3}"));
        let choices = ["yes".to_string(), "no".to_string()];
        let choice = load(&ConstraintArgs {
            format: ResponseFormat::Choice,
            schemas: None,
            regex: None,
            choices: &choices,
            prompt: "?",
        })
        .expect("loads");
        assert!(choice[0].check("no").valid && !choice[0].check("nope").valid);
    }
}
