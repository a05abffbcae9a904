//! One request from admission to its final event: where its prompt is, what it has
//! generated, and how each new token turns into stream events.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::oneshot;

use crate::constraint::{Advance, ConstraintCounters, SequenceConstraint};
use crate::logit_adjust::LogitAdjust;
use crate::runtime::{TokenId, Tokenizer};
use crate::text_stream::{TextPiece, TextStream};
use rillm_backend::{
    ChoiceControls, Completion, FinishReason, PromptToken, Rejected, SamplingParams, ServerTimings, StreamEvent,
    TokenLogprob, Usage,
};

/// A request waiting for a sequence slot, already tokenized and validated.
#[derive(Debug)]
pub(crate) struct PendingRequest {
    pub id: u64,
    /// Which of the request's choices this is (0 for the request as submitted).
    pub index: u32,
    /// Choices the request asks for: it runs as this many sequences, sharing the prompt.
    pub n: u32,
    pub prompt: Vec<TokenId>,
    /// Prompt tokens it is expected to compute, the rest predicted cached (for the wait
    /// forecast of requests queued behind it).
    pub expected_prefill: usize,
    pub max_tokens: u32,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    /// The matched stop string is streamed as the text's end.
    pub include_stop_str: bool,
    /// Tokens that end the output as end of generation does (`stop_token_ids`).
    pub stop_token_ids: Vec<TokenId>,
    /// Output tokens before anything may end it (`min_tokens`).
    pub min_tokens: u32,
    pub ignore_eos: bool,
    /// Structured output: the compiled constraint, at its start.
    pub constraint: Option<SequenceConstraint>,
    /// Alternatives per token when log-probabilities are asked for (`None`: not asked).
    pub logprobs: Option<u32>,
    /// Alternatives per prompt token when the prompt is to be scored (`None`: not asked).
    pub prompt_logprobs: Option<u32>,
    pub submitted: Instant,
    /// The wait for its first token predicted at admission (`--max-queue-ms`), logged
    /// beside the wait it had (debug level) to see how far the forecast is off.
    pub forecast_ms: Option<f64>,
    /// `--max-queue-ms`: told whether the request starts or is refused at the head of the
    /// queue (its route holds the response until then).
    pub started: Option<oneshot::Sender<Result<(), Rejected>>>,
    pub events: UnboundedSender<StreamEvent>,
    /// What the caller asked of each choice: end it early, or restart it.
    pub controls: Arc<ChoiceControls>,
}

impl PendingRequest {
    pub fn is_cancelled(&self) -> bool {
        self.events.is_closed()
    }

    /// The caller has what it wants of this choice: it ends as a stop string would end it.
    pub fn is_ended_early(&self) -> bool {
        self.controls.is_ended(self.index)
    }

    /// The caller asked to restart this choice (once: the ask is taken).
    pub fn take_restart(&self) -> bool {
        self.controls.take_restart(self.index)
    }

    /// Choice `index` of this request: the same prompt and stream, its own constraint
    /// matcher, and with a request seed its own (reproducible) sampling stream.
    pub fn choice(&self, index: u32) -> Self {
        let mut sampling = self.sampling.clone();
        sampling.seed = sampling.seed.map(|seed| seed.wrapping_add(u64::from(index)));
        Self {
            index,
            prompt: self.prompt.clone(),
            sampling,
            stop: self.stop.clone(),
            stop_token_ids: self.stop_token_ids.clone(),
            constraint: self.constraint.clone(),
            events: self.events.clone(),
            controls: Arc::clone(&self.controls),
            forecast_ms: None,
            started: None,
            ..*self
        }
    }

    /// A greedy request for `prompt` with nothing else asked, and its event receiver.
    #[cfg(test)]
    pub fn for_test(
        id: u64,
        prompt: Vec<TokenId>,
        max_tokens: u32,
    ) -> (Self, tokio::sync::mpsc::UnboundedReceiver<StreamEvent>) {
        let (events, receiver) = tokio::sync::mpsc::unbounded_channel();
        let request = Self {
            id,
            index: 0,
            n: 1,
            expected_prefill: prompt.len(),
            prompt,
            max_tokens,
            sampling: SamplingParams::greedy(),
            stop: Vec::new(),
            include_stop_str: false,
            stop_token_ids: Vec::new(),
            min_tokens: 0,
            ignore_eos: false,
            constraint: None,
            logprobs: None,
            prompt_logprobs: None,
            submitted: Instant::now(),
            forecast_ms: None,
            started: None,
            events,
            controls: ChoiceControls::new(1),
        };
        (request, receiver)
    }

