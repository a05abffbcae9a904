//! Responses kept for `previous_response_id` and `GET /v1/responses/{id}` (OpenAI's `store`,
//! true unless a request says false): each response object and the conversation it ended,
//! in memory, least recently used out past `--responses-store-mib`. A conversation resumed
//! from here is cheap to prefill again: its prefix is in the prefix cache. Background
//! responses are held here while they run (what `GET` shows meanwhile, and how `cancel`
//! stops them), then kept as any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use lru::LruCache;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::tools::HistoryMessage;

/// One kept response.
struct Entry {
    response: Arc<Value>,
    /// The conversation up to and including this response's reply, without its
    /// `instructions` (OpenAI does not carry them over to the next response); `None` for a
    /// response that did not finish (failed, cancelled), which cannot be gone on from.
    conversation: Option<Arc<Vec<HistoryMessage>>>,
    bytes: usize,
}

/// A background response still generating.
struct Running {
    /// What `GET` answers until it ends (`status: in_progress`).
    response: Arc<Value>,
    /// Sending or dropping it stops the response's task, and the engine request with it.
    stop: oneshot::Sender<()>,
}

struct Kept {
    /// In use order: `lru` evicts by count, so the byte budget is kept here.
    entries: LruCache<String, Entry>,
    bytes: usize,
    running: HashMap<String, Running>,
}

/// Why a response could not be cancelled.
#[derive(Debug, PartialEq)]
pub enum NotCancelled {
    NotFound,
    /// It ran in the foreground: there is nothing to stop.
    Synchronous,
    /// A background response that has ended, with its status.
    Ended(String),
}

pub struct ResponseStore {
    budget: usize,
    kept: Mutex<Kept>,
}

