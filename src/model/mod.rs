//! Model descriptions: typed configs per architecture, the GPU weights, and one readable
//! forward pass per architecture family (`llama.rs` also serves qwen2; `gemma3.rs`).
//! Each forward lists its kernel calls in model order and writes into buffers that the
//! session preallocated.

pub mod config;
mod gemma3;
mod llama;
pub mod weights;

pub use config::{Activation, Arch, Config, ConfigError, RopeScaling, RopeStyle};
pub use weights::{LayerWeights, Weights};

pub use crate::engine::Model;

use crate::engine::{rows_of, KvCache, LogitsFor, Scratch};
use crate::gpu::{Binding, StepRecorder};
use crate::kernels::attention::{attention, kv_write, AttentionShape};
use crate::kernels::elementwise;
use crate::kernels::matmul::{matmul, MatmulArgs};
use crate::kernels::norm::{rms_norm, rms_norm_in_place};
use crate::kernels::rope::{rope, RopeLayout};
use crate::kernels::KernelError;

/// Records one step: `t` tokens (already in `s.ids`) at positions `pos0..pos0 + t`.
pub fn forward(
    rec: &mut StepRecorder,
    model: &Model,
    kv: &KvCache,
    s: &Scratch,
    t: u32,
    pos0: u32,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    match model.config.arch {
        Arch::Llama | Arch::Qwen2 => llama::forward(rec, model, kv, s, t, pos0, logits_for),
        Arch::Gemma3 => gemma3::forward(rec, model, kv, s, t, pos0, logits_for),
    }
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

/// The attention half of a block, shared by every architecture: Q/K/V projections of `s.xn`
/// (+ biases), per-head Q/K norms (gemma3), RoPE, the KV-cache write and causal attention
/// into `s.attn`.
pub(crate) fn attention_block(
    rec: &mut StepRecorder,
    model: &Model,
    kv: &KvCache,
    s: &Scratch,
    l: u32,
    t: u32,
    pos0: u32,
) -> Result<(), KernelError> {
    let c = &model.config;
    let lw = &model.weights.layers[l as usize];
    let xn = Binding::from(&s.xn);
    let (q, k, v) = (Binding::from(&s.q), Binding::from(&s.k), Binding::from(&s.v));
    let bias = |b: &Option<crate::gpu::GpuTensor>| b.as_ref().map(|b| b.parts[0].buffer.clone());
    let (bq, bk, bv) = (bias(&lw.bq), bias(&lw.bk), bias(&lw.bv));
    matmul(rec, &lw.wq, &xn, &q, t, MatmulArgs { bias: bq.as_ref(), accumulate: false })?;
    matmul(rec, &lw.wk, &xn, &k, t, MatmulArgs { bias: bk.as_ref(), accumulate: false })?;
    matmul(rec, &lw.wv, &xn, &v, t, MatmulArgs { bias: bv.as_ref(), accumulate: false })?;
    if let (Some(qn), Some(kn)) = (&lw.q_norm, &lw.k_norm) {
        rms_norm_in_place(rec, &q, &qn.vector(), t * c.n_heads, c.head_dim, c.rms_eps)?;
        rms_norm_in_place(rec, &k, &kn.vector(), t * c.n_kv_heads, c.head_dim, c.rms_eps)?;
    }
    let inv_freq = Binding::from(&s.inv_freq[l as usize]);
    rope(rec, &q, &inv_freq, t, c.n_heads, c.head_dim, pos0, rope_layout(c))?;
    rope(rec, &k, &inv_freq, t, c.n_kv_heads, c.head_dim, pos0, rope_layout(c))?;
    let (kc, vc) = (Binding::from(&kv.k[l as usize]), Binding::from(&kv.v[l as usize]));
    kv_write(rec, &k, &v, &kc, &vc, t, c.n_kv_heads, c.head_dim, pos0)?;
    let shape = AttentionShape {
        t,
        heads: c.n_heads,
        kv_heads: c.n_kv_heads,
        head_dim: c.head_dim,
        pos0,
        window: c.window(l),
        scale: c.attn_scale,
    };
    let (attn, partials) = (Binding::from(&s.attn), Binding::from(&s.attn_partials));
    attention(rec, &q, &kc, &vc, &attn, &partials, &shape)
}

/// Final RMSNorm and the vocabulary projection, for the last token or every token.
pub(crate) fn lm_head(
    rec: &mut StepRecorder,
    model: &Model,
    s: &Scratch,
    t: u32,
    logits_for: LogitsFor,
) -> Result<(), KernelError> {
    let c = &model.config;
    let w = &model.weights;
    let (x, xn) = (Binding::from(&s.x), Binding::from(&s.xn));
    let logits = Binding::from(&s.logits);
    match logits_for {
        LogitsFor::AllTokens => {
            rms_norm(rec, &x, &w.output_norm.vector(), &xn, t, c.dim, c.rms_eps)?;
            matmul(rec, w.lm_head(), &xn, &logits, t, MatmulArgs::default())
        }
        LogitsFor::LastToken => {
            // Only the last row: norm it alone, then a single-row matmul.
            let last = rows_of(&s.x, t - 1, 1, c.dim);
            let first_xn = rows_of(&s.xn, 0, 1, c.dim);
            rms_norm(rec, &last, &w.output_norm.vector(), &first_xn, 1, c.dim, c.rms_eps)?;
            matmul(rec, w.lm_head(), &first_xn, &logits, 1, MatmulArgs::default())
        }
    }
}