    /// Sends the final event for a request that never got a slot.
    pub fn finish_unstarted(self, reason: FinishReason, error: Option<String>) {
        let usage = Usage { prompt_tokens: self.prompt.len() as u32, ..Usage::default() };
        let queue_ms = ms(self.submitted.elapsed());
        let _ = self.events.send(StreamEvent::Finished(Completion {
            index: self.index,
            finish_reason: reason,
            usage,
            timings: ServerTimings { queue_ms, ..ServerTimings::default() },
            error,
        }));
    }
}

pub(crate) struct Sequence {
    pub request: PendingRequest,
    /// Tokens of this sequence already in the KV cache.
    pub cached: u32,
    /// The last sampled token, not yet in the KV cache.
    pub last_token: Option<TokenId>,
    pub generated: u32,
    /// Every sampled token, in order (all but the last are in the KV cache).
    generated_ids: Vec<TokenId>,
    /// Prompt tokens reused from the slot's KV cache (found at admission, less any
    /// computed again: `rewind_prompt`).
    cached_prompt: u32,
    text: TextStream,
    /// Log-probabilities of generated tokens not yet sent, in token order: each text piece
    /// takes as many as it has token ids.
    unsent_logprobs: std::collections::VecDeque<TokenLogprob>,
    /// Scores of prompt tokens 1.. computed so far (requests that score their prompt).
    prompt_scores: Vec<TokenLogprob>,
    /// Another choice of the same request computes the prompt; this one gets a copy of its
    /// KV and samples from its logits when it is done (`take_fork`).
    pub awaits_fork: bool,
    /// Slots of the request's other choices waiting for this one's prompt.
    pub forks: Vec<usize>,
    /// Tokens its constraint forces before the first sampled one: fed after the last chunk
    /// of its prompt, so they cost no step of their own (jump-forward from the start).
    /// Emptied once fed, or when that step had no room for them (the grammar then forces
    /// them one at a time).
    pub start_forced: Vec<TokenId>,
    /// Tokens drafted for this step, fed after the uncached generated ones (`speculate`).
    pub drafts: Vec<TokenId>,
    /// Forced tokens at the end of the uncached ones that this step leaves for a later one:
    /// the step's layout is cheaper without them (`draft_lengths`). The sequence samples
    /// again only once the last of them is fed. Set while a step is laid out, 0 after it.
    pub held_forced: usize,
    /// How often the model keeps drafted tokens, by where they came from: how deep the
    /// next draft goes.
    pub acceptance: crate::draft_acceptance::Acceptance,
    /// The token prompt lookup expected next when no draft was fed: checked against the
    /// sampled one, so the acceptance estimate keeps learning while nothing is drafted.
    pub predicted: Option<TokenId>,
    /// What the steps since its first token took (`scheduler::tpot_budget` keeps its mean
    /// time per output token within `--tpot-slo-ms` by this).
    pub decode_elapsed_ms: f64,
    /// The request's logit bias and repetition penalties, with the output counts they
    /// need (`None`: it asked for neither).
    pub logit_adjust: Option<LogitAdjust>,
    token_bytes: Vec<u8>,
    admitted: Instant,
    first_token_at: Option<Instant>,
}

impl Sequence {
    /// `reused` prompt tokens are already in the slot's KV cache.
    pub fn new(request: PendingRequest, reused: u32) -> Self {
        let text = text_stream(&request);
        let logit_adjust =
            LogitAdjust::new(&request.sampling, &request.prompt, request.min_tokens, &request.stop_token_ids);
        Self {
            request,
            cached: reused,
            last_token: None,
            generated: 0,
            generated_ids: Vec::new(),
            cached_prompt: reused,
            text,
            unsent_logprobs: std::collections::VecDeque::new(),
            prompt_scores: Vec::new(),
            awaits_fork: false,
            forks: Vec::new(),
            start_forced: Vec::new(),
            drafts: Vec::new(),
            held_forced: 0,
            acceptance: Default::default(),
            predicted: None,
            decode_elapsed_ms: 0.0,
            logit_adjust,
            token_bytes: Vec::with_capacity(32),
            admitted: Instant::now(),
            first_token_at: None,
        }
    }

