//! `shaders/matmul.wgsl`: y[T, N] = x[T, K] · W[N, K]ᵀ (+ bias) (+ y), with W read at the
//! file's bits per weight (`gpu::layout`) and dequantized in registers, and the fused forms a decode step uses to save
//! dependent dispatches (DESIGN.md "The pipeline"):
//! - [`matmul_normed`]: RMSNorm folded into the matmul that consumes it;
//! - [`matmul_glu`]: gate and up projections and the activation, optionally normed;
//! - [`matmul_qkv`]: the Q, K and V projections (+ biases), optionally normed.
//!
//! In a Llama layer, norm → Q, K, V (4 dispatches) becomes 1 and norm → gate, up → glu (4)
//! becomes 1: 6 fewer dependent dispatches per layer.
//!
//! Six shapes of the same product, picked by [`MatmulKey::choose`] and [`MatmulKey::sized`]:
//! - `matvec_wg256`: decode (T small); 256 invocations (SwiftShader's limit) = 8 slots × 32
//!   lanes, each lane taking every 32nd 8-element group of its row (coalesced reads),
//!   shared-memory reduction. What the browser runs.
//! - `matvec_sg256`: the same with `subgroupAdd`, when the device has SUBGROUP (native only:
//!   wgpu's WebGPU backend never enables it).
//! - `matvec_chunk256`: decode with SUBGROUP and K ≥ [`CHUNK_MIN_K`] (or an int8 LM head of
//!   K ≥ 512, [`CHUNK_SHORT_K_MIN`]): a lane per 32-element chunk (16-byte weight loads), x'
//!   staged in workgroup-memory tiles, 16 slots; `matvec_chunk64x4` / `32x4` with int8 levels
//!   where the grid stays full ([`CHUNK_WIDE`]).
//! - `tiled64x64`: prefill; a 64-slot × 64-token tile per workgroup, each W chunk dequantized
//!   once into workgroup memory and reused by all 64 tokens.
//! - `wide64x128`, `wide128x64`, `wide64x64`: the portable prefill GEMM with a larger
//!   register tile per thread (`shaders/matmul/gemm_wide.wgsl`), the first of them that
//!   leaves ≥ [`WIDE_MIN_GROUPS`] workgroups per product (else `tiled64x64`; the fused Q/K/V
//!   always `tiled64x64`), or one by name ([`GemmChoice`]).
//! - `coop128x128`: prefill on tensor cores with f16 cooperative matrices
//!   (`shaders/matmul/gemm_coop.wgsl`), where the native adapter offers them (never in a
//!   browser) unless `COCO_COOPMAT=0`; `coop64x64`, `tiled64x64`'s tiles on tensor cores,
//!   runs the steps of up to [`coop64_max_t`] tokens, and every step with `COCO_GEMM=tiled`.
//!
//! Every fused form exists in all four shapes, so it serves any T; only its speed, not its
//! dispatch count, depends on T.
//!
//! A weight split into parts (`GpuTensor::parts`) gets one dispatch per part, each writing its
//! rows' columns of y; [`matmul_glu`] pairs the gate's and up's parts (same shape, same split).
//! [`matmul_qkv`] needs single-part weights of one type and falls back to three
//! [`matmul_normed`] (or [`matmul`]) dispatches otherwise, or when its 7–11 storage bindings
//! exceed the device's per-stage limit (WebGPU's default is 8: Q/K/V with norm and biases
//! needs 11). The model never leans on that fallback: `model::Plan` asks [`qkv_fuses`] per
//! layer and the forward calls the one dispatch or the three products itself, so the printed
//! plan is what runs. Likewise the variant of every product (matvec or tiles, chunk or
//! lane-per-8) follows one rule, `chosen_key`, which the plan's labels are predicted with.

mod key;
mod levels;
mod select;
#[cfg(test)]
mod tests;
mod token_scale;

pub use key::*;
pub use levels::*;
pub use select::*;
use token_scale::record_token_scales;
pub use token_scale::{record_x16_staging, COOP_SCALES_MAX_T};

use crate::gpu::{Binding, GpuContext, GpuTensor, StepRecorder, Work};

use super::elementwise::Activation;
use super::KernelError;

/// Checks that `w` can be read by `dequant32`: rows of whole 32-element chunks, row bytes
/// as the type says, every part bindable (`max_binding` bytes) and addressable in u32.
pub(crate) fn check_weight(
    kernel: &'static str,
    w: &GpuTensor,
    max_binding: u64,
) -> Result<(), KernelError> {
    let err = |why: String| Err(KernelError::Shape { kernel, why });
    weight_define(w.ty)?;
    if w.row_len == 0 || !w.row_len.is_multiple_of(32) {
        return err(format!(
            "{}: row length {} is not a positive multiple of 32",
            w.name, w.row_len
        ));
    }
    if w.ty.bytes_for(w.row_len) != Some(w.row_bytes) {
        return err(format!(
            "{}: {} bytes per row does not match {} × {}",
            w.name, w.row_bytes, w.row_len, w.ty
        ));
    }
    for part in &w.parts {
        if part.buffer.size() > max_binding {
            return err(format!(
                "{}: a part of {} bytes exceeds the binding limit {max_binding} (split it with a smaller max_part_bytes)",
                w.name,
                part.buffer.size()
            ));
        }
        // The shaders index a part's words and 32-element blocks in u32.
        if part.buffer.size() / 4 > u32::MAX as u64 {
            return err(format!(
                "{}: a part of {} rows exceeds u32 word offsets",
                w.name, part.n_rows
            ));
        }
    }
    if w.n_rows > u32::MAX as u64 {
        return err(format!("{}: {} rows exceed u32", w.name, w.n_rows));
    }
    Ok(())
}

