//! The wasm API the page calls (contract: `www/API.md`). This is the only code that touches
//! `JsValue`: everything below it is the same engine the CLI drives. Results cross the
//! boundary as the serde types of `api.rs`, turned into plain JS objects by
//! `serde-wasm-bindgen`; errors are thrown as JS `Error`s carrying a [`PageError`]'s fields
//! (`kind`, `message`, numbers).
//!
//! One `Coco` owns the device. A model streams in through `load_begin` / `load_push` /
//! `load_finish` (chunks straight from `fetch()`, never the whole file in the wasm heap),
//! and generation runs in a `Session` kept across calls so chat turns reuse the KV cache.

// Holding the state's `RefCell` borrow across a generation's awaits is the point: a second
// call in the meantime finds it borrowed and gets a `busy` error.
#![allow(clippy::await_holding_refcell_ref)]
// On wasm32 wgpu's handles are neither Send nor Sync; the `Arc` is the engine's own type
// (shared with native, where it is both), not a choice made here.
#![allow(clippy::arc_with_non_send_sync)]

use std::cell::RefCell;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use sha2::{Digest, Sha256};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use super::api::{
    self, Adapter, BenchOptions, BenchRecord, ChatMessage, FusionPlan, GenerateOptions,
    GenerationStats, Inspection, Loaded, Megakernel, MegakernelCheck, Memory, ModelInfo,
    StepProfile,
};
use super::error::{gpu_load_error, PageError};
use crate::bench::{self, BenchConfig};
use crate::capabilities::{self, Report};
use crate::chat::Message;
use crate::engine::{Loader, LogitsFor, Model, Scratch, Session, PREFILL_CHUNK};
use crate::gguf::Parser;
use crate::gpu::{AttentionMerge, DeviceOptions, GemmChoice, GpuContext, SubgroupChoice};
use crate::model::Pipeline;
use crate::util::Clock;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

/// What every fallible export returns: a thrown JS `Error` with the [`PageError`] fields.
type PageResult<T> = Result<T, JsValue>;

/// The serializer for everything that crosses: maps as plain objects, `None` as null, and
/// u64 as numbers (byte counts stay far below 2^53).
fn serializer() -> serde_wasm_bindgen::Serializer {
    serde_wasm_bindgen::Serializer::json_compatible()
}

fn to_js(value: &impl Serialize) -> PageResult<JsValue> {
    value.serialize(&serializer()).map_err(|e| {
        throw(PageError::new(
            super::error::ErrorKind::Internal,
            e.to_string(),
        ))
    })
}

/// An option object from the page; undefined or null gives the defaults.
fn from_js<T: DeserializeOwned + Default>(value: JsValue, what: &str) -> PageResult<T> {
    if value.is_undefined() || value.is_null() {
        return Ok(T::default());
    }
    serde_wasm_bindgen::from_value(value)
        .map_err(|e| throw(PageError::invalid_request(format!("{what}: {e}"))))
}

/// A JS `Error` (so the page gets a stack and `instanceof Error`) with the fields of `e`.
fn throw(e: PageError) -> JsValue {
    let error = js_sys::Error::new(&e.message);
    error.set_name("PageError");
    if let Ok(fields) = e.serialize(&serializer()) {
        if let Ok(fields) = fields.dyn_into::<js_sys::Object>() {
            js_sys::Object::assign(&error, &fields);
        }
    }
    error.into()
}

/// The page's global scope, typed: a window, or a worker's scope.
enum Global {
    Window(web_sys::Window),
    Worker(web_sys::WorkerGlobalScope),
}

fn global() -> Option<Global> {
    let g = js_sys::global();
    match g.dyn_into::<web_sys::Window>() {
        Ok(w) => Some(Global::Window(w)),
        Err(g) => g
            .dyn_into::<web_sys::WorkerGlobalScope>()
            .ok()
            .map(Global::Worker),
    }
}

