//! Model descriptions: typed configs per architecture, the GPU weights, and one readable
//! forward pass per architecture family (`llama.rs` also serves qwen2; `gemma3.rs`).
//! Each forward lists its kernel calls in model order and writes into buffers that the
//! session preallocated.

pub mod config;
mod gemma3;
mod llama;
pub mod state;
pub mod weights;

pub use config::{Activation, Arch, Config, ConfigError, RopeScaling, RopeStyle};
pub use weights::{LayerWeights, Weights};

use crate::gpu::{Binding, StepRecorder};
use crate::kernels::attention::{attention, kv_write, AttentionShape};
use crate::kernels::elementwise;
use crate::kernels::matmul::{
    can_fuse_glu, matmul, matmul_glu, matmul_normed, matmul_qkv, MatmulArgs,
};
use crate::kernels::megakernel::{can_use_megakernel, ffn_megakernel, PostNorm};
use crate::kernels::norm::{rms_norm, rms_norm_in_place};
use crate::kernels::qkv_rope::{matmul_qkv_rope_kv, qkv_rope_fuses};
use crate::kernels::rope::{
    rope, rope_kv_write, QkNorm, RopeKvShape, RopeLayout, QK_NORM_MAX_HEAD_DIM,
};
use crate::kernels::KernelError;
pub use state::{
    rows_of, KvCache, LogitsFor, Model, Scratch, LOGITS_ROWS, MAX_STEPS, PREFILL_CHUNK,
};

/// How a step is cut into dispatches. Both compute the same thing; tests check they agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipeline {
    /// RMSNorm folded into the matmuls that consume it, Q/K/V in one dispatch, gate/up and
    /// the activation in one dispatch. The default.
    Fused,
    /// One kernel per operation (`--unfused`): the A/B baseline.
    Unfused,
}

/// Records one step: `t` tokens (already in `s.ids`) at positions `pos0..pos0 + t`.
/// `megakernel`: each block's FFN half as the one-workgroup-per-token megakernel (off by
/// default; see `kernels::megakernel`) instead of `pipeline`'s FFN dispatches.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    rec: &mut StepRecorder,
    model: &Model,
    kv: &KvCache,
    s: &Scratch,
    t: u32,
    pos0: u32,
    logits_for: LogitsFor,
    pipeline: Pipeline,
    megakernel: bool,
) -> Result<(), KernelError> {
    let step = Step {
        model,
        kv,
        s,
        t,
        pos0,
        pipeline,
        megakernel,
    };
    match model.config.arch {
        Arch::Llama | Arch::Qwen2 => llama::forward(rec, &step, logits_for),
        Arch::Gemma3 => gemma3::forward(rec, &step, logits_for),
    }
}

/// Records only the FFN half of block `l` (reading and updating `s.x`): what
/// `Session::set_megakernel` runs through both paths to compare them.
pub(crate) fn ffn(rec: &mut StepRecorder, step: &Step, l: usize) -> Result<(), KernelError> {
    match step.model.config.arch {
        Arch::Llama | Arch::Qwen2 => llama::ffn(rec, step, l),
        Arch::Gemma3 => gemma3::ffn(rec, step, l),
    }
}

/// Whether every layer's FFN can run as the megakernel on this device; `Err` names the first
/// layer that can't, and why.
pub fn megakernel_support(model: &Model, ctx: &crate::gpu::GpuContext) -> Result<(), String> {
    for (l, lw) in model.weights.layers.iter().enumerate() {
        let post_norm = lw.post_ffn_norm.is_some();
        can_use_megakernel(ctx, &lw.w_gate, &lw.w_up, &lw.w_down, post_norm)
            .map_err(|why| format!("layer {l}: {why}"))?;
    }
    Ok(())
}

/// What every block of a step needs: the model, its cache and scratch, the token range.
pub(crate) struct Step<'a> {
    pub model: &'a Model,
    pub kv: &'a KvCache,
    pub s: &'a Scratch,
    pub t: u32,
    pub pos0: u32,
    pub pipeline: Pipeline,
    /// The FFN half of each block as one megakernel dispatch (see [`megakernel_ffn`]).
    pub megakernel: bool,
}