/// Bytes a binding covers.
pub(crate) fn binding_bytes(b: &Binding) -> u64 {
    b.size
        .unwrap_or_else(|| b.buffer.size().saturating_sub(b.offset))
}

/// Errors unless `b` holds at least `elems` f32/u32 values.
pub(crate) fn check_binding(
    kernel: &'static str,
    what: &str,
    b: &Binding,
    elems: u64,
) -> Result<(), KernelError> {
    let have = binding_bytes(b);
    if have < elems * 4 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("{what} holds {have} bytes, needs {}", elems * 4),
        });
    }
    if elems > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("{what}: {elems} elements exceed u32 indexing"),
        });
    }
    Ok(())
}

/// `groups` workgroups folded into (x, y) so neither exceeds `max` (65,535 in WebGPU).
pub(crate) fn fold(groups: u32, max: u32) -> [u32; 2] {
    if groups <= max {
        [groups, 1]
    } else {
        [max, groups.div_ceil(max)]
    }
}

/// Optional parts of a matmul.
#[derive(Clone, Copy, Debug)]
pub struct MatmulArgs<'a> {
    /// `bias[N]` f32, added to every token's row.
    pub bias: Option<&'a wgpu::Buffer>,
    /// y += x·Wᵀ instead of y = x·Wᵀ (residual adds fused into the producing matmul).
    pub accumulate: bool,
    /// Each output soft-capped as it is stored, y = cap·tanh(y / cap), after `scale`: Gemma
    /// 2's final logit soft-cap folded into the LM head (HF `final_logit_softcapping`). Not
    /// with `accumulate`.
    pub softcap: Option<f32>,
    /// Multiplies the product (bias included) before it is stored or added: granite's
    /// residual multiplier on W_o and W_down, and its 1 / logits scaling on the LM head.
    pub scale: f32,
    /// x' read as the int8 levels its producer wrote ([`matmul_glu`]'s `levels_out`: W_down
    /// after the GLU, where [`ffn_levels_fit`]) instead of staged from `x`.
    pub x_levels: Option<&'a Binding>,
}

impl Default for MatmulArgs<'_> {
    fn default() -> Self {
        MatmulArgs {
            bias: None,
            accumulate: false,
            softcap: None,
            scale: 1.0,
            x_levels: None,
        }
    }
}

/// RMSNorm folded into a matmul: `(norm_w[K] f32, eps)`; x is then the raw residual stream.
pub type Norm<'a> = (&'a Binding, f32);

/// Records `y[T, N] (+)= x[T, K] · w[N, K]ᵀ (+ bias[N])`: one dispatch per part of `w`, with
/// the kernel shape chosen by T and the device. `x` must not share a buffer with `y` (a
/// writable binding may not alias another in one dispatch).
pub fn matmul(
    rec: &mut StepRecorder,
    w: &GpuTensor, // [N, K] (gpu::layout)
    x: &Binding,   // [T, K] f32
    y: &Binding,   // [T, N] f32
    t: u32,
    args: MatmulArgs,
) -> Result<(), KernelError> {
    matmul_variant(rec, w, x, y, t, args, None)
}

/// [`matmul`] with the kernel shape forced (`Some`) for tests and A/B runs; `None` chooses.
pub fn matmul_variant(
    rec: &mut StepRecorder,
    w: &GpuTensor, // [N, K] (gpu::layout)
    x: &Binding,   // [T, K] f32
    y: &Binding,   // [T, N] f32
    t: u32,
    args: MatmulArgs,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    let bias = args.bias.map(Binding::from);
    single(rec, w, x, None, y, t, bias, args, variant)
}

/// Records `y[T, N] (+)= (x · rsqrt(mean(x²) + eps) · norm_w) · w[N, K]ᵀ (+ bias[N])`: the
/// RMSNorm of each token folded into the matmul that consumes it, one dispatch per part of
/// `w` (each recomputes the tokens' Σx², which costs no extra pass: see matmul.wgsl).
#[allow(clippy::too_many_arguments)]
pub fn matmul_normed(
    rec: &mut StepRecorder,
    w: &GpuTensor,    // [N, K] (gpu::layout)
    x: &Binding,      // [T, K] f32, the raw residual stream
    norm_w: &Binding, // [K] f32
    eps: f32,
    y: &Binding, // [T, N] f32, not sharing a buffer with x
    t: u32,
    args: MatmulArgs,
) -> Result<(), KernelError> {
    matmul_normed_variant(rec, w, x, norm_w, eps, y, t, args, None)
}

