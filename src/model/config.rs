//! Typed hyperparameters per architecture, read from GGUF metadata and checked against the
//! tensor shapes before any weight is downloaded.

use crate::gguf::{GgmlType, Header, MetadataError};

/// Architectures coco runs. Anything else is refused before the weights are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    /// Llama 2/3.x, Mistral, TinyLlama, SmolLM2.
    Llama,
    /// Qwen2 / Qwen2.5: llama plus Q/K/V biases and NeoX RoPE.
    Qwen2,
    /// Qwen3 (dense): qwen2 without the Q/K/V biases, plus a per-head RMSNorm on Q and K
    /// before RoPE; its head size may differ from dim / heads (`qwen3.attention.key_length`).
    Qwen3,
    /// Gemma 2: sandwich norms, GELU-tanh, sliding and global layers alternating, attention
    /// and final logit soft-capping; no per-head Q/K norms.
    Gemma2,
    /// SmolLM3: llama (permuted Q/K, normal RoPE) with no RoPE on every 4th layer
    /// ([`Config::uses_rope`]).
    Smollm3,
    /// IBM Granite (3.x dense): llama with four scalar multipliers on the embeddings, the
    /// attention scores, each residual branch and the logits.
    Granite,
    /// Gemma 3: sandwich norms, per-head Q/K norms, GELU-tanh, local/global attention.
    Gemma3,
    /// Phi-3 / Phi-3.5 (llama.cpp `LLM_ARCH_PHI3`, HF `Phi3ForCausalLM`): llama's graph with
    /// NeoX RoPE, Q/K/V stacked in one `attn_qkv` tensor and gate/up in one `ffn_up` (split
    /// into separate GPU tensors while they load: `weights::fused_pieces`), and LongRoPE's
    /// long/short per-frequency factors ([`LongRope`]).
    Phi3,
}

pub const SUPPORTED_ARCHS: &str = "llama, qwen2, qwen3, smollm3, granite, gemma2, gemma3, phi3";

impl Arch {
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma2 => "gemma2",
            Arch::Smollm3 => "smollm3",
            Arch::Granite => "granite",
            Arch::Gemma3 => "gemma3",
            Arch::Phi3 => "phi3",
        }
    }

    /// Gemma 2 and 3: sandwich norms (`post_attention_norm`, `post_ffw_norm`), embeddings
    /// scaled by √dim, GELU-tanh, sliding-window layers.
    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }
}

/// How RoPE pairs dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Adjacent pairs (2i, 2i+1). llama, smollm3 and granite GGUFs use this because the
    /// converter permutes Q/K.
    Normal,
    /// Halves (i, i + d/2), as HF's `rotate_half`. qwen2, qwen3 and gemma3.
    Neox,
}

/// Frequency scaling on top of `base^(-2i/d)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RopeScaling {
    None,
    /// Positions divided by `factor` (HF "linear").
    Linear {
        factor: f32,
    },
    /// Llama 3.1+ per-band scaling (HF `_compute_llama3_parameters`).
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: u32,
    },
}

/// LongRoPE (Phi-3 128k / Phi-3.5): the file carries two sets of per-frequency divisors,
/// `rope_factors_long.weight` and `rope_factors_short.weight` (`[rope_dims / 2]`, applied like
/// llama3's `rope_freqs.weight`), and an attention factor that scales RoPE's cos and sin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LongRope {
    /// `{arch}.rope.scaling.original_context_length` (llama.cpp `n_ctx_orig_yarn`, HF
    /// `original_max_position_embeddings`): a session holding more positions than this uses
    /// the long factors, any other the short ones (llama.cpp `llama_model::get_rope_factors`).
    /// HF switches by the length of the sequence instead (`longrope_frequency_update`); the
    /// two agree on every prompt that fits the original context, which the goldens are.
    pub original_context: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    Silu,
    GeluTanh,
}

/// Why a file's config is refused: either a valid file asking for something coco can't run
/// yet ([`ConfigError::is_not_yet`]), or a broken file, which no GPU would change.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("not yet: architecture `{0}`; supported: {SUPPORTED_ARCHS}")]
    UnsupportedArch(String),
    /// A valid value outside what coco supports (a head size, partial RoPE, …).
    #[error("not yet: {0}")]
    NotYet(String),
    /// A valid tensor in a form coco can't read yet.
    #[error("tensor `{name}`: not yet: {why}")]
    TensorNotYet { name: String, why: String },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// A tensor the architecture needs is missing or has the wrong shape.
    #[error("tensor `{name}`: {why}")]
    Tensor { name: String, why: String },
    /// Values that contradict each other or any real model.
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// A supported-later feature, as opposed to a broken file.
    pub fn is_not_yet(&self) -> bool {
        matches!(
            self,
            ConfigError::UnsupportedArch(_)
                | ConfigError::NotYet(_)
                | ConfigError::TensorNotYet { .. }
        )
    }
}

