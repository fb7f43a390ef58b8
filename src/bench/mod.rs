//! The benchmark behind `coco bench` (and, later, the page's `?bench=1`): prompt processing
//! and token generation speed as medians over repetitions, dispatches per token, effective
//! bandwidth, and the floor a decode step can't beat on this adapter:
//!
//!   floor = weight bytes per token / read bandwidth + dispatches × dispatch cost + round trip
//!
//! (the dispatch cost the GPU's, from timestamps, where the adapter has them: the host's
//! encoding overlaps the GPU while two batches are in flight).
//!
//! `probe` measures the three adapter figures with micro-kernels.
//!
//! Every run also reports the FFN megakernel A/B (DESIGN.md: "every bench reports its A/B
//! ratio"): token generation with the one-workgroup-per-token FFN against the normal path,
//! after the same correctness check `Session::set_megakernel` runs.
//!
//! [`profile_step`] (`coco bench --profile`, and the page's chart) breaks one decode step,
//! or one prefill step, down per kernel variant from timestamp queries
//! (`StepRecorder::submit_timed`), with the bytes and operations each kernel counts
//! (`gpu::Work`), so each row reads as GB/s and TFLOP/s against the adapter's bounds.

use std::sync::Arc;

use serde::Serialize;

use crate::engine::{EngineError, LogitsFor, MegakernelCheck, Model, Session};
use crate::gpu::{GpuContext, StepRecorder, Timing};
use crate::kernels::matmul::KernelSettings;
use crate::sampler::{argmax, SamplerConfig};
use crate::util::Clock;

mod probe;
pub use probe::{
    grid_sync_line, matrix_read_line, probe, probe_compute, probe_grid_syncs, probe_matrix_reads,
    ComputeProbe, GridSync, MatrixRead, Probe,
};

/// The most tokens the megakernel side of the A/B decodes (see [`run_with`]).
pub const MEGAKERNEL_AB_TOKENS: u32 = 16;

#[derive(Clone, Debug)]
pub struct BenchConfig {
    pub prompt_tokens: u32,
    pub gen_tokens: u32,
    /// Tokens already in the KV cache when pp and tg are timed (llama-bench's `-d`). At 0,
    /// as llama-bench's pp512 / tg128, pp runs from position 0 and tg from an empty cache
    /// (position 1: the decode loop's first draw needs one forward's logits).
    pub depth: u32,
    pub reps: u32,
    pub pipeline: crate::model::Pipeline,
}

#[derive(Clone, Debug)]
pub struct BenchResult {
    pub adapter: String,
    /// The kernels and tuning overrides the run measured.
    pub kernels: KernelSettings,
    pub prompt_tokens: u32,
    pub gen_tokens: u32,
    pub depth: u32,
    /// The first and last KV-cache positions tg decoded at.
    pub tg_positions: [u32; 2],
    pub reps: u32,
    pub pp_tok_s: Vec<f64>,
    pub tg_tok_s: Vec<f64>,
    pub dispatches_per_token: u32,
    /// tg tok/s per rep with the default sampler settings (`SamplerConfig::default()`:
    /// temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1.1 over 64 tokens), on the
    /// same decode loop as `tg_tok_s`: what a user's default run decodes at.
    pub tg_sampled_tok_s: Vec<f64>,
    /// Dispatches per decoded token with the default sampler settings.
    pub sampled_dispatches_per_token: u32,
    /// ms the CPU sampler (`reference::sample`, what `--cpu-sampling` runs) takes for one
    /// token with the default settings on the prompt's real logits (median of 21 calls).
    pub cpu_sampler_ms: f64,
    /// Whether tg sampled on the GPU (K steps per submit; see engine/decode.rs) or read the
    /// logits back for the CPU sampler every token (`cpu_sampling`).
    pub sampler_on_gpu: bool,
    /// Most decode steps per submit in tg (1 on the CPU path).
    pub steps_per_submit: u32,
    /// Host time per decoded token spent recording, encoding and submitting (median of
    /// reps; GPU path only, NaN otherwise): if near ms/token, recording bounds decode.
    pub record_ms_per_token: f64,
    /// Host time per decoded token spent waiting for the ids of a batch (median of reps; GPU
    /// path only, NaN otherwise): what is left of ms/token after recording and waiting is
    /// the host's other work (token handling, callbacks).
    pub wait_ms_per_token: f64,
    /// The part of `record_ms_per_token` spent encoding the pass and submitting it.
    pub encode_ms_per_token: f64,
    /// ms of the prompt's wall time (pp) the host spent recording, encoding and submitting it
    /// before the GPU had all of it (median of reps, on a session whose bind groups the
    /// warm-up rep made: `reps`).
    pub pp_host_ms: f64,
    /// Bytes of weights one decode step reads (every matrix, the full LM head, one embedding row).
    pub weight_bytes_per_token: u64,
    pub probe: Option<Probe>,
    /// The FFN megakernel A/B.
    pub megakernel: MegakernelAb,
}