/// Whether the browser exposes `navigator.gpu`. The navigator is typed; its `gpu` getter
/// is read with `Reflect` because web-sys has `Navigator::gpu` only behind
/// `--cfg=web_sys_unstable_apis` (and as a non-optional getter, which can't say "absent").
fn has_navigator_gpu() -> bool {
    let navigator: JsValue = match global() {
        Some(Global::Window(w)) => w.navigator().into(),
        Some(Global::Worker(w)) => w.navigator().into(),
        None => return false,
    };
    js_sys::Reflect::get(&navigator, &"gpu".into())
        .map(|gpu| !gpu.is_undefined() && !gpu.is_null())
        .unwrap_or(false)
}

/// Resolves after a short timer, letting the browser run callbacks that are already due.
async fn settle() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let scheduled = match global() {
            Some(Global::Window(w)) => {
                w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 20)
            }
            Some(Global::Worker(w)) => {
                w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 20)
            }
            None => Err(JsValue::NULL),
        };
        if scheduled.is_err() {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
}

/// Bytes of wasm linear memory. It only grows, so this is also the peak.
fn wasm_memory_bytes() -> f64 {
    wasm_bindgen::memory()
        .dyn_into::<js_sys::WebAssembly::Memory>()
        .map(|m| {
            m.buffer()
                .dyn_into::<js_sys::ArrayBuffer>()
                .map(|b| b.byte_length() as f64)
                .unwrap_or(0.0)
        })
        .unwrap_or(0.0)
}

/// A load in progress: the streaming loader plus a running sha256 of every byte, which the
/// page stores with its cache entry and checks on the next load from the cache.
struct PendingLoad {
    loader: Loader,
    sha256: Sha256,
    clock: Clock,
}

/// The page's handle. Every exported method takes `&self`: wasm-bindgen then lets the page
/// call in while an async method (a generation) is still running — `destroy_device`, `lost`
/// and `memory` must work then — and a call that needs the engine state while another holds
/// it gets a `busy` error instead of wasm-bindgen's aliasing exception.
#[wasm_bindgen]
pub struct Coco {
    ctx: Arc<GpuContext>,
    state: RefCell<State>,
}

/// Everything a load or a generation changes.
struct State {
    ctx: Arc<GpuContext>,
    /// The header probe (`inspect`): fed a file's first bytes piece by piece.
    inspecting: Option<Parser>,
    pending: Option<PendingLoad>,
    /// The capability report of the last load that was refused.
    refused_report: Option<Report>,
    model: Option<Arc<Model>>,
    /// What the loaded model's header says.
    model_info: Option<ModelInfo>,
    session: Option<Session>,
    /// KV-cache positions for sessions (set at `load_begin`).
    context: u32,
    pipeline: Pipeline,
    /// The FFN megakernel switch, kept for sessions made after the check passed.
    megakernel: bool,
}

