//! Speculative decoding in the step (`speculation`, `scheduler/decode.rs::verify`), against an
//! executor that always continues a script: drafts from the sequence's own tokens are fed
//! after its last token, kept as far as the model agrees, and the output is the model's.

use super::*;

/// A harness whose model continues `script`, speculating or not.
fn scripted(script: &str, speculative: bool) -> Harness {
    let mut h = Harness::configured(2, 64, |c| c.speculative = speculative);
    h.scheduler.executor.script = Some(script.as_bytes().to_vec());
    h
}

/// Runs `prompt` (the script's first `prompt` bytes) for `max_tokens`; the text, the
/// final event and how many steps it took.
fn generate(
    script: &str,
    prompt: usize,
    max_tokens: u32,
    speculative: bool,
) -> (String, rillm_backend::Completion, usize, Harness) {
    let mut h = scripted(script, speculative);
    let mut events = h.submit_n(&script[..prompt], max_tokens);
    h.run_to_idle();
    let steps = h.scheduler.executor.batches.len();
    let (text, done) = drain(&mut events);
    (text, done, steps, h)
}

const REPEATING: &str = "abcdefgh-abcdefgh-abcdefgh-abcdefgh-abcdefgh-abcdefgh-abcdefgh-abcdefgh-abcdefgh-";

#[test]
fn drafts_the_model_agrees_with_are_kept_and_the_output_is_the_models() {
    let (plain, _, plain_steps, _) = generate(REPEATING, 18, 40, false);
    let (fast, done, steps, h) = generate(REPEATING, 18, 40, true);
    assert_eq!(plain, &REPEATING[18..58]);
    assert_eq!(fast, plain, "speculation changes no token");
    assert_eq!(done.usage.completion_tokens, 40);
    assert!(steps * 3 < plain_steps, "{steps} steps against {plain_steps}");
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.drafts > 0 && spec.accepted_tokens == spec.draft_tokens, "{spec:?}");
    assert_eq!(spec.accepted_per_position[0], spec.drafts, "every first drafted token was kept");
    // A speculating step feeds the last token and its drafts, each with an output row.
    let batch =
        h.scheduler.executor.batches.iter().find(|b| b.len() > 1 && b[0].pos >= 18).expect("a step with drafts");
    assert!(batch.iter().all(|t| t.logits));
    assert!(batch.windows(2).all(|w| w[1].pos == w[0].pos + 1));
}

#[test]
fn a_draft_the_model_disagrees_with_is_dropped_from_kv_and_the_models_token_stands() {
    // The pattern breaks where drafts would go on repeating it.
    let script = "abcdefgh-abcdefgh-abcdefgh-abcdXYZW-abcdefgh-abcdQRST-abcdefgh";
    let (plain, _, _, _) = generate(script, 27, 30, false);
    let (fast, done, _, h) = generate(script, 27, 30, true);
    assert_eq!(fast, plain);
    assert_eq!(fast, &script[27..57]);
    assert_eq!(done.finish_reason, FinishReason::Length);
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.accepted_tokens < spec.draft_tokens, "some drafts were wrong: {spec:?}");
    // Each rejection cut the slot's KV back to the tokens kept.
    assert!(!h.scheduler.executor.truncations.is_empty());
}

#[test]
fn drafts_stop_at_max_tokens_and_off_means_one_token_a_step() {
    let (text, done, _, h) = generate(REPEATING, 18, 5, true);
    assert_eq!((text.as_str(), done.usage.completion_tokens), (&REPEATING[18..23], 5));
    let widest = h.scheduler.executor.batches.iter().skip(1).map(Vec::len).max().unwrap_or(0);
    assert!(widest <= 5, "never more rows than tokens left: {widest}");
    let (_, _, _, off) = generate(REPEATING, 18, 20, false);
    assert!(off.scheduler.executor.batches.iter().skip(1).all(|b| b.len() == 1));
    assert_eq!(off.scheduler.stats.snapshot().speculation.drafts, 0);
}

/// `len` letters with no pattern to them (a fixed generator), standing for a source file.
pub(super) fn patternless(len: usize) -> String {
    let mut state: u32 = 12345;
    (0..len)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            char::from(b'a' + ((state >> 16) % 26) as u8)
        })
        .collect()
}