/// Token generation with the FFN megakernel on and off, on the same prompt and model.
#[derive(Clone, Debug)]
pub struct MegakernelAb {
    /// The check run before measuring; nothing is measured with the megakernel if it failed.
    pub check: MegakernelCheck,
    /// Whether the headline figures (`pp_tok_s`, `tg_tok_s`) were measured with it on.
    pub headline: bool,
    /// tg tok/s per rep with the megakernel (empty when the check failed). Unless it is the
    /// headline, that is one rep of at most [`MEGAKERNEL_AB_TOKENS`] tokens.
    pub tg_on: Vec<f64>,
    /// tg tok/s per rep without it.
    pub tg_off: Vec<f64>,
}

impl MegakernelAb {
    /// Median tg with the megakernel on (NaN when it didn't run).
    pub fn tg(&self) -> f64 {
        median(&self.tg_on)
    }
    /// tg with the megakernel / tg without: below 1 means it is slower.
    pub fn ratio(&self) -> f64 {
        median(&self.tg_on) / median(&self.tg_off)
    }
}

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

impl BenchResult {
    pub fn pp(&self) -> f64 {
        median(&self.pp_tok_s)
    }
    pub fn tg(&self) -> f64 {
        median(&self.tg_tok_s)
    }
    /// Median tg with the default sampler settings.
    pub fn tg_sampled(&self) -> f64 {
        median(&self.tg_sampled_tok_s)
    }
    pub fn effective_gb_s(&self) -> f64 {
        self.weight_bytes_per_token as f64 * self.tg() / 1e9
    }
    /// Floor time per decoded token in seconds, when the adapter was probed: its dispatch
    /// term is the GPU's cost per dependent dispatch where timestamps measured it
    /// ([`Probe::step_dispatch_us`]).
    pub fn floor_seconds(&self) -> Option<f64> {
        self.probe.as_ref().map(|p| {
            self.weight_bytes_per_token as f64 / (p.read_gb_s * 1e9)
                + self.dispatches_per_token as f64 * p.step_dispatch_us() * 1e-6
                + p.round_trip_us * 1e-6 / self.steps_per_submit.max(1) as f64
        })
    }
    /// Decode speed as a fraction of the floor's speed (1.0 = at the floor).
    pub fn fraction_of_floor(&self) -> Option<f64> {
        self.floor_seconds().map(|f| self.tg() * f)
    }
}

/// Weight bytes a decode step reads: all tensors, except that a separate output matrix
/// means the embedding table contributes only one row.
pub fn weight_bytes_per_token(model: &Model) -> u64 {
    let w = &model.weights;
    if w.output.is_some() {
        model.weight_bytes - w.token_embd.total_bytes() + w.token_embd.row_bytes
    } else {
        model.weight_bytes
    }
}

/// The benchmark's prompt: `n` (at least 1) deterministic ids spread over the vocabulary.
pub fn bench_prompt(model: &Model, n: u32) -> Vec<u32> {
    let vocab = model.config.vocab_size;
    (0..n.max(1))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % vocab)
        .collect()
}

/// The ids a run at `depth` puts in the cache first, and the prompt pp times after them:
/// one sequence of [`bench_prompt`], so the prompt at depth 0 is the same as before depths.
pub fn bench_ids(model: &Model, depth: u32, prompt_tokens: u32) -> (Vec<u32>, Vec<u32>) {
    let mut ids = bench_prompt(model, depth + prompt_tokens.max(1));
    let prompt = ids.split_off(depth as usize);
    (ids, prompt)
}

