//! Speculative decoding with a draft model (`model_drafts`): its tokens are fed and
//! verified as lookups' are, so the output is the target's whatever it proposes; how many
//! it is asked for follows what its passes cost against the target's rows.

use super::speculation::patternless;
use super::*;

/// A target that continues `script`, with a draft model that continues `draft` in passes
/// of `pass_ms`, drafting (at least, at most) `tokens` a step; or no draft model.
fn harness(script: &str, draft: Option<(&str, f64, (usize, usize))>) -> Harness {
    let mut h = Harness::configured(2, 64, |c| {
        c.speculative = draft.is_some();
        c.draft_tokens = draft.map(|(_, _, tokens)| tokens);
    });
    h.scheduler.executor.script = Some(script.as_bytes().to_vec());
    h.scheduler.executor.draft_model = draft.map(|(text, pass_ms, _)| ScriptedDraftModel {
        script: text.as_bytes().to_vec(),
        pass_ms,
        calls: Vec::new(),
    });
    h
}

/// Runs the script's first `prompt` bytes for `max_tokens`: the text, the steps taken.
fn generate(h: &mut Harness, script: &str, prompt: usize, max_tokens: u32) -> (String, usize) {
    let mut events = h.submit_n(&script[..prompt], max_tokens);
    h.run_to_idle();
    (drain(&mut events).0, h.scheduler.executor.batches.len())
}

#[test]
fn a_cheap_draft_model_that_agrees_drafts_deep_and_the_output_is_the_targets() {
    let script = patternless(120);
    let (plain, plain_steps) = generate(&mut harness(&script, None), &script, 20, 60);
    let mut h = harness(&script, Some((&script, 0.5, (0, 8))));
    let (fast, steps) = generate(&mut h, &script, 20, 60);
    assert_eq!(plain, &script[20..80]);
    assert_eq!(fast, plain, "drafts change no token");
    assert!(steps * 3 < plain_steps, "{steps} steps against {plain_steps}");
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.drafts > 0 && spec.accepted_tokens == spec.draft_tokens, "{spec:?}");
    // It is first asked after the prompt and the first token; as its drafts are kept it is
    // asked for more, up to the most.
    let calls = &h.scheduler.executor.draft_model.as_ref().expect("a draft model").calls;
    assert_eq!((calls[0][0].0, calls[0][0].1), (0, 21));
    assert!(calls.iter().flatten().any(|&(_, _, count)| count == 8), "{calls:?}");
    assert!(calls.iter().flatten().all(|&(_, _, count)| count <= 8));
}

#[test]
fn a_draft_model_that_disagrees_changes_no_token_and_is_soon_asked_for_little() {
    let script = patternless(200);
    let wrong = patternless(200).to_uppercase();
    let (plain, _) = generate(&mut harness(&script, None), &script, 20, 150);
    let mut h = harness(&script, Some((&wrong, 0.5, (0, 8))));
    let (fast, _) = generate(&mut h, &script, 20, 150);
    assert_eq!(fast, plain);
    let spec = h.scheduler.stats.snapshot().speculation;
    assert_eq!(spec.accepted_tokens, 0, "{spec:?}");
    // Once its acceptance has fallen, it is only probed for a token now and then.
    assert!(spec.draft_tokens < 40, "{spec:?}");
    let calls = &h.scheduler.executor.draft_model.as_ref().expect("a draft model").calls;
    let late = calls.iter().flatten().filter(|&&(_, history, _)| history > 100).count();
    assert!((1..=12).contains(&late), "probes every few steps: {late} calls over 70 tokens");
}

#[test]
fn a_draft_model_as_slow_as_the_targets_step_is_not_asked_unless_told_to() {
    // The harness's target: 7 ms a one-row step, 2.5 ms a further row.
    let script = patternless(120);
    let mut h = harness(&script, Some((&script, 7.0, (0, 8))));
    let (text, _) = generate(&mut h, &script, 20, 40);
    assert_eq!(text, &script[20..60]);
    assert!(h.scheduler.executor.draft_model.as_ref().expect("a draft model").calls.is_empty());
    assert!(h.scheduler.executor.batches.iter().skip(1).all(|b| b.len() == 1), "one row a step");
    // With a minimum draft, it drafts that many tokens a step anyway.
    let mut h = harness(&script, Some((&script, 7.0, (3, 8))));
    let (text, _) = generate(&mut h, &script, 20, 40);
    assert_eq!(text, &script[20..60]);
    let calls = &h.scheduler.executor.draft_model.as_ref().expect("a draft model").calls;
    assert!(!calls.is_empty() && calls.iter().flatten().all(|&(_, _, count)| count <= 3), "{calls:?}");
    assert!(h.scheduler.executor.batches.iter().any(|b| b.len() == 4), "the last token and three drafts");
}

#[test]
fn sequences_drafting_side_by_side_draft_alike_so_the_step_is_one_pass() {
    // Two streams of the same text: a draft model that agrees with both. Chosen one at a
    // time, the second stream's draft was priced after the first's rows and came out
    // shorter, and llama.cpp would cut the uneven rows into two passes.
    let script = patternless(160);
    let mut h = harness(&script, Some((&script, 0.5, (0, 8))));
    let mut first = h.submit_n(&script[..20], 60);
    let mut second = h.submit_n(&script[..20], 60);
    h.run_to_idle();
    assert_eq!(drain(&mut first).0, &script[20..80]);
    assert_eq!(drain(&mut second).0, &script[20..80]);
    let mut drafted_steps = 0;
    // Steps where both generate (the prompts, 20 tokens each, are prefilled one at a time).
    let decoding = h.scheduler.executor.batches.iter().filter(|b| b.iter().all(|t| t.pos >= 20));
    for batch in decoding {
        let rows = |seq: usize| batch.iter().filter(|t| t.seq == seq).count();
        if rows(0) > 1 || rows(1) > 1 {
            drafted_steps += 1;
            assert_eq!(rows(0), rows(1), "uneven drafts: {} and {} rows", rows(0), rows(1));
        }
    }
    assert!(drafted_steps > 0, "the draft model was asked and its drafts fed");
}
