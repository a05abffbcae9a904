//! The llama.cpp backend, through the `llama-cpp-2` crate.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use llama_cpp_2::token::logit_bias::LlamaLogitBias;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::{LlamaStateSeqFlags, SeqState};

use crate::chat::ChatTemplate;
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::logits::log_softmax::log_softmax_at;
use crate::logits::logit_adjust::LogitAdjust;
use crate::runtime::attention_cost::{
    cpu_prefill_width, widening_pays, PROBE_CACHED, PROBE_NARROW_ROWS, TILE_QUERY_ROWS, WIDE_PREFILL_ROWS,
};
use crate::runtime::llama_context::{backend, slot_context_params};
use crate::runtime::llama_draft::DraftContext;
use crate::runtime::model_fingerprint::model_fingerprint;
use crate::runtime::widening_verdicts::widening_verdict;
use crate::runtime::{BatchToken, DraftWant, Executor, RuntimeError, TokenId, Tokenizer};
use rillm_backend::SamplingParams;
use toktrie::{SimpleVob, TokEnv, TokTrie, TokenizerEnv};

/// The loaded weights and vocabulary; shared by callers (tokenizing) and the engine thread.
pub(crate) struct LlamaModelHandle {
    pub(crate) model: LlamaModel,
    template: Option<ChatTemplate>,
    pub(crate) tokenizer_info: rillm_backend::TokenizerInfo,
    eog_tokens: Vec<TokenId>,
    pub(crate) name: String,
    pub(crate) architecture: String,
    /// The file's identity (`model_fingerprint`), read once at load: it keys the widening
    /// verdict and the kept prefix cache. `None` when the file could not be read again.
    pub(crate) fingerprint: Option<String>,
}

pub(crate) fn load_model(config: &EngineConfig) -> Result<Arc<LlamaModelHandle>, EngineError> {
    let path = &config.model_path;
    let model = load_weights(path, config.gpu_layers)?;
    let meta = |key: &str| model.meta_val_str(key).ok();
    let architecture = meta("general.architecture").unwrap_or_else(|| "unknown".into());
    let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
    let vocab = model.vocab();
    let piece = |t: LlamaToken| String::from_utf8_lossy(&vocab.token_to_piece(t, true, None)).into_owned();
    let template_source = match &config.chat_template {
        Some(source) => Some(source.clone()),
        None => model.meta_val_str("tokenizer.chat_template").ok(),
    };
    let template = match &template_source {
        Some(source) => Some(
            ChatTemplate::new(source, &piece(vocab.bos()), &piece(vocab.eos()))
                .map_err(|e| EngineError::Template(e.to_string()))?,
        ),
        None => None,
    };
    let tokenizer_info = rillm_backend::TokenizerInfo {
        bos_token: Some(piece(vocab.bos())).filter(|p| !p.is_empty()),
        eos_token: Some(piece(vocab.eos())).filter(|p| !p.is_empty()),
        chat_template_thinking: template_source.as_deref().and_then(rillm_backend::TemplateThinking::read),
        chat_template: template_source,
        chat_template_tools: template.as_ref().and_then(ChatTemplate::tool_format),
    };
    let eog_tokens = vocab.tokens().filter(|&t| vocab.is_eog(t)).map(|t| t.0 as TokenId).collect();
    let fingerprint = model_fingerprint(path).ok();
    Ok(Arc::new(LlamaModelHandle { model, template, tokenizer_info, eog_tokens, name, architecture, fingerprint }))
}

/// A GGUF's weights and vocabulary, or an error naming the file and what is wrong with it.
pub(crate) fn load_weights(path: &Path, gpu_layers: u32) -> Result<LlamaModel, EngineError> {
    let model_err = |reason: String| EngineError::Model { path: path.to_path_buf(), reason };
    check_gguf_magic(path).map_err(model_err)?;
    let params = LlamaModelParams::default().with_n_gpu_layers(gpu_layers);
    LlamaModel::load_from_file(backend()?, path, &params).map_err(|e| {
        model_err(format!(
            "llama.cpp could not load it ({e}): the file is corrupt, truncated, or of an \
             architecture this llama.cpp does not support"
        ))
    })
}

