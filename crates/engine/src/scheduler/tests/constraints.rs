//! Constrained sequences in the step: forced tokens, refused tokens (`scheduler/decode.rs`).

use super::*;

#[test]
fn tokens_a_constraint_forces_are_fed_in_one_step_with_one_output_row() {
    let mut h = Harness::new(2, 64);
    let mut events = h.submit_regex("q", 50, "[ab] then [0-9]");
    let mut plain = h.submit_n("p", 3);
    h.step(); // both prompts; the constrained one samples `a` or `b`, then ` then ` is forced
    h.step();
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    let constrained: Vec<&BatchToken> = batch.iter().filter(|t| t.seq == 0).collect();
    assert_eq!(constrained.len(), "a then ".len(), "the sampled letter and the 6 forced tokens together");
    assert_eq!(constrained.iter().filter(|t| t.logits).count(), 1, "one output row, on the last");
    assert!(constrained.last().is_some_and(|t| t.logits && t.token == TokenId::from(b' ')));
    let positions: Vec<u32> = constrained.iter().map(|t| t.pos).collect();
    assert!(positions.windows(2).all(|w| w[1] == w[0] + 1), "{positions:?}");
    assert_eq!(batch.iter().filter(|t| t.seq == 1).count(), 1, "the plain stream still decodes one token");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert!(text.ends_with(" then 0") && text.len() == 8, "{text:?}");
    assert_eq!(done.finish_reason, FinishReason::Stop, "the grammar is complete");
    assert_eq!(done.usage.completion_tokens, 8, "forced tokens are completion tokens");
    let snap = h.scheduler.stats.snapshot().constraints;
    assert_eq!((snap.constrained_tokens, snap.forced_tokens), (8, 6));
    assert_eq!(drain(&mut plain).1.usage.completion_tokens, 3);
}

#[test]
fn tokens_forced_before_the_first_choice_are_fed_with_the_prompt() {
    let mut h = Harness::new(1, 64);
    let mut events = h.submit_regex("qq", 50, "hello world [0-9]");
    h.step();
    let batch = h.scheduler.executor.batches.last().cloned().expect("a batch");
    let fed: Vec<u8> = batch.iter().map(|t| t.token as u8).collect();
    assert_eq!(fed, b"qqhello world ", "the prompt, then what the grammar forces first");
    assert_eq!(batch.iter().filter(|t| t.logits).count(), 1);
    assert!(batch.last().is_some_and(|t| t.logits), "the output row is the last forced token's");
    // That one step sampled the digit: the output is complete without a step per forced token.
    assert_eq!(h.scheduler.executor.batches.len(), 1);
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(text, "hello world 0");
    assert_eq!((done.finish_reason, done.usage.completion_tokens), (FinishReason::Stop, 13));
    let snap = h.scheduler.stats.snapshot().constraints;
    assert_eq!((snap.constrained_tokens, snap.forced_tokens), (13, 12));
}

#[test]
fn without_room_in_the_step_the_tokens_forced_first_go_one_by_one() {
    let mut h = Harness::new(1, 64);
    // The prompt fills the step's room: nothing is fed after it.
    let prompt = "q".repeat(h.scheduler.executor.max_batch_tokens());
    let mut events = h.submit_regex(&prompt, 50, "hello world [0-9]");
    h.step();
    let first = h.scheduler.executor.batches.last().cloned().expect("a batch");
    assert!(first.iter().all(|t| t.token == TokenId::from(b'q')), "only the prompt in the first step");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!(text, "hello world 0");
    assert_eq!(done.finish_reason, FinishReason::Stop);
    assert_eq!(h.scheduler.executor.batches.len(), 2, "the prompt, sampling `h`; the rest forced, sampling the digit");
}

#[test]
fn a_token_the_grammar_refuses_ends_the_request_cleanly_and_is_counted_not_a_hang() {
    // A sampler that ignores masks: the grammar refuses the token it takes (an engine bug
    // were it to happen for real). The reply ends with what it had, `stop`, no opaque error.
    let mut h = Harness::new(1, 64);
    h.scheduler.executor.ignore_masks = true;
    let mut events = h.submit_regex("q", 50, "[0-9]+");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!((done.finish_reason, done.error), (FinishReason::Stop, None));
    assert!(text.is_empty(), "{text:?}");
    assert_eq!(h.scheduler.stats.constraints.snapshot().failures, 1);
}

#[test]
fn forced_tokens_stop_at_max_tokens() {
    let mut h = Harness::new(1, 64);
    let mut events = h.submit_regex("q", 5, "hello world [0-9]");
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert_eq!((text.as_str(), done.finish_reason), ("hello", FinishReason::Length));
    assert_eq!(done.usage.completion_tokens, 5);
}

