//! Prompts from files, read offline: ShareGPT-style JSON or JSONL.

use std::path::Path;

use serde_json::Value;

use crate::protocol::{PromptSpec, RequestSpec};

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Format { path: String, message: String },
}

/// Loads requests. `.jsonl`: one `{"prompt"|"messages", "max_tokens"?}` per line.
/// Otherwise a JSON array of ShareGPT records (`conversations` with `from`/`value`): the
/// first human turn is the prompt.
pub fn load(path: &Path, default_max_tokens: u32) -> Result<Vec<RequestSpec>, DatasetError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io { path: name.clone(), source })?;
    let format_err = |message: String| DatasetError::Format { path: name.clone(), message };
    let specs = if path.extension().is_some_and(|e| e == "jsonl") {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                let v: Value = serde_json::from_str(line).map_err(|e| format_err(format!("line {}: {e}", i + 1)))?;
                jsonl_record(&v, default_max_tokens).ok_or_else(|| format_err(format!("line {}: needs \"prompt\" or \"messages\"", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()?
    } else {
        let v: Value = serde_json::from_str(&text).map_err(|e| format_err(e.to_string()))?;
        let records = v.as_array().ok_or_else(|| format_err("expected a JSON array of conversations".into()))?;
        records.iter().filter_map(|r| sharegpt_record(r, default_max_tokens)).collect()
    };
    if specs.is_empty() {
        return Err(format_err("no usable prompts".into()));
    }
    Ok(specs)
}

fn jsonl_record(v: &Value, default_max_tokens: u32) -> Option<RequestSpec> {
    let prompt = match (v["prompt"].as_str(), v["messages"].as_array()) {
        (Some(p), _) => PromptSpec::Text(p.to_string()),
        (None, Some(m)) => PromptSpec::Messages(m.clone()),
        _ => return None,
    };
    let max_tokens = v["max_tokens"].as_u64().map_or(default_max_tokens, |n| n as u32);
    Some(RequestSpec { prompt, max_tokens })
}

fn sharegpt_record(v: &Value, max_tokens: u32) -> Option<RequestSpec> {
    let turns = v["conversations"].as_array()?;
    let first_human = turns.iter().find(|t| matches!(t["from"].as_str(), Some("human" | "user")))?;
    let text = first_human["value"].as_str()?.trim();
    (!text.is_empty()).then(|| RequestSpec { prompt: PromptSpec::Text(text.to_string()), max_tokens })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, content: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("rillm-ds-{}-{name}", std::process::id()));
        std::fs::write(&path, content).unwrap();
        path
    }

    #[test]
    fn sharegpt_takes_the_first_human_turn() {
        let p = write("sg.json", r#"[{"conversations":[{"from":"system","value":"s"},{"from":"human","value":"Q1"},{"from":"gpt","value":"A"}]},{"conversations":[]}]"#);
        let specs = load(&p, 32).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].prompt, PromptSpec::Text("Q1".into()));
        assert_eq!(specs[0].max_tokens, 32);
    }

    #[test]
    fn jsonl_takes_prompts_messages_and_max_tokens() {
        let p = write("d.jsonl", "{\"prompt\":\"a\",\"max_tokens\":5}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n");
        let specs = load(&p, 9).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].max_tokens, 5);
        assert!(matches!(specs[1].prompt, PromptSpec::Messages(_)));
        assert_eq!(specs[1].max_tokens, 9);
        let bad = write("bad.jsonl", "{\"x\":1}\n");
        assert!(load(&bad, 9).unwrap_err().to_string().contains("line 1"));
    }
}
