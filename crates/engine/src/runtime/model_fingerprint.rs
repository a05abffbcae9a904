//! A model file's fingerprint: what ties a measurement or a saved KV state to the weights
//! it was made with, without reading the whole file (a 7B GGUF is gigabytes; a load must
//! not hash it).
//!
//! The hash covers the file's length and 64 KiB at sixteen evenly spaced offsets: the
//! header (architecture, sizes, vocabulary) and slices of the tensors, so two fine-tunes of
//! one base with one quantization (same header, same length) still differ, while a copy of
//! a file under another name is the same model.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use sha2::{Digest, Sha256};

const SAMPLES: u64 = 16;
const SAMPLE_BYTES: usize = 64 << 10;

/// The hex fingerprint of the model file at `path`.
pub fn model_fingerprint(path: &Path) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut hasher = Sha256::new();
    hasher.update(len.to_le_bytes());
    let mut sample = vec![0u8; SAMPLE_BYTES];
    for i in 0..SAMPLES {
        file.seek(SeekFrom::Start(len / SAMPLES * i))?;
        let read = read_up_to(&mut file, &mut sample)?;
        hasher.update(&sample[..read]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Fills `buf` as far as the file goes.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("written");
        path
    }

    #[test]
    fn a_copy_matches_and_a_change_in_the_middle_does_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let original = write(dir.path(), "a.gguf", &base);
        let copy = write(dir.path(), "b.gguf", &base);
        let mut tuned = base.clone();
        // Inside the ninth sample, past any header: another fine-tune's weights.
        tuned[base.len() / 2 + 10] ^= 1;
        let tuned = write(dir.path(), "c.gguf", &tuned);
        let longer = write(dir.path(), "d.gguf", &[&base[..], &[0]].concat());
        let of = |p: &Path| model_fingerprint(p).expect("fingerprinted");
        assert_eq!(of(&original), of(&copy));
        assert_ne!(of(&original), of(&tuned));
        assert_ne!(of(&original), of(&longer));
        assert_eq!(of(&original).len(), 64);
        let small = write(dir.path(), "tiny.gguf", b"GGUF");
        assert_eq!(of(&small).len(), 64, "a file shorter than a sample is hashed whole");
        assert!(model_fingerprint(&dir.path().join("missing.gguf")).is_err());
    }
}
