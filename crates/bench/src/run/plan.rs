//! What one load level sends and how: the workload, the load (arrival rate, workers or a
//! trace's own times), how much, and to which endpoints. Both drivers (`runner` for
//! independent requests, `session` for conversations) send through [`LevelPlan::send`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::protocol::Protocol;
use crate::run::client::{send, Target};
use crate::run::record::{RequestRecord, Status};
use crate::run::schedule::Arrival;
use crate::workload::body::request_body;
use crate::workload::spec::{BodyOptions, RequestSpec};
use crate::workload::Workload;

#[derive(Debug, Clone, Copy)]
pub enum Load {
    Rate {
        rate: f64,
        arrival: Arrival,
        burstiness: f64,
    },
    Concurrency(usize),
    /// At the workload's own recorded times (a trace).
    Replay,
}

#[derive(Debug, Clone, Copy)]
pub enum Amount {
    Requests(usize),
    Duration(Duration),
}

pub struct LevelPlan {
    pub endpoints: Endpoints,
    pub workload: Arc<Workload>,
    pub body: BodyOptions,
    pub load: Load,
    pub amount: Amount,
    pub max_inflight: Option<usize>,
    pub seed: u64,
    pub progress: bool,
    pub prompts: PromptShare,
    /// Send only this shard's arrivals of the schedule (indices stay the full run's).
    pub shard: Option<crate::run::shard::Shard>,
    /// `--save-sessions`: where sessions' requests are written as they are sent.
    pub save_sessions: Option<Arc<crate::run::saved_sessions::SessionRecorder>>,
}

/// Where a level's requests go and how: the same for every level of a run.
pub struct Endpoints {
    pub targets: Arc<crate::run::targets::Targets>,
    pub protocol: Protocol,
    pub api_key: Option<String>,
    pub timeout: Duration,
}

/// Which of the prompt pool's prompts a level sends, and how often each.
#[derive(Debug, Clone, Copy)]
pub struct PromptShare {
    /// Where in the prompt pool this level's share starts: each level of a sweep sends its
    /// own prompts, so no level finds the one before it in a server's prefix cache.
    pub first_prompt: usize,
    /// How many prompts the level's share holds; the level cycles through them, so
    /// recurring prompts recur within their level.
    pub level_prompts: usize,
    /// Each prompt goes out this many times in a row (`--prompt-repeats`).
    pub prompt_repeats: usize,
}

impl LevelPlan {
    /// The `i`-th independent request: cycled prompts, or the trace's `i`-th.
    pub fn spec(&self, i: usize) -> &RequestSpec {
        match &*self.workload {
            Workload::Requests(specs) => {
                let prompt = (i / self.prompts.prompt_repeats.max(1)) % self.prompts.level_prompts.max(1);
                &specs[(self.prompts.first_prompt + prompt) % specs.len()]
            }
            Workload::Trace(requests) => &requests[i].spec,
            Workload::Sessions(_) => unreachable!("sessions are driven by session::run"),
        }
    }

    /// Sends one request to endpoint `to` (of `targets`) and labels its record.
    pub async fn send(
        &self,
        client: &reqwest::Client,
        spec: &RequestSpec,
        index: usize,
        to: usize,
        start: Instant,
        scheduled_ms: f64,
    ) -> RequestRecord {
        let mixed;
        let spec = match (&self.body.model_mix, &spec.model) {
            (Some(mix), None) => {
                mixed = RequestSpec { model: Some(mix.pick(index as u64)), ..spec.clone() };
                &mixed
            }
            _ => spec,
        };
        let body = request_body(self.endpoints.protocol, spec, &self.body);
        let _in_flight = self.endpoints.targets.begin(to);
        let mut record = send(&target(client, self, to), &body, start, scheduled_ms).await;
        record.place.model = body["model"].as_str().map(Arc::from);
        record.place.index = index;
        record.place.target = to;
        record.usage.prompt_tokens = record.usage.prompt_tokens.or(spec.prompt_tokens);
        // A reply that called tools is no answer: only one without calls is checked (with
        // `--final-schema` beside tools, the typed final answer).
        let answered = record.status == Status::Completed && record.reply.tool_calls.is_empty();
        if let Some(constraint) = spec.constraint.as_ref().filter(|_| answered) {
            record.reply.output_check = Some(constraint.check(&record.reply.text));
        }
        if let Some(tools) = spec.tools(&self.body).filter(|_| record.status == Status::Completed) {
            let cut = record.finish_reason.as_deref() == Some("length");
            record.reply.call_check = Some(tools.check(&mut record.reply.tool_calls, cut));
        }
        record
    }
}

pub fn target<'a>(client: &'a reqwest::Client, plan: &'a LevelPlan, to: usize) -> Target<'a> {
    let url = plan.endpoints.targets.url(to);
    Target {
        client,
        url,
        protocol: plan.endpoints.protocol,
        api_key: plan.endpoints.api_key.as_deref(),
        timeout: plan.endpoints.timeout,
    }
}
