//! Which prompts get a step's prefill budget.
//!
//! A conversation's next turn, a retried request or a prompt behind a cached system prompt
//! has only a few dozen tokens left to prefill after prefix reuse, and needs one short step.
//! Served oldest first, it would wait behind someone's cold opening document, and a step
//! costs about what its tokens cost: on two CPU cores a 256-token chunk adds ~0.8 s to that
//! turn's first token. So the planner serves the prompt with the fewest tokens left first
//! (shortest job first, which minimises mean time to first token). The oldest prompt lets
//! shorter ones go first only until it has waited about its own prefill for them (the
//! tokens they took, and each step's own cost in prompt tokens): then it is served first.
//! Its wait for later arrivals is bounded, at most doubling, and a stream of short turns
//! cannot starve it. (Letting it take every other step instead made five follow-ups
//! arriving beside two cold openings alternate with the openings' 0.9 s chunks: up to 3.9 s
//! to a first token for a 58-token turn.)
//!
//! A step that prefills one prompt takes in another only if that one is cheaper than a step
//! of its own. Where a prompt token costs the same in any step (a CPU), two prompts in one
//! step give both their first token when the second is done: the first waits the second's
//! whole prefill, and the second gains only the step it saved (at 2 req/s of 100-token prompts
//! two cold prompts in one 186-token step had their first tokens 0.62 s after it began,
//! where the first alone would take ~0.35 s at the measured 3.35 ms a prompt token). A prompt
//! cached but for a few tokens costs less than a step and still joins. For two prompts of
//! costs a <= b and a step's own cost s, one step gives both a + b + s, two steps (the
//! cheaper first) a + s and a + b + 2s: together is better exactly when b < s, the rule here.

/// Splits one step's prefill budget.
#[derive(Debug, Default)]
pub(crate) struct PrefillPlanner {
    /// The oldest waiting prompt's slot, and how long (in prompt tokens) it has waited for
    /// shorter prompts served before it since it was last served.
    oldest: Option<(usize, usize)>,
    /// This step's prompts in the order they are offered the budget.
    order: Vec<(usize, usize)>,
}

