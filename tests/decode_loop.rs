//! The GPU-resident decode loop (engine/decode.rs) against the one-token CPU-sampling path,
//! greedy and with sampling settings, on lavapipe with the fixture models
//! (scripts/fixtures.sh); the same tokens for K = 1 and K = 16 steps per submit; and the
//! argmax kernel (`kernels::argmax`) against `sampler::argmax` on random logits with ties,
//! NaN and ±inf. The sampling kernel itself is tested in tests/kernels_sample.rs.
//!
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test decode_loop -- --test-threads=2`

use std::path::PathBuf;
use std::sync::Arc;

use coco::engine::{load_path, LogitsFor, Model, Session, StopReason, MAX_STEPS};
use coco::gguf::{read_header, Value};
use coco::gpu::{Binding, DeviceOptions, GpuContext, StepRecorder};
use coco::kernels::argmax::{argmax, PARTIALS_WORDS};
use coco::model::Pipeline;
use coco::sampler::{self, SamplerConfig};
use coco::tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn gpu() -> Arc<GpuContext> {
    Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe: see the file header)"))
}

fn fixture(name: &str) -> PathBuf {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.gguf"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/fixtures.sh",
        path.display()
    );
    path
}

fn load(ctx: &Arc<GpuContext>, name: &str) -> Model {
    load_path(ctx, &fixture(name), 512).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `name` with `eos` as its end-of-generation token, so greedy decoding stops where we want.
fn load_with_eos(ctx: &Arc<GpuContext>, name: &str, eos: u32) -> Model {
    let mut model = load(ctx, name);
    let mut md = read_header(&fixture(name)).expect("header").metadata;
    md.entries
        .insert("tokenizer.ggml.eos_token_id".into(), Value::U32(eos));
    md.entries.remove("tokenizer.ggml.eot_token_id");
    model.tokenizer = Tokenizer::from_gguf(&md).expect("tokenizer");
    assert!(model.tokenizer.eos_ids().contains(&eos));
    model
}

fn prompt(model: &Model) -> Vec<u32> {
    let ids = model
        .tokenizer
        .encode("Once upon a time, in a small town", true, false);
    assert!(ids.len() > 2, "prompt encodes to {ids:?}");
    ids
}

/// What one `generate` left behind.
#[derive(Debug, PartialEq)]
struct Run {
    ids: Vec<u32>,
    stop: StopReason,
    pos: u32,
    cached: Vec<u32>,
    generated_tokens: u32,
}

fn generate(s: &mut Session, prompt: &[u32], max_new: u32, stop_after: Option<usize>) -> Run {
    generate_with(s, prompt, max_new, stop_after, &SamplerConfig::greedy())
}

fn generate_with(
    s: &mut Session,
    prompt: &[u32],
    max_new: u32,
    stop_after: Option<usize>,
    sampler: &SamplerConfig,
) -> Run {
    let mut seen = 0;
    let mut on_token = |_id: u32| {
        seen += 1;
        stop_after.is_none_or(|n| seen < n)
    };
    let before = s.stats.generated_tokens;
    let ids = s
        .generate_blocking(prompt, max_new, sampler, &mut on_token)
        .expect("generate");
    Run {
        ids,
        stop: s.stats.stop,
        pos: s.pos,
        cached: s.cached_tokens.clone(),
        generated_tokens: s.stats.generated_tokens - before,
    }
}

/// A session on the GPU loop (`gpu`) or the CPU-sampling path. The GPU loop's batch budget
/// is unlimited, so K reaches MAX_STEPS whatever the machine's speed (no timing in tests).
fn session(ctx: &Arc<GpuContext>, model: &Arc<Model>, context: u32, gpu: bool) -> Session {
    let mut s = Session::new(ctx, model, context, LogitsFor::LastToken);
    s.cpu_sampling = !gpu;
    s.batch_budget_seconds = f64::INFINITY;
    s
}

/// Tokens from which the GPU loop's batches reach a full one (MAX_STEPS = 16 steps per
/// submit): the runs that check K = MAX_STEPS generate this many.
const FULL_RAMP: u32 = 40;

/// The largest steps per submit a GPU-loop `generate` of `n` tokens reaches with `depth`
/// batches in flight: engine/decode.rs's policy with an unlimited budget. K doubles from 1
/// up to MAX_STEPS, but at most 2 until two batches have been read (the first one timed).
fn ramp_max(n: u32, depth: u32) -> u32 {
    let (mut submitted, mut k_next, mut reads, mut max) = (0, 1, 0, 0);
    let mut in_flight = std::collections::VecDeque::new();
    loop {
        while in_flight.len() < depth as usize && submitted < n {
            let cap = if reads >= 2 { MAX_STEPS } else { 2 };
            let k = k_next.min(cap).min(n - submitted);
            in_flight.push_back(k);
            submitted += k;
            max = max.max(k);
            k_next = (k_next * 2).min(MAX_STEPS);
        }
        if in_flight.pop_front().is_none() {
            return max;
        }
        reads += 1;
    }
}

/// CPU path vs GPU loop on one model: `n` greedy tokens (FULL_RAMP reaches a batch of
/// MAX_STEPS; 16 stops at batches of 8, which is enough to check a family's forward inside a
/// multi-step batch), then (with `Stop::Also`) a stop from `on_token` at token 7 and a
/// following `generate` that continues from the rolled-back state.
fn compare(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    pipeline: Pipeline,
    megakernel: bool,
    n: u32,
    stop: Stop,
) {
    let p = prompt(model);
    let mut cpu = session(ctx, model, 512, false);
    let mut gpu_s = session(ctx, model, 512, true);
    for s in [&mut cpu, &mut gpu_s] {
        s.pipeline = pipeline;
        if megakernel {
            let check = s.set_megakernel_blocking(true).expect("megakernel check");
            assert!(check.passed, "megakernel check: {check:?}");
        }
    }
    let a = generate(&mut cpu, &p, n, None);
    let b = generate(&mut gpu_s, &p, n, None);
    eprintln!("{pipeline:?} megakernel={megakernel}: {:?}", a.ids);
    assert_eq!(a, b, "{n} greedy tokens: CPU path vs GPU loop");
    assert_eq!(a.stop, StopReason::MaxTokens);
    assert!(!cpu.stats.sampler_on_gpu && cpu.stats.steps_per_submit == 1);
    assert!(gpu_s.stats.sampler_on_gpu);
    assert_eq!(
        gpu_s.stats.steps_per_submit,
        ramp_max(n, ctx.batches_in_flight)
    );
    assert_eq!(
        gpu_s.stats.dispatches_per_token,
        cpu.stats.dispatches_per_token + 1,
        "a GPU-loop step is the forward plus the argmax dispatch"
    );
    if stop == Stop::Not {
        return;
    }

    // A stop from on_token at the 7th token, mid-batch: same tokens, same rolled-back state,
    // then a second generate on top of it continues identically.
    let mut cpu = session(ctx, model, 512, false);
    let mut gpu_s = session(ctx, model, 512, true);
    for s in [&mut cpu, &mut gpu_s] {
        s.pipeline = pipeline;
        s.megakernel = megakernel;
    }
    let a = generate(&mut cpu, &p, n, Some(7));
    let b = generate(&mut gpu_s, &p, n, Some(7));
    assert_eq!(a.ids.len(), 7);
    assert_eq!(a.stop, StopReason::Stopped);
    assert_eq!(a, b, "stopped at token 7");
    assert_eq!(
        b.pos as usize,
        p.len() + 6,
        "the 7th token is not in the cache yet"
    );
    let next = [a.ids[6], p[1]];
    let a2 = generate(&mut cpu, &next, 12, None);
    let b2 = generate(&mut gpu_s, &next, 12, None);
    assert_eq!(a2, b2, "the generate after a stop");
}

/// Whether [`compare`] also stops mid-batch and generates on from the rolled-back state.
#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Also,
    /// The roll-back is the decode loop's own (decode.rs: the position and the token list go
    /// back; the cache is overwritten from there), the same whatever the family's forward:
    /// llama checks it on every pipeline and gemma3 on a second family; on qwen2, qwen3 and
    /// smollm3 (128k–152k-row LM heads), phi3 and gemma2 it was 38 more lavapipe decode
    /// steps per model (CI time) for no other property.
    Not,
}

/// Sampled settings (the defaults: penalty, top-k, top-p, min-p, temperature; and top-k off
/// with a longer penalty window): the GPU loop with K up to 16, the GPU loop with K = 1 (a
/// zero batch budget) and the CPU sampler draw the same tokens for the same seed, including
/// across a second `generate` whose penalty window reaches into the first one's tokens.
fn compare_sampled(ctx: &Arc<GpuContext>, model: &Arc<Model>, how_many: usize, n: u32) {
    let p = prompt(model);
    let settings = [
        SamplerConfig::default(),
        SamplerConfig {
            top_k: 0,
            top_p: 0.9,
            min_p: 0.0,
            temperature: 1.2,
            repeat_penalty: 1.3,
            repeat_last_n: 200,
            seed: 7,
        },
        SamplerConfig {
            seed: 1 << 40,
            repeat_penalty: 1.0,
            top_p: 1.0,
            min_p: 0.0,
            top_k: 1000,
            temperature: 1.0,
            ..Default::default()
        },
    ];
    for cfg in &settings[..how_many] {
        let mut cpu = session(ctx, model, 512, false);
        let mut k16 = session(ctx, model, 512, true);
        let mut k1 = session(ctx, model, 512, true);
        k1.batch_budget_seconds = 0.0;
        let runs: Vec<(Run, Run)> = [&mut cpu, &mut k16, &mut k1]
            .into_iter()
            .map(|s| {
                let first = generate_with(s, &p, n, None, cfg);
                let next = [first.ids[first.ids.len() - 1], p[1]];
                (first, generate_with(s, &next, 12, None, cfg))
            })
            .collect();
        eprintln!("{cfg:?}: {:?}", runs[0].0.ids);
        assert_eq!(
            runs[0], runs[1],
            "{cfg:?}: CPU sampler vs GPU loop (K ≤ 16)"
        );
        assert_eq!(runs[1], runs[2], "{cfg:?}: GPU loop K ≤ 16 vs K = 1");
        assert_eq!(
            k16.stats.steps_per_submit,
            ramp_max(n, ctx.batches_in_flight)
        );
        assert_eq!(k1.stats.steps_per_submit, 1);
        assert!(k16.stats.sampler_on_gpu && !cpu.stats.sampler_on_gpu);
        let distinct: std::collections::BTreeSet<_> = runs[0].0.ids.iter().collect();
        assert!(
            distinct.len() > 3,
            "{cfg:?}: a sampled run repeats {distinct:?}"
        );
    }
}

#[test]
fn sampled_gpu_loop_matches_cpu_sampler() {
    let ctx = gpu();
    // Every setting on llama; the defaults on gemma3 (6 layers: slower on lavapipe), whose
    // forward (sandwich norms, per-head Q/K norms, sliding windows) is the other family.
    compare_sampled(&ctx, &Arc::new(load(&ctx, "llama-spm-q4_0")), 3, FULL_RAMP);
    compare_sampled(&ctx, &Arc::new(load(&ctx, "gemma3-q4_k")), 1, 16);
    // gemma2: both samplers draw from the soft-capped logits the forward's last step leaves.
    compare_sampled(&ctx, &Arc::new(load(&ctx, "gemma2-q4_k")), 1, 16);
}

#[test]
fn argmax_kernel_matches_cpu() {
    let ctx = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut cases: Vec<(String, Vec<f32>)> = Vec::new();
    for n in [262_144usize, 128_256, 32_000, 1, 257, 1025, 4099] {
        // Few distinct values, so the maximum is tied many times.
        let ties = (0..n)
            .map(|_| rng.gen_range(-20..20) as f32 * 0.25)
            .collect();
        cases.push((format!("ties n={n}"), ties));
        let wide = (0..n).map(|_| rng.gen_range(-30.0f32..30.0)).collect();
        cases.push((format!("random n={n}"), wide));
    }
    let n = 128_256;
    let mut v: Vec<f32> = (0..n).map(|_| rng.gen_range(-5.0f32..5.0)).collect();
    v[0] = f32::NAN;
    v[77] = 100.0;
    cases.push(("NaN at 0 (the scan never moves)".into(), v.clone()));
    v[0] = 1.0;
    v[5] = f32::NAN;
    v[90_000] = -f32::NAN;
    cases.push(("NaN elsewhere is skipped".into(), v.clone()));
    v[100_000] = f32::INFINITY;
    v[120_000] = f32::INFINITY;
    cases.push(("+inf ties: lowest".into(), v));
    cases.push(("all -inf".into(), vec![f32::NEG_INFINITY; 3001]));
    let mut z = vec![-1.0f32; 2000];
    z[1500] = 0.0;
    z[700] = -0.0;
    cases.push(("-0 ties +0".into(), z));
    let mut nan_tail = vec![f32::NAN; 5000];
    nan_tail[0] = -3.0;
    cases.push(("all NaN but the first".into(), nan_tail));

    // Two cases per pass, sharing the partials: the arrival counter must be back at 0 for the
    // next dispatch within one pass as well as across submits.
    let partials = ctx.storage_buffer("partials", PARTIALS_WORDS * 4);
    let ids = ctx.storage_buffer("ids", 4);
    let ring = ctx.storage_buffer("ring", 4 * 8);
    for (pair_index, pair) in cases.chunks(2).enumerate() {
        let bufs: Vec<wgpu::Buffer> = pair
            .iter()
            .map(|(_, logits)| ctx.storage_buffer_init("logits", bytemuck::cast_slice(logits)))
            .collect();
        let mut rec = StepRecorder::new(&ctx);
        for (j, ((_, logits), buf)) in pair.iter().zip(&bufs).enumerate() {
            argmax(
                &mut rec,
                &Binding::from(buf),
                logits.len() as u32,
                &Binding::from(&partials),
                &Binding::from(&ids),
                &Binding::from(&ring),
                ((2 * pair_index + j) % 8) as u32,
            )
            .expect("argmax");
        }
        rec.submit();
        let got_ids = ctx.read_buffer(&ids, 0, 4).expect("read ids");
        let got_id = u32::from_le_bytes(got_ids[..4].try_into().unwrap());
        for (j, (name, logits)) in pair.iter().enumerate() {
            let slot = ((2 * pair_index + j) % 8) as u64;
            let got_ring = ctx.read_buffer(&ring, slot * 4, 4).expect("read ring");
            let got = u32::from_le_bytes(got_ring[..4].try_into().unwrap());
            let want = sampler::argmax(logits);
            assert_eq!(
                got,
                want,
                "{name}: GPU argmax {got} vs CPU {want}: logits[{got}] = {:?}, logits[{want}] = {:?}",
                logits.get(got as usize),
                logits[want as usize]
            );
            if j + 1 == pair.len() {
                assert_eq!(got_id, want, "{name}: ids[0] holds the pass's last argmax");
            }
        }
    }
}

#[test]
fn gpu_loop_matches_cpu_path_llama() {
    let ctx = gpu();
    let model = Arc::new(load(&ctx, "llama-spm-q4_0"));
    compare(&ctx, &model, Pipeline::Fused, false, FULL_RAMP, Stop::Also);
    compare(&ctx, &model, Pipeline::Unfused, false, 16, Stop::Also);
    compare(&ctx, &model, Pipeline::Fused, true, 16, Stop::Also);
}

#[test]
fn gpu_loop_matches_cpu_path_qwen_phi3_and_gemma() {
    let ctx = gpu();
    for (name, stop) in [
        ("qwen2-q8_0", Stop::Not),
        ("qwen3-q8_0", Stop::Not),
        ("phi3-q4_k", Stop::Not),
        ("gemma3-q4_k", Stop::Also),
        ("gemma2-q8_0", Stop::Not),
    ] {
        let model = Arc::new(load(&ctx, name));
        compare(&ctx, &model, Pipeline::Fused, false, 16, stop);
    }
}

/// SmolLM3's NoPE layer (layer 3: the KV write without RoPE) through the decode loop.
#[test]
fn gpu_loop_matches_cpu_path_at_every_depth() {
    // One and three batches in flight (the default is two): the same tokens, the same
    // rolled-back state after a stop, and the ring slots cycling through each depth.
    for depth in [1, 3] {
        let options = DeviceOptions {
            batches_in_flight: Some(depth),
            ..DeviceOptions::default()
        };
        let ctx =
            Arc::new(pollster::block_on(GpuContext::with_options(options)).expect("a GPU adapter"));
        assert_eq!(ctx.batches_in_flight, depth);
        let model = Arc::new(load(&ctx, "llama-spm-q4_0"));
        compare(&ctx, &model, Pipeline::Fused, false, FULL_RAMP, Stop::Also);
    }
}

#[test]
fn a_prompt_step_submitted_in_parts_gives_the_same_logits() {
    // Session::prefill_submit_every submits a prompt step's dispatches n at a time, so the GPU
    // starts while the host records the rest: each part's pass must see what the parts
    // before wrote, and each part's parameter blocks (packed into the same buffer) must be
    // the ones it was recorded with. Every split, down to a submit per dispatch, gives the
    // one-submit step's logits bit for bit.
    let ctx = gpu();
    let model = Arc::new(load(&ctx, "gemma3-q4_k"));
    let ids = prompt(&model);
    let logits = |every: Option<usize>| {
        let mut s = Session::new(&ctx, &model, 512, LogitsFor::AllTokens);
        s.prefill_submit_every = every;
        s.forward_blocking(&ids).expect("prefill")
    };
    let whole = logits(None);
    for every in [1, 7, 64] {
        let parts = logits(Some(every));
        assert!(
            whole
                .iter()
                .zip(&parts)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "{every} dispatches a submit: the logits differ"
        );
        assert_eq!(whole.len(), parts.len());
    }
}

#[test]
fn a_generation_creates_bind_groups_for_one_step_only() {
    // Every kernel takes its parameter block's offset at the dispatch (a dynamic uniform
    // offset), so a bind group depends on what the dispatch binds, not on where its block
    // lies in the batch: the prompt step and the first decode step create them, and the
    // other 39 steps of 16-step batches create none. Keyed by the block's offset (until
    // session 49), only the products whose parameters don't depend on the position were
    // shared: ~66% of one per (step, dispatch) of a batch.
    let ctx = gpu();
    let model = Arc::new(load(&ctx, "gemma3-q4_k"));
    let mut s = session(&ctx, &model, 512, true);
    let before = ctx.resource_counts().bind_groups;
    let run = generate(&mut s, &prompt(&model), FULL_RAMP, None);
    assert_eq!(run.ids.len(), FULL_RAMP as usize);
    assert_eq!(s.stats.steps_per_submit, MAX_STEPS);
    let created = ctx.resource_counts().bind_groups - before;
    let per_step = s.stats.dispatches_per_token as usize;
    eprintln!("bind groups: {created} for {per_step} dispatches per step over {FULL_RAMP} steps");
    // The prompt step binds the same buffers as a decode step but for a few row ranges.
    assert!(
        created <= per_step + 4,
        "{created} bind groups for {per_step} dispatches per step over {MAX_STEPS}-step batches"
    );
}

/// After [`Session::warm_up`] (what the page runs once a model is loaded) a prompt of any
/// length up to a chunk (or the context) compiles no kernel and makes at most the few bind groups whose row
/// ranges follow its length: the prompt steps' tile kernels and bind groups came with the
/// warm-up, not with a visitor's first prompt. Without its recorded prompt steps, a 17-token
/// prompt on lavapipe compiled a kernel here (and on the Llama-1B shape a 48-token one 5
/// kernels and 98 bind groups).
#[test]
fn after_the_warm_up_no_prompt_length_compiles_a_kernel() {
    let ctx = gpu();
    let model = Arc::new(load(&ctx, "llama3-q4_0"));
    let mut s = session(&ctx, &model, 512, true);
    pollster::block_on(s.warm_up()).expect("warm-up");
    // The fixture's trained context, 256 tokens, is the longest prompt.
    let longest = s.kv.context as usize;
    let ids: Vec<u32> = (0..longest as u32).map(|i| 1 + i % 200).collect();
    for t in [
        3, 8, 17, 24, 25, 32, 33, 48, 64, 65, 100, 128, 129, 200, 255, longest,
    ] {
        let counts = ctx.resource_counts();
        s.reset();
        s.forward_blocking(&ids[..t]).expect("prompt");
        let after = ctx.resource_counts();
        let (compiled, made) = (
            after.pipelines - counts.pipelines,
            after.bind_groups - counts.bind_groups,
        );
        assert!(
            compiled == 0 && made <= 4,
            "a {t}-token prompt after the warm-up compiled {compiled} kernels and made {made} \
             bind groups"
        );
    }
}

#[test]
fn gpu_loop_matches_cpu_path_smollm3() {
    let ctx = gpu();
    let model = Arc::new(load(&ctx, "smollm3-q8_0"));
    compare(&ctx, &model, Pipeline::Fused, false, 16, Stop::Not);
}

/// An end-of-generation token mid-batch: the model's own greedy sequence with its 10th token
/// made the EOS id. Both paths stop at its first occurrence, drop it, and leave the same
/// state; generating on continues identically. Also a context that fills mid-batch.
#[test]
fn eos_and_full_context_roll_back_like_the_cpu_path() {
    let ctx = gpu();
    let name = "llama-spm-q4_0";
    let plain = Arc::new(load(&ctx, name));
    let p = prompt(&plain);
    let seq = generate(&mut session(&ctx, &plain, 512, false), &p, 40, None).ids;
    let eos = seq[9];
    let stop_at = seq.iter().position(|&t| t == eos).unwrap();
    let model = Arc::new(load_with_eos(&ctx, name, eos));
    let mut cpu = session(&ctx, &model, 512, false);
    let mut gpu_s = session(&ctx, &model, 512, true);
    let a = generate(&mut cpu, &p, 40, None);
    let b = generate(&mut gpu_s, &p, 40, None);
    assert_eq!(a.stop, StopReason::Eos);
    assert_eq!(a.ids, seq[..stop_at].to_vec());
    assert_eq!(a, b, "EOS at token {stop_at}");
    let next = [p[1], p[2]];
    assert_eq!(
        generate(&mut cpu, &next, 12, None),
        generate(&mut gpu_s, &next, 12, None),
        "the generate after an EOS"
    );

    // Context of prompt + 11 positions: full after 11 decode steps, inside the 3rd batch.
    let context = p.len() as u32 + 11;
    let a = generate(&mut session(&ctx, &plain, context, false), &p, 40, None);
    let b = generate(&mut session(&ctx, &plain, context, true), &p, 40, None);
    assert_eq!(a.stop, StopReason::ContextFull);
    assert_eq!(a.pos, context);
    assert_eq!(a, b, "context full");
}
