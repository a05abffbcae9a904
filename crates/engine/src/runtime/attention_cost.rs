//! When recomputing cached tokens makes a short prefill cheaper, on llama.cpp's CPU backend.
//!
//! llama.cpp's CPU flash attention has two kernels. A KV stream with at least
//! `GGML_FA_TILE_Q` (64) query rows in a ubatch goes through the tiled one; fewer rows go
//! one by one over every cached cell, which at a few hundred cells costs more than the
//! rest of the model. Measured on SmolLM2-135M, two AVX-512 cores, ~310 tokens cached: 41
//! new tokens took 283 ms, 62 took 429 ms, 72 took 257 ms. A chat's next turn is exactly
//! such a short prefill behind a long cached prefix, so it pays to compute a few of the
//! cached tokens again and give the kernel its 64 rows (llama-server pays the full cost).
//!
//! Several sequences prefilling in one step make it worse: with one KV stream per
//! sequence, llama.cpp splits a batch into ubatches holding the same number of rows of
//! each consecutive sequence, so a sequence with 30 rows beside one with 65 cuts both into
//! 30-row pieces and sends all of them down the row-by-row path (three follow-up turns of
//! 24 to 65 new tokens arriving together took 1.3 s). There every short prefill of more than
//! a few rows is widened.
//! GPU kernels have other thresholds; this applies to CPU attention only.
//!
//! Whether the row-by-row kernel is that slow depends on the CPU: on a 2-core AMD EPYC
//! (AVX-512, 2026-12-05) a chat turn's ~40 new tokens behind ~400 cached were not, and
//! widening them made idle follow-up turns' first tokens later (median 261 ms against 186
//! unwidened; llama-server 187). So the engine times both at start (`widening_pays`) and
//! widens only where the wide prefill measured cheaper.

/// Query rows of one stream that llama.cpp's tiled CPU attention computes together
/// (`GGML_FA_TILE_Q`). Rows past whole tiles go through the row-by-row kernel: one sequence
/// at 100-1,000 cached tokens took 14-32 ms more for 65 rows than for 64 (a one-row step's
/// cost or more, for one row), and at 300-1,000 cached 64 rows took less than 63.
pub(crate) const TILE_QUERY_ROWS: usize = 64;

/// `TILE_QUERY_ROWS` plus one: in a batch with decode tokens, llama.cpp's equal split puts
/// one row of every consecutive sequence into the decode ubatch first.
pub(crate) const WIDE_PREFILL_ROWS: usize = TILE_QUERY_ROWS + 1;

/// Per query row, the row-by-row kernel costs about as much as the model's weights for
/// every this many cached cells; the tiled kernel for every `TILED_CELLS_PER_ROW`. Fitted
/// to prefills of 4 to 150 tokens behind 300 and 630 cached (see the module comment).
const ROW_BY_ROW_CELLS_PER_ROW: f64 = 300.0;
const TILED_CELLS_PER_ROW: f64 = 2700.0;

/// Beside other prefills, a prefill of this many rows or more is widened whatever it
/// costs alone: it would cut its neighbours into pieces as narrow. A prefill of a row or
/// a few (a prompt cached but for its last token) cuts off as little as a decode token
/// does, and widening it would compute up to 64 cached tokens for nothing.
const MIN_ROWS_WIDENED_BESIDE_OTHERS: usize = 16;

/// Widening must save at least this share of the predicted cost: the model is rough, and
/// reported cache hits shrink by what is recomputed. At 0.2 a 46-token question behind a
/// 208-token system prompt (a 16 % saving) stayed row by row; widened, its first token came
/// ~11 % sooner in two A/B pairs (shared system prompts at 1 req/s).
const MIN_SAVING: f64 = 0.1;

/// The probe run at start: a prefill of `PROBE_NARROW_ROWS` new tokens behind
/// `PROBE_CACHED` cached, against `WIDE_PREFILL_ROWS` ending at the same position (a chat
/// turn behind its history, narrow and widened).
pub(crate) const PROBE_CACHED: usize = 320;
pub(crate) const PROBE_NARROW_ROWS: usize = 40;

