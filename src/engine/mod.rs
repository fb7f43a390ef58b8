//! The inference session: KV cache, preallocated activations, prefill in chunks, the decode
//! loop with sampling, and the stats the CLI and the page show. The CLI and the web page
//! drive this same `Session`.

mod decode;
mod loader;
mod megakernel;

pub use crate::model::{
    KvCache, LogitsFor, Model, Scratch, LOGITS_ROWS, MAX_BATCHES_IN_FLIGHT, MAX_STEPS,
    PREFILL_CHUNK,
};
pub use decode::BATCH_BUDGET_SECONDS;
#[cfg(not(target_arch = "wasm32"))]
pub use loader::load_path;
pub use loader::{summarize_types, LoadError, LoadProgress, Loader};
pub use megakernel::MegakernelCheck;

use std::sync::Arc;

use crate::gpu::{GpuContext, GpuError, StepRecorder, Work};
use crate::kernels::KernelError;
use crate::model;
use crate::sampler::{SamplerConfig, SamplerError};

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
    /// The part of `record_seconds` spent encoding the recorded dispatches into a compute pass
    /// and submitting it (bind groups, pass commands: in the browser, calls into WebGPU).
    pub encode_seconds: f64,
    /// Host time the GPU decode loop spent waiting for batches' ids (readback included): near
    /// the wall time, the GPU (or the browser's GPU process) bounds decode; near 0, the host.
    pub wait_seconds: f64,
    /// Host time the last [`Session::forward`] spent recording, encoding and submitting its
    /// steps (not waiting for its logits): against the forward's wall time it says how much
    /// of a prompt the GPU waited for the host.
    pub forward_host_seconds: f64,
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
    /// Fused (default) or unfused dispatch plan; switchable between steps (the plan follows).
    pub pipeline: model::Pipeline,
    /// Each FFN as the one-workgroup-per-token megakernel: off by default, turned on through
    /// [`Session::set_megakernel`], which checks it first (engine/megakernel.rs).
    pub megakernel: bool,
    /// Sample on the CPU (`reference::sample`), reading every token's logits back, instead
    /// of the GPU decode loop (engine/decode.rs): off by default; the switch is for A/B and
    /// debugging (`--cpu-sampling`, the page's `cpu_sampling=1`), and tests compare the two.
    pub cpu_sampling: bool,
    /// A prompt step's dispatches are submitted this many at a time (`None`: one submit a
    /// step); [`prefill_submit_every`] by default.
    pub prefill_submit_every: Option<usize>,
    /// GPU time one decode batch may take (K ≤ this / seconds per token; engine/decode.rs).
    pub batch_budget_seconds: f64,
    /// Mapped copies of the slots of `scratch.generated`, made on first use.
    readback: [Option<wgpu::Buffer>; MAX_BATCHES_IN_FLIGHT as usize],
    /// What each step runs, for `pipeline` and `megakernel` ([`Session::plan`]).
    plan: model::Plan,
}

/// How many of a prompt step's dispatches go in one submit ([`StepRecorder::submit_every`]), so
/// the GPU starts on the first ones while the host records and encodes the rest: `None` (one
/// submit a step, the default) unless `COCO_SUBMIT_EVERY=<dispatches>` sets it natively, read
/// once per process. Off until timed on a GPU: an H100's Llama-1B pp32 step took 5.5 ms of
/// which the GPU ran 3.5 (BENCHMARKS.md "session 48"), and its 226 dispatches cost ~1 ms of
/// host time before the GPU starts; predicted −0.7 ms with 64 a submit.
pub fn prefill_submit_every() -> Option<usize> {
    static EVERY: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *EVERY.get_or_init(|| {
        if cfg!(target_arch = "wasm32") {
            return None;
        }
        crate::kernels::matmul::number_from_env("COCO_SUBMIT_EVERY", usize::MAX).filter(|&n| n > 0)
    })
}

