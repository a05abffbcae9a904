//! The streaming call parser, fed text in pieces of every size.

use super::*;

/// Feeds `text` in pieces of `size` bytes (on char boundaries) and gathers the events.
fn feed(text: &str, size: usize) -> (String, Vec<ParsedCall>, Vec<ToolEvent>) {
    feed_as(ToolCallFormat::Hermes, text, size)
}

fn feed_as(format: ToolCallFormat, text: &str, size: usize) -> (String, Vec<ParsedCall>, Vec<ToolEvent>) {
    let mut parser = ToolCallParser::new("call_", format);
    let mut events = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        events.extend(parser.push(&text[start..end]));
        start = end;
    }
    events.extend(parser.finish());
    let content: String =
        events.iter().filter_map(|e| if let ToolEvent::Content(c) = e { Some(c.as_str()) } else { None }).collect();
    (content, parser.calls().to_vec(), events)
}

const TWO_CALLS: &str = "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";

#[test]
fn calls_stream_out_of_any_piece_sizes_and_no_markup_reaches_the_content() {
    for size in [1, 2, 3, 5, 7, 13, 1000] {
        let (content, calls, events) = feed(TWO_CALLS, size);
        assert_eq!(content, "Let me check.", "pieces of {size}");
        assert_eq!(calls.len(), 2);
        assert!(calls.iter().all(|c| c.complete));
        assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", "{\"city\": \"Oslo\"}"));
        assert_eq!((calls[1].name.as_str(), calls[1].arguments.as_str()), ("get_time", "{}"));
        assert_eq!(calls[1].id, "call_1");
        let first_start = events.iter().position(|e| matches!(e, ToolEvent::CallStart { index: 0, .. }));
        let first_args = events.iter().position(|e| matches!(e, ToolEvent::Arguments { index: 0, .. }));
        assert!(first_start < first_args, "id and name come before the arguments");
        if size == 1 {
            let fragments = events.iter().filter(|e| matches!(e, ToolEvent::Arguments { index: 0, .. })).count();
            assert!(fragments > 3, "arguments stream as they come: {fragments} fragments");
        }
    }
}

#[test]
fn text_that_only_looks_like_an_opener_is_content_and_other_shapes_are_read_whole() {
    let (content, calls, _) = feed("a <tool x> b <tool_cal", 1);
    assert_eq!((content.as_str(), calls.len()), ("a <tool x> b <tool_cal", 0));
    let list = "<tool_call>\n[{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"parameters\": {}}]\n</tool_call>";
    let (content, calls, _) = feed(list, 4);
    assert_eq!(content, "");
    assert_eq!(calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(), ["f", "g"]);
    assert_eq!(calls[0].arguments, "{\"x\":1}");
    let (content, calls, _) = feed("<tool_call>\nnot json\n</tool_call>", 3);
    assert_eq!((content.as_str(), calls.len()), ("<tool_call>\nnot json\n</tool_call>", 0), "never lost");
    let (content, _, _) = feed("<tool_call>\n{\"na", 2);
    assert_eq!(content, "<tool_call>\n{\"na", "a call cut before its name is content");
    let (_, calls, _) = feed(&TWO_CALLS[..TWO_CALLS.len() - 14], 3);
    assert_eq!(calls.iter().map(|c| c.complete).collect::<Vec<_>>(), [true, false], "the cut call is marked");
}

#[test]
fn another_call_cut_short_right_after_a_call_is_markup_not_content() {
    let one_call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    for cut in ["\n<tool", "\n<tool_call>\n{\"na", "\n<tool_call>\n{\"name\": \"g"] {
        for size in [1, 3, 1000] {
            let (content, calls, _) = feed(&format!("{one_call}{cut}"), size);
            assert_eq!((content.as_str(), calls.len()), ("", 1), "{cut:?}, pieces of {size}");
        }
    }
    let llama = "{\"name\": \"f\", \"parameters\": {}}";
    for cut in ["; {\"", " {\"na", "; {\"name\": \"g"] {
        let (content, calls, _) = feed_as(ToolCallFormat::Llama3Json, &format!("{llama}{cut}"), 2);
        assert_eq!((content.as_str(), calls.len()), ("", 1), "{cut:?}");
    }
    // Text after a call that opens none is still content.
    let (content, _, _) = feed(&format!("{one_call} done"), 2);
    assert_eq!(content, "done");
}