#[wasm_bindgen]
impl Coco {
    /// Opens the WebGPU adapter and device (`options`: [`api::OpenOptions`], may be
    /// undefined).
    pub async fn open(options: JsValue) -> PageResult<Coco> {
        let options: api::OpenOptions = from_js(options, "open options")?;
        if !has_navigator_gpu() {
            return Err(throw(PageError::new(
                super::error::ErrorKind::NotYet,
                "no WebGPU: this browser does not expose navigator.gpu",
            )));
        }
        let device = DeviceOptions {
            subgroups: match options.subgroups {
                None => SubgroupChoice::Auto,
                Some(true) => SubgroupChoice::On,
                Some(false) => SubgroupChoice::Off,
            },
            attention_merge: match options.attention_merge.as_deref() {
                None | Some("in_split") => AttentionMerge::InSplit,
                Some("separate") => AttentionMerge::Separate,
                Some(other) => {
                    return Err(throw(PageError::new(
                        super::error::ErrorKind::InvalidRequest,
                        format!(
                        "open options: attention_merge {:?} is not \"in_split\" or \"separate\"",
                        other.chars().take(40).collect::<String>()
                    ),
                    )))
                }
            },
            batches_in_flight: match options.batches_in_flight {
                Some(n) if !(1..=crate::model::MAX_BATCHES_IN_FLIGHT).contains(&n) => {
                    return Err(throw(PageError::new(
                        super::error::ErrorKind::InvalidRequest,
                        format!("open options: batches_in_flight {n} is not 1, 2 or 3"),
                    )))
                }
                n => n,
            },
            gemm: match options.gemm.as_deref() {
                None => GemmChoice::Auto,
                Some(v) => GemmChoice::parse(v).ok_or_else(|| {
                    throw(PageError::new(
                        super::error::ErrorKind::InvalidRequest,
                        format!(
                            "open options: gemm {:?} is not \"auto\", \"tiled\", \"matrix\", \"dot4\", \"4x8\", \"8x4\", \"4x4\", \"4x8h\", \"8x4h\" or \"4x4h\"",
                            v.chars().take(40).collect::<String>()
                        ),
                    ))
                })?,
            },
            attention_blocked: options.attention_blocked.unwrap_or(false),
        };
        let ctx = GpuContext::with_options(device).await.map_err(|e| {
            let e = PageError::from(e);
            // A setting this GPU can't run is not a missing WebGPU: its message stands.
            if e.setting.is_some() {
                throw(e)
            } else {
                throw(PageError::new(e.kind, format!("no WebGPU: {}", e.message)))
            }
        })?;
        let ctx = Arc::new(ctx);
        let state = State {
            ctx: ctx.clone(),
            inspecting: None,
            pending: None,
            refused_report: None,
            model: None,
            model_info: None,
            session: None,
            context: 2048,
            pipeline: Pipeline::Fused,
            megakernel: false,
        };
        Ok(Coco {
            ctx,
            state: RefCell::new(state),
        })
    }

    /// The adapter, its optional features and the limits coco checks models against.
    pub fn adapter(&self) -> PageResult<JsValue> {
        to_js(&Adapter::of(&self.ctx))
    }

    /// wasm heap and GPU memory in use (`gpu_bytes` is null while a call holds the engine).
    pub fn memory(&self) -> PageResult<JsValue> {
        let wasm = wasm_memory_bytes();
        let r = self.ctx.resource_counts();
        to_js(&Memory {
            wasm_bytes: wasm,
            wasm_peak_bytes: wasm,
            gpu_bytes: self.state.try_borrow().ok().map(|s| s.gpu_bytes()),
            gpu_buffers_created: r.buffers_created,
            bind_groups: r.bind_groups,
            pipelines: r.pipelines,
        })
    }

    /// Null, or why the device was lost.
    pub fn lost(&self) -> Option<String> {
        self.ctx.lost()
    }

    /// Test hook: loses the device on purpose (`GPUDevice.destroy()`), also mid-generation.
    pub fn destroy_device(&self) {
        self.ctx.device.destroy();
    }

    pub fn inspect(
        &self,
        bytes: &[u8],
        offset: f64,
        context: u32,
        file_len: Option<f64>,
    ) -> PageResult<JsValue> {
        let inspection = self.state()?.inspect(bytes, offset, context, file_len);
        to_js(&inspection)
    }

    pub fn load_begin(&self, context: u32, expected_len: Option<f64>) -> PageResult<()> {
        self.state()?.load_begin(context, expected_len);
        Ok(())
    }

    pub fn load_push(&self, chunk: &[u8]) -> PageResult<JsValue> {
        let progress = self.state()?.load_push(chunk).map_err(throw)?;
        to_js(&progress)
    }

    pub fn load_report(&self) -> PageResult<JsValue> {
        match &self.state()?.refused_report {
            Some(r) => to_js(&api::Report::of(r)),
            None => Ok(JsValue::NULL),
        }
    }

    pub fn load_finish(&self) -> PageResult<JsValue> {
        let loaded = self.state()?.load_finish().map_err(throw)?;
        to_js(&loaded)
    }

    /// Compiles the kernels a generation runs (a throwaway generation of a few tokens) and
    /// returns the seconds it took; the page calls it once after a load.
    pub async fn warm_up(&self) -> PageResult<f64> {
        let mut state = self.state()?;
        let model = state.loaded().map_err(throw)?;
        let clock = Clock::start();
        let session = state.session(&model);
        if let Err(e) = session.warm_up().await {
            session.reset();
            return Err(throw(PageError::from(e).or_lost(self.ctx.lost())));
        }
        Ok(clock.seconds())
    }

