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
    /// chat_template_file, draft_model, pooling, aliases, pinned, preload): see the README.
    #[arg(long, value_name = "FILE")]
    models_config: Option<PathBuf>,
    /// Loaded models at most: loading one more first unloads the least recently used that
    /// no request is using and that is not pinned.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    models_max: Option<u32>,
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

/// A model the flags name: the serve flags' settings, its file's stem as an alias.
fn flag_model((name, path): (String, PathBuf)) -> ConfiguredModel {
    let aliases = Some(stem(&path)).filter(|s| *s != name).into_iter().collect();
    ConfiguredModel { name, aliases, path, pinned: false, preload: false, settings: ModelSettings::default() }
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
            let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
                .map_err(|e| anyhow::anyhow!("cannot read --models-dir {}: {e}", dir.display()))?
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
                .collect();
            found.sort();
            models.extend(found.into_iter().map(|p| flag_model((stem(&p), p))));
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

    pub fn limits(&self) -> ModelLimits {
        ModelLimits {
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
    ModelSpec { name: model.name.clone(), aliases: model.aliases.clone(), pinned: model.pinned }
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
    fn a_model_value_is_a_name_and_a_path_or_a_path_named_by_its_stem() {
        assert_eq!(named_model("chat=/m/a.gguf"), ("chat".into(), PathBuf::from("/m/a.gguf")));
        assert_eq!(named_model("/m/SmolLM2.Q4_1.gguf"), ("SmolLM2.Q4_1".into(), PathBuf::from("/m/SmolLM2.Q4_1.gguf")));
        assert_eq!(named_model("all-minilm-l6-v2"), ("all-minilm-l6-v2".into(), PathBuf::from("all-minilm-l6-v2")));
    }
}
