//! `www/API.md` against the types that cross the page boundary (`coco::web::api`,
//! `coco::web::error`): every ```ts block's `interface X { … }` must list exactly the fields a
//! value of X serializes to (a `?` field: present in some sample), and nested objects must
//! match the interface their field names. A field added to a type without its line in API.md,
//! or a line left behind for a field that is gone, fails here.

use std::collections::{BTreeMap, BTreeSet};

use coco::web::api::*;
use coco::web::error::{ErrorKind, PageError};
use serde_json::Value;

/// One documented field: optional (`name?:`), and the type text after the colon.
#[derive(Debug)]
struct Field {
    optional: bool,
    ty: String,
}

type Interfaces = BTreeMap<String, BTreeMap<String, Field>>;

/// The `interface Name { field: type; … }` blocks of API.md's ```ts fences. One field per
/// line; `//` comments and continuation lines (no `name:` at the start) are skipped.
fn documented() -> Interfaces {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/www/API.md"))
        .expect("www/API.md");
    let mut out = Interfaces::new();
    let mut in_ts = false;
    let mut current: Option<String> = None;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("").trim();
        if line.trim_start().starts_with("```") {
            in_ts = line.trim() == "```ts";
            current = None;
            continue;
        }
        if !in_ts {
            continue;
        }
        if let Some(rest) = code.strip_prefix("interface ") {
            let name = rest.trim_end_matches('{').trim().to_string();
            assert!(
                !out.contains_key(&name),
                "API.md lists interface {name} twice"
            );
            out.insert(name.clone(), BTreeMap::new());
            current = Some(name);
            continue;
        }
        if code == "}" {
            current = None;
            continue;
        }
        let Some(iface) = &current else { continue };
        let Some((name, ty)) = code.split_once(':') else {
            continue;
        };
        let (name, optional) = match name.strip_suffix('?') {
            Some(n) => (n, true),
            None => (name, false),
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue; // a continuation of the type above (`| "internal";`)
        }
        let fields = out.get_mut(iface).unwrap();
        assert!(
            !fields.contains_key(name),
            "API.md lists {iface}.{name} twice"
        );
        fields.insert(
            name.to_string(),
            Field {
                optional,
                ty: ty.trim().trim_end_matches(';').to_string(),
            },
        );
    }
    out
}

/// The interface a field's type names (`Report | null`, `ReportRow[]`), if any.
fn named_interface<'a>(ty: &str, docs: &'a Interfaces) -> Option<&'a str> {
    let head = ty.split('|').next()?.trim().trim_end_matches("[]");
    docs.get_key_value(head).map(|(k, _)| k.as_str())
}

/// Checks `samples` (serialized values of one type) against interface `name`, recursing into
/// fields whose type names another interface. Returns the problems found.
fn check(name: &str, samples: &[Value], docs: &Interfaces, problems: &mut Vec<String>) {
    let Some(fields) = docs.get(name) else {
        problems.push(format!("API.md has no `interface {name}`"));
        return;
    };
    let mut seen = BTreeSet::new();
    let mut nested: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for sample in samples {
        let Value::Object(map) = sample else {
            problems.push(format!("{name}: a sample is not an object: {sample}"));
            continue;
        };
        for (key, value) in map {
            seen.insert(key.clone());
            let Some(field) = fields.get(key) else {
                problems.push(format!("{name}.{key} is serialized but not in API.md"));
                continue;
            };
            if let Some(inner) = named_interface(&field.ty, docs) {
                match value {
                    Value::Object(_) => nested.entry(inner).or_default().push(value.clone()),
                    Value::Array(items) => nested.entry(inner).or_default().extend(items.clone()),
                    _ => {}
                }
            }
        }
        for (key, field) in fields {
            if !field.optional && !map.contains_key(key) {
                problems.push(format!(
                    "API.md lists {name}.{key}, but a {name} has no such field"
                ));
            }
        }
    }
    for (key, field) in fields {
        if field.optional && !seen.contains(key) {
            problems.push(format!(
                "API.md lists {name}.{key}?, but no sample {name} has it"
            ));
        }
    }
    for (inner, values) in nested {
        check(inner, &values, docs, problems);
    }
}

