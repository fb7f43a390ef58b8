//! Model descriptions: typed configs per architecture, the GPU weights, and one readable
//! forward pass per architecture family (`llama.rs` also serves qwen2, qwen3, phi3, smollm3
//! and granite; `gemma.rs` serves gemma2 and gemma3).
//! Each forward lists its kernel calls in model order and writes into buffers that the
//! session preallocated. Which fused form each call takes (norm folded, Q/K/V in one, RoPE in
//! the matvec, split attention, …) is the session's [`Plan`] (`plan.rs`), decided once from
//! the config, the weights and the adapter: the forward runs the plan's lists and decides
//! nothing itself.

pub mod config;
mod gemma;
mod llama;
pub mod plan;
pub mod state;
pub mod weights;

pub use config::{Activation, Arch, Config, ConfigError, LongRope, RopeScaling, RopeStyle};
pub use plan::{NormOf, Op, Plan, PlanLine};
pub use weights::{
    fused_pieces, widening_extra_bytes, widenings, LayerWeights, RopeFactors, Weights,
    ROPE_FACTOR_TENSORS,
};

use crate::gpu::{Binding, StepRecorder};
use crate::kernels::attention::{attention_planned, kv_write};
use crate::kernels::elementwise;
use crate::kernels::matmul::{
    levels_scratch, matmul, matmul_glu, matmul_normed, matmul_qkv, MatmulArgs,
};
use crate::kernels::megakernel::{can_use_megakernel, ffn_megakernel, PostNorm};
use crate::kernels::norm::{rms_norm, rms_norm_in_place};
use crate::kernels::qkv_rope::matmul_qkv_rope_kv;
use crate::kernels::rope::{rope, rope_kv_write, QkNorm, RopeKvShape, RopeLayout, Rotary};
use crate::kernels::KernelError;
pub use state::{
    rows_of, KvCache, LogitsFor, Model, Scratch, DEFAULT_BATCHES_IN_FLIGHT, LOGITS_ROWS,
    MAX_BATCHES_IN_FLIGHT, MAX_STEPS, PREFILL_CHUNK,
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

/// Records one step: `t` tokens (already in `s.ids`) at positions `pos0..pos0 + t`, as
/// `plan` (the session's [`Plan`], made for this model on this device) lists it.
#[allow(clippy::too_many_arguments)]
pub fn forward(
    rec: &mut StepRecorder,
    model: &Model,
    kv: &KvCache,
    s: &Scratch,
    t: u32,
    pos0: u32,
    logits_for: LogitsFor,
    plan: &Plan,
) -> Result<(), KernelError> {
    let step = Step {
        model,
        kv,
        s,
        t,
        pos0,
        plan,
    };
    match model.config.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Phi3 | Arch::Smollm3 | Arch::Granite => {
            llama::forward(rec, &step, logits_for)
        }
        Arch::Gemma2 | Arch::Gemma3 => gemma::forward(rec, &step, logits_for),
    }
}

/// Records only the FFN half of block `l` (reading and updating `s.x`): what
/// `Session::set_megakernel` runs through both paths to compare them.
pub(crate) fn ffn(rec: &mut StepRecorder, step: &Step, l: usize) -> Result<(), KernelError> {
    match step.model.config.arch {
        Arch::Llama | Arch::Qwen2 | Arch::Qwen3 | Arch::Phi3 | Arch::Smollm3 | Arch::Granite => {
            llama::ffn(rec, step, l)
        }
        Arch::Gemma2 | Arch::Gemma3 => gemma::ffn(rec, step, l),
    }
}

/// Whether every layer's FFN can run as the megakernel on this device; `Err` names the first
/// layer that can't, and why.
pub fn megakernel_support(model: &Model, ctx: &crate::gpu::GpuContext) -> Result<(), String> {
    // The megakernel adds W_down's output into the residual stream as it is.
    if model.config.residual_scale != 1.0 {
        return Err(format!(
            "the residual multiplier ({}) is not in the megakernel",
            model.config.residual_scale
        ));
    }
    for (l, lw) in model.weights.layers.iter().enumerate() {
        let post_norm = lw.post_ffn_norm.is_some();
        can_use_megakernel(ctx, &lw.w_gate, &lw.w_up, &lw.w_down, post_norm)
            .map_err(|why| format!("layer {l}: {why}"))?;
    }
    Ok(())
}

/// What every block of a step needs: the model, its cache and scratch, the token range, and
/// the plan that says which kernels run.
pub(crate) struct Step<'a> {
    pub model: &'a Model,
    pub kv: &'a KvCache,
    pub s: &'a Scratch,
    pub t: u32,
    pub pos0: u32,
    pub plan: &'a Plan,
}

