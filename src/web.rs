//! The wasm API the page calls (contract: `www/API.md`). This is the only file that touches
//! `JsValue`: everything below it is the same engine the CLI drives. Results cross the
//! boundary as JSON built here and parsed into plain JS objects; errors are thrown as JS
//! `Error`s with the engine's message.
//!
//! One `Coco` owns the device. A model streams in through `load_begin` / `load_push` /
//! `load_finish` (chunks straight from `fetch()`, never the whole file in the wasm heap),
//! and generation runs in a `Session` kept across calls so chat turns reuse the KV cache.

use std::cell::RefCell;
use std::sync::Arc;

use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::bench::{self, BenchConfig};
use crate::capabilities::{self, Report, Status};
use crate::chat::Message;
use crate::engine::{summarize_types, Loader, LogitsFor, Model, Scratch, Session, PREFILL_CHUNK};
use crate::gguf::{Header, Parser};
use crate::gpu::{GpuContext, GpuError};
use crate::model::{Config, Pipeline};
use crate::sampler::SamplerConfig;
use crate::util::Clock;

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
}

fn js_err(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

fn to_js(value: Json) -> JsValue {
    js_sys::JSON::parse(&value.to_string()).unwrap_or(JsValue::NULL)
}

fn from_js(value: &JsValue) -> Json {
    if value.is_undefined() || value.is_null() {
        return Json::Null;
    }
    js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Json::Null)
}

/// Resolves after a short timer, letting the browser run callbacks that are already due.
async fn settle() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        let global = js_sys::global();
        let set_timeout = js_sys::Reflect::get(&global, &"setTimeout".into())
            .ok()
            .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
        let _ = match set_timeout {
            Some(f) => f.call2(&global, &resolve, &JsValue::from(20)),
            None => resolve.call0(&JsValue::NULL),
        };
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
/// it gets a clear "busy" error instead of wasm-bindgen's aliasing exception.
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
    /// `model_json` of the loaded model's header.
    model_info: Json,
    session: Option<Session>,
    /// KV-cache positions for sessions (set at `load_begin`).
    context: u32,
    pipeline: Pipeline,
    /// The FFN megakernel switch, kept for sessions made after the check passed.
    megakernel: bool,
}

