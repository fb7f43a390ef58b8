//! Llama-family forward pass (Llama 2/3.x, Mistral, TinyLlama, SmolLM2), Qwen2 (the same
//! graph plus Q/K/V biases and NeoX RoPE) and Qwen3 (NeoX RoPE, no biases, and a per-head
//! RMSNorm on Q and K before RoPE, with its own `[head_dim]` weights: HF `Qwen3Attention`
//! applies `q_norm` / `k_norm` to `q_proj(x)` viewed as `[.., heads, head_dim]`), Phi-3
//! (NeoX RoPE with LongRoPE factors; its fused `qkv_proj` / `gate_up_proj` tensors are split
//! into separate Q/K/V and gate/up weights at load, `weights::fused_pieces`, so the graph is
//! llama's), and SmolLM3 (llama with no RoPE on every 4th layer: HF `SmolLM3Attention` skips
//! `apply_rotary_pos_emb` where `no_rope_layers[l] == 0`; the plan drops the RoPE kernels there).
//!
//! Touvron et al. 2023, "Llama 2"; HF `modeling_llama.py` / `modeling_qwen2.py` /
//! `modeling_qwen3.py` / `modeling_phi3.py` / `modeling_smollm3.py`. Granite (HF
//! `modeling_granite.py`) is the llama graph with four multipliers: embeddings ×
//! `embedding_multiplier`, q·k × `attention_multiplier`, each residual branch ×
//! `residual_multiplier`, logits ÷ `logits_scaling`; the products apply the last two as they
//! store.
//! Pre-norm blocks: h += Attn(RMSNorm(h)); h += W_down(SiLU(W_gate x) ⊙ W_up x) with x = RMSNorm(h).

use crate::gpu::{Binding, StepRecorder};
use crate::kernels::get_rows::get_rows;
use crate::kernels::matmul::{levels_scratch, matmul, MatmulArgs};
use crate::kernels::KernelError;

use super::{attention_block, gated_ffn, lm_head, megakernel_ffn, LogitsFor, Op, Step};

pub(crate) fn forward(
    rec: &mut StepRecorder,
    step: &Step,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    let (c, w, s, t) = (&step.model.config, &step.model.weights, step.s, step.t);
    let x = Binding::from(&s.x);
    // the residual adds (granite scales each branch first)
    let accumulate = MatmulArgs {
        accumulate: true,
        scale: c.residual_scale,
        ..MatmulArgs::default()
    };

    // token embeddings (× granite's embedding_scale)
    get_rows(
        rec,
        &w.token_embd,
        &Binding::from(&s.ids),
        &x,
        t,
        c.embed_scale,
    )?;
    for (l, lw) in w.layers.iter().enumerate() {
        // attention RMSNorm, Q/K/V (+ qwen2 biases), qwen3's per-head Q/K norms, RoPE (none
        // on smollm3's NoPE layers), KV-cache write, causal attention
        attention_block(rec, step, l as u32)?;
        // output projection, added into the residual stream; its x' as the int8 levels the
        // attention merge wrote, where the plan says so
        let levels = step.plan.o_levels(l, t, step.pos0);
        let scratch = levels.then(|| Binding::from(&levels_scratch(rec.ctx())));
        let args = MatmulArgs {
            x_levels: scratch.as_ref(),
            ..accumulate
        };
        matmul(rec, &lw.wo, &Binding::from(&s.attn), &x, t, args)?;
        // FFN: RMSNorm, SwiGLU, down projection added into the residual stream
        ffn(rec, step, l)?;
    }
    // final norm and logits
    lm_head(rec, step, logits_for)
}

/// The FFN half of block `l`: x += W_down(SiLU(x'·W_gateᵀ) ⊙ x'·W_upᵀ), x' = RMSNorm(x), in
/// the dispatches the plan lists.
pub(crate) fn ffn(rec: &mut StepRecorder, step: &Step, l: usize) -> Result<(), KernelError> {
    let (s, t) = (step.s, step.t);
    let lw = &step.model.weights.layers[l];
    let accumulate = MatmulArgs {
        accumulate: true,
        scale: step.model.config.residual_scale,
        ..MatmulArgs::default()
    };
    for op in step.plan.ffn_ops(l, t) {
        match op {
            // all of it in one dispatch, one workgroup per token (off by default: the A/B lesson)
            Op::Megakernel => megakernel_ffn(rec, step, l, None)?,
            // down projection, added into the residual stream
            Op::Down {
                residual: true,
                levels,
            } => {
                let (act, x) = (Binding::from(&s.act), Binding::from(&s.x));
                let scratch = levels.then(|| Binding::from(&levels_scratch(rec.ctx())));
                let args = MatmulArgs {
                    x_levels: scratch.as_ref(),
                    ..accumulate
                };
                matmul(rec, &lw.w_down, &act, &x, t, args)?
            }
            // FFN RMSNorm and SwiGLU: act = SiLU(x·W_gateᵀ) ⊙ x·W_upᵀ
            op => gated_ffn(rec, step, l, op)?,
        }
    }
    Ok(())
}
