//! `--max-queue-ms` at the head of the queue: what a request waited, plus its own prefill,
//! decides whether it starts or is refused before any of its work is done.

use std::time::Duration;

use rillm_backend::Rejected;
use tokio::sync::oneshot;

use super::*;

type Started = oneshot::Receiver<Result<(), Rejected>>;

/// One slot, a bound of `limit_ms`, the harness's frozen step costs.
fn bounded(limit_ms: u64) -> Harness {
    Harness::configured(1, 256, |c| c.max_queue_ms = Some(limit_ms))
}

/// Queues a request as if it had been submitted `waited` ago, with its start signal.
fn queued(h: &mut Harness, prompt: &str, waited: Duration) -> (Events, Started) {
    let (started, signal) = oneshot::channel();
    let events = h.submit_with(prompt, 4, |r| {
        r.queueing.submitted = Instant::now() - waited;
        r.queueing.started = Some(started);
    });
    (events, signal)
}

#[test]
fn a_request_whose_wait_ran_out_is_refused_at_the_head_and_the_next_one_starts() {
    let mut h = bounded(1000);
    let (mut late_events, mut late) = queued(&mut h, "late", Duration::from_millis(1200));
    // 900 ms waited, then 200 prompt tokens at 2.5 ms each: its first token would come too late.
    let long_prompt = "x".repeat(200);
    let (mut long_events, mut long) = queued(&mut h, &long_prompt, Duration::from_millis(900));
    let (mut in_time_events, mut in_time) = queued(&mut h, "in time", Duration::from_millis(100));
    h.run_to_idle();

    for (signal, events, waited) in [(&mut late, &mut late_events, 1200), (&mut long, &mut long_events, 1400)] {
        match signal.try_recv() {
            Ok(Err(Rejected::WaitedTooLong { waited_ms, predicted_ms, limit_ms: 1000 })) => {
                assert!(
                    waited_ms >= 900 && predicted_ms >= waited,
                    "{waited_ms} ms waited, {predicted_ms} ms predicted"
                )
            }
            other => panic!("refused at the head, got {other:?}"),
        }
        // A caller that never awaited the signal learns it from the stream.
        let (text, done) = drain(events);
        assert!(text.is_empty(), "nothing generated: {text:?}");
        assert_eq!(done.finish_reason, FinishReason::Error);
        assert!(done.error.as_deref().is_some_and(|e| e.contains("in the queue")), "{done:?}");
    }
    assert_eq!(in_time.try_recv(), Ok(Ok(())));
    assert_eq!(drain(&mut in_time_events).1.finish_reason, FinishReason::Length);
    // Nothing of the refused requests ran: the only prompt prefilled was the one in time.
    let prefilled: usize = h.scheduler.executor.batches.iter().flatten().filter(|t| t.pos == 0).count();
    assert_eq!(prefilled, 1);
}

#[test]
fn without_a_start_signal_nothing_is_refused_at_the_head() {
    // Requests queued without a signal (no bound asked for at submit) are never checked.
    let mut h = bounded(1000);
    let mut events =
        h.submit_with("waited long", 4, |r| r.queueing.submitted = Instant::now() - Duration::from_secs(5));
    h.run_to_idle();
    assert_eq!(drain(&mut events).1.finish_reason, FinishReason::Length);
}
