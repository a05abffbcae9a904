//! A backend that plays a script instead of running a model, for the server's tests.
//!
//! It behaves like the engine where the server can tell: one "engine thread" advances
//! every running request by one token per step, at a fixed step time; requests beyond the
//! slots wait; beyond the waiting places they are refused. What a real model cannot be
//! made to do on demand is scripted: a decode failure after so many tokens, and the engine
//! thread panicking (then, as in the engine, waiting requests get an error, running
//! streams end without a final event, new requests are refused and health says why).
//!
//! Text is one word per token: the reply to any prompt is `w0 w1 w2 ...`, token ids
//! 0, 1, 2, ...; a prompt's tokens are its whitespace-separated words.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

use crate::{
    Backend, Completion, FinishReason, GenerateRequest, Health, Prompt, Rejected, RequestStream, ServerTimings,
    StatsSnapshot, StreamEvent, TokenId, Usage,
};

/// What the scripted engine does.
#[derive(Debug, Clone)]
pub struct Script {
    /// Time per step; every running request gets one token per step.
    pub step: Duration,
    /// Tokens of a reply that runs to its end (`max_tokens` caps it).
    pub reply_tokens: u32,
    pub slots: usize,
    pub max_waiting: usize,
    /// Each request fails with a decode error after this many tokens.
    pub fail_after_tokens: Option<u32>,
    pub context_length: u32,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            step: Duration::from_millis(5),
            reply_tokens: 8,
            slots: 4,
            max_waiting: 8,
            fail_after_tokens: None,
            context_length: 2048,
        }
    }
}

pub struct ScriptedBackend {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    script: Script,
    state: Mutex<State>,
    /// Set by [`ScriptedBackend::panic_engine`]: the engine thread panics at its next step.
    panic_requested: AtomicBool,
}

#[derive(Default)]
struct State {
    waiting: VecDeque<Job>,
    running: Vec<Job>,
    next_id: u64,
    closed: bool,
    failure: Option<String>,
    finished: u64,
    generation_tokens: u64,
}

struct Job {
    prompt_tokens: u32,
    max_tokens: u32,
    generated: u32,
    submitted: Instant,
    events: UnboundedSender<StreamEvent>,
}

impl ScriptedBackend {
    pub fn start(script: Script) -> Arc<Self> {
        let shared = Arc::new(Shared { script, state: Mutex::default(), panic_requested: AtomicBool::new(false) });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("scripted-engine".into())
                .spawn(move || shared.run())
                .expect("spawn the scripted engine thread")
        };
        Arc::new(Self { shared, thread: Mutex::new(Some(thread)) })
    }

    /// Makes the engine thread panic at its next step, as a bug in the engine would.
    pub fn panic_engine(&self) {
        self.shared.panic_requested.store(true, Ordering::SeqCst);
    }

    fn words(prompt: &Prompt) -> u32 {
        match prompt {
            Prompt::Text(text) => text.split_whitespace().count() as u32,
            Prompt::Chat { messages, .. } => {
                messages.iter().map(|m| 1 + m.content.split_whitespace().count() as u32).sum()
            }
            Prompt::Tokens(tokens) => tokens.len() as u32,
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.steps())) {
            let reason = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            let mut state = self.lock();
            state.closed = true;
            state.failure = Some(reason.clone());
            // Running streams end without a final event, as the engine's do when its
            // scheduler unwinds; waiting ones are told why.
            state.running.clear();
            for job in state.waiting.drain(..) {
                job.finish(FinishReason::Error, Some(format!("the engine stopped: {reason}")));
            }
        }
    }

    fn steps(&self) {
        loop {
            std::thread::sleep(self.script.step);
            if self.panic_requested.load(Ordering::SeqCst) {
                panic!("scripted engine panic");
            }
            let mut state = self.lock();
            if state.closed {
                let state = &mut *state;
                for job in state.running.drain(..).chain(state.waiting.drain(..)) {
                    job.finish(FinishReason::Cancelled, None);
                }
                return;
            }
            while state.running.len() < self.script.slots {
                let Some(job) = state.waiting.pop_front() else { break };
                state.running.push(job);
            }
            let fail_after = self.script.fail_after_tokens;
            let mut finished = 0;
            let mut tokens = 0;
            state.running.retain_mut(|job| {
                if job.events.is_closed() {
                    return false;
                }
                if fail_after == Some(job.generated) {
                    finished += 1;
                    job.finish(FinishReason::Error, Some("scripted decode failure".into()));
                    return false;
                }
                let id = job.generated as TokenId;
                let text = if id == 0 { "w0".to_string() } else { format!(" w{id}") };
                let _ =
                    job.events.send(StreamEvent::Text { index: 0, text, token_ids: vec![id], logprobs: Vec::new() });
                job.generated += 1;
                tokens += 1;
                if job.generated >= job.max_tokens {
                    finished += 1;
                    job.finish(FinishReason::Length, None);
                    return false;
                }
                true
            });
            state.finished += finished;
            state.generation_tokens += tokens;
        }
    }
}

