//! What every result says about how it was made: the model, where the server ran, the
//! exact command, hashes of the binary and the inputs, the workload sent (by kind), and for
//! shards their place in the run. `bench compare` and `bench merge` read it back.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::args::BenchArgs;
use crate::run::shard::Shard;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunContext {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub revision: String,
    #[serde(default)]
    pub license: String,
    #[serde(default)]
    pub device: String,
    #[serde(default)]
    pub command: String,
    /// The rillm binary's and every input file's sha256, by path.
    #[serde(default)]
    pub source_sha256: BTreeMap<String, String>,
    #[serde(default)]
    pub scope: String,
    /// What was sent: kind, source and hash, scale factors, seed, amount per level. Its
    /// fields depend on the workload kind (each builder in `workload` writes its own).
    #[serde(default)]
    pub workload: Value,
    /// When this level started, by this machine's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
    /// A shard's place in a sharded run (`--shard`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardContext>,
    /// A result merged from shards (`bench merge`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merged: Option<MergedContext>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardContext {
    pub index: usize,
    pub count: usize,
    pub start_at_unix_ms: Option<u64>,
    /// How late this shard's clock let it start after `start_at_unix_ms`.
    pub late_ms: Option<u64>,
}

impl ShardContext {
    pub fn shard(&self) -> Shard {
        Shard { index: self.index, count: self.count }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedContext {
    pub shards: usize,
    pub files: Vec<String>,
    /// Between the first and the last shard's start, by their own clocks.
    pub start_spread_ms: u64,
    pub late_ms: Vec<Option<u64>>,
}

impl RunContext {
    /// The context of a run of `args` against `model`, started by `command`.
    pub fn new(args: &BenchArgs, model: Option<&str>, command: &str) -> Self {
        let mut hashes = BTreeMap::new();
        if let Some(exe) = std::env::current_exe().ok().and_then(|p| crate::files::sha256_file(&p).map(|h| (p, h))) {
            hashes.insert(format!("rillm:{}", exe.0.display()), exe.1);
        }
        for input in [&args.dataset, &args.trace, &args.tokenizer].into_iter().flatten() {
            if let Some(h) = crate::files::sha256_file(input) {
                hashes.insert(input.display().to_string(), h);
            }
        }
        let host = crate::protocol::origin(args.url.first().map_or("", String::as_str));
        let loopback =
            ["127.", "localhost", "[::1]"].iter().any(|h| host.split("://").nth(1).is_some_and(|x| x.starts_with(h)));
        let device = args.device.clone().unwrap_or_else(|| {
            if loopback {
                format!("this machine: {}", machine_description())
            } else {
                "unknown (remote server; pass --device)".into()
            }
        });
        let scope = args.scope.clone().unwrap_or_else(|| {
            "Live requests from one client against one server endpoint; not a production load test.".to_string()
        });
        Self {
            model: model.unwrap_or("unknown").to_string(),
            revision: "unknown".into(),
            license: "unknown".into(),
            device,
            command: command.to_string(),
            source_sha256: hashes,
            scope,
            ..Self::default()
        }
    }

    /// As JSON, for pages that show it whole.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

fn machine_description() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} cores, CPU only")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_reads_back_as_written_and_old_files_without_new_fields_still_load() {
        let mut context =
            RunContext { model: "m".into(), workload: serde_json::json!({"kind": "trace"}), ..Default::default() };
        context.shard = Some(ShardContext { index: 1, count: 4, start_at_unix_ms: Some(10), late_ms: Some(3) });
        let back: RunContext = serde_json::from_value(context.to_value()).expect("reads back");
        assert_eq!(back, context);
        assert_eq!(back.shard.map(|s| s.shard()), Some(Shard { index: 1, count: 4 }));
        let seed: RunContext = serde_json::from_str(r#"{"model": "Qwen", "scope": "six requests"}"#).expect("loads");
        assert_eq!((seed.model.as_str(), seed.workload.is_null(), seed.shard), ("Qwen", true, None));
    }
}
