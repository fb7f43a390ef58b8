//! Gemma 2 and Gemma 3 forward pass: one structure, the differences are config flags.
//!
//! Gemma Team 2024, "Gemma 2: Improving Open Language Models at a Practical Size"; Gemma Team
//! 2025, "Gemma 3 Technical Report"; HF `modeling_gemma2.py`, `modeling_gemma3.py`. What both
//! do differently from Llama, each matched against HF:
//! - embeddings scaled by √dim;
//! - sandwich norms: h += PostNorm(Attn(PreNorm(h))), likewise around the FFN;
//! - GELU-tanh gated FFN;
//! - sliding-window (local) layers between global ones: Gemma 3 5 per global layer, with its
//!   own RoPE base (10k vs 1M); Gemma 2 every other layer (0, 2, …), one base for all;
//! - GGUF norm weights already hold HF's `(1 + w)` (llama.cpp's converter adds the 1), so
//!   the plain RMSNorm kernel applies.
//!
//! Per model (`Config` flags, applied where the shared steps run):
//! - Gemma 3: per-head RMSNorm on Q and K before RoPE (`qk_norm`, in `attention_block`);
//! - Gemma 2: attention scores soft-capped, cap·tanh(s / cap), before the mask and softmax
//!   (`attn_softcap`, in the attention kernels), and the logits soft-capped as the LM head
//!   stores them (`final_softcap`, through `lm_head`'s `MatmulArgs::softcap`).

use super::LogitsFor;
use crate::gpu::{Binding, StepRecorder};
use crate::kernels::get_rows::get_rows;
use crate::kernels::matmul::{matmul, matmul_post_norm_add, MatmulArgs, PostNormAdd};
use crate::kernels::norm::rms_norm_add;
use crate::kernels::KernelError;

use super::{attention_block, gated_ffn, lm_head, megakernel_ffn, misplaced, NormOf, Op, Step};

pub(crate) fn forward(
    rec: &mut StepRecorder,
    step: &Step,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    let (c, w, s, t) = (&step.model.config, &step.model.weights, step.s, step.t);
    let x = Binding::from(&s.x);
    let proj = Binding::from(&s.proj);

    // token embeddings, scaled by √dim
    get_rows(
        rec,
        &w.token_embd,
        &Binding::from(&s.ids),
        &x,
        t,
        c.embed_scale,
    )?;
    for (l, lw) in w.layers.iter().enumerate() {
        // pre-attention norm, Q/K/V, per-head Q/K norms (gemma3), RoPE, KV-cache write,
        // (sliding, soft-capped) attention
        attention_block(rec, step, l as u32)?;
        // output projection; post-attention norm added into the residual stream
        let post_attn = lw
            .post_attn_norm
            .as_ref()
            .ok_or_else(|| missing("post_attention_norm"))?
            .vector();
        let attn = Binding::from(&s.attn);
        for op in step.plan.o_proj_ops(l, t, step.pos0) {
            match op {
                // both in one dispatch: the product's last workgroup norms the row
                Op::OProjPostNorm => {
                    let post = PostNormAdd {
                        w: &post_attn,
                        eps: c.rms_eps,
                        residual: &x,
                    };
                    matmul_post_norm_add(rec, &lw.wo, &attn, post, t)?
                }
                Op::OProj {
                    residual: false,
                    levels: false,
                } => matmul(rec, &lw.wo, &attn, &proj, t, MatmulArgs::default())?,
                Op::PostNorm(NormOf::Attention) => {
                    rms_norm_add(rec, &proj, &post_attn, &x, t, c.dim, c.rms_eps)?
                }
                op => return Err(misplaced(op)),
            }
        }
        // FFN: pre-norm, GELU-tanh gated FFN, down projection, post-norm added into x
        ffn(rec, step, l)?;
    }
    // final norm and logits (tied to the embeddings; soft-capped on gemma2)
    lm_head(rec, step, logits_for)
}

fn missing(what: &str) -> KernelError {
    KernelError::Shape {
        kernel: "gemma",
        why: format!("missing {what}"),
    }
}

/// The FFN half of block `l`: x += PostNorm(W_down(GELU(x'·W_gateᵀ) ⊙ x'·W_upᵀ)),
/// x' = PreNorm(x), in the dispatches the plan lists.
pub(crate) fn ffn(rec: &mut StepRecorder, step: &Step, l: usize) -> Result<(), KernelError> {
    let (c, s, t) = (&step.model.config, step.s, step.t);
    let lw = &step.model.weights.layers[l];
    let post_ffn = lw
        .post_ffn_norm
        .as_ref()
        .ok_or_else(|| missing("post_ffw_norm"))?;
    let proj = Binding::from(&s.proj);
    for op in step.plan.ffn_ops(l, t) {
        match op {
            // all of it, post-norm included, in one dispatch with one workgroup per token
            // (off by default: the A/B lesson)
            Op::Megakernel => megakernel_ffn(rec, step, l, Some(post_ffn))?,
            // down projection with the post-FFN norm added into the residual stream by its
            // last workgroup
            Op::DownPostNorm => {
                let (act, x, post_w) = (
                    Binding::from(&s.act),
                    Binding::from(&s.x),
                    post_ffn.vector(),
                );
                let post = PostNormAdd {
                    w: &post_w,
                    eps: c.rms_eps,
                    residual: &x,
                };
                matmul_post_norm_add(rec, &lw.w_down, &act, post, t)?
            }
            // down projection into proj
            Op::Down {
                residual: false,
                levels: false,
            } => {
                let act = Binding::from(&s.act);
                matmul(rec, &lw.w_down, &act, &proj, t, MatmulArgs::default())?
            }
            // post-FFN norm added into the residual stream
            Op::PostNorm(NormOf::Ffn) => {
                let x = Binding::from(&s.x);
                rms_norm_add(rec, &proj, &post_ffn.vector(), &x, t, c.dim, c.rms_eps)?
            }
            // pre-FFN norm and GELU-tanh gated FFN
            op => gated_ffn(rec, step, l, op)?,
        }
    }
    Ok(())
}
