//! A plain f32 CPU forward pass for every architecture, readable like llama2.c: the whole
//! sequence at once, no cache, weights dequantized to f32 with `reference::quant`. Tests
//! compare the GPU forward against it; it is itself compared against Hugging Face goldens.

use std::collections::HashMap;

use crate::gguf::Header;
use crate::kernels::attention::AttentionShape;
use crate::kernels::elementwise;
use crate::kernels::rope::RopeLayout;
use crate::model::{Activation, Arch, Config, RopeStyle};

use super::matmul::{get_rows, matmul};
use super::ops::{add, attention, glu, rms_norm, rope};

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
            let values = dequantize(info.ty, &bytes, info.n_elements() as usize)
                .map_err(|e| format!("{}: {e}", info.name))?;
            tensors.insert(info.name.clone(), values);
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

    /// Logits `[ids.len(), vocab]` for every position (teacher forcing).
    pub fn forward(&self, ids: &[u32]) -> Vec<f32> {
        let c = &self.config;
        let (t, dim, hd) = (ids.len(), c.dim as usize, c.head_dim as usize);
        let (heads, kv_heads, ffn) = (
            c.n_heads as usize,
            c.n_kv_heads as usize,
            c.ffn_dim as usize,
        );
        let layout = match c.rope_style {
            RopeStyle::Normal => RopeLayout::Normal,
            RopeStyle::Neox => RopeLayout::Neox,
        };
        let act = match c.activation {
            Activation::Silu => elementwise::Activation::Silu,
            Activation::GeluTanh => elementwise::Activation::GeluTanh,
        };
        let gemma = c.arch == Arch::Gemma3;
        let freq_factors = self.opt("rope_freqs.weight");
        let eps = c.rms_eps;

        // token embeddings (× √dim for gemma3)
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
            // RoPE (not on smollm3's NoPE layers)
            if c.uses_rope(l as u32) {
                let inv_freq = c.inv_freq(l as u32, freq_factors);
                rope(&mut q, &inv_freq, t, heads, hd, 0, layout);
                rope(&mut k, &inv_freq, t, kv_heads, hd, 0, layout);
            }
            // causal attention (sliding window on gemma3's local layers)
            let shape = AttentionShape {
                t: t as u32,
                heads: c.n_heads,
                kv_heads: c.n_kv_heads,
                head_dim: c.head_dim,
                pos0: 0,
                window: c.window(l as u32),
                scale: c.attn_scale,
            };
            let att = attention(&q, &k, &v, &shape);
            // output projection (+ gemma3 post-norm) and residual
            let mut o = matmul(self.w(&b("attn_output.weight")), &att, dim, heads * hd, t);
            if gemma {
                o = rms_norm(&o, self.w(&b("post_attention_norm.weight")), t, dim, eps);
            }
            // granite: the branch × residual_scale (1 elsewhere)
            o.iter_mut().for_each(|v| *v *= c.residual_scale);
            add(&mut x, &o);
            // FFN norm, gated FFN, (+ gemma3 post-norm) and residual
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
        // final norm and logits
        let xn = rms_norm(&x, self.w("output_norm.weight"), t, dim, eps);
        let head = self
            .opt("output.weight")
            .unwrap_or_else(|| self.w("token_embd.weight"));
        let mut logits = matmul(head, &xn, c.vocab_size as usize, dim, t);
        // granite: ÷ logit_scale (as the GPU product: × its reciprocal)
        let inv = 1.0 / c.logit_scale;
        logits.iter_mut().for_each(|v| *v *= inv);
        logits
    }
}
