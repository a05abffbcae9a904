//! A request spec as each engine's body: the prompt, length and sampling knobs where that
//! engine reads them, its output constraint in the form it understands, the tools, and
//! `--extra-body` merged over all of it.

use serde_json::{json, Value};

use crate::protocol::Protocol;
use crate::workload::spec::{BodyOptions, RequestSpec};
use crate::workload::structured::{OutputConstraint, ResponseFormat};

pub fn request_body(protocol: Protocol, spec: &RequestSpec, opts: &BodyOptions) -> Value {
    let n = spec.max_tokens;
    let mut body = match protocol {
        Protocol::Generate => json!({"prompt": spec.prompt.as_text(), "max_tokens": n}),
        Protocol::Completions => json!({
            "prompt": spec.prompt.as_text(),
            "max_tokens": n,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        Protocol::Chat => json!({
            "messages": spec.prompt.as_messages(),
            "max_tokens": n,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        // Usage comes in the last event without asking.
        Protocol::Responses => {
            json!({"input": crate::protocol::responses::input_items(spec.prompt.as_messages()), "max_output_tokens": n, "stream": true})
        }
        Protocol::Sglang => {
            json!({"text": spec.prompt.as_text(), "sampling_params": {"max_new_tokens": n}, "stream": true})
        }
        // `details` makes the last event carry the generated token count.
        Protocol::Tgi => json!({"inputs": spec.prompt.as_text(), "parameters": {"max_new_tokens": n, "details": true}}),
        Protocol::Triton => json!({"text_input": spec.prompt.as_text(), "max_tokens": n, "stream": true}),
        Protocol::Llamacpp => {
            json!({"prompt": spec.prompt.as_text(), "n_predict": n, "stream": true, "cache_prompt": true})
        }
        Protocol::Embeddings => json!({"input": pooled_inputs(&spec.prompt.as_text(), opts.batch_size)}),
        Protocol::Rerank => {
            json!({"query": RERANK_QUERY, "documents": pooled_inputs(&spec.prompt.as_text(), opts.batch_size), "return_documents": false})
        }
    };
    let model = spec.model.as_deref().or(opts.model.as_deref());
    if protocol.is_pooled() {
        if let Some(model) = model {
            body["model"] = json!(model);
        }
        if let Some(extra) = &opts.extra {
            merge(&mut body, extra);
        }
        return body;
    }
    match (model, protocol) {
        (Some(model), Protocol::Completions | Protocol::Chat | Protocol::Responses) => body["model"] = json!(model),
        // rillm's /generate names a model only where a mix asks (it serves several).
        (Some(model), Protocol::Generate) if spec.model.is_some() => body["model"] = json!(model),
        _ => {}
    }
    // Sampling knobs sit where each engine reads them.
    let sampling = match protocol {
        Protocol::Sglang => &mut body["sampling_params"],
        Protocol::Tgi => &mut body["parameters"],
        _ => &mut body,
    };
    if opts.ignore_eos && protocol != Protocol::Tgi {
        sampling["ignore_eos"] = json!(true);
    }
    match (opts.temperature, protocol) {
        // TGI refuses temperature 0: greedy is `do_sample: false`, its default.
        (Some(t), Protocol::Tgi) if t <= 0.0 => sampling["do_sample"] = json!(false),
        (Some(t), Protocol::Tgi) => {
            sampling["temperature"] = json!(t);
            sampling["do_sample"] = json!(true);
        }
        (Some(t), _) => sampling["temperature"] = json!(t),
        (None, _) => {}
    }
    // The run checked at its start that the protocol can carry the constraint.
    if let Some(fields) = spec.constraint.as_ref().and_then(|c| constraint_fields(c, protocol).ok()) {
        merge(&mut body, &fields);
    }
    match (spec.tools(opts), protocol) {
        (Some(tools), Protocol::Chat) => merge(&mut body, &tools.body_fields()),
        (Some(tools), Protocol::Responses) => {
            merge(&mut body, &crate::protocol::responses::tool_fields(&tools.tools, &tools.tool_choice))
        }
        _ => {}
    }
    if let Some(extra) = &opts.extra {
        merge(&mut body, extra);
    }
    body
}

/// The body fields that ask `protocol`'s engine for an output constraint, or why it can't.
/// OpenAI protocols get OpenAI's `response_format` for JSON and vLLM's `structured_outputs`
/// for regex and choice (rillm reads both, on `/generate` too); llama.cpp's native endpoint
/// its `json_schema`; TGI its `grammar`; the Responses API its `text.format`.
/// The query every rerank request scores its documents against.
const RERANK_QUERY: &str = "Which passage answers the question best?";

/// `batch` inputs made from one prompt: the prompt, then copies told apart by a number in
/// front (distinct texts, about the prompt's length).
fn pooled_inputs(text: &str, batch: u32) -> Vec<String> {
    (0..batch.max(1)).map(|i| if i == 0 { text.to_string() } else { format!("{i}. {text}") }).collect()
}

pub fn constraint_fields(c: &OutputConstraint, protocol: Protocol) -> Result<Value, String> {
    Ok(match (protocol, c.format()) {
        (Protocol::Chat | Protocol::Completions | Protocol::Generate, format) => match format {
            ResponseFormat::JsonSchema => json!({"response_format": {"type": "json_schema",
                "json_schema": {"name": c.name, "schema": c.schema(), "strict": true}}}),
            ResponseFormat::JsonObject => json!({"response_format": {"type": "json_object"}}),
            ResponseFormat::Regex => json!({"structured_outputs": {"regex": c.pattern()}}),
            ResponseFormat::Choice => json!({"structured_outputs": {"choice": c.choices()}}),
        },
        (Protocol::Responses, ResponseFormat::JsonSchema) => {
            json!({"text": {"format": {"type": "json_schema", "name": c.name, "schema": c.schema(), "strict": true}}})
        }
        (Protocol::Responses, ResponseFormat::JsonObject) => json!({"text": {"format": {"type": "json_object"}}}),
        (Protocol::Llamacpp, ResponseFormat::JsonSchema) => json!({"json_schema": c.schema()}),
        (Protocol::Llamacpp, ResponseFormat::JsonObject) => json!({"json_schema": {"type": "object"}}),
        (Protocol::Tgi, ResponseFormat::JsonSchema) => {
            json!({"parameters": {"grammar": {"type": "json", "value": c.schema()}}})
        }
        (Protocol::Tgi, ResponseFormat::Regex) => {
            json!({"parameters": {"grammar": {"type": "regex", "value": c.pattern()}}})
        }
        (_, format) => {
            return Err(format!("--response-format {format:?} is not supported over the {protocol:?} protocol"))
        }
    })
}

/// Merges `extra` into `base`: objects key by key, anything else replaces.
fn merge(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                merge(base.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (base, extra) => *base = extra.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::spec::PromptSpec;

    #[test]
    fn bodies_put_each_knob_where_the_engine_reads_it() {
        let spec = RequestSpec::new(PromptSpec::Text("hi".into()), 7);
        let opts = BodyOptions {
            model: Some("m".into()),
            ignore_eos: true,
            temperature: Some(0.0),
            extra: Some(json!({"sampling_params": {"top_k": 5}, "x": 1})),
            tools: None,
            batch_size: 1,
            model_mix: None,
        };
        let sg = request_body(Protocol::Sglang, &spec, &opts);
        assert_eq!(
            sg,
            json!({"text": "hi", "stream": true, "x": 1, "sampling_params": {"max_new_tokens": 7, "ignore_eos": true, "temperature": 0.0, "top_k": 5}})
        );
        let tgi = request_body(Protocol::Tgi, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!(
            tgi,
            json!({"inputs": "hi", "parameters": {"max_new_tokens": 7, "details": true, "do_sample": false}})
        );
        let tr = request_body(Protocol::Triton, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!(tr["text_input"], "hi");
        assert_eq!(tr["max_tokens"], 7);
        let lc = request_body(Protocol::Llamacpp, &spec, &BodyOptions { extra: None, ..opts.clone() });
        assert_eq!((lc["n_predict"].as_u64(), lc["ignore_eos"].as_bool()), (Some(7), Some(true)));
        let chat = request_body(
            Protocol::Chat,
            &spec,
            &BodyOptions { extra: Some(json!({"chat_template_kwargs": {"enable_thinking": false}})), ..opts.clone() },
        );
        assert_eq!(
            (chat["model"].as_str(), chat["chat_template_kwargs"]["enable_thinking"].as_bool()),
            (Some("m"), Some(false))
        );
        let responses = request_body(Protocol::Responses, &spec, &BodyOptions { extra: None, ..opts });
        assert_eq!(
            responses,
            json!({"input": [{"role": "user", "content": "hi"}], "max_output_tokens": 7, "stream": true, "model": "m",
                "ignore_eos": true, "temperature": 0.0})
        );
    }
}

#[cfg(test)]
mod pooled_tests {
    use super::*;
    use crate::workload::spec::PromptSpec;

    #[test]
    fn embeddings_and_rerank_bodies_carry_the_batch() {
        let spec = RequestSpec::new(PromptSpec::Text("a passage".into()), 16);
        let opts = BodyOptions { model: Some("m".into()), batch_size: 3, ..BodyOptions::default() };
        let embed = request_body(Protocol::Embeddings, &spec, &opts);
        assert_eq!(embed, json!({"input": ["a passage", "1. a passage", "2. a passage"], "model": "m"}));
        let rerank = request_body(Protocol::Rerank, &spec, &BodyOptions { batch_size: 2, ..BodyOptions::default() });
        assert_eq!(rerank["documents"], json!(["a passage", "1. a passage"]));
        assert_eq!(rerank["query"], RERANK_QUERY);
        assert!(rerank.get("max_tokens").is_none() && rerank.get("stream").is_none());
    }
}
