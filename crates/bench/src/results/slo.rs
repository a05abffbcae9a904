//! Service-level objectives a run is judged by, and whether one request met them. Apart
//! from the result so that the caveats (`limits`) can name them without the result.

use serde::{Deserialize, Serialize};

use crate::run::client::{RequestRecord, Status};

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Slos {
    pub ttft_ms: f64,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
}

impl Slos {
    /// `from_schedule`: open loop counts TTFT from the scheduled send, so time the request
    /// spent waiting in the client cannot flatter the server.
    pub(crate) fn ttft_met(&self, r: &RequestRecord, from_schedule: bool) -> bool {
        let lag = if from_schedule { r.dispatch_lag_ms() } else { 0.0 };
        r.status == Status::Completed && r.ttft_ms.is_some_and(|t| t + lag <= self.ttft_ms)
    }

    /// Every SLO given is met. A TPOT SLO with no token count is not met.
    pub(crate) fn all_met(&self, r: &RequestRecord, from_schedule: bool) -> bool {
        let lag = if from_schedule { r.dispatch_lag_ms() } else { 0.0 };
        self.ttft_met(r, from_schedule)
            && self.tpot_ms.is_none_or(|slo| r.tpot_ms().is_some_and(|t| t <= slo))
            && self.e2e_ms.is_none_or(|slo| r.e2e_ms + lag <= slo)
    }
}
