//! The widening probe's verdicts (`llama::probe_widening`: whether a short prefill behind
//! cached tokens is cheaper widened, on this CPU), remembered per model, thread count and
//! CPU: for this process, and in a file under the measurements folder
//! (`EngineConfig::inherit`) so that a later process — a model loaded on demand, a server
//! restarted — starts without the ~3 s probe. The same model on the same CPU threads gets
//! the same answer; a new model, CPU or thread count is probed once.

use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use crate::config::EngineConfig;
use crate::error::EngineError;

/// Bumped when the probe measures something else: older verdicts no longer apply.
const PROBE_VERSION: u32 = 1;

/// The file under the measurements folder: one `key<TAB>verdict` line per verdict.
const VERDICTS_FILE: &str = "widening-verdicts.tsv";

/// Verdicts found in this process, by key.
static IN_PROCESS: Mutex<Vec<(String, bool)>> = Mutex::new(Vec::new());

/// Whether to widen: a verdict remembered here or on disk, else `probe`'s (then kept).
/// `fingerprint`: the model file's (`model_fingerprint`), if it could be read.
pub(crate) fn widening_verdict(
    config: &EngineConfig,
    fingerprint: Option<&str>,
    probe: impl FnOnce() -> Result<bool, EngineError>,
) -> Result<bool, EngineError> {
    let key = verdict_key(config, fingerprint);
    let file = config.inherit.measurements_dir.as_deref().map(|dir| dir.join(VERDICTS_FILE));
    let in_process = || IN_PROCESS.lock().unwrap_or_else(PoisonError::into_inner);
    let known = in_process().iter().find(|(k, _)| *k == key).map(|(_, widen)| *widen);
    if let Some(widen) = known.or_else(|| file.as_deref().and_then(|f| read_verdict(f, &key))) {
        in_process().push((key, widen));
        return Ok(widen);
    }
    let widen = probe()?;
    if let Some(file) = file {
        if let Err(error) = append_verdict(&file, &key, widen) {
            tracing::warn!(%error, file = %file.display(), "could not keep the widening verdict on disk");
        }
    }
    in_process().push((key, widen));
    Ok(widen)
}

/// The model (by fingerprint: a copy of the file is the same model; by path where it has
/// none), the threads and the CPU.
fn verdict_key(config: &EngineConfig, fingerprint: Option<&str>) -> String {
    let model = fingerprint.map_or_else(|| format!("path:{}", config.model_path.display()), str::to_string);
    format!("v{PROBE_VERSION} {model} threads={} cpu={}", config.threads, cpu_name())
}

/// The CPU's model name (Linux), else the architecture.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, name)| name.trim().replace('\t', " "))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// The last verdict for `key` in `file`, if any.
fn read_verdict(file: &Path, key: &str) -> Option<bool> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(k, _)| *k == key)
        .filter_map(|(_, v)| v.parse().ok())
        .next_back()
}

fn append_verdict(file: &Path, key: &str, widen: bool) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut out = std::fs::OpenOptions::new().create(true).append(true).open(file)?;
    writeln!(out, "{key}\t{widen}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    use crate::runtime::model_fingerprint::model_fingerprint;

    /// The verdict for `config`'s model, by its fingerprint as a load reads it.
    fn verdict(config: &EngineConfig, probe: impl FnOnce() -> Result<bool, EngineError>) -> Result<bool, EngineError> {
        widening_verdict(config, model_fingerprint(&config.model_path).ok().as_deref(), probe)
    }

    fn counting_probe(probes: &Cell<u32>, verdict: bool) -> Result<bool, EngineError> {
        probes.set(probes.get() + 1);
        Ok(verdict)
    }

    #[test]
    fn the_probe_runs_once_per_model_and_thread_count() {
        let probes = Cell::new(0);
        let mut config = EngineConfig::new("/nonexistent/probe-once.gguf");
        config.threads = 2;
        assert!(verdict(&config, || counting_probe(&probes, true)).expect("probed"));
        // Started again: the first verdict stands, not probed again.
        assert!(verdict(&config, || counting_probe(&probes, false)).expect("remembered"));
        assert_eq!(probes.get(), 1);
        config.threads = 3;
        assert!(!verdict(&config, || counting_probe(&probes, false)).expect("probed"));
        assert_eq!(probes.get(), 2, "other threads, another probe");
        // A failed probe leaves no verdict behind.
        config.threads = 4;
        assert!(verdict(&config, || Err(EngineError::Backend("no context".into()))).is_err());
        assert!(verdict(&config, || counting_probe(&probes, true)).expect("probed"));
        assert_eq!(probes.get(), 3);
    }

    #[test]
    fn a_verdict_on_disk_spares_a_later_process_the_probe() {
        let dir = tempfile::tempdir().expect("temp dir");
        let model = dir.path().join("m.gguf");
        std::fs::write(&model, b"GGUF weights").expect("written");
        let mut config = EngineConfig::new(&model);
        config.threads = 7;
        config.inherit.measurements_dir = Some(dir.path().join("measured"));
        let probes = Cell::new(0);
        assert!(verdict(&config, || counting_probe(&probes, true)).expect("probed"));
        // What a new process would find: the file alone.
        let key = verdict_key(&config, model_fingerprint(&config.model_path).ok().as_deref());
        IN_PROCESS.lock().unwrap_or_else(PoisonError::into_inner).retain(|(k, _)| *k != key);
        let copy = dir.path().join("copy.gguf");
        std::fs::copy(&model, &copy).expect("copied");
        config.model_path = copy;
        assert!(verdict(&config, || counting_probe(&probes, false)).expect("read from disk"));
        assert_eq!(probes.get(), 1, "a copy of the model under another name is the same model");
        std::fs::write(&model, b"GGUF other weights").expect("rewritten");
        config.model_path = model;
        assert!(!verdict(&config, || counting_probe(&probes, false)).expect("probed"));
        assert_eq!(probes.get(), 2, "another file, another probe");
    }
}
