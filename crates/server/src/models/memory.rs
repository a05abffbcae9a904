//! What a model takes in memory (`--models-memory-mib`), measured rather than guessed: its
//! file (the weights are mapped from it, and are resident once used) plus the anonymous
//! memory its load added to the process (KV cache, compute buffers), read from
//! `/proc/self/status` around the load, plus its prefix cache's RAM budget (filled as it
//! serves). Before a model's first load only its file size is known: the load is allowed
//! on that, and room is made again once it is measured.

/// The process's anonymous resident memory (`RssAnon`), in bytes; `None` where the kernel
/// does not say (not Linux).
pub(crate) fn anon_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("RssAnon:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn anonymous_memory_grows_with_an_allocation_that_is_touched() {
        let before = anon_resident_bytes().expect("Linux says");
        let mut block = std::hint::black_box(vec![0u8; 64 << 20]);
        // Every page written: resident now.
        block.iter_mut().step_by(4096).for_each(|b| *b = 1);
        let after = anon_resident_bytes().expect("Linux says");
        assert!(after >= before + (48 << 20), "{before} -> {after}");
        drop(std::hint::black_box(block));
    }
}