    pub fn load_cancel(&self) -> PageResult<()> {
        self.state()?.pending = None;
        Ok(())
    }

    pub fn unload(&self) -> PageResult<()> {
        self.state()?.unload();
        Ok(())
    }

    pub fn set_pipeline(&self, name: &str) -> PageResult<()> {
        self.state()?.set_pipeline(name).map_err(throw)
    }

    /// The fusion plan the loaded model runs with the current switches.
    pub fn plan(&self) -> PageResult<JsValue> {
        to_js(&self.state()?.plan().map_err(throw)?)
    }

    pub async fn set_megakernel(&self, on: bool) -> PageResult<JsValue> {
        let mut state = self.state()?;
        let result = state.set_megakernel(on).await.map_err(throw)?;
        to_js(&result)
    }

    pub async fn generate(
        &self,
        prompt: String,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> PageResult<JsValue> {
        let options: GenerateOptions = from_js(options, "options")?;
        let mut state = self.state()?;
        let model = state.loaded().map_err(throw)?;
        let ids = model.tokenizer.encode(&prompt, true, true);
        let stats = state.run(&model, ids, &options, &on_token).await?;
        to_js(&stats)
    }

    pub async fn chat(
        &self,
        messages: JsValue,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> PageResult<JsValue> {
        let messages = messages_from_js(messages)?;
        let options: GenerateOptions = from_js(options, "options")?;
        let mut state = self.state()?;
        let model = state.loaded().map_err(throw)?;
        let text = render_chat(&model, &messages).map_err(throw)?;
        // The template writes BOS itself where the model wants it (as HF's apply_chat_template).
        let ids = model.tokenizer.encode(&text, false, true);
        let stats = state.run(&model, ids, &options, &on_token).await?;
        to_js(&stats)
    }

    /// The templated prompt text for `messages`, as `chat` would tokenize it.
    pub fn render_chat(&self, messages: JsValue) -> PageResult<String> {
        let messages = messages_from_js(messages)?;
        let model = self.state()?.loaded().map_err(throw)?;
        render_chat(&model, &messages).map_err(throw)
    }

    /// Forgets the conversation: the next call prefills from position 0.
    pub fn reset(&self) -> PageResult<()> {
        if let Some(s) = self.state()?.session.as_mut() {
            s.reset();
        }
        Ok(())
    }

    pub async fn bench(&self, options: JsValue) -> PageResult<JsValue> {
        let options: BenchOptions = from_js(options, "bench options")?;
        let mut state = self.state()?;
        let result = state.bench(&options).await.map_err(throw)?;
        to_js(&result)
    }

    /// The GPU's arithmetic ceilings, as `coco probe --compute-only` measures them: f32 FMA
    /// TFLOP/s (what the page's portable kernels can at most reach; compare its GEMMs' TFLOP/s
    /// in a prefill profile), and the tensor cores' where the device has cooperative matrices
    /// (wgpu's web backend offers none: null).
    pub async fn probe(&self) -> PageResult<JsValue> {
        let state = self.state()?;
        let result = bench::probe_compute(&state.ctx)
            .await
            .map_err(|e| throw(PageError::from(e)))?;
        to_js(&result)
    }

    /// `step`: "decode" (or absent) times the decode step after a prefill of `tokens`;
    /// "prefill" the prefill step of `tokens` itself.
    pub async fn profile(&self, tokens: u32, step: Option<String>) -> PageResult<JsValue> {
        let prefill = match step.as_deref() {
            None | Some("decode") => false,
            Some("prefill") => true,
            Some(other) => {
                return Err(throw(PageError::invalid_request(format!(
                    "profile step {other:?}: expected \"decode\" or \"prefill\""
                ))))
            }
        };
        let mut state = self.state()?;
        let result = state.profile(tokens, prefill).await.map_err(throw)?;
        to_js(&result)
    }
}

impl Coco {
    fn state(&self) -> PageResult<std::cell::RefMut<'_, State>> {
        self.state
            .try_borrow_mut()
            .map_err(|_| throw(PageError::busy()))
    }
}

fn messages_from_js(messages: JsValue) -> PageResult<Vec<ChatMessage>> {
    serde_wasm_bindgen::from_value(messages).map_err(|e| {
        throw(PageError::invalid_request(format!(
            "messages must be an array of {{role, content}} strings: {e}"
        )))
    })
}

/// The engine state's operations; `Coco` forwards to them (docs in www/API.md).
impl State {
    /// The header probe before the bulk download. `bytes` are the file's bytes from offset
    /// `offset` on (0 starts a new probe); the page passes each newly read piece once, so the
    /// wasm heap holds one piece, not the growing prefix.
    fn inspect(
        &mut self,
        bytes: &[u8],
        offset: f64,
        context: u32,
        file_len: Option<f64>,
    ) -> Inspection {
        let offset = offset.max(0.0) as u64;
        if offset == 0 || self.inspecting.is_none() {
            let parser = Parser::new();
            self.inspecting = Some(match file_len {
                Some(len) if len > 0.0 => parser.with_expected_len(len as u64),
                _ => parser,
            });
        }
        let parser = self.inspecting.as_mut().expect("set above");
        let seen = parser.bytes_seen();
        if offset > seen {
            self.inspecting = None;
            return Inspection::invalid(format!(
                "header bytes from {offset} given, but only {seen} were read"
            ));
        }
        let skip = ((seen - offset) as usize).min(bytes.len());
        if let Err(e) = parser.push(&bytes[skip..], &mut |_| {}) {
            self.inspecting = None;
            return Inspection::invalid(e.to_string());
        }
        let end = offset + bytes.len() as u64;
        let Some(header) = parser.header() else {
            return Inspection::need_more((end * 2).max(1 << 20));
        };
        let report = capabilities::check(header, &self.ctx.adapter_facts(), context);
        let out = Inspection::checked(&report, header);
        // The probe's parser holds the whole vocabulary; free it before the real load.
        self.inspecting = None;
        out
    }