/// Hyperparameters, one dimension order everywhere: `[tokens, heads, head_dim]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub arch: Arch,
    pub n_layers: u32,
    /// Residual stream width.
    pub dim: u32,
    pub n_heads: u32,
    pub n_kv_heads: u32,
    pub head_dim: u32,
    /// Dimensions of each Q/K head that RoPE rotates (`{arch}.rope.dimension_count`, llama.cpp
    /// `n_rot`): the head size, or fewer (Phi-4-mini: 96 of 128), the rest passing through.
    pub rope_dims: u32,
    pub ffn_dim: u32,
    pub vocab_size: u32,
    /// Trained context length (metadata); the session may use less.
    pub context_length: u32,
    pub rms_eps: f32,
    pub rope_style: RopeStyle,
    pub rope_base: f32,
    /// The base of the sliding-window layers: Gemma 3's own (10k); the global base elsewhere.
    pub rope_base_local: f32,
    pub rope_scaling: RopeScaling,
    /// Gemma's sliding-window layers see this many most recent keys (including their own).
    pub sliding_window: Option<u32>,
    /// Layer `l` is global (full causal attention) when `(l + 1) % sliding_period == 0`, the
    /// others slide: Gemma 3 6 (5 local per global), Gemma 2 2 (even layers slide). 0: no
    /// sliding layers.
    pub sliding_period: u32,
    /// Gemma 2: attention scores ← cap·tanh(score / cap) after the query scale, before the
    /// mask and softmax (`gemma2.attn_logit_softcapping`).
    pub attn_softcap: Option<f32>,
    /// Gemma 2: logits ← cap·tanh(logits / cap) after the LM head, before any sampling
    /// (`gemma2.final_logit_softcapping`).
    pub final_softcap: Option<f32>,
    pub activation: Activation,
    /// Multiplier on q·k.
    pub attn_scale: f32,
    /// Multiplier on the embedding rows (Gemma: √dim; granite: `embedding_scale`).
    pub embed_scale: f32,
    /// Multiplier on each residual branch (W_o's and W_down's outputs) before it is added:
    /// granite's `residual_scale`, else 1.
    pub residual_scale: f32,
    /// The logits are divided by this: granite's `logit_scale`, else 1.
    pub logit_scale: f32,
    pub qkv_bias: bool,
    /// A per-head RMSNorm (`blk.N.attn_q_norm` / `attn_k_norm`, `[head_dim]`) on Q and K
    /// before RoPE: gemma3 and qwen3.
    pub qk_norm: bool,
    /// Gemma's sandwich norms: a post-norm on the attention and the FFN output before each
    /// residual add (`post_attention_norm`, `post_ffw_norm`).
    pub post_norms: bool,
    /// No `output.weight`: logits use `token_embd.weight`.
    pub tied_embeddings: bool,
    /// Llama 3: a `rope_freqs.weight` tensor divides each frequency.
    pub rope_freq_factors: bool,
    /// Phi-3: long and short factor tensors, chosen by the session's context.
    pub long_rope: Option<LongRope>,
    /// Phi-3: LongRoPE's attention factor (`{arch}.rope.scaling.attn_factor`, 1 when absent),
    /// which multiplies RoPE's cos and sin for Q and K alike (HF `attention_scaling`, ggml
    /// rope's `attn_factor`), in the RoPE kernels (`kernels::rope::Rotary::scale`): with
    /// partial rotation the pass-through dimensions are not scaled, so it can't be folded into
    /// the attention scale.
    pub rope_attn_factor: f32,
    /// SmolLM3: layer l runs without RoPE ("NoPE") when (l + 1) is a multiple of this.
    pub no_rope_layer_step: Option<u32>,
}

