//! The GPU weights of a model, by role, at the file's bits per weight (see `gpu::GpuTensor`).
//!
//! Shapes are GGUF's: a matrix `[K, N]` is N rows of K elements; `x · Wᵀ` maps K → N.

use std::collections::HashMap;

use crate::gguf::{GgmlType, Header, TensorInfo};
use crate::gpu::GpuTensor;

use super::{Arch, Config, ConfigError};

/// One transformer block.
pub struct LayerWeights {
    pub attn_norm: GpuTensor,              // [dim] f32
    pub wq: GpuTensor,                     // [dim → heads·head_dim]
    pub wk: GpuTensor,                     // [dim → kv_heads·head_dim]
    pub wv: GpuTensor,                     // [dim → kv_heads·head_dim]
    pub wo: GpuTensor,                     // [heads·head_dim → dim]
    pub bq: Option<GpuTensor>,             // qwen2: [heads·head_dim] f32
    pub bk: Option<GpuTensor>,             // qwen2: [kv_heads·head_dim] f32
    pub bv: Option<GpuTensor>,             // qwen2: [kv_heads·head_dim] f32
    pub q_norm: Option<GpuTensor>,         // gemma3, qwen3: [head_dim] f32
    pub k_norm: Option<GpuTensor>,         // gemma3, qwen3: [head_dim] f32
    pub post_attn_norm: Option<GpuTensor>, // gemma2, gemma3: [dim] f32
    pub ffn_norm: GpuTensor,               // [dim] f32
    pub w_gate: GpuTensor,                 // [dim → ffn]
    pub w_up: GpuTensor,                   // [dim → ffn]
    pub w_down: GpuTensor,                 // [ffn → dim]
    pub post_ffn_norm: Option<GpuTensor>,  // gemma2, gemma3: [dim] f32
}

pub struct Weights {
    pub token_embd: GpuTensor,  // [dim, vocab]
    pub output_norm: GpuTensor, // [dim] f32
    /// `None` when tied to `token_embd`.
    pub output: Option<GpuTensor>,
    pub layers: Vec<LayerWeights>,
    /// RoPE's per-frequency divisors, kept on the CPU to build inverse frequencies.
    pub rope_factors: RopeFactors,
}

/// The 1-D tensors that divide RoPE's frequencies, `[head_dim / 2]` f32 each; the loader keeps
/// a CPU copy of these (they are a few hundred bytes).
pub const ROPE_FACTOR_TENSORS: [&str; 3] = [
    "rope_freqs.weight",
    "rope_factors_long.weight",
    "rope_factors_short.weight",
];

/// RoPE's per-frequency divisors as the file carries them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RopeFactors {
    /// Llama 3 `rope_freqs.weight`.
    pub freqs: Option<Vec<f32>>,
    /// Phi-3 LongRoPE `rope_factors_long.weight`.
    pub long: Option<Vec<f32>>,
    /// Phi-3 LongRoPE `rope_factors_short.weight`.
    pub short: Option<Vec<f32>>,
}

impl RopeFactors {
    /// From the named f32 vectors ([`ROPE_FACTOR_TENSORS`]).
    pub fn from_named(mut named: HashMap<String, Vec<f32>>) -> RopeFactors {
        let mut take = |n: &str| named.remove(n);
        RopeFactors {
            freqs: take(ROPE_FACTOR_TENSORS[0]),
            long: take(ROPE_FACTOR_TENSORS[1]),
            short: take(ROPE_FACTOR_TENSORS[2]),
        }
    }

    /// The divisors a session of `context` positions uses: llama3's, or LongRoPE's long set
    /// when the session holds more than the original context and the short set otherwise
    /// (llama.cpp `llama_model::get_rope_factors`, which also prefers `rope_freqs`).
    pub fn for_context(&self, config: &Config, context: u32) -> Option<&[f32]> {
        if let Some(f) = &self.freqs {
            return Some(f);
        }
        let long_rope = config.long_rope?;
        let set = if context > long_rope.original_context {
            &self.long
        } else {
            &self.short
        };
        set.as_deref()
    }
}

