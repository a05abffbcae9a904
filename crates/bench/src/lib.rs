//! `rillm bench`: live HTTP load against any LLM server, measured honestly.
//!
//! The benchmark knows nothing of rillm's engine: it speaks HTTP and SSE to a URL. Arrivals
//! are open-loop (a schedule that never waits for responses) or closed-loop workers; every
//! offered request is disclosed, whether it completed, failed, was rejected with 429 or was
//! shed by the client; latencies are reported from the actual send and from the schedule.
//!
//! The modules follow the data: `workload` (datasets, traces, synthetic prompts and
//! sessions, tools, schemas → request specs and their bodies) → `run` (client, pacing,
//! sessions, shards, endpoints, server metrics) → `results` (records → figures, checks
//! summed, limits, context, result files read back) → `report` (text, HTML, compare). Each
//! stage imports only the ones before it. Beside them, the vocabulary every stage speaks:
//! `protocol` (which API a URL serves, its stream framing, tool-call pieces), `checks`
//! (what checking one reply found), `stats` (percentiles), `files` (writing results,
//! hashing inputs); and `args`/`validate` (the command line, whose option types are the
//! stages' own, so `workload::build` reading it is the one import that runs back), `error`,
//! `pipeline` (a run as those stages), `mock` (a scripted server for tests), `merge`
//! (shards into one result).

pub mod args;
pub mod checks;
mod error;
mod files;
pub mod merge;
pub mod mock;
mod pipeline;
pub mod protocol;
pub mod report;
pub mod results;
pub mod run;
pub mod stats;
mod validate;
pub mod workload;

use serde_json::{json, Value};

pub use args::BenchArgs;
pub use error::BenchError;
pub use files::{write_file, WriteError};
pub use pipeline::DEFAULT_REQUESTS;
use results::result::BenchResult;

/// What a run produced: one result per load level.
pub struct BenchOutput {
    pub levels: Vec<BenchResult>,
}

impl BenchOutput {
    /// The file written by `--output`: a single level is the prototype's schema (a
    /// superset); a sweep wraps one such result per level with a goodput-vs-load table.
    pub fn to_json(&self) -> Value {
        match self.levels.as_slice() {
            [one] => serde_json::to_value(one).unwrap_or(Value::Null),
            levels => json!({
                "sweep": report::sweep_table(levels),
                "knee_level": report::knee(levels),
                "levels": levels,
            }),
        }
    }

    /// The result file (`--output`) and the HTML report (`--report`), where asked for.
    pub fn write_files(
        &self,
        result: Option<&std::path::Path>,
        report: Option<&std::path::Path>,
    ) -> Result<(), WriteError> {
        if let Some(path) = result {
            write_file(path, &serde_json::to_string_pretty(&self.to_json()).unwrap_or_default())?;
        }
        if let Some(path) = report {
            write_file(path, &report::html(&self.levels))?;
        }
        Ok(())
    }
}

/// Runs the benchmark's stages (`pipeline`): arguments → workload → warm-up and SLOs →
/// levels run and summed → result and report files.
pub async fn run(args: BenchArgs, command_line: String) -> Result<BenchOutput, BenchError> {
    let setup = pipeline::setup(&args).await?;
    let prepared = pipeline::prepare(&args, &setup).await?;
    let slos = pipeline::before_levels(&args, &setup, &prepared).await?;
    let levels = pipeline::run_levels(&args, &setup, &prepared, slos, &command_line).await;
    let output = BenchOutput { levels };
    output.write_files(args.output.as_deref(), args.report.as_deref())?;
    Ok(output)
}
