//! Attention over the KV cache (`shaders/attention.wgsl`): the cache write and the causal,
//! optionally sliding-window, grouped-query attention itself.
//!
//! Mask convention (the same in [`crate::reference::ops::attention`]): query token `t` of the
//! step sits at position `pos = pos0 + t` and sees cache rows `j` with `j <= pos` and, when
//! `window > 0`, `j > pos - window`: the `window` most recent positions including itself.
//! That is HF's `sliding_window_overlay` (`kv_idx > q_idx - sliding_window`) and llama.cpp's
//! SWA mask (masked when `pos - j >= n_swa`).
//!
//! Two paths, chosen per call by [`plan`]:
//! - **single pass** (`attention_tiled_hd{head_dim}`, flash attention; Dao et al. 2022): one
//!   workgroup of 128 invocations per (head, tile of [`tiled_tile`] query tokens) walks their
//!   keys in blocks staged in workgroup memory, with an online softmax. Right for prefill,
//!   where the tiles already fill the GPU. Each key and value row is read once per tile
//!   rather than once per query: a 512-token Llama-3.2-1B prefill spent 30.7 ms of its
//!   81 ms in the one-query-per-workgroup kernel this replaced (H200, BENCHMARKS.md).
//! - **flash-decoding** (`attention_split_merge`; Dao et al. 2023): the visible keys of each
//!   (token, head) are cut into `splits` ranges of `chunk` keys, one workgroup each, which
//!   write their running max, sum and unnormalized `Σ p·v` into a partials buffer; the last
//!   workgroup of each (token, head) to finish, found by an atomic arrival counter, merges
//!   the ranges with the log-sum-exp rescaling. One dispatch, where the first version took
//!   two (`attention_split` + `attention_combine`, kept behind `COCO_ATTN_MERGE=separate`
//!   as the A/B baseline: `GpuContext::attention_merge`).
//!   A decode step (`t = 1`) otherwise runs only `heads` workgroups (32 for Llama-3.2-1B,
//!   4 for Gemma-3-270M) on a GPU with 100+ SMs, each walking thousands of keys serially.
//!   Its K/V reads are coalesced vec4 loads: neighbouring invocations read neighbouring
//!   16-byte pieces of a row. Decode is latency-bound, not bandwidth-bound (Gemma-3-270M at
//!   512 keys reads 1 MiB of K/V per layer: 0.25 µs at 4 TB/s), so the plan cuts the keys
//!   into ranges of as little as one 16-key block, and a workgroup requests all of a block's
//!   key and value rows before it waits on any: about one memory round trip per block.
//!
//! Predicted on the H200 (132 SMs) at 513 keys, per layer, against the 98 µs and 40 µs that
//! the 64-key plan with scalar loads measured: Gemma-3-270M (4 heads) runs 33 ranges × 4
//! heads = 132 split workgroups of one block each (a q load overlapped with one K+V round
//! trip, two barriers), then 4 combine workgroups merging 33 ranges with 4 loads in flight:
//! ~5 µs + ~4 µs (about the 3.5 µs dispatch floor each), so ≤ 15 µs. Llama-3.2-1B (32
//! heads): 17 ranges of 32 keys × 32 heads = 544 workgroups of two blocks, about 4 per SM
//! and all resident at once, then 32 combine workgroups: also ≤ 15 µs.
//!
//! `head_dim` must be a multiple of 4 (every supported model's is: 64, 128, 256), since the
//! kernels bind q and the keys as `array<vec4<f32>>`, and the split and combine kernels also
//! the values, the partials and out.
//!
//! Query heads that share a KV head run in separate workgroups and read the same K/V rows;
//! those repeats come from L2. Sharing one workgroup per KV head would cut that traffic by
//! the group size, but its workgroup memory (queries, scores, per-group sums) grows with the
//! group, which is unbounded for multi-query models, and it divides the workgroup count by
//! the group: at decode the shortage of workgroups is the very problem.

use bytemuck::{Pod, Zeroable};

use super::elementwise::{check_len, grid};
use super::KernelError;
use super::matmul::weight_define;
use crate::gguf::GgmlType;
use crate::gpu::{preprocess, AttentionMerge, Binding, GpuTensor, StepRecorder};

/// Largest head_dim the attention kernel handles (gemma3's 256); `MAX_HEAD_DIM` in the shader.
pub const MAX_HEAD_DIM: u32 = 256;