/// Phi-3 stores Q, K and V stacked by rows in one `blk.N.attn_qkv.weight` and the FFN's gate
/// and up in one `blk.N.ffn_up.weight`, gate rows first (HF `Phi3MLP` chunks `gate_up_proj`'s
/// output into gate, up; ggml's swiglu takes the first half as the gate). coco's fused
/// Q/K/V and gate/up kernels take separate weights, so the file tensor is loaded as separate
/// GPU tensors under the names a llama file uses: each piece is a range of whole rows, and a
/// row is whole quant blocks, so a piece is a byte range of the stream (`engine::loader`).
/// Returns the pieces `(name, rows)` in file order, or `None` for a tensor loaded as is.
pub fn fused_pieces(config: &Config, name: &str) -> Option<Vec<(String, u64)>> {
    if config.arch != Arch::Phi3 {
        return None;
    }
    let (layer, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    let b = |s: &str| format!("blk.{layer}.{s}");
    let (q, kv, f) = (
        (config.n_heads * config.head_dim) as u64,
        (config.n_kv_heads * config.head_dim) as u64,
        config.ffn_dim as u64,
    );
    match rest {
        "attn_qkv.weight" => Some(vec![
            (b("attn_q.weight"), q),
            (b("attn_k.weight"), kv),
            (b("attn_v.weight"), kv),
        ]),
        "ffn_up.weight" => Some(vec![(b("ffn_gate.weight"), f), (b("ffn_up.weight"), f)]),
        _ => None,
    }
}

/// The most extra GPU bytes per layer that widening its Q/K/V to one type may cost: it saves
/// one dispatch per layer and decode step (~4 µs on the H200, ~15 µs in Chromium there), and
/// 1 MiB is ~0.25 µs of reading at 4 TB/s or ~5 µs at a laptop's 200 GB/s.
pub const WIDEN_MAX_EXTRA_BYTES_PER_LAYER: u64 = 1 << 20;

/// The file tensors the loader widens, with the type each is stored as (`gguf::widen`): a
/// layer's W_q, W_k and W_v where their types differ and each is, or widens exactly into,
/// one of them, so the three run as one matvec (llama.cpp's Q4_K_M Gemma-3-270M: Q5_0 Q/K
/// beside a Q8_0 V on 9 of 18 layers). Only where the extra bytes stay within
/// [`WIDEN_MAX_EXTRA_BYTES_PER_LAYER`] and each widened tensor still fits one binding of
/// `max_binding_bytes` (the fused matvec binds each weight whole).
pub fn widenings(
    config: &Config,
    header: &Header,
    max_binding_bytes: u64,
) -> Vec<(String, GgmlType)> {
    let mut out = Vec::new();
    for l in 0..config.n_layers {
        let names = ["attn_q", "attn_k", "attn_v"].map(|t| format!("blk.{l}.{t}.weight"));
        let Some(qkv) = names
            .iter()
            .map(|n| header.tensor(n))
            .collect::<Option<Vec<_>>>()
        else {
            continue; // phi3's stacked attn_qkv: one type already
        };
        let target = qkv.iter().map(|t| t.ty).find(|&to| {
            qkv.iter()
                .all(|t| t.ty == to || crate::gguf::is_lossless_widening(t.ty, to))
        });
        let Some(to) = target.filter(|&to| qkv.iter().any(|t| t.ty != to)) else {
            continue;
        };
        let sizes: Option<Vec<u64>> = qkv.iter().map(|t| widened_size(t, to)).collect();
        let Some(sizes) = sizes else { continue };
        let extra: u64 = sizes
            .iter()
            .zip(&qkv)
            .map(|(w, t)| w.saturating_sub(t.n_bytes))
            .sum();
        if extra <= WIDEN_MAX_EXTRA_BYTES_PER_LAYER && sizes.iter().all(|&b| b <= max_binding_bytes)
        {
            out.extend(
                qkv.iter()
                    .filter(|t| t.ty != to)
                    .map(|t| (t.name.clone(), to)),
            );
        }
    }
    out
}

/// The bytes of tensor `t` stored as `to` (None where its rows aren't whole `to` blocks, or the
/// size overflows: a hostile header's dimensions).
fn widened_size(t: &TensorInfo, to: GgmlType) -> Option<u64> {
    to.bytes_for(t.row_len())?.checked_mul(t.n_rows())
}

/// The GPU bytes that `widened` (from [`widenings`]) adds to the file's tensor bytes.
pub fn widening_extra_bytes(header: &Header, widened: &[(String, GgmlType)]) -> u64 {
    widened
        .iter()
        .filter_map(|(name, to)| {
            let t = header.tensor(name)?;
            Some(widened_size(t, *to)?.saturating_sub(t.n_bytes))
        })
        .sum()
}

impl Weights {
    /// Takes the loaded tensors by name. `Config::from_gguf` already checked presence and
    /// shapes, so a missing tensor here is reported, not assumed away.
    pub fn from_tensors(
        config: &Config,
        mut tensors: HashMap<String, GpuTensor>,
        rope_factors: RopeFactors,
    ) -> Result<Weights, ConfigError> {
        let mut take = |name: String| {
            tensors.remove(&name).ok_or(ConfigError::Tensor {
                name,
                why: "missing after load".into(),
            })
        };
        let gemma = config.post_norms;
        let mut layers = Vec::with_capacity(config.n_layers as usize);
        for l in 0..config.n_layers {
            let b = |s: &str| format!("blk.{l}.{s}");
            layers.push(LayerWeights {
                attn_norm: take(b("attn_norm.weight"))?,
                wq: take(b("attn_q.weight"))?,
                wk: take(b("attn_k.weight"))?,
                wv: take(b("attn_v.weight"))?,
                wo: take(b("attn_output.weight"))?,
                bq: if config.qkv_bias {
                    Some(take(b("attn_q.bias"))?)
                } else {
                    None
                },
                bk: if config.qkv_bias {
                    Some(take(b("attn_k.bias"))?)
                } else {
                    None
                },
                bv: if config.qkv_bias {
                    Some(take(b("attn_v.bias"))?)
                } else {
                    None
                },
                q_norm: if config.qk_norm {
                    Some(take(b("attn_q_norm.weight"))?)
                } else {
                    None
                },
                k_norm: if config.qk_norm {
                    Some(take(b("attn_k_norm.weight"))?)
                } else {
                    None
                },
                post_attn_norm: if gemma {
                    Some(take(b("post_attention_norm.weight"))?)
                } else {
                    None
                },
                ffn_norm: take(b("ffn_norm.weight"))?,
                w_gate: take(b("ffn_gate.weight"))?,
                w_up: take(b("ffn_up.weight"))?,
                w_down: take(b("ffn_down.weight"))?,
                post_ffn_norm: if gemma {
                    Some(take(b("post_ffw_norm.weight"))?)
                } else {
                    None
                },
            });
        }
        Ok(Weights {
            token_embd: take("token_embd.weight".into())?,
            output_norm: take("output_norm.weight".into())?,
            output: if config.tied_embeddings {
                None
            } else {
                Some(take("output.weight".into())?)
            },
            layers,
            rope_factors,
        })
    }

    /// The matrix that maps the final hidden state to logits.
    pub fn lm_head(&self) -> &GpuTensor {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
