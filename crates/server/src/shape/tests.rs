//! The whole matrix: every `tool_choice` × every answer format × parallel calls on and off,
//! read from request fields as a route reads them, to the constraint the engine runs or the
//! 400 naming the field.

use rillm_backend::{Constraint, ToolCallFormat};
use serde_json::{json, Value};

use super::*;
use crate::error::ApiError;
use crate::schema_reading::SchemaReading;
use crate::structured::ConstraintFields;
use crate::tools::AnsweredCall;

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "add",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}
    ])
}

/// Every `tool_choice`: absent (auto), the three strings, and a named function.
const CHOICES: [&str; 5] = ["absent", "none", "auto", "required", "named"];

fn choice_value(name: &str) -> Option<Value> {
    match name {
        "absent" => None,
        "named" => Some(json!({"type": "function", "function": {"name": "add"}})),
        other => Some(json!(other)),
    }
}

fn formats() -> Vec<(&'static str, Value)> {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    vec![
        ("none", json!({})),
        ("text", json!({"response_format": {"type": "text"}})),
        ("json_object", json!({"response_format": {"type": "json_object"}})),
        (
            "json_schema",
            json!({"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}),
        ),
        ("regex", json!({"structured_outputs": {"regex": "[0-9]+/[0-9]+"}})),
        ("choice", json!({"structured_outputs": {"choice": ["yes", "no"]}})),
        ("grammar", json!({"structured_outputs": {"grammar": "start: \"a\" | \"b\""}})),
    ]
}

fn shape(choice: &str, format: &Value, parallel: bool) -> Result<OutputShape, ApiError> {
    let tools = ToolRequest::from_fields(Some(tools()), choice_value(choice), Some(json!(parallel)))?;
    let format = serde_json::from_value::<ConstraintFields>(format.clone()).expect("fields").into_constraint()?;
    Ok(OutputShape::new(tools, format, ShapeRules::default()))
}

fn grammar(constraint: &Constraint) -> &str {
    match constraint {
        Constraint::Lark(g) | Constraint::Lazy { grammar: g, .. } => g,
        other => panic!("not a grammar: {other:?}"),
    }
}

/// What the answer rule of a combined grammar must hold for each format.
fn answer_mark(format: &str) -> &'static str {
    match format {
        "json_object" => "answer: %json {\"type\":\"object\"",
        "json_schema" => "\"additionalProperties\":false",
        "regex" => "answer: /[0-9]+\\/[0-9]+/",
        "choice" => "answer: \"yes\" | \"no\"",
        "grammar" => "answer: %lark {\nstart: \"a\" | \"b\"\n}",
        other => panic!("{other} has no answer"),
    }
}

#[test]
fn every_choice_and_format_comes_to_one_constraint() {
    for choice in CHOICES {
        for (format, fields) in formats() {
            for parallel in [true, false] {
                let case = format!("tool_choice {choice}, format {format}, parallel {parallel}");
                let shaped = shape(choice, &fields, parallel).expect("valid").constraint().expect(&case);
                let has_format = !matches!(format, "none" | "text");
                let repeats = shaped.constraint.to_string_lossy().contains("(\"\\n\" call)*");
                match (choice, has_format) {
                    ("none", false) => assert!(grammar(&shaped.constraint).starts_with("start: TEXT?"), "{case}"),
                    ("none", true) => {
                        assert!(!shaped.constraint.to_string_lossy().contains("call"), "{case}: the format alone");
                        assert!(!shaped.param.starts_with("tools"), "{case}: {}", shaped.param);
                    }
                    ("absent" | "auto", false) => {
                        assert!(
                            matches!(&shaped.constraint, Constraint::Lazy { trigger, .. } if trigger == "<tool_call>")
                        );
                        assert_eq!(repeats, parallel, "{case}");
                    }
                    ("absent" | "auto", true) => {
                        let g = grammar(&shaped.constraint);
                        assert!(matches!(shaped.constraint, Constraint::Lark(_)), "{case}: not lazy, no prose");
                        assert!(g.starts_with("start: calls | answer\ncalls: "), "{case}: {g}");
                        assert!(g.contains(answer_mark(format)), "{case}: {g}");
                        assert_eq!(repeats, parallel, "{case}");
                        assert!(!shaped.param.starts_with("tools"), "{case}: a refusal names the format");
                    }
                    ("required" | "named", _) => {
                        let g = grammar(&shaped.constraint);
                        assert!(g.starts_with("start: calls\ncalls: ") && !g.contains("answer"), "{case}: {g}");
                        assert_eq!(g.contains("get_weather"), choice == "required", "{case}");
                        assert_eq!(repeats, parallel, "{case}");
                        assert_eq!(shaped.param, "tools", "{case}");
                    }
                    other => panic!("unexpected {other:?}"),
                }
                // Every function's parameters and the format are parts a refusal can name.
                let params: Vec<&str> = shaped.parts.iter().map(|(p, _)| p.as_str()).collect();
                assert!(params.contains(&"tools[1].function.parameters"), "{case}: {params:?}");
                assert_eq!(params.len(), 2 + usize::from(has_format), "{case}: {params:?}");
            }
        }
    }
}

