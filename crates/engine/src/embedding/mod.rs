//! The engine for models that do not generate: embedding models and rerankers.
//!
//! It shares the generating engine's parts where the job is the same (the model loader,
//! the bounded waiting queue that makes 429s, the statistics and health, the supervision
//! that turns a panic into errors) and has its own loop where it is not: no slots, no KV
//! kept between requests, no sampling. Each step packs whole inputs from as many requests
//! as fit into one decode (`jobs`), runs it (`runner`) and hands each request its vectors
//! once all of its inputs are computed (`worker`).

mod forecast;
mod jobs;
pub(crate) mod pooling;
mod runner;
mod worker;

use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use rillm_backend::{
    EmbedInput, EmbedRequest, EmbedResponse, ModelTask, Prompt, Rejected, StatsSnapshot, TokenId, TokenizerInfo,
};

use crate::config::EngineConfig;
use crate::engine::{check_vocabulary, detokenize_with};
use crate::error::EngineError;
use crate::queue::{PushError, WaitQueue};
use crate::runtime::llama::LlamaModelHandle;
use crate::runtime::Tokenizer;
use crate::stats::EngineStats;
use crate::supervise::run_supervised_with;
use forecast::{EmbedForecast, ADMISSION_SLACK};
use jobs::EmbedJob;
pub use pooling::Pooling;
use runner::{BatchLimits, LlamaPoolRunner};

/// A running embedding engine. Cheap to clone; it stops when the last clone is dropped or
/// [`Embedder::shutdown`] is called.
#[derive(Clone)]
pub struct Embedder {
    inner: Arc<Inner>,
}

