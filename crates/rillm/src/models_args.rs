//! `rillm serve` with several models: where they come from (`--model NAME=PATH`,
//! `--models-dir`, `--models-config`), and the engine loader the server calls when a
//! request names one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rillm_engine::{EngineConfig, KeptPrefixes, Pooling};
use rillm_server::{Backend, ModelLimits, ModelLoader, ModelSpec};

use crate::models_config::{ConfiguredModel, ModelSettings};

#[derive(clap::Args, Debug, Clone)]
pub struct ModelsArgs {
    /// Serve every `*.gguf` in DIR as a model named by its file stem (with --model
    /// NAME=PATH, both). Models load when a request names one.
    #[arg(long, value_name = "DIR")]
    models_dir: Option<PathBuf>,
    /// A TOML file of models, each with its own settings (ctx_size, max_running, threads,
    /// chat_template_file, draft_model, pooling, tool_call_parser, reasoning_parser, aliases, pinned,
    /// preload): see docs/several-models.md.
    #[arg(long, value_name = "FILE")]
    models_config: Option<PathBuf>,
    /// Loaded models at most: loading one more first unloads the least recently used that
    /// no request is using and that is not pinned.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    models_max: Option<u32>,
    /// Loaded models' memory at most, in MiB: each model's file, the memory its load added
    /// (KV cache, buffers: measured at its load) and its --prefix-cache-mib. Loading one
    /// more first unloads the least recently used idle ones until it fits.
    #[arg(long, value_name = "MIB")]
    models_memory_mib: Option<u64>,
    /// Seconds a request waits for its model to load before a 503 with Retry-After.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    load_timeout: u64,
    /// Unload a model no request used for this many seconds (probes and /metrics do not
    /// count); it loads again when next asked for.
    #[arg(long, value_name = "SECS")]
    idle_unload: Option<u64>,
    /// A model never unloaded to make room or when idle (repeatable).
    #[arg(long, value_name = "NAME")]
    pin_model: Vec<String>,
}

/// One `--model` value: `NAME=PATH`, or a path (or a known model's name) named by its stem.
pub fn named_model(value: &str) -> (String, PathBuf) {
    match value.split_once('=') {
        Some((name, path)) if !name.is_empty() && !path.is_empty() => (name.to_string(), PathBuf::from(path)),
        _ => {
            let path = PathBuf::from(value);
            (stem(&path), path)
        }
    }
}

/// The models of `--models-dir`, by name: each `*.gguf` (named by its stem), and each
/// sub-folder holding `*.gguf` files (named by the folder: a model split in parts, as
/// llama-server's router takes it). Of a split model's parts (`name-00001-of-00003.gguf`)
/// only the first is named (llama.cpp finds the others beside it).
fn models_in_dir(dir: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for path in sorted_entries(dir)? {
        if path.is_dir() {
            let parts: Vec<PathBuf> = sorted_entries(&path)?.into_iter().filter(|p| is_gguf(p)).collect();
            if let Some(first) = parts.into_iter().find(|p| split_part(p).is_none_or(|n| n == 1)) {
                found.push((stem(&path), first));
            }
        } else if is_gguf(&path) {
            match split_part(&path) {
                None => found.push((stem(&path), path)),
                Some(1) => found.push((split_name(&path), path)),
                Some(_) => {}
            }
        }
    }
    Ok(found)
}

fn sorted_entries(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read --models-dir {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    paths.sort();
    Ok(paths)
}

fn is_gguf(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|x| x == "gguf")
}

/// The part number of a split GGUF's file (`-00002-of-00003`), if it is one.
fn split_part(path: &Path) -> Option<u32> {
    let stem = stem(path);
    let (head, of) = stem.rsplit_once("-of-")?;
    let (_, part) = head.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    (digits(part) && digits(of)).then(|| part.parse().ok()).flatten()
}

/// A split model's name: its first part's stem without `-00001-of-000NN`.
fn split_name(path: &Path) -> String {
    let stem = stem(path);
    stem.rsplit_once("-of-").and_then(|(head, _)| head.rsplit_once('-')).map_or(stem.clone(), |(name, _)| name.into())
}

/// A model the flags name: the serve flags' settings, its file's stem as an alias.
fn flag_model((name, path): (String, PathBuf)) -> ConfiguredModel {
    let aliases = Some(stem(&path)).filter(|s| *s != name).into_iter().collect();
    ConfiguredModel {
        name,
        aliases,
        path,
        pinned: false,
        preload: false,
        tool_call_parser: None,
        reasoning_parser: None,
        settings: ModelSettings::default(),
    }
}

fn stem(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| path.display().to_string())
}

impl ModelsArgs {
    /// Whether these flags ask for several models (with `models` the `--model` values).
    pub fn several(&self, models: &[String]) -> bool {
        self.models_dir.is_some()
            || self.models_config.is_some()
            || models.len() > 1
            || models.iter().any(|m| m.contains('='))
    }

