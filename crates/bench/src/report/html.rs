//! The report of one run (`--report`): a sweep overview when there are several levels, then
//! per level a summary, its caveats, a latency table and charts, then how it was run.

use std::fmt::Write;

use super::charts::{Chart, Guide, Kind, Series};
use super::page::{card, escape, json_details, num, page, table, warning, Cell};
use super::{knee, level_name, load_axis};
use crate::results::result::BenchResult;
use crate::run::record::Status;
use crate::stats::Distribution;

/// Grey, orange, red for the rug of scheduled, rejected and failed requests.
const GREY: usize = 6;
const ORANGE: usize = 4;
const RED: usize = 1;

pub fn html(levels: &[BenchResult]) -> String {
    let Some(first) = levels.first() else {
        return page("rillm bench report", "", "<p>The run measured no load level.</p>");
    };
    let mut body = String::new();
    if levels.len() > 1 {
        sweep_section(&mut body, levels);
    }
    let knee = knee(levels);
    for (i, r) in levels.iter().enumerate() {
        level_section(&mut body, r, levels.len() > 1 && knee == Some(i));
    }
    body.push_str("<h2>How this was run</h2>");
    json_details(&mut body, "Run context: model, device, command, input hashes", &first.run_context.to_value());
    json_details(&mut body, "SLOs", &serde_json::to_value(first.slos).unwrap_or_default());
    page("rillm bench report", &subtitle(first, levels.len()), &body)
}

pub(super) fn subtitle(r: &BenchResult, levels: usize) -> String {
    let model = Some(r.run_context.model.as_str()).filter(|m| !m.is_empty()).unwrap_or("unknown model");
    let plural = if levels == 1 { "" } else { "s" };
    format!("{} · {:?} protocol · {model} · {levels} load level{plural}", r.url, r.protocol)
}

fn sweep_section(body: &mut String, levels: &[BenchResult]) {
    let knee = knee(levels);
    body.push_str("<h2>Load sweep</h2>");
    let rows: Vec<(&str, Vec<Cell>)> = levels
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let class = if Some(i) == knee { "knee" } else { "" };
            let name = if Some(i) == knee { format!("{} (knee)", level_name(r)) } else { level_name(r) };
            let cells = vec![
                Cell::plain(name),
                Cell::plain(r.offered_requests.to_string()),
                Cell::plain(r.completed.to_string()),
                Cell::plain(r.failed.to_string()),
                Cell::plain(r.rejected_429.to_string()),
                Cell::plain(r.client_shed_requests.to_string()),
                Cell::plain(format!("{:.2}", r.achieved_rate_rps)),
                Cell::plain(format!("{:.2}", r.throughput_rps)),
                Cell::plain(format!("{:.2}", r.goodput_rps)),
                Cell::plain(format!("{:.1}", r.slo_attainment_pct)),
                Cell::plain(num(r.latency.ttft_ms.map(|d| d.p50), 0)),
                Cell::plain(num(r.latency.ttft_ms.map(|d| d.p99), 0)),
            ];
            (class, cells)
        })
        .collect();
    table(
        body,
        &[
            "level",
            "offered",
            "completed",
            "failed",
            "429",
            "shed",
            "sent req/s",
            "throughput req/s",
            "goodput req/s",
            "SLO met %",
            "TTFT p50 ms",
            "TTFT p99 ms",
        ],
        &rows,
    );
    let _ = write!(
        body,
        "<p>Knee: <b>{}</b> — the highest load at which at least 90 % of offered requests met every SLO.</p>",
        knee.map_or_else(|| "none (no level reached 90 %)".to_string(), |k| escape(&level_name(&levels[k])))
    );
    body.push_str("<div class=\"charts\">");
    for chart in sweep_charts(&[("", levels)]) {
        body.push_str(&chart.render());
    }
    let mut ttft = Chart::new("TTFT CDF by level", "TTFT (ms)", "fraction of completed requests");
    ttft.y_range = Some((0.0, 1.0));
    ttft.log_x = true;
    ttft.x_guides.push(Guide::new(levels[0].slos.ttft_ms, "SLO"));
    for (i, r) in levels.iter().enumerate() {
        ttft.series.push(Series::cdf(level_name(r), i, ttft_samples(r)));
    }
    body.push_str(&ttft.render());
    body.push_str("</div>");
}

