//! The bounded waiting queue between callers and the engine thread.
//!
//! Callers push from any thread and learn at once when it is full (that is the server's
//! 429); the engine thread blocks on it while it has nothing to run, so an idle engine
//! costs no CPU.
//!
//! "Full" counts what the whole engine can hold, not the queue alone: the engine thread
//! moves requests into free slots only between steps, so a burst would otherwise be
//! refused while slots sit free. The queue therefore also counts the items taken out to
//! run, until the engine says each is done; a push is refused only when running plus
//! waiting items fill every slot and every waiting place.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, PartialEq, Eq)]
pub enum PushError<T> {
    Full(T),
    Closed(T),
}

pub struct WaitQueue<T> {
    state: Mutex<State<T>>,
    wake: Condvar,
    /// Waiting places beyond the slots.
    capacity: usize,
    slots: usize,
}

struct State<T> {
    items: VecDeque<T>,
    /// Items popped to run and not yet `finish_one`d.
    running: usize,
    closed: bool,
}

impl<T> WaitQueue<T> {
    /// `capacity` places to wait in, besides `slots` places to run.
    pub fn new(capacity: usize, slots: usize) -> Self {
        Self {
            state: Mutex::new(State { items: VecDeque::new(), running: 0, closed: false }),
            wake: Condvar::new(),
            capacity,
            slots,
        }
    }

    /// Waiting places (beyond the slots).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// `f` of every waiting item, oldest first.
    pub fn map_waiting<R>(&self, f: impl FnMut(&T) -> R) -> Vec<R> {
        self.lock().items.iter().map(f).collect()
    }

    /// Every slot and waiting place is taken: a push now would be refused.
    pub fn is_full(&self) -> bool {
        let state = self.lock();
        state.items.len() + state.running >= self.capacity + self.slots
    }

    pub fn push(&self, item: T) -> Result<(), PushError<T>> {
        let mut state = self.lock();
        if state.closed {
            return Err(PushError::Closed(item));
        }
        if state.items.len() + state.running >= self.capacity + self.slots {
            return Err(PushError::Full(item));
        }
        state.items.push_back(item);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Oldest item, if any, without blocking; it counts as running until `finish_one`.
    pub fn pop(&self) -> Option<T> {
        let mut state = self.lock();
        let item = state.items.pop_front();
        state.running += usize::from(item.is_some());
        item
    }

    /// A popped item finished (or was dropped): its place is free again.
    pub fn finish_one(&self) {
        let mut state = self.lock();
        state.running = state.running.saturating_sub(1);
    }

    /// Removes every waiting item for which `remove` is true, returning them in order.
    pub fn remove_where(&self, mut remove: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut state = self.lock();
        // Called every engine step; almost always nothing matches.
        if !state.items.iter().any(&mut remove) {
            return Vec::new();
        }
        let mut removed = Vec::new();
        let mut kept = VecDeque::with_capacity(state.items.len());
        for item in state.items.drain(..) {
            if remove(&item) {
                removed.push(item);
            } else {
                kept.push_back(item);
            }
        }
        state.items = kept;
        removed
    }

    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Blocks until an item is waiting, the queue is closed or `timeout` passes.
    /// Returns false once closed and drained.
    pub fn wait_for_item(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .wake
            .wait_timeout_while(state, timeout, |s| s.items.is_empty() && !s.closed)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        !(state.closed && state.items.is_empty())
    }

    /// Refuses further pushes and wakes the waiter; returns what was still waiting.
    pub fn close(&self) -> Vec<T> {
        let mut state = self.lock();
        state.closed = true;
        let left = state.items.drain(..).collect();
        drop(state);
        self.wake.notify_all();
        left
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding this lock cannot leave the deque inconsistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn rejects_when_full_and_keeps_fifo_order() {
        let q = WaitQueue::new(2, 0);
        q.push(1).unwrap();
        q.push(2).unwrap();
        assert_eq!(q.push(3), Err(PushError::Full(3)));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.push(3), Err(PushError::Full(3)), "a popped item holds its place until it finishes");
        q.finish_one();
        q.push(4).unwrap();
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(2), Some(4), None));
    }

    #[test]
    fn free_slots_count_as_places_before_the_engine_takes_anything() {
        // 8 slots and 4 waiting places: a burst of 12 all get in, the 13th does not.
        let q = WaitQueue::new(4, 8);
        for i in 0..12 {
            q.push(i).unwrap();
        }
        assert_eq!(q.push(12), Err(PushError::Full(12)));
        assert!(q.is_full());
        assert_eq!(q.pop(), Some(0));
        assert!(q.is_full(), "a popped item still runs");
        q.finish_one();
        assert!(!q.is_full());
        // Nothing waits, nothing runs: even zero waiting places admit one per slot.
        let q = WaitQueue::new(0, 2);
        q.push(1).unwrap();
        q.push(2).unwrap();
        assert_eq!(q.push(3), Err(PushError::Full(3)));
    }

    #[test]
    fn closed_queue_refuses_pushes_and_returns_leftovers() {
        let q = WaitQueue::new(4, 0);
        q.push("a").unwrap();
        assert_eq!(q.close(), vec!["a"]);
        assert_eq!(q.push("b"), Err(PushError::Closed("b")));
        assert!(!q.wait_for_item(Duration::from_secs(5)));
    }

    #[test]
    fn remove_where_takes_matching_items_only() {
        let q = WaitQueue::new(8, 0);
        for i in 0..6 {
            q.push(i).unwrap();
        }
        assert_eq!(q.remove_where(|i| i % 2 == 0), vec![0, 2, 4]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.pop(), Some(1));
    }

    #[test]
    fn waiter_wakes_on_push_from_another_thread() {
        let q = Arc::new(WaitQueue::new(1, 0));
        let pusher = Arc::clone(&q);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            pusher.push(7).unwrap();
        });
        let start = Instant::now();
        assert!(q.wait_for_item(Duration::from_secs(10)));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(q.pop(), Some(7));
        t.join().unwrap();
    }
}