    /// The models, in the order given (`--model` first, then the config file's, then the
    /// folder's by name); the ones the flags give have the serve flags' settings and their
    /// file's stem as an alias where their name differs. Without any marked `preload`, the
    /// first is.
    pub fn models(&self, given: &[String]) -> anyhow::Result<Vec<ConfiguredModel>> {
        let mut models: Vec<ConfiguredModel> = given.iter().map(|m| flag_model(named_model(m))).collect();
        if let Some(file) = &self.models_config {
            models.extend(crate::models_config::read(file)?);
        }
        if let Some(dir) = &self.models_dir {
            models.extend(models_in_dir(dir)?.into_iter().map(flag_model));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(model) = models.iter().find(|m| !seen.insert(m.name.clone())) {
            anyhow::bail!("two models are named `{}`: give one of them another name", model.name);
        }
        if models.is_empty() {
            anyhow::bail!("no models: --models-dir holds no *.gguf file");
        }
        for model in &mut models {
            model.pinned |= self.pin_model.contains(&model.name);
        }
        if !models.iter().any(|m| m.preload) {
            models[0].preload = true;
        }
        Ok(models)
    }

    /// The registry's limits; `prefix_cache_mib` is each model's prefix-cache budget.
    pub fn limits(&self, prefix_cache_mib: usize) -> ModelLimits {
        ModelLimits {
            memory_bytes: self.models_memory_mib.map(|mib| mib.saturating_mul(1 << 20)),
            prefix_cache_bytes: (prefix_cache_mib as u64).saturating_mul(1 << 20),
            max_loaded: self.models_max.map(|n| n as usize),
            load_timeout: Duration::from_secs(self.load_timeout),
            idle_unload: self.idle_unload.map(Duration::from_secs),
        }
    }
}

/// Starts a model's engine with the serve flags, its own file, and the task its GGUF says;
/// keeps each model's prefix cache across its unloads (`KeptPrefixes`), for as long as the
/// server runs.
pub struct EngineLoader {
    base: EngineConfig,
    models: HashMap<String, (PathBuf, ModelSettings)>,
    pooling: Option<Pooling>,
    kept: HashMap<String, KeptPrefixes>,
}

impl EngineLoader {
    /// `base`: the serve flags' engine settings; `pooling`: `--pooling`.
    pub fn new(base: EngineConfig, models: &[ConfiguredModel], pooling: Option<Pooling>) -> Self {
        let kept = models.iter().map(|m| (m.name.clone(), KeptPrefixes::default())).collect();
        let models = models.iter().map(|m| (m.name.clone(), (m.path.clone(), m.settings.clone()))).collect();
        Self { base, models, pooling, kept }
    }
}

/// What the registry knows of a model: its names and whether it may be unloaded.
pub fn spec(model: &ConfiguredModel) -> ModelSpec {
    // A known model's name not fetched yet has no file: 0, its size is measured at its load.
    let file_bytes = std::fs::metadata(&model.path).map_or(0, |m| m.len());
    ModelSpec {
        name: model.name.clone(),
        aliases: model.aliases.clone(),
        pinned: model.pinned,
        file_bytes,
        tool_call_parser: model.tool_call_parser,
        reasoning_parser: model.reasoning_parser,
    }
}

impl ModelLoader for EngineLoader {
    fn load(&self, name: &str) -> Result<Arc<dyn Backend>, String> {
        let (path, settings) = self.models.get(name).ok_or_else(|| format!("no model named `{name}`"))?;
        let path = crate::model_args::resolve_model(path).map_err(|e| e.to_string())?;
        let mut config = settings.apply(self.base.clone());
        config.model_path = path;
        config.inherit.prefixes = self.kept.get(name).cloned();
        rillm_engine::start_backend(config, settings.pooling.or(self.pooling)).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_models_dir_names_files_by_stem_and_split_models_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let touch = |rel: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("folder");
            std::fs::write(path, b"GGUF").expect("written");
        };
        touch("chat.gguf");
        touch("notes.txt");
        touch("big-00001-of-00002.gguf");
        touch("big-00002-of-00002.gguf");
        touch("qwen/qwen-00002-of-00002.gguf");
        touch("qwen/qwen-00001-of-00002.gguf");
        touch("single/model.gguf");
        touch("empty/readme.md");
        let found = models_in_dir(dir.path()).expect("read");
        let named: Vec<(&str, PathBuf)> = found
            .iter()
            .map(|(n, p)| (n.as_str(), p.strip_prefix(dir.path()).expect("inside").to_path_buf()))
            .collect();
        assert_eq!(
            named,
            vec![
                ("big", PathBuf::from("big-00001-of-00002.gguf")),
                ("chat", PathBuf::from("chat.gguf")),
                ("qwen", PathBuf::from("qwen/qwen-00001-of-00002.gguf")),
                ("single", PathBuf::from("single/model.gguf")),
            ]
        );
        assert!(models_in_dir(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_model_value_is_a_name_and_a_path_or_a_path_named_by_its_stem() {
        assert_eq!(named_model("chat=/m/a.gguf"), ("chat".into(), PathBuf::from("/m/a.gguf")));
        assert_eq!(named_model("/m/SmolLM2.Q4_1.gguf"), ("SmolLM2.Q4_1".into(), PathBuf::from("/m/SmolLM2.Q4_1.gguf")));
        assert_eq!(named_model("all-minilm-l6-v2"), ("all-minilm-l6-v2".into(), PathBuf::from("all-minilm-l6-v2")));
    }
}