#[test]
fn a_repeated_call_ends_the_reply_and_is_dropped_from_any_piece_sizes() {
    let call = |city: &str| {
        format!("<tool_call>\n{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"{city}\"}}}}\n</tool_call>\n")
    };
    let looping = format!("{}{}{}{}", call("Oslo"), call("Rome"), call("Oslo"), call("Paris"));
    for size in [1, 4, 1000] {
        let mut parser = ToolCallParser::new("call_", ToolCallFormat::Hermes);
        let mut events = Vec::new();
        let mut ended_at = None;
        for (i, piece) in looping.as_bytes().chunks(size).enumerate() {
            events.extend(parser.push(std::str::from_utf8(piece).expect("ASCII")));
            if parser.repeated() && ended_at.is_none() {
                ended_at = Some(i * size);
            }
        }
        events.extend(parser.finish());
        let read: Vec<(&str, &str)> = parser.calls().iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(read, [("get_weather", "{\"city\": \"Oslo\"}"), ("get_weather", "{\"city\": \"Rome\"}")]);
        // Nothing of the repeat went out: two calls started, their fragments only.
        let starts = events.iter().filter(|e| matches!(e, ToolEvent::CallStart { .. })).count();
        assert_eq!(starts, 2, "pieces of {size}: {events:?}");
        let streamed: String = events
            .iter()
            .filter_map(|e| {
                if let ToolEvent::Arguments { index: 1, fragment } = e {
                    Some(fragment.as_str())
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(streamed, "{\"city\": \"Rome\"}", "a call held while it might repeat goes out whole");
        let ended = ended_at.expect("the repeat ends the reply");
        assert!(ended < looping.len() - call("Paris").len(), "pieces of {size}: ended at {ended}");
    }
    // Kept when asked, and read on.
    let mut parser = ToolCallParser::new("call_", ToolCallFormat::Hermes).keeping_repeats();
    parser.push(&looping);
    parser.finish();
    assert_eq!((parser.calls().len(), parser.repeated()), (4, false));
    // Calls read whole (a list in one tag) are deduplicated too.
    let list = "<tool_call>\n[{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"f\", \"arguments\": {\"x\": 1}}]\n</tool_call>";
    let (content, calls, _) = feed(list, 3);
    assert_eq!((content.as_str(), calls.len()), ("", 1));
}

#[test]
fn llama_and_mistral_calls_stream_too() {
    let llama = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"O}s;lo\"}}; {\"name\": \"get_time\", \"parameters\": {}}";
    let mistral = "Sure.[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"O}s;lo\"}}, {\"name\": \"get_time\", \"arguments\": {}}]";
    for (format, text, content) in
        [(ToolCallFormat::Llama3Json, llama, ""), (ToolCallFormat::Mistral, mistral, "Sure.")]
    {
        for size in [1, 2, 5, 1000] {
            let (got, calls, _) = feed_as(format, text, size);
            assert_eq!(got, content, "{format}, pieces of {size}");
            let read: Vec<(&str, &str, bool)> =
                calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str(), c.complete)).collect();
            assert_eq!(
                read,
                [("get_weather", "{\"city\": \"O}s;lo\"}", true), ("get_time", "{}", true)],
                "{format}, pieces of {size}"
            );
        }
    }
    // Keys in another order are read whole; a cut call is marked; a lone trigger is content.
    let (_, calls, _) =
        feed_as(ToolCallFormat::Mistral, "[TOOL_CALLS][{\"arguments\": {\"x\": 1}, \"name\": \"f\"}]", 3);
    assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("f", "{\"x\":1}"));
    let (_, calls, _) = feed_as(ToolCallFormat::Llama3Json, &llama[..45], 4);
    assert_eq!(calls.iter().map(|c| c.complete).collect::<Vec<_>>(), [false]);
    let (content, calls, _) = feed_as(ToolCallFormat::Mistral, "a [TOOL_CALLS] b", 2);
    assert_eq!((content.as_str(), calls.len()), ("a [TOOL_CALLS] b", 0));
}
