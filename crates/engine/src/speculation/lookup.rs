//! Speculative decoding without a draft model (with one: `model_drafts`): drafts come from
//! the sequence's own tokens (prompt lookup, vLLM's `ngram` method: the last few tokens are
//! looked up earlier in the prompt and output, and what followed them there is proposed
//! next). A sequence with a draft feeds it after its last token, the step computes logits
//! at every row, and
//! `scheduler::decode::verify` keeps the longest prefix the model itself would have
//! sampled. Under a constraint a draft is cut to what the grammar accepts, each row is
//! sampled under its mask, and tokens the grammar forces after a kept draft end the
//! verification (they take the positions the rest was fed at). How many tokens to feed is
//! `draft_lengths`' choice, for every sequence at once: on a CPU an extra row costs about a
//! prompt token's compute, which a draft repays only where it is likely to be accepted.
//!
//! A sequence whose last `COPY_MATCH` tokens all occurred before is copying (code being
//! repeated or edited, a quoted passage): what followed there is likely to follow whole,
//! so such a draft may run to `MAX_COPY_DRAFT` tokens (llama.cpp's `ngram-mod` drafts
//! 48-64 after a 24-token match). A wide verification step costs per row about what a
//! prompt token does, far less than a one-row step per token, so a long run kept whole is
//! where drafting pays most. Copies keep their own acceptance estimate. Where the
//! sequence's own tokens hold no copy, earlier requests' may (`ngram_pool`).

pub(crate) use super::acceptance::DraftSource;
use super::draft_lengths::{DraftOption, MIN_GAIN};
use super::ngram_pool::NgramPool;
use super::state::SlotDrafts;
use crate::cost::step_costs::DraftPrices;
#[cfg(test)]
use crate::cost::step_costs::RowCosts;
use crate::request::sequence::Sequence;
use crate::runtime::TokenId;

/// Longest and shortest suffix looked up (vLLM's `prompt_lookup_max`/`_min`). One token of
/// context matches almost anywhere and is rarely followed the same way.
const MAX_NGRAM: usize = 4;
const MIN_NGRAM: usize = 2;

/// Most tokens drafted for one sequence in one step from a short suffix match.
pub(crate) const MAX_DRAFT: usize = 8;

/// Tokens that must match an earlier run for the sequence to count as copying it.
const COPY_MATCH: usize = crate::speculation::ngram_pool::KEY_TOKENS;

/// Most tokens drafted in one step from a copy.
pub(crate) const MAX_COPY_DRAFT: usize = rillm_backend::DRAFT_POSITIONS;

/// What prompt lookup offers one sequence with `room` for drafts: its own tokens' match
/// (`history`), else a copy from earlier requests (`pool`); the part its constraint accepts
/// goes into `state.drafts`, priced by the acceptance of the draft's source.
pub(crate) fn offer(
    seq: &mut Sequence,
    state: &mut SlotDrafts,
    pool: &NgramPool,
    history: &[TokenId],
    room: usize,
    found: &mut Vec<TokenId>,
) -> DraftOption {
    let mut source = lookup_draft(history, room, found);
    if source == DraftSource::Suffix {
        let pooled = pool.lookup(history, room.min(MAX_COPY_DRAFT));
        if !pooled.is_empty() {
            found.clear();
            found.extend_from_slice(pooled);
            source = DraftSource::Copy;
        }
    }
    // Under a constraint, only the part of the draft the grammar accepts can be kept.
    let allowed = seq.constraint_allows(found);
    state.acceptance.source = source;
    state.drafts.extend_from_slice(&found[..allowed]);
    DraftOption::drafted(allowed, state.acceptance.current())
}

/// Puts into `draft` what followed an earlier occurrence of the end of `history`, at most
/// `max` tokens, and says where it came from: after the latest earlier copy of its last
/// `COPY_MATCH` tokens if there is one (up to `MAX_COPY_DRAFT` tokens), else after the
/// latest occurrence of its longest suffix of `MAX_NGRAM` down to `MIN_NGRAM` tokens (up to
/// `MAX_DRAFT`; empty when none recurs).
///
/// A continuation that reaches the end of `history` goes on with its own start: the
/// history is repeating a run as long as the distance to the match (a loop of a few tokens,
/// rows of a table), and the draft assumes the repetition goes on, as llama.cpp's
/// `ngram-mod` does by looking each drafted token's n-gram up again. Without it a loop of
/// four tokens drafts four a step, however long it has run.
pub(crate) fn lookup_draft(history: &[TokenId], max: usize, draft: &mut Vec<TokenId>) -> DraftSource {
    draft.clear();
    let (from, most, source) = match latest_earlier(history, COPY_MATCH) {
        Some(from) => (from, max.min(MAX_COPY_DRAFT), DraftSource::Copy),
        None => match (MIN_NGRAM..=MAX_NGRAM).rev().find_map(|n| latest_earlier(history, n)) {
            Some(from) => (from, max.min(MAX_DRAFT), DraftSource::Suffix),
            None => return DraftSource::Suffix,
        },
    };
    for at in from..from + most {
        let token = match history.get(at) {
            Some(&token) => token,
            None => draft[at - history.len()],
        };
        draft.push(token);
    }
    source
}