/// An op the plan listed where the forward has no kernel call for it: a plan built for
/// another model.
fn misplaced(op: Op) -> KernelError {
    KernelError::Shape {
        kernel: "model::forward",
        why: format!("the plan lists {op:?} where this block has no such step"),
    }
}

/// `act = act(norm(x)·W_gateᵀ) ⊙ norm(x)·W_upᵀ` for the FFN, as the plan's `op` says: one
/// dispatch ([`Op::GateUpGlu`]), or the norm, the two products and the glu.
pub(crate) fn gated_ffn(
    rec: &mut StepRecorder,
    step: &Step,
    l: usize,
    op: Op,
) -> Result<(), KernelError> {
    let (c, s, t) = (&step.model.config, step.s, step.t);
    let lw = &step.model.weights.layers[l];
    let (x, xn, act) = (
        Binding::from(&s.x),
        Binding::from(&s.xn),
        Binding::from(&s.act),
    );
    let (gate, up) = (Binding::from(&s.gate), Binding::from(&s.up));
    match op {
        Op::GateUpGlu { levels } => {
            let norm = (&lw.ffn_norm.vector(), c.rms_eps);
            let (gw, uw) = (&lw.w_gate, &lw.w_up);
            // W_down's x' as int8 levels too, where the plan says W_down reads them.
            let scratch = levels.then(|| Binding::from(&levels_scratch(rec.ctx())));
            let levels_out = scratch.as_ref();
            matmul_glu(
                rec,
                gw,
                uw,
                &x,
                Some(norm),
                &act,
                levels_out,
                t,
                activation(c),
            )
        }
        Op::Norm(NormOf::Ffn) => rms_norm(rec, &x, &lw.ffn_norm.vector(), &xn, t, c.dim, c.rms_eps),
        Op::GateUp => {
            let none = MatmulArgs::default();
            matmul(rec, &lw.w_gate, &xn, &gate, t, none)?;
            matmul(rec, &lw.w_up, &xn, &up, t, none)
        }
        Op::Glu => elementwise::glu(rec, &gate, &up, &act, t * c.ffn_dim, activation(c)),
        op => Err(misplaced(op)),
    }
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

/// How the model's RoPE turns each head: its pair layout, rotated dimensions and LongRoPE's
/// factor on cos and sin.
pub(crate) fn rotary(c: &Config) -> Rotary {
    Rotary {
        layout: rope_layout(c),
        dims: c.rope_dims,
        scale: c.rope_attn_factor,
    }
}

/// The attention half of a block, shared by every architecture: the attention RMSNorm,
/// Q/K/V projections (+ biases), per-head Q/K norms (gemma3, qwen3), RoPE, the KV-cache write and
/// causal attention into `s.attn`, each in the form the plan lists for this step. Reads the
/// residual stream `s.x`.
pub(crate) fn attention_block(
    rec: &mut StepRecorder,
    step: &Step,
    l: u32,
) -> Result<(), KernelError> {
    let (model, kv, s, t, pos0) = (step.model, step.kv, step.s, step.t, step.pos0);
    let c = &model.config;
    let lw = &model.weights.layers[l as usize];
    let (x, xn) = (Binding::from(&s.x), Binding::from(&s.xn));
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
        rotary: rotary(c),
    };
    let norm_w = lw.attn_norm.vector();
    let norm = (&norm_w, c.rms_eps);
    let (wq, wk, wv) = (&lw.wq, &lw.wk, &lw.wv);
    for op in step.plan.attention_ops(l as usize, t, pos0) {
        match op {
            // the norm, Q/K/V (+ biases), (the per-head Q/K norms,) RoPE and the KV-cache
            // write in one matvec (kernels::qkv_rope)
            Op::QkvRopeKv { v_apart } => matmul_qkv_rope_kv(
                rec,
                wq,
                wk,
                (!v_apart).then_some(wv),
                &x,
                Some(norm),
                &q,
                &kc,
                &vc,
                &inv_freq,
                biases,
                qk_norm.as_ref().map(|(qn, kn)| QkNorm {
                    q: qn,
                    k: kn,
                    eps: c.rms_eps,
                }),
                &rope_shape,
            )?,
            // V (+ bias) of its own type, straight into its V-cache rows
            Op::VIntoCache => {
                let row_bytes = wv.n_rows * 4;
                let rows = Binding::range(
                    &kv.v[l as usize],
                    pos0 as u64 * row_bytes,
                    t as u64 * row_bytes,
                );
                let args = MatmulArgs {
                    bias: bv.as_ref().map(|b| &b.buffer),
                    ..MatmulArgs::default()
                };
                matmul_normed(rec, wv, &x, norm.0, norm.1, &rows, t, args)?
            }
            // Q/K/V (+ biases) in one dispatch, the norm folded in or not
            Op::Qkv { norm: folded } => {
                let (input, norm) = if folded {
                    (&x, Some(norm))
                } else {
                    (&xn, None)
                };
                matmul_qkv(rec, wq, wk, wv, input, norm, &q, &k, &v, t, biases)?
            }
            // the unfused attention RMSNorm
            Op::Norm(NormOf::Attention) => rms_norm(rec, &x, &norm_w, &xn, t, c.dim, c.rms_eps)?,
            // Q, K, V (+ biases) as three products
            Op::QkvEach { norm: folded } => {
                for (w, out, b) in [(wq, &q, &bq), (wk, &k, &bk), (wv, &v, &bv)] {
                    let args = MatmulArgs {
                        bias: b.as_ref().map(|b| &b.buffer),
                        ..MatmulArgs::default()
                    };
                    if folded {
                        matmul_normed(rec, w, &x, norm.0, norm.1, out, t, args)?;
                    } else {
                        matmul(rec, w, &xn, out, t, args)?;
                    }
                }
            }
            // the per-head Q/K norms (gemma3, qwen3) as their own dispatches
            Op::QkNorm => {
                let (qn, kn) = qk_norm.as_ref().ok_or_else(|| misplaced(op))?;
                rms_norm_in_place(rec, &q, qn, t * c.n_heads, c.head_dim, c.rms_eps)?;
                rms_norm_in_place(rec, &k, kn, t * c.n_kv_heads, c.head_dim, c.rms_eps)?;
            }
            // RoPE and the KV-cache write in one dispatch, with the Q/K norms folded in
            Op::RopeKvWrite { qk_norm: folded } => {
                let norm = match (&qk_norm, folded) {
                    (Some((qn, kn)), true) => Some(QkNorm {
                        q: qn,
                        k: kn,
                        eps: c.rms_eps,
                    }),
                    (None, true) => return Err(misplaced(op)),
                    (_, false) => None,
                };
                rope_kv_write(rec, &q, &k, &v, &kc, &vc, &inv_freq, &rope_shape, norm)?
            }
            // the unfused RoPE of q and k, then the cache write
            Op::Rope => {
                for (x, heads) in [(&q, c.n_heads), (&k, c.n_kv_heads)] {
                    rope(rec, x, &inv_freq, t, heads, c.head_dim, pos0, rotary(c))?;
                }
            }
            Op::KvWrite => kv_write(rec, &k, &v, &kc, &vc, t, c.n_kv_heads, c.head_dim, pos0)?,
            // causal (sliding-window) attention on the path the plan picked for this step
            Op::Attention(how) => {
                let shape = step.plan.attention_shape(l as usize, t, pos0);
                let (out, partials) = (Binding::from(&s.attn), Binding::from(&s.attn_partials));
                // W_o's x' as int8 levels too, where the plan says W_o reads them.
                let levels = step.plan.o_levels(l as usize, t, pos0);
                let scratch = levels.then(|| Binding::from(&levels_scratch(rec.ctx())));
                let (q, k, v) = (&q, &kc, &vc);
                attention_planned(rec, q, k, v, &out, &partials, &shape, how, scratch.as_ref())?
            }
            op => return Err(misplaced(op)),
        }
    }
    Ok(())
}

/// Final RMSNorm and the vocabulary projection (with gemma2's soft-cap folded into its
/// store), for the last token or every token.
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
    let norm_w = w.output_norm.vector();
    let xn = rows_of(&s.xn, 0, rows, c.dim);
    // gemma2: logits ← cap·tanh(logits / cap) as the product stores them, before anything
    // samples them (the plan's `final_softcap`); granite divides the logits by its
    // logit_scale, in the same store
    let head = MatmulArgs {
        softcap: step.plan.final_softcap,
        scale: 1.0 / c.logit_scale,
        ..MatmulArgs::default()
    };
    for op in step.plan.head_ops() {
        match op {
            // the final norm folded into the vocabulary product
            Op::LmHead { norm: true } => matmul_normed(
                rec,
                w.lm_head(),
                &x,
                &norm_w,
                c.rms_eps,
                &logits,
                rows,
                head,
            )?,
            Op::Norm(NormOf::Output) => rms_norm(rec, &x, &norm_w, &xn, rows, c.dim, c.rms_eps)?,
            Op::LmHead { norm: false } => matmul(rec, w.lm_head(), &xn, &logits, rows, head)?,
            op => return Err(misplaced(op)),
        }
    }
    Ok(())
}
