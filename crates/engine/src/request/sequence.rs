//! One request's generation state in its slot, from admission to its final event: where its
//! prompt and output are in the KV cache, what it has generated, and how each new token
//! turns into stream events. Its fields are its own: the scheduler asks and tells through
//! methods, and nothing outside `request` writes them.

use std::time::Instant;

mod thinking;

use super::constraint::{Advance, ConstraintCounters, SequenceConstraint};
use super::output::{Events, Output, Streamed};
use super::pending::PendingRequest;
use super::text_stream::TextStream;
use crate::logits::logit_adjust::LogitAdjust;
use crate::runtime::{TokenId, Tokenizer};
use rillm_backend::{Completion, FinishReason, PromptToken, ServerTimings, StreamEvent, TokenLogprob, Usage};

pub(crate) struct Sequence {
    request: PendingRequest,
    /// Tokens of this sequence already in the KV cache.
    cached: u32,
    /// Prompt tokens reused from the slot's KV cache (found at admission, less any computed
    /// again: `rewind_prompt`).
    cached_prompt: u32,
    output: Output,
    /// Another choice of the same request computes the prompt; this one gets a copy of its
    /// KV and samples from its logits when it is done (`take_fork`).
    awaits_fork: bool,
    /// Tokens its constraint forces before the first sampled one: fed after the last chunk
    /// of its prompt, so they cost no step of their own (jump-forward from the start).
    /// Emptied once fed, or when that step had no room for them (the grammar then forces
    /// them one at a time).
    start_forced: Vec<TokenId>,
    /// The request's logit bias and repetition penalties, with the output counts they
    /// need (`None`: it asked for neither).
    logit_adjust: Option<LogitAdjust>,
    /// The server has closed a reasoning model's thought (once at most).
    closed_thought: bool,
    timing: Timing,
}

/// A sequence started over (`Sequence::restart`).
pub(crate) struct Restart {
    /// Its cells to keep: the caller drops the rest.
    pub keep: u32,
    /// The end its first (forced) tokens came to, if they ended it; an error if its
    /// constraint failed on them.
    pub finished: Result<Option<FinishReason>, String>,
}

/// When a sequence was admitted and gave its first token, and what the steps since took.
struct Timing {
    admitted: Instant,
    first_token_at: Option<Instant>,
    /// What the steps since its first token took (`cost::tpot_budget` keeps its mean time
    /// per output token within `--tpot-slo-ms` by this).
    decode_elapsed_ms: f64,
}

impl Sequence {
    /// `reused` prompt tokens are already in the slot's KV cache.
    pub fn new(request: PendingRequest, reused: u32) -> Self {
        let output = new_output(&request);
        let logit_adjust = adjustments(&request);
        Self {
            request,
            cached: reused,
            cached_prompt: reused,
            output,
            awaits_fork: false,
            start_forced: Vec::new(),
            logit_adjust,
            closed_thought: false,
            timing: Timing { admitted: Instant::now(), first_token_at: None, decode_elapsed_ms: 0.0 },
        }
    }

    pub fn request(&self) -> &PendingRequest {
        &self.request
    }

    /// Tokens of this sequence in the KV cache.
    pub fn cached(&self) -> u32 {
        self.cached
    }

    /// Tokens generated so far (sampled and forced).
    pub fn generated(&self) -> u32 {
        self.output.len()
    }

    /// The step computed its tokens up to position `pos`.
    pub fn fed_through(&mut self, pos: u32) {
        self.cached = self.cached.max(pos + 1);
    }

    /// `drafts` of the cells the step filled hold drafted tokens, not yet the sequence's
    /// (verifying keeps the ones the model agrees with: `keep_draft`).
    pub fn unverified(&mut self, drafts: usize) {
        self.cached -= drafts as u32;
    }

    /// A drafted token the model agreed with: its cell is the sequence's.
    pub fn keep_draft(&mut self) {
        self.cached += 1;
    }

