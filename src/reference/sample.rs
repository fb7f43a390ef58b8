//! The sampler, in plain Rust: what `--cpu-sampling` runs, and the definition the GPU
//! sampler (`shaders/sample.wgsl`) implements. Both draw the same number for a token
//! ([`crate::sampler::uniform`] of the seed and the token's position), so on the same logits
//! they pick the same token; they can differ only where a draw falls within float rounding
//! of a boundary between two candidates (the GPU sums its exponentials in a tree, this code
//! in order), which the tests measure.
//!
//! The chain, for `temperature > 0` (greedy is the plain argmax of the raw logits):
//! 1. **Penalty**: each distinct id among the last `repeat_last_n` tokens gets
//!    `l · (1/penalty)` if `l > 0`, else `l · penalty`.
//! 2. **Candidates** (top-k): the `k` best of the finite logits in the order "larger logit
//!    first, then lower id", `k = top_k`, or [`MAX_CANDIDATES`] when top-k is off. NaN and
//!    ±inf logits are never candidates; with no finite logit at all the answer is id 0.
//!    Found without sorting the vocabulary: a 2,048-bin histogram of the logits' order keys
//!    finds the bin holding the k-th, and only that bin's members are sorted.
//! 3. **top-p** (if < 1): with `e_i = exp(l_i − l_0)` over the candidates in order, keep the
//!    shortest prefix whose sum reaches `top_p · Σ e` (llama.cpp's and HF's "smallest set
//!    whose mass reaches p").
//! 4. **min-p** (if > 0): keep the prefix with `l_i ≥ l_0 + ln(min_p)`, i.e. `p_i ≥ min_p · p_0`
//!    (the same on the renormalized set: ratios don't change).
//! 5. **Temperature and draw**: `w_i = exp((l_i − l_0) · (1/T))` over what is left; with
//!    `u = uniform(seed, position)`, the first candidate whose running sum of `w` exceeds
//!    `u · Σ w` (the last one with `w > 0` if rounding leaves none).

use crate::sampler::{argmax, uniform, Derived, SamplerConfig, MAX_CANDIDATES};

