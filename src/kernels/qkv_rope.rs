//! Q/K/V projections with RoPE and the KV-cache write folded in (`ROPE_KV` in
//! `shaders/matmul.wgsl`): one dispatch per layer where the fused pipeline otherwise runs
//! [`matmul_qkv`](super::matmul::matmul_qkv) and then
//! [`rope_kv_write`](super::rope::rope_kv_write), two dependent dispatches (~5 µs each on
//! the H200 by `coco bench --probe`).
//!
//! The matvec's epilogue already holds every slot's finished dot product in workgroup
//! memory, so a slot reads the other half of its rotated pair from there and writes the
//! rotated value: q into its buffer, k and v straight into the cache rows `pos0 + t`. Both
//! halves of a pair must share a workgroup: llama GGUFs pair adjacent rows `(2i, 2i + 1)`
//! already, and for NeoX pairs `(i, i + head_dim/2)` the kernel computes W_q's and W_k's
//! rows in pair order instead of row order (`slot_row` in the shader).
//!
//! Only the matvec shapes have this epilogue: decode steps of at most `MATVEC_MAX_T` tokens,
//! and every step on a CPU adapter, whose prefill runs the matvec too. A GPU's prefill chunk
//! keeps the extra dispatch, which costs nothing next to its GEMMs.
//!
//! gemma3's and qwen3's per-head Q/K RMSNorm needs a whole head's sums, which several
//! workgroups compute: with [`QkNorm`] given, each workgroup records its q and k values and
//! the last to finish a head norms and rotates it (`shaders/matmul/qk_norm.wgsl`), where
//! otherwise `rope_kv_write` with the norm is a dispatch of its own.

use super::matmul::{
    check_binding, check_norm, check_weight, chosen_key, epilogue_scratch, launch, qkv_key_fits,
    Fusion, MatmulKey, MatmulVariant, Norm, Params, QkvBiases, XLevels, EPILOGUE_COUNTERS,
    EPILOGUE_VALUE_WORDS,
};
use super::rope::{
    check_rotary, check_shape, QkNorm, RopeKvShape, RopeLayout, QK_NORM_MAX_HEAD_DIM,
};
use super::KernelError;
use crate::gpu::{Binding, GpuContext, GpuTensor, StepRecorder};

/// The key [`matmul_qkv_rope_kv`] would run with (`v_fused`: V among its rows).
#[allow(clippy::too_many_arguments)]
fn key(
    ctx: &GpuContext,
    wq: &GpuTensor,
    norm: bool,
    biases: bool,
    qk_norm: bool,
    v_fused: bool,
    shape: &RopeKvShape,
    variant: Option<MatmulVariant>,
) -> MatmulKey {
    let fusion = Fusion::QkvRope {
        layout: shape.rotary.layout,
        qk_norm,
    };
    let kv_parts = if v_fused { 2 } else { 1 };
    let slots = (shape.heads as u64 + kv_parts * shape.kv_heads as u64) * shape.head_dim as u64;
    chosen_key(
        ctx, wq.ty, shape.t, wq.row_len, slots, biases, norm, fusion, variant,
    )
}

/// Whether [`matmul_qkv_rope_kv`] runs for these weights and this step on this device: one
/// type and one part per weight, a matvec step (`t` small enough), with `qk_norm` a head
/// within [`QK_NORM_MAX_HEAD_DIM`] and the step's heads within the scratch
/// ([`qk_norm_max_t`]), and its storage bindings (up to 15) within the device's per-stage
/// limit (WebGPU's default 8 allows llama without the norm folded in only, so a browser
/// with the default keeps two dispatches). `wv` `None`: V is left to a product of its own
/// ([`matmul_qkv_rope_kv`]).
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_fuses(
    rec: &StepRecorder,
    wq: &GpuTensor,
    wk: &GpuTensor,
    wv: Option<&GpuTensor>,
    norm: bool,
    biases: bool,
    qk_norm: bool,
    shape: &RopeKvShape,
) -> bool {
    let key = key(
        rec.ctx(),
        wq,
        norm,
        biases,
        qk_norm,
        wv.is_some(),
        shape,
        None,
    );
    !key.variant.is_tiled()
        && qkv_key_fits(rec.ctx(), &key, [wq, wk, wv.unwrap_or(wk)])
        && (!qk_norm
            || (shape.head_dim <= QK_NORM_MAX_HEAD_DIM
                && shape.t <= qk_norm_max_t(shape.heads, shape.kv_heads, shape.head_dim)))
}

