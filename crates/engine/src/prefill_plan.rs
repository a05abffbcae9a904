//! Which prompts get a step's prefill budget.
//!
//! A conversation's next turn, a retried request or a prompt behind a cached system prompt
//! has only a few dozen tokens left to prefill after prefix reuse, and needs one short step.
//! Served oldest first, it would share its step with a chunk of someone's cold opening
//! document, and a step costs about what its tokens cost: on two CPU cores a 256-token
//! chunk adds ~0.8 s to that turn's first token. So while short work waits, a step carries
//! only it (beside the decode tokens), and the long prompts resume in an ordinary step.
//!
//! Short work is a short prompt, or a constrained sequence still sampling the first tokens
//! of its output: a tool call shows nothing to its client until its name is written, a
//! JSON object little before its first key, and each of those tokens is a step (behind a
//! 256-token chunk, each took ~1.4 s where agents' replies to tool results met other
//! agents' cold openings).
//!
//! Long prompts are never starved: however much short work keeps coming, they get at least
//! half of the recent steps' time (a short-only step costs a fraction of an ordinary one,
//! so several short-only steps go for each ordinary one).

/// A prompt with at most this many tokens left to prefill is short. A chat turn after
/// reuse is its new message plus the chat template's few tokens, 20 to 80 in practice; an
/// agent's next round is its calls and their results, 100 to 300, more with several calls
/// (at 96, and at 256 for rounds of 273 tokens, agents' rounds replayed against rillm
/// waited behind other agents' cold openings: up to 81 s and 28 s to a first token).
pub(crate) const SHORT_PROMPT_TOKENS: usize = 512;

/// A constrained sequence's sampled tokens that still count as the start of its output.
pub(crate) const OPENING_SAMPLED_TOKENS: u32 = 4;

/// How much of the recent time counts: each step's weight decays by this much per step
/// after it, so the fair share holds over the last few steps.
const DECAY: f64 = 0.8;

/// What the planned step is, for [`PrefillPlanner::observe`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// Short work only, long prompts held back.
    ShortOnly,
    /// Long prompts got budget.
    WithLong,
    /// No long prompt waited.
    #[default]
    Other,
}

/// Splits one step's prefill budget, sharing the time between short work and long prompts.
#[derive(Debug, Default)]
pub(crate) struct PrefillPlanner {
    /// Recent time (ms, decayed) of short-only steps, and of steps long prompts got budget in.
    short_only_ms: f64,
    with_long_ms: f64,
    planned: Planned,
}

impl PrefillPlanner {
    /// Writes into `take[slot]` how many prompt tokens each prefilling slot computes this
    /// step. `prompts` are (slot, tokens left) in admission order; whoever is taken gets as
    /// much as the budget allows, oldest first. `opening_outputs`: some constrained
    /// sequence is sampling the start of its output. A short-only step's budget is at least
    /// `short_budget`, so the decode rows beside a short prompt never split it.
    pub(crate) fn plan(
        &mut self,
        budget: usize,
        short_budget: usize,
        prompts: &[(usize, usize)],
        opening_outputs: bool,
        take: &mut [usize],
    ) {
        let is_short = |left: usize| left <= SHORT_PROMPT_TOKENS;
        let short_work = opening_outputs || prompts.iter().any(|&(_, left)| is_short(left));
        let has_long = prompts.iter().any(|&(_, left)| !is_short(left));
        self.planned = if !has_long {
            Planned::Other
        } else if short_work && self.short_only_ms <= self.with_long_ms {
            Planned::ShortOnly
        } else {
            Planned::WithLong
        };
        let mut budget = budget;
        if self.planned == Planned::ShortOnly {
            budget = budget.max(short_budget);
        }
        for &(slot, left) in prompts {
            if self.planned == Planned::ShortOnly && !is_short(left) {
                continue;
            }
            let n = left.min(budget);
            take[slot] = n;
            budget -= n;
        }
    }

