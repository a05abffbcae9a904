//! Restarts that came too late. A reply that only repeats a call the conversation has the
//! result of is made again as the answer (`Constraint::Restartable`): the route reads the
//! repeat and asks the backend to restart the choice, which it does at its next step. A
//! choice that ends first (the repeat's last token and end-of-text verified in one step,
//! or the route a step behind under load) finishes instead, its only output the repeat the
//! route drops: an empty reply where the client asked for calls or an answer. Such a choice
//! is generated again here, as a request of its own under the restart constraint, its
//! events numbered as the choice's: the reader sees `Restarted`, then the answer, as if
//! the backend had restarted it in time. Its prompt is still in the prefix cache.

use std::pin::Pin;

use futures::stream::{SelectAll, Stream, StreamExt};
use rillm_backend::{Constraint, GenerateRequest, Rejected, RequestStream, StreamEvent};

/// Submits the request again, one choice, under its restart constraint.
pub type Resubmit = Box<dyn Fn() -> Result<RequestStream, Rejected> + Send + Sync>;

type Renumbered = Pin<Box<dyn Stream<Item = StreamEvent> + Send>>;

/// A request's choices whose restart was asked, and those generated again.
#[derive(Default)]
pub struct LateRestarts {
    /// `None`: the request cannot restart (its constraint has no restart).
    resubmit: Option<Resubmit>,
    /// Choices whose restart was asked and not yet seen.
    asked: Vec<u32>,
    again: SelectAll<Renumbered>,
    /// The backend's own stream has ended.
    main_done: bool,
}

/// Where an event came from.
enum Source {
    Main(Option<StreamEvent>),
    Again(Option<StreamEvent>),
}

impl LateRestarts {
    pub fn new(resubmit: Option<Resubmit>) -> Self {
        Self { resubmit, ..Self::default() }
    }

    /// `request` again as one choice under its restart, when its constraint has one.
    pub fn follow_up(request: &GenerateRequest) -> Option<GenerateRequest> {
        let restart = match &request.constraint {
            Some(Constraint::Restartable { restart, .. }) => restart,
            Some(Constraint::CallsOrAnswer { answer, .. }) => answer,
            _ => return None,
        };
        let mut again = request.clone();
        (again.constraint, again.n, again.prompt_logprobs) = (Some((**restart).clone()), 1, None);
        Some(again)
    }

    /// The reader asked the backend to restart choice `index`.
    pub fn asked(&mut self, index: u32) {
        self.asked.push(index);
    }

    /// The next event of `main`, or of a choice generated again. A choice `main` finishes
    /// while its restart is still asked is generated again (`Restarted` is returned for it)
    /// unless the backend refuses that request: then its end stands.
    pub async fn next_event(&mut self, main: &mut RequestStream) -> Option<StreamEvent> {
        loop {
            let source = match (self.main_done, self.again.is_empty()) {
                (true, true) => return None,
                (true, false) => Source::Again(self.again.next().await),
                (false, true) => Source::Main(main.next_event().await),
                (false, false) => tokio::select! {
                    event = main.next_event() => Source::Main(event),
                    event = self.again.next() => Source::Again(event),
                },
            };
            match source {
                Source::Main(None) => self.main_done = true,
                Source::Again(None) => {}
                Source::Main(Some(StreamEvent::Restarted { index })) => {
                    self.asked.retain(|i| *i != index);
                    return Some(StreamEvent::Restarted { index });
                }
                Source::Main(Some(StreamEvent::Finished(done))) if self.asked.contains(&done.index) => {
                    self.asked.retain(|i| *i != done.index);
                    return Some(self.generate_again(done));
                }
                Source::Main(Some(event)) | Source::Again(Some(event)) => return Some(event),
            }
        }
    }

    /// Choice `done.index` again, as a request of its own: `Restarted` for it, or its end
    /// where it cannot be.
    fn generate_again(&mut self, done: rillm_backend::Completion) -> StreamEvent {
        let Some(resubmit) = &self.resubmit else { return StreamEvent::Finished(done) };
        let mut stream = match resubmit() {
            Ok(stream) => stream,
            Err(rejected) => {
                tracing::warn!(index = done.index, %rejected, "a late restart was refused; the choice ends as it was");
                return StreamEvent::Finished(done);
            }
        };
        // A queue bound (`--max-queue-ms`) may still refuse it at the head of the queue; its
        // stream then finishes with that error, as the choice's end.
        drop(stream.take_start());
        let (index, first_tokens) = (done.index, done.usage.completion_tokens);
        let renumbered = stream.map(move |event| renumber(event, index, first_tokens));
        self.again.push(Box::pin(renumbered));
        tracing::debug!(index, "a choice that ended before its restart is generated again");
        StreamEvent::Restarted { index }
    }
}

