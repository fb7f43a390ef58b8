//! Dispatch structure and `bench::profile_step` (`coco bench --profile`).
//!
//! The structure checks run on every adapter: a step's pipeline labels
//! (`StepRecorder::labels`, recorded without submitting, no timestamps needed) must be exactly
//! the list `model::Plan` predicts for every fixture architecture, pipeline and switch, and
//! hold the fusions the design promises (one QKV+RoPE matvec per llama layer on decode, …).
//! The timing checks need TIMESTAMP_QUERY (lavapipe has it); without it they say so and
//! check only that the profile is refused. No timing thresholds: only that every kernel the
//! step dispatches shows up, with its call count and a positive time.
//!
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test profile -- --nocapture`

use std::path::PathBuf;
use std::sync::Arc;

use coco::bench::{bench_prompt, profile_step, ProfileError, ProfiledStep, StepProfile};
use coco::engine::{load_path, Loader, LogitsFor, Model, Session};
use coco::gguf::FileChunks;
use coco::gpu::{AttentionMerge, GpuContext};
use coco::model::{Op, Pipeline};

fn load(ctx: &Arc<GpuContext>, name: &str) -> Arc<Model> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.gguf"));
    Arc::new(load_path(ctx, &path, 64).unwrap_or_else(|e| panic!("{name}: {e}")))
}

fn ctx() -> Arc<GpuContext> {
    Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe)"))
}

/// Prompt tokens: the decode step runs at this position, the prefill step runs this many.
const PROMPT: u32 = 5;

/// The labels of a step of `t` tokens after prefilling `prompt` tokens, with the session's
/// switches set; asserts they are the plan's prediction, op by op, and returns them.
fn labels(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    prompt: u32,
    t: u32,
    pipeline: Pipeline,
    megakernel: bool,
) -> Vec<String> {
    let mut s = Session::new(ctx, model, 64, LogitsFor::LastToken);
    s.pipeline = pipeline;
    s.megakernel = megakernel;
    if prompt > 0 {
        s.forward_blocking(&bench_prompt(model, prompt))
            .expect("prefill");
    }
    let got = s.step_labels(t).expect("record");
    let plan = s.plan().clone();
    let want = plan.labels(model, ctx, t, s.pos, LogitsFor::LastToken);
    if got != want {
        let first = got.iter().zip(&want).position(|(g, w)| g != w);
        panic!(
            "{:?} t={t} at {}: {} labels recorded, {} planned; first difference at {first:?}\n\
             recorded {got:#?}\nplanned {want:#?}\nplan:\n{plan}",
            model.config.arch,
            s.pos,
            got.len(),
            want.len()
        );
    }
    got
}

fn count(labels: &[String], pred: impl Fn(&str) -> bool) -> u32 {
    labels.iter().filter(|l| pred(l)).count() as u32
}

/// Every fixture architecture, quantized and not, on both pipelines, decode and prefill,
/// short and long enough for the attention to split its keys: the labels are the plan's.
#[test]
fn every_step_records_what_the_plan_lists() {
    let ctx = ctx();
    for name in [
        "llama-spm-q8_0",
        "llama3-q4_k",
        "llama3-f16",
        "qwen2-q8_0",
        "qwen2-q4_0",
        "qwen3-q8_0",
        "qwen3-q4_k",
        "phi3-q8_0",
        "phi3-q4_k",
        "smollm3-q8_0",
        "smollm3-q4_k",
        "granite-q8_0",
        "gemma3-q4_k",
        "gemma3-q8_0",
        "gemma2-q8_0",
        "gemma2-q4_k",
    ] {
        let model = load(&ctx, name);
        for pipeline in [Pipeline::Fused, Pipeline::Unfused] {
            // decode at the start, decode past 16 keys (split attention), a prefill chunk
            for (prompt, t) in [(0, 1), (PROMPT, 1), (40, 1), (0, PROMPT), (0, 33)] {
                let l = labels(&ctx, &model, prompt, t, pipeline, false);
                println!(
                    "{name} {pipeline:?} prompt {prompt} t {t}: {} dispatches",
                    l.len()
                );
            }
        }
        let l = labels(&ctx, &model, PROMPT, 1, Pipeline::Fused, true);
        println!("{name} megakernel decode: {} dispatches", l.len());
    }
}

/// The fusions the design promises, counted on the labels themselves (not from the plan).
#[test]
fn fused_decode_step_has_the_promised_fusions() {
    let ctx = ctx();
    // phi3: its fused file tensors are separate GPU tensors, so it takes llama's fusions
    // (head_dim 96 in the QKV+RoPE matvec)
    for name in [
        "llama3-q8_0",
        "qwen2-q8_0",
        "qwen3-q8_0",
        "phi3-q8_0",
        "gemma3-q8_0",
        "gemma2-q8_0",
        "smollm3-q8_0",
        "granite-q8_0",
    ] {
        let model = load(&ctx, name);
        let c = &model.config;
        let layers = c.n_layers;
        let l = labels(&ctx, &model, PROMPT, 1, Pipeline::Fused, false);
        let rope = match c.arch {
            coco::model::Arch::Llama | coco::model::Arch::Smollm3 | coco::model::Arch::Granite => {
                "normal"
            }
            _ => "neox",
        };
        // SmolLM3's NoPE layers (every 4th; the fixture has 4 layers, so layer 3): no RoPE
        // kernel, Q/K/V in one matvec, then the cache write on its own.
        let nope = if c.arch == coco::model::Arch::Smollm3 {
            layers / 4
        } else {
            0
        };
        assert_eq!(count(&l, |l| l.starts_with("get_rows")), 1, "{name}");
        assert_eq!(
            count(&l, |l| l.contains("_glu_")),
            layers,
            "{name}: gate/up+act"
        );
        assert_eq!(
            count(&l, |l| l == "norm_rms"),
            0,
            "{name}: every norm folded"
        );
        assert_eq!(
            count(&l, |l| l.starts_with("rope_") && !l.contains("kv")),
            0
        );
        assert_eq!(count(&l, |l| l == "attention_kv_write"), nope, "{name}");
        // Gemma's sandwich norms: folded into W_o and W_down where the matvec has the
        // post-norm epilogue (subgroups), else a norm_rms_add dispatch after each.
        let (folded, post_norms) = if ctx.has_subgroups() {
            (2 * layers, 0)
        } else {
            (0, 2 * layers)
        };
        if c.arch.is_gemma() {
            assert_eq!(count(&l, |l| l.contains("_post_norm")), folded, "{name}");
            assert_eq!(count(&l, |l| l == "norm_rms_add"), post_norms, "{name}");
        }
        if c.arch == coco::model::Arch::Gemma3 || c.arch == coco::model::Arch::Qwen3 {
            // Q/K norms need whole heads: each head's last workgroup of the Q/K/V matvec
            // norms and rotates it, with the norm, RoPE and the cache write in that matvec too.
            let fused = format!("_qkv_rope_{rope}_qk_norm_norm");
            assert_eq!(count(&l, |l| l.contains(&fused)), layers, "{name}");
            assert_eq!(count(&l, |l| l.starts_with("rope_kv_write")), 0, "{name}");
            if c.arch == coco::model::Arch::Qwen3 {
                assert_eq!(count(&l, |l| l == "norm_rms_add"), 0, "{name}");
            }
            // per layer: qkv+norms+rope, attention, o-proj (+ gemma3's post-norm), glu, down
            // (+ post-norm)
            let sandwich = if c.arch.is_gemma() { post_norms } else { 0 };
            assert_eq!(l.len() as u32, 2 + 5 * layers + sandwich, "{name}: {l:#?}");
        } else if c.arch == coco::model::Arch::Gemma2 {
            // No Q/K norms: norm, Q/K/V, RoPE and the cache write in one matvec, as llama;
            // gemma3's sandwich norms; the final soft-cap in the LM head's store, so no
            // dispatch of its own and the LM head is the last.
            let fused = format!("_qkv_rope_{rope}_norm");
            assert_eq!(count(&l, |l| l.contains(&fused)), layers, "{name}");
            assert_eq!(count(&l, |l| l.starts_with("rope_kv_write")), 0, "{name}");
            assert!(l.iter().all(|l| !l.contains("softcap")), "{name}: {l:#?}");
            // per layer: qkv+rope, attention, o-proj (+ post-norm), glu, down (+ post-norm)
            assert_eq!(
                l.len() as u32,
                2 + 5 * layers + post_norms,
                "{name}: {l:#?}"
            );
        } else {
            let fused = format!("_qkv_rope_{rope}_norm");
            assert_eq!(count(&l, |l| l.contains(&fused)), layers - nope, "{name}");
            assert_eq!(count(&l, |l| l.starts_with("rope_kv_write")), 0, "{name}");
            assert_eq!(count(&l, |l| l.contains("_qkv_norm")), nope, "{name}");
            for (i, label) in l.iter().enumerate() {
                if label == "attention_kv_write" {
                    assert!(l[i - 1].contains("_qkv_norm"), "{name}: {l:#?}");
                }
            }
            // per layer: qkv+rope, attention, o-proj, glu, down; a NoPE layer adds the write
            assert_eq!(l.len() as u32, 2 + 5 * layers + nope, "{name}: {l:#?}");
        }
    }
}

/// The default model (llama.cpp's Q4_K_M Gemma-3-270M) has W_v at Q8_0 beside Q5_0 W_q and
/// W_k on 9 of its 18 layers. The loader widens those W_q and W_k to Q8_0 (exactly: the same
/// values), so every layer runs Q/K/V, RoPE and the cache write as one matvec. Loaded at the
/// file's types instead, the Q/K/V matvec leaves V out and V's own product writes the V-cache
/// rows. Both must record the plan's labels, neither may fall back to the separate RoPE +
/// cache-write dispatch, and the two must produce the same logits. The widened load streams
/// in odd-sized writes, so widened blocks straddle the writes (`GpuTensor::write_unit`).
#[test]
fn mixed_qkv_types_widen_into_one_rope_matvec() {
    let ctx = ctx();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/gemma-3-270m-q4_k_m.gguf");
    let load_with = |widen: bool| {
        let mut file = FileChunks::open(&path, 1 << 20).expect("the default model (README set-up)");
        let mut loader = Loader::new(&ctx, 64, Some(file.len)).with_staging_bytes(1_000_003);
        if !widen {
            loader = loader.without_widening();
        }
        while let Some(chunk) = file.next_chunk().expect("read") {
            loader.push(chunk).expect("load");
        }
        Arc::new(loader.finish().expect("load").0)
    };
    let widened = load_with(true);
    let apart = load_with(false);
    let layers = widened.config.n_layers as usize;
    let v_apart = apart
        .weights
        .layers
        .iter()
        .filter(|lw| lw.wv.ty != lw.wq.ty)
        .count();
    assert!(v_apart > 0, "the default model's W_v types all equal W_q's");
    let w = &widened.weights;
    assert!(w
        .layers
        .iter()
        .all(|lw| lw.wq.ty == lw.wv.ty && lw.wk.ty == lw.wv.ty));
    assert_eq!(
        w.layers.iter().filter(|lw| lw.wq.is_widened()).count(),
        v_apart
    );
    assert!(widened.weight_bytes > apart.weight_bytes);

    // V's own product right after the Q/K matvec: the norm folded in, no fusion, of W_v's
    // type (counted by position: the LM head may be a product of that type and form too).
    let v_label = |m: &Model| {
        let lw = m.weights.layers.iter().find(|lw| lw.wv.ty != lw.wq.ty);
        lw.map(|lw| format!("matmul_{}_matvec", lw.wv.ty.name().to_lowercase()))
    };
    let v_products = |l: &[String], v_label: &str| {
        l.windows(2)
            .filter(|pair| {
                pair[0].contains("_qkv_rope_")
                    && pair[1].starts_with(v_label)
                    && pair[1].ends_with("_norm")
            })
            .count()
    };
    let l_widened = labels(&ctx, &widened, PROMPT, 1, Pipeline::Fused, false);
    let l_apart = labels(&ctx, &apart, PROMPT, 1, Pipeline::Fused, false);
    for l in [&l_widened, &l_apart] {
        assert_eq!(
            count(l, |l| l.contains("_qkv_rope_neox_qk_norm_norm")) as usize,
            layers,
            "{l:#?}"
        );
        assert_eq!(count(l, |l| l.starts_with("rope_kv_write")), 0, "{l:#?}");
    }
    assert_eq!(v_label(&widened), None);
    let apart_label = v_label(&apart).unwrap();
    assert_eq!(v_products(&l_apart, &apart_label), v_apart, "{l_apart:#?}");
    assert_eq!(l_widened.len() + v_apart, l_apart.len());

    let ids = bench_prompt(&widened, 7);
    let logits = |m: &Arc<Model>| {
        let mut s = Session::new(&ctx, m, 64, LogitsFor::LastToken);
        s.forward_blocking(&ids).expect("forward")
    };
    let (a, b) = (logits(&widened), logits(&apart));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0f32, f32::max);
    // The same weights and the same int8 x': only the order of the block sums may differ.
    assert!(
        worst < 1e-3,
        "widened and file-type logits differ by {worst}"
    );
}

/// Attention splits its keys once the step sees more than one 16-key block (few heads, one
/// token: the single pass would run only `heads` workgroups), and not for a prefill chunk.
#[test]
fn attention_splits_on_long_decode_steps_only() {
    let ctx = ctx();
    let model = load(&ctx, "llama3-q8_0");
    let layers = model.config.n_layers;
    let short = labels(&ctx, &model, 8, 1, Pipeline::Fused, false);
    let split = |l: &str| l.starts_with("attention_split");
    assert_eq!(count(&short, split), 0);
    let long = labels(&ctx, &model, 40, 1, Pipeline::Fused, false);
    assert_eq!(count(&long, split), layers);
    if ctx.attention_merge == AttentionMerge::InSplit {
        // one dispatch at any length: the last range's workgroup merges (issue 14)
        assert_eq!(count(&long, |l| l == "attention_split_merge"), layers);
        assert_eq!(long.len(), short.len());
    } else {
        assert_eq!(count(&long, |l| l == "attention_combine"), layers);
        assert_eq!(long.len(), short.len() + layers as usize);
    }
    let plan = Session::new(&ctx, &model, 64, LogitsFor::LastToken)
        .plan()
        .clone();
    assert!(matches!(
        plan.attention_ops(0, 1, 40).last(),
        Some(Op::Attention(a)) if a.splits > 1
    ));
}

/// The profile of a decode step after the bench prompt, or (`prefill`) of the prompt's
/// prefill step; `None` (after checking the refusal, and saying so) on an adapter without
/// timestamps.
fn profile(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    prefill: bool,
    pipeline: Pipeline,
    megakernel: bool,
) -> Option<StepProfile> {
    let tokens = bench_prompt(model, PROMPT);
    let (context, step) = if prefill {
        (&[][..], ProfiledStep::Prefill(&tokens))
    } else {
        (&tokens[..], ProfiledStep::Decode)
    };
    let r = pollster::block_on(profile_step(
        ctx, model, context, step, pipeline, megakernel,
    ));
    if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
        let err = r.expect_err("no timestamp-query must be refused");
        assert!(matches!(err, ProfileError::NoTimestampQuery));
        assert_eq!(
            err.to_string(),
            "not yet on this adapter: no timestamp-query"
        );
        println!(
            "{}: {err}; the timing checks are skipped, the structure checks ran",
            ctx.describe()
        );
        return None;
    }
    let p = r.expect("profile");
    println!(
        "{} dispatches, profiled {:.0} µs, one pass {:.0} µs",
        p.dispatches, p.profiled_us, p.one_pass_us
    );
    for k in &p.kernels {
        println!("  {:<48} ×{:<3} {:>10.1} µs", k.label, k.calls, k.total_us);
    }
    Some(p)
}

/// Every dispatch accounted for, every time positive, slowest first, and the calls per label
/// exactly the recorded step's.
fn check_consistent(p: &StepProfile, labels: &[String]) {
    assert!(!p.kernels.is_empty());
    let calls: u32 = p.kernels.iter().map(|k| k.calls).sum();
    assert_eq!(calls, p.dispatches, "calls add up to the step's dispatches");
    assert_eq!(p.dispatches as usize, labels.len(), "the recorded step");
    for k in &p.kernels {
        assert!(k.calls > 0 && k.total_us > 0.0 && k.workgroups > 0, "{k:?}");
        assert_eq!(k.calls, count(labels, |l| l == k.label), "{}", k.label);
    }
    assert!(p.kernels.windows(2).all(|w| w[0].total_us >= w[1].total_us));
    let sum: f64 = p.kernels.iter().map(|k| k.total_us).sum();
    assert!((sum - p.profiled_us).abs() <= 1e-6 * sum.max(1.0));
    assert!(p.one_pass_us > 0.0);
    match p.tokens {
        1 => assert_eq!(p.position, PROMPT, "decode after the prompt"),
        t => assert_eq!((t, p.position), (PROMPT, 0), "the prompt's prefill"),
    }
}

#[test]
fn fused_decode_step_profile_covers_every_kernel() {
    let ctx = ctx();
    let model = load(&ctx, "llama-spm-q8_0");
    let layers = model.config.n_layers;
    let l = labels(&ctx, &model, PROMPT, 1, Pipeline::Fused, false);
    assert_eq!(
        count(&l, |l| l.starts_with("get_rows")),
        1,
        "embedding lookup"
    );
    assert_eq!(
        count(&l, |l| l.starts_with("matmul_q8_0_matvec")
            && l.contains("_qkv_rope_normal_norm")),
        layers,
        "the norm, Q/K/V, RoPE of Q and K and the KV-cache write: one dispatch per layer"
    );
    assert_eq!(count(&l, |l| l.starts_with("rope_")), 0, "no RoPE dispatch");
    assert_eq!(count(&l, |l| l == "attention_kv_write"), 0, "no KV write");
    assert!(count(&l, |l| l.starts_with("attention_tiled_hd")) > 0);
    assert!(count(&l, |l| l.starts_with("matmul_q8_0_")) >= 4 * layers);
    assert_eq!(count(&l, |l| l.contains("_glu_silu")), layers);
    let Some(p) = profile(&ctx, &model, false, Pipeline::Fused, false) else {
        return;
    };
    check_consistent(&p, &l);
}

#[test]
fn megakernel_profile_shows_one_ffn_dispatch_per_layer() {
    let ctx = ctx();
    let model = load(&ctx, "gemma3-q4_k");
    let l = labels(&ctx, &model, PROMPT, 1, Pipeline::Fused, true);
    assert_eq!(
        count(&l, |l| l
            .starts_with("ffn_megakernel_q4_k_q4_k_gelu_tanh_post_norm")),
        model.config.n_layers
    );
    assert_eq!(count(&l, |l| l.contains("_glu_")), 0);
    let Some(p) = profile(&ctx, &model, false, Pipeline::Fused, true) else {
        return;
    };
    check_consistent(&p, &l);
}

#[test]
fn prefill_step_profile_runs_the_whole_prompt_in_one_step() {
    let ctx = ctx();
    let model = load(&ctx, "llama-spm-q8_0");
    let layers = model.config.n_layers;
    let l = labels(&ctx, &model, 0, PROMPT, Pipeline::Fused, false);
    assert_eq!(count(&l, |l| l.starts_with("get_rows")), 1, "one lookup");
    // A prompt this short runs the matvec (MATVEC_MAX_T), RoPE and the KV write included;
    // with COCO_MATVEC_MAX_T or COCO_COOP_STREAM=1 it may run the tiles, RoPE apart.
    let on_matvec =
        coco::kernels::matmul::matvec_max_t(coco::kernels::matmul::DeviceKernels::of(&ctx))
            .is_none_or(|max| PROMPT <= max);
    let fused_rope = if on_matvec { layers } else { 0 };
    assert_eq!(count(&l, |l| l.contains("_qkv_rope_")), fused_rope);
    assert_eq!(
        count(&l, |l| l.starts_with("rope_kv_write")),
        layers - fused_rope
    );
    assert_eq!(
        count(&l, |l| l.starts_with("attention_tiled_hd")),
        layers,
        "single-pass attention: {PROMPT} tokens × heads fill the GPU without splitting"
    );
    let Some(p) = profile(&ctx, &model, true, Pipeline::Fused, false) else {
        return;
    };
    check_consistent(&p, &l);
}

/// The work each dispatch counts for the profile's GB/s and TFLOP/s (`gpu::Work`), checked
/// against the model's own tensors: a decode step's products multiply every weight once
/// (two operations each) and read every weight byte at least once, and attention's
/// operations are the keys each token sees. Recorded only, so it needs no timestamps.
#[test]
fn decode_step_work_counts_every_weight_once() {
    let ctx = ctx();
    let model = load(&ctx, "llama-spm-q8_0");
    let c = &model.config;
    let w = &model.weights;
    let mut tensors: Vec<&coco::gpu::GpuTensor> = Vec::new();
    for l in &w.layers {
        tensors.extend([&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down]);
    }
    tensors.push(w.output.as_ref().unwrap_or(&w.token_embd));
    let weight_flops: u64 = tensors.iter().map(|t| 2 * t.n_rows * t.row_len).sum();
    let weight_bytes: u64 = tensors.iter().map(|t| t.total_bytes()).sum();
    // x' in and the outputs out, per product, at most.
    let activations: u64 = tensors.iter().map(|t| 4 * (t.row_len + t.n_rows)).sum();
    for pipeline in [Pipeline::Fused, Pipeline::Unfused] {
        for (prompt, t) in [(PROMPT, 1), (0, PROMPT)] {
            let mut s = Session::new(&ctx, &model, 64, LogitsFor::LastToken);
            s.pipeline = pipeline;
            if prompt > 0 {
                s.forward_blocking(&bench_prompt(&model, prompt))
                    .expect("prefill");
            }
            let work = s.step_work(t).expect("record");
            let sum = |pred: &dyn Fn(&str) -> bool| {
                work.iter()
                    .filter(|(l, _)| pred(l))
                    .map(|(l, w)| w.unwrap_or_else(|| panic!("{l} counts its work")))
                    .fold(coco::gpu::Work::default(), |a, b| a + b)
            };
            // The products alone: not the scale passes before the tensor-core and f16 tiles,
            // nor the split-K merges after them (which count their adds).
            let products = sum(&|l: &str| {
                l.starts_with("matmul_") && !l.contains("token_scale") && !l.ends_with("_merge")
            });
            let attention = sum(&|l: &str| {
                l.starts_with("attention_tiled") || l.starts_with("attention_split")
            });
            let t64 = t as u64;
            // The LM head runs for the last token only.
            let head = tensors.last().unwrap();
            let head_flops = 2 * head.n_rows * head.row_len;
            assert_eq!(
                products.flops,
                t64 * (weight_flops - head_flops) + head_flops,
                "{pipeline:?} t={t}: two operations per weight and token"
            );
            assert!(
                products.bytes >= weight_bytes
                    && products.bytes - weight_bytes <= t64 * activations,
                "{pipeline:?} t={t}: {} bytes counted for {weight_bytes} of weights",
                products.bytes
            );
            let seen: u64 = (prompt..prompt + t).map(|p| p as u64 + 1).sum();
            let per_key = 4 * (c.n_heads * c.head_dim) as u64;
            assert_eq!(
                attention.flops,
                c.n_layers as u64 * seen * per_key,
                "{pipeline:?} t={t}: q·k and p·v over the keys each token sees"
            );
            // Elementwise kernels count none, and say so rather than 0.
            assert!(work
                .iter()
                .any(|(l, w)| l.starts_with("get_rows") && w.is_none()));
        }
    }
}