/// Runs pp and tg `cfg.reps` times each (after one warm-up, on the sessions the private
/// `reps` says), tg greedy and then with the default sampler settings, with the headline
/// figures measured with the FFN megakernel on (`coco bench --megakernel`; the caller has
/// already checked it) or off, then the megakernel A/B, which measures the other side's
/// greedy tg the same way.
/// `cpu_sampling` times the one-token path that reads logits back for the CPU sampler (the
/// A/B baseline) instead of the GPU decode loop. pp and tg each start `cfg.depth` tokens
/// into the cache, as llama-bench's tests do: tg is not timed after pp's prompt.
pub async fn run_with(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    cfg: &BenchConfig,
    megakernel: bool,
    cpu_sampling: bool,
) -> Result<BenchResult, EngineError> {
    let (depth_ids, prompt) = bench_ids(model, cfg.depth, cfg.prompt_tokens);
    let context = cfg.depth + prompt.len() as u32 + cfg.gen_tokens + 8;
    let check = {
        let mut s = Session::new(ctx, model, context, LogitsFor::LastToken);
        s.pipeline = cfg.pipeline;
        s.set_megakernel(true).await?
    };
    let greedy = SamplerConfig::greedy();
    let sampled = SamplerConfig::default();
    let on = megakernel && check.passed;
    let plan = |cfg: &'_ BenchConfig, prefill_megakernel, decode_megakernel, sampler| TgPlan {
        cfg: cfg.clone(),
        depth_ids: &depth_ids,
        prompt: &prompt,
        context,
        prefill_megakernel,
        decode_megakernel,
        sampler,
        cpu_sampling,
    };
    let runs = reps(ctx, model, &plan(cfg, on, on, &greedy)).await?;
    let last = runs.last().cloned().unwrap_or_default();
    let tg: Vec<f64> = runs.iter().map(|r| r.tg_tok_s).collect();
    let cpu_sampler_ms = {
        let mut s = Session::new(ctx, model, context, LogitsFor::LastToken);
        s.pipeline = cfg.pipeline;
        let logits = s.forward(&prompt).await?;
        let times: Vec<f64> = (0..21)
            .map(|_| {
                let clock = Clock::start();
                std::hint::black_box(crate::reference::sample::sample(&logits, &prompt, &sampled));
                clock.seconds() * 1e3
            })
            .collect();
        median(&times)
    };
    let sampled_runs = reps(ctx, model, &plan(cfg, on, on, &sampled)).await?;
    // The other side of the A/B: tg only (its prefill runs the normal path either way).
    // When that side is the megakernel it decodes at most MEGAKERNEL_AB_TOKENS tokens, one
    // rep after the warm-up: it runs 10–100× slower, and 128 tokens × 4 runs of it took
    // ~2 min per model on the H200 while adding nothing to a tok/s median.
    let other_cfg = if megakernel {
        cfg.clone()
    } else {
        BenchConfig {
            gen_tokens: cfg.gen_tokens.min(MEGAKERNEL_AB_TOKENS),
            reps: cfg.reps.min(1),
            ..cfg.clone()
        }
    };
    let other: Vec<f64> = if check.passed {
        reps(ctx, model, &plan(&other_cfg, false, !megakernel, &greedy))
            .await?
            .iter()
            .map(|r| r.tg_tok_s)
            .collect()
    } else {
        Vec::new()
    };
    let (tg_on, tg_off) = if megakernel {
        (tg.clone(), other)
    } else {
        (other, tg.clone())
    };
    Ok(BenchResult {
        adapter: ctx.describe(),
        kernels: KernelSettings::of(ctx),
        prompt_tokens: prompt.len() as u32,
        gen_tokens: cfg.gen_tokens,
        depth: cfg.depth,
        tg_positions: last.tg_positions,
        reps: cfg.reps,
        pp_tok_s: runs.iter().map(|r| r.pp_tok_s).collect(),
        tg_tok_s: tg,
        dispatches_per_token: last.dispatches_per_token,
        tg_sampled_tok_s: sampled_runs.iter().map(|r| r.tg_tok_s).collect(),
        sampled_dispatches_per_token: sampled_runs.last().map_or(0, |r| r.dispatches_per_token),
        cpu_sampler_ms,
        sampler_on_gpu: last.sampler_on_gpu,
        steps_per_submit: last.steps_per_submit,
        record_ms_per_token: median(
            &runs
                .iter()
                .map(|r| r.record_ms_per_token)
                .collect::<Vec<_>>(),
        ),
        wait_ms_per_token: median(&runs.iter().map(|r| r.wait_ms_per_token).collect::<Vec<_>>()),
        encode_ms_per_token: median(
            &runs
                .iter()
                .map(|r| r.encode_ms_per_token)
                .collect::<Vec<_>>(),
        ),
        pp_host_ms: median(&runs.iter().map(|r| r.pp_host_ms).collect::<Vec<_>>()),
        weight_bytes_per_token: weight_bytes_per_token(model),
        probe: None,
        megakernel: MegakernelAb {
            check,
            headline: megakernel,
            tg_on,
            tg_off,
        },
    })
}

