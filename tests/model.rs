//! Whole models on the GPU (lavapipe) against Hugging Face transformers goldens made by
//! `tools/hf_goldens.py` from the same GGUF files, and against the CPU reference forward.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use coco::engine::{load_path, LogitsFor, Model, Session};
use coco::gpu::GpuContext;
use coco::model::Pipeline;
use coco::reference::forward::CpuModel;
use coco::sampler::argmax;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn gpu() -> Arc<GpuContext> {
    Arc::new(GpuContext::new_blocking().expect("a GPU adapter (lavapipe in CI)"))
}

fn golden(name: &str) -> Value {
    let path = root().join(format!("tests/goldens/model_{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("golden JSON")
}

fn fixture(name: &str) -> PathBuf {
    let path = if name.starts_with("gemma-3-270m") {
        root().join("models/gemma-3-270m-q4_k_m.gguf")
    } else {
        root().join(format!("tests/fixtures/{name}.gguf"))
    };
    assert!(
        path.exists(),
        "{} is missing: run scripts/fixtures.sh and scripts/install_model.sh",
        path.display()
    );
    path
}

fn ids_of(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// HF's top-1/top-2 logit margin below which f32 summation order alone can flip argmax.
const NEAR_TIE: f64 = 2e-3;

/// The largest |Δlogit| against HF's, as a fraction of the golden's largest |logit|
/// ([`logit_scale`]), where prompt steps multiply f16-rounded operands (the tensor-core GEMM,
/// the default natively where offered, or its emulation on the portable tiles;
/// [`f16_operands`]). Rounding W and x' to f16 (2^-11 relative each) with f32 sums is what
/// llama.cpp's tensor-core path computes too. On these fixtures it moves logits by 0.9e-3 …
/// 3.2e-3 of that scale (1.5e-2 on the default model … 0.27 on phi3-q4_k, whose logits reach
/// 85), where the f32 tiles stay within 1e-4 (BENCHMARKS.md "session 25"). A forward that is
/// wrong moves them by the scale itself.
const F16_REL_DELTA: f64 = 5e-3;

/// [`check_gpu_vs_cpu`]'s bound on |Δ| / (1 + |reference|) where prompt steps multiply f16
/// operands ([`f16_operands`]); 2e-3 otherwise. Measured with the emulation over 150 tokens
/// (prefill steps of 70, past the matvec's 32): gemma3-q8_0 0.11–0.15, llama-spm-q4_0
/// 0.068–0.075, gemma2-q8_0 0.068–0.084 over the four pipelines, against 2e-5 … 1.3e-4 for
/// 13-token checks, whose steps stay on the f32 matvec (BENCHMARKS.md "session 25").
const F16_VS_CPU_REL: f32 = 0.3;

/// [`check_gpu_vs_cpu`]'s bound where prompt steps run the f16 wide tiles ([`f16_sums`]), whose
/// fmas round each partial sum to f16 as well: about twice the f16 operands' error. Measured
/// on lavapipe with every step of 5+ tokens on `wideh64x64` (BENCHMARKS.md "session 45"):
/// phi3-q4_k 0.30 (0.15 with f16 operands alone), gemma3-q8_0 over 150 tokens 0.39 (0.13),
/// phi3-q8_0's LongRoPE sets 0.48 (0.17); the HF goldens hold at the f16 bounds throughout.
const F16_SUMS_VS_CPU_REL: f32 = 0.6;

/// The largest |logit| among HF's top entries of a golden.
fn logit_scale(golden: &Value) -> f64 {
    let mut scale = 0.0f64;
    for prompt in golden["prompts"].as_array().into_iter().flatten() {
        for pos in prompt["positions"].as_array().into_iter().flatten() {
            for entry in pos["top"].as_array().into_iter().flatten() {
                scale = scale.max(entry[1].as_f64().unwrap_or(0.0).abs());
            }
        }
    }
    scale
}

/// The |Δlogit| bound of f16 operands for `golden` ([`F16_REL_DELTA`]).
fn f16_max_delta(golden: &Value) -> f64 {
    F16_REL_DELTA * logit_scale(golden)
}

/// Whether this run's prompt steps may multiply f16-rounded operands: on an adapter that runs
/// the tensor-core GEMM, with `COCO_GEMM_F16_OPERANDS=1` (how CI checks those numerics on
/// lavapipe), or on the f16 wide tiles ([`f16_sums`]). Steps of up to the matvec's token count
/// never do.
fn f16_operands(ctx: &GpuContext) -> bool {
    ctx.has_coop_gemm() || coco::kernels::matmul::f16_operands() || f16_sums(ctx)
}

/// Whether this run's prompt steps may also sum in f16: a wide tile in f16 asked for by name
/// (`COCO_GEMM=4x4h`, …: how CI checks those numerics), or the planner's choice where the
/// device runs the wide tiles in f16 (it picks them for grids of 256+ workgroups: among the
/// fixtures' products, an LM head over every token's logits). CI's other whole-model runs
/// keep the f32 tiles (`COCO_WIDE_F16=0`), so the f32 bounds hold them.
fn f16_sums(ctx: &GpuContext) -> bool {
    use coco::gpu::GemmChoice;
    match ctx.gemm {
        GemmChoice::Force(w) => w.half,
        GemmChoice::Tiled => false,
        GemmChoice::Auto | GemmChoice::Matrix | GemmChoice::Dot4 => {
            coco::kernels::matmul::DeviceKernels::of(ctx).wide_f16
        }
    }
}

/// HF's top-1/top-2 margin below which this run's logits may legitimately rank the two the
/// other way: f32 summation order ([`NEAR_TIE`]), or f16 operands' error on both logits.
fn near_tie(ctx: &GpuContext, golden: &Value) -> f64 {
    if f16_operands(ctx) {
        2.0 * f16_max_delta(golden)
    } else {
        NEAR_TIE
    }
}

/// Greedy ids must equal HF's: the mismatch, if any. The one allowed difference is at a step
/// where HF's own top-1 and top-2 are within `near_tie` (a tie in all but rounding); the
/// sequences legitimately part there, so the comparison stops at that step.
fn greedy_mismatch(
    got: &[u32],
    expected: &[u32],
    margins: &[f64],
    text: &str,
    near_tie: f64,
) -> Option<String> {
    if got.len() != expected.len() {
        return Some(format!(
            "greedy length for {text:?}: {} vs {}",
            got.len(),
            expected.len()
        ));
    }
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        if g != e {
            let margin = margins.get(i).copied().unwrap_or(f64::INFINITY);
            if margin >= near_tie {
                return Some(format!(
                    "greedy continuation of {text:?} differs from HF at step {i}: got {g}, HF {e} (HF margin {margin:.2e})\n got {got:?}\n  hf {expected:?}"
                ));
            }
            println!("greedy {text:?}: parts from HF at step {i} on a near-tie (HF margin {margin:.1e}); {i} tokens identical");
            return None;
        }
    }
    None
}

/// Greedy continuation by raw argmax over the session's decode path (no EOS stop: the
/// goldens treat EOS as an ordinary token).
fn greedy(ctx: &Arc<GpuContext>, model: &Arc<Model>, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut s = Session::new(ctx, model, 512, LogitsFor::LastToken);
    let mut logits = s.forward_blocking(prompt).expect("prefill");
    let mut out = Vec::new();
    for _ in 0..n {
        let id = argmax(&logits);
        out.push(id);
        logits = s.forward_blocking(&[id]).expect("decode");
    }
    out
}

struct Agreement {
    positions: usize,
    top1_equal: usize,
    max_delta: f64,
    /// HF's top-1 − top-2 margin at each position whose top-1 differs.
    miss_margins: Vec<f64>,
    /// Those of the misses at a margin below the run's [`near_tie`]: not counted against it.
    near_tie_misses: usize,
    /// Greedy continuations that differ from HF's (`greedy_mismatch`).
    greedy_mismatches: Vec<String>,
    /// The margin below which a miss is a near-tie here ([`near_tie`]).
    near_tie: f64,
    /// The |Δlogit| bound where the operands were f16 ([`f16_max_delta`]), else None.
    f16_max_delta: Option<f64>,
}

impl Agreement {
    fn report_line(&self, name: &str) -> String {
        let misses = if self.miss_margins.is_empty() {
            String::new()
        } else {
            let m: Vec<String> = self
                .miss_margins
                .iter()
                .map(|m| format!("{m:.1e}"))
                .collect();
            format!("  (HF top-1 − top-2 at the misses: {})", m.join(", "))
        };
        format!(
            "{name:<22} top-1 {}/{} ({:.1}%)  max|Δlogit| {:.2e}{misses}",
            self.top1_equal,
            self.positions,
            100.0 * self.top1_equal as f64 / self.positions as f64,
            self.max_delta
        )
    }

    /// What fails HF's oracle: top-1 agreement under 99% (a miss at a near-tie is rounding,
    /// not a wrong forward, so it doesn't count), |Δlogit| past [`f16_max_delta`] where the
    /// operands were f16, and greedy continuations that part from HF's.
    fn failures(&self, name: &str) -> Vec<String> {
        let mut failures = Vec::new();
        let counted = (self.top1_equal + self.near_tie_misses) as f64 / self.positions as f64;
        if counted < 0.99 {
            failures.push(format!(
                "{name}: top-1 agreement {:.1}% < 99% (misses at HF margins below {:.1e} excused)",
                counted * 100.0,
                self.near_tie
            ));
        }
        if let Some(bound) = self.f16_max_delta.filter(|&b| self.max_delta >= b) {
            failures.push(format!(
                "{name}: max|Δlogit| {:.2e} >= {bound:.2e} with f16 operands",
                self.max_delta
            ));
        }
        failures.extend(
            self.greedy_mismatches
                .iter()
                .map(|m| format!("{name}: {m}")),
        );
        failures
    }
}

/// Teacher-forced logits for every prompt of a golden, compared with HF's, and the first
/// `greedy_tokens` of each prompt's greedy continuation (0: none).
fn check_against_hf(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    golden: &Value,
    greedy_tokens: usize,
) -> Agreement {
    let mut agreement = Agreement {
        positions: 0,
        top1_equal: 0,
        max_delta: 0.0,
        miss_margins: Vec::new(),
        near_tie_misses: 0,
        greedy_mismatches: Vec::new(),
        near_tie: near_tie(ctx, golden),
        f16_max_delta: f16_operands(ctx).then(|| f16_max_delta(golden)),
    };
    let near_tie = agreement.near_tie;
    let vocab = model.config.vocab_size as usize;
    for prompt in golden["prompts"].as_array().expect("prompts") {
        let ids = ids_of(&prompt["ids"]);
        let mut session = Session::new(ctx, model, 512, LogitsFor::AllTokens);
        let logits = session.forward_blocking(&ids).expect("forward");
        for (pos, expected) in prompt["positions"]
            .as_array()
            .expect("positions")
            .iter()
            .enumerate()
        {
            let row = &logits[pos * vocab..(pos + 1) * vocab];
            let top = expected["top"].as_array().expect("top");
            let hf_top1 = top[0][0].as_u64().expect("id") as u32;
            agreement.positions += 1;
            if argmax(row) == hf_top1 {
                agreement.top1_equal += 1;
            } else {
                let logit = |i: usize| top.get(i).and_then(|e| e[1].as_f64());
                let margin = match (logit(0), logit(1)) {
                    (Some(a), Some(b)) => a - b,
                    _ => f64::NAN,
                };
                agreement.miss_margins.push(margin);
                agreement.near_tie_misses += (margin < near_tie) as usize;
            }
            for entry in top {
                let id = entry[0].as_u64().expect("id") as usize;
                let hf = entry[1].as_f64().expect("logit");
                agreement.max_delta = agreement.max_delta.max((row[id] as f64 - hf).abs());
            }
        }
        if greedy_tokens > 0 {
            let mut expected = ids_of(&prompt["greedy"]);
            expected.truncate(greedy_tokens);
            let margins: Vec<f64> = prompt["greedy_margins"]
                .as_array()
                .map(|m| m.iter().filter_map(|x| x.as_f64()).collect())
                .unwrap_or_default();
            let got = greedy(ctx, model, &ids, expected.len());
            let text = prompt["text"].as_str().unwrap_or("?");
            if let Some(m) = greedy_mismatch(&got, &expected, &margins, text, near_tie) {
                agreement.greedy_mismatches.push(m);
            }
        }
    }
    agreement
}

/// The fixtures of `family` with HF goldens, sorted. For hand runs, `COCO_TEST_TYPES` (a comma
/// list of weight-type suffixes, e.g. `q4_k,q6_k`) keeps only those files: the check of one
/// type family under a tuning switch (`COCO_CHUNK_MIN_K=32` forces every product onto the
/// int8 chunk matvec) without the hour the other types take on lavapipe.
fn fixture_names(family: &str, types: Types) -> Vec<String> {
    let env_types = std::env::var("COCO_TEST_TYPES").ok();
    let of_type = |name: &str, ty: &str| name.ends_with(&format!("-{}", ty.trim()));
    let wanted = |name: &str| {
        let listed = |list: &[&str]| list.iter().any(|ty| of_type(name, ty));
        let in_run = match types {
            Types::All => true,
            Types::Only(list) => listed(list),
            Types::Except(list) => !listed(list),
        };
        in_run
            && env_types
                .as_deref()
                .is_none_or(|list| list.split(',').any(|ty| of_type(name, ty)))
    };
    let mut names: Vec<String> = std::fs::read_dir(root().join("tests/goldens"))
        .expect("tests/goldens")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.strip_prefix("model_")
                .and_then(|n| n.strip_suffix(".json"))
                .map(str::to_string)
        })
        .filter(|n| {
            n.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('-'))
                && !n.starts_with("gemma-3-270m")
                && wanted(n)
        })
        .collect();
    names.sort();
    names
}

