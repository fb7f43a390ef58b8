//! Llama-family forward pass (Llama 2/3.x, Mistral, TinyLlama, SmolLM2) and Qwen2 (the same
//! graph plus Q/K/V biases and NeoX RoPE).
//!
//! Touvron et al. 2023, "Llama 2"; HF `modeling_llama.py` / `modeling_qwen2.py`.
//! Pre-norm blocks: h += Attn(RMSNorm(h)); h += W_down(SiLU(W_gate x) ⊙ W_up x) with x = RMSNorm(h).

use crate::engine::{KvCache, LogitsFor, Scratch};
use crate::gpu::{Binding, StepRecorder};
use crate::kernels::elementwise::glu;
use crate::kernels::get_rows::get_rows;
use crate::kernels::matmul::{matmul, MatmulArgs};
use crate::kernels::norm::rms_norm;
use crate::kernels::KernelError;

use super::{activation, attention_block, lm_head, Model};

pub fn forward(
    rec: &mut StepRecorder,
    model: &Model,
    kv: &KvCache,
    s: &Scratch,
    t: u32,
    pos0: u32,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    let c = &model.config;
    let w = &model.weights;
    let (x, xn) = (Binding::from(&s.x), Binding::from(&s.xn));
    let accumulate = MatmulArgs { bias: None, accumulate: true };

    // token embeddings
    get_rows(rec, &w.token_embd, &Binding::from(&s.ids), &x, t, c.embed_scale)?;
    for (l, lw) in w.layers.iter().enumerate() {
        // attention rmsnorm
        rms_norm(rec, &x, &lw.attn_norm.vector(), &xn, t, c.dim, c.rms_eps)?;
        // Q/K/V (+ qwen2 biases), RoPE, KV-cache write, causal attention → s.attn
        attention_block(rec, model, kv, s, l as u32, t, pos0)?;
        // output projection, added into the residual stream
        matmul(rec, &lw.wo, &Binding::from(&s.attn), &x, t, accumulate)?;
        // FFN rmsnorm
        rms_norm(rec, &x, &lw.ffn_norm.vector(), &xn, t, c.dim, c.rms_eps)?;
        // SwiGLU
        matmul(rec, &lw.w_gate, &xn, &Binding::from(&s.gate), t, MatmulArgs::default())?;
        matmul(rec, &lw.w_up, &xn, &Binding::from(&s.up), t, MatmulArgs::default())?;
        glu(rec, &Binding::from(&s.gate), &Binding::from(&s.up), &Binding::from(&s.act), t * c.ffn_dim, activation(c))?;
        // down projection, added into the residual stream
        matmul(rec, &lw.w_down, &Binding::from(&s.act), &x, t, accumulate)?;
    }
    // final norm and logits
    lm_head(rec, model, s, t, logits_for)
}