impl Config {
    /// Reads and validates the config. Fails with "not yet: architecture X" for anything
    /// coco can't run, before any tensor data is touched.
    pub fn from_gguf(header: &Header) -> Result<Config, ConfigError> {
        let md = &header.metadata;
        let arch_name = md.str("general.architecture")?;
        let arch = match arch_name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "gemma2" => Arch::Gemma2,
            "smollm3" => Arch::Smollm3,
            "granite" => Arch::Granite,
            "gemma3" => Arch::Gemma3,
            "phi3" => Arch::Phi3,
            other => return Err(ConfigError::UnsupportedArch(other.to_string())),
        };
        let key = |k: &str| format!("{arch_name}.{k}");
        let n_layers = md.u32(&key("block_count"))?;
        let dim = md.u32(&key("embedding_length"))?;
        let n_heads = md.u32(&key("attention.head_count"))?;
        let n_kv_heads = md
            .opt_u32(&key("attention.head_count_kv"))?
            .unwrap_or(n_heads);
        let ffn_dim = md.u32(&key("feed_forward_length"))?;
        let context_length = md.opt_u32(&key("context_length"))?.unwrap_or(2048);
        // Bounds far above any real model keep every product below in u32/u64 range.
        for (name, value, max) in [
            ("block_count", n_layers, 1024),
            ("embedding_length", dim, 1 << 16),
            ("attention.head_count", n_heads, 1024),
            ("attention.head_count_kv", n_kv_heads, 1024),
            ("feed_forward_length", ffn_dim, 1 << 20),
        ] {
            if value == 0 || value > max {
                return Err(ConfigError::Invalid(format!(
                    "{arch_name}.{name} = {value} is outside 1..={max}"
                )));
            }
        }
        if n_heads % n_kv_heads != 0 {
            return Err(ConfigError::Invalid(format!(
                "head counts {n_heads}/{n_kv_heads}: query heads must be a positive multiple of KV heads"
            )));
        }
        // `{arch}.attention.key_length` (llama.cpp's converter writes it from HF's `head_dim`
        // where the config has one: Qwen3 and Gemma 3 heads are not dim / heads wide).
        let head_dim = md
            .opt_u32(&key("attention.key_length"))?
            .unwrap_or(dim / n_heads);
        let v_dim = md
            .opt_u32(&key("attention.value_length"))?
            .unwrap_or(head_dim);
        if v_dim != head_dim {
            return Err(ConfigError::NotYet(format!(
                "value head size {v_dim} ≠ key head size {head_dim}"
            )));
        }
        // The attention kernels read heads as vec4 (kernels::attention); refusing other sizes
        // here puts them in the capability report instead of failing the first forward.
        if head_dim == 0 || head_dim % 4 != 0 || head_dim > 256 {
            return Err(ConfigError::NotYet(format!(
                "head size {head_dim} (supported: multiples of 4, ≤ 256)"
            )));
        }
        // `{arch}.rope.dimension_count` (llama.cpp n_rot): rotated dimensions per head, in
        // pairs; fewer than the head size rotate partially (Phi-4-mini: 96 of 128, HF
        // `partial_rotary_factor` 0.75). Absent: the whole head, as llama.cpp defaults it.
        let rope_dims = md
            .opt_u32(&key("rope.dimension_count"))?
            .unwrap_or(head_dim);
        if rope_dims == 0 || rope_dims % 2 != 0 || rope_dims > head_dim {
            return Err(ConfigError::Invalid(format!(
                "{arch_name}.rope.dimension_count = {rope_dims}: RoPE rotates an even number of \
                 dimensions, at most the head size {head_dim}"
            )));
        }
        let rms_eps = md.f32(&key("attention.layer_norm_rms_epsilon"))?;
        let token_embd = header
            .tensor("token_embd.weight")
            .ok_or_else(|| ConfigError::Tensor {
                name: "token_embd.weight".into(),
                why: "missing".into(),
            })?;
        let vocab_size = u32::try_from(token_embd.n_rows()).map_err(|_| ConfigError::Tensor {
            name: "token_embd.weight".into(),
            why: "too many rows".into(),
        })?;
        let tied_embeddings = header.tensor("output.weight").is_none();

        let (rope_style, activation, default_base) = match arch {
            Arch::Llama => (RopeStyle::Normal, Activation::Silu, 10_000.0),
            Arch::Qwen2 => (RopeStyle::Neox, Activation::Silu, 10_000.0),
            // HF Qwen3Config: rope_theta 10000 by default (the released models store 1e6 in
            // `qwen3.rope.freq_base`); llama.cpp runs LLM_ARCH_QWEN3 with NeoX RoPE.
            Arch::Qwen3 => (RopeStyle::Neox, Activation::Silu, 10_000.0),
            // HF Gemma2Config: rope_theta 10000; llama.cpp's converter writes no
            // `gemma2.rope.freq_base`, so the released files rely on this default.
            Arch::Gemma2 => (RopeStyle::Neox, Activation::GeluTanh, 10_000.0),
            // llama.cpp runs LLM_ARCH_SMOLLM3 with normal RoPE (llama_model_rope_type) because
            // its converter (SmolLM3Model, a LlamaModel) permutes Q/K as for llama; without
            // `smollm3.rope.freq_base` it takes its general default 10000, as for llama (the
            // converter always writes the key; HF's SmolLM3Config default would be 2e6).
            Arch::Smollm3 => (RopeStyle::Normal, Activation::Silu, 10_000.0),
            // Granite's converter is a LlamaModel too (permuted Q/K; llama.cpp: normal RoPE).
            Arch::Granite => (RopeStyle::Normal, Activation::Silu, 10_000.0),
            Arch::Gemma3 => (RopeStyle::Neox, Activation::GeluTanh, 1_000_000.0),
            // llama.cpp runs LLM_ARCH_PHI3 with NeoX RoPE (HF Phi3 `rotate_half`); the
            // converter does not permute Q/K. HF Phi3Config: rope_theta 10000.
            Arch::Phi3 => (RopeStyle::Neox, Activation::Silu, 10_000.0),
        };
        let rope_base = md.opt_f32(&key("rope.freq_base"))?.unwrap_or(default_base);
        let rope_scaling = read_rope_scaling(header, arch_name)?;