/// What one [`pp_tg`] run measured.
#[derive(Clone, Debug, Default)]
struct TgRun {
    pp_tok_s: f64,
    tg_tok_s: f64,
    tg_positions: [u32; 2],
    dispatches_per_token: u32,
    sampler_on_gpu: bool,
    steps_per_submit: u32,
    record_ms_per_token: f64,
    wait_ms_per_token: f64,
    encode_ms_per_token: f64,
    pp_host_ms: f64,
}

/// What [`pp_tg`] runs: `cfg`'s sizes on `prompt`, each side of the FFN megakernel switch,
/// the decode drawing with `sampler`, on the GPU loop or the CPU-sampling path.
struct TgPlan<'a> {
    cfg: BenchConfig,
    /// What the cache holds before pp and before tg (`cfg.depth` ids).
    depth_ids: &'a [u32],
    prompt: &'a [u32],
    context: u32,
    prefill_megakernel: bool,
    decode_megakernel: bool,
    sampler: &'a SamplerConfig,
    cpu_sampling: bool,
}

/// `plan.cfg.reps` runs of [`pp_tg`] after one warm-up (not returned), on two sessions (one
/// for pp, one for tg) that every run starts over with [`Session::reset`], as a chat reuses
/// its session from turn to turn (and llama-bench its context from rep to rep). So the runs
/// time steps whose bind groups the warm-up made, as the page's prompts after
/// [`Session::warm_up`]; a fresh session's first step also makes its own, for ~4 µs of host
/// time a dispatch more (`examples/step_timing.rs --prompt`; BENCHMARKS.md "session 49").
async fn reps(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    plan: &TgPlan<'_>,
) -> Result<Vec<TgRun>, EngineError> {
    let session = || {
        let mut s = Session::new(ctx, model, plan.context, LogitsFor::LastToken);
        s.pipeline = plan.cfg.pipeline;
        s
    };
    let (mut pp, mut tg) = (session(), session());
    let mut runs = Vec::new();
    for rep in 0..=plan.cfg.reps {
        let r = pp_tg(&mut pp, &mut tg, plan).await?;
        if rep > 0 {
            runs.push(r);
        }
    }
    Ok(runs)
}

/// Two sessions, started over and each first holding `depth_ids`: `pp` prefills the prompt
/// (timed until its logits are back), `tg` decodes `gen_tokens` steps as `plan` says. With no
/// depth the decode session prefills the prompt's first id alone, for the loop's first draw.
/// Stop tokens don't end the run (random weights emit anything).
async fn pp_tg(
    pp: &mut Session,
    tg: &mut Session,
    plan: &TgPlan<'_>,
) -> Result<TgRun, EngineError> {
    let TgPlan {
        cfg,
        depth_ids,
        prompt,
        context: _,
        prefill_megakernel,
        decode_megakernel,
        sampler,
        cpu_sampling,
    } = plan;
    let cpu_sampling = *cpu_sampling;
    // The switch was checked once per run (in run_with) for this model and device; sessions
    // differ only in their buffers, so it is set directly here.
    for s in [&mut *pp, &mut *tg] {
        s.reset();
        s.megakernel = *prefill_megakernel;
    }
    let (pp_rate, pp_host_ms) = {
        let s = pp;
        if !depth_ids.is_empty() {
            s.forward(depth_ids).await?;
        }
        let clock = Clock::start();
        s.forward(prompt).await?;
        (
            prompt.len() as f64 / clock.seconds(),
            1e3 * s.stats.forward_host_seconds,
        )
    };
    let s = tg;
    let before = if depth_ids.is_empty() {
        &prompt[..1]
    } else {
        depth_ids
    };
    let mut logits = s.forward(before).await?;
    let first_position = s.pos;
    s.megakernel = *decode_megakernel;
    let clock = Clock::start();
    if cpu_sampling {
        let mut history = before.to_vec();
        for _ in 0..cfg.gen_tokens {
            let id = crate::reference::sample::sample(&logits, &history, sampler);
            history.push(id);
            logits = s.forward(&[id]).await?;
        }
    } else {
        // gen_tokens forwards: the loop runs one fewer than the tokens it emits, and its
        // first draw reads the prefill's logits, still on the GPU.
        let mut out = Vec::new();
        s.decode_on_gpu(sampler, 0, cfg.gen_tokens + 1, &[], &mut |_| true, &mut out)
            .await?;
    }
    let seconds = clock.seconds();
    let tokens = cfg.gen_tokens.max(1) as f64;
    Ok(TgRun {
        pp_tok_s: pp_rate,
        pp_host_ms,
        tg_tok_s: cfg.gen_tokens as f64 / seconds,
        tg_positions: [first_position, s.pos.saturating_sub(1)],
        dispatches_per_token: s.stats.dispatches_per_token,
        sampler_on_gpu: !cpu_sampling,
        steps_per_submit: s.stats.steps_per_submit.max(1),
        record_ms_per_token: if cpu_sampling {
            f64::NAN
        } else {
            s.stats.record_seconds * 1000.0 / tokens
        },
        wait_ms_per_token: if cpu_sampling {
            f64::NAN
        } else {
            s.stats.wait_seconds * 1000.0 / tokens
        },
        encode_ms_per_token: if cpu_sampling {
            f64::NAN
        } else {
            s.stats.encode_seconds * 1000.0 / tokens
        },
    })
}

