//! The comparison of runs: per level, each run's figures and its ratio to the first run,
//! with the better direction marked; overlaid CDFs and sweep curves in the HTML page.

use std::fmt::Write;

use super::charts::{Chart, Guide, Series};
use super::html::{subtitle, sweep_charts, tpot_samples, ttft_samples};
use super::level_name;
use super::page::{card, escape, json_details, page, table, warning, Cell};
use crate::compare::Run;
use crate::result::BenchResult;

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
    Metric { name: "TTFT p50 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p50) },
    Metric { name: "TTFT p90 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p90) },
    Metric { name: "TTFT p99 ms", better: Better::Lower, digits: 1, get: |r| r.latency.ttft_ms.map(|d| d.p99) },
    Metric { name: "TPOT p50 ms", better: Better::Lower, digits: 2, get: |r| r.latency.tpot_ms.map(|d| d.p50) },
    Metric { name: "TPOT p90 ms", better: Better::Lower, digits: 2, get: |r| r.latency.tpot_ms.map(|d| d.p90) },
    Metric { name: "ITL p99 ms", better: Better::Lower, digits: 2, get: |r| r.latency.itl_ms.map(|d| d.p99) },
    Metric { name: "E2E p50 ms", better: Better::Lower, digits: 1, get: |r| r.latency.e2e_ms.map(|d| d.p50) },
    Metric { name: "E2E p99 ms", better: Better::Lower, digits: 1, get: |r| r.latency.e2e_ms.map(|d| d.p99) },
    Metric { name: "prefix-cache hit %", better: Better::Higher, digits: 1, get: |r| r.tokens.prefix_cache_hit_pct },
    Metric {
        name: "valid outputs % of finished",
        better: Better::Higher,
        digits: 1,
        get: |r| r.structured_outputs.and_then(|s| s.valid_pct_of_finished),
    },
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
        name: "TTFT p50 ms, tool rounds 2+",
        better: Better::Lower,
        digits: 1,
        get: |r| r.tool_calls.and_then(|c| c.ttft_p50_later_rounds_ms),
    },
];

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

fn value(m: &Metric, r: &BenchResult) -> String {
    (m.get)(r).map_or_else(|| "n/a".into(), |v| format!("{v:.prec$}", prec = m.digits))
}

fn direction(m: &Metric) -> &'static str {
    match m.better {
        Better::Higher => "higher",
        Better::Lower => "lower",
        Better::Neither => "",
    }
}

/// Levels compared: the first run's, up to the shortest run (forced comparisons may differ).
fn level_count(runs: &[Run]) -> usize {
    runs.iter().map(|r| r.levels.len()).min().unwrap_or(0)
}

/// The terminal table.
pub fn text(runs: &[Run], differences: &[String]) -> String {
    let mut out = String::new();
    let Some(base) = runs.first() else { return out };
    for (i, run) in runs.iter().enumerate() {
        let tag = if i == 0 { "A, baseline" } else { "" };
        let _ = writeln!(out, "{:<14} {} ({}) {tag}", run.label, run.path.display(), run.levels[0].url);
    }
    if !differences.is_empty() {
        let _ = writeln!(out, "WORKLOADS DIFFER (--force):\n  {}", differences.join("\n  "));
    }
    for l in 0..level_count(runs) {
        let _ = writeln!(out, "\n== {} ==", level_name(&base.levels[l]));
        let mut header = format!("  {:<20} {:>7}", "metric", "better");
        for run in runs {
            let _ = write!(header, " {:>13}", clip(&run.label, 13));
        }
        for run in &runs[1..] {
            let _ = write!(header, " {:>18}", clip(&format!("{}/{}", run.label, base.label), 18));
        }
        let _ = writeln!(out, "{header}");
        for m in METRICS {
            let _ = write!(out, "  {:<20} {:>7}", m.name, direction(m));
            for run in runs {
                let _ = write!(out, " {:>13}", value(m, &run.levels[l]));
            }
            for run in &runs[1..] {
                let (text, class) = ratio((m.get)(&base.levels[l]), (m.get)(&run.levels[l]), m.better);
                let _ = write!(out, " {:>18}", format!("{text} {class}").trim_end());
            }
            out.push('\n');
        }
    }
    out
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
                json_details(&mut body, "Run context", &level.run_context);
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
    let base = &runs[0].levels[l];
    let ratio_headers: Vec<String> = runs[1..].iter().map(|r| format!("{} / {}", r.label, runs[0].label)).collect();
    let mut header: Vec<&str> = vec!["metric", "better"];
    header.extend(runs.iter().map(|r| r.label.as_str()));
    header.extend(ratio_headers.iter().map(String::as_str));
    let rows: Vec<(&str, Vec<Cell>)> = METRICS
        .iter()
        .map(|m| {
            let mut cells = vec![Cell::plain(m.name), Cell::plain(direction(m))];
            cells.extend(runs.iter().map(|run| Cell::plain(value(m, &run.levels[l]))));
            for run in &runs[1..] {
                let (text, class) = ratio((m.get)(base), (m.get)(&run.levels[l]), m.better);
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
