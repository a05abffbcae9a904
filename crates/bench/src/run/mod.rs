//! Drives one load level: open-loop arrivals that never wait for earlier responses (from
//! an arrival process or a trace's own times), or a fixed number of closed-loop workers.
//! Sessions are driven by `session`.
//!
//! The second stage (workload → run → results → report): the HTTP client and protocols'
//! timing, pacing, sessions, shards and endpoints, and the server's own metrics read around
//! a run.

pub mod calibrate;
pub mod client;
pub mod model_status;
pub mod plan;
pub mod record;
pub mod saved_sessions;
pub mod schedule;
pub mod server_metrics;
pub mod session;
pub mod shard;
pub mod targets;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio::task::JoinSet;

use crate::run::client::ms;
use crate::run::plan::{Amount, LevelPlan, Load};
use crate::run::record::RequestRecord;
use crate::run::schedule::arrival_times;
use crate::workload::Workload;

pub struct LevelOutcome {
    pub records: Vec<RequestRecord>,
    pub wall_s: f64,
    pub client_cpu_s: f64,
    /// Sessions cut short by a failed or rejected turn, and the turns never sent.
    pub sessions_cut: usize,
    pub turns_not_sent: usize,
}

pub async fn run_level(client: &reqwest::Client, plan: Arc<LevelPlan>) -> LevelOutcome {
    let cpu_before = process_cpu_seconds();
    let start = Instant::now();
    let bar = progress_bar(&plan);
    let (mut sessions_cut, mut turns_not_sent) = (0, 0);
    let records = if let Workload::Sessions(sessions) = &*plan.workload {
        let outcome = crate::run::session::run(client, &plan, sessions, start, &bar).await;
        (sessions_cut, turns_not_sent) = (outcome.sessions_cut, outcome.turns_not_sent);
        outcome.records
    } else {
        match plan.load {
            Load::Rate { rate, arrival, burstiness } => {
                let (count, horizon) = match plan.amount {
                    Amount::Requests(n) => (Some(n), None),
                    Amount::Duration(d) => (None, Some(d.as_secs_f64())),
                };
                open_loop(
                    client,
                    &plan,
                    arrival_times(arrival, rate, burstiness, plan.seed, count, horizon),
                    start,
                    &bar,
                )
                .await
            }
            Load::Replay => {
                let times = match &*plan.workload {
                    Workload::Trace(requests) => requests.iter().map(|r| r.at_s).collect(),
                    _ => Vec::new(),
                };
                open_loop(client, &plan, times, start, &bar).await
            }
            Load::Concurrency(workers) => closed_loop(client, &plan, workers.max(1), start, &bar).await,
        }
    };
    bar.finish_and_clear();
    LevelOutcome {
        records,
        wall_s: start.elapsed().as_secs_f64(),
        client_cpu_s: (process_cpu_seconds() - cpu_before).max(0.0),
        sessions_cut,
        turns_not_sent,
    }
}

/// Sends request `i` at `times[i]` seconds from `start`, never waiting for responses.
async fn open_loop(
    client: &reqwest::Client,
    plan: &Arc<LevelPlan>,
    times: Vec<f64>,
    start: Instant,
    bar: &ProgressBar,
) -> Vec<RequestRecord> {
    let mine = |i: &usize| plan.shard.is_none_or(|s| s.owns(*i));
    bar.set_length((0..times.len()).filter(mine).count() as u64);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    let mut shed = Vec::new();
    for (i, t) in times.iter().enumerate().filter(|(i, _)| mine(i)) {
        let scheduled = start + Duration::from_secs_f64(*t);
        tokio::time::sleep_until(scheduled.into()).await;
        let scheduled_ms = t * 1000.0;
        if plan.max_inflight.is_some_and(|m| in_flight.load(Ordering::SeqCst) >= m) {
            let mut record = RequestRecord::shed(scheduled_ms);
            record.place.index = i;
            shed.push((i, record));
            bar.inc(1);
            continue;
        }
        in_flight.fetch_add(1, Ordering::SeqCst);
        let (client, plan, in_flight, bar) = (client.clone(), Arc::clone(plan), Arc::clone(&in_flight), bar.clone());
        tasks.spawn(async move {
            let record = plan.send(&client, plan.spec(i), i, plan.endpoints.targets.pick(), start, scheduled_ms).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            bar.inc(1);
            (i, record)
        });
    }
    let mut records: Vec<(usize, RequestRecord)> = tasks.join_all().await;
    records.extend(shed);
    records.sort_by_key(|(i, _)| *i);
    records.into_iter().map(|(_, r)| r).collect()
}

async fn closed_loop(
    client: &reqwest::Client,
    plan: &Arc<LevelPlan>,
    workers: usize,
    start: Instant,
    bar: &ProgressBar,
) -> Vec<RequestRecord> {
    let next = Arc::new(AtomicUsize::new(0));
    let (limit, deadline) = match plan.amount {
        Amount::Requests(n) => (n, None),
        Amount::Duration(d) => (usize::MAX, Some(start + d)),
    };
    if limit != usize::MAX {
        bar.set_length(limit as u64);
    }
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (client, plan, next, bar) = (client.clone(), Arc::clone(plan), Arc::clone(&next), bar.clone());
        tasks.spawn(async move {
            let mut mine = Vec::new();
            loop {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= limit {
                    break;
                }
                // Closed loop: a request is "scheduled" when its worker is free.
                let scheduled_ms = ms(start.elapsed());
                let to = plan.endpoints.targets.pick();
                mine.push((i, plan.send(&client, plan.spec(i), i, to, start, scheduled_ms).await));
                bar.inc(1);
            }
            mine
        });
    }
    let mut records: Vec<(usize, RequestRecord)> = tasks.join_all().await.into_iter().flatten().collect();
    records.sort_by_key(|(i, _)| *i);
    records.into_iter().map(|(_, r)| r).collect()
}

fn progress_bar(plan: &LevelPlan) -> ProgressBar {
    if !plan.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} requests") {
        bar.set_style(style);
    }
    bar
}

/// User + system CPU seconds of this process so far (Linux; 0 elsewhere).
pub fn process_cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else { return 0.0 };
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { return 0.0 };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // CLK_TCK is 100 on every Linux this targets.
    (ticks(11) + ticks(12)) / 100.0
}