/// Goodput and throughput against load, and SLO attainment, for one or more runs (`name`
/// prefixes each series when runs are compared).
pub(super) fn sweep_charts(runs: &[(&str, &[BenchResult])]) -> Vec<Chart> {
    let x_label = runs.first().and_then(|(_, l)| l.first()).and_then(load_axis).map_or("load level", |a| a.1);
    let mut rates = Chart::new("Goodput and throughput against load", x_label, "requests/s");
    rates.y_from_zero = true;
    let mut attained = Chart::new("SLO attainment against load", x_label, "offered requests meeting every SLO (%)");
    attained.y_range = Some((0.0, 100.0));
    attained.y_guides.push(Guide::new(90.0, "90 %"));
    for (n, (name, levels)) in runs.iter().enumerate() {
        let prefix = if name.is_empty() { String::new() } else { format!("{name}: ") };
        let at = |f: fn(&BenchResult) -> f64| -> Vec<(f64, f64)> {
            levels.iter().filter_map(|r| load_axis(r).map(|(x, _)| (x, f(r)))).collect()
        };
        // One colour per run, as in every chart of a comparison; throughput dashed, drawn
        // first, so where it equals goodput both stay visible.
        rates.series.push(Series::new(format!("{prefix}throughput"), n, Kind::Dashed, at(|r| r.throughput_rps)));
        rates.series.push(Series::new(format!("{prefix}goodput"), n, Kind::Line, at(|r| r.goodput_rps)));
        attained.series.push(Series::new(format!("{prefix}SLO met"), n, Kind::Line, at(|r| r.slo_attainment_pct)));
        if let Some(k) = knee(levels).and_then(|k| load_axis(&levels[k])) {
            rates.x_guides.push(Guide::new(k.0, format!("{prefix}knee")));
        }
    }
    if runs.len() == 1 {
        // The diagonal a server keeping up with its load would follow (open loop only).
        let offered: Vec<(f64, f64)> =
            runs[0].1.iter().filter_map(|r| r.load.requested_rate_rps.map(|rate| (rate, rate))).collect();
        if !offered.is_empty() {
            rates.series.push(Series::new("offered", GREY, Kind::Line, offered));
        }
    }
    vec![rates, attained]
}

fn level_section(body: &mut String, r: &BenchResult, is_knee: bool) {
    let knee_note = if is_knee { " — the knee" } else { "" };
    let _ = write!(body, "<h2>{}{knee_note}</h2><div class=\"cards\">", escape(&level_name(r)));
    card(body, "offered", &r.offered_requests.to_string(), false);
    card(body, "completed", &r.completed.to_string(), r.completed < r.offered_requests);
    card(body, "failed", &r.failed.to_string(), r.failed > 0);
    card(body, "rejected (429)", &r.rejected_429.to_string(), r.rejected_429 > 0);
    card(body, "shed by client", &r.client_shed_requests.to_string(), r.client_shed_requests > 0);
    card(body, "goodput req/s", &format!("{:.3}", r.goodput_rps), false);
    card(body, "SLO attainment", &format!("{:.1} %", r.slo_attainment_pct), r.slo_attainment_pct < 90.0);
    card(body, "throughput req/s", &format!("{:.3}", r.throughput_rps), false);
    card(body, "output tok/s", &num(r.output_tokens_per_s, 1), false);
    if r.protocol.is_pooled() {
        card(body, "inputs/s", &num(r.inputs_per_s(), 1), false);
        card(body, "prompt tok/s", &num(r.prompt_tokens_per_s, 1), false);
    }
    card(body, "prefix-cache hit", &num(r.tokens.prefix_cache_hit_pct, 1).replace("n/a", "not reported"), false);
    if let Some(s) = &r.structured_outputs {
        let valid = format!("{} of {} ({} %)", s.valid, s.finished, num(s.valid_pct_of_finished, 1));
        let what = if r.tool_calls.is_some() { "valid final answers (finished)" } else { "valid outputs (finished)" };
        card(body, what, &valid, s.valid < s.finished);
        card(body, "valid outputs a second", &num(r.valid_outputs_per_s(), 3), false);
        card(body, "cut by max_tokens", &s.cut_by_length.to_string(), s.cut_by_length > 0);
    }
    if let Some(c) = &r.tool_calls {
        let valid = format!("{} of {} ({} %)", c.valid, c.calls, num(c.valid_pct, 1));
        card(body, "valid tool calls", &valid, c.valid < c.calls);
        card(body, "replies with calls", &format!("{} of {}", c.replies_with_calls, c.replies), false);
        let wrong = format!("{} repeated, {} undeclared keys", c.repeated, c.undeclared);
        card(body, "calls repeated or off-schema", &wrong, c.repeated + c.undeclared > 0);
        card(body, "TTFT p50, tool rounds 2+", &num(c.ttft_p50_later_rounds_ms, 1), false);
    }
    if let Some(s) = r.speculation.filter(|s| s.drafts > 0) {
        card(body, "drafted tokens kept", &format!("{} %", num(s.acceptance_pct, 1)), false);
        card(body, "tokens a draft", &num(s.mean_accepted_length, 2), false);
    }
    body.push_str("</div>");
    warning(body, "What these figures are, and are not", &r.limits);
    latency_table(body, r);
    if let Some(turns) = &r.per_turn {
        turn_table(body, turns);
    }
    if let Some(targets) = &r.per_target {
        group_table(body, "endpoint", targets.iter().map(|t| (t.url.clone(), t)).collect());
    }
    if let Some(models) = &r.per_model {
        group_table(body, "model", models.iter().map(|m| (m.model.clone(), &m.figures)).collect());
    }
    body.push_str("<div class=\"charts\">");
    for chart in level_charts(r) {
        body.push_str(&chart.render());
    }
    body.push_str("</div>");
}

