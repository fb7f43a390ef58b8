//! What crosses the boundary with the page: one serde type per result and option object of
//! the wasm API (`www/API.md` names each one; `tests/api_doc.rs` checks the names there
//! against these fields). Plain Rust with no `JsValue`, so it builds natively; the wasm side
//! (`bindings.rs`) turns these values into JS objects with `serde-wasm-bindgen`.

use serde::{Deserialize, Serialize};

pub use crate::bench::{
    BenchRecord, ComputeProbe, GridSync, KernelTime, MatrixRead, MegakernelAbRecord,
    MegakernelCheckRecord, Probe, ProfileRecord, StepProfile,
};
use crate::capabilities::{Report as CapabilityReport, Status};
use crate::engine::{summarize_types, Stats};
use crate::gguf::Header;
use crate::gpu::GpuContext;
use crate::model::{Config, Model, Plan};

/// `coco.adapter()`.
#[derive(Clone, Debug, Serialize)]
pub struct Adapter {
    /// `GpuContext::describe`: `"<name> (<backend>, <device type>)"`.
    pub description: String,
    /// wgpu's adapter name, vendor and driver; its browser backend leaves them empty, and the
    /// page fills `description` and `vendor` from the browser's own `GPUAdapterInfo`.
    pub name: String,
    /// The PCI vendor id (0 when wgpu does not know it).
    pub vendor: u32,
    pub driver: String,
    pub driver_info: String,
    /// wgpu's `DeviceType` ("Cpu" for a software rasterizer).
    pub device_type: String,
    pub backend: String,
    pub fallback: bool,
    pub shader_f16: bool,
    /// coco's arithmetic is f32 everywhere; f16 weights are unpacked from pairs.
    pub f16_used: bool,
    /// Whether coco's subgroup kernels run.
    pub subgroups: bool,
    /// Why or why not, in words (in the browser coco requests `subgroups` itself).
    pub subgroups_why: String,
    /// Whether the WGSL compiler has the packed 4×8-bit integer dot product, with which the
    /// subgroup decode matvec stages x' as int8 levels (natively always; in a browser when
    /// `navigator.gpu.wgslLanguageFeatures` lists `packed_4x8_integer_dot_product`).
    pub int8_dot: bool,
    /// The adapter's tensor-core offer in words: in a browser Chromium's experimental
    /// subgroup matrices and their configurations, which coco does not use yet.
    pub cooperative_matrix: String,
    pub timestamp_query: bool,
    pub limits: Limits,
}

/// The adapter limits coco checks models against.
#[derive(Clone, Debug, Serialize)]
pub struct Limits {
    pub max_storage_binding: u64,
    pub max_buffer: u64,
    pub max_invocations: u32,
    pub workgroup_storage: u32,
}

impl Adapter {
    pub fn of(ctx: &GpuContext) -> Adapter {
        let l = &ctx.limits;
        Adapter {
            description: ctx.describe(),
            name: ctx.info.name.clone(),
            vendor: ctx.info.vendor,
            driver: ctx.info.driver.clone(),
            driver_info: ctx.info.driver_info.clone(),
            device_type: format!("{:?}", ctx.info.device_type),
            backend: format!("{:?}", ctx.info.backend),
            fallback: ctx.info.device_type == wgpu::DeviceType::Cpu,
            shader_f16: ctx.has_f16(),
            f16_used: false,
            subgroups: ctx.has_subgroups(),
            subgroups_why: ctx.subgroups.why.clone(),
            int8_dot: crate::gpu::packed_4x8_dot(),
            cooperative_matrix: ctx.cooperative_matrix.clone(),
            timestamp_query: ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY),
            limits: Limits {
                max_storage_binding: l.max_storage_buffer_binding_size,
                max_buffer: l.max_buffer_size,
                max_invocations: l.max_compute_invocations_per_workgroup,
                workgroup_storage: l.max_compute_workgroup_storage_size,
            },
        }
    }
}

