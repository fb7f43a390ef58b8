//! Sampling settings, their limits, and the counter-based random stream shared by the GPU
//! sampler (`shaders/sample.wgsl`, `kernels::sample`) and the CPU one
//! ([`crate::reference::sample`], what `--cpu-sampling` runs and what the tests compare the
//! GPU against).
//!
//! Order of operations follows llama.cpp's default chain: penalties → top-k → top-p → min-p →
//! temperature → draw. The exact definition of each step, written so that the GPU and the
//! CPU compute the same thing, is in [`crate::reference::sample`].

/// Candidates the sampler keeps at most: `top_k` may be 1..=this, and `top_k = 0` (off)
/// means this many. top-p and min-p then choose among these 1,024 most likely tokens; when
/// they would keep more (a nearly flat distribution with both filters loose), the draw is
/// from the 1,024 most likely ones. The GPU sorts the candidates in one workgroup, so this
/// bounds its workgroup memory (16 KiB of (key, id) pairs, ties included).
pub const MAX_CANDIDATES: u32 = 1024;

/// Ids the repetition penalty can look back over (`repeat_last_n` at most): the GPU keeps
/// the recent ids in a ring of this many slots, indexed by position.
pub const MAX_RECENT: u32 = 512;

/// Sampling settings. `temperature <= 0` means greedy: the argmax of the raw logits, with
/// no penalty applied.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// 0 = off (then [`MAX_CANDIDATES`] candidates); at most [`MAX_CANDIDATES`].
    pub top_k: u32,
    /// 1.0 = off.
    pub top_p: f32,
    /// 0.0 = off.
    pub min_p: f32,
    /// 1.0 = off. Applied once to each distinct id of the last `repeat_last_n` tokens (CTRL
    /// paper: divide positive logits, multiply negative ones).
    pub repeat_penalty: f32,
    /// At most [`MAX_RECENT`].
    pub repeat_last_n: u32,
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

/// A sampler setting outside what coco samples with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("sampler setting {name} = {value}: {why}")]
pub struct SamplerError {
    pub name: &'static str,
    pub value: String,
    pub why: String,
}