fn latency_table(body: &mut String, r: &BenchResult) {
    let l = &r.latency;
    let mut rows = vec![("TTFT", &l.ttft_ms), ("TTFT from schedule", &l.ttft_from_schedule_ms)];
    if l.time_to_first_answer_ms.is_some() {
        rows.push(("to first answer token", &l.time_to_first_answer_ms));
    }
    rows.extend([
        ("TPOT", &l.tpot_ms),
        ("ITL (per token)", &l.itl_ms),
        ("gap between events", &l.event_gap_ms),
        ("end to end", &l.e2e_ms),
        ("client dispatch lag", &l.dispatch_lag_ms),
    ]);
    let rows: Vec<(&str, Vec<Cell>)> = rows.into_iter().map(|(name, d)| ("", distribution_cells(name, d))).collect();
    table(body, &["latency (ms)", "samples", "mean", "p50", "p90", "p99", "max"], &rows);
}

fn distribution_cells(name: &str, d: &Option<Distribution>) -> Vec<Cell> {
    let mut cells = vec![Cell::plain(name)];
    match d {
        Some(d) => {
            cells.push(Cell::plain(d.count.to_string()));
            cells.extend([d.mean, d.p50, d.p90, d.p99, d.max].map(|v| Cell::plain(format!("{v:.1}"))));
        }
        None => cells.extend((0..6).map(|_| Cell::plain("n/a"))),
    }
    cells
}

fn turn_table(body: &mut String, turns: &[crate::results::result::TurnSummary]) {
    let rows: Vec<(&str, Vec<Cell>)> = turns
        .iter()
        .map(|t| {
            let cells = vec![
                Cell::plain(t.turn.to_string()),
                Cell::plain(t.completed.to_string()),
                Cell::plain(num(t.ttft_ms.map(|d| d.p50), 1)),
                Cell::plain(num(t.ttft_ms.map(|d| d.p90), 1)),
                Cell::plain(num(t.mean_prompt_tokens, 1)),
                Cell::plain(num(t.mean_cached_tokens, 1)),
                Cell::plain(num(cached_share(t), 1)),
            ];
            ("", cells)
        })
        .collect();
    table(
        body,
        &["turn", "completed", "TTFT p50 ms", "TTFT p90 ms", "prompt tokens", "cached tokens", "cached %"],
        &rows,
    );
}

/// Each endpoint's or model's share of a level, first column `what`.
fn group_table(body: &mut String, what: &str, groups: Vec<(String, &crate::results::result::TargetSummary)>) {
    let rows: Vec<(&str, Vec<Cell>)> = groups
        .into_iter()
        .map(|(label, t)| {
            let cells = vec![
                Cell::plain(label),
                Cell::plain(t.sent.to_string()),
                Cell::plain(t.completed.to_string()),
                Cell::plain(t.failed.to_string()),
                Cell::plain(t.rejected_429.to_string()),
                Cell::plain(format!("{:.3}", t.goodput_rps)),
                Cell::plain(num(t.ttft_ms.map(|d| d.p50), 1)),
                Cell::plain(num(t.ttft_ms.map(|d| d.p99), 1)),
                Cell::plain(num(t.tpot_ms.map(|d| d.p50), 2)),
            ];
            ("", cells)
        })
        .collect();
    table(
        body,
        &[what, "sent", "completed", "failed", "429", "goodput req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"],
        &rows,
    );
}

fn cached_share(t: &crate::results::result::TurnSummary) -> Option<f64> {
    match (t.mean_cached_tokens, t.mean_prompt_tokens) {
        (Some(c), Some(p)) if p > 0.0 => Some(100.0 * c / p),
        _ => None,
    }
}

pub(super) fn ttft_samples(r: &BenchResult) -> Vec<f64> {
    r.requests.iter().filter(|q| q.status == Status::Completed).filter_map(|q| q.ttft_ms).collect()
}

pub(super) fn tpot_samples(r: &BenchResult) -> Vec<f64> {
    r.requests.iter().filter(|q| q.status == Status::Completed).filter_map(|q| q.tpot_ms).collect()
}