#[test]
fn a_choice_its_caller_restarts_starts_over_under_the_restart_and_one_it_ends_stops() {
    let mut h = Harness::new(2, 64);
    // The model's own first token is `a`: it takes the first constraint's way (one it
    // refuses would put the reply under the restart at once: the test below).
    h.scheduler.executor.script = Some([b"qq".as_slice(), &[b'a'; 60]].concat());
    let compiler = GrammarCompiler::new(&byte_env()).expect("compiler");
    let restartable = Constraint::Restartable {
        constraint: Box::new(Constraint::Regex("[ab]{20}".into())),
        restart: Box::new(Constraint::Regex("[0-9]{3}".into())),
    };
    let constraint = compiler.sequence_constraint(&restartable, &ConstraintCounters::default()).expect("compiles");
    let (controls, plain_controls) = (ChoiceControls::new(1), ChoiceControls::new(1));
    let events = h.submit_with("qq", 50, |r| (r.constraint, r.controls) = (Some(constraint), Arc::clone(&controls)));
    let plain = h.submit_with("p", 50, |r| r.controls = Arc::clone(&plain_controls));
    for _ in 0..4 {
        h.step();
    }
    let (restarting, ending) = (
        RequestStream::new(1, 2, events).controlled(controls),
        RequestStream::new(2, 1, plain).controlled(plain_controls),
    );
    assert!(restarting.restart_choice(0) && ending.end_choice(0));
    h.run_to_idle();
    // The restarted choice: its first output, the restart, then the restart's output alone.
    let events: Vec<StreamEvent> = std::iter::from_fn({
        let mut stream = restarting;
        move || stream.blocking_next()
    })
    .collect();
    let restart_at = events.iter().position(|e| matches!(e, StreamEvent::Restarted { index: 0 })).expect("restarted");
    let text = |events: &[StreamEvent]| -> String {
        events
            .iter()
            .filter_map(|e| if let StreamEvent::Text { text, .. } = e { Some(text.as_str()) } else { None })
            .collect()
    };
    assert!(text(&events[..restart_at]).starts_with("aaa"), "{events:?}");
    assert_eq!(text(&events[restart_at..]), "000");
    let Some(StreamEvent::Finished(done)) = events.last() else { panic!("no final event") };
    assert_eq!((done.finish_reason, done.usage.completion_tokens), (FinishReason::Stop, 3));
    // Its generated cells went; the prompt's stayed but for its last token.
    assert!(h.scheduler.executor.truncations.contains(&(0, 1)), "{:?}", h.scheduler.executor.truncations);
    // The ended one stopped where it was, `stop`, its tokens counted.
    let mut ending = ending;
    let done = std::iter::from_fn(|| ending.blocking_next()).last();
    let Some(StreamEvent::Finished(done)) = done else { panic!("no final event") };
    assert_eq!(done.finish_reason, FinishReason::Stop);
    assert!((3..10).contains(&done.usage.completion_tokens), "{done:?}");
}

/// Calls (`#call` and two letters) or an answer of `answer_regex`, as the model chooses
/// without a mask; and the compiler for it.
fn calls_or_answer(answer_regex: &str) -> (GrammarCompiler, Constraint) {
    let constraint = Constraint::CallsOrAnswer {
        trigger: "#call".into(),
        calls: "start: \"#call\" /[ab]{2}/\n".into(),
        answer: Box::new(Constraint::Regex(answer_regex.into())),
    };
    (GrammarCompiler::new(&byte_env()).expect("compiler"), constraint)
}