/// An event of a choice generated again, as choice `index`'s; its usage counts the tokens
/// of the first attempt too (they were generated).
fn renumber(event: StreamEvent, index: u32, first_tokens: u32) -> StreamEvent {
    match event {
        StreamEvent::Text { text, token_ids, logprobs, .. } => StreamEvent::Text { index, text, token_ids, logprobs },
        StreamEvent::Reasoning { text, token_ids, logprobs, .. } => {
            StreamEvent::Reasoning { index, text, token_ids, logprobs }
        }
        StreamEvent::Finished(mut done) => {
            done.index = index;
            done.usage.completion_tokens += first_tokens;
            StreamEvent::Finished(done)
        }
        StreamEvent::Restarted { .. } => StreamEvent::Restarted { index },
        prompt @ StreamEvent::Prompt(_) => prompt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rillm_backend::{Completion, FinishReason, ServerTimings, Usage};
    use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};

    fn text(index: u32, text: &str) -> StreamEvent {
        StreamEvent::Text { index, text: text.into(), token_ids: vec![1], logprobs: Vec::new() }
    }

    fn finished(index: u32, completion_tokens: u32) -> StreamEvent {
        let usage = Usage { prompt_tokens: 5, completion_tokens, ..Usage::default() };
        let timings = ServerTimings::default();
        StreamEvent::Finished(Completion { index, finish_reason: FinishReason::Eos, usage, timings, error: None })
    }

    fn stream(events: &[StreamEvent]) -> (RequestStream, UnboundedSender<StreamEvent>) {
        let (tx, rx) = unbounded_channel();
        events.iter().for_each(|e| tx.send(e.clone()).expect("open"));
        (RequestStream::new(1, 5, rx), tx)
    }

    async fn drain(late: &mut LateRestarts, main: &mut RequestStream) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        while let Some(event) = late.next_event(main).await {
            events.push(event);
        }
        events
    }

    #[tokio::test]
    async fn a_choice_that_finished_before_its_restart_is_generated_again_as_itself() {
        let (mut main, tx) = stream(&[text(0, "a"), text(1, "<repeat>"), finished(1, 7), finished(0, 3)]);
        drop(tx);
        let resubmit: Resubmit = Box::new(|| {
            let (again, tx) = stream(&[text(0, "{\"answer\": 1}"), finished(0, 4)]);
            drop(tx);
            Ok(again)
        });
        let mut late = LateRestarts::new(Some(resubmit));
        late.asked(1);
        let events = drain(&mut late, &mut main).await;
        let ends: Vec<(u32, u32)> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Finished(done) => Some((done.index, done.usage.completion_tokens)),
                _ => None,
            })
            .collect();
        assert!(ends.contains(&(0, 3)) && ends.contains(&(1, 11)), "both attempts' tokens counted: {ends:?}");
        assert_eq!(ends.len(), 2, "choice 1's first end is not passed on: {events:?}");
        let restarted = events.iter().position(|e| matches!(e, StreamEvent::Restarted { index: 1 }));
        let answer = events
            .iter()
            .position(|e| matches!(e, StreamEvent::Text { index: 1, text, .. } if text.contains("answer")));
        assert!(restarted.is_some() && restarted < answer, "Restarted, then the answer as choice 1: {events:?}");
    }

    #[tokio::test]
    async fn a_restart_the_backend_made_in_time_or_cannot_make_is_not_made_again() {
        // In time: the backend's `Restarted` comes before the choice's end.
        let restarted = StreamEvent::Restarted { index: 0 };
        let (mut main, tx) = stream(&[text(0, "<repeat>"), restarted, text(0, "{}"), finished(0, 9)]);
        drop(tx);
        let mut late = LateRestarts::new(Some(Box::new(|| panic!("not generated again"))));
        late.asked(0);
        let events = drain(&mut late, &mut main).await;
        assert_eq!(events.iter().filter(|e| matches!(e, StreamEvent::Restarted { .. })).count(), 1);
        // Refused: the end stands.
        let (mut main, tx) = stream(&[text(0, "<repeat>"), finished(0, 7)]);
        drop(tx);
        let mut late = LateRestarts::new(Some(Box::new(|| Err(Rejected::QueueFull { capacity: 1 }))));
        late.asked(0);
        let events = drain(&mut late, &mut main).await;
        assert!(matches!(events.last(), Some(StreamEvent::Finished(done)) if done.usage.completion_tokens == 7));
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::Restarted { .. })));
    }
}