#[wasm_bindgen]
impl Coco {
    /// Opens the WebGPU adapter and device.
    pub async fn open() -> Result<Coco, JsError> {
        let gpu = js_sys::Reflect::get(&js_sys::global(), &"navigator".into())
            .and_then(|nav| js_sys::Reflect::get(&nav, &"gpu".into()))
            .unwrap_or(JsValue::UNDEFINED);
        if gpu.is_undefined() || gpu.is_null() {
            return Err(JsError::new(
                "no WebGPU: this browser does not expose navigator.gpu",
            ));
        }
        let ctx = GpuContext::new()
            .await
            .map_err(|e| JsError::new(&format!("no WebGPU: {e}")))?;
        let ctx = Arc::new(ctx);
        let state = State {
            ctx: ctx.clone(),
            inspecting: None,
            pending: None,
            refused_report: None,
            model: None,
            model_info: Json::Null,
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
    pub fn adapter(&self) -> JsValue {
        let ctx = &self.ctx;
        let l = &ctx.limits;
        to_js(json!({
            "description": ctx.describe(),
            "name": ctx.info.name,
            "vendor": ctx.info.vendor,
            "driver": ctx.info.driver,
            "driver_info": ctx.info.driver_info,
            "device_type": format!("{:?}", ctx.info.device_type),
            "backend": format!("{:?}", ctx.info.backend),
            "fallback": ctx.info.device_type == wgpu::DeviceType::Cpu,
            "shader_f16": ctx.has_f16(),
            // coco's arithmetic is f32 everywhere; f16 weights are unpacked from pairs.
            "f16_used": false,
            "subgroups": ctx.has_subgroups(),
            "timestamp_query": ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY),
            "limits": {
                "max_storage_binding": l.max_storage_buffer_binding_size,
                "max_buffer": l.max_buffer_size,
                "max_invocations": l.max_compute_invocations_per_workgroup,
                "workgroup_storage": l.max_compute_workgroup_storage_size,
            },
        }))
    }

    /// wasm heap and GPU memory in use (`gpu_bytes` is null while a call holds the engine).
    pub fn memory(&self) -> JsValue {
        let wasm = wasm_memory_bytes();
        let r = self.ctx.resource_counts();
        let gpu = self.state.try_borrow().ok().map(|s| s.gpu_bytes());
        to_js(json!({
            "wasm_bytes": wasm,
            "wasm_peak_bytes": wasm,
            "gpu_bytes": gpu,
            "gpu_buffers_created": r.buffers_created,
            "bind_groups": r.bind_groups,
            "pipelines": r.pipelines,
        }))
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
    ) -> Result<JsValue, JsError> {
        Ok(self.state()?.inspect(bytes, offset, context, file_len))
    }

    pub fn load_begin(&self, context: u32, expected_len: Option<f64>) -> Result<(), JsError> {
        self.state()?.load_begin(context, expected_len);
        Ok(())
    }

    pub fn load_push(&self, chunk: &[u8]) -> Result<JsValue, JsError> {
        self.state()?.load_push(chunk)
    }

    pub fn load_report(&self) -> Result<JsValue, JsError> {
        Ok(self.state()?.load_report())
    }

    pub fn load_finish(&self) -> Result<JsValue, JsError> {
        self.state()?.load_finish()
    }

    pub fn load_cancel(&self) -> Result<(), JsError> {
        self.state()?.load_cancel();
        Ok(())
    }

    pub fn unload(&self) -> Result<(), JsError> {
        self.state()?.unload();
        Ok(())
    }

    pub fn set_pipeline(&self, name: &str) -> Result<(), JsError> {
        self.state()?.set_pipeline(name)
    }

    pub async fn set_megakernel(&self, on: bool) -> Result<JsValue, JsError> {
        let mut state = self.state()?;
        state.set_megakernel(on).await
    }

    pub async fn generate(
        &self,
        prompt: String,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let mut state = self.state()?;
        state.generate(prompt, options, on_token).await
    }

    pub async fn chat(
        &self,
        messages: JsValue,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let mut state = self.state()?;
        state.chat(messages, options, on_token).await
    }

    pub fn render_chat(&self, messages: JsValue) -> Result<String, JsError> {
        self.state()?.render_chat(messages)
    }

    pub fn reset(&self) -> Result<(), JsError> {
        self.state()?.reset();
        Ok(())
    }

    pub async fn bench(&self, options: JsValue) -> Result<JsValue, JsError> {
        let mut state = self.state()?;
        state.bench(options).await
    }

    pub async fn profile(&self, tokens: u32) -> Result<JsValue, JsError> {
        let mut state = self.state()?;
        state.profile(tokens).await
    }
}

impl Coco {
    fn state(&self) -> Result<std::cell::RefMut<'_, State>, JsError> {
        self.state.try_borrow_mut().map_err(|_| {
            JsError::new("busy: the engine is still running the previous call (stop it first)")
        })
    }
}

