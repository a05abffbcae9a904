//! The result's figures against values worked out by hand from a few records.

use super::*;
use crate::protocol::Protocol;
use crate::run::record::Status;

/// A request scheduled at `scheduled_ms`, sent `lag_ms` later, that streamed its first token
/// after `ttft_ms` and ended after `e2e_ms` with `tokens` tokens.
pub(crate) fn completed(scheduled_ms: f64, lag_ms: f64, ttft_ms: f64, e2e_ms: f64, tokens: u32) -> RequestRecord {
    let mut record = RequestRecord { status: Status::Completed, error: None, ..RequestRecord::shed(scheduled_ms) };
    record.timing.sent_ms = scheduled_ms + lag_ms;
    record.timing.ttft_ms = Some(ttft_ms);
    record.timing.e2e_ms = e2e_ms;
    record.usage.completion_tokens = Some(tokens);
    record
}

/// A level of an open-loop run at `rate` req/s, judged by a TTFT SLO of `ttft_slo_ms`.
pub(crate) fn level(rate: f64, ttft_slo_ms: f64, records: Vec<RequestRecord>) -> BenchResult {
    build(RunFacts {
        url: "http://127.0.0.1:1/v1/completions".into(),
        urls: vec!["http://127.0.0.1:1/v1/completions".into()],
        protocol: Protocol::Completions,
        load: LoadDescription {
            mode: LoadMode::Rate,
            requested_rate_rps: Some(rate),
            arrival: Some(crate::run::schedule::Arrival::Poisson),
            burstiness: Some(1.0),
            concurrency: None,
            max_inflight: None,
        },
        slos: Slos { ttft_ms: ttft_slo_ms, ..Slos::default() },
        records,
        wall_s: 2.0,
        client_cpu_s: 0.1,
        run_context: Default::default(),
        notes: Vec::new(),
        sessions: None,
        answers: AnswersPerPrompt::default(),
    })
}

#[test]
fn goodput_attainment_throughput_and_percentiles_match_a_hand_count() {
    let mut failed = RequestRecord { status: Status::Failed, ..RequestRecord::shed(1500.0) };
    failed.timing.e2e_ms = 10.0;
    let records = vec![
        completed(0.0, 0.0, 100.0, 1000.0, 10),
        completed(500.0, 0.0, 300.0, 1500.0, 20),   // misses the 250 ms SLO
        completed(1000.0, 20.0, 200.0, 1000.0, 30), // 220 ms from its scheduled send: meets it
        failed,
    ];
    let r = level(2.0, 250.0, records);
    // From the first scheduled send (0) to the last response's end (1020 + 1000 ms).
    assert_eq!(r.duration_s, 2.02);
    assert_eq!((r.offered_requests, r.sent, r.completed, r.failed), (4, 4, 3, 1));
    assert!((r.goodput_rps - 2.0 / 2.02).abs() < 1e-9, "{}", r.goodput_rps);
    assert_eq!(r.slo_attainment_pct, 50.0, "2 of the 4 offered met every SLO");
    assert!((r.throughput_rps - 3.0 / 2.02).abs() < 1e-9);
    assert!((r.output_tokens_per_s.unwrap() - 60.0 / 2.02).abs() < 1e-9);
    // Four sends over 1.5 s: three gaps.
    assert!((r.achieved_rate_rps - 2.0).abs() < 1e-9);
    let ttft = r.latency.ttft_ms.expect("TTFT");
    assert_eq!((ttft.p50, ttft.p90, ttft.min), (200.0, 300.0, 100.0), "nearest rank over 100, 200, 300");
    let from_schedule = r.latency.ttft_from_schedule_ms.expect("TTFT from the schedule");
    assert_eq!(from_schedule.p50, 220.0);
    // A TTFT goodput counts the same two requests.
    assert!((r.ttft_goodput_rps - r.goodput_rps).abs() < 1e-12);
}