fn json(v: &impl serde::Serialize) -> Value {
    serde_json::to_value(v).expect("serializes")
}

fn model_info() -> ModelInfo {
    ModelInfo {
        arch: "llama".into(),
        name: Some("tiny".into()),
        layers: Some(2),
        dim: Some(64),
        heads: Some(4),
        kv_heads: Some(2),
        head_dim: Some(16),
        ffn: Some(128),
        vocab: Some(256),
        context_length: Some(512),
        weight_bytes: 1 << 20,
        data_end: 1 << 21,
        types: "F32 ×10".into(),
        tensors: 10,
        chat_template: false,
    }
}

fn report() -> Report {
    Report {
        rows: vec![ReportRow {
            name: "adapter".into(),
            status: RowStatus::Ok,
            detail: "lavapipe".into(),
        }],
        gpu_bytes: 1 << 22,
    }
}

/// One or more values of each type the page receives or sends, every field filled.
fn samples() -> Vec<(&'static str, Vec<Value>)> {
    let adapter = Adapter {
        description: "llvmpipe (Vulkan, Cpu)".into(),
        name: "llvmpipe".into(),
        vendor: 0x10005,
        driver: "llvmpipe".into(),
        driver_info: "Mesa".into(),
        device_type: "Cpu".into(),
        backend: "Vulkan".into(),
        fallback: true,
        shader_f16: true,
        f16_used: false,
        subgroups: true,
        subgroups_why: "granted by the browser".into(),
        int8_dot: true,
        cooperative_matrix: "chromium-experimental-subgroup-matrix not offered".into(),
        timestamp_query: true,
        limits: Limits {
            max_storage_binding: 128 << 20,
            max_buffer: 2 << 30,
            max_invocations: 1024,
            workgroup_storage: 32 << 10,
        },
    };
    let memory = Memory {
        wasm_bytes: 1e6,
        wasm_peak_bytes: 1e6,
        gpu_bytes: Some(5),
        gpu_buffers_created: 3,
        bind_groups: 2,
        pipelines: 1,
    };
    let checked = Inspection {
        status: InspectStatus::Ok,
        need: None,
        error: None,
        report: Some(report()),
        model: Some(model_info()),
    };
    let progress = LoadProgress {
        bytes_in: 10,
        bytes_total: Some(20),
        tensors_done: 1,
        tensors_total: 2,
    };
    let plan = FusionPlan {
        pipeline: "fused",
        megakernel: false,
        decode_dispatches: 12,
        steps: vec![PlanStep {
            step: "qkv+rope".into(),
            detail: "every layer: attention norm, Q/K/V, RoPE (normal) and the KV-cache write \
                     in one matvec"
                .into(),
        }],
    };
    let loaded = Loaded {
        model: Some(model_info()),
        report: report(),
        plan: plan.clone(),
        sha256: "00".repeat(32),
        load_seconds: 1.5,
    };
    let profile = StepProfile {
        tokens: 1,
        kernels: vec![
            KernelTime {
                label: "matmul_q8_0_matvec_chunk256".into(),
                calls: 1,
                total_us: 4.0,
                bytes: Some(4_456_448),
                flops: Some(8_388_608),
                workgroups: 256,
            },
            KernelTime {
                label: "get_rows_q8_0".into(),
                calls: 1,
                total_us: 3.5,
                bytes: None,
                flops: None,
                workgroups: 1,
            },
        ],
        profiled_us: 7.5,
        one_pass_us: 3.0,
        dispatches: 1,
        steps: 4,
        position: 5,
    };
    let bench = BenchRecord {
        model: "tiny".into(),
        adapter: "lavapipe".into(),
        kernels: coco::kernels::matmul::KernelSettings {
            matvec: "matvec_rows256".into(),
            matvec_shape: "8x1x2x0x1".into(),
            matvec_max_t: None,
            tiles: "tiled64x64".into(),
            gemm: "auto".into(),
            wide_f16: false,
            wide_f16_prefetch: false,
            attention_merge: "in_split",
            batches_in_flight: 2,
            tile_split_target: 512,
            coop128_split_target: 256,
            coop128_min_groups: None,
            coop_prestage: false,
            coop_subgroup_tile64: false,
            coop_vec_stage: false,
            coop_half_w: false,
            coop_split_merge: "pass",
            coop64_split_pass: false,
            coop_raw_w: false,
            coop_stream: false,
            attention_blocked: false,
            attention_coop: false,
            attention_range_kib: None,
            chunk: "16x4".into(),
            chunk_splits: None,
            chunk_min_k: None,
            ffn_levels: true,
            o_levels: true,
            f16_operands: false,
            shader_checks: "off",
            subgroups: false,
            ablate: vec![],
        },
        pipeline: "fused",
        prompt_tokens: 8,
        gen_tokens: 4,
        depth: 0,
        tg_positions: [1, 4],
        reps: 1,
        pp_tok_s: Some(100.0),
        tg_tok_s: Some(10.0),
        pp_runs: vec![100.0],
        tg_runs: vec![10.0],
        ms_per_token: Some(100.0),
        dispatches_per_token: 12,
        tg_sampled_tok_s: Some(9.0),
        tg_sampled_runs: vec![9.0],
        sampled_dispatches_per_token: 20,
        sampled_vs_greedy: Some(0.9),
        cpu_sampler_ms: Some(0.1),
        sampler_on_gpu: true,
        steps_per_submit: 4,
        record_ms_per_token: Some(0.01),
        wait_ms_per_token: Some(0.02),
        encode_ms_per_token: Some(0.005),
        pp_host_ms: Some(1.2),
        weight_bytes_per_token: 1 << 20,
        effective_gb_s: Some(0.01),
        probe: Some(Probe {
            read_gb_s: 10.0,
            dispatch_us: 3.5,
            round_trip_us: 100.0,
            grid_sync: vec![
                GridSync {
                    workgroups: 16,
                    dispatch_us: 3.5,
                    barrier_us: Some(1.0),
                    stale_reads: 0,
                    gpu_timed: true,
                },
                GridSync {
                    workgroups: 4096,
                    dispatch_us: 4.0,
                    barrier_us: None,
                    stale_reads: 0,
                    gpu_timed: true,
                },
            ],
            matrix_reads: vec![MatrixRead {
                bytes: 9_437_184,
                workgroups: 256,
                gb_s: 900.0,
                gpu_timed: true,
            }],
            compute: ComputeProbe {
                fma_tflops: 0.03,
                coop_tflops: None,
                coop_wg_loads_tflops: None,
            },
        }),
        floor_ms: Some(1.0),
        fraction_of_floor: Some(0.01),
        megakernel: MegakernelAbRecord {
            tg_tok_s: Some(5.0),
            tg_off_tok_s: Some(10.0),
            ratio: Some(0.5),
            tg_runs: vec![5.0],
            headline: false,
            check: MegakernelCheckRecord {
                passed: true,
                max_abs: Some(1e-5),
                max_rel: Some(1e-4),
                rows: 8,
                detail: "layers 0, 1".into(),
            },
        },
        profile: Some(ProfileRecord::Step(profile.clone())),
        prefill_profile: None,
    };
    let megakernel = Megakernel {
        on: true,
        check: MegakernelCheck {
            passed: true,
            max_abs: 1e-5,
            max_rel: 1e-4,
            rows: 8,
            detail: "layers 0..2".into(),
        },
    };
    let stats = GenerationStats {
        prompt_tokens: 5,
        reused_tokens: 0,
        generated_tokens: 2,
        prefill_tok_s: 10.0,
        decode_tok_s: 5.0,
        ms_per_token: 200.0,
        dispatches_per_token: 30,
        sampler_on_gpu: true,
        steps_per_submit: 4,
        stop: "max_tokens",
        text: "hi".into(),
        ids: vec![1, 2],
    };
    let errors = vec![
        json(&PageError::busy()),
        json(
            &PageError::new(ErrorKind::InvalidRequest, "context full")
                .with("needed", 9)
                .with("context", 8)
                .with("prompt_tokens", 9),
        ),
        json(
            &PageError::new(ErrorKind::InvalidRequest, "bad token")
                .with("id", 999)
                .with("vocab", 256),
        ),
        json(&coco::web::error::gpu_load_error(
            coco::gpu::GpuError::OutOfMemory("Out of Memory".into()),
            None,
            1 << 27,
        )),
        json(
            &PageError::new(ErrorKind::OutOfMemory, "oom")
                .with("weight_bytes", 1)
                .with("tensors", 1)
                .with("largest_tensor_bytes", 1),
        ),
        json(&PageError::from(coco::gpu::GpuError::Unsupported {
            setting: "gemm",
            why: "not yet: gemm=4x8h needs shader-f16".into(),
        })),
    ];
    vec![
        ("Adapter", vec![json(&adapter)]),
        ("Memory", vec![json(&memory)]),
        (
            "Inspection",
            vec![
                json(&checked),
                json(&Inspection::need_more(1 << 21)),
                json(&Inspection::invalid("not a GGUF".into())),
            ],
        ),
        ("LoadProgress", vec![json(&progress)]),
        ("Loaded", vec![json(&loaded)]),
        ("FusionPlan", vec![json(&plan)]),
        ("BenchRecord", vec![json(&bench)]),
        ("StepProfile", vec![json(&profile)]),
        (
            "ComputeProbe",
            vec![json(&ComputeProbe {
                fma_tflops: 0.03,
                coop_tflops: Some(300.0),
                coop_wg_loads_tflops: Some(200.0),
            })],
        ),
        ("Megakernel", vec![json(&megakernel)]),
        ("GenerationStats", vec![json(&stats)]),
        ("GenerateOptions", vec![json(&GenerateOptions::default())]),
        (
            "ChatMessage",
            vec![json(&ChatMessage {
                role: "user".into(),
                content: "hi".into(),
            })],
        ),
        ("BenchOptions", vec![json(&BenchOptions::default())]),
        ("PageError", errors),
    ]
}