/// llama.cpp reports a bad file only as a null pointer; checking the magic first turns the
/// commonest mistake (not a GGUF at all) into a precise message.
fn check_gguf_magic(path: &Path) -> Result<(), String> {
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).map_err(|_| "too short to be a GGUF file".to_string())?;
    if &magic != b"GGUF" {
        return Err(format!("not a GGUF file (starts with {magic:02x?}, expected \"GGUF\")"));
    }
    Ok(())
}

impl Tokenizer for LlamaModelHandle {
    fn tokenize(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let vocab = self.model.vocab();
        vocab.tokenize(text.as_bytes(), add_special, parse_special).into_iter().map(|t| t.0 as TokenId).collect()
    }

    fn append_token_bytes(&self, token: TokenId, out: &mut Vec<u8>) {
        self.model.vocab().token_to_piece_into(LlamaToken(token as i32), out, false, None);
    }

    fn is_end_of_generation(&self, token: TokenId) -> bool {
        self.model.vocab().is_eog(LlamaToken(token as i32))
    }

    fn chat_template(&self) -> Option<&ChatTemplate> {
        self.template.as_ref()
    }

    fn vocab_size(&self) -> u32 {
        self.model.n_vocab().max(0) as u32
    }
}

/// llguidance's view of the model's vocabulary, for constrained decoding. The token trie is
/// llama-cpp-2's (every token's bytes, special tokens marked, the whole end-of-generation
/// set registered); tokenizing goes through the model's own tokenizer, which makes the env
/// canonical. llguidance computes the tokens a grammar forces (jump-forward) only for a
/// canonical env: with llama-cpp-2's approximate one it never forces any.
pub(crate) fn grammar_tok_env(model: &Arc<LlamaModelHandle>) -> TokEnv {
    let trie = LlamaSampler::llguidance_tok_env(&model.model).tok_trie().clone();
    Arc::new(LlamaTokEnv { model: Arc::clone(model), trie })
}

struct LlamaTokEnv {
    model: Arc<LlamaModelHandle>,
    trie: TokTrie,
}

impl TokenizerEnv for LlamaTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        self.model.model.vocab().tokenize(s, false, false).into_iter().map(|t| t.0 as u32).collect()
    }
}

enum SequenceSampler {
    /// Argmax over the logits row: skips building llama.cpp's candidate array.
    Greedy {
        ban_eog: bool,
    },
    Chain(LlamaSampler),
}

/// The llama.cpp context and per-slot samplers. Lives on the engine thread only.
pub(crate) struct LlamaExecutor<'m> {
    model: &'m LlamaModelHandle,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    max_batch_tokens: usize,
    ctx_per_sequence: u32,
    samplers: Vec<Option<SequenceSampler>>,
    /// Short prefills behind cached tokens are widened: attention runs on the CPU (no layers
    /// offloaded) and the start probe found the wide prefill cheaper (`attention_cost`).
    widen_prefills: bool,
    /// Attention runs on the CPU (no layer offloaded): its query tiles shape step costs.
    cpu_attention: bool,
    /// The draft model's context, with `--speculative draft`.
    draft: Option<DraftContext<'m>>,
}