/// Invocations per workgroup of the `KV_WRITE` variant.
const KV_WRITE_WG: u32 = 256;

/// Keys per block of the `SPLIT` variant (`BLOCK` in the shader). A range shorter than one
/// block leaves invocations idle, so chunks are whole blocks. 16 keys of a 256-dim head are
/// 16 KiB of K and 16 KiB of V: 8 + 8 vec4 loads per invocation of 128, all in flight at once.
pub const SPLIT_BLOCK: u32 = 16;

/// Workgroups the flash-decoding path aims for: about 4 per SM on a 132-SM H200, so each
/// range is short (a few blocks at a few thousand keys), which is what a latency-bound step
/// wants. Smaller GPUs just queue them; the extra cost is `splits · (head_dim + 4)` floats per
/// (token, head) to merge. Since a block's value rows load with its keys, a range's blocks
/// cost less than the merge of more ranges: 512 took the Llama-1B shape's step at ~576 keys
/// from 930 to 894 µs and the 8B's from 2,984 to 2,888 against 1,024, and 2,048 lost
/// (BENCHMARKS.md "session 19").
const TARGET_WORKGROUPS: u32 = 512;

/// Most ranges per (token, head): `MAX_SPLITS` in the shader's `COMBINE` workgroup arrays.
/// [`plan`] gives at most `TARGET_WORKGROUPS` ranges, which is not above this.
const MAX_SPLITS: u32 = 1024;
const _: () = assert!(TARGET_WORKGROUPS <= MAX_SPLITS);

/// Most (token, head) rows a step may have and still split its keys ([`plan`]'s first rule):
/// beyond it the single pass already has enough workgroups.
pub const SPLIT_MAX_ROWS: u32 = 512;

/// Arrival counters at the front of the partials (the shader's `COUNTERS`): one per (token,
/// head) of a split step, which the split workgroups count themselves in to (the last one
/// merges), then one per token, which a folded W_o's heads count themselves in to (the last
/// one adds the heads' sums into the residual). They are 0 between dispatches (the last
/// workgroup resets its own), so the partials buffer must start zeroed (WebGPU
/// zero-initializes new buffers).
pub const RANGE_COUNTERS: u64 = 2 * SPLIT_MAX_ROWS as u64;

/// Most heads × dim a folded W_o may have ([`o_fold_fits`]): the token's last head adds that
/// many partial sums, 128 per invocation at most, in its tail. Gemma-3-270M has 4 × 640 and
/// Qwen2.5-0.5B 14 × 896; Llama-3.2-1B's 32 × 2,048 would be 512 loads per invocation.
pub const O_FOLD_MAX_SUMS: u32 = 16_384;

/// Most dim × head_dim a folded W_o may have: one merging workgroup's slice of it (Gemma-3-270M
/// 640 × 256: 40 chunks of 32 weights per invocation).
pub const O_FOLD_MAX_SLICE: u32 = 262_144;

/// Whether W_o (`dim` rows of `heads · head_dim`) is small enough to fold into the split
/// kernel's merge (`O_PROJ` in attention.wgsl): its heads' slices whole chunks, and both the
/// slices and the sum over heads within a workgroup's tail (the megakernel's lesson: a fold
/// must not trade the GPU's occupancy for a dispatch).
pub fn o_fold_fits(heads: u32, head_dim: u32, dim: u32) -> bool {
    head_dim.is_multiple_of(32)
        && head_dim <= MAX_HEAD_DIM
        && (heads as u64) * (dim as u64) <= O_FOLD_MAX_SUMS as u64
        && (dim as u64) * (head_dim as u64) <= O_FOLD_MAX_SLICE as u64
}

/// f32 per (token, head, range) in the partials: `vec4(m, l, 0, 0)`, then `acc[head_dim]`.
fn partial_row(head_dim: u32) -> u64 {
    head_dim as u64 + 4
}

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
    /// `query_pre_attn_scalar^-0.5` for gemma2 and gemma3.
    pub scale: f32,
    /// Gemma 2's attention soft-cap: each scaled score `s` becomes `cap·tanh(s / cap)` before
    /// the mask and softmax (HF `attn_logit_softcapping`). 0 = none.
    pub softcap: f32,
}

