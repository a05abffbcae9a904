//! Multi-turn sessions: each conversation sends its turns in order, after the previous reply
//! and the turn's think time, with the server's live reply appended to the history (with
//! `--tools`, a reply's calls and a result for each, and another round), or as recorded
//! (`--save-sessions`, then `--dataset`: the same requests whatever the server replies). New
//! sessions start at the load's arrivals (open loop over sessions) or whenever one of
//! `--concurrency` session workers is free.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use serde_json::json;
use tokio::task::JoinSet;

use crate::run::client::ms;
use crate::run::plan::{Amount, LevelPlan, Load};
use crate::run::record::{RequestRecord, Status};
use crate::run::schedule::arrival_times;
use crate::workload::conversation::{RecordedTurn, Session, Turn};
use crate::workload::spec::{PromptSpec, RequestSpec};

pub struct SessionsOutcome {
    pub records: Vec<RequestRecord>,
    pub sessions_cut: usize,
    pub turns_not_sent: usize,
}

/// One session's records, and how many of its turns were never sent.
struct Played {
    session: usize,
    records: Vec<RequestRecord>,
    not_sent: usize,
}

pub async fn run(
    client: &reqwest::Client,
    plan: &Arc<LevelPlan>,
    sessions: &[Session],
    start: Instant,
    bar: &ProgressBar,
) -> SessionsOutcome {
    // A request's index is its place in the whole run, session by session: the same in every
    // shard, and a turn (or tool round) never sent leaves its index unused.
    let rounds = plan.body.tools.as_ref().map_or(1, |t| t.max_rounds as usize);
    let first_turn: Vec<usize> = sessions
        .iter()
        .scan(0, |next, s| {
            let first = *next;
            *next += s.turns.len() * rounds;
            Some(first)
        })
        .collect();
    let mine = |i: &usize| plan.shard.is_none_or(|s| s.owns(*i));
    bar.set_length((0..sessions.len()).filter(mine).map(|i| sessions[i].turns.len() as u64).sum());
    let sessions: Arc<Vec<Session>> = Arc::new(sessions.to_vec());
    let played = match plan.load {
        Load::Rate { rate, arrival, burstiness } => {
            let horizon = match plan.amount {
                Amount::Duration(d) => Some(d.as_secs_f64()),
                Amount::Requests(_) => None,
            };
            let times = arrival_times(arrival, rate, burstiness, plan.seed, Some(sessions.len()), horizon);
            let mut tasks = JoinSet::new();
            for (i, t) in times.into_iter().enumerate().filter(|(i, _)| mine(i)) {
                tokio::time::sleep_until((start + Duration::from_secs_f64(t)).into()).await;
                let (client, plan, sessions, bar) =
                    (client.clone(), Arc::clone(plan), Arc::clone(&sessions), bar.clone());
                tasks.spawn(async move { play(&client, &plan, &sessions, i, start, &bar).await });
            }
            tasks.join_all().await
        }
        Load::Concurrency(workers) => closed_loop(client, plan, &sessions, workers.max(1), start, bar).await,
        Load::Replay => closed_loop(client, plan, &sessions, 1, start, bar).await,
    };
    outcome(played, &first_turn)
}

/// `workers` sessions open at once; each worker starts the next session when its own ends.
async fn closed_loop(
    client: &reqwest::Client,
    plan: &Arc<LevelPlan>,
    sessions: &Arc<Vec<Session>>,
    workers: usize,
    start: Instant,
    bar: &ProgressBar,
) -> Vec<Played> {
    let deadline = match plan.amount {
        Amount::Duration(d) => Some(start + d),
        Amount::Requests(_) => None,
    };
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for _ in 0..workers {
        let (client, plan, sessions, bar, next) =
            (client.clone(), Arc::clone(plan), Arc::clone(sessions), bar.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= sessions.len() || deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
                mine.push(play(&client, &plan, &sessions, i, start, &bar).await);
            }
            mine
        });
    }
    tasks.join_all().await.into_iter().flatten().collect()
}

/// Records in session order, turn by turn, each indexed by its place in the whole run.
fn outcome(mut played: Vec<Played>, first_turn: &[usize]) -> SessionsOutcome {
    played.sort_by_key(|p| p.session);
    let sessions_cut = played.iter().filter(|p| p.not_sent > 0).count();
    let turns_not_sent = played.iter().map(|p| p.not_sent).sum();
    let mut records = Vec::new();
    for p in played {
        for (t, mut r) in p.records.into_iter().enumerate() {
            r.place.index = first_turn[p.session] + t;
            records.push(r);
        }
    }
    SessionsOutcome { records, sessions_cut, turns_not_sent }
}