/// `out = act(norm(x)·W_gateᵀ) ⊙ norm(x)·W_upᵀ` for the FFN: one dispatch when fused.
pub(crate) fn gated_ffn(rec: &mut StepRecorder, step: &Step, l: usize) -> Result<(), KernelError> {
    let (c, s, t) = (&step.model.config, step.s, step.t);
    let lw = &step.model.weights.layers[l];
    let (x, act) = (Binding::from(&s.x), Binding::from(&s.act));
    if step.pipeline == Pipeline::Fused && can_fuse_glu(&lw.w_gate, &lw.w_up) {
        let norm = (&lw.ffn_norm.vector(), c.rms_eps);
        return matmul_glu(
            rec,
            &lw.w_gate,
            &lw.w_up,
            &x,
            Some((norm.0, norm.1)),
            &act,
            t,
            activation(c),
        );
    }
    let xn = Binding::from(&s.xn);
    rms_norm(rec, &x, &lw.ffn_norm.vector(), &xn, t, c.dim, c.rms_eps)?;
    matmul(
        rec,
        &lw.w_gate,
        &xn,
        &Binding::from(&s.gate),
        t,
        MatmulArgs::default(),
    )?;
    matmul(
        rec,
        &lw.w_up,
        &xn,
        &Binding::from(&s.up),
        t,
        MatmulArgs::default(),
    )?;
    elementwise::glu(
        rec,
        &Binding::from(&s.gate),
        &Binding::from(&s.up),
        &act,
        t * c.ffn_dim,
        activation(c),
    )
}

/// The whole FFN half of block `l` — RMSNorm, gate/up, activation, down, residual add and,
/// given gemma3's `post_ffw_norm`, its post-norm — in ONE dispatch with one workgroup per
/// token row: the megakernel kept to measure the lesson that it starves the GPU.
pub(crate) fn megakernel_ffn(
    rec: &mut StepRecorder,
    step: &Step,
    l: usize,
    post_norm: Option<&crate::gpu::GpuTensor>,
) -> Result<(), KernelError> {
    let (c, s, t) = (&step.model.config, step.s, step.t);
    let lw = &step.model.weights.layers[l];
    let post_w = post_norm.map(|w| w.vector());
    let proj = Binding::from(&s.proj);
    let post = post_w.as_ref().map(|w| PostNorm { w, scratch: &proj });
    ffn_megakernel(
        rec,
        &lw.w_gate,
        &lw.w_up,
        &lw.w_down,
        (&lw.ffn_norm.vector(), c.rms_eps),
        post,
        &Binding::from(&s.x),
        &Binding::from(&s.act),
        t,
        activation(c),
    )
}

pub(crate) fn activation(c: &Config) -> elementwise::Activation {
    match c.activation {
        Activation::Silu => elementwise::Activation::Silu,
        Activation::GeluTanh => elementwise::Activation::GeluTanh,
    }
}

pub(crate) fn rope_layout(c: &Config) -> RopeLayout {
    match c.rope_style {
        RopeStyle::Normal => RopeLayout::Normal,
        RopeStyle::Neox => RopeLayout::Neox,
    }
}

