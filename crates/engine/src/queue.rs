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
//! waiting items fill every slot and every waiting place. An item may need several places
//! (a request for `n` choices runs as `n` sequences): its weight.

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
    /// Places an item takes.
    weight: fn(&T) -> usize,
}

struct State<T> {
    items: VecDeque<T>,
    /// Places the waiting items take.
    waiting: usize,
    /// Places of popped items not yet given back by `finish_one`.
    running: usize,
    closed: bool,
}

impl<T> WaitQueue<T> {
    /// `capacity` places to wait in, besides `slots` places to run.
    pub fn new(capacity: usize, slots: usize) -> Self {
        Self {
            state: Mutex::new(State { items: VecDeque::new(), waiting: 0, running: 0, closed: false }),
            wake: Condvar::new(),
            capacity,
            slots,
            weight: |_| 1,
        }
    }

    /// Items take `weight(item)` places each (at least one), not one.
    pub fn weighted(mut self, weight: fn(&T) -> usize) -> Self {
        self.weight = weight;
        self
    }

    fn weight_of(&self, item: &T) -> usize {
        (self.weight)(item).max(1)
    }

    /// Waiting places (beyond the slots).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Places to run in.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// `f` of every waiting item, oldest first.
    pub fn map_waiting<R>(&self, f: impl FnMut(&T) -> R) -> Vec<R> {
        self.lock().items.iter().map(f).collect()
    }

    /// Every slot and waiting place is taken: a push now would be refused.
    pub fn is_full(&self) -> bool {
        let state = self.lock();
        state.waiting + state.running >= self.capacity + self.slots
    }

    pub fn push(&self, item: T) -> Result<(), PushError<T>> {
        let weight = self.weight_of(&item);
        let mut state = self.lock();
        if state.closed {
            return Err(PushError::Closed(item));
        }
        if state.waiting + state.running + weight > self.capacity + self.slots {
            return Err(PushError::Full(item));
        }
        state.waiting += weight;
        state.items.push_back(item);
        drop(state);
        self.wake.notify_one();
        Ok(())
    }

    /// Oldest item, if any, without blocking; its places count as running until given
    /// back, one `finish_one` each.
    pub fn pop(&self) -> Option<T> {
        self.pop_if(|_| true)
    }

    /// The oldest item if `fits` says it can run now; otherwise it keeps its turn.
    pub fn pop_if(&self, fits: impl FnOnce(&T) -> bool) -> Option<T> {
        let mut state = self.lock();
        if !state.items.front().is_some_and(fits) {
            return None;
        }
        let item = state.items.pop_front()?;
        let weight = self.weight_of(&item);
        state.waiting -= weight;
        state.running += weight;
        Some(item)
    }

    /// One place of a popped item is free again (its item finished, or one of its parts).
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
        for item in std::mem::take(&mut state.items) {
            if remove(&item) {
                state.waiting -= self.weight_of(&item);
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
        state.waiting = 0;
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
    fn heavy_items_take_their_weight_in_places_and_wait_for_room() {
        // An item's weight is its value: 3 slots and 1 waiting place hold 4 places.
        let q = WaitQueue::new(1, 3).weighted(|&w: &usize| w);
        q.push(3).unwrap();
        assert_eq!(q.push(2), Err(PushError::Full(2)), "3 + 2 places exceed 4");
        q.push(1).unwrap();
        assert!(q.is_full());
        assert_eq!(q.pop_if(|&w| w <= 2), None, "the head keeps its turn when it does not fit");
        assert_eq!(q.pop_if(|&w| w <= 3), Some(3));
        assert!(q.is_full(), "popped places run until given back");
        q.finish_one();
        q.finish_one();
        assert!(!q.is_full());
        q.push(2).unwrap();
        assert_eq!(q.remove_where(|&w| w == 2), vec![2]);
        q.push(2).unwrap();
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