    /// Starts the output again under its constraint's restart, as the caller asked
    /// (`Constraint::Restartable`): what it generated is void (the caller is told with
    /// `StreamEvent::Restarted`), the prompt's KV stays but for its last token, whose row is
    /// computed again for the first new token. Returns the cells to keep (the caller drops
    /// the rest), or `None` where there is nothing to restart (no restart, or nothing
    /// generated yet).
    pub fn restart(&mut self, ctx_limit: u32) -> Option<u32> {
        if self.is_prefilling() || self.awaits_fork {
            return None;
        }
        let restart = self.request.constraint.as_mut()?.take_restart()?;
        self.request.constraint = Some(restart);
        self.generated = 0;
        self.generated_ids.clear();
        self.last_token = None;
        self.text = text_stream(&self.request);
        self.unsent_logprobs.clear();
        self.drafts.clear();
        (self.held_forced, self.predicted) = (0, None);
        self.logit_adjust = LogitAdjust::new(
            &self.request.sampling,
            &self.request.prompt,
            self.request.min_tokens,
            &self.request.stop_token_ids,
        );
        self.cached = self.cached.min(self.request.prompt.len().saturating_sub(1) as u32);
        self.find_start_forced(ctx_limit);
        let _ = self.request.events.send(StreamEvent::Restarted { index: self.request.index });
        Some(self.cached)
    }

    /// Drops the last `tokens` cached prompt tokens, to be computed again with the rest of
    /// the prompt (the caller drops their KV cells). Only while prefilling. Returns how many
    /// of them had been reused from the cache rather than computed by an earlier chunk.
    pub fn rewind_prompt(&mut self, tokens: u32) -> u32 {
        debug_assert!(self.is_prefilling() && tokens <= self.cached);
        self.cached -= tokens.min(self.cached);
        let reused_before = self.cached_prompt;
        self.cached_prompt = self.cached_prompt.min(self.cached);
        reused_before - self.cached_prompt
    }

    /// Prompt tokens this sequence still has to compute (none while another choice
    /// computes them for it).
    pub fn prompt_left(&self) -> &[TokenId] {
        if self.awaits_fork {
            return &[];
        }
        let done = (self.cached as usize).min(self.request.prompt.len());
        &self.request.prompt[done..]
    }

    /// The choice that computed the prompt is done with it: this one now holds a copy of
    /// its KV (`cached` tokens, `cached_prompt` of them reused from cache).
    pub fn take_fork(&mut self, cached: u32, cached_prompt: u32) {
        self.awaits_fork = false;
        self.cached = cached;
        self.cached_prompt = cached_prompt;
    }

    /// The tokens of its prompt it was reused from cache, for a fork of it.
    pub fn cached_prompt(&self) -> u32 {
        self.cached_prompt
    }

    /// The score of the prompt token after position `pos` (requests that score it).
    pub fn note_prompt_logprob(&mut self, pos: usize, logprob: TokenLogprob) {
        debug_assert_eq!(pos, self.prompt_scores.len());
        self.prompt_scores.push(logprob);
    }

    /// Sends the scored prompt, the first token unscored (once, when its prefill is done).
    pub fn send_prompt_scores(&mut self, tokenizer: &dyn Tokenizer) {
        let Some(&first) = self.request.prompt.first() else { return };
        let mut bytes = Vec::new();
        tokenizer.append_token_bytes(first, &mut bytes);
        let mut tokens = Vec::with_capacity(self.request.prompt.len());
        tokens.push(PromptToken { token: first, bytes, logprob: None, top: Vec::new() });
        tokens.extend(std::mem::take(&mut self.prompt_scores).into_iter().map(|l| PromptToken {
            token: l.token,
            bytes: l.bytes,
            logprob: Some(l.logprob),
            top: l.top,
        }));
        let _ = self.request.events.send(StreamEvent::Prompt(tokens));
    }