    /// Only the first `kept` cells hold its tokens (the caller drops the others).
    pub fn truncate(&mut self, kept: u32) {
        self.cached = self.cached.min(kept);
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

    /// Another choice of its request computes the prompt: this one waits for a copy.
    pub fn wait_for_fork(&mut self) {
        self.awaits_fork = true;
    }

    pub fn awaits_fork(&self) -> bool {
        self.awaits_fork
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

    /// Sends the scored prompt, its first token unscored, `scores` for tokens 1.. (once,
    /// when its prefill is done).
    pub fn send_prompt_scores(&self, scores: Vec<TokenLogprob>, tokenizer: &dyn Tokenizer) {
        let Some(&first) = self.request.prompt.first() else { return };
        let mut bytes = Vec::new();
        tokenizer.append_token_bytes(first, &mut bytes);
        let mut tokens = Vec::with_capacity(self.request.prompt.len());
        tokens.push(PromptToken { token: first, bytes, logprob: None, top: Vec::new() });
        tokens.extend(scores.into_iter().map(|l| PromptToken {
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
        let generated = self.generated();
        (generated > 0).then(|| target_ms * f64::from(generated) - self.timing.decode_elapsed_ms)
    }

    /// A step past its first token took `ms`.
    pub fn add_decode_time(&mut self, ms: f64) {
        if self.generated() > 0 {
            self.timing.decode_elapsed_ms += ms;
        }
    }

    pub fn is_prefilling(&self) -> bool {
        self.output.last().is_none()
    }

    /// Generated tokens not yet in the KV cache, which the next step feeds: the last sampled
    /// one, and after it any tokens a constraint forced.
    pub fn uncached_generated(&self) -> &[TokenId] {
        let in_kv = (self.cached as usize).saturating_sub(self.request.prompt.len());
        let ids = self.output.ids();
        &ids[in_kv.min(ids.len())..]
    }

    /// The uncached generated tokens this step feeds: all but the `held` last ones (forced
    /// tokens the step's layout leaves for later), and at least the last sampled one.
    pub fn fed_generated(&self, held: usize) -> &[TokenId] {
        let tokens = self.uncached_generated();
        &tokens[..tokens.len() - held.min(tokens.len().saturating_sub(1))]
    }

    /// Every token of the sequence so far, prompt then generated, into `out` (cleared).
    pub fn history_into(&self, out: &mut Vec<TokenId>) {
        out.clear();
        out.extend_from_slice(&self.request.prompt);
        out.extend_from_slice(self.output.ids());
    }

    /// Its last `n` generated token ids (for a log line).
    pub fn recent_tokens(&self, n: usize) -> &[TokenId] {
        let ids = self.output.ids();
        &ids[ids.len().saturating_sub(n)..]
    }

    /// How many drafted tokens may be fed for it: none while it prefills or waits for its
    /// fork, else what `max_tokens` and the context leave room for.
    pub fn draft_room(&self, ctx_limit: u32) -> usize {
        if self.is_prefilling() || self.awaits_fork {
            return 0;
        }
        let tokens_left = self.request.max_tokens.saturating_sub(self.generated() + 1) as usize;
        let next_end = self.cached as usize + self.uncached_generated().len();
        let room = (ctx_limit as usize).saturating_sub(next_end + 1);
        tokens_left.min(room)
    }

    /// The logit adjustments its sampler applies.
    pub fn logit_adjust(&self) -> Option<&LogitAdjust> {
        self.logit_adjust.as_ref()
    }

    /// How many of `draft`'s first tokens its constraint would accept next (all of them
    /// when unconstrained): a draft the grammar refuses cannot be the model's next token.
    pub fn constraint_allows(&mut self, draft: &[TokenId]) -> usize {
        match self.answer_constraint() {
            Some(constraint) => constraint.allowed_prefix(draft),
            None => draft.len(),
        }
    }

    /// The tokens its constraint forces before its first sampled one, fed with the prompt's
    /// last chunk (`find_start_forced`).
    pub fn start_forced(&self) -> &[TokenId] {
        &self.start_forced
    }

    /// Under calls or an answer (`Constraint::CallsOrAnswer`), before its first token: the
    /// call trigger's tokens, fed as drafts after the prompt's last chunk, so the step that
    /// computes the prompt also says whether the model writes the trigger (its first
    /// tokens verified at once) or turns away from it (the answer, restarted before the
    /// next step): without them `<`, `tool`, `_` of `<tool_response>` each took a step of
    /// their own before the reply could start as the answer. Within `max_tokens` and the
    /// context; none for a request with choices or its prompt scored (`find_start_forced`).
    pub fn opening_drafts(&mut self, ctx_limit: u32) -> Vec<TokenId> {
        let request = &self.request;
        if request.n > 1 || request.prompt_logprobs.is_some() || self.awaits_fork || !self.output.is_answering() {
            return Vec::new();
        }
        let room = (ctx_limit as usize)
            .saturating_sub(request.prompt.len() + 1)
            .min(request.max_tokens.saturating_sub(1) as usize);
        let mut tokens = request.constraint.as_ref().map(SequenceConstraint::opening_tokens).unwrap_or_default();
        tokens.truncate(room);
        tokens
    }

    /// The step had no room for the start's forced tokens: the grammar forces them one at
    /// a time instead.
    pub fn drop_start_forced(&mut self) {
        self.start_forced.clear();
    }

    /// Finds the tokens its constraint forces at the start (`start_forced`), leaving room
    /// within `max_tokens` and the context for the token sampled after them. Not for a
    /// request with choices (they copy the prompt's KV and sample from its last row), with
    /// log-probabilities (a forced token has none) or with its prompt scored.
    pub fn find_start_forced(&mut self, ctx_limit: u32) {
        if !self.output.is_answering() {
            return;
        }
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
        match self.answer_constraint() {
            Some(constraint) => constraint.mask(),
            None => Ok(None),
        }
    }

    /// Whether its constraint refuses `token` though no mask kept it out: a lazy grammar
    /// the token would trigger and break at once (`SequenceConstraint::refuses`).
    pub fn constraint_refuses(&mut self, token: TokenId, tokenizer: &dyn Tokenizer) -> bool {
        if tokenizer.is_end_of_generation(token) || self.answer_constraint().is_none() {
            return false;
        }
        let Some(constraint) = self.request.constraint.as_mut() else { return false };
        let bytes = self.output.token_bytes();
        tokenizer.append_token_bytes(token, bytes);
        constraint.refuses(bytes)
    }

    /// The tokens a lazy constraint still waiting for its trigger takes: all but those it
    /// refuses (`constraint_refuses`).
    pub fn lazy_constraint_mask(&mut self) -> Result<Option<toktrie::SimpleVob>, String> {
        self.answer_constraint().map(SequenceConstraint::lazy_mask).transpose()
    }

    /// Whether `token` may go on the output: always, but where its constraint is calls or
    /// an answer (`Constraint::CallsOrAnswer`) and the output, `token` added, can no longer
    /// open a call: the model answers.
    pub fn constraint_opens(&mut self, token: TokenId, tokenizer: &dyn Tokenizer) -> bool {
        // Every sampled token comes here: only one awaiting a call's opening reads bytes.
        if !self.answer_constraint().is_some_and(|c| c.awaits_opening()) {
            return true;
        }
        let ends = tokenizer.is_end_of_generation(token);
        let bytes = self.output.token_bytes();
        tokenizer.append_token_bytes(token, bytes);
        self.request.constraint.as_ref().is_none_or(|c| c.opens(bytes, ends))
    }

    /// Its output starts over under its constraint's restart at the next step (`restart`).
    pub fn ask_restart(&mut self) {
        self.request.ask_restart();
    }

    /// Whether its constraint has taken a token of the output.
    pub fn constraint_started(&mut self) -> bool {
        self.answer_constraint().is_some_and(|c| c.started())
    }

    /// The model answers: its output follows the constraint's restart (the answer's own)
    /// from its first token. Nothing was generated under the first, so there is nothing to
    /// void and no `Restarted` to send.
    pub fn answer_without_calls(&mut self) {
        if let Some(constraint) = self.request.constraint.as_mut() {
            if let Some(restart) = constraint.take_restart() {
                *constraint = restart;
            }
        }
    }

    /// Its constraint, once the answer has begun (a reasoning model's thought is free).
    fn answer_constraint(&mut self) -> Option<&mut SequenceConstraint> {
        if !self.output.is_answering() {
            return None;
        }
        self.request.constraint.as_mut()
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
        if self.ends_turn_in_thought(token, tokenizer) {
            // The answer has a shape to take: the thought is closed instead, and the
            // model answers. The end token is not taken (nor its log-probability).
            if self.request.logprobs.is_some() {
                self.output.drop_last_logprob();
            }
            return Ok(self.close_thought(tokenizer, ctx_limit));
        }
        let finished = self.accept_under_constraint(token, tokenizer, ctx_limit, counters)?;
        Ok(finished.or_else(|| if self.budget_spent() { self.close_thought(tokenizer, ctx_limit) } else { None }))
    }

    /// `accept_token` before the thinking budget is looked at.
    fn accept_under_constraint(
        &mut self,
        token: TokenId,
        tokenizer: &dyn Tokenizer,
        ctx_limit: u32,
        counters: &ConstraintCounters,
    ) -> Result<Option<FinishReason>, String> {
        if self.answer_constraint().is_none() {
            return Ok(self.push_generated(token, tokenizer, ctx_limit));
        }
        // End of generation ends it: the mask allowed it only where the output may end.
        let advance = if tokenizer.is_end_of_generation(token) {
            Advance::Continue(Vec::new())
        } else {
            let bytes = self.output.token_bytes();
            tokenizer.append_token_bytes(token, bytes);
            let jump_forward = self.request.logprobs.is_none();
            match self.request.constraint.as_mut() {
                Some(constraint) => constraint.advance(token, bytes, jump_forward)?,
                None => Advance::Continue(Vec::new()),
            }
        };
        let forced = match &advance {
            Advance::Continue(forced) => forced.as_slice(),
            Advance::Complete => &[],
        };
        counters.record_tokens(1, forced.len() as u64);
        // `Advance::Complete` is the constraint complete: `push_constrained` checks it.
        Ok(self.push_constrained(std::iter::once(&token).chain(forced), tokenizer, ctx_limit))
    }

    /// Starts the output again under its constraint's restart, as the caller (or the
    /// constraint: `Constraint::CallsOrAnswer`) asked: what it generated is void (the
    /// caller is told with `StreamEvent::Restarted`), the prompt's KV stays. Where the
    /// restart begins with tokens its constraint forces (a JSON answer's `{"answer": "`),
    /// they are its first output at once, streamed now and fed after the prompt by the next
    /// step; otherwise the prompt's last token is computed again for the first new token's
    /// row. `None` where there is nothing to restart (no restart, or nothing generated yet).
    pub fn restart(
        &mut self,
        tokenizer: &dyn Tokenizer,
        ctx_limit: u32,
        counters: &ConstraintCounters,
    ) -> Option<Restart> {
        if self.is_prefilling() || self.awaits_fork {
            return None;
        }
        let restart = self.request.constraint.as_mut()?.take_restart()?;
        self.request.constraint = Some(restart);
        self.output = new_output(&self.request);
        self.closed_thought = false;
        self.logit_adjust = adjustments(&self.request);
        let prompt = self.request.prompt.len() as u32;
        let whole_prompt = self.cached >= prompt;
        self.cached = self.cached.min(prompt.saturating_sub(1));
        self.find_start_forced(ctx_limit);
        let _ = self.request.events.send(StreamEvent::Restarted { index: self.request.index });
        if !whole_prompt || self.start_forced.is_empty() {
            return Some(Restart { keep: self.cached, finished: Ok(None) });
        }
        self.cached = prompt;
        let finished = self.accept_start_forced(tokenizer, ctx_limit, counters);
        Some(Restart { keep: prompt, finished })
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
        self.output.note_logprob(logprob);
    }

    /// Once its first token came: the wait predicted at admission and the wait it had, in
    /// milliseconds (`None` before, after, and for requests admitted without a forecast).
    pub fn take_forecast_outcome(&mut self) -> Option<(f64, f64)> {
        let first = self.timing.first_token_at?;
        let predicted = self.request.queueing.forecast_ms.take()?;
        Some((predicted, first.saturating_duration_since(self.request.queueing.submitted).as_secs_f64() * 1000.0))
    }

    /// Sends whatever text is held back (a constraint's output is complete, or could not go
    /// on: the reply ends with what it had).
    pub fn flush_text(&mut self) {
        let events = Events { sender: &self.request.events, index: self.request.index };
        self.output.flush(&events);
    }

    /// One generated token: counted, streamed as text; the finish reason if it ends here.
    fn push_generated(&mut self, token: TokenId, tokenizer: &dyn Tokenizer, ctx_limit: u32) -> Option<FinishReason> {
        self.output.push_id(token);
        if let Some(adjust) = self.logit_adjust.as_mut() {
            adjust.observe(token);
        }
        self.timing.first_token_at.get_or_insert_with(Instant::now);

        let ignore_eos = self.request.stops.ignore_eos && self.request.constraint.is_none();
        if !ignore_eos && tokenizer.is_end_of_generation(token) {
            return Some(FinishReason::Eos);
        }
        if self.request.stops.stop_token_ids.contains(&token) {
            return Some(FinishReason::Stop);
        }
        tokenizer.append_token_bytes(token, self.output.token_bytes());
        // vLLM looks for stop strings once the output is longer than `min_tokens`.
        let unchecked = self.generated() <= self.request.stops.min_tokens;
        let events = Events { sender: &self.request.events, index: self.request.index };
        if let Streamed::Stopped = self.output.stream(token, unchecked, &events) {
            return Some(FinishReason::Stop);
        }
        // The next decode puts the uncached tokens at positions from `cached` on: they must fit.
        let next_end = self.cached as usize + self.uncached_generated().len();
        if self.generated() >= self.request.max_tokens || next_end >= ctx_limit as usize {
            return Some(FinishReason::Length);
        }
        None
    }

    /// The tokens whose KV cells the slot holds: prompt, then generated, up to `cached`.
    pub fn kv_tokens(&self) -> impl Iterator<Item = TokenId> + '_ {
        let prompt = &self.request.prompt;
        prompt.iter().chain(self.output.ids()).take(self.cached as usize).copied()
    }

    /// Sends the final event (after any held-back text, unless the stream was cut short).
    pub fn finish(mut self, reason: FinishReason, error: Option<String>) -> Completion {
        if matches!(reason, FinishReason::Eos | FinishReason::Length) {
            self.flush_text();
        }
        let now = Instant::now();
        let timing = &self.timing;
        let first = timing.first_token_at.unwrap_or(now);
        let completion = Completion {
            index: self.request.index,
            finish_reason: reason,
            usage: Usage {
                prompt_tokens: self.request.prompt.len() as u32,
                completion_tokens: self.generated(),
                cached_tokens: self.cached_prompt,
                reasoning_tokens: self.output.thinking_tokens(),
            },
            timings: ServerTimings {
                queue_ms: ms(timing.admitted - self.request.queueing.submitted),
                prefill_ms: ms(first.saturating_duration_since(timing.admitted)),
                ttft_ms: ms(first.saturating_duration_since(self.request.queueing.submitted)),
                decode_ms: ms(now.saturating_duration_since(first)),
            },
            error,
        };
        let _ = self.request.events.send(StreamEvent::Finished(completion.clone()));
        completion
    }
}

/// A fresh output for the request: its stop strings, its thought read apart.
fn new_output(request: &PendingRequest) -> Output {
    Output::new(text_stream(request), request.thinking.as_ref().map(|plan| plan.split()))
}

/// The text stream a request's output goes through: its stop strings, streamed or not.
fn text_stream(request: &PendingRequest) -> TextStream {
    if request.stops.include_stop_str {
        TextStream::new(&request.stops.stop).including_stops()
    } else {
        TextStream::new(&request.stops.stop)
    }
}

/// The request's logit adjustments, with fresh output counts.
fn adjustments(request: &PendingRequest) -> Option<LogitAdjust> {
    LogitAdjust::new(&request.sampling, &request.prompt, request.stops.min_tokens, &request.stops.stop_token_ids)
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