async fn play(
    client: &reqwest::Client,
    plan: &LevelPlan,
    sessions: &[Session],
    i: usize,
    start: Instant,
    bar: &ProgressBar,
) -> Played {
    let session = &sessions[i];
    // A conversation stays on one endpoint, where its KV is.
    let to = plan.endpoints.targets.pick();
    let mut history = Vec::new();
    let mut records = Vec::with_capacity(session.turns.len());
    for (t, turn) in session.turns.iter().enumerate() {
        if turn.delay_ms > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(turn.delay_ms / 1000.0)).await;
        }
        if let Some(recorded) = &turn.recorded {
            let record = send_recorded(client, plan, session, turn, recorded, to, start).await;
            bar.inc(1);
            let completed = record.status == Status::Completed;
            records.push(record);
            if !completed {
                let not_sent = session.turns.len() - t - 1;
                bar.inc(not_sent as u64);
                return Played { session: i, records, not_sent };
            }
            continue;
        }
        history.extend(turn.messages.iter().cloned());
        // Tool workloads: the turn, then a round per reply that calls tools, up to the limit.
        let rounds = plan.body.tools.as_ref().map_or(1, |tools| tools.max_rounds);
        for round in 1..=rounds {
            let mut spec = RequestSpec::new(PromptSpec::Messages(history.clone()), turn.max_tokens);
            spec.model = plan.body.model_mix.as_ref().map(|mix| mix.pick_for(&session.id));
            // `--final-schema`: every round may call tools or give the typed answer.
            spec.constraint = plan.body.tools.as_ref().and_then(|t| t.final_answer.clone());
            if let Some(recorder) = &plan.save_sessions {
                recorder.save(&session.id, &spec, plan.body.tools.as_deref());
            }
            // A turn is "scheduled" when its conversation is ready to send it.
            let scheduled_ms = ms(start.elapsed());
            let mut record = plan.send(client, &spec, 0, to, start, scheduled_ms).await;
            record.place.session = Some(Arc::clone(&session.id));
            record.place.turn = Some(t as u32 + 1);
            if round == 1 {
                bar.inc(1);
            }
            let completed = record.status == Status::Completed;
            let calls = std::mem::take(&mut record.reply.tool_calls);
            let tools = plan.body.tools.as_ref();
            match tools.filter(|_| completed && !calls.is_empty()) {
                Some(tools) => history.extend(tools.round_messages(&record.reply.text, &calls, round)),
                None => history.push(json!({"role": "assistant", "content": record.reply.text})),
            }
            if tools.is_some() {
                record.place.round = Some(round);
            }
            records.push(record);
            if !completed {
                // The conversation cannot go on without a reply; what it never sent is disclosed.
                let not_sent = session.turns.len() - t - 1;
                bar.inc(not_sent as u64);
                return Played { session: i, records, not_sent };
            }
            if calls.is_empty() {
                break;
            }
        }
    }
    Played { session: i, records, not_sent: 0 }
}

/// A recorded request, sent as it was recorded: the reply does not enter any history.
async fn send_recorded(
    client: &reqwest::Client,
    plan: &LevelPlan,
    session: &Session,
    turn: &Turn,
    recorded: &RecordedTurn,
    to: usize,
    start: Instant,
) -> RequestRecord {
    let mut spec = RequestSpec::new(PromptSpec::Messages(turn.messages.clone()), turn.max_tokens);
    spec.model = plan.body.model_mix.as_ref().map(|mix| mix.pick_for(&session.id));
    spec.tools = recorded.tools.clone();
    spec.constraint = recorded.answer.clone();
    if let Some(recorder) = &plan.save_sessions {
        recorder.save(&session.id, &spec, spec.tools(&plan.body).map(|t| &**t));
    }
    let mut record = plan.send(client, &spec, 0, to, start, ms(start.elapsed())).await;
    record.place.session = Some(Arc::clone(&session.id));
    record.place.turn = Some(recorded.turn);
    record.place.round = recorded.tools.is_some().then_some(recorded.round);
    record.reply.tool_calls.clear();
    record
}
