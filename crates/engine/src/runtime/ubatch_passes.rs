//! How llama.cpp cuts one step's batch into passes over the weights, so that a step's cost
//! can be priced by its layout and not only by its row count.
//!
//! With one KV stream per sequence (`llama_context::slot_context_params`), llama.cpp
//! splits a batch "equally" (`llama_batch_allocr::split_equal`, sequential): a ubatch takes
//! the same number of rows from each sequence of a run of consecutive sequence ids, as many
//! as the shortest of them has left. Eight streams with one row each are one pass; the same
//! eight with drafts of 0 to 4 tokens become up to five, and every pass costs at least a
//! one-row step. Measured with SmolLM2-135M on two AVX-512 cores, eight sequences at 400
//! cached tokens, logits on every row: 8 × 2 rows in one pass 72.5 ms, the same 16 rows laid
//! out 1,5,1,3,1,1,1,3 (four passes) 99 ms, and 12 rows laid out 2,1,2,1,2,1,2,1 (five
//! passes) 79-90 ms, more than the 16 in one. Drafts are therefore chosen by what their
//! layout costs (`speculation::draft_lengths`), and step prices are learnt from one-pass steps only.

use crate::runtime::BatchToken;

/// One pass over the weights: its rows, the same number from each of a run of sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pass {
    pub rows: usize,
    pub per_sequence: usize,
}

/// The passes llama.cpp makes of a batch holding `rows[s]` rows of sequence `s` (laid out
/// in sequence order, as `scheduler::batch` does), in ubatches of at most `ubatch_rows`.
/// Written into `passes`, which is cleared first. Takes the rows out of `rows`, which is
/// left all zero (no copy: layouts are priced thousands of times a step).
pub(crate) fn passes_into(rows: &mut [usize], ubatch_rows: usize, passes: &mut Vec<Pass>) {
    passes.clear();
    let left = rows;
    while let Some(start) = left.iter().position(|&r| r > 0) {
        // The run of consecutive sequences from the first one with rows left.
        let run = left[start..].iter().take_while(|&&r| r > 0).count();
        let shortest = left[start..start + run].iter().copied().min().unwrap_or(0);
        // At least one row each, then more while the ubatch has room for a row of each.
        let each = shortest.min((ubatch_rows / run).max(1));
        left[start..start + run].iter_mut().for_each(|r| *r -= each);
        passes.push(Pass { rows: each * run, per_sequence: each });
    }
}

/// How many rows of each of `slots` sequences `batch` holds, into `rows` (cleared first).
pub(crate) fn rows_per_sequence(batch: &[BatchToken], slots: usize, rows: &mut Vec<usize>) {
    rows.clear();
    rows.resize(slots, 0);
    for token in batch {
        if let Some(r) = rows.get_mut(token.seq) {
            *r += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passes(rows: &[usize], ubatch_rows: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut left = rows.to_vec();
        passes_into(&mut left, ubatch_rows, &mut out);
        assert!(left.iter().all(|&r| r == 0), "every row is in a pass");
        out.iter().map(|pass| pass.rows).collect()
    }

    #[test]
    fn equal_rows_over_consecutive_sequences_are_one_pass() {
        assert_eq!(passes(&[1; 8], 512), [8]);
        assert_eq!(passes(&[3; 4], 512), [12]);
        assert_eq!(passes(&[0, 0, 5], 512), [5]);
        assert!(passes(&[0, 0], 512).is_empty());
    }

    #[test]
    fn uneven_rows_are_cut_into_a_pass_per_level_and_per_run() {
        // The layouts measured in the module comment.
        assert_eq!(passes(&[1, 1, 1, 1, 1, 1, 1, 9], 512), [8, 8]);
        assert_eq!(passes(&[1, 5, 1, 3, 1, 1, 1, 3], 512), [8, 4, 2, 2]);
        assert_eq!(passes(&[2, 1, 2, 1, 2, 1, 2, 1], 512), [8, 1, 1, 1, 1]);
        // A sequence without rows breaks the run: the ids must be consecutive.
        assert_eq!(passes(&[1, 0, 1], 512), [1, 1]);
        assert_eq!(passes(&[3, 3, 0, 3, 3], 512), [6, 6]);
    }

    #[test]
    fn a_pass_holds_at_most_a_ubatch() {
        assert_eq!(passes(&[300], 512), [300]);
        assert_eq!(passes(&[700], 512), [512, 188]);
        assert_eq!(passes(&[300, 300], 512), [512, 88]);
    }

    #[test]
    fn rows_are_counted_per_sequence() {
        let token = |seq| BatchToken { token: 0, pos: 0, seq, logits: true };
        let mut rows = Vec::new();
        rows_per_sequence(&[token(0), token(2), token(2), token(7)], 4, &mut rows);
        assert_eq!(rows, [1, 0, 2, 0]);
    }
}
