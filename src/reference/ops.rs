//! CPU references for the non-matmul kernels: RMSNorm, RoPE, attention, gated activations
//! and the residual add. f32 in and out; sums are accumulated in f64 so the reference is
//! the more accurate side of every comparison.
//!
//! Shapes are row-major, the last dimension fastest, as in `kernels/`.

use crate::kernels::attention::{AttentionPlan, AttentionShape};
use crate::kernels::elementwise::Activation;
use crate::kernels::rope::{RopeLayout, Rotary};

/// RMSNorm over the last dimension: `y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) * w`.
///
/// - `x`: `[rows, n]`
/// - `w`: `[n]` (already including Gemma's `1 +`, which the GGUF converter bakes in)
///
/// Returns `[rows, n]`.
pub fn rms_norm(x: &[f32], w: &[f32], rows: usize, n: usize, eps: f32) -> Vec<f32> {
    assert_eq!(x.len(), rows * n, "rms_norm: x is not [rows, n]");
    assert_eq!(w.len(), n, "rms_norm: w is not [n]");
    let mut y = vec![0.0f32; rows * n];
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let mean_sq = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
        let inv = 1.0 / (mean_sq + eps as f64).sqrt();
        for (i, &v) in row.iter().enumerate() {
            y[r * n + i] = (v as f64 * inv * w[i] as f64) as f32;
        }
    }
    y
}

/// Rotary position embedding, in place, for positions `pos0..pos0 + t`.
///
/// - `x`: `[t, heads, head_dim]`
/// - `inv_freq`: `[head_dim / 2]`, the model's per-pair frequencies (base, scaling applied);
///   only the first `rotary.dims / 2` are read
///
/// The angle is `f32(pos) * inv_freq[i]` rounded to f32, as HF computes it
/// (`inv_freq_expanded.float() @ position_ids_expanded.float()` in `LlamaRotaryEmbedding`),
/// so at position 4000 the angle carries HF's own ~2.4e-4 rad rounding. cos/sin of that f32
/// angle, rounded to f32 and times `rotary.scale` in f32 (HF's `cos * attention_scaling`),
/// and the rotation are then evaluated in f64.
///
/// `Normal` rotates pairs `(2i, 2i + 1)`, `Neox` rotates `(i, i + rotary.dims / 2)` (HF's
/// `rotate_half` on the first `dims` dimensions, `q[..., :rotary_dim]` in Phi-3); pair `i`
/// uses `inv_freq[i]` in both. Dimensions from `rotary.dims` on are left as they are.
pub fn rope(
    x: &mut [f32],
    inv_freq: &[f32],
    t: usize,
    heads: usize,
    head_dim: usize,
    pos0: usize,
    rotary: Rotary,
) {
    assert_eq!(
        x.len(),
        t * heads * head_dim,
        "rope: x is not [t, heads, head_dim]"
    );
    assert!(head_dim.is_multiple_of(2), "rope: head_dim must be even");
    assert_eq!(
        inv_freq.len(),
        head_dim / 2,
        "rope: inv_freq is not [head_dim / 2]"
    );
    let dims = rotary.dims as usize;
    assert!(
        dims > 0 && dims.is_multiple_of(2) && dims <= head_dim,
        "rope: {dims} rotated dimensions of {head_dim}"
    );
    let half = dims / 2;
    for tok in 0..t {
        let pos = (pos0 + tok) as f32;
        for h in 0..heads {
            let row = &mut x[(tok * heads + h) * head_dim..][..head_dim];
            for (i, &f) in inv_freq[..half].iter().enumerate() {
                let angle = (pos * f) as f64;
                let (sin, cos) = angle.sin_cos();
                let (sin, cos) = (
                    (sin as f32 * rotary.scale) as f64,
                    (cos as f32 * rotary.scale) as f64,
                );
                let (a, b) = match rotary.layout {
                    RopeLayout::Normal => (2 * i, 2 * i + 1),
                    RopeLayout::Neox => (i, i + half),
                };
                let (x0, x1) = (row[a] as f64, row[b] as f64);
                row[a] = (x0 * cos - x1 * sin) as f32;
                row[b] = (x0 * sin + x1 * cos) as f32;
            }
        }
    }
}