#[test]
fn all_answers_to_a_prompt_are_timed_from_its_first_send_to_its_last_end() {
    let mut records = vec![
        completed(0.0, 0.0, 50.0, 100.0, 10),
        completed(0.0, 10.0, 50.0, 200.0, 10), // sent at 10, ends at 210
        completed(300.0, 0.0, 20.0, 50.0, 10),
        completed(300.0, 0.0, 20.0, 80.0, 10),
        completed(600.0, 0.0, 20.0, 80.0, 10),
    ];
    for (i, r) in records.iter_mut().enumerate() {
        r.place.index = i;
    }
    let two_each = AnswersPerPrompt { requests: 2, choices: 1 };
    let d = all_answers(&records, two_each).expect("timed");
    assert_eq!((d.count, d.min, d.max), (2, 80.0, 210.0), "the fifth prompt's second request never went out");
    // One request with n choices: its own E2E.
    let d = all_answers(&records, AnswersPerPrompt { requests: 1, choices: 4 }).expect("timed");
    assert_eq!((d.count, d.max), (5, 210.0 - 10.0));
    assert_eq!(all_answers(&records, AnswersPerPrompt::default()), None, "one answer a prompt: E2E says it");
}

#[test]
fn valid_structured_outputs_are_counted_a_second() {
    use crate::checks::OutputCheck;
    let valid = OutputCheck { parses: true, valid: true };
    let checked = |check, finish: &str, mut r: RequestRecord| {
        r.reply.output_check = Some(check);
        r.finish_reason = Some(finish.into());
        r
    };
    let records = vec![
        checked(valid, "stop", completed(0.0, 0.0, 100.0, 1000.0, 10)),
        checked(OutputCheck { parses: true, valid: false }, "stop", completed(500.0, 0.0, 100.0, 1000.0, 10)),
        checked(valid, "length", completed(1000.0, 0.0, 100.0, 1000.0, 10)), // cut: not counted
        checked(valid, "stop", completed(1500.0, 0.0, 100.0, 500.0, 10)),
    ];
    let r = level(2.0, 250.0, records);
    assert_eq!(r.duration_s, 2.0);
    assert_eq!(r.valid_outputs_per_s(), Some(1.0), "two valid finished outputs in two seconds");
    assert_eq!(level(2.0, 250.0, vec![completed(0.0, 0.0, 1.0, 2.0, 1)]).valid_outputs_per_s(), None, "no constraint");
}

#[test]
fn a_model_mix_is_broken_down_per_model() {
    let named = |model: &str, ttft_ms: f64| {
        let mut record = completed(0.0, 0.0, ttft_ms, ttft_ms + 100.0, 10);
        record.place.model = Some(std::sync::Arc::from(model));
        record
    };
    let mut failed = RequestRecord { status: Status::Failed, ..RequestRecord::shed(0.0) };
    failed.place.model = Some(std::sync::Arc::from("b"));
    let r = level(2.0, 250.0, vec![named("a", 100.0), named("a", 300.0), named("b", 50.0), failed]);
    let models = r.per_model.as_ref().expect("two models");
    let a = models.iter().find(|m| m.model == "a").expect("a");
    let b = models.iter().find(|m| m.model == "b").expect("b");
    assert_eq!((a.figures.sent, a.figures.completed, a.figures.failed), (2, 2, 0));
    assert_eq!((b.figures.sent, b.figures.completed, b.figures.failed), (2, 1, 1));
    assert_eq!(a.figures.ttft_ms.map(|d| d.max), Some(300.0));
    let json = serde_json::to_value(&r).expect("serialises");
    assert_eq!(json["per_model"][0]["model"], "a");
    assert!(json["per_model"][0].get("url").is_none(), "no empty endpoint");
    assert!(level(2.0, 250.0, vec![named("a", 1.0)]).per_model.is_none(), "one model: no breakdown");
}