/// [`matmul_normed`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_normed_variant(
    rec: &mut StepRecorder,
    w: &GpuTensor,    // [N, K] (gpu::layout)
    x: &Binding,      // [T, K] f32, the raw residual stream
    norm_w: &Binding, // [K] f32
    eps: f32,
    y: &Binding, // [T, N] f32
    t: u32,
    args: MatmulArgs,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    let bias = args.bias.map(Binding::from);
    let norm = Some((norm_w, eps));
    single(rec, w, x, norm, y, t, bias, args, variant)
}

/// Tokens a [`matmul_post_norm_add`] dispatch may hold.
pub const POST_NORM_MAX_T: u32 = 64;
/// Arrival counters at the head of the epilogue scratch (the shader's POST_COUNTERS,
/// prepended from here): one per token of a post-norm product, one per (token, q or k head)
/// of a Q/K/V + RoPE product with the Q/K norm folded in.
pub const EPILOGUE_COUNTERS: u32 = 8192;
/// Words of the epilogue scratch after the counters: the rows of every token.
pub(crate) const EPILOGUE_VALUE_WORDS: u64 = 1 << 20;

/// The scratch of the epilogues whose last workgroup finishes a row or a head (post-norm,
/// Q/K norm): the context's own, shared by every such dispatch (they run one after another).
pub(crate) fn epilogue_scratch(ctx: &GpuContext) -> wgpu::Buffer {
    let words = EPILOGUE_COUNTERS as u64 + EPILOGUE_VALUE_WORDS;
    ctx.shared_scratch("matvec epilogue scratch", 4 * words)
}

/// The residual side of [`matmul_post_norm_add`]: `(post_w[N] f32, eps, y[T, N] f32)`.
#[derive(Clone, Copy)]
pub struct PostNormAdd<'a> {
    pub w: &'a Binding,
    pub eps: f32,
    /// The residual stream, read and written.
    pub residual: &'a Binding,
}

/// The most tokens one [`matmul_post_norm_add`] of `rows` rows holds: its counters, and
/// its scratch's room for the rows.
pub fn post_norm_max_t(rows: u64) -> u32 {
    (EPILOGUE_VALUE_WORDS / rows.max(1)).min(POST_NORM_MAX_T as u64) as u32
}

/// Whether [`matmul_post_norm_add`] runs for `w` and `t` tokens on this device: one part, a
/// matvec shape with the epilogue (subgroups), and the rows of `t` tokens within its scratch.
/// Elsewhere the product and `norm::rms_norm_add` stay two dispatches.
pub fn post_norm_fuses(ctx: &GpuContext, w: &GpuTensor, t: u32) -> bool {
    let key = chosen_key(
        ctx,
        w.ty,
        t,
        w.row_len,
        w.n_rows,
        false,
        false,
        Fusion::PostNorm,
        None,
    );
    w.parts.len() == 1
        && key.variant.has_post_norm()
        && (1..=post_norm_max_t(w.n_rows)).contains(&t)
}

/// Records residual[T, N] += RMSNorm(x[T, K] · w[N, K]ᵀ) ⊙ post.w in one dispatch: gemma's
/// sandwich norms (`post_attention_norm` after W_o, `post_ffw_norm` after W_down) folded into
/// the product that feeds them, where otherwise `norm::rms_norm_add` is a dispatch of its own.
/// The norm needs the whole row, so the last workgroup of each token to finish reads the
/// rows back from a scratch and adds the normed row (see matmul.wgsl's `post_norm_add`).
/// Only where [`post_norm_fuses`] says so; errors elsewhere.
pub fn matmul_post_norm_add(
    rec: &mut StepRecorder,
    w: &GpuTensor, // [N, K] (gpu::layout)
    x: &Binding,   // [T, K] f32
    post: PostNormAdd,
    t: u32,
) -> Result<(), KernelError> {
    matmul_post_norm_add_variant(rec, w, x, post, t, None)
}

/// [`matmul_post_norm_add`] with the kernel shape forced (`Some`) for tests and A/B runs.
pub fn matmul_post_norm_add_variant(
    rec: &mut StepRecorder,
    w: &GpuTensor,
    x: &Binding,
    post: PostNormAdd,
    t: u32,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_post_norm_add";
    let err = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
    check_weight(KERNEL, w, rec.ctx().max_binding_bytes())?;
    let (k, n) = (w.row_len, w.n_rows);
    if w.parts.len() != 1 {
        return err(format!("{} is split into {} parts", w.name, w.parts.len()));
    }
    if !(1..=post_norm_max_t(n)).contains(&t) {
        return err(format!(
            "{t} tokens of {n} rows: at most {} tokens ({EPILOGUE_VALUE_WORDS} values)",
            post_norm_max_t(n)
        ));
    }
    if !post.eps.is_finite() || post.eps < 0.0 {
        return err(format!("eps {} is not a finite value >= 0", post.eps));
    }
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "residual [T, N]", post.residual, t as u64 * n)?;
    check_binding(KERNEL, "post_w [N]", post.w, n)?;
    let key = chosen_key(
        rec.ctx(),
        w.ty,
        t,
        k,
        n,
        false,
        false,
        Fusion::PostNorm,
        variant,
    );
    let rows = n as u32;
    let params = Params {
        k: k as u32,
        t,
        eps: post.eps,
        rows: [rows, 0, 0, 0],
        n: [rows, 0, 0, 0],
        ..Params::default()
    };
    let scratch = epilogue_scratch(rec.ctx());
    let bindings = [
        Binding::from(&w.parts[0].buffer),
        x.clone(),
        post.residual.clone(),
        post.w.clone(),
        Binding::from(&scratch),
    ];
    launch(rec, KERNEL, &key, params, rows, &bindings)
}