/// The engine state's operations; `Coco` forwards to them (docs in www/API.md).
impl State {
    /// The header probe before the bulk download. `bytes` are the file's bytes from offset
    /// `offset` on (0 starts a new probe); the page passes each newly read piece once, so the
    /// wasm heap holds one piece, not the growing prefix.
    pub fn inspect(
        &mut self,
        bytes: &[u8],
        offset: f64,
        context: u32,
        file_len: Option<f64>,
    ) -> JsValue {
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
            return to_js(json!({
                "status": "invalid",
                "error": format!("header bytes from {offset} given, but only {seen} were read"),
            }));
        }
        let skip = ((seen - offset) as usize).min(bytes.len());
        if let Err(e) = parser.push(&bytes[skip..], &mut |_| {}) {
            self.inspecting = None;
            return to_js(json!({ "status": "invalid", "error": e.to_string() }));
        }
        let end = offset + bytes.len() as u64;
        let Some(header) = parser.header() else {
            let need = (end * 2).max(1 << 20);
            return to_js(json!({ "status": "need_more", "need": need }));
        };
        let report = capabilities::check(header, &self.ctx.adapter_facts(), context);
        let status = if report.invalid().is_some() {
            "invalid"
        } else if report.is_ok() {
            "ok"
        } else {
            "not_yet"
        };
        let out = json!({
            "status": status,
            "error": report.invalid(),
            "report": report_json(&report),
            "model": model_json(header),
        });
        // The probe's parser holds the whole vocabulary; free it before the real load.
        self.inspecting = None;
        to_js(out)
    }

    /// Starts a streaming load (dropping any loaded model first, so its GPU memory is free).
    pub fn load_begin(&mut self, context: u32, expected_len: Option<f64>) {
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
    pub fn load_push(&mut self, chunk: &[u8]) -> Result<JsValue, JsError> {
        let pending = self
            .pending
            .as_mut()
            .ok_or_else(|| JsError::new("no load in progress (call load_begin first)"))?;
        pending.sha256.update(chunk);
        if let Err(e) = pending.loader.push(chunk) {
            self.refused_report = pending.loader.report().cloned();
            self.pending = None;
            return Err(js_err(e));
        }
        // WebGPU reports a failed allocation through the device's error event, a browser turn
        // after `createBuffer`. Checked here, it stops the load at the next chunk; otherwise it
        // would surface only at load_finish, after the whole file went into buffers that don't
        // exist (tests/e2e/gpu_limits.test.mjs).
        if let Err(e) = self.ctx.check_health() {
            let message = match e {
                GpuError::Validation(what) => {
                    gpu_load_error(&what, pending.loader.header(), &self.ctx)
                }
                other => other.to_string(),
            };
            self.pending = None;
            return Err(JsError::new(&message));
        }
        let p = pending.loader.progress();
        Ok(to_js(json!({
            "bytes_in": p.bytes_in,
            "bytes_total": p.bytes_total,
            "tensors_done": p.tensors_done,
            "tensors_total": p.tensors_total,
        })))
    }

    /// The capability report of the last refused load (a server without Range support means
    /// the page learns of a "not yet" only from the streaming load itself).
    pub fn load_report(&self) -> JsValue {
        self.refused_report
            .as_ref()
            .map_or(JsValue::NULL, |r| to_js(report_json(r)))
    }

    /// Ends the stream: every tensor must be complete.
    pub fn load_finish(&mut self) -> Result<JsValue, JsError> {
        let pending = self
            .pending
            .take()
            .ok_or_else(|| JsError::new("no load in progress"))?;
        let header_json = pending.loader.header().map(model_json);
        let (model, report) = pending.loader.finish().map_err(js_err)?;
        let report = report_json(&report);
        let sha256: String = pending
            .sha256
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        self.model = Some(Arc::new(model));
        self.model_info = header_json.unwrap_or(Json::Null);
        Ok(to_js(json!({
            "model": self.model_info,
            "report": report,
            "sha256": sha256,
            "load_seconds": pending.clock.seconds(),
        })))
    }

    pub fn load_cancel(&mut self) {
        self.pending = None;
    }

    /// Drops the model, its session and any load in progress.
    pub fn unload(&mut self) {
        self.session = None;
        self.megakernel = false;
        self.model = None;
        self.model_info = Json::Null;
        self.pending = None;
        self.inspecting = None;
    }

    pub fn set_pipeline(&mut self, name: &str) -> Result<(), JsError> {
        self.pipeline = match name {
            "fused" => Pipeline::Fused,
            "unfused" => Pipeline::Unfused,
            other => return Err(JsError::new(&format!("unknown pipeline {other:?}"))),
        };
        Ok(())
    }

    /// The FFN megakernel switch. Turning it on first runs its correctness check (both FFN
    /// paths on the same inputs); it stays off when the check fails.
    pub async fn set_megakernel(&mut self, on: bool) -> Result<JsValue, JsError> {
        let model = self.loaded()?;
        let session = self.session(&model);
        let check = session.set_megakernel(on).await.map_err(js_err)?;
        self.megakernel = session.megakernel;
        Ok(to_js(json!({
            "on": self.megakernel,
            "check": {
                "passed": check.passed,
                "max_abs": check.max_abs,
                "max_rel": check.max_rel,
                "rows": check.rows,
                "detail": check.detail,
            },
        })))
    }

    /// Completes `prompt` (BOS added as the model wants). `on_token(piece, id)` may return
    /// false to stop.
    pub async fn generate(
        &mut self,
        prompt: String,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let model = self.loaded()?;
        let ids = model.tokenizer.encode(&prompt, true, true);
        self.run(&model, ids, &from_js(&options), &on_token).await
    }

    /// Continues a conversation (`[{role, content}, …]`) formatted by the GGUF's chat template.
    /// Only what differs from the cached tokens is prefilled, so a new turn costs its own
    /// tokens, not the whole conversation's.
    pub async fn chat(
        &mut self,
        messages: JsValue,
        options: JsValue,
        on_token: js_sys::Function,
    ) -> Result<JsValue, JsError> {
        let model = self.loaded()?;
        let text = render_chat(&model, &from_js(&messages))?;
        // The template writes BOS itself where the model wants it (as HF's apply_chat_template).
        let ids = model.tokenizer.encode(&text, false, true);
        self.run(&model, ids, &from_js(&options), &on_token).await
    }

    /// The templated prompt text for `messages`, as `chat` would tokenize it.
    pub fn render_chat(&self, messages: JsValue) -> Result<String, JsError> {
        render_chat(&*self.loaded()?, &from_js(&messages))
    }

    /// Forgets the conversation: the next call prefills from position 0.
    pub fn reset(&mut self) {
        if let Some(s) = self.session.as_mut() {
            s.reset();
        }
    }

    /// `coco bench` on the loaded model: the same fields as `coco bench --json`.
    pub async fn bench(&mut self, options: JsValue) -> Result<JsValue, JsError> {
        let model = self.loaded()?;
        let o = from_js(&options);
        let cfg = BenchConfig {
            prompt_tokens: opt_u32(&o, "pp", 128).max(1),
            gen_tokens: opt_u32(&o, "tg", 32).max(1),
            reps: opt_u32(&o, "reps", 3).max(1),
            pipeline: self.pipeline,
        };
        // The benchmark makes its own sessions; free the chat's KV cache meanwhile.
        self.session = None;
        let cpu_sampling = opt_bool(&o, "cpu_sampling");
        let r = bench::run_with(&self.ctx, &model, &cfg, self.megakernel, cpu_sampling)
            .await
            .map_err(js_err)?;
        let name = self.model_info["name"].as_str().unwrap_or("").to_string();
        let mut out = r.to_json(&name, cfg.pipeline);
        // `coco bench --json` always has `profile` and `prefill_profile` (null without
        // --profile); the page's export must carry the same fields. Its per-kernel chart is
        // `profile` below.
        out["profile"] = Json::Null;
        out["prefill_profile"] = Json::Null;
        Ok(to_js(out))
    }

    /// One decode step kernel by kernel (timestamp queries, one pass per dispatch) after a
    /// prefill of `tokens` positions: `{kernels: [{label, calls, total_us}], …}`.
    pub async fn profile(&mut self, tokens: u32) -> Result<JsValue, JsError> {
        let model = self.loaded()?;
        let prompt = bench::bench_prompt(
            &model,
            tokens.clamp(1, self.context.saturating_sub(2).max(1)),
        );
        self.session = None;
        let p = bench::profile_step(
            &self.ctx,
            &model,
            &prompt,
            bench::ProfiledStep::Decode,
            self.pipeline,
            self.megakernel,
        )
        .await
        .map_err(js_err)?;
        Ok(to_js(p.to_json()))
    }

    fn loaded(&self) -> Result<Arc<Model>, JsError> {
        self.model
            .clone()
            .ok_or_else(|| JsError::new("no model loaded"))
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
        options: &Json,
        on_token: &js_sys::Function,
    ) -> Result<JsValue, JsError> {
        if ids.is_empty() {
            return Err(JsError::new("the prompt encodes to no tokens"));
        }
        if let Some(lost) = self.ctx.lost() {
            return Err(JsError::new(&format!("the GPU device was lost: {lost}")));
        }
        let session = self.session(model);
        let reused = session.keep_common_prefix(&ids);
        session.stats = Default::default();
        let room = session.kv.context.saturating_sub(ids.len() as u32);
        if room == 0 {
            session.reset();
            return Err(JsError::new(&format!(
                "the prompt ({} tokens) fills the whole context ({} positions)",
                ids.len(),
                session.kv.context
            )));
        }
        let max_tokens = opt_u32(options, "max_tokens", 128).min(room);
        let sampler = sampler_config(options);
        session.cpu_sampling = opt_bool(options, "cpu_sampling");
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
                return Err(match self.ctx.lost() {
                    Some(lost) => JsError::new(&format!("the GPU device was lost: {lost}")),
                    None => js_err(e),
                });
            }
        };
        let tail = decoder.flush();
        if !tail.is_empty() {
            let _ = on_token.call2(&JsValue::NULL, &tail.into(), &JsValue::NULL);
        }
        if let Some(e) = callback_error {
            return Err(JsError::new(&format!(
                "on_token threw: {}",
                js_sys::JSON::stringify(&e)
                    .ok()
                    .and_then(|s| s.as_string())
                    .unwrap_or_default()
            )));
        }
        let s = &session.stats;
        let prefilled = ids.len() - reused;
        Ok(to_js(json!({
            "prompt_tokens": ids.len(),
            "reused_tokens": reused,
            "generated_tokens": generated.len(),
            "prefill_tok_s": prefilled as f64 / s.prefill_seconds.max(1e-9),
            "decode_tok_s": s.decode_tok_s(),
            "ms_per_token": 1000.0 / s.decode_tok_s().max(1e-9),
            "dispatches_per_token": s.dispatches_per_token,
            // Every setting samples on the GPU, K steps per submit, unless `cpu_sampling`.
            "sampler_on_gpu": s.sampler_on_gpu,
            "steps_per_submit": s.steps_per_submit,
            "stop": s.stop.as_str(),
            "text": model.tokenizer.decode(&generated),
            "ids": generated,
        })))
    }
}

