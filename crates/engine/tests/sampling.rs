//! Logit bias, repetition penalties, min-p and vLLM's stop and length controls on the real
//! default model: each changes the output the way OpenAI and vLLM define it, greedy
//! decoding included, and speculation keeps a penalised greedy output as it is.
//!
//! Engines here prefill every prompt from scratch (`cold_engine`): a test that compares one
//! request's output with another's on the same prompt then compares rows computed in the
//! same shape, which are equal to the token; prefix reuse would compute the second one's
//! tail in another shape, where a near-tie may flip.

mod common;

use std::collections::HashMap;

use common::{cold_engine, collect, greedy, model_path, serial};
use rillm_engine::{Engine, EngineConfig, GenerateRequest, Penalties, SamplingParams, Speculative, StreamEvent};

const ANIMALS: &str = "List of animals: cat, dog, cat, dog, cat, dog,";

fn with(request: GenerateRequest, adjust: impl FnOnce(&mut SamplingParams)) -> GenerateRequest {
    let mut sampling = request.sampling.clone();
    adjust(&mut sampling);
    request.with_sampling(sampling)
}

fn ids(engine: &Engine, request: GenerateRequest) -> Vec<u32> {
    collect(engine.submit(request).expect("admitted")).1
}

/// How often the commonest token comes.
fn most_repeats(ids: &[u32]) -> usize {
    let mut counts = HashMap::new();
    for id in ids {
        *counts.entry(id).or_insert(0) += 1;
    }
    counts.into_values().max().unwrap_or(0)
}

#[test]
fn logit_bias_forces_and_bans_tokens_under_greedy_decoding() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let plain = ids(&engine, greedy("The capital of France is", 8));
    let banana = engine.tokenize_text(" banana", false)[0];
    let forced = ids(&engine, with(greedy("The capital of France is", 8), |s| s.logit_bias = vec![(banana, 100.0)]));
    assert_eq!(forced, vec![banana; 8], "+100 makes the token the only pick");
    let first = plain[0];
    let banned = ids(&engine, with(greedy("The capital of France is", 8), |s| s.logit_bias = vec![(first, -100.0)]));
    assert!(!banned.contains(&first), "-100 bans {first}: {banned:?}");
    // vLLM's allowed_token_ids: nothing else is sampled.
    let pair = [banana, first];
    let allowed = ids(&engine, with(greedy("The capital of France is", 8), |s| s.allowed_token_ids = pair.to_vec()));
    assert!(allowed.len() == 8 && allowed.iter().all(|t| pair.contains(t)), "{allowed:?}");
    // Outside the vocabulary: refused, naming the field.
    let outside = with(greedy("Hi", 4), |s| s.logit_bias = vec![(1 << 30, 1.0)]);
    match engine.submit(outside).err() {
        Some(rillm_engine::Rejected::InvalidField { param, .. }) => assert_eq!(param, "logit_bias"),
        other => panic!("expected a refusal naming logit_bias, got {other:?}"),
    }
}

#[test]
fn frequency_and_presence_penalties_break_a_greedy_loop() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let plain = ids(&engine, greedy(ANIMALS, 40));
    let frequency = ids(&engine, with(greedy(ANIMALS, 40), |s| s.penalties.frequency = 2.0));
    let presence = ids(&engine, with(greedy(ANIMALS, 40), |s| s.penalties.presence = 2.0));
    eprintln!("most repeats: plain {}, frequency {}", most_repeats(&plain), most_repeats(&frequency));
    assert!(most_repeats(&frequency) < most_repeats(&plain), "{plain:?} vs {frequency:?}");
    assert_ne!(presence, plain, "a presence penalty of 2 changes the loop");
    // Only the output counts: the first token, before any output, is the unpenalised one.
    assert_eq!((frequency[0], presence[0]), (plain[0], plain[0]));
}

#[test]
fn repetition_penalty_moves_the_output_away_from_the_prompt() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let prompt = "Repeat after me: the quick brown fox jumps over the lazy dog. The quick brown fox";
    let prompt_ids = engine.tokenize_text(prompt, true);
    let from_prompt = |ids: &[u32]| ids.iter().filter(|t| prompt_ids.contains(t)).count();
    let plain = ids(&engine, greedy(prompt, 24));
    let penalised = ids(&engine, with(greedy(prompt, 24), |s| s.penalties.repetition = 1.8));
    eprintln!("tokens from the prompt: plain {}, penalised {}", from_prompt(&plain), from_prompt(&penalised));
    assert!(from_prompt(&penalised) < from_prompt(&plain), "{plain:?} vs {penalised:?}");
}

#[test]
fn min_p_of_one_leaves_only_the_most_likely_token() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let hot = |min_p| {
        with(greedy("Once upon a time", 24), |s| {
            (s.temperature, s.seed, s.min_p) = (1.5, Some(5), min_p);
        })
    };
    let plain = ids(&engine, greedy("Once upon a time", 24));
    assert_ne!(ids(&engine, hot(0.0)), plain, "temperature 1.5 wanders off the greedy path");
    assert_eq!(ids(&engine, hot(1.0)), plain, "min_p 1 keeps only the top token");
}