/// A harness of `slots` slots whose one running sequence copies a 150-letter "file" from
/// its prompt, six steps in and drafting deep; the sequence's events.
fn copying(slots: usize) -> (Harness, Events) {
    let file = patternless(150);
    let script = format!("{file}{file}");
    let mut h = Harness::configured(slots, 64, |c| c.speculative = true);
    h.scheduler.executor.script = Some(script.as_bytes().to_vec());
    let events = h.submit_n(&script[..170], 100);
    for _ in 0..6 {
        h.step();
    }
    assert!(h.scheduler.executor.batches.iter().any(|b| b.len() > 20), "the copy drafts deep");
    (h, events)
}

#[test]
fn a_sequence_copying_an_earlier_run_drafts_past_the_short_limit_and_output_is_unchanged() {
    // A "file" in the prompt, then its first 20 letters: the model goes on copying it.
    let file = patternless(150);
    let script = format!("{file}{file}");
    let (plain, _, plain_steps, _) = generate(&script, 170, 120, false);
    let (fast, _, steps, h) = generate(&script, 170, 120, true);
    assert_eq!(plain, &file[20..140]);
    assert_eq!(fast, plain, "speculation changes no token");
    let widest = h.scheduler.executor.batches.iter().skip(1).map(Vec::len).max().unwrap_or(0);
    assert!(
        widest > crate::speculation::lookup::MAX_DRAFT + 1,
        "a copy draft beyond {}: {widest}",
        crate::speculation::lookup::MAX_DRAFT
    );
    assert!(steps * 6 < plain_steps, "{steps} steps against {plain_steps}");
    let spec = h.scheduler.stats.snapshot().speculation;
    assert_eq!(spec.accepted_tokens, spec.draft_tokens, "{spec:?}");
    // Kept tokens past the short limit are counted at their own positions, not dropped.
    let counted: u64 = spec.accepted_per_position.iter().sum();
    assert_eq!(counted, spec.accepted_tokens, "{spec:?}");
    assert!(spec.accepted_per_position[crate::speculation::lookup::MAX_DRAFT] > 0, "{spec:?}");
}

#[test]
fn a_waiting_prompt_gets_the_step_budget_before_drafts() {
    // One sequence copying (drafting 20 and more a step), then a 60-token prompt arrives.
    let (mut h, _copying) = copying(2);
    let _arriving = h.submit_n(&patternless(150)[90..], 4);
    let before = h.scheduler.executor.batches.len();
    h.run_to_idle();
    let arrival_step = h.scheduler.executor.batches[before..]
        .iter()
        .find(|b| b.iter().any(|t| t.seq == 1))
        .expect("the new prompt was prefilled");
    // The whole prompt in one step (63 rows of budget beside the copying row), drafts
    // only in the 3 rows it leaves.
    assert_eq!(arrival_step.iter().filter(|t| t.seq == 1).count(), 60);
    assert!(arrival_step.len() <= 64);
}

#[test]
fn nothing_is_drafted_while_requests_wait_for_a_slot() {
    let (mut h, _copying) = copying(1);
    // The only slot is taken: the next request waits, and the copy decodes a token a step.
    let _waiting = h.submit_n(&patternless(20), 4);
    for _ in 0..5 {
        h.step();
        assert_eq!(h.scheduler.executor.batches.last().map(Vec::len), Some(1));
    }
}

#[test]
fn a_request_asked_again_drafts_the_earlier_answer_from_the_pool() {
    let file = patternless(150);
    let mut h = scripted(&file, true);
    let mut first = h.submit_n(&file[..40], 100);
    h.run_to_idle();
    let first_steps = h.scheduler.executor.batches.len();
    let kept_before = h.scheduler.stats.snapshot().speculation.accepted_tokens;
    let mut again = h.submit_n(&file[..40], 100);
    h.run_to_idle();
    let again_steps = h.scheduler.executor.batches.len() - first_steps;
    assert_eq!(drain(&mut first).0, &file[40..140]);
    assert_eq!(drain(&mut again).0, &file[40..140], "the model's output, as before");
    let kept = h.scheduler.stats.snapshot().speculation.accepted_tokens - kept_before;
    assert!(kept >= 80, "most of the answer came from the pool's draft: {kept}");
    assert!(again_steps * 4 < first_steps, "{again_steps} steps against {first_steps}");
}