/// How one attention call runs; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionPlan {
    /// Key ranges per (token, head); 1 = the single-pass kernel, no partials.
    pub splits: u32,
    /// Keys per range (a multiple of the 16-key block); the whole key count when `splits == 1`.
    pub chunk: u32,
}

/// Keys that query position `pos` sees under the module's mask convention.
fn visible_keys(pos: u32, window: u32) -> u32 {
    if window == 0 {
        pos + 1
    } else {
        window.min(pos + 1)
    }
}

/// Picks the path for `shape`. The rule:
///
/// - `t · heads > SPLIT_MAX_ROWS` (512): single pass. There are enough workgroups already.
/// - otherwise aim for `want = ⌈TARGET_WORKGROUPS / (t · heads)⌉` ranges per (token, head):
///   `chunk = ⌈n / want⌉` rounded up to whole 16-key blocks, `splits = ⌈n / chunk⌉`, where
///   `n` is the key count of the step's last token (the largest).
/// - `splits == 1` (at most 16 keys): single pass.
///
/// Llama-3.2-1B decoding at 513 keys: `t · heads = 32`, `want = 16`, `chunk = 48`,
/// `splits = 11`: 352 split workgroups of three blocks each.
/// Gemma-3-270M at 513 keys: `t · heads = 4`, `want = 128`, `chunk = 16`, `splits = 33`.
/// `splits <= want`, so `t · heads · splits < TARGET_WORKGROUPS + t · heads`: the partials
/// stay under `1024 · (head_dim + 4)` floats whatever the context ([`partials_len`]).
pub fn plan(shape: &AttentionShape) -> AttentionPlan {
    let single = |n: u32| AttentionPlan {
        splits: 1,
        chunk: n,
    };
    if shape.t == 0 || shape.heads == 0 {
        return single(0);
    }
    let n = visible_keys(shape.pos0.saturating_add(shape.t - 1), shape.window);
    match plan_split(shape) {
        Some(split) if split.splits >= 2 => split,
        _ => single(n),
    }
}

/// [`plan`]'s key ranges for a step that takes the split kernel whatever its key count (W_o
/// folded in: only the split kernel's merge can take it), so possibly one range; `None`
/// where `t · heads > SPLIT_MAX_ROWS`, which takes the single pass.
pub fn plan_split(shape: &AttentionShape) -> Option<AttentionPlan> {
    let rows = shape.t.saturating_mul(shape.heads);
    if shape.t == 0 || rows == 0 || rows > SPLIT_MAX_ROWS {
        return None;
    }
    let n = visible_keys(shape.pos0.saturating_add(shape.t - 1), shape.window);
    let want = TARGET_WORKGROUPS.div_ceil(rows);
    let chunk = n.div_ceil(want).next_multiple_of(SPLIT_BLOCK);
    Some(AttentionPlan {
        splits: n.div_ceil(chunk),
        chunk,
    })
}

/// f32 elements of the partials buffer that [`attention`] needs for any step of up to
/// `max_t` tokens, `heads` query heads of `head_dim`, and at most `context` cache rows (any
/// `pos0` and window); with `o_rows > 0` also [`attention_o_proj`]'s for a W_o of that many
/// rows. Allocate it once per session; it may be 0.
pub fn partials_len(heads: u32, head_dim: u32, max_t: u32, context: u32, o_rows: u32) -> u64 {
    // `splits` is at most `want` (see `plan`) and at most one range per 16-key block; the
    // bound is reached at some key count, and `plan` is not monotone in it, so take the bound.
    let blocks = context.div_ceil(SPLIT_BLOCK) as u64;
    (1..=max_t)
        .filter_map(|t| {
            let rows = t as u64 * heads as u64;
            if rows == 0 || rows > SPLIT_MAX_ROWS as u64 || (blocks < 2 && o_rows == 0) {
                return None;
            }
            let want = (TARGET_WORKGROUPS as u64).div_ceil(rows);
            let records = rows * want.min(blocks).max(1) * partial_row(head_dim);
            Some(records + rows * o_rows as u64)
        })
        .max()
        .map_or(0, |words| RANGE_COUNTERS + words)
}