        let (sliding_window, rope_base_local, attn_scale, embed_scale) = match arch {
            Arch::Gemma2 => {
                // HF Gemma2Config: sliding_window 4096 by default (also llama.cpp's n_swa).
                let window = md
                    .opt_u32(&key("attention.sliding_window"))?
                    .unwrap_or(4096);
                // llama.cpp reads `rope.freq_base_swa` for gemma2's sliding layers; HF Gemma 2
                // has one base for every layer, so a different one is refused.
                if let Some(swa) = md.opt_f32(&key("rope.freq_base_swa"))? {
                    if swa != rope_base {
                        return Err(ConfigError::NotYet(format!(
                            "gemma2 with a sliding-layer RoPE base {swa} ≠ {rope_base}"
                        )));
                    }
                }
                (
                    Some(window),
                    rope_base,
                    gemma2_query_scalar(n_layers, dim, n_heads, head_dim)?.powf(-0.5),
                    (dim as f32).sqrt(),
                )
            }
            Arch::Gemma3 => {
                // HF Gemma3TextConfig: sliding_window 4096 default, rope_local_base_freq 10000.
                let window = md
                    .opt_u32(&key("attention.sliding_window"))?
                    .unwrap_or(4096);
                // HF scales queries by query_pre_attn_scalar^-0.5. GGUF doesn't store it; like
                // llama.cpp, use head_dim except for the 27B (62 layers), where it is dim/heads.
                let scalar = if n_layers == 62 {
                    dim as f32 / n_heads as f32
                } else {
                    head_dim as f32
                };
                (
                    Some(window),
                    10_000.0,
                    scalar.powf(-0.5),
                    (dim as f32).sqrt(),
                )
            }
            Arch::Granite => {
                // llama.cpp (src/models/granite.cpp): 0 or absent means 1/√head_dim resp. 1.
                let attn = read_multiplier(md, &key("attention.scale"))?;
                let embed = read_multiplier(md, &key("embedding_scale"))?;
                (
                    None,
                    rope_base,
                    attn.unwrap_or((head_dim as f32).powf(-0.5)),
                    embed.unwrap_or(1.0),
                )
            }
            // Phi-3 configs carry `sliding_window` (2047 for Phi-3-mini-4k), written as
            // `phi3.attention.sliding_window`; llama.cpp reads it and then runs full causal
            // attention ("Phi SWA is currently disabled", llama_model_phi3::load_arch_hparams),
            // and so does coco: the window is not applied. Up to the window's length the two
            // are the same computation.
            _ => (None, rope_base, (head_dim as f32).powf(-0.5), 1.0),
        };
        if let Some(0) = sliding_window {
            return Err(ConfigError::Invalid(format!(
                "{arch_name}.attention.sliding_window = 0"
            )));
        }
        let sliding_period = match arch {
            Arch::Gemma2 => {
                // llama.cpp's gemma2 takes `attention.sliding_window_pattern` when present
                // (a period or a per-layer array); HF Gemma 2 always alternates, period 2.
                if md.contains(&key("attention.sliding_window_pattern")) {
                    match md.opt_u32(&key("attention.sliding_window_pattern")) {
                        Ok(Some(2)) => {}
                        _ => {
                            return Err(ConfigError::NotYet(format!(
                                "{arch_name}.attention.sliding_window_pattern other than 2 \
                                 (Gemma 2 alternates sliding and global layers)"
                            )))
                        }
                    }
                }
                2
            }
            Arch::Gemma3 => 6,
            _ => 0,
        };
        // Gemma 2's soft-caps (llama.cpp `%s.attn_logit_softcapping`,
        // `%s.final_logit_softcapping`, written by its converter from HF's config; when absent,
        // HF's and llama.cpp's defaults 50 and 30).
        let (attn_softcap, final_softcap) = match arch {
            Arch::Gemma2 => {
                let cap = |k: &str, default: f32| -> Result<Option<f32>, ConfigError> {
                    let v = md.opt_f32(&key(k))?.unwrap_or(default);
                    if !(v.is_finite() && v > 0.0 && v <= 1e6) {
                        return Err(ConfigError::Invalid(format!(
                            "{arch_name}.{k} = {v} is outside (0, 1e6]"
                        )));
                    }
                    Ok(Some(v))
                };
                (
                    cap("attn_logit_softcapping", 50.0)?,
                    cap("final_logit_softcapping", 30.0)?,
                )
            }
            _ => (None, None),
        };
        let (long_rope, rope_attn_factor) = read_long_rope(header, arch, context_length)?;
        let (residual_scale, logit_scale) = if arch == Arch::Granite {
            // `granite.logit_scale` is required by llama.cpp (HF `logits_scaling`, which
            // divides the logits); `granite.residual_scale` is optional (HF
            // `residual_multiplier`).
            let logit = read_multiplier(md, &key("logit_scale"))?
                .ok_or_else(|| MetadataError::Missing(key("logit_scale")))?;
            let residual = read_multiplier(md, &key("residual_scale"))?.unwrap_or(1.0);
            // llama.cpp: `rope.scaling.finetuned = false` switches RoPE off on every layer.
            if md.opt_bool(&key("rope.scaling.finetuned"))? == Some(false) {
                return Err(ConfigError::NotYet(format!(
                    "{} = false (granite without RoPE)",
                    key("rope.scaling.finetuned")
                )));
            }
            (residual, logit)
        } else {
            (1.0, 1.0)
        };

