//! Picks the next token from logits: greedy, or temperature with top-k / top-p / min-p and a
//! repetition penalty, from a seeded RNG so the same seed gives the same output everywhere
//! (native and wasm use the same integer RNG and the same f32/f64 arithmetic).
//!
//! Order of operations follows llama.cpp's default chain: penalties → top-k → top-p → min-p →
//! temperature → draw.

/// Sampling settings. `temperature <= 0` means greedy: the argmax of the raw logits, with
/// no penalty applied.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off. Applied to the last `repeat_last_n` tokens (CTRL paper: divide positive
    /// logits, multiply negative ones).
    pub repeat_penalty: f32,
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.1,
            repeat_last_n: 64,
            seed: 42,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 1.0,
            ..Default::default()
        }
    }
}

/// SplitMix64: tiny, portable, and identical on every target.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 53 bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub struct Sampler {
    pub config: SamplerConfig,
    rng: Rng,
}

/// Index of the largest logit; ties go to the lowest id (as `torch.argmax`).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(config: SamplerConfig) -> Sampler {
        let rng = Rng(config.seed);
        Sampler { config, rng }
    }

    /// Chooses a token. `history` is every token so far (prompt included) for the penalty.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let c = &self.config;
        // Greedy is the plain argmax of the model's logits (what HF's greedy decoding and
        // the goldens mean by it); penalties only shape sampling.
        if c.temperature <= 0.0 {
            return argmax(logits);
        }
        let mut logits = logits.to_vec();
        if c.repeat_penalty != 1.0 && c.repeat_last_n > 0 {
            let start = history.len().saturating_sub(c.repeat_last_n);
            let mut seen = std::collections::HashSet::new();
            for &id in &history[start..] {
                if let Some(l) = logits.get_mut(id as usize) {
                    if seen.insert(id) {
                        *l = if *l > 0.0 {
                            *l / c.repeat_penalty
                        } else {
                            *l * c.repeat_penalty
                        };
                    }
                }
            }
        }
        // Candidates sorted by logit, descending; ties by id for determinism.
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        cand.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if c.top_k > 0 && c.top_k < cand.len() {
            cand.truncate(c.top_k);
        }
        let probs = |cand: &[(u32, f32)]| -> Vec<f64> {
            let max = cand[0].1 as f64;
            let e: Vec<f64> = cand.iter().map(|&(_, l)| (l as f64 - max).exp()).collect();
            let sum: f64 = e.iter().sum();
            e.into_iter().map(|x| x / sum).collect()
        };
        if c.top_p < 1.0 {
            let p = probs(&cand);
            let mut acc = 0.0;
            let mut keep = cand.len();
            for (i, pi) in p.iter().enumerate() {
                acc += pi;
                if acc >= c.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
            cand.truncate(keep.max(1));
        }
        if c.min_p > 0.0 {
            let p = probs(&cand);
            let threshold = p[0] * c.min_p as f64;
            let keep = p.iter().take_while(|&&pi| pi >= threshold).count().max(1);
            cand.truncate(keep);
        }
        for entry in cand.iter_mut() {
            entry.1 /= c.temperature;
        }
        let p = probs(&cand);
        let r = self.rng.next_f64();
        let mut acc = 0.0;
        for (i, pi) in p.iter().enumerate() {
            acc += pi;
            if r < acc {
                return cand[i].0;
            }
        }
        cand[cand.len() - 1].0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_picks_argmax_with_lowest_id_on_ties() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&[0.0, 3.0, 3.0, -1.0], &[]), 1);
    }

    #[test]
    fn same_seed_same_draws_different_seed_differs() {
        let logits: Vec<f32> = (0..100).map(|i| ((i * 37 % 100) as f32) / 25.0).collect();
        let cfg = SamplerConfig {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.5,
            ..Default::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(SamplerConfig {
                seed,
                ..cfg.clone()
            });
            (0..50).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_one_is_greedy_and_min_p_prunes() {
        let logits = [1.0, 5.0, 4.9, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            top_k: 1,
            ..Default::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits, &[]), 1);
        }
        // min_p 0.5: token 0 and 3 have p < 0.5·p(1), so only 1 and 2 can appear.
        let mut s = Sampler::new(SamplerConfig {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            ..Default::default()
        });
        for _ in 0..200 {
            let t = s.sample(&logits, &[]);
            assert!(t == 1 || t == 2, "min_p let {t} through");
        }
    }

    #[test]
    fn repetition_penalty_changes_the_winner() {
        // top_k 1 makes sampling deterministic, so the penalty alone decides.
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            top_k: 1,
            ..Default::default()
        });
        assert_eq!(s.sample(&[1.0, 1.5, 0.2], &[1]), 0);
        let mut greedy = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            ..SamplerConfig::greedy()
        });
        assert_eq!(
            greedy.sample(&[1.0, 1.5, 0.2], &[1]),
            1,
            "greedy ignores penalties"
        );
    }
}
