//! Rotary position embedding (`shaders/rope.wgsl`), in place on `[T, heads, head_dim]`.
//!
//! The frequencies are an input buffer, `inv_freq[head_dim / 2]`, computed on the CPU by the
//! model: base, linear scaling and Llama-3's frequency-dependent scaling are all the
//! model's business, and this kernel only evaluates `pos · inv_freq[i]` and rotates.
//! sin/cos are computed in the shader with an explicit range reduction, since WGSL's builtins
//! are only specified on [-π, π] (see rope.wgsl).

use bytemuck::{Pod, Zeroable};

use super::elementwise::{check_len, grid};
use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

/// Which dimensions of a head form a rotated pair.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RopeLayout {
    /// Adjacent pairs `(2i, 2i + 1)`: llama GGUFs, whose Q/K weights the converter permutes
    /// away from HF's half-split layout (ggml's `GGML_ROPE_TYPE_NORMAL`).
    Normal,
    /// Split pairs `(i, i + head_dim/2)`: HF's `rotate_half`, used as-is by qwen2 and gemma3
    /// GGUFs (ggml's `GGML_ROPE_TYPE_NEOX`).
    Neox,
}

/// Which dimensions of each head RoPE turns, and how far: the pair layout, how many leading
/// dimensions rotate (the rest pass through unchanged) and the factor on cos and sin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rotary {
    pub layout: RopeLayout,
    /// Rotated dimensions per head: even, at most the head size. Phi-4-mini rotates 96 of 128
    /// (llama.cpp `n_rot`, HF `partial_rotary_factor`); `Normal` then turns pairs `(2i, 2i + 1)`
    /// below `dims`, `Neox` pairs `(i, i + dims/2)`, and the dimensions from `dims` on are
    /// copied as they are.
    pub dims: u32,
    /// Multiplies cos and sin of every rotated pair: LongRoPE's attention factor (HF
    /// `attention_scaling`, ggml rope's `attn_factor`), else 1. Pass-through dimensions are
    /// not scaled.
    pub scale: f32,
}

impl Rotary {
    /// Every dimension rotated, unscaled.
    pub fn full(layout: RopeLayout, head_dim: u32) -> Rotary {
        Rotary {
            layout,
            dims: head_dim,
            scale: 1.0,
        }
    }
}

/// Invocations per workgroup in rope.wgsl.
const WG: u32 = 256;
/// The largest head the `QK_NORM` variant handles: its workgroup of 128 (`ROW_WG`) holds one
/// pair per invocation.
pub const QK_NORM_MAX_HEAD_DIM: u32 = 256;

/// Mirrors `Params` in rope.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    t: u32,
    heads: u32,
    head_dim: u32,
    pos0: u32,
    kv_heads: u32,
    eps: f32,
    rot_half: u32,
    rot_scale: f32,
}

/// Gemma 3's per-head RMSNorm of Q and K, folded into [`rope_kv_write`]: the norm weights
/// (`[head_dim]` each) and epsilon.
#[derive(Clone, Copy)]
pub struct QkNorm<'a> {
    pub q: &'a Binding,
    pub k: &'a Binding,
    pub eps: f32,
}

/// The shape of one [`rope_kv_write`].
#[derive(Clone, Copy, Debug)]
pub struct RopeKvShape {
    pub t: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub head_dim: u32,
    pub pos0: u32,
    pub rotary: Rotary,
}

/// Rotates `x` in place for positions `pos0..pos0 + t`: rotated pair `i` of token `tok` turns
/// by `f32(pos0 + tok) · inv_freq[i]` radians and is scaled by `rotary.scale`.
///
/// - `x`: `[t, heads, head_dim]` f32, read and written
/// - `inv_freq`: `[head_dim / 2]` f32 (entries from `rotary.dims / 2` on are not read)
#[allow(clippy::too_many_arguments)] // the shape is spelled out, as at every other kernel call
pub fn rope(
    rec: &mut StepRecorder,
    x: &Binding,
    inv_freq: &Binding,
    t: u32,
    heads: u32,
    head_dim: u32,
    pos0: u32,
    rotary: Rotary,
) -> Result<(), KernelError> {
    const KERNEL: &str = "rope";
    check_shape(KERNEL, t, head_dim, pos0)?;
    check_rotary(KERNEL, &rotary, head_dim)?;
    let elems = t as u64 * heads as u64 * head_dim as u64;
    check_len(KERNEL, "x", x, elems)?;
    check_len(KERNEL, "inv_freq", inv_freq, head_dim as u64 / 2)?;
    let (label, define) = match rotary.layout {
        RopeLayout::Normal => ("rope_normal", "NORMAL"),
        RopeLayout::Neox => ("rope_neox", "NEOX"),
    };
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("rope.wgsl", &[define]));
    let params = Params {
        t,
        heads,
        head_dim,
        pos0,
        kv_heads: 0,
        eps: 0.0,
        rot_half: rotary.dims / 2,
        rot_scale: rotary.scale,
    };
    let pairs = (elems / 2) as u32; // check_len bounded elems by u32::MAX
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &[x.clone(), inv_freq.clone()],
        grid(pairs.div_ceil(WG)),
    )?;
    Ok(())
}