    /// How long the next step may take with its mean time per output token after the first
    /// (what clients measure as TPOT) still within `target_ms` once the step's token comes:
    /// negative where it cannot. `None` before its first token.
    pub fn tpot_slack_ms(&self, target_ms: f64) -> Option<f64> {
        (self.generated > 0).then(|| target_ms * f64::from(self.generated) - self.decode_elapsed_ms)
    }

    pub fn is_prefilling(&self) -> bool {
        self.last_token.is_none()
    }

    /// Generated tokens not yet in the KV cache, which the next step feeds: the last sampled
    /// one, and after it any tokens a constraint forced.
    pub fn uncached_generated(&self) -> &[TokenId] {
        let in_kv = (self.cached as usize).saturating_sub(self.request.prompt.len());
        &self.generated_ids[in_kv.min(self.generated_ids.len())..]
    }

    /// The uncached generated tokens this step feeds: all but the `held_forced` last ones,
    /// and at least the last sampled one.
    pub fn fed_generated(&self) -> &[TokenId] {
        let tokens = self.uncached_generated();
        &tokens[..tokens.len() - self.held_forced.min(tokens.len().saturating_sub(1))]
    }

    /// Every token of the sequence so far, prompt then generated, into `out` (cleared).
    pub fn history_into(&self, out: &mut Vec<TokenId>) {
        out.clear();
        out.extend_from_slice(&self.request.prompt);
        out.extend_from_slice(&self.generated_ids);
    }

    /// How many drafted tokens may be fed for it: none while it prefills or waits for its
    /// fork, else what `max_tokens` and the context leave room for.
    pub fn draft_room(&self, ctx_limit: u32) -> usize {
        if self.is_prefilling() || self.awaits_fork {
            return 0;
        }
        let tokens_left = self.request.max_tokens.saturating_sub(self.generated + 1) as usize;
        let next_end = self.cached as usize + self.uncached_generated().len();
        let room = (ctx_limit as usize).saturating_sub(next_end + 1);
        tokens_left.min(room)
    }

    /// How many of `draft`'s first tokens its constraint would accept next (all of them
    /// when unconstrained): a draft the grammar refuses cannot be the model's next token.
    pub fn constraint_allows(&mut self, draft: &[TokenId]) -> usize {
        match self.request.constraint.as_mut() {
            Some(constraint) => constraint.allowed_prefix(draft),
            None => draft.len(),
        }
    }

    /// Finds the tokens its constraint forces at the start (`start_forced`), leaving room
    /// within `max_tokens` and the context for the token sampled after them. Not for a
    /// request with choices (they copy the prompt's KV and sample from its last row), with
    /// log-probabilities (a forced token has none) or with its prompt scored.
    pub fn find_start_forced(&mut self, ctx_limit: u32) {
        let request = &mut self.request;
        let Some(constraint) = request.constraint.as_mut() else { return };
        if request.n > 1 || request.logprobs.is_some() || request.prompt_logprobs.is_some() {
            return;
        }
        let room = (ctx_limit as usize).saturating_sub(request.prompt.len() + 1).min(request.max_tokens as usize);
        self.start_forced = constraint.forced_at_start(room);
    }

    /// The step fed `start_forced` after its prompt: they are its first output tokens, and
    /// stream now (the token sampled after them follows). The finish reason if they end it.
    pub fn accept_start_forced(
        &mut self,
        tokenizer: &dyn Tokenizer,
        ctx_limit: u32,
        counters: &ConstraintCounters,
    ) -> Result<Option<FinishReason>, String> {
        let forced = std::mem::take(&mut self.start_forced);
        let Some(constraint) = self.request.constraint.as_mut() else { return Ok(None) };
        constraint.take_forced(&forced)?;
        counters.record_tokens(0, forced.len() as u64);
        Ok(self.push_constrained(&forced, tokenizer, ctx_limit))
    }