/// GPU time of one kernel variant in a decode step (profiling mode).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelTime {
    /// The pipeline label, which names the variant (`matmul_q4_k_matvec_wg256_glu_silu_norm`).
    pub label: String,
    /// Dispatches of it per step.
    pub calls: u32,
    /// µs per step, summed over its calls (mean over the profiled steps).
    pub total_us: f64,
    /// Bytes its calls move at least, per step ([`crate::gpu::Work`]); `None` for kernels
    /// that count none (the small element-wise ones).
    pub bytes: Option<u64>,
    /// Operations its calls do per step, a multiply-add counting two; `None` likewise.
    pub flops: Option<u64>,
    /// Workgroups per call (mean over its calls): the grid, against the GPU's cores.
    pub workgroups: u64,
}

impl KernelTime {
    /// GB/s over its time, where its bytes are counted.
    pub fn gb_per_s(&self) -> Option<f64> {
        self.bytes.map(|b| b as f64 / (self.total_us * 1e3))
    }

    /// TFLOP/s over its time, where its operations are counted.
    pub fn tflop_per_s(&self) -> Option<f64> {
        self.flops.map(|f| f as f64 / (self.total_us * 1e6))
    }

    /// Its GB/s as a fraction of the probe's read bandwidth, and its TFLOP/s as a fraction of
    /// the ceiling of its arithmetic: the tensor cores' (operands in registers) for the
    /// tensor-core tiles (labels with `coop`), f32 FMAs otherwise. The larger says which bound
    /// it is nearer.
    pub fn of_ceilings(&self, probe: &Probe) -> (Option<f64>, Option<f64>) {
        let compute = if self.label.contains("coop") {
            probe.compute.coop_tflops
        } else {
            Some(probe.compute.fma_tflops)
        };
        (
            self.gb_per_s().map(|r| r / probe.read_gb_s),
            self.tflop_per_s().zip(compute).map(|(r, c)| r / c),
        )
    }
}

/// Which step [`profile_step`] times, after the cache holds its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfiledStep<'a> {
    /// One decode step.
    Decode,
    /// The prefill step of these tokens (at most [`crate::engine::PREFILL_CHUNK`] of them:
    /// one step).
    Prefill(&'a [u32]),
}

/// One decode or prefill step, kernel by kernel (`StepProfile` in `www/API.md`: what
/// `coco.profile` returns and `coco bench --profile --json` records).
#[derive(Clone, Debug, Serialize)]
pub struct StepProfile {
    /// Tokens the step runs: 1 for decode.
    pub tokens: u32,
    /// Per kernel variant, slowest first.
    pub kernels: Vec<KernelTime>,
    /// Σ of `kernels`: the step with one pass per dispatch (what profiling needs on WebGPU),
    /// so it includes a pass's overhead per dispatch.
    pub profiled_us: f64,
    /// The same step as it really runs, in one pass (GPU time between its timestamps).
    pub one_pass_us: f64,
    pub dispatches: u32,
    /// Steps averaged (after one warm-up of each kind).
    pub steps: u32,
    /// Positions in the KV cache when the step runs.
    pub position: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("not yet on this adapter: no timestamp-query")]
    NoTimestampQuery,
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Steps [`profile_step`] averages.
pub const PROFILE_STEPS: u32 = 5;