impl<'m> LlamaExecutor<'m> {
    pub(crate) fn new(model: &'m LlamaModelHandle, config: &EngineConfig) -> Result<Self, EngineError> {
        let n_seq = config.max_running as u32;
        let ctx_per_sequence = config.ctx_per_sequence.min(model.model.n_ctx_train().max(16));
        let cpu_attention = config.gpu_layers == 0;
        // A step computes up to `prefill_chunk` tokens, and on CPU attention may widen each
        // sequence's short prefill to `WIDE_PREFILL_ROWS` beyond that (see `attention_cost`);
        // ubatches of 512 (llama.cpp's default) hold eight such prefills side by side.
        let widening = if cpu_attention { config.max_running * WIDE_PREFILL_ROWS } else { 0 };
        let n_batch = u32::try_from(config.prefill_chunk + widening).unwrap_or(u32::MAX);
        let params = slot_context_params(config, ctx_per_sequence, n_batch, n_batch.min(512))?;
        let mut ctx = model
            .model
            .new_context(backend()?, params)
            .map_err(|e| EngineError::Backend(format!("creating the context: {e}")))?;
        let ctx_per_sequence = ctx_per_sequence.min(ctx.n_ctx() / n_seq);
        let max_batch_tokens = ctx.n_batch() as usize;
        let mut batch = LlamaBatch::new(max_batch_tokens, 1);
        let widen_prefills = cpu_attention
            && ctx_per_sequence as usize > PROBE_CACHED + PROBE_NARROW_ROWS
            && max_batch_tokens >= WIDE_PREFILL_ROWS
            && !config.fixed_step_prices
            && widening_verdict(config, model.fingerprint.as_deref(), || {
                probe_widening(&mut ctx, &mut batch, model.model.n_vocab())
            })?;
        Ok(Self {
            model,
            ctx,
            batch,
            max_batch_tokens,
            ctx_per_sequence,
            samplers: (0..n_seq).map(|_| None).collect(),
            widen_prefills,
            cpu_attention,
            draft: None,
        })
    }

    /// Drafts with `draft` from now on (`Executor::draft`).
    pub(crate) fn with_draft(mut self, draft: DraftContext<'m>) -> Self {
        self.draft = Some(draft);
        self
    }
}

/// The most likely token of `logits` that `mask` allows (all where there is none) and is
/// not `banned`.
fn argmax(logits: &[f32], mask: Option<&SimpleVob>, banned: &[TokenId]) -> TokenId {
    let mut best = (None, f32::NEG_INFINITY);
    let mut consider = |i: usize, l: f32| {
        if (best.0.is_none() || l > best.1) && !banned.contains(&(i as TokenId)) {
            best = (Some(i), l);
        }
    };
    match mask {
        Some(mask) => mask.iter_set_entries(|i| {
            if let Some(&l) = logits.get(i) {
                consider(i, l);
            }
        }),
        // Every decode step runs this once a greedy row: a plain pass over the slice.
        None => logits.iter().enumerate().for_each(|(i, &l)| consider(i, l)),
    }
    best.0.unwrap_or(0) as TokenId
}

/// Runs the sampler chain over the tokens the mask allows (all where there is none): the
/// candidates array holds just those, so top-k, top-p, min-p and temperature apply within
/// the constraint.
fn chain_sample(chain: &mut LlamaSampler, logits: &[f32], mask: Option<&SimpleVob>) -> TokenId {
    let mut candidates = Vec::with_capacity(mask.map_or(logits.len(), |m| m.num_set().min(logits.len())));
    // A banned token (`LogitAdjust`'s -inf) is no candidate: a softmax over it alone is NaN.
    let push = |i: usize| {
        if let Some(&l) = logits.get(i).filter(|l| **l > f32::NEG_INFINITY) {
            candidates.push(LlamaTokenData::new(LlamaToken(i as i32), l, 0.0));
        }
    };
    match mask {
        Some(mask) => mask.iter_set_entries(push),
        None => (0..logits.len()).for_each(push),
    }
    if candidates.is_empty() {
        // Everything allowed is banned (a complete grammar before `min_tokens`): its end.
        return argmax(logits, mask, &[]);
    }
    let first = candidates.first().map_or(0, |t| t.id().0);
    let mut candidates = LlamaTokenDataArray::new(candidates, false);
    chain.apply(&mut candidates);
    let token = candidates.selected_token().map_or(first, |t| t.0);
    chain.accept(LlamaToken(token));
    token as TokenId
}

