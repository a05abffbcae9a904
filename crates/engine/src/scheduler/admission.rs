//! Who runs in the next step, and in which slot: cancelled sequences and queue entries
//! reaped (choices their caller ended or restarted handled), waiting requests admitted into
//! free slots with their cached prefix loaded, and a hole below the highest running slot
//! closed.

use std::time::Instant;

use super::Scheduler;
use crate::request::pending::PendingRequest;
use crate::request::sequence::Sequence;
use crate::runtime::Executor;
use rillm_backend::{FinishReason, Rejected};

/// Moving a sequence copies its whole KV stream, which a few steps with one less pass over
/// the weights repay; a sequence this close to its token limit is left where it is.
const MIN_TOKENS_LEFT_TO_MOVE: u32 = 16;

impl<E: Executor> Scheduler<E> {
    /// Who runs in the next step, and in which slot.
    pub(super) fn arrange_slots(&mut self) {
        self.reap_cancelled();
        self.admit();
        self.close_gap();
    }

    /// Frees sequences and queue entries whose caller dropped the stream, ends the choices
    /// it ended early (as a stop string would: `stop`, usage counted), and restarts the ones
    /// it asked to restart.
    fn reap_cancelled(&mut self) {
        for slot in 0..self.running.len() {
            let Some(seq) = self.running[slot].as_ref() else { continue };
            let request = seq.request();
            if request.is_cancelled() {
                self.release(slot, FinishReason::Cancelled, None);
            } else if request.is_ended_early() && !seq.is_prefilling() {
                self.release(slot, FinishReason::Stop, None);
            } else if request.take_restart() {
                self.restart(slot);
            }
        }
        for request in self.queue.remove_where(PendingRequest::is_cancelled) {
            self.stats.record_finished(request.prompt.len() as u32, 0, true);
        }
    }

    /// Admits waiting requests while slots are free: a request runs as `n` sequences, and
    /// waits, keeping its turn, until `n` slots are free.
    fn admit(&mut self) {
        while self.running.count() < self.running.len() {
            let free = self.running.iter().filter(|s| s.is_none()).count();
            let Some(request) = self.queue.pop_if(|r| r.is_cancelled() || r.n as usize <= free) else { break };
            let Some(request) = self.admissible(request) else { continue };
            if !self.start(request) {
                break;
            }
        }
    }

    /// The request popped from the queue, unless it was cancelled or is refused at the head
    /// of the queue (each ends here).
    fn admissible(&mut self, mut request: PendingRequest) -> Option<PendingRequest> {
        if request.is_cancelled() {
            (0..request.n).for_each(|_| self.queue.finish_one());
            self.stats.record_finished(request.prompt.len() as u32, 0, true);
            return None;
        }
        if let Some(refusal) = self.refused_at_head(&request) {
            (0..request.n).for_each(|_| self.queue.finish_one());
            if let Some(started) = request.queueing.started.take() {
                let _ = started.send(Err(refusal.clone()));
            }
            // A caller that never awaited the start signal learns it from the stream.
            request.finish_unstarted(FinishReason::Error, Some(refusal.to_string()));
            return None;
        }
        if let Some(started) = request.queueing.started.take() {
            let _ = started.send(Ok(()));
        }
        Some(request)
    }

    /// Starts `request` in a free slot with its longest cached prefix, and its other choices
    /// in slots of their own, waiting for its prompt. False where no slot is free.
    fn start(&mut self, request: PendingRequest) -> bool {
        // Prompt scores need the logits of every prompt token: no cached prefix has them.
        let reusable = if request.prompt_logprobs.is_some() { &[][..] } else { &request.prompt[..] };
        let Some(slot) = self.kv.free_slot(&self.running, reusable) else { return false };
        let reused = self.kv.load_prefix(&mut self.executor, &self.stats, &self.running, slot, reusable);
        self.stats.record_prefix_query(request.prompt.len(), reused);
        self.executor.truncate_sequence(slot, reused as u32);
        self.executor.start_sequence(slot, &request.sampling, request.stops.ignore_eos);
        let choices: Vec<PendingRequest> = (1..request.n).map(|index| request.choice(index)).collect();
        let mut seq = Sequence::new(request, reused as u32);
        seq.find_start_forced(self.executor.ctx_per_sequence());
        self.drafter.reset(slot);
        self.running.admit(slot, seq);
        let forks = self.start_choices(choices);
        self.choices.wait_for(slot, forks);
        true
    }