/// Query tokens (BQ) and keys (BK) per tile of the `TILED` kernel for `head_dim`: powers of
/// two with BQ·head_dim <= 1024 floats of queries, BK·head_dim <= 2048 of keys or values and
/// BQ·BK <= 512 scores, so the tiles fit WebGPU's guaranteed 16 KiB of workgroup memory
/// ([`tiled_workgroup_bytes`]). Llama (64): 16 × 32; 128: 8 × 16; Gemma-3 (256): 4 × 8.
pub fn tiled_tile(head_dim: u32) -> (u32, u32) {
    let pow2_floor = |n: u32| 1u32 << (31 - n.max(1).leading_zeros());
    let bq = pow2_floor(1024 / head_dim.max(1)).min(32);
    let bk = pow2_floor(2048 / head_dim.max(1)).min(512 / bq);
    (bq, bk)
}

/// Workgroup memory of the `TILED` kernel: the query and key/value tiles in vec4 rows padded
/// by one vec4, and the scores in rows padded by one f32 (the shader's ROW and SROW).
pub fn tiled_workgroup_bytes(head_dim: u32) -> u32 {
    let (bq, bk) = tiled_tile(head_dim);
    let row = head_dim / 4 + 1;
    16 * (bq + bk) * row + 4 * bq * (bk + 1)
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
    softcap: f32,
}

/// Mirrors `Params` of the RANGES variants (SPLIT and COMBINE).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SplitParams {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32,
    scale: f32,
    splits: u32,
    chunk: u32,
    softcap: f32,
    o_rows: u32,
    o_base: u32,
    o_scale: f32,
    eps: f32,
    _pad: [u32; 2],
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

/// `out = softmax(cap(scale · q·kᵀ) + mask) · v` (`cap` the identity unless `shape.softcap`) for the step's `t` query tokens, reading cache
/// rows `0..pos0 + t` under the module's mask convention. Runs the path [`plan`] picks: one
/// dispatch, or two when the keys are split (see [`attention_planned`]).
pub fn attention(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    out: &Binding,
    partials: &Binding,
    shape: &AttentionShape,
) -> Result<(), KernelError> {
    attention_planned(rec, q, k_cache, v_cache, out, partials, shape, plan(shape))
}

/// [`attention`] on the path `how` (what `model::Plan` chose for the step by [`plan`]'s
/// rule): the single pass when `how.splits == 1`, else the split and combine dispatches.
///
/// - `q`: `[t, heads, head_dim]` f32 (after RoPE)
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32, rows `0..pos0 + t` written
/// - `out`: `[t, heads, head_dim]` f32
/// - `partials`: scratch, `[t, heads, splits, 4 + head_dim]` f32 when split; sized for every
///   step by [`partials_len`], unread by the single pass
#[allow(clippy::too_many_arguments)] // each buffer is its own binding
pub fn attention_planned(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    out: &Binding,
    partials: &Binding,
    shape: &AttentionShape,
    how: AttentionPlan,
) -> Result<(), KernelError> {
    run(rec, q, k_cache, v_cache, Target::Out(out), partials, shape, how)
}

/// W_o folded into flash-decoding's merge (`O_PROJ` in attention.wgsl): the residual
/// stream `[t, dim]` gains `scale · W_o · attention`, or with `post_norm` gemma's
/// `RMSNorm(W_o · attention) · w`. One dispatch for attention and W_o.
pub struct OProj<'a> {
    /// `[heads · head_dim → dim]`, one buffer, [`o_fold_fits`].
    pub w: &'a GpuTensor,
    /// `[t, dim]` f32, added into.
    pub residual: &'a Binding,
    /// gemma's post-attention norm: its weight `[dim]` and epsilon.
    pub post_norm: Option<(&'a Binding, f32)>,
    /// granite's residual multiplier (1 elsewhere); not with `post_norm`.
    pub scale: f32,
}

/// The pipeline label of [`attention_o_proj`] for W_o of type `ty`.
pub fn o_proj_label(ty: GgmlType, head_dim: u32, post_norm: bool) -> String {
    format!(
        "attention_split_merge_o_{}_hd{head_dim}{}",
        ty.name().to_ascii_lowercase(),
        if post_norm { "_post_norm" } else { "" }
    )
}

/// Attention with W_o folded in ([`OProj`]) on the split path `how` ([`plan_split`]'s:
/// possibly a single range). `partials` as for [`attention_planned`], sized by
/// [`partials_len`] with `o_rows` = W_o's rows.
#[allow(clippy::too_many_arguments)] // each buffer is its own binding
pub fn attention_o_proj(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    partials: &Binding,
    shape: &AttentionShape,
    how: AttentionPlan,
    o: &OProj,
) -> Result<(), KernelError> {
    run(rec, q, k_cache, v_cache, Target::OProj(o), partials, shape, how)
}