#[test]
fn a_penalised_greedy_output_is_the_same_with_and_without_speculation() {
    // Kept drafts count for the rows after them: each row is penalised as plain decoding
    // would penalise it.
    let _g = serial();
    let penalties = Penalties { presence: 0.1, frequency: 0.05, repetition: 1.0 };
    let prompt = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3,";
    let run = |speculative| {
        let mut config = EngineConfig::new(model_path());
        config.speculation.mode = speculative;
        let engine = Engine::start(config).expect("engine starts");
        let mut request = with(greedy(prompt, 60), |s| s.penalties = penalties);
        request.logprobs = Some(5);
        let mut stream = engine.submit(request).expect("admitted");
        let (mut ids, mut tops) = (Vec::new(), Vec::new());
        while let Some(event) = stream.blocking_next() {
            if let StreamEvent::Text { token_ids, logprobs, .. } = event {
                ids.extend(token_ids);
                tops.extend(logprobs.into_iter().map(|l| l.top.iter().map(|t| (t.token, t.logprob)).collect()));
            }
        }
        (ids, tops, engine.stats().snapshot().speculation)
    };
    let (plain, plain_tops, _) = run(Speculative::Off);
    let (fast, _, spec) = run(Speculative::Ngram);
    eprintln!("speculation with penalties: {spec:?}");
    assert!(spec.drafts > 0 && spec.accepted_tokens > 0, "{spec:?}");
    assert_eq!(fast.len(), plain.len());
    // Several rows in one step round a little differently from one: the outputs may part
    // only where the two best penalised scores were all but tied.
    if let Some(at) = plain.iter().zip(&fast).position(|(a, b)| a != b) {
        let tops: &Vec<(u32, f32)> = &plain_tops[at];
        let mut scores: Vec<f32> = tops
            .iter()
            .map(|&(t, logprob)| {
                let seen = plain[..at].iter().filter(|&&s| s == t).count() as f32;
                logprob - penalties.frequency * seen - if seen > 0.0 { penalties.presence } else { 0.0 }
            })
            .collect();
        scores.sort_by(|a, b| b.total_cmp(a));
        assert!(scores[0] - scores[1] < 0.1, "parted at {at}: {plain:?} vs {fast:?} ({scores:?})");
    }
}

#[test]
fn min_tokens_holds_off_every_way_of_ending_and_stop_token_ids_end_the_output() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let ask = || {
        GenerateRequest::chat(vec![rillm_engine::ChatMessage::new("user", "Say hello.")])
            .with_max_tokens(200)
            .with_sampling(SamplingParams::greedy())
    };
    let (text, ids, done) = collect(engine.submit(ask()).expect("admitted"));
    assert_eq!(done.finish_reason, rillm_engine::FinishReason::Eos, "{text:?}");
    let natural = done.usage.completion_tokens;
    // At least `min_tokens` before end of generation may come (the end token itself counts).
    let mut longer = ask();
    longer.min_tokens = natural + 10;
    let (_, _, done) = collect(engine.submit(longer).expect("admitted"));
    assert!(done.usage.completion_tokens > natural + 10, "{done:?}");
    // A stop token ends the output there: counted, not streamed.
    let third = ids[2];
    let first_at = ids.iter().position(|&t| t == third).expect("in the output");
    let mut stopped = ask();
    stopped.stop_token_ids = vec![third];
    let (stopped_text, stopped_ids, done) = collect(engine.submit(stopped).expect("admitted"));
    assert_eq!(done.finish_reason, rillm_engine::FinishReason::Stop);
    assert_eq!(stopped_ids, ids[..first_at]);
    assert_eq!(done.usage.completion_tokens as usize, first_at + 1);
    assert!(text.starts_with(&stopped_text));
    // ...but not before `min_tokens`, and neither does a stop string.
    let mut held = ask();
    (held.stop_token_ids, held.stop, held.min_tokens) = (vec![third], vec![stopped_text.clone()], 6);
    let (held_text, _, done) = collect(engine.submit(held).expect("admitted"));
    assert!(done.usage.completion_tokens >= 6, "{done:?} {held_text:?}");
    assert!(held_text.starts_with(&stopped_text) && held_text.len() > stopped_text.len(), "{held_text:?}");
}

#[test]
fn an_included_stop_string_ends_the_text_and_a_truncated_prompt_keeps_its_end() {
    let _g = serial();
    let engine = cold_engine(1, 2, 512);
    let (plain, _, _) = collect(engine.submit(greedy("The capital of France is", 24)).expect("admitted"));
    let stop = plain.split_whitespace().nth(2).expect("a few words").to_string();
    let stopped = |include: bool| {
        let mut request = greedy("The capital of France is", 24).with_stop(vec![stop.clone()]);
        request.include_stop_str = include;
        collect(engine.submit(request).expect("admitted")).0
    };
    let cut = &plain[..plain.find(&stop).expect("in the text")];
    assert_eq!(stopped(false), cut);
    assert_eq!(stopped(true), format!("{cut}{stop}"));

    // Only the last 8 tokens: the same as sending those 8 alone.
    let long = "Here is a long preamble that the model will never see. The capital of France is";
    let ids = engine.tokenize_text(long, true);
    let mut truncated = greedy(long, 12);
    truncated.truncate_prompt_tokens = Some(8);
    let (text, _, done) = collect(engine.submit(truncated).expect("admitted"));
    assert_eq!(done.usage.prompt_tokens, 8);
    let tail = GenerateRequest::new(rillm_engine::Prompt::Tokens(ids[ids.len() - 8..].to_vec()))
        .with_max_tokens(12)
        .with_sampling(SamplingParams::greedy());
    assert_eq!(collect(engine.submit(tail).expect("admitted")).0, text);
}
