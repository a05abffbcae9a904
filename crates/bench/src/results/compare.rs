//! `rillm bench compare`: result files of the same workload, side by side. The files are
//! read back into the benchmark's own result types, so every figure shown is one the run
//! wrote; only ratios are computed here. Runs of different workloads are refused (unless
//! forced): a ratio between them would measure the workloads, not the servers.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::results::result::BenchResult;

#[derive(clap::Args, Debug, Clone)]
pub struct CompareArgs {
    /// Result files written by `rillm bench --output`; the first is the baseline (A) and
    /// every other is shown as a ratio to it.
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// A name per file, in order (default: the file's name without `.json`).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Also write the comparison as a self-contained HTML page with overlaid charts.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Compare even when the workloads differ (the differences are still listed).
    #[arg(long)]
    pub force: bool,
    /// How the comparison is printed: a terminal table, Markdown tables (for docs), or
    /// JSON (every figure and ratio, for scripts).
    #[arg(long, value_enum, default_value_t = CompareFormat::Text)]
    pub format: CompareFormat,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareFormat {
    Text,
    Markdown,
    Json,
}

/// The SLO attainment at which a rate counts as sustained: at least this share of the
/// offered requests met every SLO.
pub const SUSTAINED_ATTAINMENT_PCT: f64 = 90.0;

/// A sweep's sustainable rate: the highest requested rate at which at least
/// [`SUSTAINED_ATTAINMENT_PCT`] % of the offered requests met the SLOs. `None` when no level
/// did, or the levels are not rates (concurrency, a trace).
pub fn sustainable_rate(levels: &[BenchResult]) -> Option<f64> {
    levels
        .iter()
        .filter(|level| level.slo_attainment_pct >= SUSTAINED_ATTAINMENT_PCT)
        .filter_map(|level| level.load.requested_rate_rps)
        .max_by(f64::total_cmp)
}

/// Whether the runs are sweeps of rates, where a sustainable rate means something.
pub fn is_rate_sweep(run: &Run) -> bool {
    run.levels.len() > 1 && run.levels.iter().all(|l| l.load.requested_rate_rps.is_some())
}

#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path} is not a rillm bench result: {error}")]
    Parse { path: String, error: serde_json::Error },
    #[error("{path} holds no load level")]
    Empty { path: String },
    #[error("{0} labels for {1} files: give one --label per file, or none")]
    Labels(usize, usize),
    #[error("these runs measured different workloads, so their ratios would not compare the servers:\n  {}\n(--force compares them anyway)", .0.join("\n  "))]
    Mismatch(Vec<String>),
    #[error(transparent)]
    Write(#[from] crate::files::WriteError),
}

/// One result file.
pub struct Run {
    pub label: String,
    pub path: PathBuf,
    pub levels: Vec<BenchResult>,
}

/// Reads a result file: one level is a bare result, a sweep wraps them in `levels`.
pub fn load(path: &Path, label: Option<String>) -> Result<Run, CompareError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| CompareError::Read { path: name.clone(), error })?;
    let mut value: Value =
        serde_json::from_str(&text).map_err(|error| CompareError::Parse { path: name.clone(), error })?;
    let levels: Vec<BenchResult> = match value.get_mut("levels") {
        Some(levels) => serde_json::from_value(levels.take()),
        None => serde_json::from_value(value).map(|one| vec![one]),
    }
    .map_err(|error| CompareError::Parse { path: name.clone(), error })?;
    if levels.is_empty() {
        return Err(CompareError::Empty { path: name });
    }
    let label = label.unwrap_or_else(|| {
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        stem.unwrap_or_else(|| name.clone())
    });
    Ok(Run { label, path: path.to_path_buf(), levels })
}

/// What makes two runs the same experiment: the workload (inputs by hash, lengths, seed,
/// amount), each level's load, and the SLOs that decide goodput. Paths are left out: the
/// same file may sit elsewhere on another machine.
fn fingerprint(run: &Run) -> Vec<(String, Value)> {
    let first = &run.levels[0];
    let mut facts = Vec::new();
    if let Value::Object(workload) = &first.run_context.workload {
        for (key, value) in workload.iter().filter(|(k, _)| k.as_str() != "source") {
            facts.push((format!("workload.{key}"), comparable(key, value)));
        }
    }
    facts.push(("load levels".into(), Value::from(run.levels.len())));
    for (i, level) in run.levels.iter().enumerate() {
        facts.push((format!("level {} load", i + 1), serde_json::to_value(&level.load).unwrap_or_default()));
    }
    facts.push(("SLOs".into(), serde_json::to_value(first.slos).unwrap_or_default()));
    facts
}