    /// Starts a streaming load (dropping any loaded model first, so its GPU memory is free).
    fn load_begin(&mut self, context: u32, expected_len: Option<f64>) {
        self.unload();
        self.context = context.max(1);
        let expected = expected_len.filter(|&l| l > 0.0).map(|l| l as u64);
        self.pending = Some(PendingLoad {
            loader: Loader::new(&self.ctx, self.context, expected),
            sha256: Sha256::new(),
            clock: Clock::start(),
        });
    }

    /// Feeds the next chunk. On any error the load is dropped (its buffers freed).
    fn load_push(&mut self, chunk: &[u8]) -> Result<api::LoadProgress, PageError> {
        let pending = self.pending.as_mut().ok_or_else(|| {
            PageError::invalid_request("no load in progress (call load_begin first)")
        })?;
        pending.sha256.update(chunk);
        if let Err(e) = pending.loader.push(chunk) {
            self.refused_report = pending.loader.report().cloned();
            self.pending = None;
            return Err(e.into());
        }
        // WebGPU reports a failed allocation through the device's error event, a browser turn
        // after `createBuffer`. Checked here, it stops the load at the next chunk; otherwise it
        // would surface only at load_finish, after the whole file went into buffers that don't
        // exist (tests/e2e/gpu_limits.test.mjs).
        if let Err(e) = self.ctx.check_health() {
            let e = gpu_load_error(e, pending.loader.header(), self.ctx.max_binding_bytes());
            self.pending = None;
            return Err(e);
        }
        let p = pending.loader.progress();
        Ok(api::LoadProgress {
            bytes_in: p.bytes_in,
            bytes_total: p.bytes_total,
            tensors_done: p.tensors_done,
            tensors_total: p.tensors_total,
        })
    }

    /// Ends the stream: every tensor must be complete.
    fn load_finish(&mut self) -> Result<Loaded, PageError> {
        let pending = self
            .pending
            .take()
            .ok_or_else(|| PageError::invalid_request("no load in progress"))?;
        let info = pending.loader.header().map(ModelInfo::of);
        let (model, report) = pending.loader.finish()?;
        let sha256: String = pending
            .sha256
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.model = Some(Arc::new(model));
        self.model_info = info;
        Ok(Loaded {
            model: self.model_info.clone(),
            report: api::Report::of(&report),
            plan: self.plan()?,
            sha256,
            load_seconds: pending.clock.seconds(),
        })
    }