/// Times one step per kernel (one pass per dispatch) and as one pass, [`PROFILE_STEPS`]
/// times each after a warm-up: a decode step or a prefill step, in a fresh session after
/// prefilling `context` (so at position `context.len()`). The step is re-run at the same
/// position (its KV-cache write is the same each time), so the session's state is never
/// advanced by hand. `megakernel` assumes the caller checked it (`Session::set_megakernel`).
pub async fn profile_step(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    context: &[u32],
    step: ProfiledStep<'_>,
    pipeline: crate::model::Pipeline,
    megakernel: bool,
) -> Result<StepProfile, ProfileError> {
    if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
        return Err(ProfileError::NoTimestampQuery);
    }
    let step_tokens = match step {
        ProfiledStep::Decode => 1,
        ProfiledStep::Prefill(t) => t.len(),
    };
    let mut s = Session::new(
        ctx,
        model,
        (context.len() + step_tokens) as u32 + 8,
        LogitsFor::LastToken,
    );
    s.pipeline = pipeline;
    s.megakernel = megakernel;
    let last_logits = match context {
        [] => None,
        c => Some(s.forward(c).await?),
    };
    let ids: Vec<u32> = match step {
        ProfiledStep::Decode => vec![last_logits.map_or(0, |l| argmax(&l))],
        ProfiledStep::Prefill(t) => t[..t.len().min(s.scratch.rows as usize)].to_vec(),
    };
    ctx.queue
        .write_buffer(&s.scratch.ids, 0, bytemuck::cast_slice(&ids));
    let plan = s.plan().clone();
    let record = || -> Result<StepRecorder, EngineError> {
        let mut rec = StepRecorder::new(ctx);
        crate::model::forward(
            &mut rec,
            model,
            &s.kv,
            &s.scratch,
            ids.len() as u32,
            s.pos,
            LogitsFor::LastToken,
            &plan,
        )?;
        Ok(rec)
    };
    let mut totals: Vec<KernelTime> = Vec::new();
    let mut one_pass = Vec::new();
    let mut dispatches = 0;
    for step in 0..=PROFILE_STEPS {
        let rec = record()?;
        dispatches = rec.dispatch_count() as u32;
        let spans = rec
            .submit_timed(Timing::PerDispatch)
            .await
            .map_err(EngineError::from)?;
        let whole = record()?
            .submit_timed(Timing::Step)
            .await
            .map_err(EngineError::from)?;
        if step == 0 {
            continue; // warm-up
        }
        one_pass.push(whole.iter().map(|w| w.ns).sum::<f64>() / 1e3);
        for span in spans {
            let (bytes, flops) = (span.work.map(|w| w.bytes), span.work.map(|w| w.flops));
            match totals.iter_mut().find(|k| k.label == span.label) {
                Some(k) => {
                    k.calls += 1;
                    k.total_us += span.ns / 1e3;
                    k.workgroups += span.workgroups;
                    k.bytes = k.bytes.zip(bytes).map(|(a, b)| a + b);
                    k.flops = k.flops.zip(flops).map(|(a, b)| a + b);
                }
                None => totals.push(KernelTime {
                    label: span.label,
                    calls: 1,
                    total_us: span.ns / 1e3,
                    bytes,
                    flops,
                    workgroups: span.workgroups,
                }),
            }
        }
    }
    for k in &mut totals {
        k.workgroups /= k.calls as u64; // calls are still summed over the steps here
        k.calls /= PROFILE_STEPS;
        k.total_us /= PROFILE_STEPS as f64;
        k.bytes = k.bytes.map(|b| b / PROFILE_STEPS as u64);
        k.flops = k.flops.map(|f| f / PROFILE_STEPS as u64);
    }
    totals.sort_by(|a, b| b.total_us.total_cmp(&a.total_us));
    Ok(StepProfile {
        tokens: ids.len() as u32,
        profiled_us: totals.iter().map(|k| k.total_us).sum(),
        kernels: totals,
        one_pass_us: median(&one_pass),
        dispatches,
        steps: PROFILE_STEPS,
        position: s.pos,
    })
}

