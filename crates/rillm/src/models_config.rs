//! `--models-config FILE`: the models `rillm serve` serves, each with its own settings, in
//! TOML (llama-server's router takes an INI of presets, llama-swap a YAML; one table per
//! model reads the same):
//!
//! ```toml
//! [[model]]
//! name = "chat"
//! path = "SmolLM2-135M-Instruct.Q4_1.gguf"   # relative to this file, or a known model's name
//! aliases = ["smollm2"]
//! ctx_size = 4096          # what the serve flags set for all, per model
//! max_running = 8
//! threads = 2
//! chat_template_file = "tools.jinja"
//! draft_model = "draft.gguf"
//! pinned = true            # never unloaded to make room or when idle
//! preload = true           # loaded at start (default: the first model only)
//!
//! [[model]]
//! name = "embed"
//! path = "all-minilm-l6-v2"
//! pooling = "mean"
//! ```
//!
//! `tool_call_parser` sets a chat model's tool-call format over `--tool-call-parser`,
//! `reasoning_parser` how its thought is read over `--reasoning-parser`. An
//! unknown key is an error naming it (a misspelt setting must not be silently ignored).
//! The server's other output options stay server-wide.

use std::path::{Path, PathBuf};

use rillm_engine::{EngineConfig, Pooling, Speculative};
use rillm_server::{ReasoningParser, ToolCallFormat};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsFile {
    #[serde(rename = "model", default)]
    models: Vec<ModelSection>,
}

/// One `[[model]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelSection {
    name: String,
    path: PathBuf,
    #[serde(default)]
    aliases: Vec<String>,
    #[serde(default)]
    pinned: bool,
    #[serde(default)]
    preload: bool,
    // serde's `flatten` and `deny_unknown_fields` do not go together: the settings are here.
    ctx_size: Option<u32>,
    max_running: Option<usize>,
    threads: Option<usize>,
    chat_template_file: Option<PathBuf>,
    draft_model: Option<PathBuf>,
    pooling: Option<String>,
    tool_call_parser: Option<String>,
    reasoning_parser: Option<String>,
}

/// A model from the file: its name, aliases, file, and what it sets over the serve flags.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfiguredModel {
    pub name: String,
    pub aliases: Vec<String>,
    pub path: PathBuf,
    pub pinned: bool,
    pub preload: bool,
    /// Its tool-call format, over `--tool-call-parser` (the server applies it).
    pub tool_call_parser: Option<ToolCallFormat>,
    /// How its thought is read, over `--reasoning-parser` (the server applies it).
    pub reasoning_parser: Option<ReasoningParser>,
    pub settings: ModelSettings,
}

/// A model's own settings; `None` leaves the serve flag's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelSettings {
    pub ctx_size: Option<u32>,
    pub max_running: Option<usize>,
    pub threads: Option<usize>,
    /// The template's source, read when the file is (a missing one fails at start, not at load).
    pub chat_template: Option<String>,
    pub draft_model: Option<PathBuf>,
    pub pooling: Option<Pooling>,
}

impl ModelSettings {
    /// `base` (the serve flags) with these settings over it.
    pub fn apply(&self, mut base: EngineConfig) -> EngineConfig {
        if let Some(ctx) = self.ctx_size {
            base.ctx_per_sequence = ctx;
        }
        if let Some(n) = self.max_running {
            base.max_running = n;
        }
        if let Some(threads) = self.threads {
            base.threads = threads;
        }
        if let Some(template) = &self.chat_template {
            base.chat_template = Some(template.clone());
        }
        if let Some(draft) = &self.draft_model {
            base.speculation.draft_model_path = Some(draft.clone());
            base.speculation.mode = Speculative::Draft;
        }
        base
    }
}

/// A tool-call format by name (`--tool-call-parser`, a model's `tool_call_parser`).
pub(crate) fn parse_tool_call_parser(name: &str) -> Result<ToolCallFormat, String> {
    ToolCallFormat::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = ToolCallFormat::ALL.iter().map(|f| f.name()).collect();
        format!("unknown tool-call format `{name}`; one of: {}", names.join(", "))
    })
}

/// Reads the models of `file`; paths inside are relative to its folder.
pub fn read(file: &Path) -> anyhow::Result<Vec<ConfiguredModel>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("cannot read --models-config {}: {e}", file.display()))?;
    parse(&text, file.parent().unwrap_or(Path::new(".")))
        .map_err(|e| anyhow::anyhow!("--models-config {}: {e}", file.display()))
}

/// The models of a config's `text`, its relative paths taken from `dir`.
fn parse(text: &str, dir: &Path) -> anyhow::Result<Vec<ConfiguredModel>> {
    let parsed: ModelsFile = toml::from_str(text)?;
    if parsed.models.is_empty() {
        anyhow::bail!("no [[model]] table");
    }
    parsed.models.into_iter().map(|section| configured(section, dir)).collect()
}

