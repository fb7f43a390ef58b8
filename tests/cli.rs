//! The CLI contract other tools rely on: `run --json`, `logits --json`, `tokenize --json`,
//! `info`, on a fixture model through the real binary.

use std::process::Command;

fn coco(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_coco"))
        .args(args)
        .output()
        .expect("run coco");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixture() -> String {
    format!(
        "{}/tests/fixtures/llama-spm-q8_0.gguf",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

#[test]
fn run_json_is_deterministic_and_greedy_matches_logits() {
    let m = fixture();
    let args = [
        "run",
        "-m",
        &m,
        "-p",
        "Hello world",
        "-n",
        "8",
        "--temp",
        "0",
        "--json",
    ];
    let (ok, out, err) = coco(&args);
    assert!(ok, "{err}");
    let v = json(&out);
    let ids = v["ids"].as_array().unwrap();
    assert!(!ids.is_empty() && ids.len() <= 8);
    assert!(v["prompt_ids"].as_array().unwrap().len() >= 2);
    assert!(v["text"].is_string());
    // Greedy: the first generated id is the top-1 of the last prompt position.
    let (ok, out, err) = coco(&[
        "logits",
        "-m",
        &m,
        "-p",
        "Hello world",
        "--top",
        "3",
        "--json",
    ]);
    assert!(ok, "{err}");
    let l = json(&out);
    let positions = l["positions"].as_array().unwrap();
    assert_eq!(positions.len(), l["ids"].as_array().unwrap().len());
    assert_eq!(l["ids"], v["prompt_ids"]);
    let last = positions.last().unwrap();
    assert_eq!(last["top"][0][0], ids[0]);
    assert!(last["lse"].as_f64().unwrap() >= last["top"][0][1].as_f64().unwrap());
    // Sampling with a seed is reproducible.
    let sampled = [
        "run", "-m", &m, "-p", "Hello", "-n", "6", "--temp", "0.9", "--seed", "7", "--json",
    ];
    assert_eq!(
        json(&coco(&sampled).1)["ids"],
        json(&coco(&sampled).1)["ids"]
    );
}

#[test]
fn tokenize_json_respects_special() {
    let m = fixture();
    let (ok, out, _) = coco(&["tokenize", "-m", &m, "-t", "Hello", "--json"]);
    assert!(ok);
    let plain = json(&out)["ids"].as_array().unwrap().len();
    let (ok, out, _) = coco(&["tokenize", "-m", &m, "-t", "Hello", "--special", "--json"]);
    assert!(ok);
    assert_eq!(
        json(&out)["ids"].as_array().unwrap().len(),
        plain + 1,
        "--special adds BOS"
    );
}

#[test]
fn info_reports_architecture_and_capabilities() {
    let (ok, out, err) = coco(&["info", "-m", &fixture()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("architecture: llama")
            && out.contains("capability check")
            && out.contains("Q8_0"),
        "{out}"
    );
}

/// `info -v` prints the fusion plan (model::Plan), one line per step, fused or `--unfused`.
#[test]
fn info_verbose_prints_the_fusion_plan() {
    let (ok, out, err) = coco(&["info", "-v", "-m", &fixture()]);
    assert!(ok, "{err}");
    let plan = out
        .split_once("fusion plan (")
        .unwrap_or_else(|| panic!("no plan in: {out}"))
        .1;
    for step in ["pipeline", "products", "attention", "embed", "lm head"] {
        assert!(
            plan.lines().any(|l| l.trim_start().starts_with(step)),
            "{step}: {plan}"
        );
    }
    assert!(
        plan.lines()
            .any(|l| l.trim_start().starts_with("ffn") && l.contains("every layer: ")),
        "{plan}"
    );
    assert!(plan.contains("final norm folded into"), "{plan}");
    let (ok, out, err) = coco(&["info", "-v", "--unfused", "-m", &fixture()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("unfused (one kernel per operation") && out.contains("four dispatches"),
        "{out}"
    );
}

/// `coco probe --compute-only`: the f32 FMA ceiling everywhere, the tensor cores' only where
/// the device has cooperative matrices (lavapipe has none, and the probe says so).
#[test]
fn probe_reports_the_compute_ceilings() {
    let (ok, out, err) = coco(&["probe", "--compute-only", "--json"]);
    assert!(ok, "{err}");
    let v = json(&out);
    let fma = v["fma_tflops"].as_f64().expect("fma_tflops");
    assert!(fma > 0.0 && fma.is_finite(), "{v}");
    let coop = v["coop_tflops"].as_f64();
    assert_eq!(
        coop.is_some(),
        v["coop_wg_loads_tflops"].as_f64().is_some(),
        "{v}"
    );
    let (ok, out, err) = coco(&["probe", "--compute-only"]);
    assert!(ok, "{err}");
    assert!(out.contains("f32 FMA") && out.contains("TFLOP/s"), "{out}");
    if coop.is_none() {
        assert!(
            out.contains("no cooperative matrices on this device"),
            "{out}"
        );
    }
}

/// `bench` times pp and tg as llama-bench does, each in its own session `-d` tokens into the
/// cache: tg from an empty cache by default, not after pp's prompt. Its decode profile
/// stands at the middle of tg's positions and its prefill profile at the depth.
#[test]
fn bench_times_tg_at_the_depth_not_after_the_prompt() {
    let m = fixture();
    for (depth, tg_from) in [(0u64, 1u64), (6, 6)] {
        let d = depth.to_string();
        let (ok, out, err) = coco(&[
            "bench",
            "-m",
            &m,
            "-p",
            "5",
            "-n",
            "4",
            "-d",
            &d,
            "--reps",
            "1",
            "--profile",
            "--json",
        ]);
        assert!(ok, "{err}");
        let v = json(&out);
        assert_eq!(v["depth"], depth);
        assert_eq!(v["prompt_tokens"], 5);
        assert_eq!(v["tg_positions"], serde_json::json!([tg_from, tg_from + 3]));
        assert!(v["pp_tok_s"].as_f64().unwrap() > 0.0 && v["tg_tok_s"].as_f64().unwrap() > 0.0);
        for (profile, position, tokens) in [
            (&v["profile"], tg_from + 2, 1),
            (&v["prefill_profile"], depth, 5),
        ] {
            if profile.get("not_yet").is_some() {
                println!("no timestamps here: {profile}");
                continue;
            }
            assert_eq!(profile["position"], position, "{profile}");
            assert_eq!(profile["tokens"], tokens, "{profile}");
        }
    }
}

#[test]
fn missing_file_is_a_clear_error() {
    let (ok, _, err) = coco(&["run", "-m", "/nonexistent.gguf", "-p", "x"]);
    assert!(!ok);
    assert!(err.contains("/nonexistent.gguf"), "{err}");
}

/// The README's example: greedy `coco run` on the default model prints HF's continuation.
#[test]
fn default_model_greedy_run_prints_hf_text() {
    let model = format!(
        "{}/models/gemma-3-270m-q4_k_m.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    assert!(
        std::path::Path::new(&model).exists(),
        "{model} missing: run scripts/install_model.sh"
    );
    let (ok, out, err) = coco(&[
        "run",
        "-m",
        &model,
        "-p",
        "The capital of France is",
        "-n",
        "8",
        "--temp",
        "0",
    ]);
    assert!(ok, "{err}");
    // HF transformers' greedy continuation (tests/goldens/model_gemma-3-270m.json).
    assert_eq!(
        out.trim_end_matches('\n'),
        " the capital of the country of France.",
        "got {out:?}"
    );
}

/// `--megakernel` (the one-workgroup-per-token FFN) prints its check to stderr and then HF's
/// greedy tokens on the default model (Q5_0 gate/up with Q6_K and Q4_K downs: the
/// megakernel's mixed-type case): the first 6 of the golden's continuation, which
/// `default_model_greedy_run_prints_hf_text` and tests/model.rs hold the normal path to
/// (so a run of the normal path here would only repeat them, at a Gemma load and 6 lavapipe
/// decode steps of CI time).
#[test]
fn megakernel_run_prints_the_same_greedy_tokens() {
    let model = format!(
        "{}/models/gemma-3-270m-q4_k_m.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    assert!(
        std::path::Path::new(&model).exists(),
        "{model} missing: run scripts/install_model.sh"
    );
    let golden = format!(
        "{}/tests/goldens/model_gemma-3-270m.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let golden = json(&std::fs::read_to_string(&golden).expect("the Gemma 270M golden"));
    let france = golden["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["text"].as_str() == Some("The capital of France is"))
        .expect("the France prompt in the golden");
    let hf: Vec<serde_json::Value> = france["greedy"].as_array().expect("greedy")[..6].to_vec();
    let (ok, out, err) = coco(&[
        "run",
        "-m",
        &model,
        "-p",
        "The capital of France is",
        "-n",
        "6",
        "--temp",
        "0",
        "--json",
        "--megakernel",
    ]);
    assert!(ok, "{err}");
    assert!(err.contains("megakernel check passed"), "{err}");
    let run = json(&out);
    assert_eq!(
        run["prompt_ids"], france["ids"],
        "the prompt's ids as HF tokenized it"
    );
    assert_eq!(
        run["ids"],
        serde_json::Value::Array(hf),
        "greedy ids with --megakernel vs HF's"
    );
}
