//! `--save-sessions`: every request a session sends, as it was sent (history, tools,
//! `max_tokens`), one JSON line each. `--dataset` replays the file as recorded
//! (`dataset::recorded_sessions`), so a second server gets the very requests the first
//! got: recorded agent traffic, rounds after tool calls included.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde_json::json;

use crate::protocol::RequestSpec;
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