#[test]
fn sampled_output_is_the_models_distribution_draw_for_draw() {
    // A "model" that says a, b or c with probabilities 0.6, 0.3, 0.1 whatever came before:
    // its output repeats itself, so prompt lookup drafts often, and is often wrong.
    let weights = vec![(b'a', 0.6), (b'b', 0.3), (b'c', 0.1)];
    let run = |speculative: bool| {
        let mut h = Harness::configured(1, 64, |c| c.speculative = speculative);
        h.scheduler.executor.random = Some((rand::SeedableRng::seed_from_u64(7), weights.clone()));
        // Rows nearly free: drafts go on however often they are wrong.
        h.scheduler
            .costs
            .step
            .freeze(crate::cost::step_costs::StepCosts { decode_step_ms: 7.0, prefill_token_ms: 2.5 }, 0.1);
        let mut events = h.submit_n("abcabc", 3000);
        h.run_to_idle();
        let spec = h.scheduler.stats.snapshot().speculation;
        (drain(&mut events).0, spec)
    };
    let (plain, _) = run(false);
    let (fast, spec) = run(true);
    assert!(spec.drafts > 50 && spec.accepted_tokens < spec.draft_tokens, "{spec:?}");
    // Every emitted token took one draw, drafted or not: the same seed gives the same text,
    // so the distribution is the model's (a kept draft is the draw that matched it).
    assert_eq!(fast, plain);
    let share = |c: char| fast.chars().filter(|&x| x == c).count() as f64 / fast.len() as f64;
    assert!((share('a') - 0.6).abs() < 0.04 && (share('b') - 0.3).abs() < 0.04, "{} {}", share('a'), share('b'));
}

/// `generate`, with the output constrained to `regex`.
fn generate_constrained(
    script: &str,
    prompt: usize,
    max_tokens: u32,
    regex: &str,
    speculative: bool,
) -> (String, usize, Harness) {
    let mut h = scripted(script, speculative);
    let mut events = h.submit_regex(&script[..prompt], max_tokens, regex);
    h.run_to_idle();
    let steps = h.scheduler.executor.batches.len();
    (drain(&mut events).0, steps, h)
}

#[test]
fn a_constrained_sequence_drafts_too_and_its_output_is_unchanged() {
    let (plain, plain_steps, _) = generate_constrained(REPEATING, 18, 40, "[a-h-]+", false);
    let (fast, steps, h) = generate_constrained(REPEATING, 18, 40, "[a-h-]+", true);
    assert_eq!(plain, &REPEATING[18..58]);
    assert_eq!(fast, plain, "speculation changes no token under a grammar");
    assert!(steps * 3 < plain_steps, "{steps} steps against {plain_steps}");
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.drafts > 0 && spec.accepted_tokens == spec.draft_tokens, "{spec:?}");
}

#[test]
fn drafts_the_grammar_refuses_are_not_fed() {
    // The grammar allows no `-`: the model says `a` where the script has one (the lowest
    // letter allowed), so what follows `h` in its output is never the `-` of the history.
    let (plain, _, _) = generate_constrained(REPEATING, 18, 30, "[a-h]+", false);
    let (fast, _, h) = generate_constrained(REPEATING, 18, 30, "[a-h]+", true);
    assert_eq!(fast, plain);
    assert!(!fast.contains('-'), "{fast}");
    let fed_dash = h.scheduler.executor.batches.iter().flatten().any(|t| t.pos >= 18 && t.token == TokenId::from(b'-'));
    assert!(!fed_dash, "a refused token was drafted");
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.drafts > 0, "{spec:?}");
}

