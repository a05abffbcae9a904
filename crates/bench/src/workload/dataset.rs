//! Prompts from files, read offline: ShareGPT-style JSON or JSONL.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::workload::conversation::{RecordedTurn, Session, Turn};
use crate::workload::spec::{PromptSpec, RequestSpec};
use crate::workload::structured;
use crate::workload::tools::ToolSet;

#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("reading {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Format { path: String, message: String },
}

/// Loads requests. `.jsonl`: one `{"prompt"|"messages", "max_tokens"?, "model"?}` per line; a line
/// may be a recorded OpenAI chat request, with its own `tools` and `tool_choice` (and
/// `max_completion_tokens`): it is replayed as recorded and its calls checked against its
/// tools. Otherwise a JSON array of ShareGPT records (`conversations` with `from`/`value`): the
/// first human turn is the prompt.
pub fn load(path: &Path, default_max_tokens: u32) -> Result<Vec<RequestSpec>, DatasetError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io { path: name.clone(), source })?;
    let format_err = |message: String| DatasetError::Format { path: name.clone(), message };
    let specs = if path.extension().is_some_and(|e| e == "jsonl") {
        let mut tool_sets = ToolSets::default();
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                let v: Value = serde_json::from_str(line).map_err(|e| format_err(format!("line {}: {e}", i + 1)))?;
                let mut spec = jsonl_record(&v, default_max_tokens)
                    .ok_or_else(|| format_err(format!("line {}: needs \"prompt\" or \"messages\"", i + 1)))?;
                spec.tools = tool_sets.of(&v).map_err(|e| format_err(format!("line {}: {e}", i + 1)))?;
                Ok(spec)
            })
            .collect::<Result<Vec<_>, DatasetError>>()?
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
    let mut spec = RequestSpec::new(prompt, record_max_tokens(v, default_max_tokens));
    spec.model = v["model"].as_str().map(Arc::from);
    Some(spec)
}

/// A recorded request's `max_tokens` (or `max_completion_tokens`), else the run's.
fn record_max_tokens(v: &Value, default_max_tokens: u32) -> u32 {
    let max_tokens = v["max_tokens"].as_u64().or(v["max_completion_tokens"].as_u64());
    max_tokens.map_or(default_max_tokens, |n| n as u32)
}

/// Recorded requests' tool lists, built once each: an agent's requests repeat one list.
#[derive(Default)]
struct ToolSets(HashMap<String, Arc<ToolSet>>);

impl ToolSets {
    fn of(&mut self, record: &Value) -> Result<Option<Arc<ToolSet>>, String> {
        let Some(tools) = record.get("tools").filter(|t| !t.is_null()) else {
            return Ok(None);
        };
        let tools = tools.as_array().ok_or("\"tools\" must be an array")?;
        let choice = record.get("tool_choice").filter(|c| !c.is_null()).cloned().unwrap_or_else(|| json!("auto"));
        let key = json!([tools, choice]).to_string();
        if let Some(set) = self.0.get(&key) {
            return Ok(Some(set.clone()));
        }
        // A replayed request is one round: the recording holds the rounds after it.
        let set = Arc::new(ToolSet::new(tools.clone(), choice, 0, 1)?);
        self.0.insert(key, set.clone());
        Ok(Some(set))
    }
}

fn sharegpt_record(v: &Value, max_tokens: u32) -> Option<RequestSpec> {
    let turns = v["conversations"].as_array()?;
    let first_human = turns.iter().find(|t| matches!(t["from"].as_str(), Some("human" | "user")))?;
    let text = first_human["value"].as_str()?.trim();
    (!text.is_empty()).then(|| RequestSpec::new(PromptSpec::Text(text.to_string()), max_tokens))
}

fn read(path: &Path) -> Result<String, DatasetError> {
    std::fs::read_to_string(path).map_err(|source| DatasetError::Io { path: path.display().to_string(), source })
}