    /// How long the planned step took.
    pub(crate) fn observe(&mut self, took_ms: f64) {
        match self.planned {
            Planned::ShortOnly => self.short_only_ms += took_ms,
            Planned::WithLong => self.with_long_ms += took_ms,
            Planned::Other => {}
        }
        self.short_only_ms *= DECAY;
        self.with_long_ms *= DECAY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(p: &mut PrefillPlanner, budget: usize, prompts: &[(usize, usize)]) -> Vec<usize> {
        plan_with(p, budget, prompts, false)
    }

    fn plan_with(p: &mut PrefillPlanner, budget: usize, prompts: &[(usize, usize)], opening: bool) -> Vec<usize> {
        let mut take = vec![0; 4];
        p.plan(budget, budget, prompts, opening, &mut take);
        take
    }

    #[test]
    fn without_short_prompts_the_oldest_prompt_takes_the_budget_first() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 512, &[(2, 1600), (0, 1000)]), [0, 0, 512, 0]);
        assert_eq!(plan(&mut p, 512, &[(2, 300), (0, 400)]), [212, 0, 300, 0]);
        assert_eq!(plan(&mut p, 512, &[(2, 44)]), [0, 0, 44, 0]);
    }

    #[test]
    fn a_short_prompt_gets_a_step_without_the_long_ones_then_they_resume() {
        let mut p = PrefillPlanner::default();
        // The long prompt is older, yet the turn that arrived behind it goes alone.
        assert_eq!(plan(&mut p, 500, &[(0, 1600), (1, 40)]), [0, 40, 0, 0]);
        p.observe(100.0);
        assert_eq!(plan(&mut p, 500, &[(0, 1600)]), [500, 0, 0, 0]);
        p.observe(300.0);
        // An agent's next round (calls and their results, 250 to 500 tokens) counts as short too.
        assert_eq!(plan(&mut p, 500, &[(0, 1600), (1, 450)]), [0, 450, 0, 0]);
    }

    #[test]
    fn long_prompts_get_half_the_contested_time_however_much_short_work_arrives() {
        let mut p = PrefillPlanner::default();
        // Short-only steps of 100 ms against ordinary ones of 300 ms: three short-only
        // steps go for each ordinary one, so neither kind gets less than its half.
        let (mut short_steps, mut long_steps, mut short_ms, mut long_ms) = (0, 0, 0.0, 0.0);
        for i in 0..40 {
            let take = plan(&mut p, 500, &[(0, 5000), (1 + i % 3, 40)]);
            if take[0] > 0 {
                long_steps += 1;
                long_ms += 300.0;
                p.observe(300.0);
            } else {
                short_steps += 1;
                short_ms += 100.0;
                p.observe(100.0);
            }
        }
        assert!(long_steps >= 8 && short_steps >= 24, "{long_steps} ordinary, {short_steps} short-only");
        let share = long_ms / (long_ms + short_ms);
        assert!((0.4..=0.6).contains(&share), "long prompts' share of the time {share}");
    }

    #[test]
    fn a_constrained_output_just_begun_counts_as_short_work() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan_with(&mut p, 500, &[(0, 1600)], true), [0, 0, 0, 0]);
        p.observe(50.0);
        // Its half of the time used, the long prompt's chunk goes in.
        assert_eq!(plan_with(&mut p, 500, &[(0, 1600)], true), [500, 0, 0, 0]);
        p.observe(300.0);
        assert_eq!(plan_with(&mut p, 500, &[(0, 1600), (1, 100)], true), [0, 100, 0, 0]);
        p.observe(80.0);
        // With nothing long waiting, nothing is held back.
        assert_eq!(plan_with(&mut p, 500, &[(0, 100)], true), [100, 0, 0, 0]);
    }

    #[test]
    fn the_rows_beside_a_short_prompt_never_split_it() {
        let mut p = PrefillPlanner::default();
        let mut take = vec![0; 4];
        // 248 tokens of budget left beside 8 decode rows; the 253-token round goes whole.
        p.plan(248, 256, &[(0, 2000), (1, 253)], false, &mut take);
        assert_eq!(take, [0, 253, 0, 0]);
    }

    #[test]
    fn short_prompts_share_the_budget_oldest_first() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 100, &[(3, 1500), (1, 80), (2, 60)]), [0, 80, 20, 0]);
    }
}
