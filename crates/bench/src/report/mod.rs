//! What a run looks like to a person: the terminal summary (`text`), the HTML report
//! (`html`) with its charts (`charts`) on a plain page (`page`), and the side-by-side view
//! of `rillm bench compare` (`compare`).

mod charts;
pub mod compare;
mod html;
mod page;
mod text;

use serde_json::{json, Value};

pub use html::html;
pub use text::summary;

use crate::results::result::{BenchResult, LoadMode};

pub fn level_name(r: &BenchResult) -> String {
    match (r.load.requested_rate_rps, r.load.concurrency) {
        (Some(rate), _) => format!("{rate} req/s"),
        (_, Some(c)) => format!("concurrency {c}"),
        _ if r.load.mode == LoadMode::Trace => "trace replay".into(),
        _ => "-".into(),
    }
}

/// Where a level sits on a sweep's x axis, and the axis's name.
fn load_axis(r: &BenchResult) -> Option<(f64, &'static str)> {
    match (r.load.requested_rate_rps, r.load.concurrency) {
        (Some(rate), _) => Some((rate, "offered load (req/s)")),
        (_, Some(c)) => Some((c as f64, "concurrency (requests in flight)")),
        _ => None,
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