/// Records out[T, ffn] = act(x'·w_gateᵀ) ⊙ (x'·w_upᵀ) in one dispatch (per part pair), with
/// x' = x, or x's RMSNorm when `norm` is given. The two weights must have the same type and
/// shape (then they are split alike); check with [`can_fuse_glu`] and keep the unfused
/// matmul, matmul, glu otherwise. With `levels_out` (where [`ffn_levels_fit`]) it also
/// writes out's int8 levels there, for W_down's [`MatmulArgs::x_levels`].
#[allow(clippy::too_many_arguments)]
pub fn matmul_glu(
    rec: &mut StepRecorder,
    w_gate: &GpuTensor, // [ffn, K] (gpu::layout)
    w_up: &GpuTensor,   // [ffn, K] the type of w_gate
    x: &Binding,        // [T, K] f32 (the raw residual with `norm`)
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    out: &Binding,      // [T, ffn] f32, not sharing a buffer with x
    levels_out: Option<&Binding>,
    t: u32,
    act: Activation,
) -> Result<(), KernelError> {
    matmul_glu_variant(rec, w_gate, w_up, x, norm, out, levels_out, t, act, None)
}

/// Whether [`matmul_glu`] can pair these weights: one type, one shape, one split.
pub fn can_fuse_glu(w_gate: &GpuTensor, w_up: &GpuTensor) -> bool {
    w_gate.ty == w_up.ty
        && w_gate.row_len == w_up.row_len
        && w_gate.n_rows == w_up.n_rows
        && w_gate.parts.len() == w_up.parts.len()
        && w_gate
            .parts
            .iter()
            .zip(&w_up.parts)
            .all(|(g, u)| g.first_row == u.first_row && g.n_rows == u.n_rows)
}

/// [`matmul_glu`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_glu_variant(
    rec: &mut StepRecorder,
    w_gate: &GpuTensor, // [ffn, K] (gpu::layout)
    w_up: &GpuTensor,   // [ffn, K] (gpu::layout)
    x: &Binding,        // [T, K] f32
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    out: &Binding,      // [T, ffn] f32
    levels_out: Option<&Binding>,
    t: u32,
    act: Activation,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_glu";
    let max_binding = rec.ctx().max_binding_bytes();
    check_weight(KERNEL, w_gate, max_binding)?;
    check_weight(KERNEL, w_up, max_binding)?;
    if !can_fuse_glu(w_gate, w_up) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!(
                "{} ({}, [{}, {}]) and {} ({}, [{}, {}]) differ in type, shape or split",
                w_gate.name,
                w_gate.ty,
                w_gate.n_rows,
                w_gate.row_len,
                w_up.name,
                w_up.ty,
                w_up.n_rows,
                w_up.row_len
            ),
        });
    }
    if t == 0 {
        return Ok(());
    }
    let (k, ffn) = (w_gate.row_len, w_gate.n_rows);
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "out [T, ffn]", out, t as u64 * ffn)?;
    check_norm(KERNEL, norm, k)?;
    let fusion = Fusion::Glu(act);
    let mut key = chosen_key(
        rec.ctx(),
        w_gate.ty,
        t,
        k,
        2 * ffn,
        false,
        norm.is_some(),
        fusion,
        variant,
    );
    if let Some(levels) = levels_out {
        check_levels(KERNEL, "levels out", levels, t, ffn)?;
        if let Some(part) = w_gate
            .parts
            .iter()
            .find(|p| !p.first_row.is_multiple_of(32))
        {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: format!(
                    "x' levels: a part of {} starts at row {}, not a whole chunk",
                    w_gate.name, part.first_row
                ),
            });
        }
        key = key.with_levels(XLevels::Emit);
    }
    for (pg, pu) in w_gate.parts.iter().zip(&w_up.parts) {
        let rows = pg.n_rows as u32;
        let params = Params {
            k: k as u32,
            t,
            row0: pg.first_row as u32,
            eps: norm.map_or(0.0, |n| n.1),
            rows: [rows, rows, 0, 0],
            n: [ffn as u32, ffn as u32, 0, 0],
            ..Params::default()
        };
        let mut bindings = vec![
            Binding::from(&pg.buffer),
            Binding::from(&pu.buffer),
            x.clone(),
            out.clone(),
        ];
        bindings.extend(norm.map(|n| n.0.clone()));
        bindings.extend(levels_out.cloned());
        launch(rec, KERNEL, &key, params, 2 * rows, &bindings)?;
    }
    Ok(())
}