/// A figure, or `None` (JSON null) where it wasn't measured (NaN).
fn num(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// The record `coco bench --json` prints and the page's `coco.bench` returns: one schema,
/// `BenchRecord` in `www/API.md`.
#[derive(Clone, Debug, Serialize)]
pub struct BenchRecord {
    /// The file name (CLI) or the GGUF's `general.name` (page).
    pub model: String,
    pub adapter: String,
    /// The kernels and tuning overrides the run measured.
    pub kernels: KernelSettings,
    /// "fused" or "unfused".
    pub pipeline: &'static str,
    pub prompt_tokens: u32,
    pub gen_tokens: u32,
    /// Tokens in the KV cache before pp and tg (llama-bench's `-d`; 0: an empty cache).
    pub depth: u32,
    /// The first and last positions tg decoded at.
    pub tg_positions: [u32; 2],
    pub reps: u32,
    pub pp_tok_s: Option<f64>,
    pub tg_tok_s: Option<f64>,
    pub pp_runs: Vec<f64>,
    pub tg_runs: Vec<f64>,
    pub ms_per_token: Option<f64>,
    pub dispatches_per_token: u32,
    pub tg_sampled_tok_s: Option<f64>,
    pub tg_sampled_runs: Vec<f64>,
    pub sampled_dispatches_per_token: u32,
    pub sampled_vs_greedy: Option<f64>,
    pub cpu_sampler_ms: Option<f64>,
    pub sampler_on_gpu: bool,
    pub steps_per_submit: u32,
    pub record_ms_per_token: Option<f64>,
    pub wait_ms_per_token: Option<f64>,
    pub encode_ms_per_token: Option<f64>,
    pub pp_host_ms: Option<f64>,
    pub weight_bytes_per_token: u64,
    pub effective_gb_s: Option<f64>,
    /// With `--probe` only.
    pub probe: Option<Probe>,
    pub floor_ms: Option<f64>,
    pub fraction_of_floor: Option<f64>,
    pub megakernel: MegakernelAbRecord,
    /// `coco bench --profile`: the decode step kernel by kernel; null otherwise (always on
    /// the page, whose chart comes from `coco.profile`).
    pub profile: Option<ProfileRecord>,
    /// `coco bench --profile`: the prompt's prefill step; null otherwise.
    pub prefill_profile: Option<ProfileRecord>,
}

/// A profile, or why there is none.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum ProfileRecord {
    Step(StepProfile),
    /// `{"not_yet": "not yet on this adapter: no timestamp-query"}`.
    NotYet {
        not_yet: String,
    },
}

/// [`MegakernelAb`] as recorded; nulls where the megakernel did not run.
#[derive(Clone, Debug, Serialize)]
pub struct MegakernelAbRecord {
    pub tg_tok_s: Option<f64>,
    pub tg_off_tok_s: Option<f64>,
    /// tg with / tg without.
    pub ratio: Option<f64>,
    pub tg_runs: Vec<f64>,
    pub headline: bool,
    pub check: MegakernelCheckRecord,
}

/// [`MegakernelCheck`] as recorded (NaN differences as null).
#[derive(Clone, Debug, Serialize)]
pub struct MegakernelCheckRecord {
    pub passed: bool,
    pub max_abs: Option<f64>,
    pub max_rel: Option<f64>,
    pub rows: u32,
    pub detail: String,
}

impl BenchResult {
    /// The record of this run (`profile` and `prefill_profile` null: the caller sets them).
    pub fn record(&self, model: &str, pipeline: crate::model::Pipeline) -> BenchRecord {
        BenchRecord {
            model: model.to_string(),
            adapter: self.adapter.clone(),
            kernels: self.kernels.clone(),
            pipeline: match pipeline {
                crate::model::Pipeline::Fused => "fused",
                crate::model::Pipeline::Unfused => "unfused",
            },
            prompt_tokens: self.prompt_tokens,
            gen_tokens: self.gen_tokens,
            depth: self.depth,
            tg_positions: self.tg_positions,
            reps: self.reps,
            pp_tok_s: num(self.pp()),
            tg_tok_s: num(self.tg()),
            pp_runs: self.pp_tok_s.clone(),
            tg_runs: self.tg_tok_s.clone(),
            ms_per_token: num(1000.0 / self.tg()),
            dispatches_per_token: self.dispatches_per_token,
            tg_sampled_tok_s: num(self.tg_sampled()),
            tg_sampled_runs: self.tg_sampled_tok_s.clone(),
            sampled_dispatches_per_token: self.sampled_dispatches_per_token,
            sampled_vs_greedy: num(self.tg_sampled() / self.tg()),
            cpu_sampler_ms: num(self.cpu_sampler_ms),
            sampler_on_gpu: self.sampler_on_gpu,
            steps_per_submit: self.steps_per_submit,
            record_ms_per_token: num(self.record_ms_per_token),
            wait_ms_per_token: num(self.wait_ms_per_token),
            encode_ms_per_token: num(self.encode_ms_per_token),
            pp_host_ms: num(self.pp_host_ms),
            weight_bytes_per_token: self.weight_bytes_per_token,
            effective_gb_s: num(self.effective_gb_s()),
            probe: self.probe.clone(),
            floor_ms: self.floor_seconds().map(|f| f * 1000.0),
            fraction_of_floor: self.fraction_of_floor(),
            megakernel: self.megakernel.record(),
            profile: None,
            prefill_profile: None,
        }
    }
}