    /// Takes a slot for each of a request's choices past the first and returns them; each
    /// waits for the first choice's prompt.
    fn start_choices(&mut self, choices: Vec<PendingRequest>) -> Vec<usize> {
        let mut forks = Vec::with_capacity(choices.len());
        for choice in choices {
            // `admit` popped the request only with a slot free for each choice.
            let Some(slot) = self.kv.free_slot(&self.running, &[]) else { break };
            // The slot's cached prefix is about to be overwritten by the fork's copy.
            self.kv.clear_for_copy(&mut self.executor, &self.stats, slot);
            self.executor.start_sequence(slot, &choice.sampling, choice.stops.ignore_eos);
            let mut seq = Sequence::new(choice, 0);
            seq.wait_for_fork();
            self.drafter.reset(slot);
            self.running.admit(slot, seq);
            forks.push(slot);
        }
        forks
    }

    /// `--max-queue-ms` again, at the head of the queue: the wait `submit` predicted may
    /// have been wrong either way; now most of it is measured. A request whose first token
    /// cannot come within the bound even at best (what it waited, plus its own prefill with
    /// nothing else in the way) is refused before any of its work is done: it would miss the
    /// objective anyway, and the slot goes to one that can still make it. Only certain misses
    /// are refused here (the other prompts a step shares are not counted against it). Its
    /// route has held the response back, so the refusal is still a 429.
    fn refused_at_head(&self, request: &PendingRequest) -> Option<Rejected> {
        let limit_ms = self.costs.wait.max_queue_ms?;
        request.queueing.started.as_ref()?;
        let now = Instant::now();
        let waited_ms = now.saturating_duration_since(request.queueing.submitted).as_secs_f64() * 1000.0;
        let predicted_ms = waited_ms + self.costs.step.costs().own_first_token_ms(request.queueing.expected_prefill);
        (predicted_ms > limit_ms as f64).then_some(Rejected::WaitedTooLong {
            waited_ms: waited_ms as u64,
            predicted_ms: predicted_ms as u64,
            limit_ms,
        })
    }

    /// Moves the highest running sequence down into the lowest hole, a free slot between
    /// running ones. llama.cpp runs a pass over the weights per run of consecutive slots, so
    /// a hole left by a finished request costs every later step until it is filled; `admit`
    /// fills holes with waiting requests, and this closes one when nobody waits. Running
    /// slots in one run stay where they are, wherever it starts: moving them would cost a
    /// copy and leave the prefix twice. One move per step bounds the copying a step can take on.
    fn close_gap(&mut self) {
        let Some(lowest) = self.running.iter().position(Option::is_some) else { return };
        let Some(highest) = self.running.iter().rposition(Option::is_some) else { return };
        let Some(free) = (lowest..highest).find(|&s| self.running[s].is_none()) else { return };
        let Some(seq) = self.running[highest].as_ref() else { return };
        let tokens_left = seq.request().max_tokens.saturating_sub(seq.generated());
        // Choices tied to each other by slot wait for their fork before any of them moves.
        let forking = seq.awaits_fork() || self.choices.has_forks(highest);
        if tokens_left < MIN_TOKENS_LEFT_TO_MOVE || forking {
            return;
        }
        let kv_tokens = seq.kv_tokens().collect();
        // The source keeps its cells: it is now an idle slot caching this prefix.
        self.kv.move_sequence(&mut self.executor, &self.stats, highest, free, kv_tokens);
        self.stats.record_move();
        self.running.move_slot(highest, free);
        self.drafter.move_slot(highest, free);
        self.choices.move_slot(highest, free);
    }
}
