//! The open-file limit and the connection cap that follows from it. Every client connection
//! is a file descriptor: with the usual soft limit of 1,024, a few hundred connections plus
//! the model and logs exhaust it and new clients are reset. At start the soft limit is raised
//! to the hard one (as nginx and most servers do), and the default cap is taken from it.

/// Descriptors kept back for everything that is not a client connection (model file,
/// listener, logs, the HTTP client of health probes).
const RESERVED: u64 = 64;

/// The default cap on open client connections: what the open-file limit leaves, bounded so
/// that a huge limit does not invite more idle connections than a small server needs.
pub fn default_max_connections(open_file_limit: u64) -> usize {
    open_file_limit.saturating_sub(RESERVED).clamp(64, 16_384) as usize
}

/// Raises the soft open-file limit to the hard one; returns (before, after) where the OS
/// says, `None` where it has no such limit or refused.
pub fn raise_limit() -> Option<(u64, u64)> {
    let (soft, _hard) = rlimit::Resource::NOFILE.get().ok()?;
    let raised = rlimit::increase_nofile_limit(u64::MAX).ok()?;
    Some((soft, raised))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_room_for_the_servers_own_files() {
        assert_eq!(default_max_connections(1024), 960);
        assert_eq!(default_max_connections(65_536), 16_384, "bounded");
        assert_eq!(default_max_connections(100), 64, "a floor even under a tiny limit");
        // What the process runs with after the raise is never below the old default.
        if let Some((before, after)) = raise_limit() {
            assert!(after >= before, "{before} -> {after}");
        }
    }
}