fn configured(section: ModelSection, dir: &Path) -> anyhow::Result<ConfiguredModel> {
    let name = section.name.clone();
    let within = |path: PathBuf| if path.is_relative() { dir.join(path) } else { path };
    // A bare known model's name (`all-minilm-l6-v2`) stays a name: it is fetched on use.
    let path = match section.path.to_str() {
        Some(known) if rillm_models::KNOWN_MODELS.contains(&known) && !dir.join(known).exists() => section.path.clone(),
        _ => within(section.path.clone()),
    };
    let s = &section;
    let chat_template =
        match s.chat_template_file.clone().map(within) {
            Some(file) => Some(std::fs::read_to_string(&file).map_err(|e| {
                anyhow::anyhow!("model `{name}`: cannot read chat_template_file {}: {e}", file.display())
            })?),
            None => None,
        };
    let pooling = match s.pooling.as_deref() {
        Some(p) => Some(Pooling::from_name(p).ok_or_else(|| {
            anyhow::anyhow!("model `{name}`: unknown pooling `{p}`; one of: {}", Pooling::NAMES.join(", "))
        })?),
        None => None,
    };
    let tool_call_parser = match s.tool_call_parser.as_deref() {
        Some(p) => Some(parse_tool_call_parser(p).map_err(|e| anyhow::anyhow!("model `{name}`: {e}"))?),
        None => None,
    };
    let reasoning_parser = match s.reasoning_parser.as_deref() {
        Some(p) => Some(ReasoningParser::parse(p).map_err(|e| anyhow::anyhow!("model `{name}`: {e}"))?),
        None => None,
    };
    if s.max_running == Some(0) || s.threads == Some(0) || s.ctx_size == Some(0) {
        anyhow::bail!("model `{name}`: ctx_size, max_running and threads must be at least 1");
    }
    let settings = ModelSettings {
        ctx_size: s.ctx_size,
        max_running: s.max_running,
        threads: s.threads,
        chat_template,
        draft_model: s.draft_model.clone().map(within),
        pooling,
    };
    Ok(ConfiguredModel {
        name,
        aliases: section.aliases,
        path,
        pinned: section.pinned,
        preload: section.preload,
        tool_call_parser,
        reasoning_parser,
        settings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_models_settings_with_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("tools.jinja"), "{{ messages }}").expect("written");
        let text = r#"
            [[model]]
            name = "chat"
            path = "chat.gguf"
            aliases = ["smollm2"]
            ctx_size = 4096
            max_running = 8
            threads = 1
            chat_template_file = "tools.jinja"
            draft_model = "/abs/draft.gguf"
            pinned = true
            preload = true
            tool_call_parser = "llama3_json"
            reasoning_parser = "qwen3"

            [[model]]
            name = "embed"
            path = "all-minilm-l6-v2"
            pooling = "cls"
        "#;
        let models = parse(text, dir.path()).expect("parsed");
        assert_eq!(models.len(), 2);
        let chat = &models[0];
        assert_eq!((chat.name.as_str(), chat.path.clone()), ("chat", dir.path().join("chat.gguf")));
        assert_eq!(chat.aliases, vec!["smollm2"]);
        assert!(chat.pinned && chat.preload);
        assert_eq!(chat.tool_call_parser, Some(ToolCallFormat::Llama3Json));
        assert_eq!(chat.reasoning_parser, Some(ReasoningParser::Qwen3));
        let config = chat.settings.apply(EngineConfig::new("chat.gguf"));
        assert_eq!((config.ctx_per_sequence, config.max_running, config.threads), (4096, 8, 1));
        assert_eq!(config.chat_template.as_deref(), Some("{{ messages }}"));
        assert_eq!(config.speculation.mode, Speculative::Draft);
        assert_eq!(config.speculation.draft_model_path, Some(PathBuf::from("/abs/draft.gguf")));
        let embed = &models[1];
        assert_eq!(embed.path, PathBuf::from("all-minilm-l6-v2"), "a known model's name stays a name");
        assert_eq!(embed.settings.pooling, Some(Pooling::Cls));
        assert!(!embed.pinned && !embed.preload);
        let base = EngineConfig::new("x");
        let unchanged = embed.settings.apply(base.clone());
        assert_eq!((unchanged.ctx_per_sequence, unchanged.max_running), (base.ctx_per_sequence, base.max_running));
    }

    #[test]
    fn a_misspelt_key_a_bad_value_or_a_missing_file_is_an_error_that_names_it() {
        let dir = Path::new("/nonexistent");
        let error = |text: &str| parse(text, dir).expect_err("refused").to_string();
        assert!(error("[[model]]\nname = \"a\"\npath = \"a.gguf\"\nctx = 4096\n").contains("ctx"));
        assert!(error("[[model]]\nname = \"a\"\n").contains("path"));
        assert!(
            error("[[model]]\nname = \"a\"\npath = \"a.gguf\"\npooling = \"max\"\n").contains("unknown pooling `max`")
        );
        assert!(error("[[model]]\nname = \"a\"\npath = \"a.gguf\"\nmax_running = 0\n").contains("at least 1"));
        assert!(error("[[model]]\nname = \"a\"\npath = \"a.gguf\"\nchat_template_file = \"t.jinja\"\n")
            .contains("cannot read chat_template_file"));
        assert!(error("").contains("no [[model]]"));
        let bad_parser = "[[model]]\nname = \"a\"\npath = \"a.gguf\"\ntool_call_parser = \"x\"\n";
        assert!(error(bad_parser).contains("unknown tool-call format"));
        let bad_reasoning = "[[model]]\nname = \"a\"\npath = \"a.gguf\"\nreasoning_parser = \"r2\"\n";
        assert!(error(bad_reasoning).contains("unknown reasoning parser `r2`"));
    }
}
