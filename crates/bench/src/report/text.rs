//! The summary printed on the terminal after a run.

use std::fmt::Write;

use super::{knee, level_name};
use crate::results::result::BenchResult;
use crate::stats::Distribution;

fn dist_row(out: &mut String, name: &str, d: &Option<Distribution>) {
    match d {
        Some(d) => {
            let _ = writeln!(
                out,
                "  {name:<24} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                d.mean, d.p50, d.p90, d.p99, d.max
            );
        }
        None => {
            let _ = writeln!(out, "  {name:<24} {:>9}", "n/a");
        }
    }
}

/// One endpoint's or one model's share of a level, on one line.
fn group_line(out: &mut String, label: &str, t: &crate::results::result::TargetSummary) {
    let opt = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.1} ms"));
    let _ = writeln!(
        out,
        "  {label}: sent {}  completed {}  failed {}  429 {}  goodput {:.3} req/s  TTFT p50 {}  p99 {}",
        t.sent,
        t.completed,
        t.failed,
        t.rejected_429,
        t.goodput_rps,
        opt(t.ttft_ms.map(|d| d.p50)),
        opt(t.ttft_ms.map(|d| d.p99))
    );
}

pub fn summary(levels: &[BenchResult]) -> String {
    let mut out = String::new();
    for r in levels {
        let _ = writeln!(out, "== {} — {} ({:?}) ==", level_name(r), r.url, r.protocol);
        let _ = writeln!(
            out,
            "  offered {}  sent {}  completed {}  failed {}  rejected(429) {}  shed {}",
            r.offered_requests, r.sent, r.completed, r.failed, r.rejected_429, r.client_shed_requests
        );
        let _ = writeln!(
            out,
            "  duration {:.2} s  achieved {:.2} req/s  throughput {:.2} req/s  output {} tok/s  prompt {} tok/s",
            r.duration_s,
            r.achieved_rate_rps,
            r.throughput_rps,
            r.output_tokens_per_s.map_or("n/a".into(), |t| format!("{t:.1}")),
            r.prompt_tokens_per_s.map_or("n/a".into(), |t| format!("{t:.1}"))
        );
        if let Some(inputs) = r.inputs_per_s() {
            let _ =
                writeln!(out, "  inputs {inputs:.1} /s (embedded or scored; latency below is E2E, the whole answer)");
        }
        let _ = writeln!(
            out,
            "  goodput {:.3} req/s (SLO attainment {:.1} %)  ttft_goodput {:.3} req/s",
            r.goodput_rps, r.slo_attainment_pct, r.ttft_goodput_rps
        );
        let _ = writeln!(out, "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9}", "ms", "mean", "p50", "p90", "p99", "max");
        let l = &r.latency;
        // For a reasoning model TTFT is to the first token of either part: said so.
        let thinking = l.time_to_first_answer_ms.is_some();
        dist_row(&mut out, if thinking { "TTFT (thought or answer)" } else { "TTFT" }, &l.ttft_ms);
        dist_row(&mut out, "TTFT from schedule", &l.ttft_from_schedule_ms);
        if thinking {
            dist_row(&mut out, "to first answer token", &l.time_to_first_answer_ms);
        }
        dist_row(&mut out, "TPOT", &l.tpot_ms);
        dist_row(&mut out, "ITL (token)", &l.itl_ms);
        dist_row(&mut out, "event gap", &l.event_gap_ms);
        dist_row(&mut out, "E2E", &l.e2e_ms);
        dist_row(&mut out, "dispatch lag", &l.dispatch_lag_ms);
        let t = &r.tokens;
        let opt = |v: Option<f64>, unit: &str| v.map_or("n/a".into(), |v| format!("{v:.1}{unit}"));
        let _ = writeln!(
            out,
            "  tokens: mean input {}  mean output {}  prefix-cache hit {} ({} requests reported cached tokens)",
            opt(t.mean_input_tokens, ""),
            opt(t.mean_output_tokens, ""),
            opt(t.prefix_cache_hit_pct, " %"),
            t.requests_reporting_cached_tokens
        );
        if let (Some(thought), Some(output)) = (t.mean_reasoning_tokens, t.mean_output_tokens) {
            let _ = writeln!(out, "  reasoning: mean {thought:.1} tokens thinking, {:.1} answering", output - thought);
        }
        if let Some(s) = &r.structured_outputs {
            // Beside tools, the checked outputs are the replies without calls: typed answers.
            let what = if r.tool_calls.is_some() { "final answers" } else { "structured outputs" };
            let _ = writeln!(
                out,
                "  {what}: {} of {} finished outputs valid ({}, {:.3} a second), {} parse; {} cut by max_tokens, {} completed in all",
                s.valid,
                s.finished,
                opt(s.valid_pct_of_finished, " %"),
                r.valid_outputs_per_s().unwrap_or_default(),
                s.parsed,
                s.cut_by_length,
                s.checked
            );
        }
        if let Some(c) = &r.tool_calls {
            let _ = writeln!(
                out,
                "  tool calls: {} of {} calls valid ({}; {} parse, {} allowed names; {} repeat a call of their reply, {} carry undeclared keys; {} more cut by max_tokens) in {} of {} replies; {} replies to tool results; TTFT p50 first round {}, later rounds {}",
                c.valid,
                c.calls,
                opt(c.valid_pct, " %"),
                c.parsed,
                c.allowed,
                c.repeated,
                c.undeclared,
                c.cut,
                c.replies_with_calls,
                c.replies,
                c.later_rounds,
                opt(c.ttft_p50_first_round_ms, " ms"),
                opt(c.ttft_p50_later_rounds_ms, " ms")
            );
        }
        if let Some(s) = r.speculation.filter(|s| s.drafts > 0) {
            let _ = writeln!(
                out,
                "  speculative decoding (server's counters): {} drafts, {} of {} drafted tokens kept ({}), {} tokens a draft",
                s.drafts,
                s.accepted_tokens,
                s.draft_tokens,
                opt(s.acceptance_pct, " %"),
                opt(s.mean_accepted_length, "")
            );
        }
        if let Some(turns) = &r.per_turn {
            let _ = writeln!(
                out,
                "  {:<8} {:>9} {:>11} {:>11} {:>13} {:>13}",
                "turn", "completed", "TTFT p50", "TTFT p90", "prompt tok", "cached tok"
            );
            for t in turns {
                let _ = writeln!(
                    out,
                    "  {:<8} {:>9} {:>11} {:>11} {:>13} {:>13}",
                    t.turn,
                    t.completed,
                    opt(t.ttft_ms.map(|d| d.p50), " ms"),
                    opt(t.ttft_ms.map(|d| d.p90), " ms"),
                    opt(t.mean_prompt_tokens, ""),
                    opt(t.mean_cached_tokens, "")
                );
            }
        }
        for m in r.per_model.iter().flatten() {
            group_line(&mut out, &format!("model {}", m.model), &m.figures);
        }
        if let Some(loads) = &r.model_loads {
            let _ = writeln!(
                out,
                "  model loads: {} of {} requests waited on their model's load{}  (its /v1/models read every {} ms)",
                loads.requests,
                loads.of,
                loads.wait_ms.as_ref().zip(loads.ttft_ms.as_ref()).map_or(String::new(), |(w, t)| format!(
                    ", waiting p50 {:.0} ms  max {:.0} ms, their TTFT p50 {:.0} ms",
                    w.p50, w.max, t.p50
                )),
                loads.polled_every_ms
            );
        }
        for t in r.per_target.iter().flatten() {
            group_line(&mut out, &format!("endpoint {}", t.url), t);
        }
        let _ = writeln!(
            out,
            "  client CPU {:.2} cores{}",
            r.client.cpu_cores_used,
            if r.client.saturated { "  (SATURATED: see limits)" } else { "" }
        );
        let _ = writeln!(out, "  limits: {}", r.limits);
    }
    if levels.len() > 1 {
        let knee = knee(levels);
        let _ = writeln!(out, "== goodput vs load ==");
        for (i, r) in levels.iter().enumerate() {
            let mark = if Some(i) == knee { "  <- knee" } else { "" };
            let _ = writeln!(
                out,
                "  {:<18} goodput {:>8.3} req/s  attainment {:>5.1} %{mark}",
                level_name(r),
                r.goodput_rps,
                r.slo_attainment_pct
            );
        }
    }
    out
}
