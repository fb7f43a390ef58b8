//! Attention over the KV cache (`shaders/attention.wgsl`): the cache write and the causal,
//! optionally sliding-window, grouped-query attention itself.
//!
//! Mask convention (the same in [`crate::reference::ops::attention`]): query token `t` of the
//! step sits at position `pos = pos0 + t` and sees cache rows `j` with `j <= pos` and, when
//! `window > 0`, `j > pos - window`: the `window` most recent positions including itself.
//! That is HF's `sliding_window_overlay` (`kv_idx > q_idx - sliding_window`) and llama.cpp's
//! SWA mask (masked when `pos - j >= n_swa`).
//!
//! The attention kernel is the plain baseline: one workgroup of 128 invocations per
//! (head, query token), looping over the keys in blocks of 128 with an online softmax, so
//! any context length works in fixed workgroup memory (1.5 KiB). A decode step therefore
//! runs only `heads` workgroups; splitting the keys across workgroups (flash-decoding) is
//! the next step for speed.

use bytemuck::{Pod, Zeroable};

use super::elementwise::{check_len, grid};
use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

/// Largest head_dim the attention kernel handles (gemma3's 256); `MAX_HEAD_DIM` in the shader.
pub const MAX_HEAD_DIM: u32 = 256;

/// Invocations per workgroup of the `KV_WRITE` variant.
const KV_WRITE_WG: u32 = 256;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Query tokens in this step.
    pub t: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads; divides `heads` (query head `h` reads kv head `h / (heads / kv_heads)`).
    pub kv_heads: u32,
    /// Dimensions per head, at most [`MAX_HEAD_DIM`].
    pub head_dim: u32,
    /// Position of the first query token; the cache must hold rows `0..pos0 + t`.
    pub pos0: u32,
    /// Sliding window in positions (see the module docs); 0 = full causal attention.
    pub window: u32,
    /// Multiplies `q·k` before the softmax: `1/sqrt(head_dim)` for llama/qwen2,
    /// `query_pre_attn_scalar^-0.5` for gemma3.
    pub scale: f32,
}

/// Mirrors `Params` of the KV_WRITE variant.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct KvWriteParams {
    n: u32,
    offset: u32,
    _pad: [u32; 2],
}

/// Mirrors `Params` of the attention variant.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionParams {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32,
    scale: f32,
    _pad: u32,
}

/// Copies this step's keys and values into cache rows `pos0..pos0 + t`.
///
/// - `k`, `v`: `[t, kv_heads, head_dim]` f32 (after RoPE on k)
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32 with `ctx >= pos0 + t`, written
#[allow(clippy::too_many_arguments)] // the shape is spelled out, as at every other kernel call
pub fn kv_write(
    rec: &mut StepRecorder,
    k: &Binding,
    v: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    t: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "attention_kv_write";
    let row = kv_heads as u64 * head_dim as u64;
    let n = t as u64 * row;
    let offset = pos0 as u64 * row;
    check_len(KERNEL, "k", k, n)?;
    check_len(KERNEL, "v", v, n)?;
    check_len(KERNEL, "k_cache", k_cache, offset + n)?;
    check_len(KERNEL, "v_cache", v_cache, offset + n)?;
    let label = "attention_kv_write";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("attention.wgsl", &["KV_WRITE"]));
    // check_len bounded offset + n by u32::MAX.
    let params = KvWriteParams {
        n: n as u32,
        offset: offset as u32,
        _pad: [0; 2],
    };
    let bindings = [k.clone(), v.clone(), k_cache.clone(), v_cache.clone()];
    rec.dispatch(
        label,
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        grid((n as u32).div_ceil(KV_WRITE_WG)),
    )?;
    Ok(())
}

/// `out = softmax(scale · q·kᵀ + mask) · v` for the step's `t` query tokens, reading cache
/// rows `0..pos0 + t` under the module's mask convention.
///
/// - `q`: `[t, heads, head_dim]` f32 (after RoPE)
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32, rows `0..pos0 + t` written
/// - `out`: `[t, heads, head_dim]` f32
pub fn attention(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    out: &Binding,
    shape: &AttentionShape,
) -> Result<(), KernelError> {
    const KERNEL: &str = "attention";
    let AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
    } = *shape;
    let bad = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
    if head_dim == 0 || head_dim > MAX_HEAD_DIM {
        return bad(format!("head_dim {head_dim} is not in 1..={MAX_HEAD_DIM}"));
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return bad(format!(
            "heads {heads} is not a multiple of kv_heads {kv_heads}"
        ));
    }
    if !scale.is_finite() {
        return bad(format!("scale {scale} is not finite"));
    }
    // Workgroups are (head, token); both must fit one dispatch dimension.
    if heads > 65_535 || t > 65_535 {
        return bad(format!("t {t} and heads {heads} must each be <= 65535"));
    }
    let rows = pos0 as u64 + t as u64;
    let elems = t as u64 * heads as u64 * head_dim as u64;
    check_len(KERNEL, "q", q, elems)?;
    check_len(KERNEL, "out", out, elems)?;
    let cache = rows * kv_heads as u64 * head_dim as u64;
    check_len(KERNEL, "k_cache", k_cache, cache)?;
    check_len(KERNEL, "v_cache", v_cache, cache)?;
    let label = "attention_f32";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("attention.wgsl", &[]));
    let params = AttentionParams {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
        _pad: 0,
    };
    let bindings = [q.clone(), k_cache.clone(), v_cache.clone(), out.clone()];
    rec.dispatch(
        label,
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        [heads, t, 1],
    )?;
    Ok(())
}
