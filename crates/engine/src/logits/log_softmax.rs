//! Log-probabilities over a row of logits, fast enough for the engine thread: a prompt
//! being scored takes one row per prompt token, a draft model one per drafted token.

use rillm_backend::TokenId;

/// `token`'s log-softmax over `logits`, and the `top` largest entries', most likely first.
/// Two passes over the row, written so that the compiler vectorizes them (a prompt being
/// scored takes one per prompt token, on the engine thread); the top list is kept sorted by
/// insertion (`top` is at most 20).
pub(crate) fn log_softmax_at(logits: &[f32], token: TokenId, top: usize) -> (f32, Vec<(TokenId, f32)>) {
    const LANES: usize = 8;
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    let mut lanes = [f32::NEG_INFINITY; LANES];
    for chunk in chunks.clone() {
        for (m, &l) in lanes.iter_mut().zip(chunk) {
            *m = m.max(l);
        }
    }
    let max = lanes.iter().chain(tail).copied().fold(f32::NEG_INFINITY, f32::max);
    let mut sums = [0f64; LANES];
    for chunk in chunks {
        for (s, &l) in sums.iter_mut().zip(chunk) {
            *s += f64::from(exp_at_most_zero(l - max));
        }
    }
    let sum: f64 = sums.iter().sum::<f64>() + tail.iter().map(|&l| f64::from(exp_at_most_zero(l - max))).sum::<f64>();
    let log_z = max + sum.ln() as f32;
    let mut best: Vec<(TokenId, f32)> = Vec::with_capacity(top + 1);
    if top > 0 {
        // `worst` stays in a register: the loop is one comparison per entry until a
        // candidate beats the current top list.
        let mut worst = f32::NEG_INFINITY;
        for (i, &l) in logits.iter().enumerate() {
            if l > worst || best.len() < top {
                let at = best.partition_point(|&(_, v)| v >= l);
                best.insert(at, (i as TokenId, l));
                best.truncate(top);
                if best.len() == top {
                    worst = best[top - 1].1;
                }
            }
        }
    }
    let own = logits.get(token as usize).map_or(f32::NEG_INFINITY, |&l| l - log_z);
    (own, best.into_iter().map(|(t, l)| (t, l - log_z)).collect())
}

/// e^x for x ≤ 0, within 2e-7 + 1e-7·|x| relative (f32 rounds x log2 e): 2^(x log2 e) as a power of two (exponent
/// bits) times a polynomial for the fraction in [-0.5, 0.5] (Cephes' `exp2f`). No calls,
/// so a loop over a row of logits vectorizes; `f32::exp` does not.
#[inline(always)]
fn exp_at_most_zero(x: f32) -> f32 {
    // Below this e^x is under f32's smallest normal: 0 for a sum of probabilities.
    let t = x.max(-126.0 * std::f32::consts::LN_2) * std::f32::consts::LOG2_E;
    let whole = (t + 0.5).floor();
    let f = t - whole;
    let p = ((((1.535_336_2e-4 * f + 1.339_887_4e-3) * f + 9.618_438e-3) * f + 5.550_332_5e-2) * f + 2.402_264_8e-1)
        * f
        + 6.931_472e-1;
    let scale = f32::from_bits(((whole as i32 + 127) as u32) << 23);
    (p * f + 1.0) * scale
}

#[cfg(test)]
mod tests {
    use super::{exp_at_most_zero, log_softmax_at};

    #[test]
    fn the_fast_exp_is_close_to_exp_over_the_range_a_row_spans() {
        // Down to where e^x leaves f32's normal range; below it is 0 for any sum.
        for i in 0..=1740 {
            let x = -(i as f32) * 0.05;
            let exact = f64::from(x).exp();
            let rel = (f64::from(exp_at_most_zero(x)) - exact).abs() / exact;
            // f32 rounds x·log2(e) itself, so the error grows slowly with |x|.
            let bound = 2e-7 + 1e-7 * f64::from(-x);
            assert!(rel < bound, "exp({x}): relative error {rel:e}");
        }
        for tiny in [-1000.0, f32::NEG_INFINITY] {
            let e = exp_at_most_zero(tiny);
            assert!((0.0..1e-37).contains(&e), "exp({tiny}) = {e}");
        }
    }

    #[test]
    fn log_softmax_matches_the_naive_computation_and_ranks_the_top() {
        // A vocabulary-sized row with a few peaks, and a length that leaves a remainder.
        let logits: Vec<f32> = (0..49_157).map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 9.0).collect();
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
        let log_z = max + logits.iter().map(|&l| (f64::from(l) - max).exp()).sum::<f64>().ln();
        for token in [0u32, 1234, 49_156] {
            let (own, top) = log_softmax_at(&logits, token, 5);
            let exact = f64::from(logits[token as usize]) - log_z;
            assert!((f64::from(own) - exact).abs() < 1e-5, "token {token}: {own} vs {exact}");
            assert_eq!(top.len(), 5);
            assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "most likely first: {top:?}");
            assert!(top.iter().all(|&(t, lp)| (f64::from(lp) - (f64::from(logits[t as usize]) - log_z)).abs() < 1e-5));
            let kth = top[4].1;
            let above = logits.iter().filter(|&&l| f64::from(l) - log_z > f64::from(kth) + 1e-4).count();
            assert!(above < 5, "nothing outside the list beats its last entry");
        }
        assert!(log_softmax_at(&logits, 7, 0).1.is_empty());
    }
}