/// A GPU error while the weights load (wgpu's uncaptured error: "Out of Memory" or a
/// validation message), with the sizes that explain it.
fn gpu_load_error(error: &str, header: Option<&Header>, ctx: &GpuContext) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let sizes = header
        .and_then(|h| {
            let largest = h.tensors.iter().max_by_key(|t| t.n_bytes)?;
            Some(format!(
                "{} of weights in {} tensors, the largest `{}` {}; this adapter's limit per buffer is {}",
                mib(h.total_tensor_bytes()),
                h.tensors.len(),
                largest.name,
                mib(largest.n_bytes),
                mib(ctx.max_binding_bytes()),
            ))
        })
        .unwrap_or_else(|| "no header yet".into());
    if error.to_ascii_lowercase().contains("out of memory") {
        format!(
            "out of GPU memory: the GPU could not allocate this model's weights ({sizes}); \
             they are within the adapter's limits, but it could not provide that much. \
             The download was stopped. ({error})"
        )
    } else {
        format!("the GPU refused this model's weights ({sizes}): {error}")
    }
}

fn render_chat(model: &Model, messages: &Json) -> Result<String, JsError> {
    let template =
        match &model.chat_template {
            None => return Err(JsError::new(
                "not yet: this GGUF has no chat template (it is a base model); use completion mode",
            )),
            Some(Err(e)) => {
                return Err(JsError::new(&format!(
                    "not yet: this GGUF's chat template does not compile here: {e}"
                )))
            }
            Some(Ok(t)) => t,
        };
    let messages: Vec<Message> = messages
        .as_array()
        .ok_or_else(|| JsError::new("messages must be an array of {role, content}"))?
        .iter()
        .map(|m| {
            let field = |k: &str| m.get(k).and_then(Json::as_str).map(str::to_string);
            match (field("role"), field("content")) {
                (Some(role), Some(content)) => Ok(Message::new(role, content)),
                _ => Err(JsError::new("each message needs a string role and content")),
            }
        })
        .collect::<Result<_, _>>()?;
    template.render(&messages, true).map_err(js_err)
}