/// Which of a family's fixtures a test takes, by weight type.
#[derive(Clone, Copy)]
enum Types {
    All,
    Only(&'static [&'static str]),
    Except(&'static [&'static str]),
}

/// The weight types llama3's and qwen2's default runs leave out. They go through the same
/// dequantizers as llama-spm's files of those types, which run against HF; what llama3 and
/// qwen2 add (a 128k/152k byte-level vocabulary through the LM head, Llama 3 RoPE scaling,
/// tied embeddings; Q/K/V biases and NeoX RoPE) does not depend on the weight type, and their
/// LM heads cost ~27 s of CI's lavapipe per file. Their f32, q8_0 and q4_k files run, and the
/// types only they carry (q4_1 and iq4_xs on llama3, q5_1 and iq4_nl on qwen2). These run by
/// hand: `cargo test --release --test model -- --ignored`.
const SWEPT_ON_LLAMA_SPM: &[&str] = &["f16", "bf16", "q4_0", "q5_0", "q5_k", "q6_k"];

/// Every weight type of one fixture family against its HF golden: teacher-forced top-1 at
/// 99% of positions or more, and the greedy continuation identical: all 24 tokens for the
/// family's F32 and Q8_0 files, the first 8 for the other types (their decode matvecs are
/// held to the reference on every shape by kernels_matmul, and a decode step on lavapipe
/// costs CI seconds). Returns each fixture's golden and largest |Δlogit| over the HF top-10s.
fn family_matches_hugging_face(family: &str) -> Vec<(Value, f64)> {
    family_types_match_hugging_face(family, Types::All)
}