/// How prompt lengths were counted says which tokenizer ("exact: the target's
/// http://host/tokenize (vLLM shape)"): two servers of one model count exactly with their
/// own, and that is the same workload. Exact against approximate is not.
fn comparable(key: &str, value: &Value) -> Value {
    match (key, value.as_str()) {
        ("prompts", Some(text)) => Value::from(text.split(':').next().unwrap_or(text)),
        _ => value.clone(),
    }
}

/// Every way in which each run's workload differs from the first's; empty when they match.
pub fn differences(runs: &[Run]) -> Vec<String> {
    let Some(base) = runs.first() else { return Vec::new() };
    let base_facts = fingerprint(base);
    let mut out = Vec::new();
    for run in &runs[1..] {
        let facts = fingerprint(run);
        let keys = base_facts.iter().map(|f| &f.0).chain(facts.iter().map(|f| &f.0));
        let mut seen = std::collections::BTreeSet::new();
        for key in keys.filter(|k| seen.insert(k.as_str())) {
            let get = |facts: &[(String, Value)]| facts.iter().find(|f| &f.0 == key).map(|f| f.1.clone());
            let (a, b) = (get(&base_facts), get(&facts));
            if a != b {
                let show = |v: Option<Value>| v.map_or_else(|| "absent".to_string(), |v| v.to_string());
                out.push(format!("{key}: {} has {}, {} has {}", base.label, show(a), run.label, show(b)));
            }
        }
    }
    out
}

/// Loads the files and checks that they measured the same workload; returns the runs and
/// the differences (empty unless `--force` let differing runs through).
pub fn load_all(args: &CompareArgs) -> Result<(Vec<Run>, Vec<String>), CompareError> {
    if !args.labels.is_empty() && args.labels.len() != args.files.len() {
        return Err(CompareError::Labels(args.labels.len(), args.files.len()));
    }
    let runs = args
        .files
        .iter()
        .enumerate()
        .map(|(i, path)| load(path, args.labels.get(i).cloned()))
        .collect::<Result<Vec<Run>, _>>()?;
    let differences = differences(&runs);
    if !differences.is_empty() && !args.force {
        return Err(CompareError::Mismatch(differences));
    }
    Ok((runs, differences))
}

/// The objectives an earlier run's result file was judged by (its first level's), with an
/// end-to-end objective given now taking precedence (`--slos-from`).
pub fn earlier_slos(path: &Path, e2e_ms: Option<f64>) -> Result<crate::results::slo::Slos, String> {
    let earlier = load(path, None).map_err(|e| e.to_string())?;
    let first =
        earlier.levels.first().ok_or_else(|| format!("--slos-from {}: the file has no levels", path.display()))?;
    Ok(crate::results::slo::Slos { e2e_ms: e2e_ms.or(first.slos.e2e_ms), ..first.slos })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::result::tests::{completed, level};

    /// A level at `rate` where `met` of `offered` requests have a 100 ms TTFT and the rest 900 ms.
    fn at(rate: f64, met: usize, offered: usize) -> BenchResult {
        let records = (0..offered)
            .map(|i| completed(i as f64 * 100.0, 0.0, if i < met { 100.0 } else { 900.0 }, 1000.0, 10))
            .collect();
        level(rate, 500.0, records)
    }

    #[test]
    fn the_sustainable_rate_is_the_highest_rate_at_ninety_percent_attainment() {
        let sweep = || vec![at(1.0, 10, 10), at(2.0, 9, 10), at(4.0, 8, 10), at(8.0, 10, 10)];
        let levels = sweep();
        assert_eq!(levels.iter().map(|l| l.slo_attainment_pct).collect::<Vec<_>>(), [100.0, 90.0, 80.0, 100.0]);
        // The highest rate that met it, even past one that did not (the sweep says so level by level).
        assert_eq!(sustainable_rate(&levels), Some(8.0));
        assert_eq!(sustainable_rate(&levels[..3]), Some(2.0));
        assert_eq!(sustainable_rate(&[at(1.0, 8, 10)]), None, "no rate met it");
        let run = Run { label: "a".into(), path: "a.json".into(), levels: sweep() };
        assert!(is_rate_sweep(&run));
        assert!(!is_rate_sweep(&Run { levels: vec![at(1.0, 10, 10)], ..run }), "one level is not a sweep");
    }
}