/// Whether widening pays on this machine, from the probe's fastest timings (ms): the wide
/// prefill must save `MIN_SAVING` of the narrow one, as each widening must by the model.
pub(crate) fn widening_pays(narrow_ms: f64, wide_ms: f64) -> bool {
    wide_ms <= (1.0 - MIN_SAVING) * narrow_ms
}

/// How many prompt tokens to compute in a step that would compute the `left` last ones of
/// a prompt whose `cached` earlier ones are in KV: `left`, or `WIDE_PREFILL_ROWS` when
/// recomputing some cached ones makes the step predictably cheaper. `beside_others`: other
/// sequences prefill in the same step.
pub(crate) fn cpu_prefill_width(cached: usize, left: usize, beside_others: bool) -> usize {
    if left >= WIDE_PREFILL_ROWS || cached + left < WIDE_PREFILL_ROWS {
        return left;
    }
    if beside_others && left >= MIN_ROWS_WIDENED_BESIDE_OTHERS {
        return WIDE_PREFILL_ROWS;
    }
    let cells = (cached + left) as f64;
    let row_by_row = left as f64 * (1.0 + cells / ROW_BY_ROW_CELLS_PER_ROW);
    let tiled = WIDE_PREFILL_ROWS as f64 * (1.0 + cells / TILED_CELLS_PER_ROW);
    if tiled <= (1.0 - MIN_SAVING) * row_by_row {
        WIDE_PREFILL_ROWS
    } else {
        left
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_is_used_only_where_the_probe_found_the_wide_prefill_a_tenth_cheaper() {
        // The measurements behind the cost model: 41 new tokens 283 ms, widened 224 ms.
        assert!(widening_pays(283.0, 224.0));
        // A CPU whose row-by-row kernel is fast: 40 new tokens cost less than 65.
        assert!(!widening_pays(140.0, 220.0));
        assert!(!widening_pays(200.0, 190.0), "within the noise");
    }

    #[test]
    fn a_chat_turn_behind_a_long_history_is_widened_to_the_tiled_kernel() {
        // The measured case: 41 and 62 new tokens behind ~310 cached.
        assert_eq!(cpu_prefill_width(310, 62, false), WIDE_PREFILL_ROWS);
        assert_eq!(cpu_prefill_width(310, 48, false), WIDE_PREFILL_ROWS);
        // The longer the history, the fewer new tokens it takes.
        assert_eq!(cpu_prefill_width(630, 35, false), WIDE_PREFILL_ROWS);
        assert_eq!(cpu_prefill_width(310, 35, false), 35);
        // A question behind a cached system prompt.
        assert_eq!(cpu_prefill_width(208, 46, false), WIDE_PREFILL_ROWS);
    }

    #[test]
    fn short_histories_few_new_tokens_and_wide_prefills_are_left_alone() {
        assert_eq!(cpu_prefill_width(0, 50, false), 50, "nothing cached");
        assert_eq!(cpu_prefill_width(10, 50, false), 50, "too little cached to widen to 65");
        assert_eq!(cpu_prefill_width(128, 30, false), 30, "a short history: 30 rows cost less than 65");
        assert_eq!(cpu_prefill_width(10, 60, false), 60, "not a tenth cheaper");
        assert_eq!(cpu_prefill_width(2000, 8, false), 8, "eight rows stay cheaper than 65");
        assert_eq!(cpu_prefill_width(310, 65, false), 65);
        assert_eq!(cpu_prefill_width(310, 300, false), 300);
    }

    #[test]
    fn beside_other_prefills_every_short_one_that_can_be_widened_is_but_a_few_rows() {
        assert_eq!(cpu_prefill_width(300, 16, true), WIDE_PREFILL_ROWS);
        assert_eq!(cpu_prefill_width(300, 1, true), 1, "a cached prompt's last token");
        assert_eq!(cpu_prefill_width(300, 15, true), 15);
        assert_eq!(cpu_prefill_width(310, 35, true), WIDE_PREFILL_ROWS);
        assert_eq!(cpu_prefill_width(10, 30, true), 30, "not enough cached to widen");
        assert_eq!(cpu_prefill_width(310, 200, true), 200);
    }
}