impl MegakernelAb {
    pub fn record(&self) -> MegakernelAbRecord {
        let c = &self.check;
        MegakernelAbRecord {
            tg_tok_s: num(self.tg()),
            tg_off_tok_s: num(median(&self.tg_off)),
            ratio: num(self.ratio()),
            tg_runs: self.tg_on.clone(),
            headline: self.headline,
            check: MegakernelCheckRecord {
                passed: c.passed,
                max_abs: num(c.max_abs as f64),
                max_rel: num(c.max_rel as f64),
                rows: c.rows,
                detail: c.detail.clone(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(label: &str, total_us: f64, bytes: Option<u64>, flops: Option<u64>) -> KernelTime {
        KernelTime {
            label: label.into(),
            calls: 1,
            total_us,
            bytes,
            flops,
            workgroups: 1,
        }
    }

    /// The floor charges the GPU's dependent dispatch (the 128-workgroup grid timed with
    /// timestamps) where the probe has it, the wall-clock one otherwise.
    #[test]
    fn the_floor_charges_the_gpus_dispatch_where_timed() {
        let grid = |workgroups, dispatch_us, gpu_timed| GridSync {
            workgroups,
            dispatch_us,
            barrier_us: None,
            stale_reads: 0,
            gpu_timed,
        };
        let mut probe = Probe {
            read_gb_s: 1000.0,
            dispatch_us: 4.0,
            round_trip_us: 0.0,
            grid_sync: vec![grid(16, 1.5, true), grid(128, 2.0, true)],
            matrix_reads: Vec::new(),
            compute: ComputeProbe {
                fma_tflops: 1.0,
                coop_tflops: None,
                coop_wg_loads_tflops: None,
            },
        };
        assert_eq!(probe.step_dispatch_us(), 2.0);
        probe.grid_sync = vec![grid(128, 3.0, false)];
        assert_eq!(probe.step_dispatch_us(), 4.0);
        probe.grid_sync.clear();
        assert_eq!(probe.step_dispatch_us(), 4.0);
    }

    /// A kernel's rates against the probe's ceilings: read bandwidth, and the tensor cores'
    /// TFLOP/s for the tensor-core tiles, f32 FMA's for the rest; none where nothing counts.
    #[test]
    fn rates_are_held_against_the_matching_ceiling() {
        let probe = Probe {
            read_gb_s: 4000.0,
            dispatch_us: 3.0,
            round_trip_us: 100.0,
            grid_sync: Vec::new(),
            matrix_reads: Vec::new(),
            compute: ComputeProbe {
                fma_tflops: 50.0,
                coop_tflops: Some(400.0),
                coop_wg_loads_tflops: Some(200.0),
            },
        };
        // 2 GB and 0.1 TFLOP in 1 ms: 2,000 GB/s and 100 TFLOP/s.
        let tiles = kernel(
            "matmul_q4_0_coop128x128",
            1000.0,
            Some(2_000_000_000),
            Some(100_000_000_000),
        );
        assert_eq!(tiles.of_ceilings(&probe), (Some(0.5), Some(0.25)));
        let portable = kernel(
            "matmul_q4_0_wide64x128",
            1000.0,
            Some(2_000_000_000),
            Some(25_000_000_000),
        );
        assert_eq!(portable.of_ceilings(&probe), (Some(0.5), Some(0.5)));
        let none = kernel("get_rows_q8_0", 10.0, None, None);
        assert_eq!(none.of_ceilings(&probe), (None, None));
        let no_coop = Probe {
            compute: ComputeProbe {
                coop_tflops: None,
                coop_wg_loads_tflops: None,
                ..probe.compute.clone()
            },
            ..probe
        };
        assert_eq!(tiles.of_ceilings(&no_coop).1, None);
    }
}
