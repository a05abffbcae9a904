//! Which prompts get a step's prefill budget.
//!
//! A conversation's next turn, a retried request or a prompt behind a cached system prompt
//! has only a few dozen tokens left to prefill after prefix reuse, and needs one short step.
//! Served oldest first, it would share its step with a chunk of someone's cold opening
//! document, and a step costs about what its tokens cost: on two CPU cores a 256-token
//! chunk adds ~0.8 s to that turn's first token. So a step in which short prompts wait
//! carries only them (beside the decode tokens), and the long prompts resume in the next
//! one. Short-only steps alternate with ordinary ones, so a long prompt is never starved:
//! it gets at least every other step, and a short-only step is short.
//!
//! A step that prefills one prompt takes in another only if that one is cheaper than a step
//! of its own. Where a prompt token costs the same in any step (a CPU), two prompts in one
//! step give both their first token when the second is done: the first waits the second's
//! whole prefill, and the second gains only the step it saved (at 2 req/s of 100-token prompts
//! two cold prompts in one 186-token step had their first tokens 0.62 s after it began,
//! where the first alone would take ~0.35 s at the measured 3.35 ms a prompt token). A prompt cached but for a few tokens costs less than
//! a step and still joins.

/// A prompt with at most this many tokens left to prefill is short. A chat turn after
/// reuse is its new message plus the chat template's few tokens, 20 to 80 in practice; an
/// agent's next round is its calls and their results, 100 to 300 (at 96, rounds of eight
/// agents replayed against rillm waited behind the cold openings: up to 81 s to a first token).
pub(crate) const SHORT_PROMPT_TOKENS: usize = 256;

/// Splits one step's prefill budget.
#[derive(Debug, Default)]
pub(crate) struct PrefillPlanner {
    /// The last step held the long prompts back; this one must not.
    held_back: bool,
}

impl PrefillPlanner {
    /// Writes into `take[slot]` how many prompt tokens each prefilling slot computes this
    /// step. `prompts` are (slot, tokens left) in admission order; whoever is taken gets as
    /// much as the budget allows, oldest first. Once one prompt is taken, another joins only
    /// with fewer than `join_below` tokens to compute (what a step of its own would cost, in
    /// prompt tokens).
    pub(crate) fn plan(
        &mut self,
        mut budget: usize,
        prompts: &[(usize, usize)],
        join_below: usize,
        take: &mut [usize],
    ) {
        let is_short = |left: usize| left <= SHORT_PROMPT_TOKENS;
        let has_short = prompts.iter().any(|&(_, left)| is_short(left));
        let has_long = prompts.iter().any(|&(_, left)| !is_short(left));
        let short_only = !self.held_back && has_short && has_long;
        let mut taken_one = false;
        for &(slot, left) in prompts {
            if short_only && !is_short(left) {
                continue;
            }
            let n = left.min(budget);
            if n == 0 || (taken_one && n >= join_below) {
                continue;
            }
            take[slot] = n;
            budget -= n;
            taken_one = true;
        }
        self.held_back = short_only;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where a step costs nothing beside its tokens, every prompt may join.
    fn plan(p: &mut PrefillPlanner, budget: usize, prompts: &[(usize, usize)]) -> Vec<usize> {
        plan_joining(p, budget, prompts, usize::MAX)
    }

    fn plan_joining(
        p: &mut PrefillPlanner,
        budget: usize,
        prompts: &[(usize, usize)],
        join_below: usize,
    ) -> Vec<usize> {
        let mut take = vec![0; 4];
        p.plan(budget, prompts, join_below, &mut take);
        take
    }

    #[test]
    fn without_short_prompts_the_oldest_prompt_takes_the_budget_first() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 512, &[(2, 600), (0, 400)]), [0, 0, 512, 0]);
        assert_eq!(plan(&mut p, 512, &[(2, 300), (0, 400)]), [212, 0, 300, 0]);
        assert_eq!(plan(&mut p, 512, &[(2, 44)]), [0, 0, 44, 0]);
    }

    #[test]
    fn a_short_prompt_gets_a_step_without_the_long_ones_then_they_resume() {
        let mut p = PrefillPlanner::default();
        // The long prompt is older, yet the turn that arrived behind it goes alone.
        assert_eq!(plan(&mut p, 500, &[(0, 600), (1, 40)]), [0, 40, 0, 0]);
        assert_eq!(plan(&mut p, 500, &[(0, 600)]), [500, 0, 0, 0]);
        // An agent's next round (a call and its 64-token result, ~250 tokens) counts as short too.
        assert_eq!(plan(&mut p, 500, &[(0, 600), (1, 250)]), [0, 250, 0, 0]);
    }

    #[test]
    fn long_prompts_get_at_least_every_other_step_however_many_short_ones_arrive() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 500, &[(0, 600), (1, 40)]), [0, 40, 0, 0]);
        // Another short one arrives at once: this step is an ordinary one, oldest first.
        assert_eq!(plan(&mut p, 500, &[(0, 600), (2, 30)]), [500, 0, 0, 0]);
        assert_eq!(plan(&mut p, 500, &[(0, 100), (2, 30), (3, 400)]), [100, 0, 30, 0], "short-only again");
        assert_eq!(plan(&mut p, 500, &[(3, 400)]), [0, 0, 0, 400]);
    }

    #[test]
    fn short_prompts_share_the_budget_oldest_first() {
        let mut p = PrefillPlanner::default();
        assert_eq!(plan(&mut p, 100, &[(3, 500), (1, 80), (2, 60)]), [0, 80, 20, 0]);
    }

    #[test]
    fn a_second_prompt_that_costs_more_than_a_step_waits_for_the_next_one() {
        let mut p = PrefillPlanner::default();
        // Two cold 100-token prompts, a step worth 20 prompt tokens: the older goes alone.
        assert_eq!(plan_joining(&mut p, 256, &[(1, 100), (0, 90)], 20), [0, 100, 0, 0]);
        assert_eq!(plan_joining(&mut p, 256, &[(0, 90)], 20), [90, 0, 0, 0]);
    }

    #[test]
    fn prompts_cheaper_than_a_step_still_join() {
        let mut p = PrefillPlanner::default();
        // Prompts cached but for a token or a few ride along; the 80-token one waits.
        assert_eq!(plan_joining(&mut p, 256, &[(0, 100), (1, 1), (2, 80), (3, 19)], 20), [100, 1, 0, 19]);
        // The first prompt taken may be one of the cheap ones: the next still needs a step.
        assert_eq!(plan_joining(&mut p, 256, &[(1, 1), (2, 80)], 20), [0, 1, 0, 0]);
    }
}
