//! Which models the server has loaded, polled from its `/v1/models` during a model-mix
//! run, and what it tells of the requests: those that waited on a model's load, and how
//! long the loads looked from the client.
//!
//! A client cannot see a load inside one request; the server's model list can: rillm says
//! `"status": "loaded"` per model, llama-server's router `"status": {"value": "loaded"}`
//! (vLLM and SGLang serve one model and say neither: no figure then). A request waited on
//! a load when its model was not loaded as it went out, or went out of the list while it
//! waited for its first token; the wait it saw runs from its send to the first poll that
//! found the model loaded after the last that did not (bounded by its TTFT). Polled every `--model-status-ms`: loads
//! shorter than that may go unseen, and the waits are that coarse. Off by default: the
//! polls are requests to the server under test (llama-server's router served fewer of the
//! run's requests while its list was read every 100 ms).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::run::record::RequestRecord;
use crate::stats::Distribution;

/// The models the server listed at one moment: name → loaded.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusPoll {
    pub at_ms: f64,
    pub loaded: HashMap<String, bool>,
}

/// Each model's load state from a `/v1/models` body; empty when it says none.
pub fn parse_statuses(body: &serde_json::Value) -> HashMap<String, bool> {
    let Some(models) = body["data"].as_array() else { return HashMap::new() };
    models
        .iter()
        .filter_map(|m| {
            let id = m["id"].as_str()?;
            let status = m["status"].as_str().or_else(|| m["status"]["value"].as_str())?;
            Some((id.to_string(), status == "loaded"))
        })
        .collect()
}

/// The server whose model list is read.
pub struct Watched {
    pub client: reqwest::Client,
    pub origin: String,
    pub api_key: Option<String>,
}

/// Polls `origin/v1/models` `every` so often until `stop` fires; times from `started`.
pub async fn watch(
    target: Watched,
    every: Duration,
    started: Instant,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<StatusPoll> {
    let Watched { client, origin, api_key } = target;
    let mut polls = Vec::new();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut stop => return polls,
            _ = ticks.tick() => {}
        }
        let mut request = client.get(format!("{origin}/v1/models")).timeout(Duration::from_secs(2));
        if let Some(key) = &api_key {
            request = request.bearer_auth(key);
        }
        let at_ms = started.elapsed().as_secs_f64() * 1000.0;
        let Ok(response) = request.send().await else { continue };
        let Ok(body) = response.json::<serde_json::Value>().await else { continue };
        let loaded = parse_statuses(&body);
        if loaded.is_empty() {
            // The server says nothing of load states: nothing to learn by asking again.
            return polls;
        }
        polls.push(StatusPoll { at_ms, loaded });
    }
}

/// The requests that waited on a model's load, and the waits they saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadWaits {
    /// Requests whose model was not loaded as they went out or before their first token.
    pub requests: usize,
    /// Of all requests that named a model.
    pub of: usize,
    /// From each one's send to the first poll that found its model loaded after the last
    /// that did not (TTFT at most).
    pub wait_ms: Option<Distribution>,
    /// Their times to first token: what a swap (`--models-max`) costs a request, load and
    /// prefill together (a server that kept the model's prefix cache prefills less).
    pub ttft_ms: Option<Distribution>,
    /// How often the model list was read.
    pub polled_every_ms: u64,
}

/// What `polls` tell of `records`; `None` when the server listed no load states.
pub fn load_waits(polls: &[StatusPoll], records: &[RequestRecord], every: Duration) -> Option<LoadWaits> {
    if polls.is_empty() {
        return None;
    }
    let named: Vec<&RequestRecord> = records.iter().filter(|r| r.place.model.is_some()).collect();
    let waited: Vec<(f64, Option<f64>)> =
        named.iter().filter_map(|r| waited(polls, r).map(|wait| (wait, r.timing.ttft_ms))).collect();
    Some(LoadWaits {
        requests: waited.len(),
        of: named.len(),
        wait_ms: Distribution::of(waited.iter().map(|w| w.0)),
        ttft_ms: Distribution::of(waited.iter().filter_map(|w| w.1)),
        polled_every_ms: every.as_millis() as u64,
    })
}