/// `coco.memory()`.
#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    pub wasm_bytes: f64,
    /// wasm memory only grows, so this equals `wasm_bytes`.
    pub wasm_peak_bytes: f64,
    /// Null while a call holds the engine.
    pub gpu_bytes: Option<u64>,
    pub gpu_buffers_created: u64,
    pub bind_groups: usize,
    pub pipelines: usize,
}

/// `coco.inspect(…)`'s verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InspectStatus {
    NeedMore,
    Ok,
    NotYet,
    Invalid,
}

/// `coco.inspect(…)`. Every field is always there, null where it does not apply.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    pub status: InspectStatus,
    /// `need_more`: the prefix length to try next.
    pub need: Option<u64>,
    /// `invalid`: why the file is broken.
    pub error: Option<String>,
    pub report: Option<Report>,
    pub model: Option<ModelInfo>,
}

impl Inspection {
    pub fn need_more(need: u64) -> Inspection {
        Inspection {
            status: InspectStatus::NeedMore,
            need: Some(need),
            error: None,
            report: None,
            model: None,
        }
    }

    pub fn invalid(error: String) -> Inspection {
        Inspection {
            status: InspectStatus::Invalid,
            need: None,
            error: Some(error),
            report: None,
            model: None,
        }
    }

    /// The verdict of the capability check on a parsed header.
    pub fn checked(report: &CapabilityReport, header: &Header) -> Inspection {
        let status = if report.invalid().is_some() {
            InspectStatus::Invalid
        } else if report.is_ok() {
            InspectStatus::Ok
        } else {
            InspectStatus::NotYet
        };
        Inspection {
            status,
            need: None,
            error: report.invalid(),
            report: Some(Report::of(report)),
            model: Some(ModelInfo::of(header)),
        }
    }
}