    /// Before sampling: the tokens its constraint allows now (`None`: unconstrained).
    pub fn constraint_mask(&mut self) -> Result<Option<toktrie::SimpleVob>, String> {
        match self.request.constraint.as_mut() {
            Some(constraint) => constraint.mask(),
            None => Ok(None),
        }
    }

    /// Whether its constraint refuses `token` though no mask kept it out: a lazy grammar
    /// the token would trigger and break at once (`SequenceConstraint::refuses`).
    pub fn constraint_refuses(&mut self, token: TokenId, tokenizer: &dyn Tokenizer) -> bool {
        let Some(constraint) = self.request.constraint.as_mut() else { return false };
        if tokenizer.is_end_of_generation(token) {
            return false;
        }
        self.token_bytes.clear();
        tokenizer.append_token_bytes(token, &mut self.token_bytes);
        constraint.refuses(&self.token_bytes)
    }

    /// The tokens a lazy constraint still waiting for its trigger takes: all but those it
    /// refuses (`constraint_refuses`).
    pub fn lazy_constraint_mask(&mut self) -> Result<Option<toktrie::SimpleVob>, String> {
        self.request.constraint.as_mut().map(SequenceConstraint::lazy_mask).transpose()
    }

    /// Handles a freshly sampled token, and under a constraint the tokens it forces after
    /// it; returns the finish reason if this ends the request, an error if the constraint
    /// broke.
    pub fn accept_token(
        &mut self,
        token: TokenId,
        tokenizer: &dyn Tokenizer,
        ctx_limit: u32,
        counters: &ConstraintCounters,
    ) -> Result<Option<FinishReason>, String> {
        let Some(constraint) = self.request.constraint.as_mut() else {
            return Ok(self.push_generated(token, tokenizer, ctx_limit));
        };
        // End of generation ends it: the mask allowed it only where the output may end.
        let advance = if tokenizer.is_end_of_generation(token) {
            Advance::Continue(Vec::new())
        } else {
            self.token_bytes.clear();
            tokenizer.append_token_bytes(token, &mut self.token_bytes);
            constraint.advance(token, &self.token_bytes, self.request.logprobs.is_none())?
        };
        let forced = match &advance {
            Advance::Continue(forced) => forced.as_slice(),
            Advance::Complete => &[],
        };
        counters.record_tokens(1, forced.len() as u64);
        // `Advance::Complete` is the constraint complete: `push_constrained` checks it.
        Ok(self.push_constrained(std::iter::once(&token).chain(forced), tokenizer, ctx_limit))
    }