#[test]
fn api_md_lists_exactly_the_fields_of_each_type() {
    let docs = documented();
    let mut problems = Vec::new();
    let mut checked = BTreeSet::new();
    for (name, values) in samples() {
        check(name, &values, &docs, &mut problems);
        checked.insert(name.to_string());
    }
    // Interfaces reached only through a field (Report, ReportRow, ModelInfo, …) count too.
    for fields in docs.values() {
        for field in fields.values() {
            if let Some(inner) = named_interface(&field.ty, &docs) {
                checked.insert(inner.to_string());
            }
        }
    }
    for name in docs.keys() {
        if !checked.contains(name) {
            problems.push(format!(
                "API.md documents `interface {name}`, which no type of src/web serializes"
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "www/API.md is out of step with src/web:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn error_kinds_are_the_documented_ones() {
    let docs = documented();
    let kind = &docs["PageError"]["kind"].ty;
    for k in [
        ErrorKind::NotYet,
        ErrorKind::InvalidFile,
        ErrorKind::GpuLost,
        ErrorKind::OutOfMemory,
        ErrorKind::Busy,
        ErrorKind::Network,
        ErrorKind::InvalidRequest,
        ErrorKind::Internal,
    ] {
        let name = json(&k);
        let quoted = format!("\"{}\"", name.as_str().unwrap());
        assert!(
            kind.contains(&quoted),
            "API.md's PageError.kind lacks {quoted}: {kind}"
        );
    }
}