/// How long `record` waited on its model's load, if it did.
fn waited(polls: &[StatusPoll], record: &RequestRecord) -> Option<f64> {
    let model = record.place.model.as_deref()?;
    let until = record.timing.sent_ms + record.timing.ttft_ms.unwrap_or(record.timing.e2e_ms);
    let loaded_at = |p: &StatusPoll| p.loaded.get(model).copied();
    let at_send = polls.iter().rev().find(|p| p.at_ms <= record.timing.sent_ms).and_then(loaded_at);
    let during: Vec<&StatusPoll> =
        polls.iter().filter(|p| p.at_ms > record.timing.sent_ms && p.at_ms < until).collect();
    let last_unloaded = during.iter().rposition(|p| loaded_at(p) == Some(false));
    if at_send != Some(false) && last_unloaded.is_none() {
        return None;
    }
    // The load it waited on ended at the first poll finding the model loaded after the last
    // one that did not (loaded polls before an unload under it are not that load's end).
    let after = last_unloaded.map_or(0, |i| i + 1);
    let loaded = during[after..].iter().find(|p| loaded_at(p) == Some(true)).map(|p| p.at_ms);
    Some(loaded.unwrap_or(until) - record.timing.sent_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn poll(at_ms: f64, chat_loaded: bool) -> StatusPoll {
        StatusPoll { at_ms, loaded: HashMap::from([("chat".to_string(), chat_loaded), ("chat2".to_string(), true)]) }
    }

    fn sent(model: &str, sent_ms: f64, ttft_ms: f64) -> RequestRecord {
        let mut record = crate::results::result::tests::completed(sent_ms, 0.0, ttft_ms, ttft_ms + 50.0, 4);
        record.place.model = Some(model.into());
        record
    }

    #[test]
    fn reads_rillm_and_llama_servers_model_lists() {
        let rillm = json!({"data": [{"id": "chat", "status": "loaded"}, {"id": "embed", "status": "unloaded"}]});
        assert_eq!(parse_statuses(&rillm), HashMap::from([("chat".into(), true), ("embed".into(), false)]));
        let llama = json!({"data": [{"id": "chat", "status": {"value": "loading", "args": []}}]});
        assert_eq!(parse_statuses(&llama), HashMap::from([("chat".into(), false)]));
        let vllm = json!({"data": [{"id": "m", "object": "model"}]});
        assert!(parse_statuses(&vllm).is_empty(), "no load states: no figures");
    }

    #[test]
    fn counts_requests_sent_to_or_kept_waiting_by_an_unloaded_model() {
        // chat loaded until 1 s, unloaded (swapped out, then loading) until 2 s, loaded after.
        let polls: Vec<StatusPoll> =
            (0..30).map(|i| i as f64 * 100.0).map(|t| poll(t, !(1000.0..2000.0).contains(&t))).collect();
        let records = vec![
            sent("chat", 500.0, 40.0),   // loaded: no wait
            sent("chat", 1250.0, 800.0), // sent while unloaded: waited to the 2,000 ms poll
            sent("chat", 850.0, 1200.0), // sent loaded, swapped out under it: waited to 2,000
            sent("chat2", 1250.0, 40.0), // its model stayed loaded
        ];
        let every = Duration::from_millis(100);
        let waits = load_waits(&polls, &records, every).expect("the server lists load states");
        assert_eq!((waits.requests, waits.of), (2, 4));
        let wait = waits.wait_ms.expect("two waits");
        assert_eq!(wait.min, 750.0);
        assert_eq!(wait.max, 1150.0, "to the poll that found it loaded again, not the one before the swap");
        assert_eq!(waits.ttft_ms.map(|t| (t.min, t.max)), Some((800.0, 1200.0)));
        assert!(load_waits(&[], &records, every).is_none());
    }
}