/// The capability report: one row per requirement.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub rows: Vec<ReportRow>,
    /// Estimated GPU memory: weights + KV cache + activations.
    pub gpu_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ReportRow {
    pub name: String,
    pub status: RowStatus,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RowStatus {
    Ok,
    Note,
    NotYet,
    Invalid,
}

impl Report {
    pub fn of(report: &CapabilityReport) -> Report {
        let rows = report
            .rows
            .iter()
            .map(|r| ReportRow {
                name: r.name.to_string(),
                status: match r.status {
                    Status::Ok => RowStatus::Ok,
                    Status::Note => RowStatus::Note,
                    Status::NotYet => RowStatus::NotYet,
                    Status::Invalid => RowStatus::Invalid,
                },
                detail: r.detail.clone(),
            })
            .collect();
        Report {
            rows,
            gpu_bytes: report.gpu_bytes,
        }
    }
}

/// What the page shows about a file before and after loading it. The shape fields are null
/// when the config does not parse (the report then says why).
#[derive(Clone, Debug, Serialize)]
pub struct ModelInfo {
    /// `general.architecture`, "?" when missing.
    pub arch: String,
    /// `general.name`, when the file has one.
    pub name: Option<String>,
    pub layers: Option<u32>,
    pub dim: Option<u32>,
    pub heads: Option<u32>,
    pub kv_heads: Option<u32>,
    pub head_dim: Option<u32>,
    pub ffn: Option<u32>,
    pub vocab: Option<u32>,
    pub context_length: Option<u32>,
    pub weight_bytes: u64,
    /// The end of the last tensor: what a complete download holds.
    pub data_end: u64,
    /// Tensor types and counts, e.g. "Q4_K ×120, F32 ×40".
    pub types: String,
    pub tensors: usize,
    pub chat_template: bool,
}

impl ModelInfo {
    pub fn of(header: &Header) -> ModelInfo {
        let meta = &header.metadata;
        let config = Config::from_gguf(header).ok();
        let c = config.as_ref();
        ModelInfo {
            arch: meta.str("general.architecture").unwrap_or("?").to_string(),
            name: meta.str("general.name").ok().map(str::to_string),
            layers: c.map(|c| c.n_layers),
            dim: c.map(|c| c.dim),
            heads: c.map(|c| c.n_heads),
            kv_heads: c.map(|c| c.n_kv_heads),
            head_dim: c.map(|c| c.head_dim),
            ffn: c.map(|c| c.ffn_dim),
            vocab: c.map(|c| c.vocab_size),
            context_length: c.map(|c| c.context_length),
            weight_bytes: header.total_tensor_bytes(),
            data_end: header.data_end(),
            types: summarize_types(header),
            tensors: header.tensors.len(),
            chat_template: meta.contains(crate::chat::KEY_CHAT_TEMPLATE),
        }
    }
}

/// `coco.load_push(chunk)`.
#[derive(Clone, Debug, Serialize)]
pub struct LoadProgress {
    pub bytes_in: u64,
    /// Known once the header is parsed.
    pub bytes_total: Option<u64>,
    pub tensors_done: usize,
    pub tensors_total: usize,
}

/// `coco.load_finish()`.
#[derive(Clone, Debug, Serialize)]
pub struct Loaded {
    pub model: Option<ModelInfo>,
    pub report: Report,
    /// The fusion plan with the page's switches at load.
    pub plan: FusionPlan,
    /// Of every byte pushed, lowercase hex.
    pub sha256: String,
    pub load_seconds: f64,
}

/// `coco.plan()` and `Loaded.plan`: the fusion plan the loaded model runs with the page's
/// switches (`model::Plan`, as `coco info -v` prints it).
#[derive(Clone, Debug, Serialize)]
pub struct FusionPlan {
    /// "fused" or "unfused".
    pub pipeline: &'static str,
    /// Whether the FFN megakernel runs (asked for and possible on this device).
    pub megakernel: bool,
    /// Dispatches of a decode step at position 0 (a longer context may split attention).
    pub decode_dispatches: usize,
    pub steps: Vec<PlanStep>,
}

/// One line of the plan: the step and what runs there, with the reason.
#[derive(Clone, Debug, Serialize)]
pub struct PlanStep {
    pub step: String,
    pub detail: String,
}

impl FusionPlan {
    pub fn of(plan: &Plan, model: &Model, ctx: &GpuContext) -> FusionPlan {
        let decode = plan.labels(model, ctx, 1, 0, crate::model::LogitsFor::LastToken);
        FusionPlan {
            pipeline: match plan.pipeline {
                crate::model::Pipeline::Fused => "fused",
                crate::model::Pipeline::Unfused => "unfused",
            },
            megakernel: plan.megakernel.as_ref().is_some_and(|m| m.on),
            decode_dispatches: decode.len(),
            steps: plan
                .lines()
                .into_iter()
                .map(|l| PlanStep {
                    step: l.step,
                    detail: l.detail,
                })
                .collect(),
        }
    }
}

/// `coco.set_megakernel(on)`.
#[derive(Clone, Debug, Serialize)]
pub struct Megakernel {
    pub on: bool,
    pub check: MegakernelCheck,
}

#[derive(Clone, Debug, Serialize)]
pub struct MegakernelCheck {
    pub passed: bool,
    pub max_abs: f32,
    pub max_rel: f32,
    pub rows: u32,
    pub detail: String,
}

impl MegakernelCheck {
    pub fn of(c: &crate::engine::MegakernelCheck) -> MegakernelCheck {
        MegakernelCheck {
            passed: c.passed,
            max_abs: c.max_abs,
            max_rel: c.max_rel,
            rows: c.rows,
            detail: c.detail.clone(),
        }
    }
}

/// `coco.generate(…)` and `coco.chat(…)`: what the run did and how fast.
#[derive(Clone, Debug, Serialize)]
pub struct GenerationStats {
    pub prompt_tokens: usize,
    /// Prompt tokens the KV cache already held (a chat's unchanged prefix).
    pub reused_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub ms_per_token: f64,
    pub dispatches_per_token: u32,
    /// Every setting samples on the GPU, K steps per submit, unless `cpu_sampling`.
    pub sampler_on_gpu: bool,
    pub steps_per_submit: u32,
    /// "eos" | "max_tokens" | "stopped" | "context_full".
    pub stop: &'static str,
    pub text: String,
    pub ids: Vec<u32>,
}

impl GenerationStats {
    pub fn of(stats: &Stats, prompt: usize, reused: usize, text: String, ids: Vec<u32>) -> Self {
        let prefilled = prompt - reused;
        GenerationStats {
            prompt_tokens: prompt,
            reused_tokens: reused,
            generated_tokens: ids.len(),
            prefill_tok_s: prefilled as f64 / stats.prefill_seconds.max(1e-9),
            decode_tok_s: stats.decode_tok_s(),
            ms_per_token: 1000.0 / stats.decode_tok_s().max(1e-9),
            dispatches_per_token: stats.dispatches_per_token,
            sampler_on_gpu: stats.sampler_on_gpu,
            steps_per_submit: stats.steps_per_submit,
            stop: stats.stop.as_str(),
            text,
            ids,
        }
    }
}

/// The `options` of `generate` and `chat`; anything missing keeps the engine's default
/// (`SamplerConfig::default`, 128 tokens).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    pub temperature: Option<f64>,
    pub top_k: Option<f64>,
    pub top_p: Option<f64>,
    pub min_p: Option<f64>,
    pub repeat_penalty: Option<f64>,
    pub repeat_last_n: Option<f64>,
    pub seed: Option<f64>,
    pub max_tokens: Option<f64>,
    pub cpu_sampling: Option<bool>,
}