/// [`family_matches_hugging_face`] on the fixtures of the listed types only.
fn family_types_match_hugging_face(family: &str, types: Types) -> Vec<(Value, f64)> {
    let ctx = gpu();
    let names = fixture_names(family, types);
    if names.is_empty() && std::env::var_os("COCO_TEST_TYPES").is_some() {
        println!("{family}: no golden of the types in COCO_TEST_TYPES");
        return Vec::new();
    }
    assert!(!names.is_empty(), "no {family} goldens in tests/goldens");
    let mut report = Vec::new();
    let mut failures = Vec::new();
    let mut deltas = Vec::new();
    for name in &names {
        let g = golden(name);
        let model = Arc::new(
            load_path(&ctx, &fixture(name), 512).unwrap_or_else(|e| panic!("{name}: {e}")),
        );
        let greedy_tokens = if name.ends_with("-q8_0") || name.ends_with("-f32") {
            usize::MAX
        } else {
            8
        };
        let a = check_against_hf(&ctx, &model, &g, greedy_tokens);
        report.push(a.report_line(name));
        failures.extend(a.failures(name));
        deltas.push((g, a.max_delta));
    }
    // Every fixture's figures first, so one failure doesn't hide the others'.
    println!("{}", report.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    deltas
}

#[test]
fn llama_spm_fixtures_match_hugging_face() {
    family_matches_hugging_face("llama-spm");
}

#[test]
fn llama3_fixtures_match_hugging_face() {
    family_types_match_hugging_face("llama3", Types::Except(SWEPT_ON_LLAMA_SPM));
}

#[test]
fn qwen2_fixtures_match_hugging_face() {
    family_types_match_hugging_face("qwen2", Types::Except(SWEPT_ON_LLAMA_SPM));
}

/// llama3's and qwen2's files of the types llama-spm sweeps ([`SWEPT_ON_LLAMA_SPM`]): by hand.
#[test]
#[ignore = "by hand: ~6 min of lavapipe; llama-spm runs these types against HF in CI"]
fn llama3_and_qwen2_other_types_match_hugging_face() {
    for family in ["llama3", "qwen2"] {
        family_types_match_hugging_face(family, Types::Only(SWEPT_ON_LLAMA_SPM));
    }
}

/// Qwen3 (per-head Q/K norms folded into the RoPE kernel, head_dim 128 ≠ dim / heads, tied),
/// Q8_0 and Q4_K.
#[test]
fn qwen3_fixtures_match_hugging_face() {
    family_matches_hugging_face("qwen3");
}

/// Phi-3 (fused Q/K/V and gate/up split at load, head_dim 96, LongRoPE's short factors and
/// attention factor: the goldens' prompts fit the original context, and so do the 512-position
/// sessions), Q8_0 and Q4_K.
#[test]
fn phi3_fixtures_match_hugging_face() {
    family_matches_hugging_face("phi3");
}

/// Phi-4-mini's shape of phi3: RoPE on 96 of each head's 128 dimensions (the rest pass through,
/// unscaled by LongRoPE's attention factor), tied embeddings, Q8_0.
#[test]
fn phi4_fixtures_match_hugging_face() {
    family_matches_hugging_face("phi4");
}

/// SmolLM3 (llama's permuted Q/K and normal RoPE, no RoPE on layer 3 of 4, GQA 4:1, tied),
/// Q8_0 and Q4_K. HF's GGUF loader has no smollm3: the goldens come from SmolLM3ForCausalLM
/// built from the file's metadata and dequantized tensors (tools/hf_goldens.py).
#[test]
fn smollm3_fixtures_match_hugging_face() {
    family_matches_hugging_face("smollm3");
}

/// Granite 3.x (llama with embedding, attention, residual and logit multipliers; tied), Q8_0
/// and Q4_K. HF's GGUF loader has no granite either: GraniteForCausalLM built by hand.
#[test]
fn granite_fixtures_match_hugging_face() {
    family_matches_hugging_face("granite");
}

#[test]
fn gemma3_fixtures_match_hugging_face() {
    family_matches_hugging_face("gemma3");
}

/// Gemma 2 (attention and final logit soft-caps, layer 0 sliding with an 8-position window
/// under 14–25-token prompts, layer 1 global, sandwich norms, no Q/K norms), Q8_0 and Q4_K.
/// The logits must sit far closer to HF's than where either soft-cap, the window or HF's
/// default query scale would put them (the golden's sensitivity checks): top-1 and greedy
/// alone could not see the final cap, which keeps every row's order.
#[test]
fn gemma2_fixtures_match_hugging_face() {
    let f16 = f16_operands(&gpu());
    for (g, max_delta) in family_matches_hugging_face("gemma2") {
        let bound = if f16 { f16_max_delta(&g) } else { 1e-2 };
        let name = g["fixture"].as_str().unwrap_or("?").to_string();
        let sens = &g["checks"]["sensitivity"];
        let moved = |key: &str| {
            sens[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{name}: {key}"))
        };
        let window = sens["sliding_window_effect"]
            ["max_abs_logit_change_without_window_later_positions"]
            .as_f64()
            .expect("window effect");
        for (what, by) in [
            (
                "attention soft-cap",
                moved("max_abs_logit_change_without_attn_softcap"),
            ),
            (
                "final soft-cap",
                moved("max_abs_logit_change_without_final_softcap"),
            ),
            (
                "query scale from the file (HF's default 256)",
                moved("max_abs_logit_change_with_hf_default_query_scale"),
            ),
            ("sliding window", window),
        ] {
            println!("{name}: without the {what} HF's logits move by {by:.2}; coco's are within {max_delta:.2e}");
            assert!(by > 1.0, "{name}: the {what} barely matters ({by})");
            assert!(
                max_delta < by / 100.0,
                "{name}: max|Δlogit| {max_delta} vs {what} {by}"
            );
        }
        assert!(
            max_delta < bound,
            "{name}: max|Δlogit| {max_delta} >= {bound}"
        );
    }
}

/// Which pipelines [`check_gpu_vs_cpu`] runs besides the fused one.
#[derive(Clone, Copy, PartialEq)]
enum Pipelines {
    /// Fused, unfused and the FFN megakernel: a family's forward (each writes it its way).
    All,
    /// Fused only: another weight type of a family whose forward `All` checks (the
    /// pipelines share one matmul per type, which kernels_matmul tests on every shape).
    Fused,
}

/// Tokens per GPU-vs-CPU check, and how many of them the decode runs prefill: the batched
/// run takes two prefill steps (9 and 4 tokens), the others 4 one-token decode steps through
/// the KV cache. Each step of a 128k–152k-token fixture costs ~0.5–0.8 s of lavapipe (its LM
/// head), so 4 steps rather than 12 (CI time); long_sequences_match_cpu_reference takes 80, and
/// the phi3 factor-set test (32k tokens) keeps 21, whose later positions tell the sets apart.
const CHECK_TOKENS: u32 = 13;
const CHECK_PREFILL: usize = 9;

/// GPU logits for `ids` against the CPU reference forward: fused in `prefill`-sized chunks,
/// fused as a prefill followed by one-token decode steps through the KV cache, and (with
/// [`Pipelines::All`]) the same through the unfused pipeline and with the FFN megakernel.
fn check_gpu_vs_cpu(
    ctx: &Arc<GpuContext>,
    name: &str,
    n_tokens: u32,
    prefill: usize,
    pipelines: Pipelines,
) {
    check_gpu_vs_cpu_in(ctx, name, n_tokens, prefill, 512, pipelines);
}

/// [`check_gpu_vs_cpu`] with sessions of `context` positions (which picks LongRoPE's factor
/// set); returns the reference logits.
fn check_gpu_vs_cpu_in(
    ctx: &Arc<GpuContext>,
    name: &str,
    n_tokens: u32,
    prefill: usize,
    context: u32,
    pipelines: Pipelines,
) -> Vec<f32> {
    let path = fixture(name);
    let model = Arc::new(load_path(ctx, &path, context).unwrap());
    let cpu = CpuModel::load(&path).unwrap();
    let ids: Vec<u32> = (0..n_tokens)
        .map(|i| (i * 7919 + 13) % model.config.vocab_size)
        .collect();
    let context = context.min(model.config.context_length);
    let expected = cpu.forward_in_context(&ids, context);
    // Both fused runs start with the same prefill step, so they share it: the batched run
    // goes on in `prefill`-sized steps, then the session goes back to the end of that first
    // step (the engine's own roll-back, as after a stopped generation) and the decode run
    // goes on from there in one-token steps, over the cache positions the batched steps
    // wrote. Every logit of both runs is still checked; a separate session would only have
    // recomputed the first step (on lavapipe a 128k–152k-row LM head per position).
    let mut s = Session::new(ctx, &model, context, LogitsFor::AllTokens);
    let first = s.forward_blocking(&ids[..prefill]).unwrap();
    let mut batched = first.clone();
    for chunk in ids[prefill..].chunks(prefill) {
        batched.extend(s.forward_blocking(chunk).unwrap());
    }
    s.pos = prefill as u32;
    s.cached_tokens.truncate(prefill);
    let mut stepped = first;
    for &id in &ids[prefill..] {
        stepped.extend(s.forward_blocking(&[id]).unwrap());
    }
    let mut runs = vec![("batched", batched), ("decode", stepped)];
    let rel_bound = if f16_sums(ctx) {
        F16_SUMS_VS_CPU_REL
    } else if f16_operands(ctx) {
        F16_VS_CPU_REL
    } else {
        2e-3
    };
    if pipelines == Pipelines::All {
        runs.extend(other_pipelines(ctx, &model, name, &ids, prefill, context));
    }
    for (what, got) in &runs {
        let mut worst = (0.0f32, 0usize);
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let d = (g - e).abs() / (1.0 + e.abs());
            if d > worst.0 {
                worst = (d, i);
            }
        }
        println!(
            "{name} {n_tokens} tokens {what}: max rel err {:.2e} at {}",
            worst.0, worst.1
        );
        assert!(
            worst.0 < rel_bound,
            "{name} {what}: logit {} = {} vs reference {}",
            worst.1,
            got[worst.1],
            expected[worst.1]
        );
    }
    expected
}

/// The logits of the unfused pipeline and of the FFN megakernel for `ids`, each as a prefill
/// of `prefill` tokens followed by one-token decode steps.
fn other_pipelines(
    ctx: &Arc<GpuContext>,
    model: &Arc<Model>,
    name: &str,
    ids: &[u32],
    prefill: usize,
    context: u32,
) -> Vec<(&'static str, Vec<f32>)> {
    // The unfused pipeline (one kernel per op), decode steps included.
    let mut s3 = Session::new(ctx, model, context, LogitsFor::AllTokens);
    s3.pipeline = Pipeline::Unfused;
    let mut unfused = s3.forward_blocking(&ids[..prefill]).unwrap();
    for &id in &ids[prefill..] {
        unfused.extend(s3.forward_blocking(&[id]).unwrap());
    }
    // The FFN megakernel (one workgroup per token), switched on through its check.
    let mut s4 = Session::new(ctx, model, context, LogitsFor::AllTokens);
    let check = s4.set_megakernel_blocking(true).unwrap();
    println!("{name}: {check}");
    if model.config.residual_scale != 1.0 {
        // granite: refused before any run, and the session stays on its pipeline
        assert!(
            !check.passed && !s4.megakernel && check.detail.contains("residual multiplier"),
            "{name}: {check}"
        );
    } else {
        assert!(check.passed && s4.megakernel, "{name}: {check}");
    }
    let mut mega = s4.forward_blocking(&ids[..prefill]).unwrap();
    for &id in &ids[prefill..] {
        mega.extend(s4.forward_blocking(&[id]).unwrap());
    }
    vec![("unfused", unfused), ("megakernel", mega)]
}

#[test]
fn gpu_forward_matches_cpu_reference() {
    let ctx = gpu();
    // One file per family through every pipeline, two more weight types through the fused
    // one (their Q8_0 twins and the other types are held to HF by the family tests).
    for (name, pipelines) in [
        ("llama-spm-q8_0", Pipelines::All),
        ("llama3-q4_k", Pipelines::Fused),
        ("qwen2-q5_0", Pipelines::All),
        ("gemma3-q8_0", Pipelines::All),
        ("llama-spm-f16", Pipelines::Fused),
        ("qwen2-q6_k", Pipelines::Fused),
        ("qwen3-q4_k", Pipelines::All),
        ("phi3-q4_k", Pipelines::All),
        ("phi4-q8_0", Pipelines::All),
        ("gemma2-q4_k", Pipelines::All),
        ("smollm3-q4_k", Pipelines::All),
        ("granite-q4_k", Pipelines::All),
    ] {
        check_gpu_vs_cpu(&ctx, name, CHECK_TOKENS, CHECK_PREFILL, pipelines);
    }
}

/// Phi-3's fused tensors split into pieces while they stream: with small odd staging writes
/// (so writes end mid-block, mid-row and mid-piece, and re-laid Q4_K blocks straddle them)
/// and odd chunks, the model gives bit-identical logits to the 4 MiB-staged load.
#[test]
fn phi3_split_survives_any_staging_and_chunking() {
    let ctx = gpu();
    for name in ["phi3-q4_k", "phi3-q8_0"] {
        let path = fixture(name);
        let whole = Arc::new(load_path(&ctx, &path, 512).unwrap());
        let bytes = std::fs::read(&path).unwrap();
        let mut loader = coco::engine::Loader::new(&ctx, 512, Some(bytes.len() as u64))
            .with_staging_bytes(100_003);
        for chunk in bytes.chunks(65_537) {
            loader.push(chunk).unwrap();
        }
        let small = Arc::new(loader.finish().unwrap().0);
        let ids: Vec<u32> = (0..9).map(|i| (i * 7919 + 13) % 32000).collect();
        let logits = |m: &Arc<Model>| {
            Session::new(&ctx, m, 512, LogitsFor::AllTokens)
                .forward_blocking(&ids)
                .unwrap()
        };
        assert_eq!(logits(&whole), logits(&small), "{name}");
    }
}

/// LongRoPE's two factor sets: a session of more positions than the original context (1024
/// vs 512 in the fixture) runs the long set, one of at most 512 the short set (llama.cpp's
/// rule). Both through every pipeline against the CPU reference, and the two must differ
/// (else this would not tell the sets apart).
#[test]
fn phi3_long_rope_factor_sets_match_cpu_reference() {
    let ctx = gpu();
    let long = check_gpu_vs_cpu_in(&ctx, "phi3-q8_0", 21, 9, 1024, Pipelines::All);
    let short = check_gpu_vs_cpu_in(&ctx, "phi3-q8_0", 21, 9, 512, Pipelines::Fused);
    let diff = long
        .iter()
        .zip(&short)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!("phi3-q8_0: long vs short factor sets: max |Δlogit| {diff:.2}");
    assert!(
        diff > 1.0,
        "long and short factor sets give the same logits"
    );
}

/// The six newer weight types (one family each), streamed, re-laid out and run whole, against
/// the CPU reference through the fused pipeline (prefill and decode; the other pipelines run
/// the same matmul kernels, and each family's forward is checked through them above); their
/// HF goldens are checked with their families (`*_fixtures_match_hugging_face`).
#[test]
fn more_weight_types_match_cpu_reference() {
    let ctx = gpu();
    for name in [
        "llama3-q4_1",
        "qwen2-q5_1",
        "llama-spm-q2_k",
        "llama-spm-q3_k",
        "qwen2-iq4_nl",
        "llama3-iq4_xs",
    ] {
        check_gpu_vs_cpu(&ctx, name, CHECK_TOKENS, CHECK_PREFILL, Pipelines::Fused);
    }
}

/// Long enough that decode steps take the split-K (flash-decoding) attention path and
/// gemma3's and gemma2's sliding windows (8 positions in the fixtures) are crossed many
/// times, with gemma2's soft-capped scores on the split path.
#[test]
fn long_sequences_match_cpu_reference() {
    let ctx = gpu();
    for name in ["gemma3-q8_0", "llama-spm-q4_0", "gemma2-q8_0"] {
        check_gpu_vs_cpu(&ctx, name, 150, 70, Pipelines::All);
    }
}

#[test]
fn gemma_270m_matches_hugging_face() {
    let ctx = gpu();
    let g = golden("gemma-3-270m");
    let model = Arc::new(load_path(&ctx, &fixture("gemma-3-270m"), 512).expect("load gemma"));
    let a = check_against_hf(&ctx, &model, &g, 0);
    println!("{}", a.report_line("gemma-3-270m"));
    let failures = a.failures("gemma-3-270m");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The greedy continuation of "The capital of France is".
    let france = g["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["text"].as_str() == Some("The capital of France is"))
        .expect("France prompt in the golden");
    // Its first 12 tokens: a decode step of this model takes seconds on lavapipe (CI time),
    // and the page's e2e test and the CLI test continue the same prompt.
    let mut expected = ids_of(&france["greedy"]);
    expected.truncate(12);
    let margins: Vec<f64> = france["greedy_margins"]
        .as_array()
        .map(|m| m.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    let got = greedy(&ctx, &model, &ids_of(&france["ids"]), expected.len());
    let text = "The capital of France is";
    if let Some(m) = greedy_mismatch(&got, &expected, &margins, text, a.near_tie) {
        panic!("{m}");
    }
    println!("greedy: {:?}", model.tokenizer.decode(&got));
}

#[test]
fn unsupported_architecture_is_refused_before_weights() {
    use coco::gguf::{GgmlType, Value, Writer};
    let mut w = Writer::new();
    w.kv("general.architecture", Value::String("mamba".into()));
    w.tensor("token_embd.weight", &[32, 4], GgmlType::F32, vec![0; 512]);
    let path = std::env::temp_dir().join(format!("coco-mamba-{}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes()).unwrap();
    let ctx = gpu();
    let err = load_path(&ctx, Path::new(&path), 64)
        .err()
        .expect("mamba must be refused")
        .to_string();
    let _ = std::fs::remove_file(&path);
    assert!(
        err.contains("not yet")
            && err.contains("mamba")
            && err.contains("llama, qwen2, qwen3, smollm3, granite, gemma2, gemma3, phi3"),
        "{err}"
    );
}