/// [`rope`] on `q` in place and on `k` into the KV cache, with `v` copied alongside, in one
/// dispatch (the fused pipeline's form of rope(q), rope(k) and `attention::kv_write` for
/// prefill chunks and gemma3; a llama/qwen2 decode step folds all of it into the Q/K/V
/// matvec instead, `kernels::qkv_rope`): cache
/// row `pos0 + tok` receives token `tok`'s rotated K heads and its V heads. `k` itself is
/// left unrotated; attention reads the cache. With `qk_norm`, each Q and K head is first
/// RMS-normed with its weights (gemma3; the norm kernel's two dispatches folded in; head_dim
/// at most 256).
///
/// - `q`: `[t, heads, head_dim]` f32, read and written
/// - `k`, `v`: `[t, kv_heads, head_dim]` f32
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32, rows `pos0..pos0 + t` written
/// - `inv_freq`: `[head_dim / 2]` f32
#[allow(clippy::too_many_arguments)] // each buffer is its own binding
pub fn rope_kv_write(
    rec: &mut StepRecorder,
    q: &Binding,
    k: &Binding,
    v: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    inv_freq: &Binding,
    shape: &RopeKvShape,
    qk_norm: Option<QkNorm>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "rope_kv_write";
    let RopeKvShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        rotary,
    } = *shape;
    check_shape(KERNEL, t, head_dim, pos0)?;
    check_rotary(KERNEL, &rotary, head_dim)?;
    let head = head_dim as u64;
    check_len(KERNEL, "q", q, t as u64 * heads as u64 * head)?;
    let kv_elems = t as u64 * kv_heads as u64 * head;
    check_len(KERNEL, "k", k, kv_elems)?;
    check_len(KERNEL, "v", v, kv_elems)?;
    let cache = (pos0 as u64 + t as u64) * kv_heads as u64 * head;
    check_len(KERNEL, "k_cache", k_cache, cache)?;
    check_len(KERNEL, "v_cache", v_cache, cache)?;
    check_len(KERNEL, "inv_freq", inv_freq, head / 2)?;
    let pairs = t as u64 * (heads as u64 + kv_heads as u64) * head / 2;
    if pairs > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{pairs} rotated pairs exceed u32"),
        });
    }
    let (name, define) = match rotary.layout {
        RopeLayout::Normal => ("rope_kv_write_normal", "NORMAL"),
        RopeLayout::Neox => ("rope_kv_write_neox", "NEOX"),
    };
    let mut bindings = vec![
        q.clone(),
        inv_freq.clone(),
        k.clone(),
        v.clone(),
        k_cache.clone(),
        v_cache.clone(),
    ];
    let mut defines = vec![define, "KV"];
    // Without the norm: one invocation per pair. With it: one workgroup per head row.
    let mut groups = (pairs as u32).div_ceil(WG);
    let mut eps = 0.0;
    if let Some(norm) = qk_norm {
        if head_dim > QK_NORM_MAX_HEAD_DIM {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: format!(
                    "head_dim {head_dim} over {QK_NORM_MAX_HEAD_DIM}, the most a workgroup's \
                     pairs cover with the Q/K norm folded in"
                ),
            });
        }
        if !norm.eps.is_finite() || norm.eps < 0.0 {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: format!("eps {} is not a finite value >= 0", norm.eps),
            });
        }
        check_len(KERNEL, "q_norm_w", norm.q, head)?;
        check_len(KERNEL, "k_norm_w", norm.k, head)?;
        bindings.extend([norm.q.clone(), norm.k.clone()]);
        defines.push("QK_NORM");
        groups = (pairs / (head / 2)) as u32; // head rows
        eps = norm.eps;
    }
    let label = if qk_norm.is_some() {
        format!("{name}_qk_norm")
    } else {
        name.to_string()
    };
    let pipeline = rec
        .ctx()
        .pipeline(&label, || preprocess("rope.wgsl", &defines));
    let params = Params {
        t,
        heads,
        head_dim,
        pos0,
        kv_heads,
        eps,
        rot_half: rotary.dims / 2,
        rot_scale: rotary.scale,
    };
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        grid(groups),
    )?;
    Ok(())
}

/// What every RoPE form requires of its rotated dimensions: an even count within the head,
/// and a finite, positive factor.
pub(crate) fn check_rotary(
    kernel: &'static str,
    rotary: &Rotary,
    head_dim: u32,
) -> Result<(), KernelError> {
    if rotary.dims == 0 || !rotary.dims.is_multiple_of(2) || rotary.dims > head_dim {
        return Err(KernelError::Shape {
            kernel,
            why: format!(
                "{} rotated dimensions: must be even, > 0 and at most head_dim {head_dim}",
                rotary.dims
            ),
        });
    }
    if !(rotary.scale.is_finite() && rotary.scale > 0.0) {
        return Err(KernelError::Shape {
            kernel,
            why: format!("rotary scale {} is not a finite value > 0", rotary.scale),
        });
    }
    Ok(())
}

/// What both forms require: an even head_dim, positions f32 holds exactly.
pub(crate) fn check_shape(
    kernel: &'static str,
    t: u32,
    head_dim: u32,
    pos0: u32,
) -> Result<(), KernelError> {
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(KernelError::Shape {
            kernel,
            why: format!("head_dim {head_dim} must be even and > 0"),
        });
    }
    // Positions become f32 in the shader; beyond 2^24 they would no longer be exact.
    let last = pos0 as u64 + t as u64;
    if last > 1 << 24 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("position {last} exceeds f32's exact range"),
        });
    }
    Ok(())
}