        let config = Config {
            arch,
            n_layers,
            dim,
            n_heads,
            n_kv_heads,
            head_dim,
            rope_dims,
            ffn_dim,
            vocab_size,
            context_length,
            rms_eps,
            rope_style,
            rope_base,
            rope_base_local,
            rope_scaling,
            sliding_window,
            sliding_period,
            attn_softcap,
            final_softcap,
            activation,
            attn_scale,
            embed_scale,
            residual_scale,
            logit_scale,
            qkv_bias: arch == Arch::Qwen2,
            qk_norm: matches!(arch, Arch::Qwen3 | Arch::Gemma3),
            post_norms: arch.is_gemma(),
            tied_embeddings,
            rope_freq_factors: header.tensor("rope_freqs.weight").is_some(),
            long_rope,
            rope_attn_factor,
            // No GGUF key carries the interval: llama.cpp's converter writes none of HF's
            // `no_rope_layers` / `no_rope_layer_interval`, and llama.cpp fixes
            // `n_no_rope_layer_step = 4` for LLM_ARCH_SMOLLM3 (src/models/smollm3.cpp), which is
            // HF SmolLM3Config's default: `no_rope_layers[i] = int((i + 1) % 4 != 0)`.
            no_rope_layer_step: (arch == Arch::Smollm3).then_some(4),
        };
        config.check_rope_pattern(header, &key("attention.rope_pattern"))?;
        config.check_tensors(header)?;
        Ok(config)
    }

    /// Whether `layer` attends through the sliding window. Gemma 3 interleaves 5 sliding
    /// layers with 1 global (HF `sliding_window_pattern = 6`: layer i is global when
    /// (i + 1) % 6 == 0); Gemma 2 alternates, from a sliding layer 0 (HF `layer_types`:
    /// sliding when (i + 1) % 2 != 0; llama.cpp's swa pattern 2).
    pub fn is_sliding_layer(&self, layer: u32) -> bool {
        self.sliding_period > 0 && !(layer + 1).is_multiple_of(self.sliding_period)
    }

    /// Whether `layer` rotates Q and K. SmolLM3's NoPE layers (every 4th: 3, 7, …) attend
    /// without positions (HF `SmolLM3Attention.use_rope`; llama.cpp `use_rope`).
    pub fn uses_rope(&self, layer: u32) -> bool {
        self.no_rope_layer_step
            .is_none_or(|step| !(layer + 1).is_multiple_of(step))
    }

    /// The attention window for `layer`: 0 = full causal attention.
    pub fn window(&self, layer: u32) -> u32 {
        if self.is_sliding_layer(layer) {
            self.sliding_window.unwrap_or(0)
        } else {
            0
        }
    }

    /// Inverse frequencies `[head_dim / 2]` for `layer`, with the model's scaling folded in.
    /// Computed in f32 like HF (`1 / base^(arange(0, d, 2) / d)` with d the rotated
    /// dimensions); the pairs past `rope_dims / 2` don't rotate and get 0.
    pub fn inv_freq(&self, layer: u32, freq_factors: Option<&[f32]>) -> Vec<f32> {
        let local = self.is_sliding_layer(layer);
        let base = if local {
            self.rope_base_local
        } else {
            self.rope_base
        };
        let d = self.rope_dims as usize;
        (0..self.head_dim as usize / 2)
            .map(|i| {
                if i >= d / 2 {
                    return 0.0;
                }
                let exponent = (2 * i) as f32 / d as f32;
                let mut f = 1.0 / base.powf(exponent);
                if let Some(factors) = freq_factors {
                    f /= factors.get(i).copied().unwrap_or(1.0);
                }
                if !local {
                    f = match self.rope_scaling {
                        RopeScaling::None => f,
                        RopeScaling::Linear { factor } => f / factor,
                        RopeScaling::Llama3 { .. } if freq_factors.is_some() => f,
                        RopeScaling::Llama3 {
                            factor,
                            low_freq_factor,
                            high_freq_factor,
                            original_context,
                        } => llama3_scale(
                            f,
                            factor,
                            low_freq_factor,
                            high_freq_factor,
                            original_context,
                        ),
                    };
                }
                f
            })
            .collect()
    }

    /// Bytes of one layer's K (or V) cache for `context` positions: `[context, kv_heads,
    /// head_dim]` f32.
    pub fn kv_layer_bytes(&self, context: u32) -> u64 {
        context as u64 * self.n_kv_heads as u64 * self.head_dim as u64 * 4
    }

    /// KV cache bytes for `context` positions (f32 K and V for every layer).
    pub fn kv_cache_bytes(&self, context: u32) -> u64 {
        2 * self.n_layers as u64 * self.kv_layer_bytes(context)
    }

    /// `{arch}.attention.rope_pattern` (llama.cpp's LLM_KV_ATTENTION_ROPE_PATTERN: one bool per
    /// layer, true = RoPE; its converter writes it from HF's `no_rope_layers` for granite_swa,
    /// for no architecture coco runs). A file that has one must agree with the layers the
    /// forward rotates ([`Config::uses_rope`]), or its pattern would be silently ignored.
    fn check_rope_pattern(&self, header: &Header, key: &str) -> Result<(), ConfigError> {
        if !header.metadata.contains(key) {
            return Ok(());
        }
        let values = header.metadata.array(key)?;
        if values.len() != self.n_layers as usize {
            return Err(ConfigError::Invalid(format!(
                "{key} has {} entries for {} layers",
                values.len(),
                self.n_layers
            )));
        }
        for (l, v) in values.iter().enumerate() {
            let rope = v.as_bool().ok_or_else(|| MetadataError::WrongType {
                key: key.to_string(),
                expected: "array of bool",
                found: v.type_name(),
            })?;
            if rope != self.uses_rope(l as u32) {
                let runs = match self.no_rope_layer_step {
                    Some(step) => format!("every layer but each {step}th"),
                    None => "every layer".to_string(),
                };
                return Err(ConfigError::NotYet(format!(
                    "{key}: layer {l} {} RoPE, but {} runs RoPE on {runs}",
                    if rope { "has" } else { "has no" },
                    self.arch.name()
                )));
            }
        }
        Ok(())
    }

    /// Checks every tensor the forward pass reads: present, and shaped as the config says.
    fn check_tensors(&self, header: &Header) -> Result<(), ConfigError> {
        let d = self.dim as u64;
        let q = self.n_heads as u64 * self.head_dim as u64;
        let kv = self.n_kv_heads as u64 * self.head_dim as u64;
        let f = self.ffn_dim as u64;
        let expect = |name: &str, dims: &[u64]| -> Result<(), ConfigError> {
            let t = header.tensor(name).ok_or_else(|| ConfigError::Tensor {
                name: name.to_string(),
                why: format!("missing (required by {})", self.arch.name()),
            })?;
            if t.dims != dims {
                return Err(ConfigError::Tensor {
                    name: name.to_string(),
                    why: format!(
                        "shape {:?} contradicts the metadata, which implies {:?}",
                        t.dims, dims
                    ),
                });
            }
            Ok(())
        };
        expect("token_embd.weight", &[d, self.vocab_size as u64])?;
        expect("output_norm.weight", &[d])?;
        if !self.tied_embeddings {
            expect("output.weight", &[d, self.vocab_size as u64])?;
        }
        // one factor per rotated pair (llama.cpp: `n_rot / 2`)
        let rotated_pairs = self.rope_dims as u64 / 2;
        if self.rope_freq_factors {
            expect("rope_freqs.weight", &[rotated_pairs])?;
        }
        if self.long_rope.is_some() {
            expect("rope_factors_long.weight", &[rotated_pairs])?;
            expect("rope_factors_short.weight", &[rotated_pairs])?;
        }
        for l in 0..self.n_layers {
            let b = |s: &str| format!("blk.{l}.{s}");
            expect(&b("attn_norm.weight"), &[d])?;
            // Phi-3: Q, K, V rows stacked in one tensor (llama.cpp's create_tensor_qkv also
            // takes them separate, and so does coco).
            if self.arch == Arch::Phi3 && header.tensor(&b("attn_qkv.weight")).is_some() {
                expect(&b("attn_qkv.weight"), &[d, q + 2 * kv])?;
            } else {
                expect(&b("attn_q.weight"), &[d, q])?;
                expect(&b("attn_k.weight"), &[d, kv])?;
                expect(&b("attn_v.weight"), &[d, kv])?;
            }
            expect(&b("attn_output.weight"), &[q, d])?;
            expect(&b("ffn_norm.weight"), &[d])?;
            if self.arch == Arch::Phi3 {
                // gate rows, then up rows (llama_model_phi3::load_arch_tensors: {n_embd, 2 n_ff})
                expect(&b("ffn_up.weight"), &[d, 2 * f])?;
            } else {
                expect(&b("ffn_gate.weight"), &[d, f])?;
                expect(&b("ffn_up.weight"), &[d, f])?;
            }
            expect(&b("ffn_down.weight"), &[f, d])?;
            if self.qkv_bias {
                expect(&b("attn_q.bias"), &[q])?;
                expect(&b("attn_k.bias"), &[kv])?;
                expect(&b("attn_v.bias"), &[kv])?;
            }
            if self.qk_norm {
                expect(&b("attn_q_norm.weight"), &[self.head_dim as u64])?;
                expect(&b("attn_k_norm.weight"), &[self.head_dim as u64])?;
            }
            if self.post_norms {
                expect(&b("post_attention_norm.weight"), &[d])?;
                expect(&b("post_ffw_norm.weight"), &[d])?;
            }
        }
        // Biases on an architecture that has none would be dropped silently: refuse them.
        if !self.qkv_bias {
            if let Some(t) = header
                .tensors
                .iter()
                .find(|t| t.name.ends_with("attn_q.bias"))
            {
                return Err(ConfigError::TensorNotYet {
                    name: t.name.clone(),
                    why: format!("Q/K/V biases on {}", self.arch.name()),
                });
            }
        }
        // Norms and biases are read as f32 vectors by the norm kernels.
        for t in &header.tensors {
            let vector = t.dims.len() == 1;
            if vector && t.ty != GgmlType::F32 {
                return Err(ConfigError::TensorNotYet {
                    name: t.name.clone(),
                    why: format!(
                        "1-D tensors of type {} (coco reads norms and biases as F32)",
                        t.ty
                    ),
                });
            }
        }
        Ok(())
    }
}

