//! Work for the engine thread that is not a request: flushing the prefix cache (a
//! router's `/flush_cache`). Asked for on a caller's thread, done by the engine thread
//! between two steps (only it may touch the KV cache), answered on a channel.

use std::sync::{mpsc, Mutex, MutexGuard};

use rillm_backend::PrefixCacheFlush;

#[derive(Default)]
pub(crate) struct EngineControl {
    /// Callers waiting for a flush; one flush answers all of them.
    flush_askers: Mutex<Vec<mpsc::SyncSender<PrefixCacheFlush>>>,
}

impl EngineControl {
    /// Asks for a flush: the receiver gets what was dropped once the engine thread has
    /// done it.
    pub fn ask_flush(&self) -> mpsc::Receiver<PrefixCacheFlush> {
        let (answer, answered) = mpsc::sync_channel(1);
        self.askers().push(answer);
        answered
    }

    /// The callers waiting for a flush (none: nothing to do), taken.
    pub fn take_flush_askers(&self) -> Vec<mpsc::SyncSender<PrefixCacheFlush>> {
        std::mem::take(&mut *self.askers())
    }

    fn askers(&self) -> MutexGuard<'_, Vec<mpsc::SyncSender<PrefixCacheFlush>>> {
        // A panic while holding this lock cannot leave the list inconsistent.
        self.flush_askers.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