/// One message of `chat` / `render_chat`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// The `options` of `Coco.open`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct OpenOptions {
    /// Subgroups: true wherever the browser grants them, false never, null/absent where
    /// granted on a hardware adapter (not on a software one, where they are slower).
    pub subgroups: Option<bool>,
    /// Who merges flash-decoding's key ranges: "separate" (a second dispatch, the A/B
    /// baseline) or "in_split" / null / absent (the split kernel's last workgroup).
    pub attention_merge: Option<String>,
    /// Decode batches the GPU loop keeps in flight, 1..=3 (null / absent: 2; A/B runs).
    pub batches_in_flight: Option<u32>,
    /// The portable prefill GEMM: "tiled" (the 64 × 64 tiles, the A/B baseline), "4x8",
    /// "8x4" or "4x4" (that wide register tile everywhere; "4x8h", … in f16), "dot4", or
    /// "auto" / null / absent (by product). Anything but auto also runs the tiles on a
    /// software adapter.
    pub gemm: Option<String>,
    /// The single-pass attention's 2 × 2 score blocks and larger tiles (A/B runs; null /
    /// absent: off).
    pub attention_blocked: Option<bool>,
}

/// The `options` of `bench`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BenchOptions {
    pub pp: Option<f64>,
    pub tg: Option<f64>,
    /// Tokens in the cache before pp and tg are timed (`coco bench -d`); absent: 0.
    pub depth: Option<f64>,
    pub reps: Option<f64>,
    pub cpu_sampling: Option<bool>,
}

/// A whole number from the page, clamped to u32; missing, negative or not finite gives
/// `default`.
pub fn whole(v: Option<f64>, default: u32) -> u32 {
    v.filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(default, |v| v.min(u32::MAX as f64) as u32)
}

/// A finite number from the page, else `default`.
pub fn real(v: Option<f64>, default: f32) -> f32 {
    v.filter(|v| v.is_finite()).map_or(default, |v| v as f32)
}

impl GenerateOptions {
    /// Sampling options; anything missing keeps `SamplerConfig`'s default.
    pub fn sampler(&self) -> crate::sampler::SamplerConfig {
        let d = crate::sampler::SamplerConfig::default();
        crate::sampler::SamplerConfig {
            temperature: real(self.temperature, d.temperature).max(0.0),
            top_k: whole(self.top_k, d.top_k),
            top_p: real(self.top_p, d.top_p).clamp(0.0, 1.0),
            min_p: real(self.min_p, d.min_p).clamp(0.0, 1.0),
            repeat_penalty: real(self.repeat_penalty, d.repeat_penalty).max(0.0),
            repeat_last_n: whole(self.repeat_last_n, d.repeat_last_n),
            seed: self
                .seed
                .filter(|v| v.is_finite() && *v >= 0.0)
                .map_or(d.seed, |v| v as u64),
        }
    }
}