struct Inner {
    model: Arc<LlamaModelHandle>,
    queue: Arc<WaitQueue<EmbedJob>>,
    stats: Arc<EngineStats>,
    pooling: Pooling,
    /// Most tokens in one input.
    context: u32,
    /// `--max-queue-ms`, and the forecast it is checked against.
    queue_limit_ms: Option<u64>,
    forecast: Arc<EmbedForecast>,
    width: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Embedder {
    /// Starts the engine thread on a loaded model. Batches hold up to `max_running` inputs
    /// of `prefill_chunk` tokens together, or one input up to the context alone.
    pub(crate) fn start(
        model: Arc<LlamaModelHandle>,
        config: &EngineConfig,
        pooling: Pooling,
    ) -> Result<Self, EngineError> {
        let context = config.ctx_per_sequence.min(model.model.n_ctx_train().max(16));
        let limits = BatchLimits {
            max_inputs: config.max_running,
            target_tokens: config.prefill_chunk,
            max_tokens: (context as usize).max(config.prefill_chunk),
        };
        let width = match pooling {
            Pooling::Rank => model.model.n_cls_out() as usize,
            _ => model.model.n_embd_out().max(model.model.n_embd()) as usize,
        };
        let queue = Arc::new(WaitQueue::new(config.max_waiting, config.max_running));
        let stats = Arc::new(EngineStats::new(0));
        let forecast = Arc::new(EmbedForecast::default());
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let thread = {
            let (model, queue, stats, threads) =
                (Arc::clone(&model), Arc::clone(&queue), Arc::clone(&stats), config.threads);
            let forecast = Arc::clone(&forecast);
            std::thread::Builder::new()
                .name("rillm-embedder".into())
                .spawn(move || {
                    let mut runner = match LlamaPoolRunner::new(&model.model, pooling, limits, threads) {
                        Ok(runner) => runner,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    run_supervised_with(
                        || worker::run_embedding_loop(&mut runner, &queue, &stats, &forecast, limits),
                        &queue,
                        &stats,
                        EmbedJob::fail,
                    );
                })
                .map_err(|e| EngineError::Thread(e.to_string()))?
        };
        ready_rx.recv().map_err(|_| EngineError::Thread("the embedding thread died while starting".into()))??;
        tracing::info!(
            model = %model.name,
            architecture = %model.architecture,
            ?pooling,
            width,
            context,
            max_inputs = limits.max_inputs,
            batch_tokens = limits.target_tokens,
            max_batch_tokens = limits.max_tokens,
            "embedding engine ready"
        );
        let queue_limit_ms = config.max_queue_ms;
        let thread = Mutex::new(Some(thread));
        let inner = Inner { model, queue, stats, pooling, context, queue_limit_ms, forecast, width, thread };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Tokenizes and queues a request's inputs, or says at once why not.
    pub fn embed(&self, request: EmbedRequest) -> Result<EmbedResponse, Rejected> {
        let inner = &self.inner;
        if inner.queue.is_closed() {
            return Err(self.closed_reason());
        }
        if inner.queue.is_full() {
            return Err(Rejected::QueueFull { capacity: inner.queue.capacity() });
        }
        let inputs = request
            .inputs
            .iter()
            .enumerate()
            .map(|(index, input)| self.input_tokens(index, input, request.truncate_prompt_tokens))
            .collect::<Result<Vec<_>, _>>()?;
        self.check_wait()?;
        let (reply, response) = EmbedResponse::channel();
        match inner.queue.push(EmbedJob::new(inputs, reply)) {
            Ok(()) => {
                inner.stats.set_waiting(inner.queue.len());
                Ok(response)
            }
            Err(PushError::Full(_)) => Err(Rejected::QueueFull { capacity: inner.queue.capacity() }),
            Err(PushError::Closed(_)) => Err(self.closed_reason()),
        }
    }

    /// `--max-queue-ms`: refuses a request predicted to wait well past the bound, before
    /// its first batch, for the work ahead of it at the measured rate.
    fn check_wait(&self) -> Result<(), Rejected> {
        let inner = &self.inner;
        let Some(limit_ms) = inner.queue_limit_ms else { return Ok(()) };
        let waiting: usize = inner.queue.map_waiting(EmbedJob::pending_tokens).iter().sum();
        match inner.forecast.predicted_ms(waiting) {
            Some(predicted) if predicted > limit_ms as f64 * ADMISSION_SLACK => {
                Err(Rejected::WouldWaitTooLong { predicted_ms: predicted as u64, limit_ms })
            }
            _ => Ok(()),
        }
    }

    /// One input's tokens as the model sees them, or why it cannot be embedded.
    fn input_tokens(&self, index: usize, input: &EmbedInput, truncate: Option<u32>) -> Result<Vec<TokenId>, Rejected> {
        let inner = &self.inner;
        let asked = match input {
            EmbedInput::Pair { .. } => ModelTask::Rerank,
            EmbedInput::Text(_) | EmbedInput::Tokens(_) => ModelTask::Embed,
        };
        let served = inner.pooling.task();
        if asked != served {
            return Err(Rejected::WrongTask { served, asked });
        }
        let tokenizer = inner.model.as_ref();
        let mut tokens = match input {
            EmbedInput::Text(text) => tokenizer.tokenize(text, true, false),
            EmbedInput::Tokens(tokens) => {
                check_vocabulary(tokens, tokenizer.vocab_size())
                    .map_err(|refused| input_error(format!("input {index}: {refused}")))?;
                tokens.clone()
            }
            EmbedInput::Pair { query, document } => pair_tokens(tokenizer, query, document),
        };
        if tokens.is_empty() {
            return Err(input_error(format!("input {index} is empty")));
        }
        let context = inner.context as usize;
        match truncate {
            Some(keep) => {
                let keep = (keep as usize).clamp(1, context);
                tokens.drain(..tokens.len().saturating_sub(keep));
            }
            None if tokens.len() > context => {
                return Err(input_error(format!(
                    "input {index} has {} tokens, over the model's context of {context} \
                     (send `truncate_prompt_tokens` to keep its last tokens)",
                    tokens.len()
                )))
            }
            None => {}
        }
        Ok(tokens)
    }

    fn closed_reason(&self) -> Rejected {
        match self.inner.stats.failure() {
            Some(reason) => Rejected::EngineFailed(reason.to_string()),
            None => Rejected::ShuttingDown,
        }
    }

    /// Stops taking requests, fails the waiting and running ones and joins the thread.
    pub fn shutdown(&self) {
        self.inner.shutdown();
    }
}

fn input_error(message: String) -> Rejected {
    Rejected::InvalidField { param: "input", message }
}

/// A cross-encoder's input: the query with the model's special tokens (`[CLS] q [SEP]`),
/// then the document with its closing ones only (`d [SEP]`), as BERT's tokenizer pairs them.
fn pair_tokens(tokenizer: &dyn Tokenizer, query: &str, document: &str) -> Vec<TokenId> {
    let mut tokens = tokenizer.tokenize(query, true, false);
    let mut second = tokenizer.tokenize(document, true, false);
    if second.first().is_some_and(|&t| tokens.first() == Some(&t)) {
        second.remove(0);
    }
    tokens.extend(second);
    tokens
}

impl Inner {
    fn shutdown(&self) {
        for job in self.queue.close() {
            job.fail("the engine is shutting down");
        }
        crate::supervise::join_engine_thread(&self.thread);
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl rillm_backend::Backend for Embedder {
    fn submit(&self, _request: rillm_backend::GenerateRequest) -> Result<rillm_backend::RequestStream, Rejected> {
        Err(Rejected::WrongTask { served: self.inner.pooling.task(), asked: ModelTask::Generate })
    }

    fn tokenize(&self, prompt: &Prompt, add_special: bool) -> Result<Vec<TokenId>, Rejected> {
        let tokenizer = self.inner.model.as_ref();
        match prompt {
            Prompt::Text(text) => Ok(tokenizer.tokenize(text, add_special, false)),
            Prompt::Tokens(tokens) => Ok(tokens.clone()),
            Prompt::Chat { .. } => Err(Rejected::InvalidRequest("this model has no chat template".into())),
        }
    }

    fn detokenize(&self, tokens: &[TokenId]) -> Result<String, Rejected> {
        detokenize_with(self.inner.model.as_ref(), tokens)
    }

    fn model_name(&self) -> &str {
        &self.inner.model.name
    }

    fn context_length(&self) -> u32 {
        self.inner.context
    }

    fn stats(&self) -> StatsSnapshot {
        self.inner.stats.snapshot()
    }

    fn tokenizer_info(&self) -> TokenizerInfo {
        self.inner.model.tokenizer_info.clone()
    }

    fn task(&self) -> ModelTask {
        self.inner.pooling.task()
    }

    fn embedding_width(&self) -> Option<usize> {
        Some(self.inner.width)
    }

    fn embed(&self, request: EmbedRequest) -> Result<EmbedResponse, Rejected> {
        Embedder::embed(self, request)
    }

    fn health(&self) -> rillm_backend::Health {
        self.inner.stats.health()
    }

    fn shutdown(&self) {
        Embedder::shutdown(self);
    }
}