/// Where the attention output goes.
enum Target<'a> {
    /// `[t, heads, head_dim]` f32.
    Out(&'a Binding),
    /// Through W_o into the residual stream (the split path only).
    OProj(&'a OProj<'a>),
}

#[allow(clippy::too_many_arguments)] // each buffer is its own binding
fn run(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    target: Target,
    partials: &Binding,
    shape: &AttentionShape,
    how: AttentionPlan,
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
        softcap,
    } = *shape;
    let bad = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
    if head_dim == 0 || head_dim > MAX_HEAD_DIM || !head_dim.is_multiple_of(4) {
        return bad(format!(
            "head_dim {head_dim} is not a multiple of 4 in 4..={MAX_HEAD_DIM} (the split \
             kernels read rows as vec4)"
        ));
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return bad(format!(
            "heads {heads} is not a multiple of kv_heads {kv_heads}"
        ));
    }
    if !scale.is_finite() {
        return bad(format!("scale {scale} is not finite"));
    }
    if !(softcap.is_finite() && softcap >= 0.0) {
        return bad(format!("softcap {softcap} is not finite and >= 0"));
    }
    // Workgroups are (head, token) or (range, head, token); each must fit one dispatch
    // dimension (ranges are at most MAX_SPLITS).
    if heads > 65_535 || t > 65_535 {
        return bad(format!("t {t} and heads {heads} must each be <= 65535"));
    }
    let rows = pos0 as u64 + t as u64;
    let elems = t as u64 * heads as u64 * head_dim as u64;
    check_len(KERNEL, "q", q, elems)?;
    if let Target::Out(out) = target {
        check_len(KERNEL, "out", out, elems)?;
    }
    let cache = rows * kv_heads as u64 * head_dim as u64;
    check_len(KERNEL, "k_cache", k_cache, cache)?;
    check_len(KERNEL, "v_cache", v_cache, cache)?;

    let AttentionPlan { splits, chunk } = how;
    if splits == 0 || splits > MAX_SPLITS {
        return bad(format!("{splits} key ranges: not in 1..={MAX_SPLITS}"));
    }
    let last = (pos0 + t).saturating_sub(1);
    let single = splits == 1 && matches!(target, Target::Out(_));
    if !single && (chunk == 0 || chunk.saturating_mul(splits) < visible_keys(last, window)) {
        return bad(format!(
            "{splits} ranges of {chunk} keys do not cover the last token's keys"
        ));
    }
    if let (true, Target::Out(out)) = (single, &target) {
        let (bq, bk) = tiled_tile(head_dim);
        let label = format!("attention_tiled_hd{head_dim}");
        let pipeline = rec.ctx().pipeline(&label, || {
            format!(
                "const HD: u32 = {head_dim}u;\nconst BQ: u32 = {bq}u;\nconst BK: u32 = {bk}u;\n"
            ) + &preprocess("attention.wgsl", &["TILED"])
        });
        let params = AttentionParams {
            t,
            heads,
            kv_heads,
            head_dim,
            pos0,
            window,
            scale,
            softcap,
        };
        let bindings = [q.clone(), k_cache.clone(), v_cache.clone(), (*out).clone()];
        rec.dispatch(
            &label,
            &pipeline,
            bytemuck::bytes_of(&params),
            &bindings,
            [heads, t.div_ceil(bq), 1],
        )?;
        return Ok(());
    }

    let rows = elems / head_dim as u64;
    if rows > SPLIT_MAX_ROWS as u64 {
        return bad(format!(
            "{rows} (token, head) rows split: more than the {SPLIT_MAX_ROWS} arrival counters"
        ));
    }
    let records_end = RANGE_COUNTERS + rows * splits as u64 * partial_row(head_dim);
    let mut params = SplitParams {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
        splits,
        chunk,
        softcap,
        o_rows: 0,
        o_base: 0,
        o_scale: 1.0,
        eps: 0.0,
        _pad: [0; 2],
    };
    let mut bindings = vec![
        q.clone(),
        k_cache.clone(),
        v_cache.clone(),
        partials.clone(),
    ];
    let out = match target {
        Target::Out(out) => out,
        Target::OProj(o) => {
            let label = o_proj_label(o.w.ty, head_dim, o.post_norm.is_some());
            let o_rows = o.w.n_rows;
            if !o_fold_fits(heads, head_dim, o_rows as u32)
                || o.w.row_len != (heads * head_dim) as u64
                || o.w.parts.len() != 1
            {
                return bad(format!(
                    "W_o {} ({} × {} in {} buffers) does not fold into attention with {heads} \
                     heads of {head_dim}",
                    o.w.name,
                    o.w.n_rows,
                    o.w.row_len,
                    o.w.parts.len()
                ));
            }
            let o_end = records_end + rows * o_rows;
            check_len(KERNEL, "partials", partials, o_end)?;
            check_len(KERNEL, "residual", o.residual, t as u64 * o_rows)?;
            let o_base = u32::try_from(records_end).map_err(|_| KernelError::Shape {
                kernel: KERNEL,
                why: format!("partials of {o_end} words overflow a u32 index"),
            })?;
            params.o_rows = o_rows as u32;
            params.o_base = o_base;
            params.o_scale = o.scale;
            bindings.extend([Binding::from(&o.w.parts[0].buffer), o.residual.clone()]);
            if let Some((w, eps)) = o.post_norm {
                check_len(KERNEL, "post_norm", w, o_rows)?;
                params.eps = eps;
                bindings.push(w.clone());
            }
            let define = weight_define(o.w.ty)?;
            let post = o.post_norm.is_some();
            let pipeline = rec.ctx().pipeline(&label, || {
                let chunks = head_dim / 32;
                let batch = (8 / chunks).max(1);
                let mut defines = vec!["RANGES", "MERGE", "SPLIT", "LAST_COMBINES", "O_PROJ", define];
                if post {
                    defines.push("POST_NORM");
                }
                format!("const O_CHUNKS: u32 = {chunks}u;\nconst O_BATCH: u32 = {batch}u;\n")
                    + &preprocess("attention.wgsl", &defines)
            });
            rec.dispatch(&label, &pipeline, bytemuck::bytes_of(&params), &bindings, [splits, heads, t])?;
            return Ok(());
        }
    };
    check_len(KERNEL, "partials", partials, records_end)?;
    let merged = rec.ctx().attention_merge == AttentionMerge::InSplit;
    let label = if merged {
        "attention_split_merge"
    } else {
        "attention_split"
    };
    let pipeline = rec.ctx().pipeline(label, || {
        let defines: &[&str] = if merged {
            &["RANGES", "MERGE", "SPLIT", "LAST_COMBINES"]
        } else {
            &["RANGES", "SPLIT"]
        };
        preprocess("attention.wgsl", defines)
    });
    if merged {
        bindings.push(out.clone());
    }
    let params = bytemuck::bytes_of(&params);
    rec.dispatch(label, &pipeline, params, &bindings, [splits, heads, t])?;
    if merged {
        return Ok(());
    }

    let label = "attention_combine";
    let pipeline = rec.ctx().pipeline(label, || {
        preprocess("attention.wgsl", &["RANGES", "MERGE", "COMBINE"])
    });
    let bindings = [partials.clone(), out.clone()];
    rec.dispatch(label, &pipeline, params, &bindings, [heads, t, 1])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiled_tiles_fit_webgpu_workgroup_memory_for_every_head_dim() {
        for head_dim in (4..=MAX_HEAD_DIM).step_by(4) {
            let (bq, bk) = tiled_tile(head_dim);
            let bytes = tiled_workgroup_bytes(head_dim);
            assert!(bytes <= 16_384, "head_dim {head_dim}: {bytes} bytes");
            // The shader's P·V phase gives each query row 128 / BQ invocations, each owning at
            // most two of the row's head_dim / 4 vec4s.
            assert!(bq.is_power_of_two() && bq <= 32 && head_dim / 4 <= 2 * (128 / bq));
            assert!(
                bk.is_power_of_two() && bk >= 8,
                "head_dim {head_dim}: BK {bk}"
            );
        }
        assert_eq!(tiled_tile(64), (16, 32));
        assert_eq!(tiled_tile(128), (8, 16));
        assert_eq!(tiled_tile(256), (4, 8));
    }
}