/// Times, on slot 0 of a fresh context, a chat turn's prefill behind its history narrow and
/// widened (`attention_cost`: whether widening pays depends on the CPU), the fastest of
/// `PROBE_RUNS` each, and leaves the slot empty. ~2 s at start on two cores, most of it the
/// history's own prefill.
fn probe_widening(ctx: &mut LlamaContext, batch: &mut LlamaBatch, n_vocab: i32) -> Result<bool, EngineError> {
    const PROBE_RUNS: usize = 3;
    let failed = |e: &dyn std::fmt::Display| EngineError::Backend(format!("timing prefills at start: {e}"));
    let end = PROBE_CACHED + PROBE_NARROW_ROWS;
    let chunk = ctx.n_batch() as usize;
    // Any tokens do: attention's cost depends on how many, not which.
    let mut prefill = |ctx: &mut LlamaContext, from: usize, to: usize| -> Result<f64, EngineError> {
        let _ = ctx.clear_kv_cache_seq(Some(0), Some(from as u32), None);
        batch.clear();
        for pos in from..to {
            let token = LlamaToken((pos as i32 * 7 + 100) % n_vocab.max(1));
            batch.add(token, pos as i32, &[0], pos + 1 == to).map_err(|e| failed(&e))?;
        }
        let started = std::time::Instant::now();
        ctx.decode(batch).map_err(|e| failed(&e))?;
        Ok(started.elapsed().as_secs_f64() * 1000.0)
    };
    for from in (0..PROBE_CACHED).step_by(chunk) {
        prefill(ctx, from, (from + chunk).min(PROBE_CACHED))?;
    }
    let (mut narrow, mut wide) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..PROBE_RUNS {
        narrow = narrow.min(prefill(ctx, PROBE_CACHED, end)?);
        wide = wide.min(prefill(ctx, end - WIDE_PREFILL_ROWS, end)?);
    }
    let _ = ctx.clear_kv_cache_seq(Some(0), None, None);
    let pays = widening_pays(narrow, wide);
    tracing::info!(narrow_ms = narrow, wide_ms = wide, widen = pays, "short prefills behind cached tokens timed");
    Ok(pays)
}

