//! `--save-sessions`: every request a session sends, as it was sent (history, tools,
//! answer format, `max_tokens`), one JSON line each. `--dataset` replays the file as recorded
//! (`dataset::recorded_sessions`), so a second server gets the very requests the first
//! got: recorded agent traffic, rounds after tool calls included.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::protocol::Protocol;
use crate::workload::body::constraint_fields;
use crate::workload::spec::RequestSpec;
use crate::workload::tools::ToolSet;

pub struct SessionRecorder {
    file: Mutex<std::fs::File>,
    path: String,
    failed: AtomicBool,
}

impl SessionRecorder {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: Mutex::new(std::fs::File::create(path)?),
            path: path.display().to_string(),
            failed: false.into(),
        })
    }

    /// Appends one request; a session's lines come in the order it sent them.
    pub fn save(&self, session: &str, spec: &RequestSpec, tools: Option<&ToolSet>) {
        let mut line =
            json!({"session_id": session, "messages": spec.prompt.as_messages(), "max_tokens": spec.max_tokens});
        if let Some(tools) = tools {
            line["tools"] = json!(tools.tools);
            line["tool_choice"] = tools.tool_choice.clone();
        }
        // The answer format (`--final-schema`), in the chat shape the records have.
        let format = spec.constraint.as_ref().map(|c| constraint_fields(c, Protocol::Chat));
        if let (Some(Ok(Value::Object(fields))), Some(line)) = (format, line.as_object_mut()) {
            line.extend(fields);
        }
        let mut text = line.to_string();
        text.push('\n');
        // One write per line, under the lock: concurrent sessions never interleave a line.
        let written = match self.file.lock() {
            Ok(mut file) => file.write_all(text.as_bytes()),
            Err(_) => Err(std::io::Error::other("an earlier write panicked")),
        };
        if let Err(e) = written {
            if !self.failed.swap(true, Ordering::SeqCst) {
                eprintln!("rillm bench: --save-sessions {}: {e}; the file is incomplete", self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::spec::PromptSpec;

    #[test]
    fn a_saved_request_keeps_its_answer_format() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("saved.jsonl");
        let recorder = SessionRecorder::create(&path).expect("created");
        let schema = json!({"type": "object", "properties": {"answer": {"type": "string"}}});
        let mut spec = RequestSpec::new(PromptSpec::Text("q".into()), 5);
        recorder.save("plain", &spec, None);
        spec.constraint =
            Some(crate::workload::structured::json_schema("final".into(), schema.clone()).expect("a schema"));
        recorder.save("typed", &spec, None);
        let text = std::fs::read_to_string(&path).expect("written");
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
        assert_eq!(lines[0].get("response_format"), None);
        assert_eq!(lines[1]["response_format"]["type"], "json_schema");
        assert_eq!(lines[1]["response_format"]["json_schema"]["schema"], schema);
        assert_eq!(lines[1]["response_format"]["json_schema"]["name"], "final");
    }
}