impl PrefillPlanner {
    /// Writes into `take[slot]` how many prompt tokens each prefilling slot computes this
    /// step. `prompts` are (slot, tokens left) in admission order. They are offered the
    /// budget fewest tokens left first (ties oldest first), or oldest first once the oldest
    /// has waited its own prefill; whoever is taken gets as much as the budget allows.
    /// Once one prompt is taken, another joins only with fewer than `join_below` tokens to
    /// compute (what a step of its own costs, in prompt tokens).
    pub(crate) fn plan(
        &mut self,
        mut budget: usize,
        prompts: &[(usize, usize)],
        join_below: usize,
        take: &mut [usize],
    ) {
        let Some(&(oldest, oldest_left)) = prompts.first() else {
            self.oldest = None;
            return;
        };
        let waited = match self.oldest {
            Some((slot, waited)) if slot == oldest => waited,
            _ => 0,
        };
        self.order.clear();
        self.order.extend_from_slice(prompts);
        if waited < oldest_left {
            // Stable: equal lengths stay oldest first.
            self.order.sort_by_key(|&(_, left)| left);
        }
        let mut taken = 0usize;
        for &(slot, left) in &self.order {
            let n = left.min(budget);
            if n == 0 || (taken > 0 && n >= join_below) {
                continue;
            }
            take[slot] = n;
            budget -= n;
            taken += n;
        }
        let waited = if take[oldest] > 0 { 0 } else { waited.saturating_add(taken).saturating_add(join_below.max(1)) };
        self.oldest = Some((oldest, waited));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a step costs on two CPU cores beside a few streams, in prompt tokens.
    const CPU_STEP: usize = 20;

    fn plan(p: &mut PrefillPlanner, budget: usize, prompts: &[(usize, usize)], join_below: usize) -> Vec<usize> {
        let mut take = vec![0; 4];
        p.plan(budget, prompts, join_below, &mut take);
        take
    }

    #[test]
    fn the_prompt_with_fewest_tokens_left_goes_first() {
        let mut p = PrefillPlanner::default();
        // The opening document is older, yet the turn that arrived behind it goes first, alone.
        assert_eq!(plan(&mut p, 500, &[(0, 600), (1, 40)], CPU_STEP), [0, 40, 0, 0]);
        assert_eq!(plan(&mut p, 500, &[(0, 600)], CPU_STEP), [500, 0, 0, 0]);
        // An agent's next round (calls and their results, ~250 tokens) before a cold opening.
        assert_eq!(plan(&mut p, 500, &[(0, 600), (1, 250)], CPU_STEP), [0, 250, 0, 0]);
        // Among long prompts too.
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 256, &[(2, 391), (0, 300)], CPU_STEP), [256, 0, 0, 0]);
    }

    #[test]
    fn the_oldest_prompt_lets_shorter_ones_go_first_only_until_it_has_waited_its_own_prefill() {
        let mut p = PrefillPlanner::default();
        // Each short turn's step costs the oldest its tokens and a step's worth (20).
        assert_eq!(plan(&mut p, 500, &[(0, 100), (1, 40)], CPU_STEP), [0, 40, 0, 0]);
        assert_eq!(plan(&mut p, 500, &[(0, 100), (2, 30)], CPU_STEP), [0, 0, 30, 0]);
        // It has waited 110 prompt tokens' worth: now it goes first (a 10-token turn rides along).
        assert_eq!(plan(&mut p, 500, &[(0, 100), (3, 10), (1, 40)], CPU_STEP), [100, 0, 0, 10]);
        // Served, its successor as the oldest starts waiting from nothing.
        assert_eq!(plan(&mut p, 500, &[(1, 40), (2, 30)], CPU_STEP), [0, 0, 30, 0]);
        assert_eq!(plan(&mut p, 500, &[(1, 40)], CPU_STEP), [0, 40, 0, 0]);
        // A chunk of it counts as served.
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 64, &[(0, 600), (1, 40)], CPU_STEP), [0, 40, 0, 0]);
        assert_eq!(plan(&mut p, 64, &[(0, 600), (1, 40)], CPU_STEP), [0, 40, 0, 0], "40 + 20 < 600");
    }

    #[test]
    fn where_prompt_tokens_cost_little_beside_a_step_prompts_share_it_shortest_first() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 100, &[(3, 500), (1, 80), (2, 60)], usize::MAX), [0, 40, 60, 0]);
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 512, &[(2, 600), (0, 400)], usize::MAX), [400, 0, 112, 0]);
    }

    #[test]
    fn a_second_prompt_that_costs_more_than_a_step_waits_for_the_next_one() {
        let mut p = PrefillPlanner::default();
        // Two cold prompts: the one with fewer tokens goes alone, the other next step.
        assert_eq!(plan(&mut p, 256, &[(1, 100), (0, 90)], CPU_STEP), [90, 0, 0, 0]);
        assert_eq!(plan(&mut p, 256, &[(1, 100)], CPU_STEP), [0, 100, 0, 0]);
    }

    #[test]
    fn prompts_cheaper_than_a_step_still_join() {
        let mut p = PrefillPlanner::default();
        // Prompts cached but for a token or a few share a step; the 80- and 100-token ones
        // each get their own.
        assert_eq!(plan(&mut p, 256, &[(0, 100), (1, 1), (2, 80), (3, 19)], CPU_STEP), [0, 1, 0, 19]);
        assert_eq!(plan(&mut p, 256, &[(0, 100), (2, 80)], CPU_STEP), [0, 0, 80, 0]);
        assert_eq!(plan(&mut p, 256, &[(0, 100)], CPU_STEP), [100, 0, 0, 0]);
    }
}