/// A JSONL file whose first record has `turns` holds sessions.
pub fn is_sessions_file(path: &Path) -> Result<bool, DatasetError> {
    if path.extension().is_none_or(|e| e != "jsonl") {
        return Ok(false);
    }
    let text = read(path)?;
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    Ok(serde_json::from_str::<Value>(first).is_ok_and(|v| v.get("turns").is_some() || is_recorded(&v)))
}

/// A request saved by `--save-sessions`: its session and its whole history.
fn is_recorded(v: &Value) -> bool {
    v.get("turns").is_none() && v.get("session_id").is_some() && v["messages"].is_array()
}

/// Conversations, sent turn by turn with the server's live replies as history.
/// `.jsonl`: `{"session_id", "turns": [{"text" | "messages", "max_tokens"?, "delay_ms"?}]}`,
/// or requests saved by `--save-sessions` (replayed as recorded, see [`recorded_sessions`]).
/// Otherwise ShareGPT: every human turn in order (a leading system turn opens the history).
pub fn load_sessions(path: &Path, default_max_tokens: u32) -> Result<Vec<Session>, DatasetError> {
    let name = path.display().to_string();
    let text = read(path)?;
    let format_err = |message: String| DatasetError::Format { path: name.clone(), message };
    let sessions: Vec<Session> = if path.extension().is_some_and(|e| e == "jsonl") {
        let records = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, line)| {
                serde_json::from_str::<Value>(line)
                    .map(|v| (i, v))
                    .map_err(|e| format_err(format!("line {}: {e}", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if records.first().is_some_and(|(_, v)| is_recorded(v)) {
            recorded_sessions(&records, default_max_tokens).map_err(format_err)?
        } else {
            records
                .iter()
                .map(|(i, v)| {
                    jsonl_session(v, *i, default_max_tokens).map_err(|m| format_err(format!("line {}: {m}", i + 1)))
                })
                .collect::<Result<_, _>>()?
        }
    } else {
        let v: Value = serde_json::from_str(&text).map_err(|e| format_err(e.to_string()))?;
        let records = v.as_array().ok_or_else(|| format_err("expected a JSON array of conversations".into()))?;
        records.iter().enumerate().filter_map(|(i, r)| sharegpt_session(r, i, default_max_tokens)).collect()
    };
    if sessions.is_empty() {
        return Err(format_err("no usable sessions".into()));
    }
    Ok(sessions)
}

fn jsonl_session(v: &Value, line: usize, default_max_tokens: u32) -> Result<Session, String> {
    let id = match &v["session_id"] {
        Value::String(s) => s.clone(),
        Value::Null => format!("line{}", line + 1),
        other => other.to_string(),
    };
    let turns = v["turns"].as_array().filter(|t| !t.is_empty()).ok_or("needs a non-empty \"turns\" array")?;
    let turns = turns
        .iter()
        .enumerate()
        .map(|(j, t)| {
            let messages = match (t["text"].as_str(), t["messages"].as_array()) {
                (Some(text), _) => vec![serde_json::json!({"role": "user", "content": text})],
                (None, Some(m)) if !m.is_empty() => m.clone(),
                _ => return Err(format!("turn {}: needs \"text\" or \"messages\"", j + 1)),
            };
            let max_tokens = t["max_tokens"].as_u64().map_or(default_max_tokens, |n| n.min(u64::from(u32::MAX)) as u32);
            Ok(Turn::live(messages, max_tokens, t["delay_ms"].as_f64().unwrap_or(0.0).max(0.0)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Session { id: id.into(), turns })
}

/// Requests saved by `--save-sessions`, one per line: `{"session_id", "messages", "tools"?,
/// "tool_choice"?, "response_format"?, "max_tokens"?}`, each session's in the order it sent them. Each is sent
/// as recorded, after the previous one of its session is answered: every server gets the
/// same requests, whatever it replied (recorded agent traffic: the rounds after a tool call
/// exist even for a server that makes no calls).
fn recorded_sessions(records: &[(usize, Value)], default_max_tokens: u32) -> Result<Vec<Session>, String> {
    let mut tool_sets = ToolSets::default();
    let mut order: Vec<String> = Vec::new();
    let mut turns: HashMap<String, Vec<Turn>> = HashMap::new();
    for (i, v) in records {
        let at = |m: &str| format!("line {}: {m}", i + 1);
        let id = match &v["session_id"] {
            Value::String(s) => s.clone(),
            Value::Null => return Err(at("needs \"session_id\"")),
            other => other.to_string(),
        };
        let messages = v["messages"].as_array().filter(|m| !m.is_empty()).ok_or_else(|| at("needs \"messages\""))?;
        let tools = tool_sets.of(v).map_err(|e| at(&e))?;
        let max_tokens = record_max_tokens(v, default_max_tokens);
        let answer = structured::recorded_format(v).map_err(|e| at(&e))?;
        let recorded = RecordedTurn::new(messages, tools, answer);
        let turn = Turn { messages: messages.clone(), max_tokens, delay_ms: 0.0, recorded: Some(recorded) };
        if !turns.contains_key(&id) {
            order.push(id.clone());
        }
        turns.entry(id).or_default().push(turn);
    }
    Ok(order.into_iter().map(|id| Session { turns: turns.remove(&id).unwrap_or_default(), id: id.into() }).collect())
}

fn sharegpt_session(v: &Value, index: usize, max_tokens: u32) -> Option<Session> {
    let record = v["conversations"].as_array()?;
    let mut turns: Vec<Turn> = Vec::new();
    let mut system = None;
    for t in record {
        let text = t["value"].as_str().unwrap_or("").trim();
        match t["from"].as_str() {
            Some("system") if turns.is_empty() && !text.is_empty() => system = Some(text.to_string()),
            Some("human" | "user") if !text.is_empty() => {
                let mut messages = Vec::new();
                if let Some(s) = system.take() {
                    messages.push(serde_json::json!({"role": "system", "content": s}));
                }
                messages.push(serde_json::json!({"role": "user", "content": text}));
                turns.push(Turn::live(messages, max_tokens, 0.0));
            }
            _ => {}
        }
    }
    let id = v["id"].as_str().map_or_else(|| format!("conv{index}"), str::to_string);
    (!turns.is_empty()).then(|| Session { id: id.into(), turns })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::workload::test_file as write;

    #[test]
    fn sharegpt_takes_the_first_human_turn() {
        let p = write(
            "sg.json",
            r#"[{"conversations":[{"from":"system","value":"s"},{"from":"human","value":"Q1"},{"from":"gpt","value":"A"}]},{"conversations":[]}]"#,
        );
        let specs = load(&p, 32).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(specs[0].prompt, PromptSpec::Text("Q1".into()));
        assert_eq!(specs[0].max_tokens, 32);
    }

    #[test]
    fn jsonl_takes_prompts_messages_and_max_tokens() {
        let p = write(
            "d.jsonl",
            "{\"prompt\":\"a\",\"max_tokens\":5}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n",
        );
        let specs = load(&p, 9).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].max_tokens, 5);
        assert!(matches!(specs[1].prompt, PromptSpec::Messages(_)));
        assert_eq!(specs[1].max_tokens, 9);
        let named = write("m.jsonl", "{\"prompt\":\"a\",\"model\":\"chat\"}\n{\"prompt\":\"b\"}\n");
        let models: Vec<Option<String>> =
            load(&named, 9).unwrap().iter().map(|s| s.model.as_deref().map(str::to_string)).collect();
        assert_eq!(models, vec![Some("chat".to_string()), None], "a record's model (--record-models sends it)");
        let bad = write("bad.jsonl", "{\"x\":1}\n");
        assert!(load(&bad, 9).unwrap_err().to_string().contains("line 1"));
    }

    #[test]
    fn recorded_chat_requests_keep_their_own_tools_built_once_per_list() {
        let tool = r#"{"type":"function","function":{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}"#;
        let calls = r#"[{"role":"user","content":"1+1"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"add","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"2"}]"#;
        let p = write(
            "agent.jsonl",
            &format!(
                "{{\"messages\":[{{\"role\":\"user\",\"content\":\"1+1\"}}],\"tools\":[{tool}],\"tool_choice\":\"required\",\"max_completion_tokens\":40}}\n\
                 {{\"messages\":{calls},\"tools\":[{tool}],\"tool_choice\":\"required\"}}\n{{\"prompt\":\"plain\"}}\n"
            ),
        );
        let specs = load(&p, 9).unwrap();
        let (first, second) = (specs[0].tools.as_ref().expect("tools"), specs[1].tools.as_ref().expect("tools"));
        assert!(Arc::ptr_eq(first, second), "one list, built once");
        assert_eq!((first.tool_choice.as_str(), specs[0].max_tokens, specs[1].max_tokens), (Some("required"), 40, 9));
        assert!(specs[2].tools.is_none());
        let PromptSpec::Messages(history) = &specs[1].prompt else { panic!("messages") };
        assert_eq!(history[2]["tool_call_id"], "c", "the recorded history is sent as it is");
        // Calls are checked against the record's tools.
        let mut good = vec![crate::protocol::tool_calls::ToolCall {
            id: "x".into(),
            name: "add".into(),
            arguments: r#"{"a":2}"#.into(),
        }];
        assert_eq!(first.check(&mut good, false).valid, 1);
        let mut bad = vec![crate::protocol::tool_calls::ToolCall {
            id: "y".into(),
            name: "add".into(),
            arguments: r#"{"a":"two"}"#.into(),
        }];
        assert_eq!(first.check(&mut bad, false).valid, 0);
        let broken = write("agent-bad.jsonl", "{\"messages\":[],\"tools\":[{\"type\":\"function\"}]}\n");
        assert!(load(&broken, 9).unwrap_err().to_string().contains("line 1: tool 0 has no function.name"));
    }

    #[test]
    fn saved_requests_replay_as_recorded_sessions_in_order_with_turn_and_round() {
        let tool = r#"{"type":"function","function":{"name":"add","parameters":{"type":"object"}}}"#;
        let call = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"add","arguments":"{}"}}]}"#;
        let result = r#"{"role":"tool","tool_call_id":"c","content":"2"}"#;
        let user = |q: &str| format!(r#"{{"role":"user","content":"{q}"}}"#);
        // Two sessions' lines interleaved, as concurrent sessions write them.
        let lines = [
            format!(
                r#"{{"session_id":"a","messages":[{}],"tools":[{tool}],"tool_choice":"required","max_tokens":7}}"#,
                user("1+1")
            ),
            format!(r#"{{"session_id":"b","messages":[{}]}}"#, user("hi")),
            format!(
                r#"{{"session_id":"a","messages":[{},{call},{result}],"tools":[{tool}],"tool_choice":"required"}}"#,
                user("1+1")
            ),
            format!(
                r#"{{"session_id":"a","messages":[{},{call},{result},{call},{result}],"tools":[{tool}],"tool_choice":"required"}}"#,
                user("1+1")
            ),
            format!(
                r#"{{"session_id":"b","messages":[{},{{"role":"assistant","content":"yo"}},{}]}}"#,
                user("hi"),
                user("and?")
            ),
        ];
        let p = write("rec.jsonl", &lines.join("\n"));
        assert!(is_sessions_file(&p).unwrap());
        let s = load_sessions(&p, 9).unwrap();
        assert_eq!((&*s[0].id, s[0].turns.len(), &*s[1].id, s[1].turns.len()), ("a", 3, "b", 2));
        let placed = |t: &Turn| t.recorded.as_ref().map(|r| (r.turn, r.round, r.tools.is_some()));
        let a: Vec<_> = s[0].turns.iter().map(placed).collect();
        assert_eq!(a, [Some((1, 1, true)), Some((1, 2, true)), Some((1, 3, true))]);
        let b: Vec<_> = s[1].turns.iter().map(placed).collect();
        assert_eq!(b, [Some((1, 1, false)), Some((2, 1, false))]);
        assert_eq!((s[0].turns[0].max_tokens, s[0].turns[1].max_tokens), (7, 9));
        assert_eq!(s[0].turns[2].messages.len(), 5, "the whole history, as recorded");
        let tools = |t: &Turn| t.recorded.as_ref().and_then(|r| r.tools.clone()).expect("tools");
        assert!(Arc::ptr_eq(&tools(&s[0].turns[0]), &tools(&s[0].turns[2])), "one list, built once");
        let bad = write("rec-bad.jsonl", &format!("{}\n{{\"session_id\":\"a\",\"messages\":[]}}\n", lines[1]));
        assert!(load_sessions(&bad, 9).unwrap_err().to_string().contains("line 2: needs \"messages\""));
    }

    #[test]
    fn a_saved_answer_format_is_replayed_and_checked_and_other_formats_are_refused() {
        let schema = r#"{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]}"#;
        let typed = format!(
            r#"{{"session_id":"a","messages":[{{"role":"user","content":"q"}}],"response_format":{{"type":"json_schema","json_schema":{{"name":"final","schema":{schema},"strict":true}}}}}}"#
        );
        let p = write("rec-typed.jsonl", &typed);
        let s = load_sessions(&p, 9).unwrap();
        let answer = s[0].turns[0].recorded.as_ref().and_then(|r| r.answer.clone()).expect("the format");
        assert_eq!(answer.name, "final");
        assert!(answer.check(r#"{"answer": "x"}"#).valid);
        assert!(!answer.check(r#"{"other": 1}"#).valid);
        let plain = write("rec-plain.jsonl", r#"{"session_id":"a","messages":[{"role":"user","content":"q"}]}"#);
        assert!(load_sessions(&plain, 9).unwrap()[0].turns[0].recorded.as_ref().is_some_and(|r| r.answer.is_none()));
        let object =
            r#"{"session_id":"a","messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"}}"#;
        let refused = load_sessions(&write("rec-object.jsonl", object), 9).unwrap_err().to_string();
        assert!(refused.contains("line 1: \"response_format\" of type Some(\"json_object\")"), "{refused}");
    }

    #[test]
    fn sessions_from_jsonl_and_sharegpt_keep_every_human_turn_in_order() {
        let p = write("s.jsonl", "{\"session_id\":\"a\",\"turns\":[{\"text\":\"one\"},{\"text\":\"two\",\"max_tokens\":3,\"delay_ms\":50}]}\n{\"turns\":[{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"q\"}]}]}\n");
        assert!(is_sessions_file(&p).unwrap());
        let s = load_sessions(&p, 8).unwrap();
        assert_eq!((&*s[0].id, s[0].turns.len(), &*s[1].id), ("a", 2, "line2"));
        assert_eq!((s[0].turns[0].max_tokens, s[0].turns[1].max_tokens, s[0].turns[1].delay_ms), (8, 3, 50.0));
        assert_eq!(s[1].turns[0].messages.len(), 2);
        let bad = write("sbad.jsonl", "{\"turns\":[{\"x\":1}]}\n");
        assert!(load_sessions(&bad, 8).unwrap_err().to_string().contains("turn 1"));

        let sg = write(
            "sg2.json",
            r#"[{"id":"c1","conversations":[{"from":"system","value":"be brief"},{"from":"human","value":"Q1"},{"from":"gpt","value":"A1"},{"from":"human","value":"Q2"},{"from":"gpt","value":"A2"}]}]"#,
        );
        assert!(!is_sessions_file(&sg).unwrap());
        let s = load_sessions(&sg, 16).unwrap();
        assert_eq!(s[0].turns.len(), 2);
        assert_eq!(s[0].turns[0].messages[0]["role"], "system");
        assert_eq!(s[0].turns[1].messages, vec![serde_json::json!({"role": "user", "content": "Q2"})]);
    }
}