/// The most tokens one [`matmul_qkv_rope_kv`] with the Q/K norm holds: a counter per q and k
/// head of each token, and their rows, within the epilogue scratch.
pub fn qk_norm_max_t(heads: u32, kv_heads: u32, head_dim: u32) -> u32 {
    let heads = (heads as u64 + kv_heads as u64).max(1);
    let by_counters = EPILOGUE_COUNTERS as u64 / heads;
    let by_values = EPILOGUE_VALUE_WORDS / (heads * head_dim.max(1) as u64);
    by_counters.min(by_values).min(u32::MAX as u64) as u32
}

/// Whether these weights could take the fused form on this device in a matvec step: the
/// binding and type half of [`qkv_rope_fuses`], without the step's token count. Which steps
/// are matvec steps is [`matvec_max_t`](super::matmul::matvec_max_t)'s rule (`model::Plan` holds both).
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_fits(
    ctx: &GpuContext,
    wq: &GpuTensor,
    wk: &GpuTensor,
    wv: Option<&GpuTensor>,
    norm: bool,
    biases: bool,
    qk_norm: bool,
    layout: RopeLayout,
) -> bool {
    let key = MatmulKey {
        ty: wq.ty,
        variant: MatmulVariant::MatvecWorkgroup,
        bias: biases,
        norm,
        fusion: Fusion::QkvRope { layout, qk_norm },
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
    qkv_key_fits(ctx, &key, [wq, wk, wv.unwrap_or(wk)])
}

/// Whether V's product can write the V-cache rows of any step straight from the position
/// (a storage binding at row `pos0`: a row of `kv_dim` floats a multiple of the device's
/// storage offset alignment), which leaving V out of [`matmul_qkv_rope_kv`] needs.
pub fn v_rows_bindable(ctx: &GpuContext, kv_dim: u64) -> bool {
    (kv_dim * 4).is_multiple_of(ctx.limits.min_storage_buffer_offset_alignment as u64)
}

/// Records, in one dispatch, for the step's tokens `t` at positions `pos0 + t`:
/// q = RoPE(x'·w_qᵀ + bq) into `q`, RoPE(x'·w_kᵀ + bk) into `k_cache` row `pos0 + t` and
/// x'·w_vᵀ + bv into `v_cache` row `pos0 + t`, with x' = x or x's RMSNorm; with `qk_norm`,
/// each head of q and k RMS-normed (gemma3, qwen3) before its rotation. The same result as
/// `matmul_qkv` then `rope_kv_write`. Check [`qkv_rope_fuses`] first.
///
/// `wv` `None` leaves V out (the kernel's V part has no rows, and `v_cache` and bv are bound
/// but untouched): for a W_v of another type than W_q's and W_k's (llama.cpp's Q4_K_M keeps
/// some layers' W_v at Q8_0 or Q6_K), whose product then writes the V-cache rows itself.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv_rope_kv(
    rec: &mut StepRecorder,
    wq: &GpuTensor,         // [heads · head_dim, K] (gpu::layout)
    wk: &GpuTensor,         // [kv_heads · head_dim, K] (gpu::layout)
    wv: Option<&GpuTensor>, // [kv_heads · head_dim, K] (gpu::layout), or None (above)
    x: &Binding,            // [T, K] f32 (the raw residual with `norm`)
    norm: Option<Norm>,     // (norm_w [K] f32, eps)
    q: &Binding,            // [T, heads, head_dim] f32, written rotated
    k_cache: &Binding,      // [ctx, kv_heads, head_dim] f32
    v_cache: &Binding,      // [ctx, kv_heads, head_dim] f32
    inv_freq: &Binding,     // [head_dim / 2] f32
    biases: Option<QkvBiases>,
    qk_norm: Option<QkNorm>, // (q_norm_w [head_dim], k_norm_w [head_dim], eps)
    shape: &RopeKvShape,
) -> Result<(), KernelError> {
    matmul_qkv_rope_kv_variant(
        rec, wq, wk, wv, x, norm, q, k_cache, v_cache, inv_freq, biases, qk_norm, shape, None,
    )
}

