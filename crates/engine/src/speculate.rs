//! Speculative decoding without a draft model: drafts come from the sequence's own tokens
//! (prompt lookup, vLLM's `ngram` method: the last few tokens are looked up earlier in the
//! prompt and output, and what followed them there is proposed next). A sequence with a
//! draft feeds it after its last token, the step computes logits at every row, and
//! `scheduler::decode::verify` keeps the longest prefix the model itself would have
//! sampled. Under a constraint a draft is cut to what the grammar accepts, each row is
//! sampled under its mask, and tokens the grammar forces after a kept draft end the
//! verification (they take the positions the rest was fed at). How many tokens to draft
//! is priced here: on a CPU an extra row costs about a prompt token's compute, which a
//! draft repays only where it is likely to be accepted.

use crate::forecast::DraftPrices;
#[cfg(test)]
use crate::forecast::RowCosts;
use crate::runtime::TokenId;
use crate::sequence::Sequence;

/// Longest and shortest suffix looked up (vLLM's `prompt_lookup_max`/`_min`). One token of
/// context matches almost anywhere and is rarely followed the same way.
const MAX_NGRAM: usize = 4;
const MIN_NGRAM: usize = 2;

/// Most tokens drafted for one sequence in one step.
pub(crate) const MAX_DRAFT: usize = rillm_backend::DRAFT_POSITIONS;

/// A draft must promise this much more output per millisecond than no draft: prices are
/// measured on a noisy machine, and a draft that only breaks even costs latency.
const MIN_GAIN: f64 = 1.05;

/// How quickly a sequence's acceptance estimate follows its latest verified drafts.
const ACCEPTANCE_SMOOTHING: f64 = 0.3;

/// Sets each generating sequence's drafts for the next step: what prompt lookup finds, as
/// deep as pays at this step's size, within `budget` extra rows in all. `history` is a
/// buffer, reused across steps.
pub(crate) fn propose_drafts(
    slots: &mut [Option<Sequence>],
    prices: DraftPrices,
    ctx_limit: u32,
    mut budget: usize,
    history: &mut Vec<TokenId>,
) {
    let mut rows: usize = slots.iter().flatten().map(|s| s.uncached_generated().len()).sum();
    for seq in slots.iter_mut().flatten() {
        seq.drafts.clear();
        seq.predicted = None;
        let room = seq.draft_room(ctx_limit).min(budget).min(MAX_DRAFT);
        if room == 0 || seq.uncached_generated().len() != 1 {
            continue;
        }
        seq.history_into(history);
        let found = lookup_draft(history, room);
        // Under a constraint, only the part of the draft the grammar accepts can be kept.
        let found = &found[..seq.constraint_allows(found)];
        let k = draft_len(found.len(), seq.acceptance, rows, prices);
        // Not drafting still teaches: was the lookup's first token the model's next?
        seq.predicted = if k == 0 { found.first().copied() } else { None };
        seq.drafts.extend_from_slice(&found[..k]);
        budget -= k;
        rows += k;
    }
}

/// Tokens that followed the latest earlier occurrence of the longest suffix of `history`
/// (of `MAX_NGRAM` down to `MIN_NGRAM` tokens) that occurred before, at most `max` of
/// them; empty when no suffix recurs.
pub(crate) fn lookup_draft(history: &[TokenId], max: usize) -> &[TokenId] {
    let len = history.len();
    for n in (MIN_NGRAM..=MAX_NGRAM.min(len.saturating_sub(1))).rev() {
        let suffix = &history[len - n..];
        // The latest earlier match: most like what comes next (code being repeated, the
        // current paragraph of a quoted text).
        let found = (0..len - n).rev().find(|&start| &history[start..start + n] == suffix);
        if let Some(start) = found {
            let from = start + n;
            return &history[from..(from + max).min(len)];
        }
    }
    &[]
}