impl SamplerConfig {
    pub fn greedy() -> SamplerConfig {
        SamplerConfig {
            temperature: 0.0,
            repeat_penalty: 1.0,
            ..Default::default()
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// Refuses settings the samplers can't honour, naming the limit (the same limits for the
    /// GPU and the CPU sampler, so `--cpu-sampling` never changes what a setting means).
    pub fn check(&self) -> Result<(), SamplerError> {
        let bad = |name, value: String, why: &str| {
            Err(SamplerError {
                name,
                value,
                why: why.to_string(),
            })
        };
        if !self.temperature.is_finite() {
            return bad(
                "temperature",
                self.temperature.to_string(),
                "must be finite",
            );
        }
        if self.top_k > MAX_CANDIDATES {
            return bad(
                "top_k",
                self.top_k.to_string(),
                &format!(
                    "not yet: at most {MAX_CANDIDATES} candidates (0 = off, which keeps \
                     {MAX_CANDIDATES})"
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return bad("top_p", self.top_p.to_string(), "must be in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", self.min_p.to_string(), "must be in [0, 1]");
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return bad(
                "repeat_penalty",
                self.repeat_penalty.to_string(),
                "must be a positive number (1 = off)",
            );
        }
        if self.repeat_last_n > MAX_RECENT {
            return bad(
                "repeat_last_n",
                self.repeat_last_n.to_string(),
                &format!("not yet: the penalty looks back over at most {MAX_RECENT} tokens"),
            );
        }
        Ok(())
    }

    /// Candidates top-k keeps: `top_k`, or [`MAX_CANDIDATES`] when off.
    pub fn candidates(&self) -> u32 {
        if self.top_k == 0 {
            MAX_CANDIDATES
        } else {
            self.top_k.min(MAX_CANDIDATES)
        }
    }

    /// Whether the repetition penalty changes anything.
    pub fn penalizes(&self) -> bool {
        self.repeat_penalty != 1.0 && self.repeat_last_n > 0
    }

    /// The settings as the kernels use them: reciprocals and the log of min-p computed once,
    /// here, so the GPU and the CPU multiply and compare the very same f32 values.
    pub fn derived(&self) -> Derived {
        Derived {
            candidates: self.candidates(),
            top_p: if self.top_p < 1.0 {
                Some(self.top_p)
            } else {
                None
            },
            min_p_log: if self.min_p > 0.0 {
                Some(self.min_p.ln())
            } else {
                None
            },
            inv_temperature: 1.0 / self.temperature,
            penalty: self.repeat_penalty,
            inv_penalty: 1.0 / self.repeat_penalty,
            recent: if self.penalizes() {
                self.repeat_last_n.min(MAX_RECENT)
            } else {
                0
            },
            seed: self.seed,
        }
    }
}

/// [`SamplerConfig`] in the form both samplers compute with (see `derived`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Derived {
    pub candidates: u32,
    pub top_p: Option<f32>,
    /// ln(min_p): a candidate stays when `logit ≥ max_logit + min_p_log`, which is
    /// `p ≥ min_p · p_max` without the exponentials.
    pub min_p_log: Option<f32>,
    pub inv_temperature: f32,
    pub penalty: f32,
    pub inv_penalty: f32,
    /// Ids the penalty looks back over (0 = no penalty).
    pub recent: u32,
    pub seed: u64,
}

/// One round of Chris Wellons' "lowbias32" integer hash (a bijection on u32 with strong
/// avalanche), the building block of [`uniform`]. WGSL has the same wrapping u32 arithmetic.
pub fn mix32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

/// The draw for the token at `position` (its index in the whole sequence, prompt included):
/// uniform in [0, 1) with 24 bits, a pure function of (seed, position). So a run gives the
/// same tokens on every adapter, natively and in the browser, whatever the steps per submit,
/// and the GPU and CPU samplers draw the same number. `sample.wgsl`'s `uniform01` is this
/// function, operation for operation.
pub fn uniform(seed: u64, position: u32) -> f32 {
    let (lo, hi) = (seed as u32, (seed >> 32) as u32);
    let key = mix32(lo ^ mix32(hi ^ 0x9e37_79b9));
    let h = mix32(mix32(position ^ key).wrapping_add(key));
    (h >> 8) as f32 * (1.0 / 16_777_216.0)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_a_function_of_seed_and_position() {
        assert_eq!(uniform(7, 100), uniform(7, 100));
        assert_ne!(uniform(7, 100), uniform(7, 101));
        assert_ne!(uniform(7, 100), uniform(8, 100));
        assert_ne!(
            uniform(7, 100),
            uniform(7 | (1 << 40), 100),
            "the seed's high word counts"
        );
        // Mean and spread of 100k draws: a broken mix would show here.
        let n = 100_000;
        let draws: Vec<f64> = (0..n).map(|p| uniform(42, p) as f64).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let below_tenth = draws.iter().filter(|&&u| u < 0.1).count() as f64 / n as f64;
        assert!((mean - 0.5).abs() < 0.005, "mean {mean}");
        assert!(
            (below_tenth - 0.1).abs() < 0.005,
            "P(u < 0.1) = {below_tenth}"
        );
        assert!(draws.iter().all(|&u| (0.0..1.0).contains(&u)));
    }

    #[test]
    fn check_names_the_limit() {
        assert!(SamplerConfig::default().check().is_ok());
        assert!(SamplerConfig::greedy().check().is_ok());
        let e = SamplerConfig {
            top_k: MAX_CANDIDATES + 1,
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(e.name, "top_k");
        assert!(e.to_string().contains("1024"), "{e}");
        let e = SamplerConfig {
            repeat_last_n: MAX_RECENT + 1,
            ..Default::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(e.name, "repeat_last_n");
        for bad in [
            SamplerConfig {
                top_p: 1.5,
                ..Default::default()
            },
            SamplerConfig {
                min_p: -0.1,
                ..Default::default()
            },
            SamplerConfig {
                repeat_penalty: 0.0,
                ..Default::default()
            },
            SamplerConfig {
                temperature: f32::NAN,
                ..Default::default()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn greedy_picks_argmax_with_lowest_id_on_ties() {
        assert_eq!(argmax(&[0.0, 3.0, 3.0, -1.0]), 1);
    }
}