fn level_charts(r: &BenchResult) -> Vec<Chart> {
    let mut ttft = Chart::new("TTFT CDF", "TTFT (ms)", "fraction of completed requests");
    ttft.y_range = Some((0.0, 1.0));
    ttft.log_x = true;
    ttft.x_guides.push(Guide::new(r.slos.ttft_ms, "SLO"));
    ttft.series.push(Series::cdf("TTFT", 0, ttft_samples(r)));

    let mut tpot = Chart::new("TPOT and gaps between streamed events", "ms", "fraction");
    tpot.y_range = Some((0.0, 1.0));
    tpot.log_x = true;
    tpot.series.push(Series::cdf("TPOT (per request)", 0, tpot_samples(r)));
    let gaps =
        r.requests.iter().filter(|q| q.status == Status::Completed).flat_map(|q| q.event_gaps_ms.iter().flatten());
    tpot.series.push(Series::cdf("event gap (= ITL at one token per event)", 1, gaps.copied().collect()));
    if let Some(slo) = r.slos.tpot_ms {
        tpot.x_guides.push(Guide::new(slo, "TPOT SLO"));
    }

    let mut over_time = Chart::new("Latency over the run, by scheduled send", "scheduled send (s)", "ms");
    over_time.log_y = true;
    let at = |q: &crate::results::result::RequestJson| q.scheduled_ms / 1000.0;
    let done = || r.requests.iter().filter(|q| q.status == Status::Completed);
    over_time.series.push(Series::counted(
        "TTFT",
        0,
        Kind::Dots,
        done().filter_map(|q| Some((at(q), q.ttft_ms?))).collect(),
    ));
    over_time.series.push(Series::counted("end to end", 2, Kind::Dots, done().map(|q| (at(q), q.e2e_ms)).collect()));
    for (name, color, status) in [
        ("scheduled sends", GREY, None),
        ("rejected (429)", ORANGE, Some(Status::Rejected)),
        ("failed", RED, Some(Status::Failed)),
        ("shed by client", 3, Some(Status::Shed)),
    ] {
        let points: Vec<(f64, f64)> =
            r.requests.iter().filter(|q| status.is_none_or(|s| q.status == s)).map(|q| (at(q), 0.0)).collect();
        if status.is_none() || !points.is_empty() {
            over_time.series.push(Series::counted(name, color, Kind::Rug, points));
        }
    }

    let mut inflight = Chart::new("Requests in flight", "time since start (s)", "requests");
    inflight.y_from_zero = true;
    inflight.series.push(Series::new("in flight", 0, Kind::Step, in_flight(r)));

    let mut charts = vec![ttft, tpot, over_time, inflight];
    // Traces and shared prefixes: how much of each prompt the server says it reused, when.
    let reuse: Vec<(f64, f64)> = done()
        .filter_map(|q| Some((at(q), 100.0 * f64::from(q.cached_tokens?) / f64::from(q.prompt_tokens?.max(1)))))
        .collect();
    if !reuse.is_empty() {
        let mut cached =
            Chart::new("Prompt reused from the server's cache, per request", "scheduled send (s)", "cached (%)");
        cached.y_range = Some((0.0, 100.0));
        cached.series.push(Series::counted("cached share of the prompt", 2, Kind::Dots, reuse));
        charts.push(cached);
    }
    if let Some(turns) = r.per_turn.as_deref().filter(|t| !t.is_empty()) {
        let mut by_turn = Chart::new("TTFT by turn of the conversation", "turn", "TTFT (ms)");
        by_turn.y_from_zero = true;
        let q = |f: fn(&Distribution) -> f64| -> Vec<(f64, f64)> {
            turns.iter().filter_map(|t| Some((f64::from(t.turn), f(t.ttft_ms.as_ref()?)))).collect()
        };
        by_turn.series.push(Series::new("p50", 0, Kind::Line, q(|d| d.p50)));
        by_turn.series.push(Series::new("p90", 1, Kind::Line, q(|d| d.p90)));
        let mut cached = Chart::new("Prompt tokens reused from the server's cache, by turn", "turn", "cached (%)");
        cached.y_range = Some((0.0, 100.0));
        let share = turns.iter().filter_map(|t| Some((f64::from(t.turn), cached_share(t)?))).collect();
        cached.series.push(Series::new("cached share of the prompt", 2, Kind::Line, share));
        charts.extend([by_turn, cached]);
    }
    charts
}

/// Requests between their send and the end of their response, over the run (seconds).
fn in_flight(r: &BenchResult) -> Vec<(f64, f64)> {
    let mut changes: Vec<(f64, i32)> = r
        .requests
        .iter()
        .filter(|q| q.status != Status::Shed)
        .flat_map(|q| [(q.sent_ms, 1), (q.sent_ms + q.e2e_ms, -1)])
        .collect();
    // Ends before starts at the same instant: a count never overshoots.
    changes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut level = 0;
    let mut points = vec![(0.0, 0.0)];
    for (t, d) in changes {
        level += d;
        points.push((t / 1000.0, f64::from(level)));
    }
    points
}
