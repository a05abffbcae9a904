//! Responses kept for `previous_response_id` and `GET /v1/responses/{id}` (OpenAI's `store`,
//! true unless a request says false): each response object and the conversation it ended,
//! in memory, least recently used out past `--responses-store-mib`. A conversation resumed
//! from here is cheap to prefill again: its prefix is in the prefix cache.

use std::sync::{Arc, Mutex};

use lru::LruCache;
use serde_json::Value;

use crate::tools::HistoryMessage;

/// One kept response.
struct Entry {
    response: Arc<Value>,
    /// The conversation up to and including this response's reply, without its
    /// `instructions` (OpenAI does not carry them over to the next response).
    conversation: Arc<Vec<HistoryMessage>>,
    bytes: usize,
}

struct Kept {
    /// In use order: `lru` evicts by count, so the byte budget is kept here.
    entries: LruCache<String, Entry>,
    bytes: usize,
}

pub struct ResponseStore {
    budget: usize,
    kept: Mutex<Kept>,
}

impl ResponseStore {
    /// Keeps up to `budget` bytes of responses; 0 keeps none.
    pub fn new(budget: usize) -> Self {
        Self { budget, kept: Mutex::new(Kept { entries: LruCache::unbounded(), bytes: 0 }) }
    }

    pub fn enabled(&self) -> bool {
        self.budget > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        // A panic while holding the lock leaves a consistent map (no await inside).
        self.kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Keeps a finished response; the least recently used go until it fits. One larger
    /// than the whole budget is not kept.
    pub fn insert(&self, id: String, response: Value, conversation: Vec<HistoryMessage>) {
        let bytes = response.to_string().len() + conversation.iter().map(message_bytes).sum::<usize>();
        if bytes > self.budget {
            return;
        }
        let mut kept = self.lock();
        kept.remove(&id);
        while kept.bytes + bytes > self.budget {
            let Some((_, oldest)) = kept.entries.pop_lru() else { break };
            kept.bytes -= oldest.bytes;
        }
        kept.bytes += bytes;
        kept.entries.put(id, Entry { response: Arc::new(response), conversation: Arc::new(conversation), bytes });
    }

    /// A kept response's conversation, marked as used.
    pub fn conversation(&self, id: &str) -> Option<Arc<Vec<HistoryMessage>>> {
        self.lock().entries.get(id).map(|e| e.conversation.clone())
    }

    /// A kept response object, marked as used.
    pub fn response(&self, id: &str) -> Option<Arc<Value>> {
        self.lock().entries.get(id).map(|e| e.response.clone())
    }

    /// Forgets a response; whether it was kept.
    pub fn delete(&self, id: &str) -> bool {
        self.lock().remove(id)
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Responses kept now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }
}

impl Kept {
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
            store.insert(id.into(), json!({"id": id}), turn("0123456789"));
        }
        assert_eq!(store.bytes(), 3 * size);
        assert!(store.conversation("a").is_some(), "a is used: b is now the oldest");
        store.insert("d".into(), json!({"id": "d"}), turn("0123456789"));
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
        store.insert("a".into(), json!({"id": "a"}), turn("far more than ten bytes"));
        assert!(store.response("a").is_none());
        assert_eq!(store.bytes(), 0);
        assert!(!ResponseStore::new(0).enabled());
    }
}