#[test]
fn tokens_forced_after_a_kept_draft_end_the_verification_there() {
    // After `a` or `b` the grammar forces `yz`; a draft that ran on past them was fed at
    // positions the forced tokens now hold, so its cells go and the forced tokens are fed
    // next. (A row sampled past them would read the token after `y`, which the grammar
    // refuses there, and give the lowest one it allows, `w`, where the script says `x`.)
    let script = "xayzxbyz".repeat(12);
    let (plain, _, _) = generate_constrained(&script, 8, 48, "([wx][a-c]yz)+", false);
    let (fast, _, h) = generate_constrained(&script, 8, 48, "([wx][a-c]yz)+", true);
    assert_eq!(plain, &script[8..56]);
    assert_eq!(fast, plain);
    let spec = h.scheduler.stats.snapshot().speculation;
    assert!(spec.accepted_tokens > 0 && spec.accepted_tokens < spec.draft_tokens, "{spec:?}");
    assert!(!h.scheduler.executor.truncations.is_empty());
    let snap = h.scheduler.stats.snapshot().constraints;
    assert!(snap.forced_tokens > 0, "{snap:?}");
}

/// Four sequences decoding together, one of them copying a "file" from its prompt (it could
/// draft 20 tokens a step and keep them all), three with nothing to draft; with `guard`,
/// until the copy ends. The rows of each step all four decoded in, and the harness.
fn copying_beside_three(guard: crate::speculation::draft_lengths::FairnessGuard) -> (Vec<usize>, Harness) {
    let file = patternless(150);
    let script = format!("{file}{file}");
    let mut h = Harness::configured(4, 64, |c| (c.speculative, c.draft_guard) = (true, guard));
    // Rows cheap beside a step's first (7 ms, then 0.5 ms a row, as on a GPU): drafting pays
    // for the batch, and a copy's long drafts would make every stream's step long.
    h.scheduler
        .costs
        .step
        .freeze(crate::cost::step_costs::StepCosts { decode_step_ms: 7.0, prefill_token_ms: 2.5 }, 0.5);
    h.scheduler.executor.script = Some(script.as_bytes().to_vec());
    let mut copier = h.submit_n(&script[..170], 80);
    let others: Vec<Events> = (0..3).map(|i| h.submit_n(&file[..30 + i], 200)).collect();
    let (mut rows, mut copying) = (Vec::new(), false);
    for _ in 0..200 {
        h.step();
        let batch = h.scheduler.executor.batches.last().cloned().unwrap_or_default();
        let decoding = |seq: usize| batch.iter().filter(|t| t.seq == seq).count();
        if copying && (1..4).all(|seq| decoding(seq) == 1) {
            rows.push(batch.len());
        }
        match copier.try_recv() {
            Ok(StreamEvent::Finished(_)) => break,
            Ok(StreamEvent::Text { .. }) => copying = true,
            _ => {}
        }
    }
    drop(others);
    (rows, h)
}

#[test]
fn a_stream_beside_a_copying_one_keeps_its_step_within_the_guard() {
    // A pass of r rows costs 7 + 0.5 (r - 1) ms: the four rows 8.5 ms. The copy's drafts
    // go in a pass of their own (`ubatch_passes`): 7 ms more at least, where the guard
    // allows 1.2 times 8.5. Unguarded, the copy drafts deep and every step waits for it.
    let (unguarded, _) = copying_beside_three(crate::speculation::draft_lengths::FairnessGuard {
        max_slowdown: f64::INFINITY,
        tpot_ms: None,
    });
    assert!(unguarded.iter().any(|&r| r > 20), "unguarded, the copy widens the steps: {unguarded:?}");
    let (guarded, h) = copying_beside_three(crate::speculation::draft_lengths::FairnessGuard::default());
    assert!(!guarded.is_empty() && guarded.iter().all(|&r| r == 4), "{guarded:?}");
    assert!(h.scheduler.stats.snapshot().speculation.guard_cuts > 0);
    // A TPOT objective of 20 ms bounds the step instead: 8.5 ms and a pass of up to 10
    // drafts (11.5 ms).
    let tpot = crate::speculation::draft_lengths::FairnessGuard { tpot_ms: Some(20.0), ..Default::default() };
    let (loose, _) = copying_beside_three(tpot);
    assert!(loose.iter().all(|&r| r <= 14) && loose.iter().any(|&r| r > 4), "{loose:?}");
}
