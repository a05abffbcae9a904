//! How often a sequence's drafts are kept, by where they came from: how deep its next
//! draft goes (`draft_lengths` prices a draft by this per-token chance). Each slot's
//! estimates are the drafter's (`SlotDrafts`).

/// Where a draft came from: each kind has its own acceptance estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DraftSource {
    /// A short suffix of the sequence (2 to 4 tokens) occurred before in it.
    Suffix,
    /// Its last 16 tokens occurred before, in its own tokens or a pooled request's: it is
    /// copying.
    Copy,
    /// A draft model's greedy continuation (`--speculative draft`).
    Model,
}

/// Per-token acceptance assumed for copies before one was verified: high enough that a
/// copy is tried at a moderate length, which its outcome then lengthens or ends.
const PRIOR_COPY_ACCEPTANCE: f64 = 0.9;

/// Per-token acceptance assumed for a draft model before one of its drafts was verified:
/// a small model of the same family agrees with its target on most tokens of plain text.
const PRIOR_MODEL_ACCEPTANCE: f64 = 0.7;

/// Suffix-match acceptance assumed before anything was drafted or predicted: a few of a
/// sequence's tokens checked against prompt lookup settle it either way.
const PRIOR_ACCEPTANCE: f64 = 0.5;

/// How quickly a sequence's acceptance estimate follows its latest verified drafts.
const ACCEPTANCE_SMOOTHING: f64 = 0.3;

/// A sequence's per-token acceptance estimates, one per draft source, and the source of
/// its latest lookup (which the next verification teaches).
#[derive(Debug, Clone)]
pub(crate) struct Acceptance {
    suffix: f64,
    copy: f64,
    model: f64,
    pub source: DraftSource,
}

impl Default for Acceptance {
    fn default() -> Self {
        Self {
            suffix: PRIOR_ACCEPTANCE,
            copy: PRIOR_COPY_ACCEPTANCE,
            model: PRIOR_MODEL_ACCEPTANCE,
            source: DraftSource::Suffix,
        }
    }
}

impl Acceptance {
    /// The estimate for the latest lookup's source.
    pub fn current(&self) -> f64 {
        match self.source {
            DraftSource::Suffix => self.suffix,
            DraftSource::Copy => self.copy,
            DraftSource::Model => self.model,
        }
    }

    /// `accepted` of `drafted` tokens from the latest lookup were kept. Suffix drafts
    /// follow the share kept. A copy's draft is long and ends at its first miss, so its
    /// share kept would understate the per-token chance `draft_len` prices: a copy
    /// follows kept ÷ (kept + misses) instead, the chance's maximum-likelihood estimate; so
    /// does a draft model's, which also ends at its first miss.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        let missed = usize::from(accepted < drafted);
        let to_first_miss = accepted as f64 / (accepted + missed) as f64;
        let (estimate, observed) = match self.source {
            DraftSource::Suffix => (&mut self.suffix, accepted as f64 / drafted as f64),
            DraftSource::Copy => (&mut self.copy, to_first_miss),
            DraftSource::Model => (&mut self.model, to_first_miss),
        };
        *estimate += ACCEPTANCE_SMOOTHING * (observed - *estimate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acceptance_follows_what_was_kept_per_source() {
        let mut a = Acceptance::default();
        let prior = (a.suffix, a.copy);
        a.observe(4, 4);
        assert!(a.suffix > prior.0 && a.suffix <= 1.0, "{a:?}");
        a.observe(4, 0);
        a.observe(4, 0);
        assert!(a.suffix < prior.0, "{a:?}");
        a.observe(0, 0);
        assert_eq!(a.copy, prior.1, "suffix drafts teach nothing of copies");
        // A copy of 64 that missed at its 40th token: 39 of 40 chances taken, not 39 of 64.
        a.source = DraftSource::Copy;
        let before = a.current();
        a.observe(64, 39);
        let observed = 39.0 / 40.0;
        assert!((a.current() - (before + ACCEPTANCE_SMOOTHING * (observed - before))).abs() < 1e-9);
        let before = a.current();
        a.observe(64, 64);
        assert!(a.current() > before, "a copy kept whole raises it: {a:?}");
    }
}