    /// Drops the model, its session and any load in progress.
    fn unload(&mut self) {
        self.session = None;
        self.megakernel = false;
        self.model = None;
        self.model_info = None;
        self.pending = None;
        self.inspecting = None;
    }

    fn set_pipeline(&mut self, name: &str) -> Result<(), PageError> {
        self.pipeline = match name {
            "fused" => Pipeline::Fused,
            "unfused" => Pipeline::Unfused,
            other => {
                return Err(PageError::invalid_request(format!(
                    "unknown pipeline {other:?} (fused | unfused)"
                )))
            }
        };
        Ok(())
    }

    /// The FFN megakernel switch. Turning it on first runs its correctness check (both FFN
    /// paths on the same inputs); it stays off when the check fails.
    async fn set_megakernel(&mut self, on: bool) -> Result<Megakernel, PageError> {
        let model = self.loaded()?;
        let session = self.session(&model);
        let check = session.set_megakernel(on).await?;
        self.megakernel = session.megakernel;
        Ok(Megakernel {
            on: self.megakernel,
            check: MegakernelCheck::of(&check),
        })
    }

    /// `coco bench` on the loaded model: the same fields as `coco bench --json` (the engine
    /// builds that object for both; it is passed through as it is).
    async fn bench(&mut self, o: &BenchOptions) -> Result<BenchRecord, PageError> {
        let model = self.loaded()?;
        let cfg = BenchConfig {
            prompt_tokens: api::whole(o.pp, 128).max(1),
            gen_tokens: api::whole(o.tg, 32).max(1),
            depth: api::whole(o.depth, 0),
            reps: api::whole(o.reps, 3).max(1),
            pipeline: self.pipeline,
        };
        // The benchmark makes its own sessions; free the chat's KV cache meanwhile.
        self.session = None;
        let cpu_sampling = o.cpu_sampling.unwrap_or(false);
        let r = bench::run_with(&self.ctx, &model, &cfg, self.megakernel, cpu_sampling).await?;
        let name = self
            .model_info
            .as_ref()
            .and_then(|m| m.name.clone())
            .unwrap_or_default();
        // `profile` and `prefill_profile` stay null, as in `coco bench --json` without
        // --profile: the page's per-kernel chart is `profile` below.
        Ok(r.record(&name, cfg.pipeline))
    }

    /// One decode step kernel by kernel (timestamp queries, one pass per dispatch) after a
    /// prefill of `tokens` positions, or the prefill step of `tokens` itself, as `coco bench
    /// --profile` records them.
    async fn profile(&mut self, tokens: u32, prefill: bool) -> Result<StepProfile, PageError> {
        let model = self.loaded()?;
        let prompt = bench::bench_prompt(
            &model,
            tokens.clamp(1, self.context.saturating_sub(2).max(1)),
        );
        self.session = None;
        let (context, step) = if prefill {
            (&[][..], bench::ProfiledStep::Prefill(&prompt))
        } else {
            (&prompt[..], bench::ProfiledStep::Decode)
        };
        let p = bench::profile_step(
            &self.ctx,
            &model,
            context,
            step,
            self.pipeline,
            self.megakernel,
        )
        .await?;
        Ok(p)
    }

    /// The loaded model's fusion plan with the page's pipeline and megakernel switches.
    fn plan(&self) -> Result<FusionPlan, PageError> {
        let model = self.loaded()?;
        let plan = crate::model::Plan::new(&model, &self.ctx, self.pipeline, self.megakernel);
        Ok(FusionPlan::of(&plan, &model, &self.ctx))
    }

    fn loaded(&self) -> Result<Arc<Model>, PageError> {
        self.model
            .clone()
            .ok_or_else(|| PageError::invalid_request("no model loaded"))
    }

