//! The bench's loopback tests against the mock, one binary (one link instead of four). The
//! timing checks stay in binaries of their own (`against_mock`, `client_timing`), so nothing
//! runs beside them that is not theirs.

#[path = "../support/mod.rs"]
mod support;

mod protocols;
mod replay;
mod report;
mod shards;