/// Each of [`Session::warm_up`]'s passes: at most this many tokens, and it stops at the first
/// batch after this many seconds.
const WARM_UP_MAX_TOKENS: u32 = 48;
const WARM_UP_SECONDS: f64 = 0.3;
/// The prompt steps [`Session::warm_up`] records (besides its generations' 4-token prompt):
/// a short chat turn's, and a whole chunk's ([`PREFILL_CHUNK`]). Between them they take every
/// tile kernel the products' sizes pick on the GPUs measured (lavapipe's portable tiles take
/// other kernels from 33 and from 384 tokens; the tensor-core tiles from 25), and with the
/// layouts shared by binding list, a length between two of them binds what they bound.
const WARM_UP_PROMPT_TOKENS: u32 = 64;

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
        let per_layer = c.kv_layer_bytes(context);
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
        let plan = model::Plan::new(model, ctx, model::Pipeline::Fused, false);
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
            prefill_submit_every: prefill_submit_every(),
            batch_budget_seconds: decode::BATCH_BUDGET_SECONDS,
            readback: Default::default(),
            plan,
        }
    }

    /// The fusion plan the next step runs: made once with the session, and again only after
    /// `pipeline` or `megakernel` changed.
    pub fn plan(&mut self) -> &model::Plan {
        self.refresh_plan();
        &self.plan
    }

    fn refresh_plan(&mut self) {
        let asked = self.plan.megakernel.is_some();
        if self.plan.pipeline != self.pipeline || asked != self.megakernel {
            self.plan = model::Plan::new(&self.model, &self.ctx, self.pipeline, self.megakernel);
        }
    }

    /// The pipeline labels of a step of `t` tokens at the session's position, recorded but
    /// not submitted: the dispatch structure, which needs no timestamp queries.
    pub fn step_labels(&mut self, t: u32) -> Result<Vec<String>, EngineError> {
        Ok(self
            .step_work(t)?
            .into_iter()
            .map(|(label, _)| label)
            .collect())
    }

    /// [`Session::step_labels`], each with the [`Work`] its dispatch counts.
    pub fn step_work(&mut self, t: u32) -> Result<Vec<(String, Option<Work>)>, EngineError> {
        self.refresh_plan();
        let mut rec = StepRecorder::new(&self.ctx);
        self.record_step(&mut rec, t)?;
        Ok(rec.labels().into_iter().zip(rec.work()).collect())
    }

    /// Records (doesn't submit) the forward of a `t`-token step at the session's position,
    /// with the logits rows the scratch was sized for (every token's, or the last one's).
    fn record_step(&self, rec: &mut StepRecorder, t: u32) -> Result<(), EngineError> {
        model::forward(
            rec,
            &self.model,
            &self.kv,
            &self.scratch,
            t,
            self.pos,
            self.logits_for(),
            &self.plan,
        )?;
        Ok(())
    }

    fn logits_for(&self) -> LogitsFor {
        if self.scratch.logit_rows > 1 {
            LogitsFor::AllTokens
        } else {
            LogitsFor::LastToken
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
        self.refresh_plan();
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
        let all = self.logits_for() == LogitsFor::AllTokens;
        let vocab = c.vocab_size as u64;
        let mut out = Vec::new();
        let mut last_row = 0;
        self.stats.forward_host_seconds = 0.0;
        for chunk in ids.chunks(self.scratch.rows as usize) {
            let t = chunk.len() as u32;
            let host = crate::util::Clock::start();
            self.ctx
                .queue
                .write_buffer(&self.scratch.ids, 0, bytemuck::cast_slice(chunk));
            let mut rec = StepRecorder::new(&self.ctx);
            if let Some(n) = self.prefill_submit_every.filter(|_| t > 1) {
                rec.submit_every(n);
            }
            self.record_step(&mut rec, t)?;
            if t == 1 {
                self.stats.dispatches_per_token = rec.dispatch_count() as u32;
            }
            rec.submit();
            self.stats.forward_host_seconds += host.seconds();
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

    /// Runs a short throwaway generation, greedy and then with the default sampler settings,
    /// so every kernel a generation uses (prefill GEMMs, decode matvecs, attention, argmax,
    /// the sampler's passes) is compiled before a visitor's first one, and the host code that
    /// records steps has run often enough for the browser's wasm engine to optimize it.
    /// Measured on the H200 in Chromium (Gemma-3-270M): a fresh page's first 128-token
    /// generation decoded at 242–291 tok/s with a 2-token warm-up, the next one in the same
    /// page at 436–559. Each pass decodes at least 2 tokens and stops at the first batch
    /// boundary after `WARM_UP_SECONDS` (a software adapter takes seconds per token). The
    /// session is empty afterwards.
    ///
    /// The sampled pass runs as long as the greedy one: with 2 tokens (until session 36) a
    /// fresh page's first default-settings generation on an H100 decoded at 462–555 tok/s and
    /// the next at 1,016–1,041 (BENCHMARKS.md session 36). Its batches of 4, 8 and 16 steps
    /// first ran in the visitor's generation: then new bind groups (parameter blocks at other
    /// offsets, which until session 49 meant other bind groups), each a call into the
    /// browser's GPU process, and the sampler's recording not yet optimized by the wasm engine.
    ///
    /// Then it records a short chat turn's prompt step and a whole chunk's and encodes them
    /// without running them: their tile kernels compile and their bind groups are made now,
    /// not in the visitor's first prompt (on lavapipe a fresh 32-token step of the Llama-1B
    /// shape took 4.9 µs of host time a dispatch, a warm one 1.1: BENCHMARKS.md "session 49").
    /// After the generations, whose decode batches may grow the parameter buffer (which drops
    /// every bind group).
    pub async fn warm_up(&mut self) -> Result<(), EngineError> {
        let token = self.model.tokenizer.bos_id().unwrap_or(0);
        let prompt = [token; 4];
        for (sampler, tokens) in [
            (SamplerConfig::greedy(), WARM_UP_MAX_TOKENS),
            (SamplerConfig::default(), WARM_UP_MAX_TOKENS),
        ] {
            self.reset();
            let clock = crate::util::Clock::start();
            let mut seen = 0;
            self.generate(&prompt, tokens, &sampler, &mut |_| {
                seen += 1;
                seen < 2 || clock.seconds() < WARM_UP_SECONDS
            })
            .await?;
        }
        self.reset();
        let longest = self.scratch.rows.min(self.kv.context);
        self.refresh_plan();
        for t in [WARM_UP_PROMPT_TOKENS.min(longest), longest] {
            let mut rec = StepRecorder::new(&self.ctx);
            self.record_step(&mut rec, t)?;
            // Never submitted: the parameter blocks it wrote are overwritten by the next step.
            drop(rec.encode_unsubmitted());
        }
        self.ctx.check_health()?;
        Ok(())
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
    /// Cached bind groups hold this session's buffers (KV cache, scratch); let those go, and
    /// keep the ones other sessions on the same context still use.
    fn drop(&mut self) {
        let mut buffers = self.scratch.buffers();
        buffers.extend(self.kv.k.iter().chain(&self.kv.v));
        self.ctx.forget_bind_groups_using(&buffers);
    }
}
