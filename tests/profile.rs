//! `bench::profile_step` (`coco bench --profile`) on lavapipe, which offers TIMESTAMP_QUERY:
//! a decode step broken down per kernel variant. No timing thresholds: only that every
//! kernel the step dispatches shows up, with its call count and a positive time.
//!
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test profile -- --nocapture`

use std::path::PathBuf;
use std::sync::Arc;

use coco::bench::{bench_prompt, profile_step, ProfileError, ProfiledStep, StepProfile};
use coco::engine::{load_path, Model};
use coco::gpu::GpuContext;
use coco::model::Pipeline;

fn load(ctx: &Arc<GpuContext>, name: &str) -> Arc<Model> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/{name}.gguf"));
    Arc::new(load_path(ctx, &path, 64).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// Prompt tokens: the decode step runs at this position, the prefill step runs this many.
const PROMPT: u32 = 5;

/// The profile, or `None` (after checking the refusal) on an adapter without timestamps.
fn profile(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    step: ProfiledStep,
    pipeline: Pipeline,
    megakernel: bool,
) -> Option<StepProfile> {
    let tokens = bench_prompt(model, PROMPT);
    let r = pollster::block_on(profile_step(
        ctx, model, &tokens, step, pipeline, megakernel,
    ));
    if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
        let err = r.expect_err("no timestamp-query must be refused");
        assert!(matches!(err, ProfileError::NoTimestampQuery));
        assert_eq!(
            err.to_string(),
            "not yet on this adapter: no timestamp-query"
        );
        println!("{}: {err}", ctx.describe());
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

/// Every dispatch accounted for, every time positive, slowest first.
fn check_consistent(p: &StepProfile) {
    assert!(!p.kernels.is_empty());
    let calls: u32 = p.kernels.iter().map(|k| k.calls).sum();
    assert_eq!(calls, p.dispatches, "calls add up to the step's dispatches");
    for k in &p.kernels {
        assert!(k.calls > 0 && k.total_us > 0.0, "{k:?}");
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

fn has(p: &StepProfile, prefix: &str) -> Option<u32> {
    let calls: u32 = p
        .kernels
        .iter()
        .filter(|k| k.label.starts_with(prefix))
        .map(|k| k.calls)
        .sum();
    (calls > 0).then_some(calls)
}

#[test]
fn fused_decode_step_profile_covers_every_kernel() {
    let ctx = Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe)"));
    let model = load(&ctx, "llama-spm-q8_0");
    let Some(p) = profile(&ctx, &model, ProfiledStep::Decode, Pipeline::Fused, false) else {
        return;
    };
    check_consistent(&p);
    let layers = model.config.n_layers;
    assert_eq!(has(&p, "get_rows"), Some(1), "embedding lookup");
    let qkv_rope: u32 = p
        .kernels
        .iter()
        .filter(|k| {
            k.label.starts_with("matmul_q8_0_matvec") && k.label.contains("_qkv_rope_normal_norm")
        })
        .map(|k| k.calls)
        .sum();
    assert_eq!(
        qkv_rope, layers,
        "the norm, Q/K/V, RoPE of Q and K and the KV-cache write: one dispatch per layer"
    );
    assert_eq!(
        has(&p, "rope_kv_write"),
        None,
        "no RoPE dispatch on a decode step"
    );
    assert_eq!(has(&p, "rope_normal"), None, "no separate RoPE when fused");
    assert_eq!(
        has(&p, "attention_kv_write"),
        None,
        "no separate KV write when fused"
    );
    assert!(has(&p, "attention_tiled_hd").is_some(), "attention");
    assert!(
        has(&p, "matmul_q8_0_").unwrap_or(0) >= 4 * layers,
        "matmuls"
    );
    let glu = p
        .kernels
        .iter()
        .filter(|k| k.label.contains("_glu_silu"))
        .count();
    assert_eq!(glu, 1, "the fused gate/up+SiLU variant");
}

#[test]
fn megakernel_profile_shows_one_ffn_dispatch_per_layer() {
    let ctx = Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe)"));
    let model = load(&ctx, "gemma3-q4_k");
    let Some(p) = profile(&ctx, &model, ProfiledStep::Decode, Pipeline::Fused, true) else {
        return;
    };
    check_consistent(&p);
    assert_eq!(
        has(&p, "ffn_megakernel_q4_k_q4_k_gelu_tanh_post_norm"),
        Some(model.config.n_layers)
    );
    assert!(!p.kernels.iter().any(|k| k.label.contains("_glu_")));
}

#[test]
fn prefill_step_profile_runs_the_whole_prompt_in_one_step() {
    let ctx = Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe)"));
    let model = load(&ctx, "llama-spm-q8_0");
    let Some(p) = profile(&ctx, &model, ProfiledStep::Prefill, Pipeline::Fused, false) else {
        return;
    };
    check_consistent(&p);
    let layers = model.config.n_layers;
    assert_eq!(
        has(&p, "get_rows"),
        Some(1),
        "one embedding lookup for all tokens"
    );
    assert_eq!(has(&p, "rope_kv_write"), Some(layers));
    assert_eq!(
        has(&p, "attention_tiled_hd"),
        Some(layers),
        "single-pass attention: {PROMPT} tokens × heads fill the GPU without splitting"
    );
}