/// Q/K/V biases: `(bq [Nq], bk [Nk], bv [Nv])`, f32.
pub type QkvBiases<'a> = (&'a Binding, &'a Binding, &'a Binding);

/// Records q, k, v = x'·w_qᵀ, x'·w_kᵀ, x'·w_vᵀ (+ biases), with x' = x or x's RMSNorm, in
/// ONE dispatch whose workgroups cover the three weights' rows end to end. Falls back to
/// three dispatches (one per weight, each still normed) when the weights differ in type
/// (e.g. Gemma's Q4_K/Q5_0 mixes), when one is split into parts, or when the 7–11 storage
/// bindings exceed the device's per-stage limit.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv(
    rec: &mut StepRecorder,
    wq: &GpuTensor,     // [Nq, K] (gpu::layout)
    wk: &GpuTensor,     // [Nk, K] (gpu::layout)
    wv: &GpuTensor,     // [Nv, K] (gpu::layout)
    x: &Binding,        // [T, K] f32 (the raw residual with `norm`)
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    q: &Binding,        // [T, Nq] f32
    k: &Binding,        // [T, Nk] f32
    v: &Binding,        // [T, Nv] f32
    t: u32,
    biases: Option<QkvBiases>,
) -> Result<(), KernelError> {
    matmul_qkv_variant(rec, wq, wk, wv, x, norm, q, k, v, t, biases, None)
}

/// Whether [`matmul_qkv`] runs as one dispatch for these weights on this device
/// (`model::Plan` asks this once per layer; the forward then calls [`matmul_qkv`] or three
/// products, so the fallback inside [`matmul_qkv`] is never what decides a model's steps).
pub fn qkv_fuses(
    ctx: &GpuContext,
    wq: &GpuTensor,
    wk: &GpuTensor,
    wv: &GpuTensor,
    norm: bool,
    biases: bool,
) -> bool {
    let key = MatmulKey {
        ty: wq.ty,
        variant: MatmulVariant::MatvecWorkgroup,
        bias: biases,
        norm,
        fusion: Fusion::Qkv,
        stage_k: 0,
        splits: 1,
        levels: XLevels::Staged,
        x16: false,
        sg64: false,
        vec_stage: false,
        coop8: false,
        tokens_first: false,
        wide_f16: false,
    };
    qkv_key_fits(ctx, &key, [wq, wk, wv])
}

/// Whether one dispatch of `key` can read these three weights: one type, one part each, and
/// the key's storage bindings within the device's per-stage limit.
pub(super) fn qkv_key_fits(ctx: &GpuContext, key: &MatmulKey, w: [&GpuTensor; 3]) -> bool {
    let limit = ctx.limits.max_storage_buffers_per_shader_stage;
    w.iter().all(|w| w.ty == key.ty && w.parts.len() == 1) && key.layout().count <= limit
}

/// [`matmul_qkv`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv_variant(
    rec: &mut StepRecorder,
    wq: &GpuTensor,     // [Nq, K] (gpu::layout)
    wk: &GpuTensor,     // [Nk, K] (gpu::layout)
    wv: &GpuTensor,     // [Nv, K] (gpu::layout)
    x: &Binding,        // [T, K] f32
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    q: &Binding,        // [T, Nq] f32
    k: &Binding,        // [T, Nk] f32
    v: &Binding,        // [T, Nv] f32
    t: u32,
    biases: Option<QkvBiases>,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_qkv";
    let max_binding = rec.ctx().max_binding_bytes();
    let weights = [wq, wk, wv];
    for w in weights {
        check_weight(KERNEL, w, max_binding)?;
    }
    let kdim = wq.row_len;
    if let Some(w) = weights.iter().find(|w| w.row_len != kdim) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!(
                "{} has rows of {}, {} of {}: one x cannot feed both",
                w.name, w.row_len, wq.name, kdim
            ),
        });
    }
    let outputs = [q, k, v];
    let bias = biases.map(|(bq, bk, bv)| [bq, bk, bv]);
    if !qkv_fuses(rec.ctx(), wq, wk, wv, norm.is_some(), bias.is_some()) {
        for i in 0..3 {
            let b = bias.map(|b| b[i].clone());
            single(
                rec,
                weights[i],
                x,
                norm,
                outputs[i],
                t,
                b,
                MatmulArgs::default(),
                variant,
            )?;
        }
        return Ok(());
    }
    if t == 0 {
        return Ok(());
    }
    check_binding(KERNEL, "x [T, K]", x, t as u64 * kdim)?;
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let n = weights[i].n_rows;
        check_binding(KERNEL, &format!("{name} [T, N]"), outputs[i], t as u64 * n)?;
        if let Some(b) = &bias {
            check_binding(KERNEL, &format!("b{name} [N]"), b[i], n)?;
        }
    }
    check_norm(KERNEL, norm, kdim)?;
    let slots = wq.n_rows + wk.n_rows + wv.n_rows;
    if slots > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{slots} rows in all exceed u32"),
        });
    }
    let (has_bias, has_norm) = (bias.is_some(), norm.is_some());
    let key = chosen_key(
        rec.ctx(),
        wq.ty,
        t,
        kdim,
        slots,
        has_bias,
        has_norm,
        Fusion::Qkv,
        variant,
    );
    let rows = [wq.n_rows as u32, wk.n_rows as u32, wv.n_rows as u32, 0];
    let params = Params {
        k: kdim as u32,
        t,
        eps: norm.map_or(0.0, |n| n.1),
        rows,
        n: rows,
        ..Params::default()
    };
    let mut bindings: Vec<Binding> = weights
        .iter()
        .map(|w| Binding::from(&w.parts[0].buffer))
        .collect();
    bindings.push(x.clone());
    bindings.extend(outputs.iter().map(|o| (*o).clone()));
    bindings.extend(norm.map(|n| n.0.clone()));
    if let Some(b) = bias {
        bindings.extend(b.iter().map(|b| (*b).clone()));
    }
    launch(rec, KERNEL, &key, params, slots as u32, &bindings)
}