fn opt_u32(o: &Json, key: &str, default: u32) -> u32 {
    o.get(key)
        .and_then(Json::as_f64)
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map_or(default, |v| v.min(u32::MAX as f64) as u32)
}

fn opt_bool(o: &Json, key: &str) -> bool {
    o.get(key).and_then(Json::as_bool).unwrap_or(false)
}

fn opt_f32(o: &Json, key: &str, default: f32) -> f32 {
    o.get(key)
        .and_then(Json::as_f64)
        .filter(|v| v.is_finite())
        .map_or(default, |v| v as f32)
}

/// Sampling options from the page; anything missing keeps `SamplerConfig`'s default.
fn sampler_config(o: &Json) -> SamplerConfig {
    let d = SamplerConfig::default();
    SamplerConfig {
        temperature: opt_f32(o, "temperature", d.temperature).max(0.0),
        top_k: opt_u32(o, "top_k", d.top_k),
        top_p: opt_f32(o, "top_p", d.top_p).clamp(0.0, 1.0),
        min_p: opt_f32(o, "min_p", d.min_p).clamp(0.0, 1.0),
        repeat_penalty: opt_f32(o, "repeat_penalty", d.repeat_penalty).max(0.0),
        repeat_last_n: opt_u32(o, "repeat_last_n", d.repeat_last_n),
        seed: o
            .get("seed")
            .and_then(Json::as_f64)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map_or(d.seed, |v| v as u64),
    }
}

