//! Makes the engine thread's death visible instead of silent.
//!
//! A panic on the engine thread (a bug, or a runtime failure llama.cpp reports by
//! aborting a Rust invariant) would otherwise leave the waiting queue open: new requests
//! would queue forever and `/ready` would stay 200. Here the panic is caught, the reason
//! recorded for health checks, the queue closed so `submit` refuses at once, and every
//! waiting request gets an error event. Running requests lose their streams as the
//! scheduler unwinds, which their callers see as an error too.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use rillm_backend::FinishReason;

use crate::queue::WaitQueue;
use crate::request::pending::PendingRequest;
use crate::stats::EngineStats;

/// Runs the engine loop `run` on this thread until it returns or panics.
pub(crate) fn run_supervised(run: impl FnOnce(), queue: &WaitQueue<PendingRequest>, stats: &EngineStats) {
    run_supervised_with(run, queue, stats, |request, reason| {
        request.finish_unstarted(FinishReason::Error, Some(reason.to_string()))
    });
}

/// [`run_supervised`] for a queue of any item: `fail` answers one waiting item with the
/// reason the engine stopped.
pub(crate) fn run_supervised_with<T>(
    run: impl FnOnce(),
    queue: &WaitQueue<T>,
    stats: &EngineStats,
    fail: impl Fn(T, &str),
) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(run)) {
        let reason = panic_message(panic.as_ref());
        tracing::error!(%reason, "the engine thread panicked; failing waiting requests and refusing new ones");
        stats.mark_failed(&reason);
        let said = format!("the engine stopped: {reason}");
        for item in queue.close() {
            fail(item, &said);
        }
    }
    stats.mark_dead();
}

/// Joins an engine's thread once (its queue closed first, so the loop ends).
pub(crate) fn join_engine_thread(thread: &std::sync::Mutex<Option<std::thread::JoinHandle<()>>>) {
    let thread = thread.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(thread) = thread {
        let _ = thread.join();
    }
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-text payload".into()
    }
}

#[cfg(test)]
mod tests {
    use rillm_backend::{Health, StreamEvent};

    use super::*;
    use crate::queue::PushError;

    fn pending(id: u64) -> (PendingRequest, tokio::sync::mpsc::UnboundedReceiver<StreamEvent>) {
        PendingRequest::for_test(id, vec![1, 2, 3], 4)
    }

    #[test]
    fn a_panicking_engine_fails_waiting_requests_closes_the_queue_and_reports_why() {
        let queue = WaitQueue::new(4, 1);
        let stats = EngineStats::new(64);
        let (waiting, mut events) = pending(1);
        assert!(queue.push(waiting).is_ok());
        assert_eq!(stats.health(), Health::Ok);

        run_supervised(|| panic!("decode returned garbage"), &queue, &stats);

        match events.try_recv() {
            Ok(StreamEvent::Finished(done)) => {
                assert_eq!(done.finish_reason, FinishReason::Error);
                assert!(done.error.as_deref().is_some_and(|e| e.contains("decode returned garbage")), "{done:?}");
            }
            other => panic!("expected an error finish, got {other:?}"),
        }
        assert!(matches!(queue.push(pending(2).0), Err(PushError::Closed(_))));
        assert!(matches!(stats.health(), Health::Failed(reason) if reason.contains("decode returned garbage")));
    }

    #[test]
    fn an_engine_loop_that_returns_is_stopped_not_failed() {
        let queue = WaitQueue::new(4, 1);
        let stats = EngineStats::new(64);
        run_supervised(|| (), &queue, &stats);
        assert_eq!(stats.failure(), None);
        assert!(matches!(stats.health(), Health::Failed(_)), "a stopped engine serves nothing");
    }
}
