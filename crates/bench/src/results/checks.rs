//! The level's sums of the per-reply checks (`crate::checks`): how many constrained
//! outputs were valid, how many tool calls were, and how fast later tool rounds began.

use serde::{Deserialize, Serialize};

use crate::checks::{CallCheck, OutputCheck};
use crate::stats::Distribution;

/// The level's check of constrained outputs, over requests that completed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ConstraintSummary {
    /// Completed requests that carried a constraint.
    pub checked: usize,
    /// Of those, cut by `max_tokens` (`finish_reason` length): not finished outputs.
    pub cut_by_length: usize,
    /// Finished (not cut) outputs that parse, and that are valid.
    pub finished: usize,
    pub parsed: usize,
    pub valid: usize,
    /// `valid` over `finished`, in percent: whether the server kept to the constraints.
    pub valid_pct_of_finished: Option<f64>,
    /// `valid` over `checked`, in percent: every completed request, cut or not.
    pub valid_pct_of_completed: Option<f64>,
}

impl ConstraintSummary {
    /// From each completed request's check and whether `max_tokens` cut it.
    pub fn of(checks: impl IntoIterator<Item = (OutputCheck, bool)>) -> Option<Self> {
        let mut s = Self::default();
        for (check, cut) in checks {
            s.checked += 1;
            if cut {
                s.cut_by_length += 1;
                continue;
            }
            s.finished += 1;
            s.parsed += usize::from(check.parses);
            s.valid += usize::from(check.valid);
        }
        let pct = |n: usize, of: usize| (of > 0).then(|| 100.0 * n as f64 / of as f64);
        s.valid_pct_of_finished = pct(s.valid, s.finished);
        s.valid_pct_of_completed = pct(s.valid, s.checked);
        (s.checked > 0).then_some(s)
    }
}

/// Over a run: how many replies called tools, how many calls were valid, and the rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallSummary {
    /// Completed replies, and those that called at least one tool.
    pub replies: usize,
    pub replies_with_calls: usize,
    pub calls: u64,
    pub parsed: u64,
    pub allowed: u64,
    pub valid: u64,
    /// Calls `max_tokens` cut short, apart.
    #[serde(default)]
    pub cut: u64,
    /// Calls that repeat an earlier one of their reply, and calls with undeclared keys.
    #[serde(default)]
    pub repeated: u64,
    #[serde(default)]
    pub undeclared: u64,
    /// Valid calls of all calls made, in percent.
    pub valid_pct: Option<f64>,
    /// Completed requests that were a second or later round (a reply to tool results).
    pub later_rounds: usize,
    /// TTFT p50 of first rounds (the user's turn) and of later rounds (replies to tool
    /// results: where reusing the conversation's KV decides).
    pub ttft_p50_first_round_ms: Option<f64>,
    pub ttft_p50_later_rounds_ms: Option<f64>,
}

impl ToolCallSummary {
    /// From each completed reply's check, round and TTFT.
    pub fn of(replies: impl Iterator<Item = (CallCheck, u32, Option<f64>)>) -> Option<Self> {
        let mut s = Self::default();
        let (mut first, mut later) = (Vec::new(), Vec::new());
        for (check, round, ttft) in replies {
            if let Some(ttft) = ttft {
                if round > 1 {
                    later.push(ttft)
                } else {
                    first.push(ttft)
                }
            }
            s.replies += 1;
            s.replies_with_calls += usize::from(check.calls > 0);
            s.calls += u64::from(check.calls);
            s.parsed += u64::from(check.parsed);
            s.allowed += u64::from(check.allowed);
            s.valid += u64::from(check.valid);
            s.cut += u64::from(check.cut);
            s.repeated += u64::from(check.repeated);
            s.undeclared += u64::from(check.undeclared);
            s.later_rounds += usize::from(round > 1);
        }
        s.valid_pct = (s.calls > 0).then(|| 100.0 * s.valid as f64 / s.calls as f64);
        s.ttft_p50_first_round_ms = Distribution::of(first).map(|d| d.p50);
        s.ttft_p50_later_rounds_ms = Distribution::of(later).map(|d| d.p50);
        (s.replies > 0).then_some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_cut_outputs_apart() {
        let ok = OutputCheck { parses: true, valid: true };
        let bad = OutputCheck { parses: true, valid: false };
        let broken = OutputCheck { parses: false, valid: false };
        let s = ConstraintSummary::of([(ok, false), (ok, false), (bad, false), (broken, true)]).expect("some");
        assert_eq!((s.checked, s.cut_by_length, s.finished, s.parsed, s.valid), (4, 1, 3, 3, 2));
        assert_eq!(s.valid_pct_of_finished.map(|p| (p * 10.0).round()), Some(666.0 + 1.0));
        assert_eq!(s.valid_pct_of_completed, Some(50.0));
        assert_eq!(ConstraintSummary::of([]), None);
    }

    #[test]
    fn the_tool_summary_sums_replies_and_splits_ttft_by_round() {
        let check =
            CallCheck { calls: 3, parsed: 3, allowed: 2, valid: 1, repeated: 1, undeclared: 1, ..CallCheck::default() };
        let replies = [(check, 1, Some(10.0)), (CallCheck::default(), 2, Some(4.0))];
        let summary = ToolCallSummary::of(replies.into_iter()).expect("a summary");
        assert_eq!((summary.ttft_p50_first_round_ms, summary.ttft_p50_later_rounds_ms), (Some(10.0), Some(4.0)));
        assert_eq!((summary.replies, summary.replies_with_calls, summary.later_rounds), (2, 1, 1));
        assert_eq!(summary.valid_pct.map(|p| p.round()), Some(33.0));
        let summary = ToolCallSummary::of([(check, 1, None), (check, 2, None)].into_iter()).expect("a summary");
        assert_eq!((summary.repeated, summary.undeclared), (2, 2));
        assert_eq!(ToolCallSummary::of(std::iter::empty()), None);
    }
}
