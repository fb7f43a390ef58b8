//! The inference session: KV cache, preallocated activations, prefill in chunks, the decode
//! loop with sampling, and the stats the CLI and the page show. The CLI and the web page
//! drive this same `Session`.

mod decode;
mod loader;
mod megakernel;

pub use decode::{BATCH_BUDGET_SECONDS, MAX_STEPS};
#[cfg(not(target_arch = "wasm32"))]
pub use loader::load_path;
pub use loader::{summarize_types, LoadError, LoadProgress, Loader};
pub use megakernel::MegakernelCheck;

use std::sync::Arc;

use crate::capabilities::Report;
use crate::gpu::{Binding, GpuContext, GpuError, StepRecorder};
use crate::kernels::argmax::PARTIALS_WORDS;
use crate::kernels::attention::partials_len;
use crate::kernels::sample::{CAND_PAIRS, COUNT_WORDS};
use crate::kernels::KernelError;
use crate::model::{self, Arch, Config, Weights};
use crate::sampler::{SamplerConfig, SamplerError, MAX_RECENT};
use crate::tokenizer::Tokenizer;

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
    pub report: Option<Report>,
    /// The GGUF's chat template: None for base models without one; an error when the
    /// template doesn't compile (the model still runs as a completion model).
    pub chat_template: Option<Result<crate::chat::ChatTemplate, crate::chat::ChatError>>,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Kernel(#[from] KernelError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("context full: {needed} positions needed, the session holds {context}")]
    ContextFull { needed: u32, context: u32 },
    #[error("token id {id} is outside the vocabulary ({vocab})")]
    BadToken { id: u32, vocab: u32 },
    #[error(transparent)]
    Sampler(#[from] SamplerError),
}

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
    /// The GPU argmax's (key, index) pairs `[PARTIALS_WORDS]` u32 (see `kernels::argmax`).
    pub argmax_partials: wgpu::Buffer,
    /// Ids chosen by the GPU decode loop `[2, MAX_STEPS]` u32: two halves, so one batch can
    /// be read back while the next writes (engine/decode.rs).
    pub generated: wgpu::Buffer,
    /// The GPU sampler's histograms and counters `[COUNT_WORDS]` u32 (`kernels::sample`).
    pub sample_counts: wgpu::Buffer,
    /// The GPU sampler's candidates `[CAND_PAIRS]` (key, id) u32 pairs.
    pub sample_cands: wgpu::Buffer,
    /// The ids the repetition penalty looks back over `[MAX_RECENT]` u32, by position.
    pub recent: wgpu::Buffer,
}

impl Scratch {
    pub fn bytes_for(c: &Config, rows: u32, logit_rows: u32) -> u64 {
        let r = rows as u64;
        let qd = (c.n_heads * c.head_dim) as u64;
        let kvd = (c.n_kv_heads * c.head_dim) as u64;
        let partials = partials_len(c.n_heads, c.head_dim, rows, c.context_length);
        4 * (r + r * c.dim as u64 * 3 + r * qd * 2 + r * kvd * 2 + r * c.ffn_dim as u64 * 3)
            + 4 * logit_rows as u64 * c.vocab_size as u64
            + 4 * partials
            + 4 * (PARTIALS_WORDS + 2 * MAX_STEPS as u64)
            + 4 * (COUNT_WORDS + 2 * CAND_PAIRS + MAX_RECENT as u64)
    }