/// The key a product of `fusion` over a `ty` weight with rows of `k` runs with for a step of
/// `t` tokens on this device, unless `variant` forces one: the one rule every launcher here
/// and `model::Plan` (through [`planned_labels`]) follow. The matvec or the tiles by `t`
/// ([`matvec_max_t`]), then the chunk matvec only where K pays ([`MatmulKey::sized`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn chosen_key(
    ctx: &GpuContext,
    ty: crate::gguf::GgmlType,
    t: u32,
    k: u64,
    slots: u64,
    bias: bool,
    norm: bool,
    fusion: Fusion,
    variant: Option<MatmulVariant>,
) -> MatmulKey {
    MatmulKey {
        norm,
        fusion,
        ..MatmulKey::choose(DeviceKernels::of(ctx), ty, t, bias, variant)
    }
    .sized(k, slots, t, ctx.gemm, variant.is_some())
}

/// The pipeline label one dispatch of such a product records (its x' staging included, as
/// `launch` sets it), after the scale pass a tensor-core product records before it: what
/// `model::Plan` predicts a step's labels with, per part of the weight.
#[allow(clippy::too_many_arguments)] // the product spelled out, as chosen_key takes it
pub fn planned_labels(
    ctx: &GpuContext,
    ty: crate::gguf::GgmlType,
    t: u32,
    k: u64,
    slots: u64,
    bias: bool,
    norm: bool,
    fusion: Fusion,
    levels: XLevels,
) -> Vec<String> {
    let key = chosen_key(ctx, ty, t, k, slots, bias, norm, fusion, None)
        .with_levels(levels)
        .staged(k as u32, ctx.limits.max_compute_workgroup_storage_size);
    let scale = key
        .has_token_scales()
        .then(|| token_scale::scale_pass(&key).0.to_string());
    let merge = key.split_pass().then(|| split_merge_label(&key));
    scale
        .into_iter()
        .chain([key.label()])
        .chain(merge)
        .collect()
}

/// The label of the split-K merge after `key`'s product ([`MatmulKey::split_pass`]).
fn split_merge_label(key: &MatmulKey) -> String {
    format!("{}_merge", key.label())
}

/// The unfused (optionally normed) product, one dispatch per part of `w`; `args` is the
/// store's epilogue (accumulate, scale, soft-cap: [`MatmulArgs`]).
#[allow(clippy::too_many_arguments)]
fn single(
    rec: &mut StepRecorder,
    w: &GpuTensor,
    x: &Binding,
    norm: Option<Norm>,
    y: &Binding,
    t: u32,
    bias: Option<Binding>,
    args: MatmulArgs,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul";
    let capped = args.softcap.is_some();
    let softcap = args.softcap.unwrap_or(0.0);
    if capped && (args.accumulate || !(softcap.is_finite() && softcap > 0.0)) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("softcap {softcap} must be finite and positive, and not with accumulate"),
        });
    }
    check_weight(KERNEL, w, rec.ctx().max_binding_bytes())?;
    if t == 0 {
        return Ok(());
    }
    let (k, n) = (w.row_len, w.n_rows);
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "y [T, N]", y, t as u64 * n)?;
    if let Some(b) = &bias {
        check_binding(KERNEL, "bias [N]", b, n)?;
    }
    check_norm(KERNEL, norm, k)?;
    let mut key = chosen_key(
        rec.ctx(),
        w.ty,
        t,
        k,
        n,
        bias.is_some(),
        norm.is_some(),
        Fusion::None,
        variant,
    );
    if let Some(levels) = args.x_levels {
        check_levels(KERNEL, "x levels", levels, t, k)?;
        key = key.with_levels(XLevels::Read);
    }
    for part in &w.parts {
        let rows = part.n_rows as u32;
        let params = Params {
            k: k as u32,
            t,
            row0: part.first_row as u32,
            accumulate: args.accumulate as u32,
            scale: args.scale,
            eps: norm.map_or(0.0, |n| n.1),
            softcap,
            rows: [rows, 0, 0, 0],
            n: [n as u32, 0, 0, 0],
            ..Params::default()
        };
        // The levels, where read, take x's binding.
        let x = args.x_levels.unwrap_or(x).clone();
        let mut bindings = vec![Binding::from(&part.buffer), x, y.clone()];
        bindings.extend(norm.map(|n| n.0.clone()));
        bindings.extend(bias.clone());
        launch(rec, KERNEL, &key, params, rows, &bindings)?;
    }
    Ok(())
}