/// Where the tokens after the latest earlier occurrence of `history`'s last `n` tokens
/// begin. The latest is most like what comes next (code being repeated, the current
/// paragraph of a quoted text).
fn latest_earlier(history: &[TokenId], n: usize) -> Option<usize> {
    let len = history.len();
    if n == 0 || len <= n {
        return None;
    }
    let suffix = &history[len - n..];
    (0..len - n).rev().find(|&start| &history[start..start + n] == suffix).map(|start| start + n)
}

/// How many of `available` drafted tokens one sequence feeds when drafts cost
/// `ms_per_token` each to make before the step (a draft model's passes), on top of their
/// rows in it: the count that most raises the step's output per millisecond, given the
/// sequence's acceptance rate per token, the `rows` the step already computes and what
/// steps of so many rows were measured to cost. Accepted drafts add `a + a^2 + ... + a^k`
/// tokens to the step's output. Zero where no draft pays (by at least `MIN_GAIN`).
pub(crate) fn priced_draft_len(
    available: usize,
    acceptance: f64,
    rows: usize,
    prices: DraftPrices,
    ms_per_token: f64,
) -> usize {
    let rows = rows.max(1);
    let base = rows as f64 / prices.step_ms(rows).max(1e-3);
    let mut best = (0, base * MIN_GAIN);
    let mut expected = 0.0;
    let mut reach = 1.0;
    for k in 1..=available {
        reach *= acceptance;
        expected += reach;
        let rate = (rows as f64 + expected) / (prices.step_ms(rows + k) + k as f64 * ms_per_token).max(1e-3);
        if rate > best.1 {
            best = (k, rate);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_recurring_suffix_proposes_what_followed_it_last() {
        // "a b c d" then later "x b c" : suffix [b, c] recurs, followed by d.
        let suffix = |history: &[TokenId], max: usize| {
            let mut draft = Vec::new();
            assert_eq!(lookup_draft(history, max, &mut draft), DraftSource::Suffix);
            draft
        };
        let history = [1, 2, 3, 4, 9, 2, 3];
        assert_eq!(suffix(&history, 4), [4, 9, 2, 3]);
        assert_eq!(suffix(&history, 2), [4, 9]);
        // The latest occurrence wins, and a longer match beats a shorter one.
        let history = [7, 1, 2, 5, 8, 1, 2, 6, 3, 1, 2];
        assert_eq!(suffix(&history, 1), [6]);
        let history = [5, 1, 2, 3, 4, 0, 1, 2, 6, 2, 3, 0, 1, 2];
        assert_eq!(suffix(&history, 2), [6, 2], "[0, 1, 2] recurs; [1, 2] alone would say 6 too, [2] says 3");
        // Nothing recurs, or only one token of context: no draft.
        assert!(suffix(&[1, 2, 3, 4], 4).is_empty());
        assert!(suffix(&[1, 2, 3, 1], 4).is_empty());
        assert!(suffix(&[], 4).is_empty());
        // A draft never reaches past `MAX_DRAFT`. One that reaches the end of the history
        // repeats what it drafted: the history is looping.
        assert_eq!(suffix(&[1, 2, 1, 2], 8), [1, 2, 1, 2, 1, 2, 1, 2]);
        assert_eq!(suffix(&[5, 1, 2, 3, 1, 2], 5), [3, 1, 2, 3, 1]);
        let long: Vec<TokenId> = (0..40).chain(0..3).collect();
        assert_eq!(suffix(&long, 100), (3..3 + MAX_DRAFT as TokenId).collect::<Vec<_>>());
    }

    #[test]
    fn a_sequence_repeating_a_long_run_drafts_the_rest_of_it_as_a_copy() {
        let mut draft = Vec::new();
        // A source file of 200 distinct tokens, then the start of it again.
        let source: Vec<TokenId> = (1000..1200).collect();
        let mut history: Vec<TokenId> = source.iter().copied().chain([7, 7]).collect();
        history.extend_from_slice(&source[..COPY_MATCH]);
        assert_eq!(lookup_draft(&history, 500, &mut draft), DraftSource::Copy);
        assert_eq!(draft, &source[COPY_MATCH..COPY_MATCH + MAX_COPY_DRAFT]);
        lookup_draft(&history, 10, &mut draft);
        assert_eq!(draft, &source[COPY_MATCH..COPY_MATCH + 10], "within the room");
        // One token short of the copy length: a suffix draft, as short as those are.
        history.truncate(history.len() - 1);
        assert_eq!(lookup_draft(&history, 500, &mut draft), DraftSource::Suffix);
        assert_eq!(draft.len(), MAX_DRAFT);
        // A copy whose continuation reaches the end of the history goes on as the history
        // repeats: here 50 tokens, source[80..100] then source[50..80], over and over.
        let mut history = source[..100].to_vec();
        history.extend_from_slice(&source[50..80]);
        assert_eq!(lookup_draft(&history, 500, &mut draft), DraftSource::Copy);
        let period = &history[80..];
        let repeated: Vec<TokenId> = period.iter().chain(period).copied().take(MAX_COPY_DRAFT).collect();
        assert_eq!(draft, repeated);
        // A loop of four tokens that has run past the copy length drafts as deep as a copy.
        let looping: Vec<TokenId> = [9, 8].into_iter().chain([1, 2, 3, 4].repeat(5)).collect();
        assert_eq!(lookup_draft(&looping, 500, &mut draft), DraftSource::Copy);
        assert_eq!(draft, [1, 2, 3, 4].repeat(MAX_COPY_DRAFT / 4));
    }

    #[test]
    fn drafts_are_fed_only_where_they_raise_the_step_output() {
        let cheap = RowCosts::linear(7.0, 2.5);
        let prices = DraftPrices::new(&cheap, 7.0);
        // One stream, drafts that are usually right: draft deep.
        assert!(priced_draft_len(8, 0.9, 1, prices, 0.0) >= 3);
        // Rarely right: not worth a row.
        assert_eq!(priced_draft_len(8, 0.2, 1, prices, 0.0), 0);
        // A full batch (16 rows, 3 ms each) makes the same acceptance draft less, or not at all.
        let full = RowCosts::linear(7.0, 3.0);
        let busy = DraftPrices::new(&full, 7.0);
        assert!(priced_draft_len(8, 0.7, 16, busy, 0.0) < priced_draft_len(8, 0.7, 1, prices, 0.0));
        assert_eq!(priced_draft_len(8, 0.5, 16, busy, 0.0), 0);
        // As measured on CPU: one row 9 ms, two 22 ms, then ~4.5 ms a row. A short draft
        // never pays; a long one does when nearly every token is kept.
        let mut cpu = RowCosts::default();
        cpu.observe(1, 9.0);
        cpu.observe(2, 22.0);
        let cpu = DraftPrices::new(&cpu, 9.0);
        assert_eq!(priced_draft_len(2, 0.95, 1, cpu, 0.0), 0);
        assert_eq!(priced_draft_len(8, 0.7, 1, cpu, 0.0), 0);
        assert!(priced_draft_len(8, 0.97, 1, cpu, 0.0) >= 6);
        // Drafts that cost time to make (a draft model's passes) pay less, and not at all
        // when a pass costs what a one-row step does.
        assert!(priced_draft_len(8, 0.97, 1, cpu, 3.0) < priced_draft_len(8, 0.97, 1, cpu, 0.0));
        assert_eq!(priced_draft_len(8, 1.0, 1, cpu, 9.0), 0);
        // Never more than is available.
        assert_eq!(priced_draft_len(2, 0.99, 1, prices, 0.0), 2);
        assert_eq!(priced_draft_len(0, 0.99, 1, prices, 0.0), 0);
    }

    #[test]
    fn a_copy_kept_whole_drafts_deeper_where_wide_steps_are_cheap_per_row() {
        // As measured on CPU at ~900 cached tokens: one row 17 ms, then ~5 ms a row.
        let cpu = RowCosts::linear(17.0, 5.0);
        let prices = DraftPrices::new(&cpu, 17.0);
        let at = |acceptance| priced_draft_len(MAX_COPY_DRAFT, acceptance, 1, prices, 0.0);
        assert!(at(0.99) > MAX_DRAFT, "{}", at(0.99));
        assert!(at(0.9) <= at(0.99));
        assert_eq!(at(0.3), 0);
    }
}