#[test]
fn what_cannot_shape_a_reply_is_a_400_naming_the_field() {
    let param = |choice: Option<Value>, tools: Option<Value>, format: Value| {
        let tools = ToolRequest::from_fields(tools, choice, None);
        let format = serde_json::from_value::<ConstraintFields>(format).expect("fields").into_constraint();
        match (tools, format) {
            (Err(e), _) | (_, Err(e)) => e.param.unwrap_or_default(),
            _ => String::new(),
        }
    };
    let named = |name: &str| Some(json!({"type": "function", "function": {"name": name}}));
    assert_eq!(param(named("nope"), Some(tools()), json!({})), "tool_choice");
    assert_eq!(param(Some(json!("required")), None, json!({})), "tool_choice");
    assert_eq!(param(Some(json!("sometimes")), Some(tools()), json!({})), "tool_choice");
    assert_eq!(param(None, Some(tools()), json!({"response_format": {"type": "yaml"}})), "response_format.type");
    assert_eq!(param(None, Some(tools()), json!({"structured_outputs": {"choice": []}})), "structured_outputs.choice");
    // Without tools the format stands alone; without either nothing shapes the reply.
    let alone = shape_without_tools(json!({"structured_outputs": {"regex": "a+"}}));
    assert_eq!(
        alone.map(|s| (s.constraint, s.param)),
        Some((Constraint::Regex("a+".into()), "structured_outputs.regex".into()))
    );
    assert_eq!(shape_without_tools(json!({})), None);
}

fn shape_without_tools(format: Value) -> Option<ShapedConstraint> {
    let format = serde_json::from_value::<ConstraintFields>(format).expect("fields").into_constraint().expect("valid");
    OutputShape::new(None, format, ShapeRules::default()).constraint()
}

#[test]
fn schemas_are_read_closed_unless_the_server_reads_them_literally() {
    let fields = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "w",
        "schema": {"type": "object", "properties": {"city": {"type": "string"}}}}}});
    let format = || serde_json::from_value::<ConstraintFields>(fields.clone()).expect("fields").into_constraint();
    let tools = || ToolRequest::from_fields(Some(tools()), Some(json!("required")), None).expect("valid");
    for (schemas, closed) in [(SchemaReading::Closed, true), (SchemaReading::Literal, false)] {
        let rules = ShapeRules { call_format: ToolCallFormat::Hermes, schemas, keep_repeated_calls: false };
        let alone = OutputShape::new(None, format().expect("valid"), rules).constraint().expect("constraint");
        let Constraint::JsonSchema(schema) = &alone.constraint else { panic!("a schema") };
        assert_eq!(schema.get("additionalProperties") == Some(&json!(false)), closed, "{schemas:?}");
        // A function's parameters too, in the grammar; the prompt shows them as sent.
        let shape = OutputShape::new(tools(), None, rules);
        let g = shape.constraint().expect("constraint").constraint.to_string_lossy();
        let args = g.matches("\"additionalProperties\":false").count();
        assert_eq!(args, if closed { 4 } else { 2 }, "{schemas:?}: {g}");
        assert_eq!(shape.tools().expect("tools").tools[0].parameters.get("additionalProperties"), None);
    }
}