/// The first key row query `pos` may see: keys `j` with `first_key(pos, window) <= j <= pos`.
///
/// `window == 0` means plain causal attention. Otherwise the query sees the `window` most
/// recent positions including itself, `pos - window < j <= pos` (HF's `sliding_window_overlay`
/// keeps `kv_idx > q_idx - sliding_window`; llama.cpp masks `pos - j >= n_swa`).
pub fn first_key(pos: usize, window: usize) -> usize {
    if window == 0 {
        0
    } else {
        (pos + 1).saturating_sub(window)
    }
}

/// `cap·tanh(x / cap)` in f64 (Gemma 2's soft-cap); `cap == 0` leaves `x` as it is.
pub fn softcap(x: f64, cap: f32) -> f64 {
    if cap > 0.0 {
        cap as f64 * (x / cap as f64).tanh()
    } else {
        x
    }
}

/// Causal (optionally sliding-window) grouped-query attention over a KV cache.
///
/// - `q`: `[t, heads, head_dim]`, query `tok` sits at position `pos0 + tok`
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` with rows `0..pos0 + t` filled
///
/// Returns `[t, heads, head_dim]`: `softmax(softcap(scale · q·kᵀ)) · v` over the keys that
/// [`first_key`] allows; query head `h` reads kv head `h / (heads / kv_heads)`.
pub fn attention(q: &[f32], k_cache: &[f32], v_cache: &[f32], shape: &AttentionShape) -> Vec<f32> {
    let t = shape.t as usize;
    let heads = shape.heads as usize;
    let kv_heads = shape.kv_heads as usize;
    let hd = shape.head_dim as usize;
    let pos0 = shape.pos0 as usize;
    assert!(
        kv_heads > 0 && heads.is_multiple_of(kv_heads),
        "attention: heads must be a multiple of kv_heads"
    );
    assert_eq!(
        q.len(),
        t * heads * hd,
        "attention: q is not [t, heads, head_dim]"
    );
    let rows = pos0 + t;
    assert!(
        k_cache.len() >= rows * kv_heads * hd,
        "attention: k_cache has fewer than pos0 + t rows"
    );
    assert!(
        v_cache.len() >= rows * kv_heads * hd,
        "attention: v_cache has fewer than pos0 + t rows"
    );
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; t * heads * hd];
    let mut scores = Vec::new();
    let mut acc = vec![0.0f64; hd];
    for tok in 0..t {
        let pos = pos0 + tok;
        let first = first_key(pos, shape.window as usize);
        for h in 0..heads {
            let kvh = h / group;
            let qrow = &q[(tok * heads + h) * hd..][..hd];
            scores.clear();
            for j in first..=pos {
                let krow = &k_cache[(j * kv_heads + kvh) * hd..][..hd];
                let dot: f64 = qrow
                    .iter()
                    .zip(krow)
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum();
                scores.push(softcap(dot * shape.scale as f64, shape.softcap));
            }
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            acc.iter_mut().for_each(|a| *a = 0.0);
            for (s, j) in scores.iter().zip(first..=pos) {
                let p = (s - max).exp();
                sum += p;
                let vrow = &v_cache[(j * kv_heads + kvh) * hd..][..hd];
                for (a, &v) in acc.iter_mut().zip(vrow) {
                    *a += p * v as f64;
                }
            }
            let orow = &mut out[(tok * heads + h) * hd..][..hd];
            for (o, a) in orow.iter_mut().zip(&acc) {
                *o = (a / sum) as f32;
            }
        }
    }
    out
}

/// [`attention`] the flash-decoding way, as `attention_split` + `attention_combine` compute
/// it: the keys of each (token, head) cut into `plan.splits` ranges of `plan.chunk` keys
/// from its first visible key, a (max `m`, sum `l`, unnormalized `Σ p·v`) per range, then
/// `out = Σ_s e^(m_s - M)·acc_s / Σ_s e^(m_s - M)·l_s` with `M = max_s m_s`. Ranges past
/// a token's last key are empty and weigh nothing. Same arguments and result as
/// [`attention`]; it checks the range arithmetic of the plan, not just the softmax.
pub fn attention_split(
    q: &[f32],
    k_cache: &[f32],
    v_cache: &[f32],
    shape: &AttentionShape,
    plan: AttentionPlan,
) -> Vec<f32> {
    let (t, heads, hd) = (
        shape.t as usize,
        shape.heads as usize,
        shape.head_dim as usize,
    );
    let kv_heads = shape.kv_heads as usize;
    let (splits, chunk) = (plan.splits as usize, plan.chunk as usize);
    assert_eq!(
        q.len(),
        t * heads * hd,
        "attention_split: q is not [t, heads, head_dim]"
    );
    let group = heads / kv_heads;
    let mut out = vec![0.0f32; t * heads * hd];
    for tok in 0..t {
        let pos = shape.pos0 as usize + tok;
        let first = first_key(pos, shape.window as usize);
        assert!(
            first + splits * chunk > pos,
            "attention_split: the ranges miss keys of position {pos}"
        );
        for h in 0..heads {
            let kvh = h / group;
            let qrow = &q[(tok * heads + h) * hd..][..hd];
            // (m, l, acc) per range; an empty range keeps m = -inf and adds nothing.
            let mut ranges = Vec::with_capacity(splits);
            for s in 0..splits {
                let start = first + s * chunk;
                let end = (start + chunk).min(pos + 1);
                let scores: Vec<f64> = (start..end)
                    .map(|j| {
                        let krow = &k_cache[(j * kv_heads + kvh) * hd..][..hd];
                        let dot: f64 = qrow
                            .iter()
                            .zip(krow)
                            .map(|(&a, &b)| a as f64 * b as f64)
                            .sum();
                        softcap(dot * shape.scale as f64, shape.softcap)
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut l = 0.0;
                let mut acc = vec![0.0f64; hd];
                for (sc, j) in scores.iter().zip(start..end) {
                    let p = (sc - m).exp();
                    l += p;
                    let vrow = &v_cache[(j * kv_heads + kvh) * hd..][..hd];
                    for (a, &v) in acc.iter_mut().zip(vrow) {
                        *a += p * v as f64;
                    }
                }
                ranges.push((m, l, acc));
            }
            let big_m = ranges.iter().map(|r| r.0).fold(f64::NEG_INFINITY, f64::max);
            let weight = |m: f64| {
                if m == f64::NEG_INFINITY {
                    0.0
                } else {
                    (m - big_m).exp()
                }
            };
            let l: f64 = ranges.iter().map(|r| weight(r.0) * r.1).sum();
            let orow = &mut out[(tok * heads + h) * hd..][..hd];
            for (d, o) in orow.iter_mut().enumerate() {
                let a: f64 = ranges.iter().map(|r| weight(r.0) * r.2[d]).sum();
                *o = (a / l) as f32;
            }
        }
    }
    out
}

/// `act(x)` in f64: SiLU `x·σ(x)`, or GELU with the tanh approximation
/// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (HF `gelu_pytorch_tanh`, Gemma's `hidden_act`).
pub fn activation(x: f64, act: Activation) -> f64 {
    match act {
        Activation::Silu => x / (1.0 + (-x).exp()),
        Activation::GeluTanh => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + u.tanh())
        }
    }
}

/// Gated linear unit: `out[i] = act(gate[i]) · up[i]` (SwiGLU for llama/qwen2, GeGLU for gemma3).
///
/// - `gate`, `up`: `[t, ffn]` (any shape; elementwise)
pub fn glu(gate: &[f32], up: &[f32], act: Activation) -> Vec<f32> {
    assert_eq!(gate.len(), up.len(), "glu: gate and up differ in length");
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| (activation(g as f64, act) * u as f64) as f32)
        .collect()
}

/// Residual add in place: `a[i] += b[i]`.
pub fn add(a: &mut [f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "add: a and b differ in length");
    for (x, &y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_keeps_the_last_w_positions() {
        assert_eq!(first_key(0, 0), 0);
        assert_eq!(first_key(9, 0), 0);
        assert_eq!(first_key(3, 5), 0);
        assert_eq!(first_key(4, 5), 0);
        assert_eq!(first_key(5, 5), 1); // keys 1..=5: five of them
        assert_eq!(first_key(9, 1), 9); // only itself
    }

    #[test]
    fn rope_layouts_rotate_their_pairs() {
        // One head of dim 4 at position 1 with inv_freq [π/2, 0]: pair 0 turns by 90°,
        // pair 1 stays.
        let f = [std::f32::consts::FRAC_PI_2, 0.0];
        let mut normal = [1.0, 2.0, 3.0, 4.0];
        rope(
            &mut normal,
            &f,
            1,
            1,
            4,
            1,
            Rotary::full(RopeLayout::Normal, 4),
        );
        let want = [-2.0, 1.0, 3.0, 4.0];
        assert!(
            normal.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{normal:?}"
        );
        let mut neox = [1.0, 2.0, 3.0, 4.0];
        rope(&mut neox, &f, 1, 1, 4, 1, Rotary::full(RopeLayout::Neox, 4));
        let want = [-3.0, 2.0, 1.0, 4.0];
        assert!(
            neox.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{neox:?}"
        );
    }

    #[test]
    fn partial_rope_turns_only_its_dimensions() {
        // A head of 6 with 4 rotated dimensions, at position 1, turned by 90° (pair 0) and
        // 0 (pair 1), scaled by 2: the last two dimensions pass through unscaled.
        let f = [std::f32::consts::FRAC_PI_2, 0.0, 5.0];
        let rotary = |layout| Rotary {
            layout,
            dims: 4,
            scale: 2.0,
        };
        let mut normal = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        rope(&mut normal, &f, 1, 1, 6, 1, rotary(RopeLayout::Normal));
        let want = [-4.0, 2.0, 6.0, 8.0, 5.0, 6.0];
        assert!(
            normal.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5),
            "{normal:?}"
        );
        // NeoX pairs (0, 2) and (1, 3) of the rotated four.
        let mut neox = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        rope(&mut neox, &f, 1, 1, 6, 1, rotary(RopeLayout::Neox));
        let want = [-6.0, 4.0, 2.0, 8.0, 5.0, 6.0];
        assert!(
            neox.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-5),
            "{neox:?}"
        );
    }

    #[test]
    fn split_attention_equals_attention() {
        // Deterministic values in [-2, 2); peaky enough that the max per range matters.
        let values = |n: usize, seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + seed * 104_729) % 1000) as f32 / 250.0) - 2.0)
                .collect()
        };
        // (t, heads, kv_heads, head_dim, pos0, window): a decode step, two tokens whose first
        // sees one key fewer (its last range may be empty), a window cutting the context.
        for (t, heads, kv, hd, pos0, window) in [
            (1, 4, 2, 8, 199, 0),
            (2, 4, 1, 6, 127, 0),
            (2, 2, 2, 4, 300, 100),
            (1, 4, 4, 3, 64, 0),
        ] {
            let shape = AttentionShape {
                t,
                heads,
                kv_heads: kv,
                head_dim: hd,
                pos0,
                window,
                scale: 0.7,
                softcap: if window > 0 { 1.5 } else { 0.0 },
            };
            let rows = (pos0 + t) as usize * (kv * hd) as usize;
            let (k, v) = (values(rows, 1), values(rows, 2));
            let q = values((t * heads * hd) as usize, 3);
            // 16-key ranges (whole blocks), as `plan` cuts real heads: these tiny heads stay
            // under its bytes' floor per range, so it would not split them at all.
            let keys = if window > 0 {
                window.min(pos0 + t)
            } else {
                pos0 + t
            };
            let p = AttentionPlan {
                splits: keys.div_ceil(16),
                chunk: 16,
            };
            assert!(p.splits > 1, "{shape:?} should split, got {p:?}");
            let want = attention(&q, &k, &v, &shape);
            let got = attention_split(&q, &k, &v, &shape, p);
            let err = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < 1e-5, "{shape:?} {p:?}: max |Δ| {err}");
        }
    }

    #[test]
    fn attention_of_one_key_returns_its_value() {
        let shape = AttentionShape {
            t: 1,
            heads: 2,
            kv_heads: 1,
            head_dim: 2,
            pos0: 0,
            window: 0,
            scale: 0.5,
            softcap: 0.0,
        };
        let out = attention(&[1.0, 2.0, 3.0, 4.0], &[5.0, 6.0], &[7.0, 8.0], &shape);
        assert_eq!(out, vec![7.0, 8.0, 7.0, 8.0]);
    }
}