/// Errors unless the folded norm's weight holds K values and its eps is usable.
pub(super) fn check_norm(
    kernel: &'static str,
    norm: Option<Norm>,
    k: u64,
) -> Result<(), KernelError> {
    let Some((norm_w, eps)) = norm else {
        return Ok(());
    };
    if !eps.is_finite() || eps < 0.0 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("eps {eps} is not a finite value >= 0"),
        });
    }
    check_binding(kernel, "norm_w [K]", norm_w, k)
}

/// Dispatches `key` over `slots` weight rows for `params.t` tokens (`params.groups` is filled
/// in here), with `bindings` in the key's layout order.
pub(super) fn launch(
    rec: &mut StepRecorder,
    kernel: &'static str,
    key: &MatmulKey,
    mut params: Params,
    slots: u32,
    bindings: &[Binding],
) -> Result<(), KernelError> {
    let err = |why: String| Err(KernelError::Shape { kernel, why });
    let ctx = rec.ctx();
    if matches!(
        key.variant,
        MatmulVariant::MatvecSubgroup
            | MatmulVariant::MatvecChunk
            | MatmulVariant::MatvecChunkWide(_)
    ) && !ctx.has_subgroups()
    {
        return err("the subgroup matvec needs Features::SUBGROUP, which this device lacks".into());
    }
    if key.variant.is_coop() && !ctx.has_coop_gemm() {
        return err(
            "the cooperative-matrix GEMM needs wgpu's experimental cooperative \
                    matrices (16x16x16 f16 -> f32), which this device lacks"
                .into(),
        );
    }
    if matches!(key.variant, MatmulVariant::Wide(w) if w.half) && !ctx.has_f16() {
        return err("the f16 wide tiles need Features::SHADER_F16, which this device lacks".into());
    }
    if key.variant == (MatmulVariant::MatrixI8 { emulated: false }) && !ctx.subgroup_matrix_i8 {
        return err(
            "the int8 subgroup-matrix GEMM needs Chromium's chromium-experimental-subgroup-matrix \
             (16x16x32 i8 -> i32 on subgroups of 32), which this device lacks"
                .into(),
        );
    }
    if key.variant == MatmulVariant::Dot4I8 && !crate::gpu::packed_4x8_dot() {
        return err(
            "the int8 dot-product tiles need WGSL's packed_4x8_integer_dot_product, which this \
             browser's WGSL lacks"
                .into(),
        );
    }
    if matches!(key.variant, MatmulVariant::CoopStream(_))
        && !ctx.features.contains(wgpu::Features::SUBGROUP_BARRIER)
    {
        return err(
            "the short-step tensor-core tiles (COCO_COOP_STREAM=1) need \
             Features::SUBGROUP_BARRIER, which this device lacks"
                .into(),
        );
    }
    let workgroup_bytes = ctx.limits.max_compute_workgroup_storage_size;
    if let Some(needed) = key
        .prestage_workgroup_bytes()
        .filter(|&n| n > workgroup_bytes)
    {
        return err(format!(
            "{}: the prestaged, double-buffered tiles need {} KiB of workgroup \
             memory; this device has {} KiB",
            key.label(),
            needed / 1024,
            workgroup_bytes / 1024
        ));
    }
    let layout = key.layout();
    // The split scratch is the context's own (appended below).
    debug_assert_eq!(
        layout.count as usize,
        bindings.len() + (key.splits > 1) as usize + key.has_token_scales() as usize,
        "{}",
        key.label()
    );
    let limit = ctx.limits.max_storage_buffers_per_shader_stage;
    if layout.count > limit {
        return err(format!(
            "{} storage bindings exceed this device's per-stage limit of {limit}",
            layout.count
        ));
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    let t = params.t;
    let t_groups = match key.variant {
        v if v.is_tiled() => t.div_ceil(v.tile_tokens()),
        _ => t, // one token per z slice
    };
    if t_groups > max {
        return err(format!(
            "{t} tokens need {t_groups} workgroups along z, over the limit {max}"
        ));
    }
    let caller_layout = layout;
    let work = product_work(
        key,
        &params,
        slots,
        &bindings[..caller_layout.x as usize - 1],
    );
    let key = &key.staged(params.k, ctx.limits.max_compute_workgroup_storage_size);
    // Cached by the key: the label and the source (whose defines may refuse the variant) are
    // only built on a miss (this runs for every dispatch of every step).
    let make = || Ok::<_, KernelError>((key.label(), key.source()?));
    // With SPLIT_PASS the product leaves y and the scales to its merge, which is bound alike
    // (every kernel's layout is the one its source declares).
    let pipeline = ctx.keyed_pipeline(key, make)?;
    let label = &pipeline.label;
    params.groups = slots.div_ceil(key.variant.slots_per_group()) * key.splits;
    params.splits = key.splits;
    let mut bindings = bindings.to_vec();
    // The tensor-core and f16 wide tiles' per-token scales (and with X16 their f16 x', which
    // takes x's binding, norm_w's gone: the pass applied it), recorded first; bound last.
    let scales = if key.has_token_scales() {
        let x = &bindings[caller_layout.x as usize - 1];
        let norm_w = key.norm.then(|| &bindings[caller_layout.norm as usize - 1]);
        let (scales, x16) = record_token_scales(rec, key, &params, x, norm_w)?;
        if let Some(x16) = x16 {
            if key.norm {
                bindings.remove(caller_layout.norm as usize - 1);
            }
            bindings[caller_layout.x as usize - 1] = x16;
        }
        Some(scales)
    } else {
        None
    };
    if key.splits > 1 {
        let scratch = if key.variant.is_tiled() {
            // One size per device, whichever tiles ask first.
            let words = if ctx.has_coop_gemm() {
                COOP128_SPLIT_WORDS
            } else {
                TILE_SPLIT_WORDS
            };
            ctx.shared_scratch("tile split-K scratch", 4 * (SPLIT_COUNTERS + words))
        } else {
            ctx.shared_scratch(
                "matvec split-K scratch",
                4 * (SPLIT_COUNTERS + SPLIT_RECORD_WORDS),
            )
        };
        bindings.push(Binding::from(&scratch));
    }
    bindings.extend(scales);
    debug_assert_eq!(key.layout().count as usize, bindings.len(), "{label}");
    let [gx, gy] = fold(params.groups, max);
    rec.dispatch_counted(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        [gx, gy, t_groups],
        Some(work),
    )?;
    if key.split_pass() {
        record_split_merge(rec, key, &params, &bindings, t_groups)?;
    }
    Ok(())
}

/// The dispatch after a tensor-core product that split K with `SPLIT_PASS`: adds each
/// output's records (shaders/matmul/split_merge.wgsl, `MERGE_PASS`), bound as the product was.
fn record_split_merge(
    rec: &mut StepRecorder,
    key: &MatmulKey,
    params: &Params,
    bindings: &[Binding],
    t_groups: u32,
) -> Result<(), KernelError> {
    /// The merge of `0`'s splits (its own cache key: another source of the same layout).
    #[derive(Clone, Hash, PartialEq, Eq)]
    struct SplitMerge(MatmulKey);
    // A thread per slot (with GLU a gate and up pair) and 4 tokens (split_merge.wgsl
    // MERGE_TOKENS): the 128-slot tiles' 256 threads take 8 tokens, or with GLU 16.
    let (tile_n, tile_t) = (key.variant.slots_per_group(), key.variant.tile_tokens());
    let threads_per_token = if matches!(key.fusion, Fusion::Glu(_)) {
        tile_n / 2
    } else {
        tile_n
    };
    let merge_tokens = 256 / threads_per_token * 4;
    let ctx = rec.ctx();
    let merge = ctx.keyed_pipeline(&SplitMerge(*key), || {
        let mut defines = key.defines()?;
        defines.push("MERGE_PASS");
        Ok::<_, KernelError>((split_merge_label(key), key.source_for(defines)?))
    })?;
    let tiles = (params.groups / params.splits) * t_groups;
    let workgroups = tiles * (tile_t / merge_tokens);
    let [gx, gy] = fold(workgroups, ctx.limits.max_compute_workgroups_per_dimension);
    // Each record read once, each output written once.
    let record = tile_n as u64 * tile_t as u64;
    let records = tiles as u64 * params.splits as u64 * record;
    let work = Work {
        bytes: 4 * records + 4 * tiles as u64 * record,
        flops: records,
    };
    rec.dispatch_counted(
        &merge,
        bytemuck::bytes_of(params),
        bindings,
        [gx, gy, 1],
        Some(work),
    )?;
    Ok(())
}

/// What a product over `slots` weight rows of K = `params.k` does for `params.t` tokens: its
/// `weights` (the bindings before x) read once, x' once (f32, or the int8 levels its producer
/// wrote), each output once; two operations per weight and token.
fn product_work(key: &MatmulKey, params: &Params, slots: u32, weights: &[Binding]) -> Work {
    let (t, k, slots) = (params.t as u64, params.k as u64, slots as u64);
    let x = match key.levels {
        XLevels::Read => t * (k / 32) * LEVELS_CHUNK_BYTES,
        XLevels::Staged | XLevels::Emit => 4 * t * k,
    };
    let outputs = match key.fusion {
        Fusion::Glu(_) => slots / 2, // gate and up rows make one output
        _ => slots,
    };
    Work {
        bytes: weights.iter().map(binding_bytes).sum::<u64>() + x + 4 * t * outputs,
        flops: 2 * t * k * slots,
    }
}
