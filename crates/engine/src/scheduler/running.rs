//! The running sequences, by slot, and the order they were admitted in (the order prompts
//! get a step's prefill budget in).

use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};

use crate::request::sequence::Sequence;

pub(crate) struct Running {
    seqs: Vec<Option<Sequence>>,
    order: VecDeque<usize>,
}

impl Running {
    pub fn new(slots: usize) -> Self {
        Self { seqs: (0..slots).map(|_| None).collect(), order: VecDeque::with_capacity(slots) }
    }

    /// Slots in admission order.
    pub fn order(&self) -> &VecDeque<usize> {
        &self.order
    }

    /// The sequences to change, with the admission order beside them.
    pub fn with_order(&mut self) -> (&mut [Option<Sequence>], &VecDeque<usize>) {
        (&mut self.seqs, &self.order)
    }

    pub fn is_idle(&self) -> bool {
        self.order.is_empty()
    }

    /// Sequences running.
    pub fn count(&self) -> usize {
        self.order.len()
    }

    /// `seq` starts in `slot`, last in admission order.
    pub fn admit(&mut self, slot: usize, seq: Sequence) {
        self.seqs[slot] = Some(seq);
        self.order.push_back(slot);
    }

    /// The sequence in `slot` leaves it.
    pub fn take(&mut self, slot: usize) -> Option<Sequence> {
        let seq = self.seqs[slot].take()?;
        self.order.retain(|&s| s != slot);
        Some(seq)
    }

    /// The sequence in `from` moves to the free slot `to`, keeping its turn.
    pub fn move_slot(&mut self, from: usize, to: usize) {
        self.seqs[to] = self.seqs[from].take();
        for slot in self.order.iter_mut().filter(|s| **s == from) {
            *slot = to;
        }
    }
}

/// The sequences by slot, as the rest of the engine reads them (`None`: idle).
impl Deref for Running {
    type Target = [Option<Sequence>];

    fn deref(&self) -> &Self::Target {
        &self.seqs
    }
}

impl DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.seqs
    }
}
