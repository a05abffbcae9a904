//! Files the bench writes (results, reports, comparisons) and the hashes of those it reads
//! (datasets, traces, tokenizers, the binary), which every result records.

/// A file the benchmark could not write (result, report, comparison).
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {error}")]
pub struct WriteError {
    pub path: String,
    pub error: std::io::Error,
}

/// Writes `text` to `path`, naming the path if it fails.
pub fn write_file(path: &std::path::Path, text: &str) -> Result<(), WriteError> {
    std::fs::write(path, text).map_err(|error| WriteError { path: path.display().to_string(), error })
}

/// The file's sha256, in hex; `None` if it cannot be read.
pub(crate) fn sha256_file(path: &std::path::Path) -> Option<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path).ok()?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).ok()?;
    Some(format!("{:x}", hasher.finalize()))
}
