//! The comparison of runs: per level, each run's figures and its ratio to the first run,
//! with the better direction marked; overlaid CDFs and sweep curves in the HTML page.

use std::fmt::Write;

use serde_json::{json, Value};

use super::charts::{Chart, Guide, Series};
use super::html::{subtitle, sweep_charts, tpot_samples, ttft_samples};
use super::level_name;
use super::page::{card, escape, json_details, page, table, warning, Cell};
use crate::results::compare::{
    is_rate_sweep, load_all, sustainable_rate, CompareArgs, CompareError, CompareFormat, Run,
};
use crate::results::result::BenchResult;

/// `rillm bench compare`: loads and checks the runs, writes the HTML page when asked, and
/// returns the comparison in the format asked for.
pub fn run(args: &CompareArgs) -> Result<String, CompareError> {
    let (runs, differences) = load_all(args)?;
    if let Some(path) = &args.report {
        crate::files::write_file(path, &html(&runs, &differences))?;
    }
    Ok(match args.format {
        CompareFormat::Text => text(&runs, &differences),
        CompareFormat::Markdown => markdown(&runs, &differences),
        CompareFormat::Json => serde_json::to_string_pretty(&to_json(&runs, &differences)).unwrap_or_default() + "\n",
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Better {
    Higher,
    Lower,
    /// Describes the workload (offered requests): not a result.
    Neither,
}

struct Metric {
    name: &'static str,
    better: Better,
    digits: usize,
    get: fn(&BenchResult) -> Option<f64>,
}

const METRICS: &[Metric] = &[
    Metric { name: "offered", better: Better::Neither, digits: 0, get: |r| Some(r.offered_requests as f64) },
    Metric { name: "completed", better: Better::Higher, digits: 0, get: |r| Some(r.completed as f64) },
    Metric { name: "failed", better: Better::Lower, digits: 0, get: |r| Some(r.failed as f64) },
    Metric { name: "rejected (429)", better: Better::Lower, digits: 0, get: |r| Some(r.rejected_429 as f64) },
    Metric { name: "shed by client", better: Better::Lower, digits: 0, get: |r| Some(r.client_shed_requests as f64) },
    Metric { name: "goodput req/s", better: Better::Higher, digits: 3, get: |r| Some(r.goodput_rps) },
    Metric { name: "SLO attainment %", better: Better::Higher, digits: 1, get: |r| Some(r.slo_attainment_pct) },
    Metric { name: "throughput req/s", better: Better::Higher, digits: 3, get: |r| Some(r.throughput_rps) },
    Metric { name: "output tok/s", better: Better::Higher, digits: 1, get: |r| r.output_tokens_per_s },
    Metric { name: "prompt tok/s", better: Better::Higher, digits: 1, get: |r| r.prompt_tokens_per_s },
    Metric { name: "TTFT p50 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p50) },
    Metric { name: "TTFT p90 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p90) },
    Metric { name: "TTFT p99 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p99) },
    Metric { name: "TPOT p50 ms", better: Better::Lower, digits: 2, get: |r| r.latency.tpot_ms.map(|d| d.p50) },
    Metric { name: "TPOT p90 ms", better: Better::Lower, digits: 2, get: |r| r.latency.tpot_ms.map(|d| d.p90) },
    Metric { name: "ITL p99 ms", better: Better::Lower, digits: 2, get: |r| r.latency.itl_ms.map(|d| d.p99) },
    Metric { name: "E2E p50 ms", better: Better::Lower, digits: 1, get: |r| r.latency.e2e_ms.map(|d| d.p50) },
    Metric {
        name: "all answers in p50 ms",
        better: Better::Lower,
        digits: 1,
        get: |r| r.latency.all_answers_ms.map(|d| d.p50),
    },
    Metric { name: "E2E p99 ms", better: Better::Lower, digits: 1, get: |r| r.latency.e2e_ms.map(|d| d.p99) },
    Metric { name: "prefix-cache hit %", better: Better::Higher, digits: 1, get: |r| r.tokens.prefix_cache_hit_pct },
    Metric {
        name: "valid outputs % of finished",
        better: Better::Higher,
        digits: 1,
        get: |r| r.structured_outputs.and_then(|s| s.valid_pct_of_finished),
    },
    Metric { name: "valid outputs/s", better: Better::Higher, digits: 3, get: |r| r.valid_outputs_per_s() },
    Metric { name: "inputs/s (embeddings, rerank)", better: Better::Higher, digits: 1, get: |r| r.inputs_per_s() },
    Metric {
        name: "outputs cut by max_tokens",
        better: Better::Lower,
        digits: 0,
        get: |r| r.structured_outputs.map(|s| s.cut_by_length as f64),
    },
    Metric {
        name: "valid tool calls %",
        better: Better::Higher,
        digits: 1,
        get: |r| r.tool_calls.and_then(|c| c.valid_pct),
    },
    Metric { name: "tool calls", better: Better::Higher, digits: 0, get: |r| r.tool_calls.map(|c| c.calls as f64) },
    Metric {
        name: "repeated tool calls",
        better: Better::Lower,
        digits: 0,
        get: |r| r.tool_calls.map(|c| c.repeated as f64),
    },
    Metric {
        name: "calls with undeclared keys",
        better: Better::Lower,
        digits: 0,
        get: |r| r.tool_calls.map(|c| c.undeclared as f64),
    },
    Metric {
        name: "drafted tokens kept %",
        better: Better::Higher,
        digits: 1,
        get: |r| r.speculation.and_then(|s| s.acceptance_pct),
    },
    Metric {
        name: "tokens a draft",
        better: Better::Higher,
        digits: 2,
        get: |r| r.speculation.and_then(|s| s.mean_accepted_length),
    },
    Metric {
        name: "TTFT p50 ms, tool rounds 2+",
        better: Better::Lower,
        digits: 1,
        get: |r| r.tool_calls.and_then(|c| c.ttft_p50_later_rounds_ms),
    },
];

/// One metric of one level, across the runs.
struct Row {
    name: String,
    better: Better,
    digits: usize,
    values: Vec<Option<f64>>,
}

impl Row {
    fn value(&self, i: usize) -> String {
        self.values[i].map_or_else(|| "n/a".into(), |v| format!("{v:.prec$}", prec = self.digits))
    }

    /// Run `i`'s ratio to the baseline.
    fn ratio(&self, i: usize) -> (String, &'static str) {
        ratio(self.values[0], self.values[i], self.better)
    }
}

/// Level `l`'s rows: every metric, then TTFT p50 per turn index (sessions).
fn rows(runs: &[Run], l: usize) -> Vec<Row> {
    let mut rows: Vec<Row> = METRICS
        .iter()
        .map(|m| Row {
            name: m.name.to_string(),
            better: m.better,
            digits: m.digits,
            values: runs.iter().map(|run| (m.get)(&run.levels[l])).collect(),
        })
        .collect();
    let turns = runs[0].levels[l].per_turn.as_deref().unwrap_or_default();
    for turn in turns.iter().map(|t| t.turn) {
        let p50 =
            |level: &BenchResult| level.per_turn.as_deref()?.iter().find(|t| t.turn == turn)?.ttft_ms.map(|d| d.p50);
        let values = runs.iter().map(|run| p50(&run.levels[l])).collect();
        rows.push(Row { name: format!("turn {turn} TTFT p50 ms"), better: Better::Lower, digits: 1, values });
    }
    rows
}

/// The sweep's sustainable rate per run, as a row (rate sweeps only).
fn sustainable_row(runs: &[Run]) -> Option<Row> {
    runs.iter().all(is_rate_sweep).then(|| Row {
        name: "sustainable req/s".into(),
        better: Better::Higher,
        digits: 3,
        values: runs.iter().map(|run| sustainable_rate(&run.levels)).collect(),
    })
}

/// Ratios within this of 1 are called even: these machines are noisier than that anyway.
const EVEN: f64 = 0.05;

/// `b / a` as text and whether it is better, worse or even for this metric.
fn ratio(a: Option<f64>, b: Option<f64>, better: Better) -> (String, &'static str) {
    let (Some(a), Some(b)) = (a, b) else { return ("n/a".into(), "") };
    if a == 0.0 && b == 0.0 {
        return ("=".into(), "");
    }
    if a == 0.0 {
        let class = match better {
            Better::Higher => "better",
            Better::Lower => "worse",
            Better::Neither => "",
        };
        return ("from 0".into(), class);
    }
    let r = b / a;
    let class = match better {
        _ if (r - 1.0).abs() < EVEN => "",
        Better::Higher if r > 1.0 => "better",
        Better::Lower if r < 1.0 => "better",
        Better::Neither => "",
        _ => "worse",
    };
    (format!("{r:.2}x"), class)
}

fn direction(better: Better) -> &'static str {
    match better {
        Better::Higher => "higher",
        Better::Lower => "lower",
        Better::Neither => "",
    }
}

/// Levels compared: the first run's, up to the shortest run (forced comparisons may differ).
fn level_count(runs: &[Run]) -> usize {
    runs.iter().map(|r| r.levels.len()).min().unwrap_or(0)
}

/// The sections every format shows: the sweep's sustainable rate (rate sweeps), then
/// each level's rows.
fn sections(runs: &[Run]) -> Vec<(String, Vec<Row>)> {
    let mut sections = Vec::new();
    if let Some(row) = sustainable_row(runs) {
        let title = format!("the sweep (>= {} % SLO attainment)", crate::results::compare::SUSTAINED_ATTAINMENT_PCT);
        sections.push((title, vec![row]));
    }
    for l in 0..level_count(runs) {
        sections.push((level_name(&runs[0].levels[l]), rows(runs, l)));
    }
    sections
}

/// A row's cells after its name: the direction, each run's value, each ratio to the baseline.
fn cells(row: &Row, runs: usize) -> Vec<String> {
    let mut cells = vec![direction(row.better).to_string()];
    cells.extend((0..runs).map(|i| row.value(i)));
    cells.extend((1..runs).map(|i| {
        let (text, class) = row.ratio(i);
        format!("{text} {class}").trim_end().to_string()
    }));
    cells
}

/// The column names after "metric": each run's label, then each ratio's.
fn headers(runs: &[Run], ratio: impl Fn(&str, &str) -> String) -> Vec<String> {
    let mut headers: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    headers.extend(runs[1..].iter().map(|r| ratio(&r.label, &runs[0].label)));
    headers
}

/// The terminal table.
pub fn text(runs: &[Run], differences: &[String]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        return out;
    }
    for (i, run) in runs.iter().enumerate() {
        let tag = if i == 0 { "A, baseline" } else { "" };
        let _ = writeln!(out, "{:<14} {} ({}) {tag}", run.label, run.path.display(), run.levels[0].url);
    }
    if !differences.is_empty() {
        let _ = writeln!(out, "WORKLOADS DIFFER (--force):\n  {}", differences.join("\n  "));
    }
    // Values 13 wide, ratios 18.
    let width = |i: usize| if i < runs.len() { 13 } else { 18 };
    let mut header = format!("  {:<26} {:>7}", "metric", "better");
    for (i, name) in headers(runs, |a, b| format!("{a}/{b}")).iter().enumerate() {
        let _ = write!(header, " {:>w$}", clip(name, width(i)), w = width(i));
    }
    for (title, rows) in sections(runs) {
        let _ = writeln!(out, "\n== {title} ==\n{header}");
        for row in &rows {
            let cells = cells(row, runs.len());
            let _ = write!(out, "  {:<26} {:>7}", row.name, cells[0]);
            for (i, cell) in cells[1..].iter().enumerate() {
                let _ = write!(out, " {cell:>w$}", w = width(i));
            }
            out.push('\n');
        }
    }
    out
}

/// Markdown tables, for docs: the sweep's sustainable rate, then one table per level.
pub fn markdown(runs: &[Run], differences: &[String]) -> String {
    let mut out = String::new();
    if runs.is_empty() {
        return out;
    }
    if !differences.is_empty() {
        let _ = writeln!(out, "Workloads differ (compared with --force): {}\n", differences.join("; "));
    }
    let headers = headers(runs, |a, b| format!("{a} / {b}"));
    let header = format!("| metric | better | {} |", headers.join(" | "));
    let rule = format!("| --- | --- |{}", " ---: |".repeat(headers.len()));
    for (title, rows) in sections(runs) {
        let _ = writeln!(out, "**{title}**\n\n{header}\n{rule}");
        for row in &rows {
            let _ = writeln!(out, "| {} | {} |", row.name, cells(row, runs.len()).join(" | "));
        }
        out.push('\n');
    }
    out
}

/// Every figure and ratio, for scripts.
pub fn to_json(runs: &[Run], differences: &[String]) -> Value {
    let Some(base) = runs.first() else { return json!({}) };
    let row_json = |row: &Row| {
        let values: serde_json::Map<String, Value> =
            runs.iter().zip(&row.values).map(|(run, v)| (run.label.clone(), json!(v))).collect();
        let ratios: serde_json::Map<String, Value> = runs[1..]
            .iter()
            .zip(&row.values[1..])
            .map(|(run, v)| {
                let ratio = match (row.values[0], v) {
                    (Some(a), Some(b)) if a != 0.0 => json!(b / a),
                    _ => Value::Null,
                };
                (format!("{}/{}", run.label, base.label), ratio)
            })
            .collect();
        json!({"metric": row.name, "better": direction(row.better), "values": values, "ratios": ratios})
    };
    let levels: Vec<Value> = (0..level_count(runs))
        .map(|l| json!({"level": level_name(&base.levels[l]), "metrics": rows(runs, l).iter().map(row_json).collect::<Vec<_>>()}))
        .collect();
    json!({
        "runs": runs.iter().map(|r| json!({"label": r.label, "path": r.path, "url": r.levels[0].url})).collect::<Vec<_>>(),
        "baseline": base.label,
        "differences": differences,
        "sustained_attainment_pct": crate::results::compare::SUSTAINED_ATTAINMENT_PCT,
        "sustainable_rate_rps": sustainable_row(runs).map(|row| row_json(&row)),
        "levels": levels,
    })
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// The HTML page: runs, workload check, sweep curves, then per level a ratio table and
/// overlaid TTFT and TPOT CDFs.
pub fn html(runs: &[Run], differences: &[String]) -> String {
    let mut body = String::new();
    let Some(base) = runs.first() else { return page("rillm bench compare", "", "<p>No runs.</p>") };
    body.push_str("<h2>Runs</h2>");
    let rows: Vec<(&str, Vec<Cell>)> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let cells = vec![
                Cell::plain(if i == 0 { format!("{} (A, baseline)", run.label) } else { run.label.clone() }),
                Cell::plain(subtitle(&run.levels[0], run.levels.len())),
                Cell::plain(run.path.display().to_string()),
            ];
            ("", cells)
        })
        .collect();
    table(&mut body, &["run", "server", "file"], &rows);
    if differences.is_empty() {
        body.push_str("<p>Same workload in every run: inputs (by hash), lengths, seed, load levels and SLOs.</p>");
    } else {
        warning(&mut body, "The workloads differ: compared only because --force was given.", &differences.join(". "));
    }
    let levels = level_count(runs);
    if levels > 1 {
        body.push_str("<h2>Load sweep</h2><div class=\"charts\">");
        let sweeps: Vec<(&str, &[BenchResult])> =
            runs.iter().map(|r| (r.label.as_str(), &r.levels[..levels])).collect();
        for chart in sweep_charts(&sweeps) {
            body.push_str(&chart.render());
        }
        body.push_str("</div>");
        if let Some(row) = sustainable_row(runs) {
            body.push_str("<div class=\"cards\">");
            for (i, run) in runs.iter().enumerate() {
                let label = format!(
                    "{}: sustainable req/s (≥ {} % SLO attainment)",
                    run.label,
                    crate::results::compare::SUSTAINED_ATTAINMENT_PCT
                );
                let ratio = if i == 0 { String::new() } else { format!(" ({})", row.ratio(i).0) };
                card(&mut body, &label, &format!("{}{ratio}", row.value(i)), false);
            }
            body.push_str("</div>");
        }
    }
    for l in 0..levels {
        let _ = write!(body, "<h2>{}</h2>", escape(&level_name(&base.levels[l])));
        level_cards(&mut body, runs, l);
        level_table(&mut body, runs, l);
        body.push_str("<div class=\"charts\">");
        for chart in level_charts(runs, l) {
            body.push_str(&chart.render());
        }
        body.push_str("</div>");
    }
    body.push_str("<h2>Each run's caveats and context</h2>");
    for run in runs {
        let _ = write!(body, "<h3>{}</h3>", escape(&run.label));
        for (l, level) in run.levels.iter().enumerate() {
            warning(&mut body, &format!("{}: limits", level_name(level)), &level.limits);
            if l == 0 {
                json_details(&mut body, "Run context", &level.run_context.to_value());
            }
        }
    }
    let labels: Vec<&str> = runs.iter().map(|r| r.label.as_str()).collect();
    page("rillm bench compare", &format!("{} — ratios to {}", labels.join(" vs "), base.label), &body)
}

/// The headline ratios of each run to the baseline, as cards.
fn level_cards(body: &mut String, runs: &[Run], l: usize) {
    let base = &runs[0].levels[l];
    body.push_str("<div class=\"cards\">");
    for run in &runs[1..] {
        for name in ["goodput req/s", "TTFT p50 ms", "TPOT p50 ms", "output tok/s"] {
            let Some(m) = METRICS.iter().find(|m| m.name == name) else { continue };
            let (text, class) = ratio((m.get)(base), (m.get)(&run.levels[l]), m.better);
            let label = format!("{name}: {} / {}", run.label, runs[0].label);
            card(
                body,
                &label,
                &format!("{text} {class}").replace("better", "↑").replace("worse", "↓"),
                class == "worse",
            );
        }
    }
    body.push_str("</div>");
}

fn level_table(body: &mut String, runs: &[Run], l: usize) {
    let columns = headers(runs, |a, b| format!("{a} / {b}"));
    let mut header: Vec<&str> = vec!["metric", "better"];
    header.extend(columns.iter().map(String::as_str));
    let rows: Vec<(&str, Vec<Cell>)> = rows(runs, l)
        .iter()
        .map(|row| {
            let mut cells = vec![Cell::plain(row.name.clone()), Cell::plain(direction(row.better))];
            cells.extend((0..runs.len()).map(|i| Cell::plain(row.value(i))));
            for i in 1..runs.len() {
                let (text, class) = row.ratio(i);
                cells.push(Cell { text, class });
            }
            ("", cells)
        })
        .collect();
    table(body, &header, &rows);
}

fn level_charts(runs: &[Run], l: usize) -> Vec<Chart> {
    let slo = runs[0].levels[l].slos.ttft_ms;
    let mut ttft = Chart::new("TTFT CDF", "TTFT (ms)", "fraction of completed requests");
    let mut tpot = Chart::new("TPOT CDF", "TPOT (ms)", "fraction of completed requests");
    for chart in [&mut ttft, &mut tpot] {
        chart.y_range = Some((0.0, 1.0));
        chart.log_x = true;
    }
    ttft.x_guides.push(Guide::new(slo, "SLO"));
    for (i, run) in runs.iter().enumerate() {
        ttft.series.push(Series::cdf(run.label.clone(), i, ttft_samples(&run.levels[l])));
        tpot.series.push(Series::cdf(run.label.clone(), i, tpot_samples(&run.levels[l])));
    }
    vec![ttft, tpot]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_mark_the_better_direction_and_call_small_changes_even() {
        assert_eq!(ratio(Some(2.0), Some(3.0), Better::Higher), ("1.50x".into(), "better"));
        assert_eq!(ratio(Some(2.0), Some(3.0), Better::Lower), ("1.50x".into(), "worse"));
        assert_eq!(ratio(Some(100.0), Some(50.0), Better::Lower), ("0.50x".into(), "better"));
        assert_eq!(ratio(Some(100.0), Some(103.0), Better::Lower), ("1.03x".into(), ""));
        assert_eq!(ratio(Some(0.0), Some(4.0), Better::Lower), ("from 0".into(), "worse"));
        assert_eq!(ratio(Some(0.0), Some(0.0), Better::Lower), ("=".into(), ""));
        assert_eq!(ratio(None, Some(1.0), Better::Higher), ("n/a".into(), ""));
        assert_eq!(ratio(Some(10.0), Some(20.0), Better::Neither), ("2.00x".into(), ""));
    }
}
