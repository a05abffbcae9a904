//! `rillm bench merge`: the shards of one run (`--shard I/N` on several machines) back into
//! one result. Every statistic is recomputed from the shards' per-request records, never by
//! averaging their summaries (percentiles do not average). Refuses files that are not the
//! shards of one run: another workload, a shard twice or missing, an index in two shards.

use std::collections::HashSet;
use std::path::PathBuf;

use crate::results::context::MergedContext;

use crate::results::compare::{self, CompareError, Run};
use crate::results::result::{self, BenchResult, RunFacts};
use crate::run::shard::Shard;

#[derive(clap::Args, Debug, Clone)]
pub struct MergeArgs {
    /// Result files of `rillm bench --shard I/N --output ...`, one per shard, any order.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Where to write the merged result.
    #[arg(long)]
    pub output: PathBuf,
    /// Also write the merged run's HTML report.
    #[arg(long)]
    pub report: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Load(#[from] CompareError),
    #[error("{0} is not a shard: it was run without --shard (or holds several load levels)")]
    NotAShard(String),
    #[error("the files are shards of different splits: {0}")]
    Counts(String),
    #[error("shard {index}/{count} is in both {a} and {b}")]
    Twice { index: usize, count: usize, a: String, b: String },
    #[error("shards missing from {count}: {missing:?} (every shard's file is needed for the whole run)")]
    Missing { count: usize, missing: Vec<usize> },
    #[error("these files are not shards of one run:\n  {}", .0.join("\n  "))]
    Mismatch(Vec<String>),
    #[error("request {index} is in two shards ({a} and {b}): they did not split one schedule")]
    Overlap { index: usize, a: String, b: String },
    #[error(transparent)]
    Write(#[from] crate::files::WriteError),
}

fn shard_of(run: &Run) -> Result<Shard, MergeError> {
    let not_a_shard = || MergeError::NotAShard(run.path.display().to_string());
    let [level] = run.levels.as_slice() else { return Err(not_a_shard()) };
    level.run_context.shard.map(|s| s.shard()).ok_or_else(not_a_shard)
}

/// The shards, checked and put in shard order.
fn check(mut runs: Vec<Run>) -> Result<Vec<(Shard, Run)>, MergeError> {
    let differences = compare::differences(&runs);
    if !differences.is_empty() {
        return Err(MergeError::Mismatch(differences));
    }
    let mut shards = Vec::with_capacity(runs.len());
    for run in runs.drain(..) {
        shards.push((shard_of(&run)?, run));
    }
    shards.sort_by_key(|(s, _)| s.index);
    let count = shards[0].0.count;
    if let Some((s, run)) = shards.iter().find(|(s, _)| s.count != count) {
        return Err(MergeError::Counts(format!("{} is {}/{}, the first {count} shards", run.label, s.index, s.count)));
    }
    for pair in shards.windows(2) {
        if pair[0].0.index == pair[1].0.index {
            let (a, b) = (pair[0].1.label.clone(), pair[1].1.label.clone());
            return Err(MergeError::Twice { index: pair[0].0.index, count, a, b });
        }
    }
    let present: HashSet<usize> = shards.iter().map(|(s, _)| s.index).collect();
    let missing: Vec<usize> = (0..count).filter(|i| !present.contains(i)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing { count, missing });
    }
    Ok(shards)
}

/// One result from the shards' records, on the clock of the shard that started first.
pub fn merge(runs: Vec<Run>) -> Result<BenchResult, MergeError> {
    let shards = check(runs)?;
    let started = |r: &BenchResult| r.run_context.started_unix_ms.unwrap_or(0);
    let base = shards.iter().map(|(_, run)| started(&run.levels[0])).min().unwrap_or(0);
    let mut records = Vec::new();
    let mut owner = std::collections::HashMap::new();
    for (_, run) in &shards {
        let level = &run.levels[0];
        let shift_ms = started(level).saturating_sub(base) as f64;
        for q in &level.requests {
            if let Some(a) = owner.insert(q.index, run.label.clone()) {
                return Err(MergeError::Overlap { index: q.index, a, b: run.label.clone() });
            }
            records.push(q.to_record(shift_ms));
        }
    }
    records.sort_by_key(|r| r.place.index);

    let first = &shards[0].1.levels[0];
    let levels = shards.iter().map(|(_, run)| &run.levels[0]);
    let spread_ms = levels.clone().map(started).max().unwrap_or(0) - base;
    let wall_s = levels.clone().map(|l| (started(l) - base) as f64 / 1000.0 + l.duration_s).fold(0.0, f64::max);
    // Shards run on their own machines: the client check is the busiest shard's.
    let busiest_cores = levels.clone().map(|l| l.client.cpu_cores_used).fold(0.0, f64::max);
    let cpu_s: f64 = levels.clone().map(|l| l.client.cpu_s).sum();
    let urls: HashSet<&str> = levels.clone().map(|l| l.url.as_str()).collect();
    let mut notes = first.workload_notes.clone();
    notes.push(format!(
        "Merged from {} shards of one schedule ({}); every figure is recomputed from their {} per-request records, on the clock of the shard that started first (the others' times shifted by their later start). The shards started within {spread_ms} ms of each other by their own clocks; offsets between machines' clocks are not measured (keep them NTP-synced). ITL per token comes only from events that carried one token each.",
        shards.len(),
        shards.iter().map(|(_, r)| r.label.as_str()).collect::<Vec<_>>().join(", "),
        records.len()
    ));
    if urls.len() > 1 {
        notes.push(format!("The shards targeted {} URLs.", urls.len()));
    }
    let mut run_context = first.run_context.clone();
    run_context.shard = None;
    run_context.started_unix_ms = Some(base);
    run_context.merged = Some(MergedContext {
        shards: shards.len(),
        files: shards.iter().map(|(_, r)| r.path.display().to_string()).collect(),
        start_spread_ms: spread_ms,
        late_ms: shards.iter().map(|(_, r)| r.levels[0].run_context.shard.and_then(|s| s.late_ms)).collect(),
    });
    let mut merged = result::build(RunFacts {
        url: first.url.clone(),
        urls: first.urls.clone(),
        protocol: first.protocol,
        load: first.load.clone(),
        slos: first.slos,
        records,
        wall_s,
        client_cpu_s: busiest_cores * wall_s,
        run_context,
        notes,
        sessions: first.sessions.map(|_| result::SessionCounts {
            cut_short: levels.clone().filter_map(|l| l.sessions).map(|s| s.cut_short).sum(),
            turns_not_sent: levels.clone().filter_map(|l| l.sessions).map(|s| s.turns_not_sent).sum(),
        }),
        // A prompt's repeats may fall to different shards: no whole groups to time.
        answers: result::AnswersPerPrompt::default(),
    });
    merged.client.cpu_s = cpu_s;
    Ok(merged)
}

/// Loads, merges, writes; returns the terminal summary.
pub fn run(args: &MergeArgs) -> Result<String, MergeError> {
    let runs = args.files.iter().map(|p| compare::load(p, None)).collect::<Result<Vec<_>, _>>()?;
    let merged = merge(runs)?;
    let output = crate::BenchOutput { levels: vec![merged] };
    output.write_files(Some(&args.output), args.report.as_deref())?;
    Ok(crate::report::summary(&output.levels))
}