/// [`matmul_qkv_rope_kv`] with the matvec shape forced (`Some`) for tests.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv_rope_kv_variant(
    rec: &mut StepRecorder,
    wq: &GpuTensor,
    wk: &GpuTensor,
    wv: Option<&GpuTensor>,
    x: &Binding,
    norm: Option<Norm>,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    inv_freq: &Binding,
    biases: Option<QkvBiases>,
    qk_norm: Option<QkNorm>,
    shape: &RopeKvShape,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_qkv_rope_kv";
    let err = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
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
    let max_binding = rec.ctx().max_binding_bytes();
    // Without V, W_k stands in for W_v's binding (read-only, never read: no V rows).
    let weights = [wq, wk, wv.unwrap_or(wk)];
    for w in weights {
        check_weight(KERNEL, w, max_binding)?;
    }
    let kdim = wq.row_len;
    let (nq, nkv) = (
        heads as u64 * head_dim as u64,
        kv_heads as u64 * head_dim as u64,
    );
    let nv = if wv.is_some() { nkv } else { 0 };
    if wq.n_rows != nq || weights[1..].iter().any(|w| w.n_rows != nkv) {
        return err(format!(
            "rows {}/{}/{} of {}/{}/{} are not {heads}/{kv_heads}/{kv_heads} heads of {head_dim}",
            wq.n_rows, wk.n_rows, weights[2].n_rows, wq.name, wk.name, weights[2].name
        ));
    }
    let key = key(
        rec.ctx(),
        wq,
        norm.is_some(),
        biases.is_some(),
        qk_norm.is_some(),
        wv.is_some(),
        shape,
        variant,
    );
    if weights.iter().any(|w| w.row_len != kdim) || !qkv_key_fits(rec.ctx(), &key, weights) {
        return err(format!(
            "{}, {} and {} differ in type or row length, are split into parts, or need more \
             storage bindings than this device allows",
            wq.name, wk.name, weights[2].name
        ));
    }
    if key.variant.is_tiled() {
        return err(format!(
            "{t} tokens take the tiled kernel, which has no RoPE epilogue"
        ));
    }
    if t == 0 {
        return Ok(());
    }
    check_binding(KERNEL, "x [T, K]", x, t as u64 * kdim)?;
    check_binding(KERNEL, "q [T, heads, head_dim]", q, t as u64 * nq)?;
    let rows_written = (pos0 as u64 + t as u64) * nkv;
    check_binding(
        KERNEL,
        "k_cache [ctx, kv_heads, head_dim]",
        k_cache,
        rows_written,
    )?;
    check_binding(
        KERNEL,
        "v_cache [ctx, kv_heads, head_dim]",
        v_cache,
        rows_written,
    )?;
    check_binding(
        KERNEL,
        "inv_freq [head_dim / 2]",
        inv_freq,
        head_dim as u64 / 2,
    )?;
    let bias = biases.map(|(bq, bk, bv)| [bq, bk, bv]);
    if let Some(b) = &bias {
        for (i, name) in ["bq", "bk", "bv"].into_iter().enumerate() {
            check_binding(KERNEL, name, b[i], [nq, nkv, nv][i])?;
        }
    }
    check_norm(KERNEL, norm, kdim)?;
    if let Some(qn) = &qk_norm {
        if head_dim > QK_NORM_MAX_HEAD_DIM {
            return err(format!(
                "head_dim {head_dim} over {QK_NORM_MAX_HEAD_DIM}, the most one workgroup's pairs \
                 cover with the Q/K norm folded in"
            ));
        }
        let max_t = qk_norm_max_t(heads, kv_heads, head_dim);
        if t > max_t {
            return err(format!(
                "{t} tokens of {heads} + {kv_heads} heads: at most {max_t} with the Q/K norm \
                 folded in (its scratch)"
            ));
        }
        if !qn.eps.is_finite() || qn.eps < 0.0 {
            return err(format!("eps {} is not a finite value >= 0", qn.eps));
        }
        check_binding(KERNEL, "q_norm_w [head_dim]", qn.q, head_dim as u64)?;
        check_binding(KERNEL, "k_norm_w [head_dim]", qn.k, head_dim as u64)?;
    }
    let slots = nq + nkv + nv;
    if slots > u32::MAX as u64 || rows_written > u32::MAX as u64 {
        return err(format!(
            "{slots} rows or {rows_written} cache elements exceed u32"
        ));
    }
    let rows = [nq as u32, nkv as u32, nv as u32, 0];
    let n = [nq as u32, nkv as u32, nkv as u32, 0];
    let params = Params {
        k: kdim as u32,
        t,
        eps: norm.map_or(0.0, |n| n.1),
        pos0,
        rows,
        n,
        head_dim,
        rot_half: rotary.dims / 2,
        rot_scale: rotary.scale,
        qk_eps: qk_norm.map_or(0.0, |n| n.eps),
        ..Params::default()
    };
    let mut bindings: Vec<Binding> = weights
        .iter()
        .map(|w| Binding::from(&w.parts[0].buffer))
        .collect();
    bindings.extend([x, q, k_cache, v_cache].map(Binding::clone));
    bindings.extend(norm.map(|n| n.0.clone()));
    if let Some(b) = bias {
        bindings.extend(b.map(Binding::clone));
    }
    bindings.push(inv_freq.clone());
    if let Some(qn) = qk_norm {
        bindings.extend([
            qn.q.clone(),
            qn.k.clone(),
            Binding::from(&epilogue_scratch(rec.ctx())),
        ]);
    }
    launch(rec, KERNEL, &key, params, slots as u32, &bindings)
}