impl ResponseStore {
    /// Keeps up to `budget` bytes of responses; 0 keeps none.
    pub fn new(budget: usize) -> Self {
        let kept = Kept { entries: LruCache::unbounded(), bytes: 0, running: HashMap::new() };
        Self { budget, kept: Mutex::new(kept) }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A panic while holding the lock leaves a consistent map (no await inside).
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a response; the least recently used go until it fits. One larger than the
    /// whole budget is not kept. `conversation`: what a next response goes on from.
    pub fn insert(&self, id: String, response: Value, conversation: Option<Vec<HistoryMessage>>) {
        let entry = Entry::new(response, conversation);
        self.lock().put(self.budget, id, entry);
    }

    /// Holds a background response while it runs, `response` showing it in progress; the
    /// receiver resolves when it is cancelled or deleted, and its task should stop then.
    pub fn start(&self, id: String, response: Value) -> oneshot::Receiver<()> {
        let (stop, stopped) = oneshot::channel();
        self.lock().running.insert(id, Running { response: Arc::new(response), stop });
        stopped
    }

    /// A background response ended: kept as any other, unless it was cancelled or deleted
    /// meanwhile (then what that left stands). Under one lock, so `GET` never misses it.
    pub fn finish(&self, id: &str, response: Value, conversation: Option<Vec<HistoryMessage>>) {
        let entry = Entry::new(response, conversation);
        let mut kept = self.lock();
        if kept.running.remove(id).is_some() {
            kept.put(self.budget, id.to_string(), entry);
        }
    }

    /// Stops a background response still running: it is kept as it stood, `cancelled`.
    pub fn cancel(&self, id: &str) -> Result<Arc<Value>, NotCancelled> {
        let mut kept = self.lock();
        let Some(running) = kept.running.remove(id) else {
            let entry = kept.entries.peek(id).ok_or(NotCancelled::NotFound)?;
            let status = entry.response["status"].as_str().unwrap_or_default().to_string();
            return Err(if entry.response["background"] == true {
                NotCancelled::Ended(status)
            } else {
                NotCancelled::Synchronous
            });
        };
        let _ = running.stop.send(());
        let mut response = Arc::unwrap_or_clone(running.response);
        response["status"] = "cancelled".into();
        let entry = Entry::new(response, None);
        let cancelled = entry.response.clone();
        kept.put(self.budget, id.to_string(), entry);
        Ok(cancelled)
    }

    /// A kept response's conversation, marked as used; `None` also for one that did not
    /// finish.
    pub fn conversation(&self, id: &str) -> Option<Arc<Vec<HistoryMessage>>> {
        self.lock().entries.get(id).and_then(|e| e.conversation.clone())
    }

    /// A kept or running response object, marked as used.
    pub fn response(&self, id: &str) -> Option<Arc<Value>> {
        let mut kept = self.lock();
        if let Some(entry) = kept.entries.get(id) {
            return Some(entry.response.clone());
        }
        kept.running.get(id).map(|r| r.response.clone())
    }

    /// Forgets a response, stopping it if it runs; whether there was one.
    pub fn delete(&self, id: &str) -> bool {
        let mut kept = self.lock();
        // Dropping `stop` stops the task.
        kept.running.remove(id).is_some() | kept.remove(id)
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Responses kept or running now.
    pub fn len(&self) -> usize {
        let kept = self.lock();
        kept.entries.len() + kept.running.len()
    }
}

impl Entry {
    fn new(response: Value, conversation: Option<Vec<HistoryMessage>>) -> Self {
        let bytes = response.to_string().len() + conversation.iter().flatten().map(message_bytes).sum::<usize>();
        Self { response: Arc::new(response), conversation: conversation.map(Arc::new), bytes }
    }
}

impl Kept {
    /// Keeps `entry` in place of any under `id`, the least recently used out until it fits
    /// `budget`; one larger than the whole budget is not kept.
    fn put(&mut self, budget: usize, id: String, entry: Entry) {
        if entry.bytes > budget {
            return;
        }
        self.remove(&id);
        while self.bytes + entry.bytes > budget {
            let Some((_, oldest)) = self.entries.pop_lru() else { break };
            self.bytes -= oldest.bytes;
        }
        self.bytes += entry.bytes;
        self.entries.put(id, entry);
    }

    fn remove(&mut self, id: &str) -> bool {
        let Some(entry) = self.entries.pop(id) else { return false };
        self.bytes -= entry.bytes;
        true
    }
}

fn message_bytes(message: &HistoryMessage) -> usize {
    let calls: usize = message.tool_calls.iter().map(|c| c.id.len() + c.name.len() + c.arguments.len()).sum();
    message.role.len() + message.content.len() + calls + message.tool_call_id.as_ref().map_or(0, String::len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(text: &str) -> Vec<HistoryMessage> {
        vec![HistoryMessage::user(text)]
    }

    #[test]
    fn the_least_recently_used_go_first_when_the_budget_is_full() {
        let size = json!({"id": "a"}).to_string().len() + "user".len() + 10;
        let store = ResponseStore::new(3 * size);
        for id in ["a", "b", "c"] {
            store.insert(id.into(), json!({"id": id}), Some(turn("0123456789")));
        }
        assert_eq!(store.bytes(), 3 * size);
        assert!(store.conversation("a").is_some(), "a is used: b is now the oldest");
        store.insert("d".into(), json!({"id": "d"}), Some(turn("0123456789")));
        assert!(store.response("b").is_none(), "b went to make room");
        for id in ["a", "c", "d"] {
            assert_eq!(store.response(id).expect("kept")["id"], id);
        }
        assert_eq!(store.conversation("d").expect("kept")[0].content, "0123456789");
        assert!(store.delete("c") && !store.delete("c"));
        assert_eq!(store.bytes(), 2 * size);
    }

    #[test]
    fn a_response_larger_than_the_budget_or_a_zero_budget_keeps_nothing() {
        let store = ResponseStore::new(10);
        store.insert("a".into(), json!({"id": "a"}), Some(turn("far more than ten bytes")));
        assert!(store.response("a").is_none());
        assert_eq!(store.bytes(), 0);
        assert!(!ResponseStore::new(0).enabled());
    }

    #[test]
    fn a_background_response_is_shown_while_it_runs_and_kept_or_cancelled_once() {
        let store = ResponseStore::new(1 << 20);
        let running = json!({"id": "a", "status": "in_progress", "background": true});
        let mut stopped = store.start("a".into(), running.clone());
        assert_eq!(*store.response("a").expect("shown while running"), running);
        assert!(store.conversation("a").is_none(), "nothing to go on from yet");
        let cancelled = store.cancel("a").expect("running");
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(stopped.try_recv(), Ok(()), "its task is told to stop");
        // The task ends after the cancel: the cancelled response stands.
        store.finish("a", json!({"id": "a", "status": "completed", "background": true}), Some(turn("x")));
        assert_eq!(store.response("a").expect("kept")["status"], "cancelled");
        assert!(store.conversation("a").is_none(), "a cancelled response cannot be gone on from");
        assert_eq!(store.cancel("a"), Err(NotCancelled::Ended("cancelled".into())));

        let _stop = store.start("b".into(), json!({"id": "b", "status": "in_progress", "background": true}));
        store.finish("b", json!({"id": "b", "status": "completed", "background": true}), Some(turn("hi")));
        assert_eq!(store.response("b").expect("kept")["status"], "completed");
        assert_eq!(store.conversation("b").expect("finished")[0].content, "hi");
        assert_eq!(store.cancel("b"), Err(NotCancelled::Ended("completed".into())));

        store.insert("c".into(), json!({"id": "c", "status": "completed", "background": false}), None);
        assert_eq!(store.cancel("c"), Err(NotCancelled::Synchronous));
        assert_eq!(store.cancel("nope"), Err(NotCancelled::NotFound));
        let mut deleted = store.start("d".into(), json!({"id": "d"}));
        assert!(store.delete("d") && store.response("d").is_none());
        assert!(deleted.try_recv().is_err(), "deleting drops the sender: the task stops");
        assert_eq!(store.len(), 3);
    }
}