    /// The generation session (made on first use, with the page's switches).
    fn session(&mut self, model: &Arc<Model>) -> &mut Session {
        let session = self.session.get_or_insert_with(|| {
            Session::new(&self.ctx, model, self.context, LogitsFor::LastToken)
        });
        session.pipeline = self.pipeline;
        session.megakernel = self.megakernel;
        session
    }

    /// Weights + KV cache + activations, as allocated.
    fn gpu_bytes(&self) -> u64 {
        let Some(model) = &self.model else { return 0 };
        let c = &model.config;
        let session = self.session.as_ref().map_or(0, |s| {
            c.kv_cache_bytes(s.kv.context) + Scratch::bytes_for(c, PREFILL_CHUNK, 1)
        });
        model.weight_bytes + session
    }

    /// Prefills what isn't cached yet of `ids`, then samples; shared by completion and chat.
    async fn run(
        &mut self,
        model: &Arc<Model>,
        ids: Vec<u32>,
        options: &GenerateOptions,
        on_token: &js_sys::Function,
    ) -> PageResult<GenerationStats> {
        if ids.is_empty() {
            return Err(throw(PageError::invalid_request(
                "the prompt encodes to no tokens",
            )));
        }
        if let Some(lost) = self.ctx.lost() {
            return Err(throw(PageError::lost(&lost)));
        }
        let session = self.session(model);
        let reused = session.keep_common_prefix(&ids);
        session.stats = Default::default();
        let room = session.kv.context.saturating_sub(ids.len() as u32);
        if room == 0 {
            session.reset();
            let context = session.kv.context;
            return Err(throw(
                PageError::invalid_request(format!(
                    "the prompt ({} tokens) fills the whole context ({context} positions)",
                    ids.len(),
                ))
                .with("prompt_tokens", ids.len() as f64)
                .with("context", context),
            ));
        }
        let max_tokens = api::whole(options.max_tokens, 128).min(room);
        let sampler = options.sampler();
        session.cpu_sampling = options.cpu_sampling.unwrap_or(false);
        let mut decoder = model.tokenizer.stream_decoder().continuing();
        let mut callback_error = None;
        let result = session
            .generate(&ids[reused..], max_tokens, &sampler, &mut |id| {
                let piece = decoder.push(id);
                match on_token.call2(&JsValue::NULL, &piece.into(), &id.into()) {
                    Ok(v) => v.as_bool() != Some(false),
                    Err(e) => {
                        callback_error = Some(e);
                        false
                    }
                }
            })
            .await;
        let generated = match result {
            Ok(g) => g,
            Err(e) => {
                // A failed step leaves the cache in an unknown state: start over next time.
                session.reset();
                // A destroyed device fails the readback before its `lost` promise resolves;
                // give the browser a turn so the error can say what really happened.
                settle().await;
                return Err(throw(PageError::from(e).or_lost(self.ctx.lost())));
            }
        };
        let tail = decoder.flush();
        if !tail.is_empty() {
            let _ = on_token.call2(&JsValue::NULL, &tail.into(), &JsValue::NULL);
        }
        if let Some(e) = callback_error {
            // The page's own callback threw: hand its exception back as it is.
            return Err(e);
        }
        let text = model.tokenizer.decode(&generated);
        Ok(GenerationStats::of(
            &session.stats,
            ids.len(),
            reused,
            text,
            generated,
        ))
    }
}

fn render_chat(model: &Model, messages: &[ChatMessage]) -> Result<String, PageError> {
    let not_yet = |m: String| PageError::new(super::error::ErrorKind::NotYet, m);
    let template =
        match &model.chat_template {
            None => return Err(not_yet(
                "not yet: this GGUF has no chat template (it is a base model); use completion mode"
                    .into(),
            )),
            Some(Err(e)) => {
                return Err(not_yet(format!(
                    "not yet: this GGUF's chat template does not compile here: {e}"
                )))
            }
            Some(Ok(t)) => t,
        };
    let messages: Vec<Message> = messages
        .iter()
        .map(|m| Message::new(m.role.clone(), m.content.clone()))
        .collect();
    Ok(template.render(&messages, true)?)
}