    /// `context`: KV-cache positions, which bound the attention partials.
    fn new(ctx: &GpuContext, model: &Model, rows: u32, logit_rows: u32, context: u32) -> Scratch {
        let c = &model.config;
        let r = rows as u64;
        let f32s = |label: &str, n: u64| ctx.storage_buffer(label, n * 4);
        let inv_freq = (0..c.n_layers)
            .map(|l| {
                let f = c.inv_freq(l, model.weights.rope_freq_factors.as_deref());
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
            generated: ctx.storage_buffer("generated", 2 * MAX_STEPS as u64 * 4),
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

/// Per-run counters.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub prompt_tokens: u32,
    pub generated_tokens: u32,
    pub prefill_seconds: f64,
    pub decode_seconds: f64,
    /// Dispatches in the last single-token decode step (on the GPU loop: the forward and
    /// the draw, argmax or the sampling chain).
    pub dispatches_per_token: u32,
    /// Whether the last generation sampled on the GPU (K steps per submit, the token never
    /// leaving the GPU; engine/decode.rs) rather than reading the logits back for the CPU
    /// sampler each token (`cpu_sampling`).
    pub sampler_on_gpu: bool,
    /// Most decode steps recorded into one submit in this session's runs (1 on the CPU path).
    pub steps_per_submit: u32,
    /// Host time spent recording, encoding and submitting GPU-loop decode batches: with
    /// `generated_tokens` it tells whether recording or the GPU bounds decode speed.
    pub record_seconds: f64,
    /// Why the last generation ended.
    pub stop: StopReason,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StopReason {
    #[default]
    MaxTokens,
    /// An end-of-generation token (not passed on).
    Eos,
    /// The caller's `on_token` returned false.
    Stopped,
    ContextFull,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::MaxTokens => "max_tokens",
            StopReason::Eos => "eos",
            StopReason::Stopped => "stopped",
            StopReason::ContextFull => "context_full",
        }
    }
}

impl Stats {
    pub fn prefill_tok_s(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_seconds.max(1e-9)
    }
    pub fn decode_tok_s(&self) -> f64 {
        self.generated_tokens as f64 / self.decode_seconds.max(1e-9)
    }
}

/// Owns shared handles to the device and the model, so it can live as long as its owner
/// wants (the web page keeps one across calls; the CLI keeps one per run).
pub struct Session {
    pub ctx: Arc<GpuContext>,
    pub model: Arc<Model>,
    pub kv: KvCache,
    pub scratch: Scratch,
    /// Positions already in the KV cache.
    pub pos: u32,
    /// The token at each of those positions, so a later prompt that shares a prefix with
    /// them (the next chat turn) only prefills what is new.
    pub cached_tokens: Vec<u32>,
    pub stats: Stats,
    /// Fused (default) or unfused dispatch plan; switchable between steps.
    pub pipeline: model::Pipeline,
    /// Each FFN as the one-workgroup-per-token megakernel: off by default, turned on through
    /// [`Session::set_megakernel`], which checks it first (engine/megakernel.rs).
    pub megakernel: bool,
    /// Sample on the CPU (`reference::sample`), reading every token's logits back, instead
    /// of the GPU decode loop (engine/decode.rs): off by default; the switch is for A/B and
    /// debugging (`--cpu-sampling`, the page's `cpu_sampling=1`), and tests compare the two.
    pub cpu_sampling: bool,
    /// GPU time one decode batch may take (K ≤ this / seconds per token; engine/decode.rs).
    pub batch_budget_seconds: f64,
    /// Mapped copies of the two halves of `scratch.generated`, made on first use.
    readback: [Option<wgpu::Buffer>; 2],
}

impl Session {
    /// `context`: KV-cache positions (clamped to the model's trained context).
    pub fn new(
        ctx: &Arc<GpuContext>,
        model: &Arc<Model>,
        context: u32,
        logits_for: LogitsFor,
    ) -> Session {
        let c = &model.config;
        let context = context.min(c.context_length).max(1);
        let per_layer = context as u64 * (c.n_kv_heads * c.head_dim) as u64 * 4;
        let kv = KvCache {
            k: (0..c.n_layers)
                .map(|l| ctx.storage_buffer(&format!("k_cache.{l}"), per_layer))
                .collect(),
            v: (0..c.n_layers)
                .map(|l| ctx.storage_buffer(&format!("v_cache.{l}"), per_layer))
                .collect(),
            context,
        };
        let (rows, logit_rows) = match logits_for {
            LogitsFor::LastToken => (PREFILL_CHUNK, 1),
            LogitsFor::AllTokens => (LOGITS_ROWS, LOGITS_ROWS),
        };
        let scratch = Scratch::new(ctx, model, rows, logit_rows, context);
        Session {
            ctx: ctx.clone(),
            model: model.clone(),
            kv,
            scratch,
            pos: 0,
            cached_tokens: Vec::new(),
            stats: Stats::default(),
            pipeline: model::Pipeline::Fused,
            megakernel: false,
            cpu_sampling: false,
            batch_budget_seconds: decode::BATCH_BUDGET_SECONDS,
            readback: [None, None],
        }
    }

    /// Forgets the conversation (the cache is overwritten from position 0).
    pub fn reset(&mut self) {
        self.pos = 0;
        self.cached_tokens.clear();
        self.stats = Stats::default();
    }

    /// Keeps the longest cached prefix of `ids` (leaving at least one token of `ids` to run,
    /// since the next step needs its logits) and forgets the rest. Returns the tokens kept;
    /// `ids[kept..]` is what still has to be prefilled.
    pub fn keep_common_prefix(&mut self, ids: &[u32]) -> usize {
        let common = self
            .cached_tokens
            .iter()
            .zip(ids)
            .take_while(|(a, b)| a == b)
            .count();
        let kept = common.min(ids.len().saturating_sub(1));
        self.cached_tokens.truncate(kept);
        self.pos = kept as u32;
        kept
    }

    /// Runs `ids` through the model at the next positions. Returns logits `[vocab]` for the
    /// last token, or `[ids.len(), vocab]` when the session keeps every row's logits.
    pub async fn forward(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        Ok(self.run_tokens(ids, true).await?.0)
    }

    /// Records and submits `ids` in chunks of `scratch.rows` (one pass each, queued without
    /// waiting). With `read`, waits for the logits the session keeps (the last chunk's, or
    /// every chunk's when it keeps all rows) and returns them; either way returns the row of
    /// `scratch.logits` holding the last token's logits.
    async fn run_tokens(
        &mut self,
        ids: &[u32],
        read: bool,
    ) -> Result<(Vec<f32>, u32), EngineError> {
        let c = &self.model.config;
        let needed = self.pos + ids.len() as u32;
        if needed > self.kv.context {
            return Err(EngineError::ContextFull {
                needed,
                context: self.kv.context,
            });
        }
        if let Some(&id) = ids.iter().find(|&&id| id >= c.vocab_size) {
            return Err(EngineError::BadToken {
                id,
                vocab: c.vocab_size,
            });
        }
        let all = self.scratch.logit_rows > 1;
        let logits = if all {
            LogitsFor::AllTokens
        } else {
            LogitsFor::LastToken
        };
        let vocab = c.vocab_size as u64;
        let mut out = Vec::new();
        let mut last_row = 0;
        for chunk in ids.chunks(self.scratch.rows as usize) {
            let t = chunk.len() as u32;
            self.ctx
                .queue
                .write_buffer(&self.scratch.ids, 0, bytemuck::cast_slice(chunk));
            let mut rec = StepRecorder::new(&self.ctx);
            model::forward(
                &mut rec,
                &self.model,
                &self.kv,
                &self.scratch,
                t,
                self.pos,
                logits,
                self.pipeline,
                self.megakernel,
            )?;
            if t == 1 {
                self.stats.dispatches_per_token = rec.dispatch_count() as u32;
            }
            rec.submit();
            self.pos += t;
            self.cached_tokens.extend_from_slice(chunk);
            last_row = if all { t - 1 } else { 0 };
            if !read || (!all && self.pos < needed) {
                // Only the last chunk's logits are wanted (or none): queue the next chunk
                // without a round trip (the queue runs submits in order).
                continue;
            }
            let rows = if all { t as u64 } else { 1 };
            let bytes = self
                .ctx
                .read_buffer_async(&self.scratch.logits, 0, rows * vocab * 4)
                .await?;
            self.ctx.check_health()?;
            let values: &[f32] = bytemuck::cast_slice(&bytes[..(rows * vocab * 4) as usize]);
            if all {
                out.extend_from_slice(values);
            } else {
                out = values.to_vec();
            }
        }
        Ok((out, last_row))
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn forward_blocking(&mut self, ids: &[u32]) -> Result<Vec<f32>, EngineError> {
        pollster::block_on(self.forward(ids))
    }

    /// Prefills `prompt`, then samples up to `max_new` tokens with `sampler`, calling
    /// `on_token(id)` for each (return `false` to stop). Stops at an end-of-generation token,
    /// which is not passed on.
    ///
    /// By default every setting samples on the GPU (engine/decode.rs): the prompt's logits
    /// never leave it, and `stats.prefill_seconds` runs until the first token is back (its
    /// draw and one round trip included). With `cpu_sampling` each token's logits are read
    /// back for `reference::sample`, which picks the same tokens.
    pub async fn generate(
        &mut self,
        prompt: &[u32],
        max_new: u32,
        sampler: &SamplerConfig,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Vec<u32>, EngineError> {
        sampler.check()?;
        let mut generated = Vec::new();
        let clock = crate::util::Clock::start();
        let eos = self.model.tokenizer.eos_ids().to_vec();
        self.stats.stop = StopReason::MaxTokens;
        self.stats.prompt_tokens += prompt.len() as u32;
        if !self.cpu_sampling {
            let (_, last_row) = self.run_tokens(prompt, false).await?;
            let run = self
                .decode_on_gpu(sampler, last_row, max_new, &eos, on_token, &mut generated)
                .await?;
            self.stats.stop = run.stop;
            let first = run.first_id_seconds.unwrap_or(clock.seconds());
            self.stats.prefill_seconds += first;
            self.stats.decode_seconds += clock.seconds() - first;
            return Ok(generated);
        }
        // Repetition penalties see the whole context, including a reused cached prefix.
        let mut history: Vec<u32> = self.cached_tokens.clone();
        history.extend_from_slice(prompt);
        let mut logits = self.forward(prompt).await?;
        self.stats.prefill_seconds += clock.seconds();
        let clock = crate::util::Clock::start();
        self.stats.sampler_on_gpu = false;
        self.stats.steps_per_submit = self.stats.steps_per_submit.max(1);
        for step in 0..max_new {
            let id = crate::reference::sample::sample(&logits, &history, sampler);
            if eos.contains(&id) {
                self.stats.stop = StopReason::Eos;
                break;
            }
            generated.push(id);
            history.push(id);
            if !on_token(id) {
                self.stats.stop = StopReason::Stopped;
                break;
            }
            if step + 1 == max_new {
                break;
            }
            if self.pos >= self.kv.context {
                self.stats.stop = StopReason::ContextFull;
                break;
            }
            logits = self.forward(&[id]).await?;
            self.stats.generated_tokens += 1;
        }
        self.stats.decode_seconds += clock.seconds();
        Ok(generated)
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn generate_blocking(
        &mut self,
        prompt: &[u32],
        max_new: u32,
        sampler: &SamplerConfig,
        on_token: &mut dyn FnMut(u32) -> bool,
    ) -> Result<Vec<u32>, EngineError> {
        pollster::block_on(self.generate(prompt, max_new, sampler, on_token))
    }
}

impl Drop for Session {
    /// Cached bind groups hold this session's buffers (KV cache, scratch); let them go.
    fn drop(&mut self) {
        self.ctx.clear_bind_groups();
    }
}

/// Bindings for `rows` rows of `width` f32 starting at row `first` of `buffer`.
pub(crate) fn rows_of(buffer: &wgpu::Buffer, first: u32, rows: u32, width: u32) -> Binding {
    Binding::range(
        buffer,
        first as u64 * width as u64 * 4,
        rows as u64 * width as u64 * 4,
    )
}

impl Model {
    pub fn arch(&self) -> Arch {
        self.config.arch
    }
}