#[test]
fn after_results_an_auto_reply_may_restart_as_the_answer_and_nothing_else_does() {
    let answered = vec![AnsweredCall { name: "get_weather".into(), arguments: json!({"city": "Paris"}) }];
    let json_format = json!({"response_format": {"type": "json_object"}});
    for (choice, format, restarts) in [
        ("auto", json_format.clone(), true),
        ("absent", json!({}), true),
        ("required", json_format.clone(), false),
        ("named", json!({}), false),
        ("none", json_format.clone(), false),
    ] {
        let shape = shape(choice, &format, true).expect("valid").after_results(answered.clone());
        let constraint = shape.constraint().expect("a constraint").constraint;
        let reading = shape.call_reading().expect("tools");
        assert_eq!(reading.can_restart, restarts, "{choice}");
        // Under `required` or a named function a repeat of an answered call is still a call.
        let compared = if matches!(choice, "required" | "named") { 0 } else { 1 };
        assert_eq!(reading.answered.len(), compared, "{choice}");
        match (constraint, restarts) {
            // Without a format: calls once the model opens one, restarting as text.
            (Constraint::Restartable { restart, .. }, true) if choice == "absent" => {
                assert!(restart.to_string_lossy().starts_with("start: TEXT?"), "{choice}: {restart:?}");
            }
            // With one: calls if the model opens one, else (or restarted) the format's answer.
            (Constraint::CallsOrAnswer { trigger, calls, answer }, true) if choice == "auto" => {
                assert_eq!(trigger, "<tool_call>");
                assert!(calls.starts_with("start: calls\ncalls: ") && !calls.contains("answer"), "{calls}");
                assert_eq!(*answer, Constraint::JsonObject);
            }
            (other, false) => {
                assert!(!matches!(other, Constraint::Restartable { .. } | Constraint::CallsOrAnswer { .. }), "{choice}")
            }
            (other, true) => panic!("{choice}: {other:?} does not restart"),
        }
    }
    // Kept repeats: nothing restarts; no results: nothing restarts.
    let rules = ShapeRules { keep_repeated_calls: true, ..ShapeRules::default() };
    let tools = ToolRequest::from_fields(Some(tools()), None, None).expect("valid");
    let kept = OutputShape::new(tools.clone(), None, rules).after_results(answered);
    assert!(!matches!(kept.constraint().expect("c").constraint, Constraint::Restartable { .. }));
    let fresh = OutputShape::new(tools, None, ShapeRules::default()).after_results(Vec::new());
    assert!(!matches!(fresh.constraint().expect("c").constraint, Constraint::Restartable { .. }));
}

/// The text of a constraint, for looking into it.
trait Text {
    fn to_string_lossy(&self) -> String;
}

impl Text for Constraint {
    fn to_string_lossy(&self) -> String {
        match self {
            Constraint::Lark(g) | Constraint::Lazy { grammar: g, .. } => g.clone(),
            Constraint::JsonSchema(schema) => schema.to_string(),
            Constraint::JsonObject => "json_object".into(),
            Constraint::Regex(r) => r.clone(),
            Constraint::Choice(c) => c.join("|"),
            Constraint::Restartable { constraint, restart } => {
                format!("{} / {}", constraint.to_string_lossy(), restart.to_string_lossy())
            }
            Constraint::CallsOrAnswer { calls, answer, .. } => format!("{calls} / {}", answer.to_string_lossy()),
        }
    }
}