impl Executor for LlamaExecutor<'_> {
    type Snapshot = SeqState;

    fn ctx_per_sequence(&self) -> u32 {
        self.ctx_per_sequence
    }

    fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }

    fn ubatch_rows(&self) -> usize {
        self.ctx.n_ubatch() as usize
    }

    fn attention_tile_rows(&self) -> Option<usize> {
        self.cpu_attention.then_some(TILE_QUERY_ROWS)
    }

    fn prefill_width(&self, cached: usize, left: usize, beside_others: bool) -> usize {
        if self.widen_prefills {
            cpu_prefill_width(cached, left, beside_others)
        } else {
            left
        }
    }

    fn decode(&mut self, tokens: &[BatchToken]) -> Result<(), RuntimeError> {
        let failed = |e: &dyn std::fmt::Display| RuntimeError::Decode(e.to_string());
        self.batch.clear();
        for t in tokens {
            self.batch
                .add(LlamaToken(t.token as i32), t.pos as i32, &[t.seq as i32], t.logits)
                .map_err(|e| failed(&e))?;
        }
        self.ctx.decode(&mut self.batch).map_err(|e| failed(&e))
    }

    fn start_sequence(&mut self, seq: usize, sampling: &SamplingParams, ban_eog: bool) {
        let sampler = if sampling.is_greedy() {
            SequenceSampler::Greedy { ban_eog }
        } else {
            let mut chain = Vec::new();
            if ban_eog {
                let bias: Vec<_> = self
                    .model
                    .eog_tokens
                    .iter()
                    .map(|&t| LlamaLogitBias::new(LlamaToken(t as i32), f32::NEG_INFINITY))
                    .collect();
                chain.push(LlamaSampler::logit_bias(self.model.model.n_vocab(), &bias));
            }
            if sampling.top_k > 0 {
                chain.push(LlamaSampler::top_k(sampling.top_k.min(i32::MAX as u32) as i32));
            }
            if sampling.top_p < 1.0 {
                chain.push(LlamaSampler::top_p(sampling.top_p, 1));
            }
            chain.push(LlamaSampler::temp(sampling.temperature));
            // After temperature, as vLLM applies it: relative to the tempered distribution.
            if sampling.min_p > 0.0 {
                chain.push(LlamaSampler::min_p(sampling.min_p, 1));
            }
            let seed = sampling.seed.unwrap_or_else(rand::random) as u32;
            chain.push(LlamaSampler::dist(seed));
            SequenceSampler::Chain(LlamaSampler::chain_simple(chain))
        };
        self.samplers[seq] = Some(sampler);
    }

    fn sample(
        &mut self,
        seq: usize,
        batch_index: usize,
        mask: Option<&SimpleVob>,
        adjust: Option<&LogitAdjust>,
    ) -> TokenId {
        let mut sampler = self.samplers[seq].take();
        let row = self.ctx.get_logits_ith(batch_index as i32);
        // A bias or penalty works on a copy of the row: the model's stays raw for logprobs.
        let adjusted = adjust.map(|adjust| {
            let mut copy = row.to_vec();
            adjust.apply(&mut copy, &self.model.eog_tokens);
            copy
        });
        let logits = adjusted.as_deref().unwrap_or(row);
        let token = match (sampler.as_mut(), mask) {
            // llama.cpp builds the candidates from its own row: nothing to add to it.
            (Some(SequenceSampler::Chain(chain)), None) if adjust.is_none() => {
                chain.sample(&self.ctx, batch_index as i32).0 as TokenId
            }
            (Some(SequenceSampler::Chain(chain)), mask) => chain_sample(chain, logits, mask),
            // A constraint's mask allows end of generation only where the output may end.
            (Some(SequenceSampler::Greedy { ban_eog: true }), None) => argmax(logits, None, &self.model.eog_tokens),
            (_, mask) => argmax(logits, mask, &[]),
        };
        self.samplers[seq] = sampler;
        token
    }

    fn logprobs(&self, batch_index: usize, token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>) {
        log_softmax_at(self.ctx.get_logits_ith(batch_index as i32), token, top)
    }

    fn end_sequence(&mut self, seq: usize) {
        self.samplers[seq] = None;
    }

    fn copy_sequence(&mut self, src: usize, dst: usize) {
        // Slots live in separate KV streams, so llama.cpp copies the whole stream buffer at
        // the start of the next decode; only fails for ids beyond i32, which slots never are.
        let _ = self.ctx.copy_kv_cache_seq(src as i32, dst as i32, None, None);
    }

    fn move_sequence(&mut self, src: usize, dst: usize) {
        self.copy_sequence(src, dst);
        self.samplers[dst] = self.samplers[src].take();
    }

    fn truncate_sequence(&mut self, seq: usize, keep: u32) {
        // Only fails for values that do not fit an i32, which slots and positions never are.
        let _ = self.ctx.clear_kv_cache_seq(Some(seq as u32), Some(keep), None);
    }

    fn sequence_cells(&self, seq: usize) -> u32 {
        let max = self.ctx.kv_cache_seq_pos_max(seq as i32);
        if max < 0 {
            return 0;
        }
        let min = self.ctx.kv_cache_seq_pos_min(seq as i32).max(0);
        (max - min + 1) as u32
    }

    fn save_sequence(&mut self, seq: usize) -> Result<(SeqState, usize), RuntimeError> {
        let state = self
            .ctx
            .state_seq_get(seq as i32, LlamaStateSeqFlags::default())
            .map_err(|e| RuntimeError::Save(e.to_string()))?;
        let bytes = state.byte_len();
        Ok((state, bytes))
    }

    fn restore_sequence(&mut self, seq: usize, snapshot: &SeqState) -> Result<(), RuntimeError> {
        let restored = self.ctx.state_seq_set(snapshot, seq as i32).map_err(|e| RuntimeError::Restore(e.to_string()));
        if restored.is_err() {
            // A half-read state is not to be trusted.
            self.truncate_sequence(seq, 0);
        }
        restored
    }

    fn draft(&mut self, wants: &[DraftWant<'_>]) -> Result<Vec<Vec<TokenId>>, RuntimeError> {
        match self.draft.as_mut() {
            Some(draft) => draft.draft(wants),
            None => Ok(vec![Vec::new(); wants.len()]),
        }
    }

    fn draft_pass_ms(&self) -> Option<f64> {
        self.draft.as_ref().map(DraftContext::pass_ms)
    }
}