/// HF Gemma 2 scales queries by `query_pre_attn_scalar^-0.5`, a value GGUF doesn't carry.
/// llama.cpp (and Google's gemma_pytorch config) take `dim / heads` for the 27B (46 layers)
/// and the head size otherwise; the released 2B (26 layers) and 9B (42) use head_dim 256,
/// which is their `query_pre_attn_scalar`. Where head size and `dim / heads` agree there is
/// nothing to choose; any other shape is refused rather than guessed.
fn gemma2_query_scalar(
    n_layers: u32,
    dim: u32,
    n_heads: u32,
    head_dim: u32,
) -> Result<f32, ConfigError> {
    let per_head = dim / n_heads;
    if head_dim == per_head && dim.is_multiple_of(n_heads) {
        return Ok(head_dim as f32);
    }
    match n_layers {
        46 => Ok(dim as f32 / n_heads as f32),
        26 | 42 => Ok(head_dim as f32),
        _ => Err(ConfigError::NotYet(format!(
            "gemma2 query scale: head size {head_dim} ≠ dim / heads {per_head} on a \
             {n_layers}-layer model, and the file doesn't say which one HF's \
             query_pre_attn_scalar is (known: 26 and 42 layers head size, 46 layers dim / heads)"
        ))),
    }
}

/// A granite multiplier: absent or 0 is `None` (llama.cpp's "unset"), else finite and within
/// 1e-4..=1e4 (the released models: 0.0078125 to 16), which keeps every product finite.
fn read_multiplier(md: &crate::gguf::Metadata, key: &str) -> Result<Option<f32>, ConfigError> {
    match md.opt_f32(key)? {
        None => Ok(None),
        Some(0.0) => Ok(None),
        Some(v) if v.is_finite() && (1e-4..=1e4).contains(&v) => Ok(Some(v)),
        Some(v) => Err(ConfigError::Invalid(format!(
            "{key} = {v} is outside 1e-4..=1e4"
        ))),
    }
}

