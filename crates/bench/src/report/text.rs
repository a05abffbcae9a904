//! Human-readable output: the summary table on stdout and a self-contained HTML report.

use std::fmt::Write;

use serde_json::{json, Value};

use crate::client::Status;
use crate::result::BenchResult;
use crate::stats::Distribution;

fn level_name(r: &BenchResult) -> String {
    match (r.load.requested_rate_rps, r.load.concurrency) {
        (Some(rate), _) => format!("{rate} req/s"),
        (_, Some(c)) => format!("concurrency {c}"),
        _ if r.load.mode == "trace" => "trace replay".into(),
        _ => "-".into(),
    }
}

/// Goodput against load, one row per level.
pub fn sweep_table(levels: &[BenchResult]) -> Value {
    Value::Array(
        levels
            .iter()
            .map(|r| {
                json!({
                    "level": level_name(r),
                    "requested_rate_rps": r.load.requested_rate_rps,
                    "concurrency": r.load.concurrency,
                    "achieved_rate_rps": r.achieved_rate_rps,
                    "throughput_rps": r.throughput_rps,
                    "goodput_rps": r.goodput_rps,
                    "slo_attainment_pct": r.slo_attainment_pct,
                    "rejected_429": r.rejected_429,
                    "ttft_p99_ms": r.latency.ttft_ms.map(|d| d.p99),
                })
            })
            .collect(),
    )
}

/// The knee: the highest load level at which at least 90 % of offered requests still met
/// every SLO, if one did.
pub fn knee(levels: &[BenchResult]) -> Option<usize> {
    levels.iter().rposition(|r| r.slo_attainment_pct >= 90.0)
}

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
            "  duration {:.2} s  achieved {:.2} req/s  throughput {:.2} req/s  output {} tok/s",
            r.duration_s,
            r.achieved_rate_rps,
            r.throughput_rps,
            r.output_tokens_per_s.map_or("n/a".into(), |t| format!("{t:.1}"))
        );
        let _ = writeln!(
            out,
            "  goodput {:.3} req/s (SLO attainment {:.1} %)  ttft_goodput {:.3} req/s",
            r.goodput_rps, r.slo_attainment_pct, r.ttft_goodput_rps
        );
        let _ = writeln!(out, "  {:<24} {:>9} {:>9} {:>9} {:>9} {:>9}", "ms", "mean", "p50", "p90", "p99", "max");
        let l = &r.latency;
        dist_row(&mut out, "TTFT", &l.ttft_ms);
        dist_row(&mut out, "TTFT from schedule", &l.ttft_from_schedule_ms);
        if l.time_to_first_answer_ms.is_some() {
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

const W: f64 = 560.0;
const H: f64 = 260.0;
const PAD: f64 = 40.0;

/// An SVG plot of point series; `step` joins points as a CDF staircase.
fn svg_plot(title: &str, x_label: &str, y_label: &str, series: &[(&str, Vec<(f64, f64)>)], lines: bool) -> String {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    let mut svg = format!("<h3>{title}</h3><svg width=\"{W}\" height=\"{H}\" xmlns=\"http://www.w3.org/2000/svg\" style=\"background:#fafafa\">");
    if all.is_empty() {
        svg.push_str("<text x=\"20\" y=\"30\">no data</text></svg>");
        return svg;
    }
    let xmax = all.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let ymax = all.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-9);
    let sx = |x: f64| PAD + x / xmax * (W - 2.0 * PAD);
    let sy = |y: f64| H - PAD - y / ymax * (H - 2.0 * PAD);
    let _ = write!(
        svg,
        "<line x1=\"{PAD}\" y1=\"{y0}\" x2=\"{x1}\" y2=\"{y0}\" stroke=\"#333\"/><line x1=\"{PAD}\" y1=\"{PAD}\" x2=\"{PAD}\" y2=\"{y0}\" stroke=\"#333\"/>\
         <text x=\"{xm}\" y=\"{yl}\" font-size=\"11\" text-anchor=\"middle\">{x_label} (max {xmax:.1})</text>\
         <text x=\"4\" y=\"{yt}\" font-size=\"11\">{y_label} (max {ymax:.2})</text>",
        y0 = H - PAD, x1 = W - PAD, xm = W / 2.0, yl = H - 8.0, yt = PAD - 10.0
    );
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"];
    for (i, (name, points)) in series.iter().enumerate() {
        let c = colors[i % colors.len()];
        if lines {
            let path: Vec<String> = points.iter().map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y))).collect();
            let _ = write!(
                svg,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
                path.join(" ")
            );
        } else {
            for &(x, y) in points {
                let _ = write!(svg, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{c}\"/>", sx(x), sy(y));
            }
        }
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"{c}\">{name}</text>",
            W - PAD - 120.0,
            PAD + 14.0 * i as f64
        );
    }
    svg.push_str("</svg>");
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

pub fn html(levels: &[BenchResult]) -> String {
    let mut body = String::new();
    let cdf: Vec<(String, Vec<(f64, f64)>)> = levels
        .iter()
        .map(|r| {
            let mut ttfts: Vec<f64> = r.requests.iter().filter_map(|q| q.ttft_ms).collect();
            ttfts.sort_by(f64::total_cmp);
            let n = ttfts.len() as f64;
            (level_name(r), ttfts.iter().enumerate().map(|(i, &t)| (t, (i + 1) as f64 / n)).collect())
        })
        .collect();
    let cdf_refs: Vec<(&str, Vec<(f64, f64)>)> = cdf.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    body.push_str(&svg_plot("TTFT CDF", "TTFT ms", "fraction", &cdf_refs, true));
    let over_time: Vec<(String, Vec<(f64, f64)>)> = levels
        .iter()
        .map(|r| {
            let pts = r
                .requests
                .iter()
                .filter(|q| q.status == Status::Completed)
                .map(|q| (q.sent_ms / 1000.0, q.e2e_ms))
                .collect();
            (level_name(r), pts)
        })
        .collect();
    let ot_refs: Vec<(&str, Vec<(f64, f64)>)> = over_time.iter().map(|(n, p)| (n.as_str(), p.clone())).collect();
    body.push_str(&svg_plot("End-to-end latency over time", "send time s", "e2e ms", &ot_refs, false));
    if levels.len() > 1 {
        let x = |r: &BenchResult| r.load.requested_rate_rps.or(r.load.concurrency.map(|c| c as f64)).unwrap_or(0.0);
        let goodput: Vec<(f64, f64)> = levels.iter().map(|r| (x(r), r.goodput_rps)).collect();
        let throughput: Vec<(f64, f64)> = levels.iter().map(|r| (x(r), r.throughput_rps)).collect();
        body.push_str(&svg_plot(
            "Goodput vs load",
            "load",
            "req/s",
            &[("goodput", goodput), ("throughput", throughput)],
            true,
        ));
        if let Some(k) = knee(levels) {
            let _ = write!(
                body,
                "<p>Knee: <b>{}</b> (highest load with ≥ 90 % SLO attainment).</p>",
                escape(&level_name(&levels[k]))
            );
        }
    }
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>rillm bench report</title>\
         <style>body{{font-family:sans-serif;max-width:900px;margin:2em auto}}pre{{background:#f4f4f4;padding:1em;overflow-x:auto}}</style></head>\
         <body><h1>rillm bench report</h1><pre>{}</pre>{body}</body></html>",
        escape(&summary(levels))
    )
}
