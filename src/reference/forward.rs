//! A plain f32 CPU forward pass for every architecture, readable like llama2.c: the whole
//! sequence at once, no cache, weights dequantized to f32 with `reference::quant`. Tests
//! compare the GPU forward against it; it is itself compared against Hugging Face goldens.

use std::collections::HashMap;

use crate::gguf::Header;
use crate::kernels::attention::AttentionShape;
use crate::kernels::elementwise;
use crate::kernels::rope::{RopeLayout, Rotary};
use crate::model::{Activation, Config, RopeFactors, RopeStyle, ROPE_FACTOR_TENSORS};

use super::matmul::{get_rows, matmul};
use super::ops::{add, attention, glu, rms_norm, rope, softcap};

/// Every tensor dequantized to f32, by name.
pub struct CpuModel {
    pub config: Config,
    pub header: Header,
    tensors: HashMap<String, Vec<f32>>,
}

impl CpuModel {
    /// Reads and dequantizes a whole GGUF file (for test-sized models and the 270M default).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn load(path: &std::path::Path) -> Result<CpuModel, String> {
        use super::quant::dequantize;
        use crate::gguf::Event;
        use crate::model::fused_pieces;
        let mut raw: Vec<Vec<u8>> = Vec::new();
        let header = crate::gguf::read_path(path, &mut |e| match e {
            Event::Header(h) => {
                raw = h
                    .tensors
                    .iter()
                    .map(|t| Vec::with_capacity(t.n_bytes as usize))
                    .collect()
            }
            Event::TensorBytes { index, bytes, .. } => raw[index].extend_from_slice(bytes),
            Event::TensorDone { .. } => {}
        })
        .map_err(|e| e.to_string())?;
        let config = Config::from_gguf(&header).map_err(|e| e.to_string())?;
        let mut tensors = HashMap::new();
        for (info, bytes) in header.tensors.iter().zip(raw) {
            let mut values = dequantize(info.ty, &bytes, info.n_elements() as usize)
                .map_err(|e| format!("{}: {e}", info.name))?;
            // Phi-3's fused Q/K/V and gate/up tensors, split into their row ranges by name as
            // the GPU loader does.
            match fused_pieces(&config, &info.name) {
                Some(pieces) => {
                    let row = info.row_len() as usize;
                    for (name, rows) in pieces {
                        let rest = values.split_off(rows as usize * row);
                        tensors.insert(name, std::mem::replace(&mut values, rest));
                    }
                }
                None => {
                    tensors.insert(info.name.clone(), values);
                }
            }
        }
        Ok(CpuModel {
            config,
            header,
            tensors,
        })
    }

    fn w(&self, name: &str) -> &[f32] {
        self.tensors
            .get(name)
            .map(|v| v.as_slice())
            .unwrap_or_else(|| panic!("reference forward: missing tensor {name}"))
    }

    fn opt(&self, name: &str) -> Option<&[f32]> {
        self.tensors.get(name).map(|v| v.as_slice())
    }

    /// Logits `[ids.len(), vocab]` for every position (teacher forcing), as a session holding
    /// exactly these positions computes them (which LongRoPE factor set applies: HF's rule,
    /// by sequence length).
    pub fn forward(&self, ids: &[u32]) -> Vec<f32> {
        self.forward_in_context(ids, ids.len() as u32)
    }

    /// [`CpuModel::forward`] as a session of `context` positions computes it: LongRoPE's
    /// long factors when `context` exceeds the original context (llama.cpp's rule).
    pub fn forward_in_context(&self, ids: &[u32], context: u32) -> Vec<f32> {
        let c = &self.config;
        let (t, dim, hd) = (ids.len(), c.dim as usize, c.head_dim as usize);
        let (heads, kv_heads, ffn) = (
            c.n_heads as usize,
            c.n_kv_heads as usize,
            c.ffn_dim as usize,
        );
        let rotary = Rotary {
            layout: match c.rope_style {
                RopeStyle::Normal => RopeLayout::Normal,
                RopeStyle::Neox => RopeLayout::Neox,
            },
            dims: c.rope_dims,
            scale: c.rope_attn_factor,
        };
        let act = match c.activation {
            Activation::Silu => elementwise::Activation::Silu,
            Activation::GeluTanh => elementwise::Activation::GeluTanh,
        };
        let gemma = c.post_norms;
        let factors = RopeFactors::from_named(
            ROPE_FACTOR_TENSORS
                .iter()
                .filter_map(|n| Some((n.to_string(), self.opt(n)?.to_vec())))
                .collect(),
        );
        let freq_factors = factors.for_context(c, context);
        let eps = c.rms_eps;

        // token embeddings (× √dim for gemma)
        let mut x = get_rows(self.w("token_embd.weight"), dim, ids, c.embed_scale);
        for l in 0..c.n_layers as usize {
            let b = |s: &str| format!("blk.{l}.{s}");
            // attention norm
            let xn = rms_norm(&x, self.w(&b("attn_norm.weight")), t, dim, eps);
            // Q, K, V (+ qwen2 biases)
            let mut q = matmul(self.w(&b("attn_q.weight")), &xn, heads * hd, dim, t);
            let mut k = matmul(self.w(&b("attn_k.weight")), &xn, kv_heads * hd, dim, t);
            let mut v = matmul(self.w(&b("attn_v.weight")), &xn, kv_heads * hd, dim, t);
            for (m, bias) in [
                (&mut q, "attn_q.bias"),
                (&mut k, "attn_k.bias"),
                (&mut v, "attn_v.bias"),
            ] {
                if let Some(bias) = self.opt(&b(bias)) {
                    for row in m.chunks_mut(bias.len()) {
                        add(row, bias);
                    }
                }
            }
            // gemma3, qwen3: per-head RMSNorm of Q and K
            if c.qk_norm {
                q = rms_norm(&q, self.w(&b("attn_q_norm.weight")), t * heads, hd, eps);
                k = rms_norm(&k, self.w(&b("attn_k_norm.weight")), t * kv_heads, hd, eps);
            }
            // RoPE (not on smollm3's NoPE layers; on the first rope_dims of each head, cos and
            // sin times LongRoPE's attention factor)
            if c.uses_rope(l as u32) {
                let inv_freq = c.inv_freq(l as u32, freq_factors);
                rope(&mut q, &inv_freq, t, heads, hd, 0, rotary);
                rope(&mut k, &inv_freq, t, kv_heads, hd, 0, rotary);
            }
            // causal attention (sliding window on gemma's local layers, scores soft-capped on gemma2)
            let shape = AttentionShape {
                t: t as u32,
                heads: c.n_heads,
                kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                pos0: 0,
                window: c.window(l as u32),
                scale: c.attn_scale,
                softcap: c.attn_softcap.unwrap_or(0.0),
            };
            let att = attention(&q, &k, &v, &shape);
            // output projection (+ gemma post-norm) and residual
            let mut o = matmul(self.w(&b("attn_output.weight")), &att, dim, heads * hd, t);
            if gemma {
                o = rms_norm(&o, self.w(&b("post_attention_norm.weight")), t, dim, eps);
            }
            // granite: the branch × residual_scale (1 elsewhere)
            o.iter_mut().for_each(|v| *v *= c.residual_scale);
            add(&mut x, &o);
            // FFN norm, gated FFN, (+ gemma post-norm) and residual
            let xn = rms_norm(&x, self.w(&b("ffn_norm.weight")), t, dim, eps);
            let gate = matmul(self.w(&b("ffn_gate.weight")), &xn, ffn, dim, t);
            let up = matmul(self.w(&b("ffn_up.weight")), &xn, ffn, dim, t);
            let h = glu(&gate, &up, act);
            let mut down = matmul(self.w(&b("ffn_down.weight")), &h, dim, ffn, t);
            if gemma {
                down = rms_norm(&down, self.w(&b("post_ffw_norm.weight")), t, dim, eps);
            }
            down.iter_mut().for_each(|v| *v *= c.residual_scale);
            add(&mut x, &down);
        }
        // final norm and logits (soft-capped on gemma2)
        let xn = rms_norm(&x, self.w("output_norm.weight"), t, dim, eps);
        let head = self
            .opt("output.weight")
            .unwrap_or_else(|| self.w("token_embd.weight"));
        let mut logits = matmul(head, &xn, c.vocab_size as usize, dim, t);
        // granite: ÷ logit_scale (as the GPU product: × its reciprocal), then gemma2's cap
        let inv = 1.0 / c.logit_scale;
        logits.iter_mut().for_each(|v| *v *= inv);
        if let Some(cap) = c.final_softcap {
            logits
                .iter_mut()
                .for_each(|z| *z = softcap(*z as f64, cap) as f32);
        }
        logits
    }
}