    /// Constrained output tokens the matcher has taken in (a sampled one and those forced
    /// after it, or those forced at the start): streamed, each counted; the finish reason
    /// if one ends the request, else `Stop` once the grammar is complete.
    fn push_constrained<'t>(
        &mut self,
        tokens: impl IntoIterator<Item = &'t TokenId>,
        tokenizer: &dyn Tokenizer,
        ctx_limit: u32,
    ) -> Option<FinishReason> {
        for &token in tokens {
            if let Some(reason) = self.push_generated(token, tokenizer, ctx_limit) {
                return Some(reason);
            }
        }
        if self.request.constraint.as_ref().is_some_and(SequenceConstraint::is_complete) {
            self.flush_text();
            return Some(FinishReason::Stop);
        }
        None
    }

    /// The log-probability of the token about to be accepted (requests that asked for them;
    /// a forced token has none, so a request with log-probabilities forces none).
    pub fn note_logprob(&mut self, logprob: TokenLogprob) {
        self.unsent_logprobs.push_back(logprob);
    }

    /// Once its first token came: the wait predicted at admission and the wait it had, in
    /// milliseconds (`None` before, after, and for requests admitted without a forecast).
    pub fn take_forecast_outcome(&mut self) -> Option<(f64, f64)> {
        let first = self.first_token_at?;
        let predicted = self.request.forecast_ms.take()?;
        Some((predicted, first.saturating_duration_since(self.request.submitted).as_secs_f64() * 1000.0))
    }

    /// Sends whatever text is held back (a constraint's output is complete, or could not go
    /// on: the reply ends with what it had).
    pub fn flush_text(&mut self) {
        if let Some((text, token_ids)) = self.text.finish() {
            self.send_text(text, token_ids);
        }
    }

    /// One generated token: counted, streamed as text; the finish reason if it ends here.
    fn push_generated(&mut self, token: TokenId, tokenizer: &dyn Tokenizer, ctx_limit: u32) -> Option<FinishReason> {
        self.generated += 1;
        self.last_token = Some(token);
        self.generated_ids.push(token);
        if let Some(adjust) = self.logit_adjust.as_mut() {
            adjust.observe(token);
        }
        self.first_token_at.get_or_insert_with(Instant::now);

        let ignore_eos = self.request.ignore_eos && self.request.constraint.is_none();
        if !ignore_eos && tokenizer.is_end_of_generation(token) {
            return Some(FinishReason::Eos);
        }
        if self.request.stop_token_ids.contains(&token) {
            return Some(FinishReason::Stop);
        }
        self.token_bytes.clear();
        tokenizer.append_token_bytes(token, &mut self.token_bytes);
        // vLLM looks for stop strings once the output is longer than `min_tokens`.
        let piece = if self.generated > self.request.min_tokens {
            self.text.push(token, &self.token_bytes)
        } else {
            self.text.push_unchecked(token, &self.token_bytes)
        };
        match piece {
            TextPiece::Held => {}
            TextPiece::Text { text, token_ids } => self.send_text(text, token_ids),
            TextPiece::Stopped { text, token_ids } => {
                if !text.is_empty() {
                    self.send_text(text, token_ids);
                }
                return Some(FinishReason::Stop);
            }
        }
        // The next decode puts the uncached tokens at positions from `cached` on: they must fit.
        let next_end = self.cached as usize + self.uncached_generated().len();
        if self.generated >= self.request.max_tokens || next_end >= ctx_limit as usize {
            return Some(FinishReason::Length);
        }
        None
    }

    /// Its last `n` generated token ids (for a log line).
    pub fn recent_tokens(&self, n: usize) -> &[TokenId] {
        &self.generated_ids[self.generated_ids.len().saturating_sub(n)..]
    }

    /// The tokens whose KV cells the slot holds: prompt, then generated, up to `cached`.
    pub fn kv_tokens(&self) -> impl Iterator<Item = TokenId> + '_ {
        let prompt = &self.request.prompt;
        prompt.iter().chain(&self.generated_ids).take(self.cached as usize).copied()
    }

    /// Sends the final event (after any held-back text, unless the stream was cut short).
    pub fn finish(mut self, reason: FinishReason, error: Option<String>) -> Completion {
        if matches!(reason, FinishReason::Eos | FinishReason::Length) {
            if let Some((text, token_ids)) = self.text.finish() {
                self.send_text(text, token_ids);
            }
        }
        let now = Instant::now();
        let first = self.first_token_at.unwrap_or(now);
        let completion = Completion {
            index: self.request.index,
            finish_reason: reason,
            usage: Usage {
                prompt_tokens: self.request.prompt.len() as u32,
                completion_tokens: self.generated,
                cached_tokens: self.cached_prompt,
            },
            timings: ServerTimings {
                queue_ms: ms(self.admitted - self.request.submitted),
                prefill_ms: ms(first.saturating_duration_since(self.admitted)),
                ttft_ms: ms(first.saturating_duration_since(self.request.submitted)),
                decode_ms: ms(now.saturating_duration_since(first)),
            },
            error,
        };
        let _ = self.request.events.send(StreamEvent::Finished(completion.clone()));
        completion
    }

    fn send_text(&mut self, text: String, token_ids: Vec<TokenId>) {
        let take = token_ids.len().min(self.unsent_logprobs.len());
        let logprobs = self.unsent_logprobs.drain(..take).collect();
        // A failed send means the caller is gone; the scheduler reaps it before the next step.
        let _ = self.request.events.send(StreamEvent::Text { index: self.request.index, text, token_ids, logprobs });
    }
}

/// The text stream a request's output goes through: its stop strings, streamed or not.
fn text_stream(request: &PendingRequest) -> TextStream {
    if request.include_stop_str {
        TextStream::new(&request.stop).including_stops()
    } else {
        TextStream::new(&request.stop)
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