fn read_rope_scaling(header: &Header, arch: &str) -> Result<RopeScaling, ConfigError> {
    let md = &header.metadata;
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let kind = md.opt_str(&key("type"))?;
    let factor = md.opt_f32(&key("factor"))?;
    Ok(match (kind, factor) {
        (None | Some("none"), _) => RopeScaling::None,
        (Some("linear"), Some(factor)) if factor > 0.0 => {
            if factor == 1.0 {
                RopeScaling::None
            } else {
                RopeScaling::Linear { factor }
            }
        }
        (Some("llama3"), Some(factor)) => RopeScaling::Llama3 {
            factor,
            low_freq_factor: md.opt_f32(&key("low_freq_factor"))?.unwrap_or(1.0),
            high_freq_factor: md.opt_f32(&key("high_freq_factor"))?.unwrap_or(4.0),
            original_context: md.opt_u32(&key("original_context_length"))?.unwrap_or(8192),
        },
        (Some(other), _) => {
            return Err(ConfigError::NotYet(format!(
                "RoPE scaling `{other}` (supported: none, linear, llama3)"
            )))
        }
    })
}

/// Phi-3's LongRoPE: present when the file has `rope_factors_long.weight` (llama.cpp's
/// converter writes both factor tensors and the attention factor only for long-context
/// models). Returns it and the attention factor (1 when absent).
fn read_long_rope(
    header: &Header,
    arch: Arch,
    context_length: u32,
) -> Result<(Option<LongRope>, f32), ConfigError> {
    let present = ["rope_factors_long.weight", "rope_factors_short.weight"]
        .map(|n| header.tensor(n).is_some());
    if arch != Arch::Phi3 {
        if let Some(name) = ["rope_factors_long.weight", "rope_factors_short.weight"]
            .into_iter()
            .find(|n| header.tensor(n).is_some())
        {
            return Err(ConfigError::TensorNotYet {
                name: name.into(),
                why: format!("LongRoPE factors on {}", arch.name()),
            });
        }
        return Ok((None, 1.0));
    }
    let md = &header.metadata;
    // `phi3.rope.scaling.attn_factor` (llama-arch.cpp LLM_KV_ROPE_SCALING_ATTN_FACTOR)
    let attn_factor = md.opt_f32("phi3.rope.scaling.attn_factor")?.unwrap_or(1.0);
    // The converter writes sqrt(1 + ln(s) / ln(original)) for a context ratio s: between 1
    // and ~1.5 for any real ratio.
    if !(attn_factor.is_finite() && (0.5..=4.0).contains(&attn_factor)) {
        return Err(ConfigError::Invalid(format!(
            "phi3.rope.scaling.attn_factor = {attn_factor} is outside 0.5..=4"
        )));
    }
    let long_rope = match present {
        [false, false] => None,
        [true, true] => {
            // `phi3.rope.scaling.original_context_length` (LLM_KV_ROPE_SCALING_ORIG_CTX_LEN);
            // llama.cpp defaults it to the trained context, as here.
            let original_context = md
                .opt_u32("phi3.rope.scaling.original_context_length")?
                .unwrap_or(context_length);
            if original_context == 0 || original_context > context_length {
                return Err(ConfigError::Invalid(format!(
                    "phi3.rope.scaling.original_context_length = {original_context} is outside 1..={context_length} (the context length)"
                )));
            }
            Some(LongRope { original_context })
        }
        _ => {
            return Err(ConfigError::Invalid(
                "LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; the file has one".into(),
            ))
        }
    };
    Ok((long_rope, attn_factor))
}

/// HF `_compute_llama3_parameters`, for one inverse frequency.
fn llama3_scale(inv_freq: f32, factor: f32, low: f32, high: f32, original_context: u32) -> f32 {
    let old = original_context as f32;
    let low_freq_wavelen = old / low;
    let high_freq_wavelen = old / high;
    let wavelen = 2.0 * std::f32::consts::PI / inv_freq;
    if wavelen < high_freq_wavelen {
        inv_freq
    } else if wavelen > low_freq_wavelen {
        inv_freq / factor
    } else {
        let smooth = (old / wavelen - low) / (high - low);
        (1.0 - smooth) * inv_freq / factor + smooth * inv_freq
    }
}
