//! The third stage of the bench's data flow (workload → run → results → report): a level's
//! records turned into figures (percentiles, goodput, SLO attainment, sustainable rate),
//! what limited the run, the typed run context, and result files read back to compare.

pub mod checks;
pub mod compare;
pub mod context;
pub mod groups;
pub mod limits;
pub mod result;
pub mod slo;
