//! What a model is on the GPU and what one session of it holds there: the loaded [`Model`],
//! the preallocated activations ([`Scratch`]) and the [`KvCache`], with their sizes as pure
//! functions of the config, so the capability report can state them before anything loads.

use crate::gpu::{Binding, GpuContext};
use crate::kernels::argmax::PARTIALS_WORDS;
use crate::kernels::attention::partials_len;
use crate::kernels::sample::{CAND_PAIRS, COUNT_WORDS};
use crate::sampler::MAX_RECENT;
use crate::tokenizer::Tokenizer;

use super::{Config, Weights};

/// Tokens per prefill step (one compute pass each). Activation scratch scales with it
/// (Llama-3.1-8B: 512 rows of the 14,336-wide FFN are 29 MiB per buffer). The tiled GEMM
/// runs `rows / 64 × tokens / 64` workgroups, so a 64-token chunk gave a 2048-row projection
/// only 32 workgroups on a 132-SM H200 and every chunk its own submit and wait.
pub const PREFILL_CHUNK: u32 = 512;
/// Tokens per step, and logit rows kept, when every position's logits are wanted (`coco
/// logits`): 64 rows of a 128k vocabulary are already 33 MB.
pub const LOGITS_ROWS: u32 = 64;

/// A loaded model: config, tokenizer and GPU weights.
pub struct Model {
    pub config: Config,
    pub tokenizer: Tokenizer,
    pub weights: Weights,
    pub weight_bytes: u64,
    /// "Q4_K×27 Q5_0×81 …" for reports.
    pub type_summary: String,
    /// The GGUF's chat template: None for base models without one; an error when the
    /// template doesn't compile (the model still runs as a completion model).
    pub chat_template: Option<Result<crate::chat::ChatTemplate, crate::chat::ChatError>>,
}

/// Largest K (decode steps per submit). 16 keeps the waste after a stop small while the
/// round trip (~110 µs on the H200) is already < 5% of 16 steps.
pub const MAX_STEPS: u32 = 16;

/// Most decode batches the GPU loop keeps submitted and unread at once (engine/decode.rs):
/// a slot of `MAX_STEPS` ids each in `Scratch::generated`, and a readback buffer each.
pub const MAX_BATCHES_IN_FLIGHT: u32 = 3;

/// The decode batches in flight by default: the one being read and one queued behind it.
/// Three lost in the page on the H200 (Chromium: tg128 725 against 821 tok/s, six reps each)
/// and made no difference natively (BENCHMARKS.md "session 26").
pub const DEFAULT_BATCHES_IN_FLIGHT: u32 = 2;

/// Preallocated activations for up to `rows` tokens per step. Shapes are `[rows, …]` f32.
pub struct Scratch {
    pub rows: u32,
    pub ids: wgpu::Buffer,    // [rows] u32
    pub x: wgpu::Buffer,      // [rows, dim] residual stream
    pub xn: wgpu::Buffer,     // [rows, dim] normed input of a matmul
    pub q: wgpu::Buffer,      // [rows, heads, head_dim]
    pub k: wgpu::Buffer,      // [rows, kv_heads, head_dim]
    pub v: wgpu::Buffer,      // [rows, kv_heads, head_dim]
    pub attn: wgpu::Buffer,   // [rows, heads, head_dim]
    pub proj: wgpu::Buffer,   // [rows, dim] block output before gemma3's post-norm
    pub gate: wgpu::Buffer,   // [rows, ffn]
    pub up: wgpu::Buffer,     // [rows, ffn]
    pub act: wgpu::Buffer,    // [rows, ffn]
    pub logits: wgpu::Buffer, // [logit_rows, vocab]
    pub logit_rows: u32,
    /// Flash-decoding partials `[partials_len]` f32, reused by every layer: per (token, head,
    /// key range) a max, a sum and `head_dim` sums (see `kernels::attention`).
    pub attn_partials: wgpu::Buffer,
    /// Per-layer RoPE inverse frequencies `[head_dim/2]`.
    pub inv_freq: Vec<wgpu::Buffer>,
    /// The GPU argmax's arrival counter and (key, index) pairs `[PARTIALS_WORDS]` u32 (see
    /// `kernels::argmax`).
    pub argmax_partials: wgpu::Buffer,
    /// Ids chosen by the GPU decode loop `[MAX_BATCHES_IN_FLIGHT, MAX_STEPS]` u32: a slot per
    /// batch in flight, so batches can be read back while later ones write (engine/decode.rs).
    pub generated: wgpu::Buffer,
    /// The GPU sampler's histograms and counters `[COUNT_WORDS]` u32 (`kernels::sample`).
    pub sample_counts: wgpu::Buffer,
    /// The GPU sampler's candidates `[CAND_PAIRS]` (key, id) u32 pairs.
    pub sample_cands: wgpu::Buffer,
    /// The ids the repetition penalty looks back over `[MAX_RECENT]` u32, by position.
    pub recent: wgpu::Buffer,
}