/// The attention half of a block, shared by every architecture: the attention RMSNorm,
/// Q/K/V projections (+ biases), per-head Q/K norms (gemma3), RoPE, the KV-cache write and
/// causal attention into `s.attn`. Reads the residual stream `s.x`.
pub(crate) fn attention_block(
    rec: &mut StepRecorder,
    step: &Step,
    l: u32,
) -> Result<(), KernelError> {
    let (model, kv, s, t, pos0) = (step.model, step.kv, step.s, step.t, step.pos0);
    let c = &model.config;
    let lw = &model.weights.layers[l as usize];
    let (q, k, v) = (
        Binding::from(&s.q),
        Binding::from(&s.k),
        Binding::from(&s.v),
    );
    let bias = |b: &Option<crate::gpu::GpuTensor>| b.as_ref().map(|b| b.vector());
    let (bq, bk, bv) = (bias(&lw.bq), bias(&lw.bk), bias(&lw.bv));
    let biases = match (&bq, &bk, &bv) {
        (Some(bq), Some(bk), Some(bv)) => Some((bq, bk, bv)),
        _ => None,
    };
    // gemma3's per-head Q/K norms: folded into the fused RoPE + KV write, else two dispatches.
    let qk_norm = match (&lw.q_norm, &lw.k_norm) {
        (Some(qn), Some(kn)) => Some((qn.vector(), kn.vector())),
        _ => None,
    };
    let inv_freq = Binding::from(&s.inv_freq[l as usize]);
    let (kc, vc) = (
        Binding::from(&kv.k[l as usize]),
        Binding::from(&kv.v[l as usize]),
    );
    let rope_shape = RopeKvShape {
        t,
        heads: c.n_heads,
        kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        pos0,
        layout: rope_layout(c),
    };
    let fused = step.pipeline == Pipeline::Fused;
    let norm = lw.attn_norm.vector();
    let (wq, wk, wv) = (&lw.wq, &lw.wk, &lw.wv);
    if fused
        && qk_norm.is_none()
        && qkv_rope_fuses(rec, wq, wk, wv, true, biases.is_some(), &rope_shape)
    {
        // A decode step: the norm, Q/K/V (+ biases), RoPE and the KV-cache write in one
        // dispatch (kernels::qkv_rope).
        let norm = Some((&norm, c.rms_eps));
        matmul_qkv_rope_kv(
            rec,
            wq,
            wk,
            wv,
            &Binding::from(&s.x),
            norm,
            &q,
            &kc,
            &vc,
            &inv_freq,
            biases,
            &rope_shape,
        )?;
    } else if fused {
        // Norm folded in; one dispatch when Q/K/V share a type (else three normed ones).
        let x = Binding::from(&s.x);
        matmul_qkv(
            rec,
            wq,
            wk,
            wv,
            &x,
            Some((&norm, c.rms_eps)),
            &q,
            &k,
            &v,
            t,
            biases,
        )?;
        let fold_qk_norm = c.head_dim <= QK_NORM_MAX_HEAD_DIM;
        if let (Some((qn, kn)), false) = (&qk_norm, fold_qk_norm) {
            rms_norm_in_place(rec, &q, qn, t * c.n_heads, c.head_dim, c.rms_eps)?;
            rms_norm_in_place(rec, &k, kn, t * c.n_kv_heads, c.head_dim, c.rms_eps)?;
        }
        let norm = qk_norm
            .as_ref()
            .filter(|_| fold_qk_norm)
            .map(|(qn, kn)| QkNorm {
                q: qn,
                k: kn,
                eps: c.rms_eps,
            });
        rope_kv_write(rec, &q, &k, &v, &kc, &vc, &inv_freq, &rope_shape, norm)?;
    } else {
        let xn = Binding::from(&s.xn);
        rms_norm(
            rec,
            &Binding::from(&s.x),
            &lw.attn_norm.vector(),
            &xn,
            t,
            c.dim,
            c.rms_eps,
        )?;
        for (w, out, b) in [
            (&lw.wq, &q, &lw.bq),
            (&lw.wk, &k, &lw.bk),
            (&lw.wv, &v, &lw.bv),
        ] {
            let bias = b.as_ref().map(|b| b.parts[0].buffer.clone());
            let args = MatmulArgs {
                bias: bias.as_ref(),
                accumulate: false,
            };
            matmul(rec, w, &xn, out, t, args)?;
        }
        if let Some((qn, kn)) = &qk_norm {
            rms_norm_in_place(rec, &q, qn, t * c.n_heads, c.head_dim, c.rms_eps)?;
            rms_norm_in_place(rec, &k, kn, t * c.n_kv_heads, c.head_dim, c.rms_eps)?;
        }
        for (x, heads) in [(&q, c.n_heads), (&k, c.n_kv_heads)] {
            rope(
                rec,
                x,
                &inv_freq,
                t,
                heads,
                c.head_dim,
                pos0,
                rope_layout(c),
            )?;
        }
        kv_write(rec, &k, &v, &kc, &vc, t, c.n_kv_heads, c.head_dim, pos0)?;
    }
    let shape = AttentionShape {
        t,
        heads: c.n_heads,
        kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        pos0,
        window: c.window(l),
        scale: c.attn_scale,
    };
    attention(
        rec,
        &q,
        &kc,
        &vc,
        &Binding::from(&s.attn),
        &Binding::from(&s.attn_partials),
        &shape,
    )
}

/// Final RMSNorm and the vocabulary projection, for the last token or every token.
pub(crate) fn lm_head(
    rec: &mut StepRecorder,
    step: &Step,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    let (c, w, s, t) = (&step.model.config, &step.model.weights, step.s, step.t);
    let (x, rows) = match logits_for {
        LogitsFor::AllTokens => (Binding::from(&s.x), t),
        LogitsFor::LastToken => (rows_of(&s.x, t - 1, 1, c.dim), 1),
    };
    let logits = Binding::from(&s.logits);
    if step.pipeline == Pipeline::Fused {
        return matmul_normed(
            rec,
            w.lm_head(),
            &x,
            &w.output_norm.vector(),
            c.rms_eps,
            &logits,
            rows,
            MatmulArgs::default(),
        );
    }
    let xn = rows_of(&s.xn, 0, rows, c.dim);
    rms_norm(
        rec,
        &x,
        &w.output_norm.vector(),
        &xn,
        rows,
        c.dim,
        c.rms_eps,
    )?;
    matmul(rec, w.lm_head(), &xn, &logits, rows, MatmulArgs::default())
}