/// How many of `available` drafted tokens to feed: the count that most raises the step's
/// output per millisecond, given the sequence's acceptance rate per token, the `rows` the
/// step already computes and what steps of so many rows were measured to cost. Accepted
/// drafts add `a + a^2 + ... + a^k` tokens to the step's output. Zero where no draft pays
/// (by at least `MIN_GAIN`), so text that does not repeat itself costs nothing.
pub(crate) fn draft_len(available: usize, acceptance: f64, rows: usize, prices: DraftPrices) -> usize {
    let rows = rows.max(1);
    let base = rows as f64 / prices.step_ms(rows).max(1e-3);
    let mut best = (0, base * MIN_GAIN);
    let mut expected = 0.0;
    let mut reach = 1.0;
    for k in 1..=available.min(MAX_DRAFT) {
        reach *= acceptance;
        expected += reach;
        let rate = (rows as f64 + expected) / prices.step_ms(rows + k).max(1e-3);
        if rate > best.1 {
            best = (k, rate);
        }
    }
    best.0
}

/// A sequence's acceptance estimate after `accepted` of `drafted` tokens were kept.
pub(crate) fn updated_acceptance(acceptance: f64, drafted: usize, accepted: usize) -> f64 {
    if drafted == 0 {
        return acceptance;
    }
    let observed = accepted as f64 / drafted as f64;
    acceptance + ACCEPTANCE_SMOOTHING * (observed - acceptance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_recurring_suffix_proposes_what_followed_it_last() {
        // "a b c d" then later "x b c" : suffix [b, c] recurs, followed by d.
        let history = [1, 2, 3, 4, 9, 2, 3];
        assert_eq!(lookup_draft(&history, 4), [4, 9, 2, 3]);
        assert_eq!(lookup_draft(&history, 2), [4, 9]);
        // The latest occurrence wins, and a longer match beats a shorter one.
        let history = [7, 1, 2, 5, 8, 1, 2, 6, 3, 1, 2];
        assert_eq!(lookup_draft(&history, 1), [6]);
        let history = [5, 1, 2, 3, 4, 0, 1, 2, 6, 2, 3, 0, 1, 2];
        assert_eq!(lookup_draft(&history, 2), [6, 2], "[0, 1, 2] recurs; [1, 2] alone would say 6 too, [2] says 3");
        // Nothing recurs, or only one token of context: no draft.
        assert!(lookup_draft(&[1, 2, 3, 4], 4).is_empty());
        assert!(lookup_draft(&[1, 2, 3, 1], 4).is_empty());
        assert!(lookup_draft(&[], 4).is_empty());
        // A draft never reaches past the end of the history.
        assert_eq!(lookup_draft(&[1, 2, 1, 2], 8), [1, 2]);
    }

    #[test]
    fn drafts_are_fed_only_where_they_raise_the_step_output() {
        let cheap = RowCosts::linear(7.0, 2.5);
        let prices = DraftPrices::new(&cheap, 7.0);
        // One stream, drafts that are usually right: draft deep.
        assert!(draft_len(8, 0.9, 1, prices) >= 3);
        // Rarely right: not worth a row.
        assert_eq!(draft_len(8, 0.2, 1, prices), 0);
        // A full batch (16 rows, 3 ms each) makes the same acceptance draft less, or not at all.
        let full = RowCosts::linear(7.0, 3.0);
        let busy = DraftPrices::new(&full, 7.0);
        assert!(draft_len(8, 0.7, 16, busy) < draft_len(8, 0.7, 1, prices));
        assert_eq!(draft_len(8, 0.5, 16, busy), 0);
        // As measured on CPU: one row 9 ms, two 22 ms, then ~4.5 ms a row. A short draft
        // never pays; a long one does when nearly every token is kept.
        let mut cpu = RowCosts::default();
        cpu.observe(1, 9.0);
        cpu.observe(2, 22.0);
        let cpu = DraftPrices::new(&cpu, 9.0);
        assert_eq!(draft_len(2, 0.95, 1, cpu), 0);
        assert_eq!(draft_len(8, 0.7, 1, cpu), 0);
        assert!(draft_len(8, 0.97, 1, cpu) >= 6);
        // Never more than is available.
        assert_eq!(draft_len(2, 0.99, 1, prices), 2);
        assert_eq!(draft_len(0, 0.99, 1, prices), 0);
    }

    #[test]
    fn acceptance_follows_what_was_kept() {
        let a = updated_acceptance(0.6, 4, 4);
        assert!(a > 0.6 && a <= 1.0, "{a}");
        let b = updated_acceptance(0.6, 4, 0);
        assert!((0.0..0.6).contains(&b));
        assert_eq!(updated_acceptance(0.6, 0, 0), 0.6);
    }
}