impl Scratch {
    /// Every buffer it holds (what a session that ends lets go of).
    pub fn buffers(&self) -> Vec<&wgpu::Buffer> {
        let mut all = vec![
            &self.ids,
            &self.x,
            &self.xn,
            &self.q,
            &self.k,
            &self.v,
            &self.attn,
            &self.proj,
            &self.gate,
            &self.up,
            &self.act,
            &self.logits,
            &self.attn_partials,
            &self.argmax_partials,
            &self.generated,
            &self.sample_counts,
            &self.sample_cands,
            &self.recent,
        ];
        all.extend(&self.inv_freq);
        all
    }

    pub fn bytes_for(c: &Config, rows: u32, logit_rows: u32) -> u64 {
        let r = rows as u64;
        let qd = (c.n_heads * c.head_dim) as u64;
        let kvd = (c.n_kv_heads * c.head_dim) as u64;
        let partials = partials_len(c.n_heads, c.head_dim, rows, c.context_length);
        4 * (r + r * c.dim as u64 * 3 + r * qd * 2 + r * kvd * 2 + r * c.ffn_dim as u64 * 3)
            + 4 * logit_rows as u64 * c.vocab_size as u64
            + 4 * partials
            + 4 * (PARTIALS_WORDS + (MAX_BATCHES_IN_FLIGHT * MAX_STEPS) as u64)
            + 4 * (COUNT_WORDS + 2 * CAND_PAIRS + MAX_RECENT as u64)
    }

    /// `context`: KV-cache positions, which bound the attention partials.
    pub(crate) fn new(
        ctx: &GpuContext,
        model: &Model,
        rows: u32,
        logit_rows: u32,
        context: u32,
    ) -> Scratch {
        let c = &model.config;
        let r = rows as u64;
        let f32s = |label: &str, n: u64| ctx.storage_buffer(label, n * 4);
        let inv_freq = (0..c.n_layers)
            .map(|l| {
                // LongRoPE picks its factor set by this session's context.
                let factors = model.weights.rope_factors.for_context(c, context);
                let f = c.inv_freq(l, factors);
                ctx.storage_buffer_init(&format!("inv_freq.{l}"), bytemuck::cast_slice(&f))
            })
            .collect();
        Scratch {
            rows,
            ids: ctx.storage_buffer("ids", r * 4),
            x: f32s("x", r * c.dim as u64),
            xn: f32s("xn", r * c.dim as u64),
            q: f32s("q", r * (c.n_heads * c.head_dim) as u64),
            k: f32s("k", r * (c.n_kv_heads * c.head_dim) as u64),
            v: f32s("v", r * (c.n_kv_heads * c.head_dim) as u64),
            attn: f32s("attn", r * (c.n_heads * c.head_dim) as u64),
            proj: f32s("proj", r * c.dim as u64),
            gate: f32s("gate", r * c.ffn_dim as u64),
            up: f32s("up", r * c.ffn_dim as u64),
            act: f32s("act", r * c.ffn_dim as u64),
            logits: f32s("logits", logit_rows as u64 * c.vocab_size as u64),
            logit_rows,
            // At least one f32: a zero-sized buffer cannot be bound.
            attn_partials: f32s(
                "attn_partials",
                partials_len(c.n_heads, c.head_dim, rows, context).max(1),
            ),
            inv_freq,
            argmax_partials: ctx.storage_buffer("argmax_partials", PARTIALS_WORDS * 4),
            generated: ctx
                .storage_buffer("generated", (MAX_BATCHES_IN_FLIGHT * MAX_STEPS) as u64 * 4),
            sample_counts: ctx.storage_buffer("sample_counts", COUNT_WORDS * 4),
            sample_cands: ctx.storage_buffer("sample_cands", 2 * CAND_PAIRS * 4),
            recent: ctx.storage_buffer("recent", MAX_RECENT as u64 * 4),
        }
    }
}

/// The KV cache: per layer, K and V as `[context, kv_heads, head_dim]` f32.
pub struct KvCache {
    pub k: Vec<wgpu::Buffer>,
    pub v: Vec<wgpu::Buffer>,
    pub context: u32,
}

/// Which positions of a step produce logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsFor {
    LastToken,
    AllTokens,
}

/// Bindings for `rows` rows of `width` f32 starting at row `first` of `buffer`.
pub fn rows_of(buffer: &wgpu::Buffer, first: u32, rows: u32, width: u32) -> Binding {
    Binding::range(
        buffer,
        first as u64 * width as u64 * 4,
        rows as u64 * width as u64 * 4,
    )
}