impl Job {
    fn finish(&self, finish_reason: FinishReason, error: Option<String>) {
        let _ = self.events.send(StreamEvent::Finished(Completion {
            index: 0,
            finish_reason,
            usage: Usage { prompt_tokens: self.prompt_tokens, completion_tokens: self.generated, ..Usage::default() },
            timings: ServerTimings {
                queue_ms: 0.0,
                prefill_ms: 0.0,
                ttft_ms: 0.0,
                decode_ms: self.submitted.elapsed().as_secs_f64() * 1000.0,
            },
            error,
        }));
    }
}

impl Backend for ScriptedBackend {
    fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected> {
        let prompt_tokens = Self::words(&request.prompt);
        if prompt_tokens == 0 {
            return Err(Rejected::EmptyPrompt);
        }
        // A script has one stream of words and no model to score a prompt with.
        if request.n != 1 || request.prompt_logprobs.is_some() {
            return Err(Rejected::InvalidRequest(
                "the scripted backend generates one choice and scores no prompt".into(),
            ));
        }
        let script = &self.shared.script;
        let max_tokens = request.max_tokens.unwrap_or(script.reply_tokens).min(script.reply_tokens);
        let mut state = self.shared.lock();
        if let Some(reason) = &state.failure {
            return Err(Rejected::EngineFailed(reason.clone()));
        }
        if state.closed {
            return Err(Rejected::ShuttingDown);
        }
        if state.running.len() + state.waiting.len() >= script.slots + script.max_waiting {
            return Err(Rejected::QueueFull { capacity: script.max_waiting });
        }
        state.next_id += 1;
        let (events, receiver) = unbounded_channel();
        state.waiting.push_back(Job { prompt_tokens, max_tokens, generated: 0, submitted: Instant::now(), events });
        Ok(RequestStream::new(state.next_id, prompt_tokens as usize, receiver))
    }

    fn tokenize(&self, prompt: &Prompt, _add_special: bool) -> Result<Vec<TokenId>, Rejected> {
        Ok((0..Self::words(prompt)).collect())
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<String, Rejected> {
        Ok(tokens.iter().map(|t| format!("w{t}")).collect::<Vec<_>>().join(" "))
    }

    fn model_name(&self) -> &str {
        "scripted"
    }

    fn context_length(&self) -> u32 {
        self.shared.script.context_length
    }

    fn stats(&self) -> StatsSnapshot {
        let state = self.shared.lock();
        StatsSnapshot {
            running: state.running.len() as u64,
            waiting: state.waiting.len() as u64,
            kv_cells_used: 0,
            kv_cells_cached: 0,
            kv_cells_total: 0,
            steps: 0,
            prompt_tokens: 0,
            prompt_tokens_computed: 0,
            generation_tokens: state.generation_tokens,
            finished: state.finished,
            cancelled: 0,
            sequences_moved: 0,
            prefix: Default::default(),
            constraints: Default::default(),
            speculation: Default::default(),
        }
    }

    fn health(&self) -> Health {
        let state = self.shared.lock();
        match (&state.failure, state.closed) {
            (Some(reason), _) => Health::Failed(reason.clone()),
            (None, true) => Health::Failed("the engine was shut down".into()),
            (None, false) => Health::Ok,
        }
    }

    fn shutdown(&self) {
        self.shared.lock().closed = true;
        let thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}
