//! The public handle: starts the engine thread and turns requests into streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use llama_cpp_2::model::LlamaModel;

use crate::config::{EngineConfig, Speculative};
use crate::control::EngineControl;
use crate::cost::wait_forecast::Forecast;
use crate::error::EngineError;
use crate::queue::{PushError, WaitQueue};
use crate::request::constraint::GrammarCompiler;
use crate::request::pending::{PendingRequest, Queueing, StopRules};
use crate::request::thinking::ThinkingPlan;
use crate::runtime::llama::{grammar_tok_env, load_model, load_weights, LlamaExecutor, LlamaModelHandle};
use crate::runtime::llama_draft::DraftContext;
use crate::runtime::{Executor, TokenId, Tokenizer};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::speculation::draft_lengths::FairnessGuard;
use crate::stats::EngineStats;
use crate::supervise::run_supervised;

use rillm_backend::Rejected;
use rillm_backend::RequestStream;
use rillm_backend::{ChoiceControls, Constraint, FinishReason, GenerateRequest, Prompt};

/// `submit` refuses a request predicted to wait more than this many times `--max-queue-ms`;
/// between the bound and this, the head of the queue decides (`Scheduler::refused_at_head`).
const ADMISSION_SLACK: f64 = 1.5;

/// How long a flush may wait for the engine thread: it flushes between steps, and an idle
/// one wakes every half second.
const FLUSH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A running engine. Cheap to clone; the engine stops when the last clone is dropped or
/// [`Engine::shutdown`] is called.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    tokenizer: Arc<dyn Tokenizer>,
    queue: Arc<WaitQueue<PendingRequest>>,
    stats: Arc<EngineStats>,
    /// Structured outputs' compiler and cache; used on callers' threads.
    grammars: GrammarCompiler,
    ctx_per_sequence: u32,
    /// `--max-queue-ms`, and the wait forecast the engine thread publishes for it.
    queue_limit: Option<QueueLimit>,
    prefix_caching: bool,
    model_name: String,
    architecture: String,
    tokenizer_info: rillm_backend::TokenizerInfo,
    next_id: AtomicU64,
    /// Work for the engine thread besides requests.
    control: Arc<EngineControl>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Engine {
    /// Loads the model, creates the context and starts the engine thread. Returns once the
    /// engine can take requests, or with the reason it cannot.
    pub fn start(config: EngineConfig) -> Result<Self, EngineError> {
        let config = config.normalized();
        let model = load_model(&config)?;
        Self::start_loaded(model, config)
    }

    /// [`Engine::start`] on a model already loaded (`start_backend` reads its GGUF first).
    pub(crate) fn start_loaded(model: Arc<LlamaModelHandle>, config: EngineConfig) -> Result<Self, EngineError> {
        let config = config.normalized();
        let started = Instant::now();
        let draft_model = match (config.speculation.mode, &config.speculation.draft_model_path) {
            (Speculative::Draft, Some(path)) => Some(load_weights(path, config.gpu_layers)?),
            (Speculative::Draft, None) => {
                return Err(EngineError::Config("speculative decoding with a draft model needs its path".into()))
            }
            _ => None,
        };
        // The grammar compiler reads the whole vocabulary (llguidance's token trie and
        // slices) while the engine thread creates the context (llama.cpp clears its KV
        // buffer page by page): side by side, not one after the other.
        let grammars = {
            let model = Arc::clone(&model);
            std::thread::Builder::new()
                .name("rillm-grammars".into())
                .spawn(move || {
                    let building = Instant::now();
                    (GrammarCompiler::new(&grammar_tok_env(&model)), building.elapsed())
                })
                .map_err(|e| EngineError::Thread(e.to_string()))?
        };
        let queue = Arc::new(
            WaitQueue::new(config.max_waiting, config.max_running).weighted(|r: &PendingRequest| r.n as usize),
        );
        let forecast = Arc::new(Forecast::new(0));
        let control = Arc::new(EngineControl::default());
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let shared =
            EngineShared { queue: Arc::clone(&queue), forecast: Arc::clone(&forecast), control: Arc::clone(&control) };
        let thread =
            Mutex::new(Some(spawn_engine_thread(Arc::clone(&model), config.clone(), shared, draft_model, ready_tx)?));
        let ready = ready_rx.recv().map_err(|_| EngineError::Thread("the engine thread died while starting".into()));
        let built = match grammars.join() {
            Ok((Ok(grammars), took)) => Ok((grammars, took)),
            Ok((Err(e), _)) => Err(EngineError::Backend(format!("building the grammar compiler: {e}"))),
            Err(_) => Err(EngineError::Thread("building the grammar compiler panicked".into())),
        };
        let ((stats, ctx_per_sequence), (grammars, grammars_took)) = match (ready.and_then(|r| r), built) {
            (Ok(ready), Ok(built)) => (ready, built),
            (Err(e), _) | (Ok(_), Err(e)) => {
                // The engine thread, if it started, stops before the error is returned.
                queue.close();
                crate::supervise::join_engine_thread(&thread);
                return Err(e);
            }
        };
        tracing::info!(
            model = %model.name,
            architecture = %model.architecture,
            ctx_per_sequence,
            max_running = config.max_running,
            threads = config.threads,
            start_ms = started.elapsed().as_millis() as u64,
            grammar_compiler_ms = grammars_took.as_millis() as u64,
            "engine ready"
        );
        Ok(Self {
            inner: Arc::new(Inner {
                model_name: model.name.clone(),
                architecture: model.architecture.clone(),
                tokenizer_info: model.tokenizer_info.clone(),
                tokenizer: model,
                queue,
                stats,
                grammars,
                ctx_per_sequence,
                queue_limit: config.max_queue_ms.map(|limit_ms| QueueLimit { limit_ms, forecast }),
                prefix_caching: config.prefix_caching,
                next_id: AtomicU64::new(1),
                control,
                thread,
            }),
        })
    }

    /// Validates and queues a request. Tokenizing happens here, on the caller's thread.
    pub fn submit(&self, request: GenerateRequest) -> Result<RequestStream, Rejected> {
        let inner = &self.inner;
        if inner.queue.is_closed() {
            return Err(self.closed_reason());
        }
        // Full is known without tokenizing: a flood of huge prompts is refused for the cost
        // of a lock, not of tokenizing each (the push below checks again).
        if inner.queue.is_full() {
            return Err(Rejected::QueueFull { capacity: inner.queue.capacity() });
        }
        let max_running = inner.queue.slots();
        if request.n == 0 || request.n as usize > max_running {
            return Err(Rejected::TooManyChoices { n: request.n, max: max_running as u32 });
        }
        let vocab = inner.tokenizer.vocab_size();
        check_field_tokens("logit_bias", request.sampling.logit_bias.iter().map(|b| b.0), vocab)?;
        check_field_tokens("stop_token_ids", request.stop_token_ids.iter().copied(), vocab)?;
        check_field_tokens("allowed_token_ids", request.sampling.allowed_token_ids.iter().copied(), vocab)?;
        let mut prompt = self.tokenize_prompt(&request.prompt)?;
        if prompt.is_empty() {
            return Err(Rejected::EmptyPrompt);
        }
        let context = inner.ctx_per_sequence as usize;
        if let Some(keep) = request.truncate_prompt_tokens {
            let keep = (keep as usize).min(context);
            prompt.drain(..prompt.len().saturating_sub(keep));
        }
        let constrained = request.constraint.is_some();
        let thinking =
            request.reasoning.map(|r| ThinkingPlan::for_prompt(&r, &mut prompt, constrained, inner.tokenizer.as_ref()));
        let max_tokens = match request.max_tokens {
            // The prompt is computed (and scored, or cached for a later request), nothing more.
            Some(0) => 0,
            Some(n) => n as usize,
            None => context.saturating_sub(prompt.len()).max(1),
        };
        if prompt.len() + max_tokens > context {
            return Err(Rejected::ContextOverflow { prompt_tokens: prompt.len(), max_tokens, context });
        }
        // Compiled here, on the caller's thread: a first-seen schema costs milliseconds.
        let constraint = match &request.constraint {
            Some(c) => Some(inner.grammars.sequence_constraint(c, &inner.stats.constraints)?),
            None => None,
        };
        let mut expected_prefill = prompt.len();
        let mut forecast_ms = None;
        if let Some(QueueLimit { limit_ms, forecast }) = &inner.queue_limit {
            let limit_ms = *limit_ms;
            let ahead = inner.queue.map_waiting(|p| p.queueing.expected_prefill);
            let outlook = forecast.read();
            expected_prefill -= outlook.cached_estimate(&prompt);
            let predicted = outlook.first_token_ms(&ahead, expected_prefill, Instant::now());
            // Refused at once only when clearly too late: the forecast errs both ways by a few
            // hundred milliseconds, and a request admitted wrongly is refused at the head of
            // the queue on what it really waited, before any work is done for it.
            if predicted > limit_ms as f64 * ADMISSION_SLACK {
                return Err(Rejected::WouldWaitTooLong { predicted_ms: predicted as u64, limit_ms });
            }
            forecast_ms = Some(predicted);
        }
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        // The forecast above may be wrong: the scheduler checks the bound again when the
        // request reaches the head of the queue, with what it actually waited.
        let (started, start_signal) = inner.queue_limit.as_ref().map(|_| tokio::sync::oneshot::channel()).unzip();
        let prompt_tokens = prompt.len();
        let controls = ChoiceControls::new(request.n);
        let pending = PendingRequest {
            id,
            index: 0,
            n: request.n,
            prompt,
            max_tokens: max_tokens as u32,
            sampling: request.sampling,
            stops: StopRules {
                stop: request.stop,
                include_stop_str: request.include_stop_str,
                stop_token_ids: request.stop_token_ids,
                min_tokens: request.min_tokens,
                ignore_eos: request.ignore_eos,
            },
            constraint,
            thinking,
            logprobs: request.logprobs,
            prompt_logprobs: request.prompt_logprobs,
            queueing: Queueing { forecast_ms, started, ..Queueing::now(expected_prefill) },
            events,
            controls: Arc::clone(&controls),
        };
        match inner.queue.push(pending) {
            Ok(()) => {
                inner.stats.set_waiting(inner.queue.len());
                let stream = RequestStream::new(id, prompt_tokens, receiver).controlled(controls);
                Ok(match start_signal {
                    Some(signal) => stream.refusable(signal),
                    None => stream,
                })
            }
            Err(PushError::Full(_)) => Err(Rejected::QueueFull { capacity: inner.queue.capacity() }),
            Err(PushError::Closed(_)) => Err(self.closed_reason()),
        }
    }

    /// Why a closed queue refuses: a fault, or an orderly shutdown.
    fn closed_reason(&self) -> Rejected {
        match self.inner.stats.failure() {
            Some(reason) => Rejected::EngineFailed(reason.to_string()),
            None => Rejected::ShuttingDown,
        }
    }

    /// Forgets every cached prefix no running sequence uses (`Backend::flush_prefix_cache`),
    /// once the engine thread gets to it between two steps.
    pub fn flush_prefix_cache(&self) -> Result<rillm_backend::PrefixCacheFlush, Rejected> {
        if self.inner.queue.is_closed() {
            return Err(self.closed_reason());
        }
        let answered = self.inner.control.ask_flush();
        answered.recv_timeout(FLUSH_WAIT).map_err(|_| self.closed_reason())
    }

    /// Whether `constraint` compiles (`Backend::check_constraint`); a compiled one is cached.
    pub fn check_constraint(&self, constraint: &Constraint) -> Result<(), Rejected> {
        let inner = &self.inner;
        inner.grammars.matcher(constraint, &inner.stats.constraints).map(drop)
    }

    /// Token ids of a prompt exactly as `submit` would feed them to the model.
    pub fn tokenize_prompt(&self, prompt: &Prompt) -> Result<Vec<u32>, Rejected> {
        let tokenizer = &self.inner.tokenizer;
        match prompt {
            // Raw text is the caller's own prompt: its special-token text is honoured.
            Prompt::Text(text) => Ok(tokenizer.tokenize(text, true, true)),
            Prompt::Tokens(tokens) => {
                check_vocabulary(tokens, tokenizer.vocab_size())?;
                Ok(tokens.clone())
            }
            Prompt::Chat { messages, tools, options } => {
                let template = tokenizer
                    .chat_template()
                    .ok_or_else(|| Rejected::InvalidRequest("this model has no chat template".into()))?;
                let segments = template
                    .render_segments(messages, tools, options)
                    .map_err(|e| Rejected::InvalidRequest(format!("chat template: {e}")))?;
                // Templates that emit BOS themselves must not get a second one.
                let bos = template.bos_token();
                let has_bos =
                    !bos.is_empty() && segments.first().is_some_and(|s| !s.content && s.text.starts_with(bos));
                let mut tokens = Vec::new();
                for (i, segment) in segments.iter().enumerate() {
                    let add_bos = i == 0 && !has_bos;
                    tokens.extend(tokenizer.tokenize(&segment.text, add_bos, !segment.content));
                }
                Ok(tokens)
            }
        }
    }

    /// Token ids of plain text, with or without the model's BOS.
    pub fn tokenize_text(&self, text: &str, add_special: bool) -> Vec<u32> {
        self.inner.tokenizer.tokenize(text, add_special, true)
    }

    /// Text of `tokens`, decoded as one piece; ids outside the vocabulary are refused
    /// (llama.cpp does not check them).
    pub fn detokenize(&self, tokens: &[u32]) -> Result<String, Rejected> {
        detokenize_with(self.inner.tokenizer.as_ref(), tokens)
    }

    pub fn stats(&self) -> &EngineStats {
        &self.inner.stats
    }

    /// The model's name, from its file name (what `/v1/models` lists).
    pub fn model_name(&self) -> &str {
        &self.inner.model_name
    }

    /// The special tokens and chat template, for clients that tokenize for themselves.
    pub fn tokenizer_info(&self) -> &rillm_backend::TokenizerInfo {
        &self.inner.tokenizer_info
    }

    /// `general.architecture` from the GGUF (llama, qwen2, ...).
    pub fn architecture(&self) -> &str {
        &self.inner.architecture
    }

    /// Whether prompts' prefixes are reused (`--no-prefix-cache` turns it off).
    pub fn prefix_caching(&self) -> bool {
        self.inner.prefix_caching
    }

    pub fn ctx_per_sequence(&self) -> u32 {
        self.inner.ctx_per_sequence
    }

    /// Stops taking requests, cancels running and waiting ones and joins the engine thread.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

/// What the engine thread shares with the callers' side.
struct EngineShared {
    queue: Arc<WaitQueue<PendingRequest>>,
    forecast: Arc<Forecast>,
    control: Arc<EngineControl>,
}

/// What the engine thread says once its context exists: its stats and cells per sequence.
type Ready = Result<(Arc<EngineStats>, u32), EngineError>;

/// Starts the engine thread: it creates the context (and the draft model's), says so on
/// `ready` (or why it could not), then runs the scheduler until the queue closes.
fn spawn_engine_thread(
    model: Arc<LlamaModelHandle>,
    config: EngineConfig,
    shared: EngineShared,
    draft_model: Option<LlamaModel>,
    ready: mpsc::SyncSender<Ready>,
) -> Result<JoinHandle<()>, EngineError> {
    let spawned = std::thread::Builder::new().name("rillm-engine".into()).spawn(move || {
        let executor = LlamaExecutor::new(&model, &config).and_then(|executor| match &draft_model {
            Some(draft) => Ok(executor.with_draft(DraftContext::new(draft, &model.model, &config)?)),
            None => Ok(executor),
        });
        let executor = match executor {
            Ok(executor) => executor,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let total_cells = u64::from(executor.ctx_per_sequence()) * config.max_running as u64;
        let stats = Arc::new(EngineStats::new(total_cells));
        let _ = ready.send(Ok((Arc::clone(&stats), executor.ctx_per_sequence())));
        let tokenizer: Arc<dyn Tokenizer> = Arc::clone(&model) as Arc<dyn Tokenizer>;
        let EngineShared { queue, forecast, control } = shared;
        let scheduler = Scheduler::new(
            executor,
            tokenizer,
            Arc::clone(&queue),
            Arc::clone(&stats),
            forecast,
            scheduler_config(&config),
        )
        .controlled(control);
        let scheduler = match (&config.inherit.prefixes, &model.fingerprint) {
            (Some(kept), Some(fingerprint)) => scheduler.keeping(kept, fingerprint.clone()),
            _ => scheduler,
        };
        run_supervised(|| scheduler.run(), &queue, &stats);
    });
    spawned.map_err(|e| EngineError::Thread(e.to_string()))
}

/// The scheduler's settings from the engine's.
fn scheduler_config(config: &EngineConfig) -> SchedulerConfig {
    SchedulerConfig {
        max_running: config.max_running,
        step_budget: config.prefill_chunk,
        prefix_caching: config.prefix_caching,
        host_cache_bytes: config.host_cache_bytes,
        forecast_prefixes: config.max_queue_ms.is_some(),
        max_queue_ms: config.max_queue_ms,
        speculative: config.speculation.mode != Speculative::Off,
        draft_tokens: (config.speculation.mode == Speculative::Draft)
            .then_some((config.speculation.draft_min, config.speculation.draft_max)),
        tpot_slo_ms: config.tpot_slo_ms,
        draft_guard: FairnessGuard {
            max_slowdown: config.speculation.max_slowdown,
            tpot_ms: config.tpot_slo_ms.map(f64::from),
        },
        fixed_step_prices: config.fixed_step_prices,
    }
}

/// llama.cpp does not check token ids: one outside the vocabulary reads past its tables.
pub(crate) fn check_vocabulary(tokens: &[u32], vocab: u32) -> Result<(), Rejected> {
    match tokens.iter().enumerate().find(|(_, &t)| t >= vocab) {
        Some((i, bad)) => Err(Rejected::InvalidRequest(format!(
            "token {bad} at index {i} is outside the vocabulary of {vocab} tokens"
        ))),
        None => Ok(()),
    }
}

/// Text of `tokens`, decoded as one piece, by `tokenizer`; ids outside its vocabulary are
/// refused. Shared by the generating and the embedding engine.
pub(crate) fn detokenize_with(tokenizer: &dyn Tokenizer, tokens: &[u32]) -> Result<String, Rejected> {
    check_vocabulary(tokens, tokenizer.vocab_size())?;
    let mut bytes = Vec::new();
    for &t in tokens {
        tokenizer.append_token_bytes(t, &mut bytes);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// `logit_bias` and `stop_token_ids` name tokens by id: each must be in the vocabulary
/// (llama.cpp would read past its logits).
fn check_field_tokens(
    param: &'static str,
    mut tokens: impl Iterator<Item = TokenId>,
    vocab: u32,
) -> Result<(), Rejected> {
    match tokens.find(|&t| t >= vocab) {
        Some(bad) => Err(Rejected::InvalidField {
            param,
            message: format!("`{param}` names token {bad}, outside the vocabulary of {vocab} tokens"),
        }),
        None => Ok(()),
    }
}

struct QueueLimit {
    limit_ms: u64,
    forecast: Arc<Forecast>,
}

impl Inner {
    fn shutdown(&self) {
        for request in self.queue.close() {
            request.finish_unstarted(FinishReason::Cancelled, None);
        }
        crate::supervise::join_engine_thread(&self.thread);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
