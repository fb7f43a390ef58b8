//! The GPU weights of a model, by role, at the file's bits per weight (see `gpu::GpuTensor`).
//!
//! Shapes are GGUF's: a matrix `[K, N]` is N rows of K elements; `x · Wᵀ` maps K → N.

use std::collections::HashMap;

use crate::gpu::GpuTensor;

use super::{Config, ConfigError};

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
    /// Llama 3 `rope_freqs.weight` `[head_dim/2]`, kept on the CPU to build inverse frequencies.
    pub rope_freq_factors: Option<Vec<f32>>,
}

impl Weights {
    /// Takes the loaded tensors by name. `Config::from_gguf` already checked presence and
    /// shapes, so a missing tensor here is reported, not assumed away.
    pub fn from_tensors(
        config: &Config,
        mut tensors: HashMap<String, GpuTensor>,
        rope_freq_factors: Option<Vec<f32>>,
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
            rope_freq_factors,
        })
    }

    /// The matrix that maps the final hidden state to logits.
    pub fn lm_head(&self) -> &GpuTensor {
        self.output.as_ref().unwrap_or(&self.token_embd)
    }
}