/// Order-preserving u32 key of an f32's bits: a larger float has a larger key, NaN has 0
/// (`argmax.wgsl` and `sample.wgsl` use the same map).
pub fn order_key(bits: u32) -> u32 {
    if (bits & 0x7fff_ffff) > 0x7f80_0000 {
        return 0; // NaN
    }
    let b = if bits == 0x8000_0000 { 0 } else { bits }; // -0.0 ties with +0.0
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Keys of finite values lie in `[MIN_KEY, INF_KEY)`: below is NaN or −inf, at or above +inf.
pub const MIN_KEY: u32 = 0x0080_0000;
pub const INF_KEY: u32 = 0xff80_0000;

/// The token the chain picks for the next position. `history` is every token so far
/// (prompt included): its tail feeds the penalty and its length is the draw's position.
pub fn sample(logits: &[f32], history: &[u32], config: &SamplerConfig) -> u32 {
    if config.is_greedy() {
        return argmax(logits);
    }
    let d = config.derived();
    let recent = &history[history.len().saturating_sub(d.recent as usize)..];
    sample_derived(logits, recent, &d, history.len() as u32)
}

/// [`sample`] with the settings derived and the penalty window `recent` (oldest first)
/// already cut; `position` is the drawn token's index in the sequence.
pub fn sample_derived(logits: &[f32], recent: &[u32], d: &Derived, position: u32) -> u32 {
    // A copy with the penalties applied (1 MiB for a 262,144 vocabulary: ~0.1 ms), so
    // every later step reads one slice.
    let mut l = logits.to_vec();
    for (i, &id) in recent.iter().enumerate() {
        if (id as usize) < l.len() && !recent[..i].contains(&id) {
            let v = &mut l[id as usize];
            *v = if *v > 0.0 {
                *v * d.inv_penalty
            } else {
                *v * d.penalty
            };
        }
    }
    let cands = top_candidates(&l, d.candidates);
    let Some(&(_, first)) = cands.first() else {
        return 0;
    };
    let l0 = l[first as usize];
    let l: Vec<f32> = cands.iter().map(|&(_, id)| l[id as usize]).collect();
    let mut keep = l.len();
    if let Some(top_p) = d.top_p {
        let e: Vec<f32> = l.iter().map(|&li| (li - l0).exp()).collect();
        let total: f32 = e.iter().sum();
        let mut acc = 0.0f32;
        for (i, ei) in e.iter().enumerate() {
            acc += ei;
            if acc >= top_p * total {
                keep = i + 1;
                break;
            }
        }
    }
    if let Some(min_p_log) = d.min_p_log {
        let floor = l0 + min_p_log;
        keep = keep.min(l.iter().take_while(|&&li| li >= floor).count());
    }
    let keep = keep.max(1);
    let w: Vec<f32> = l[..keep]
        .iter()
        .map(|&li| ((li - l0) * d.inv_temperature).exp())
        .collect();
    let total: f32 = w.iter().sum();
    let target = uniform(d.seed, position) * total;
    let mut acc = 0.0f32;
    for (i, wi) in w.iter().enumerate() {
        acc += wi;
        if acc > target {
            return cands[i].1;
        }
    }
    let last = w.iter().rposition(|&wi| wi > 0.0).unwrap_or(0);
    cands[last].1
}

/// The `k` best finite logits as (key, id), in the order
/// "larger logit first, then lower id". O(vocabulary): one histogram pass over the keys'
/// top 11 bits finds the bin holding the k-th candidate; everything above it is in, and
/// only that bin's members are sorted to pick the rest.
fn top_candidates(logits: &[f32], k: u32) -> Vec<(u32, u32)> {
    let k = k.min(MAX_CANDIDATES) as usize;
    let finite = |key: u32| (MIN_KEY..INF_KEY).contains(&key);
    let mut hist = vec![0u32; 2048];
    for &l in logits {
        let key = order_key(l.to_bits());
        if finite(key) {
            hist[(key >> 21) as usize] += 1;
        }
    }
    let total: u32 = hist.iter().sum();
    let k = k.min(total as usize);
    if k == 0 {
        return Vec::new();
    }
    let mut above = 0usize;
    let mut cut = 2047;
    for b in (0..2048).rev() {
        if above + hist[b] as usize >= k {
            cut = b as u32;
            break;
        }
        above += hist[b] as usize;
    }
    let mut sure = Vec::with_capacity(above);
    let mut boundary = Vec::new();
    for (i, &l) in logits.iter().enumerate() {
        let key = order_key(l.to_bits());
        if !finite(key) {
            continue;
        }
        match (key >> 21).cmp(&cut) {
            std::cmp::Ordering::Greater => sure.push((key, i as u32)),
            std::cmp::Ordering::Equal => boundary.push((key, i as u32)),
            std::cmp::Ordering::Less => {}
        }
    }
    let before = |a: &(u32, u32), b: &(u32, u32)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
    boundary.sort_unstable_by(before);
    boundary.truncate(k - above);
    sure.extend(boundary);
    sure.sort_unstable_by(before);
    sure
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(temperature: f32, top_k: u32, top_p: f32, min_p: f32) -> SamplerConfig {
        SamplerConfig {
            temperature,
            top_k,
            top_p,
            min_p,
            repeat_penalty: 1.0,
            ..Default::default()
        }
    }

    fn spread_logits(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 12.0)
            .collect()
    }

    #[test]
    fn order_key_orders_floats_and_sinks_nan() {
        let xs = [
            f32::NEG_INFINITY,
            -3.5,
            -0.0,
            0.0,
            1e-30,
            2.0,
            f32::INFINITY,
        ];
        for w in xs.windows(2) {
            assert!(
                order_key(w[0].to_bits()) <= order_key(w[1].to_bits()),
                "{w:?}"
            );
        }
        assert_eq!(order_key((-0.0f32).to_bits()), order_key(0.0f32.to_bits()));
        assert_eq!(order_key(f32::NAN.to_bits()), 0);
        assert!(order_key(f32::NEG_INFINITY.to_bits()) < MIN_KEY);
        assert_eq!(order_key(f32::INFINITY.to_bits()), INF_KEY);
    }

    #[test]
    fn candidates_are_the_top_k_with_lowest_ids_on_ties() {
        // 3000 logits in 5 values: the k-th falls among hundreds of ties.
        let logits: Vec<f32> = (0..3000).map(|i| (i % 5) as f32).collect();
        let c = top_candidates(&logits, 700);
        assert_eq!(c.len(), 700);
        // 600 fours (ids 4, 9, …), then the 100 lowest-id threes.
        assert!(c[..600].iter().all(|&(_, id)| id % 5 == 4));
        let threes: Vec<u32> = c[600..].iter().map(|&(_, id)| id).collect();
        let want: Vec<u32> = (0..100).map(|j| 5 * j + 3).collect();
        assert_eq!(threes, want);
        // Against a full sort on spread logits.
        let logits = spread_logits(10_000);
        let mut all: Vec<(u32, u32)> = logits
            .iter()
            .enumerate()
            .map(|(i, l)| (order_key(l.to_bits()), i as u32))
            .collect();
        all.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for k in [1, 2, 40, 999, 1024] {
            assert_eq!(top_candidates(&logits, k), all[..k as usize], "k = {k}");
        }
    }

    #[test]
    fn non_finite_logits_are_never_drawn() {
        let mut logits = vec![f32::NAN; 50];
        logits[7] = -1.0;
        logits[9] = f32::NEG_INFINITY;
        logits[11] = f32::INFINITY;
        logits[13] = -2.0;
        let cfg = config(1.0, 0, 1.0, 0.0);
        for pos in 0..200 {
            let history = vec![0; pos];
            let t = sample(&logits, &history, &cfg);
            assert!(t == 7 || t == 13, "drew {t}");
        }
        assert_eq!(sample(&[f32::NAN; 4], &[], &cfg), 0, "nothing finite: id 0");
    }

    #[test]
    fn top_k_one_and_min_p_one_are_greedy() {
        // 1000 distinct values (7919 is invertible mod 1009): min-p 1 keeps the maximum only.
        let logits = spread_logits(1000);
        let best = argmax(&logits);
        for pos in 0..50 {
            let history = vec![1; pos];
            assert_eq!(sample(&logits, &history, &config(1.3, 1, 1.0, 0.0)), best);
            assert_eq!(sample(&logits, &history, &config(1.3, 0, 1.0, 1.0)), best);
        }
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        // Probabilities ∝ 8, 4, 2, 1, 1 (sum 16): top-p 0.75 needs {0, 1} (12/16 = 0.75),
        // top-p 0.76 also needs 2.
        let logits: Vec<f32> = [8.0f32, 4.0, 2.0, 1.0, 1.0]
            .iter()
            .map(|p| p.ln())
            .collect();
        let seen = |top_p: f32| {
            let mut s = std::collections::BTreeSet::new();
            for pos in 0..2000 {
                let history = vec![0; pos];
                s.insert(sample(&logits, &history, &config(1.0, 0, top_p, 0.0)));
            }
            s.into_iter().collect::<Vec<_>>()
        };
        assert_eq!(seen(0.75), vec![0, 1]);
        assert_eq!(seen(0.76), vec![0, 1, 2]);
        assert_eq!(seen(0.5), vec![0]);
    }

    #[test]
    fn penalty_applies_once_per_distinct_recent_id() {
        // Logits 1.0 and 1.5: penalty 2 on id 1 (seen three times) makes it 0.75 once, not
        // 0.1875, and top_k 1 makes the draw deterministic.
        let logits = [1.0, 1.5, 0.2];
        let cfg = SamplerConfig {
            repeat_penalty: 2.0,
            ..config(1.0, 1, 1.0, 0.0)
        };
        assert_eq!(sample(&logits, &[1, 1, 1], &cfg), 0);
        // Negative logits are multiplied: -0.1 · 2 = -0.2 still beats -0.3.
        let logits = [-0.3, -0.1];
        assert_eq!(sample(&logits, &[1], &cfg), 1);
        // Outside the window (repeat_last_n = 1), id 1 is not penalized.
        let cfg = SamplerConfig {
            repeat_last_n: 1,
            ..cfg
        };
        assert_eq!(sample(&[1.0, 1.5, 0.2], &[1, 2], &cfg), 1);
        // Greedy ignores penalties.
        assert_eq!(
            sample(
                &[1.0, 1.5, 0.2],
                &[1],
                &SamplerConfig {
                    repeat_penalty: 2.0,
                    ..SamplerConfig::greedy()
                }
            ),
            1
        );
    }

    #[test]
    fn same_seed_same_draws_different_seed_differs() {
        let logits = spread_logits(100);
        let draw = |seed| {
            let cfg = SamplerConfig {
                seed,
                ..config(1.5, 0, 1.0, 0.0)
            };
            (0..50)
                .map(|pos| sample(&logits, &vec![0; pos], &cfg))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }
}