fn report_json(report: &Report) -> Json {
    let rows: Vec<Json> = report
        .rows
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "status": match r.status {
                    Status::Ok => "ok",
                    Status::Note => "note",
                    Status::NotYet => "not_yet",
                    Status::Invalid => "invalid",
                },
                "detail": r.detail,
            })
        })
        .collect();
    json!({ "rows": rows, "gpu_bytes": report.gpu_bytes })
}

/// What the page shows about a file before and after loading it.
fn model_json(header: &Header) -> Json {
    let meta = &header.metadata;
    let config = Config::from_gguf(header).ok();
    json!({
        "arch": meta.str("general.architecture").unwrap_or("?"),
        "name": meta.str("general.name").ok(),
        "layers": config.as_ref().map(|c| c.n_layers),
        "dim": config.as_ref().map(|c| c.dim),
        "heads": config.as_ref().map(|c| c.n_heads),
        "kv_heads": config.as_ref().map(|c| c.n_kv_heads),
        "head_dim": config.as_ref().map(|c| c.head_dim),
        "ffn": config.as_ref().map(|c| c.ffn_dim),
        "vocab": config.as_ref().map(|c| c.vocab_size),
        "context_length": config.as_ref().map(|c| c.context_length),
        "weight_bytes": header.total_tensor_bytes(),
        "data_end": header.data_end(),
        "types": summarize_types(header),
        "tensors": header.tensors.len(),
        "chat_template": meta.contains(crate::chat::KEY_CHAT_TEMPLATE),
    })
}