#[test]
fn a_reply_that_cannot_open_a_call_is_the_answer_and_one_that_opens_it_calls() {
    // The scripted model goes on with the script's bytes where it may; answers are three
    // digits.
    let (compiler, calls_or_answer) = calls_or_answer("[0-9]{3}");
    // The model's own bytes: prose; a call; a digit (the answer too); `#cool`, which starts like
    // a call and is not one (its first two bytes are void: a `Restarted` says so). And the
    // steps each takes: the prompt's step feeds the trigger `#call` after it as drafts, so a
    // call's opening is verified whole there (`#calla` in one step, `b` in the next), and
    // `#co` is known not to be one there too (without the drafts: a step a byte).
    let cases = [("qqHello", "000", 1, false, 3), ("qq#callab", "#callab", 0, false, 2), ("qq7", "700", 1, false, 3)];
    for (script, reply, answered, restarted, steps) in cases.into_iter().chain([("qq#cool", "000", 1, true, 4)]) {
        let mut h = Harness::new(1, 64);
        h.scheduler.executor.script = Some(script.as_bytes().to_vec());
        let counters = ConstraintCounters::default();
        let constraint = compiler.sequence_constraint(&calls_or_answer, &counters).expect("compiles");
        let controls = ChoiceControls::new(1);
        let events =
            h.submit_with("qq", 50, |r| (r.constraint, r.controls) = (Some(constraint), Arc::clone(&controls)));
        h.run_to_idle();
        let stream = RequestStream::new(1, 2, events).controlled(controls);
        let events: Vec<StreamEvent> = std::iter::from_fn({
            let mut stream = stream;
            move || stream.blocking_next()
        })
        .collect();
        let from = events.iter().rposition(|e| matches!(e, StreamEvent::Restarted { .. })).map_or(0, |at| at + 1);
        let text: String = events[from..]
            .iter()
            .filter_map(|e| if let StreamEvent::Text { text, .. } = e { Some(text.as_str()) } else { None })
            .collect();
        // Under a mask of calls or the answer, `H` would have become `#`: a call.
        assert_eq!(text, reply, "{script}: {events:?}");
        assert_eq!(from > 0, restarted, "{script}: {events:?}");
        assert!(matches!(events.last(), Some(StreamEvent::Finished(done)) if done.finish_reason == FinishReason::Stop));
        assert_eq!(h.scheduler.stats.constraints.snapshot().answers_chosen, answered, "{script}");
        let batches = &h.scheduler.executor.batches;
        let first: Vec<u8> = batches[0].iter().map(|t| t.token as u8).collect();
        assert_eq!(first, b"qq#call", "{script}: the prompt, then the trigger as drafts");
        assert_eq!(
            batches[0].iter().filter(|t| t.logits).count(),
            6,
            "{script}: the prompt's last row and each draft's"
        );
        assert_eq!(batches.len(), steps, "{script}");
        // They are no speculation: the speculative decoding counters leave them out.
        assert_eq!(h.scheduler.stats.snapshot().speculation.draft_tokens, 0, "{script}");
    }
}

#[test]
fn a_restart_that_begins_with_forced_tokens_streams_them_at_once_and_keeps_the_prompt_whole() {
    let (compiler, calls_or_answer) = calls_or_answer("ok [0-9]");
    let mut h = Harness::new(1, 64);
    // `#co`: written towards the trigger, then not it: the reply restarts as the answer.
    h.scheduler.executor.script = Some(b"qq#cool".to_vec());
    let constraint = compiler.sequence_constraint(&calls_or_answer, &ConstraintCounters::default()).expect("compiles");
    let mut events = h.submit_with("qq", 50, |r| r.constraint = Some(constraint));
    h.run_to_idle();
    let (text, done) = drain(&mut events);
    assert!(text.ends_with("ok 0") && done.finish_reason == FinishReason::Stop, "{text:?}");
    // The prompt's cells stay whole (no row of its last token computed again): the step
    // after the restart feeds the forced `ok ` after it, not the prompt's last `q`.
    assert!(h.scheduler.executor.truncations.contains(&(0, 2)), "{:?}", h.scheduler.executor.truncations);
    let fed: Vec<Vec<u8>> =
        h.scheduler.executor.batches.iter().map(|b| b.iter().map(|t| t.token as u8).collect()).collect();
    assert!(fed.contains(&b"ok ".to_vec()), "{fed:?}");
}

#[test]
fn a_calls_opening_fed_after_the_prompt_stays_within_max_tokens() {
    let (compiler, calls_or_answer) = calls_or_answer("[0-9]{3}");
    for (max_tokens, fed) in [(2, b"qq#".as_slice()), (1, b"qq"), (50, b"qq#call")] {
        let mut h = Harness::new(1, 64);
        h.scheduler.executor.script = Some(b"qq#callab".to_vec());
        let constraint =
            compiler.sequence_constraint(&calls_or_answer, &ConstraintCounters::default()).expect("compiles");
        let mut events = h.submit_with("qq", max_tokens, |r| r.constraint = Some(constraint));
        h.run_to_idle();
        let first: Vec<u8> = h.scheduler.executor.batches[0].iter().map(|t| t.token as u8).collect();
        assert_eq!(first, fed, "max_tokens {max_tokens}: one token is sampled after the drafts");
        let (text, done) = drain(&mut events);
        assert_eq!(done.usage.completion_tokens, max_tokens.min(7), "{text:?}");
    }
}
