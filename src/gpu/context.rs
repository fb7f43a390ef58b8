//! Adapter/device setup and the device-facing helpers (pipelines, buffers, readback).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::cache::{BindGroupCache, Kernel, KernelCache};
use super::features::{AttentionMerge, DeviceOptions, GemmChoice, SubgroupDecision, WideTile};
use super::recorder::Binding;

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    #[error("WGPU_ADAPTER_NAME={0:?} matches no adapter; available: {1}")]
    AdapterNameNotFound(String, String),
    #[error("could not open the GPU device: {0}")]
    RequestDevice(String),
    /// A setting (a link's or an environment variable's) this device can't run, named so the
    /// page can say which one instead of "no usable GPU".
    #[error("{why}")]
    Unsupported { setting: &'static str, why: String },
    #[error("GPU buffer readback failed: {0}")]
    Readback(String),
    #[error("dispatch `{label}`: {why}")]
    Dispatch { label: String, why: String },
    /// The device could not allocate (wgpu's `Error::OutOfMemory`).
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    #[error("GPU validation error: {0}")]
    Validation(String),
    #[error("the GPU device was lost: {0}")]
    Lost(String),
}

/// What the device reported asynchronously: the first uncaptured error (out of memory, a
/// validation failure) and the device-lost message. wgpu's default handler panics on an
/// uncaptured error; coco records it and turns it into a typed error at the next check.
#[derive(Default, Debug)]
struct Faults {
    error: Option<GpuError>,
    lost: Option<String>,
}

/// The adapter, device and queue, plus what coco needs to know about them.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: wgpu::AdapterInfo,
    /// The limits the device was opened with (the adapter's own, so nothing is left on the table).
    pub limits: wgpu::Limits,
    /// Optional features we asked for and got: SHADER_F16, SUBGROUP, TIMESTAMP_QUERY, and
    /// EXPERIMENTAL_COOPERATIVE_MATRIX where coco's GEMM can use it.
    pub features: wgpu::Features,
    /// What the adapter offers for tensor-core style matrix work through wgpu (its
    /// experimental cooperative-matrix feature), in words; `coco -v` prints it so a benchmark
    /// run records what the hardware allows.
    pub cooperative_matrix: String,
    /// The cooperative-matrix block (8 or 16) coco's prefill GEMM multiplies here, where it
    /// runs (`coop_gemm_block`).
    pub coop_block: Option<u32>,
    /// Whether the subgroup kernels run and why (in the browser coco requests the feature
    /// itself: `features.rs`).
    pub subgroups: SubgroupDecision,
    /// Whether prefill multiplies on the browser's int8 subgroup matrices
    /// (`MatmulVariant::MatrixI8`): granted with coco's configuration
    /// (`BrowserGrant::int8_matrix`), the subgroup kernels in use, [`MATRIX_I8_WORKGROUP_BYTES`]
    /// of workgroup memory, and asked for (`GemmChoice::Matrix`: opt-in until it has run on a
    /// real GPU). Never natively (wgpu's cooperative matrices are `coop_block`'s).
    pub subgroup_matrix_i8: bool,
    /// Who merges flash-decoding's key ranges (the caller's choice; one dispatch by default).
    pub attention_merge: AttentionMerge,
    /// Decode batches the GPU loop keeps submitted and unread, 1..=`MAX_BATCHES_IN_FLIGHT`
    /// (the caller's choice; `DEFAULT_BATCHES_IN_FLIGHT` by default).
    pub batches_in_flight: u32,
    /// Which portable GEMM prefill runs (the caller's choice; by product by default).
    pub gemm: GemmChoice,
    /// The single-pass attention's 2 × 2 score blocks and larger tiles (the caller's choice;
    /// off by default: `DeviceOptions::attention_blocked`).
    pub attention_blocked: bool,
    kernels: Mutex<KernelCache>,
    /// Bind group layouts by their entries ([`GpuContext::shared_layout`]).
    layouts: Mutex<HashMap<Vec<wgpu::BindGroupLayoutEntry>, wgpu::BindGroupLayout>>,
    /// One grow-only uniform buffer for every step's dispatch parameters. Rewriting it with
    /// `queue.write_buffer` before each submit is safe: writes and submits are ordered on the
    /// queue timeline, so earlier steps still see their own values.
    params: Mutex<Option<wgpu::Buffer>>,
    /// Held from the parameter write to the submit, so threads sharing this context can't
    /// overwrite each other's parameters in between.
    pub(crate) submit_lock: Mutex<()>,
    bind_groups: Mutex<BindGroupCache>,
    /// Reusable MAP_READ staging buffers by size.
    staging: Mutex<HashMap<u64, wgpu::Buffer>>,
    /// Zero-initialised scratch buffers kernels share across dispatches, by name
    /// ([`GpuContext::shared_scratch`]).
    scratch: Mutex<HashMap<&'static str, wgpu::Buffer>>,
    faults: Arc<Mutex<Faults>>,
    /// Buffers created so far (every buffer coco makes goes through this context). A steady
    /// decode loop must leave it unchanged: the soak tests check that.
    buffers_created: std::sync::atomic::AtomicU64,
}

/// Resource counters for leak checks (soak tests, the page's memory readout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResourceCounts {
    pub buffers_created: u64,
    /// Compiled pipelines (labels with the same WGSL share one).
    pub pipelines: usize,
    pub bind_groups: usize,
    pub readback_buffers: usize,
}

/// Features coco uses when present; none is required. (SUBGROUP_BARRIER: the short-step
/// tensor-core tiles, `COCO_COOP_STREAM=1`.)
const WANTED_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::TIMESTAMP_QUERY);

/// The adapter's cooperative-matrix offer as wgpu reports it: whether the experimental
/// feature is there, and each (M×N×K, A/B type → C type) configuration wgpu accepts (wgpu 30
/// keeps only subgroup-scoped 8- and 16-sized ones).
fn describe_cooperative_matrix(adapter: &wgpu::Adapter) -> String {
    let feature = adapter
        .features()
        .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let configs: Vec<String> = adapter
        .cooperative_matrix_properties()
        .iter()
        .map(|c| {
            format!(
                "{}x{}x{} {:?}->{:?}",
                c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type
            )
        })
        .collect();
    format!(
        "feature {} | {} configuration(s){}{}",
        if feature { "offered" } else { "not offered" },
        configs.len(),
        if configs.is_empty() { "" } else { ": " },
        configs.join(", ")
    )
}

/// Workgroup memory of the larger cooperative-matrix GEMM (`matmul/gemm_coop.wgsl`): padded
/// f16 tiles of W and x' (10 KiB each), 8 KiB of per-subgroup output blocks and, with
/// RMSNorm, 2 KiB of sums, and 0.5 KiB of per-token scales: 30.5 KiB (`TILED_COOP` needs
/// 25). The double-buffered tiles with x' prestaged may need more
/// (`MatmulKey::prestage_workgroup_bytes`).
pub const COOP_GEMM_WORKGROUP_BYTES: u32 = 32 * 1024;

/// Workgroup memory of the browser's int8 subgroup-matrix GEMM
/// (`matmul/gemm_matrix_i8.wgsl`): three 3 KiB level tiles, 16 KiB of per-subgroup i32 sums,
/// 3 KiB of scales and partial sums: 28 KiB.
pub const MATRIX_I8_WORKGROUP_BYTES: u32 = 28 * 1024;

/// The square cooperative-matrix block coco's prefill GEMM multiplies on `adapter`, if it
/// runs there: by default where wgpu offers its experimental feature with f16 × f16 → f32
/// blocks of 16 on subgroups of exactly 32 (tensor cores: NVIDIA) or blocks of 8 on subgroups
/// of exactly 8 (Mesa's lavapipe from 26, which lets the tests run the kernels on a CPU), the
/// adapter has SHADER_F16 and SUBGROUP and [`COOP_GEMM_WORKGROUP_BYTES`] of workgroup memory.
/// The kernels deal the tile's blocks to its 256 / subgroup-size subgroups, so the block and
/// the subgroup size go together (`shaders/matmul/coop_staging.wgsl`: CB, SGS).
/// `COCO_COOPMAT=0` turns it off (the portable tiles, the browser's path).
///
/// Its numerics are those of llama.cpp's tensor-core path: W and x' rounded to f16, sums in
/// f32. Only steps of more than the matvec's tokens (25+) run it; decode and short prompts
/// stay on the f32 / int8 matvec. Against HF's logits it moves the fixtures' teacher-forced
/// logits by 0.4e-3 … 3.2e-3 of their scale (0.017 … 0.08 on the H200's tensor cores, 0.27 on
/// phi3-q4_k in the portable tiles' emulation, `COCO_GEMM_F16_OPERANDS=1`), where the f32 tiles
/// stay within 1e-4; `tests/model.rs` states the f16 bounds it holds such runs to
/// (BENCHMARKS.md "session 25"). Activations past f16's range are staged scaled per token
/// (`gemm_coop.wgsl`).
fn coop_gemm_block(adapter: &wgpu::Adapter) -> Option<u32> {
    if std::env::var("COCO_COOPMAT").is_ok_and(|v| v == "0") {
        return None;
    }
    let needed = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    use wgpu::CooperativeScalarType as S;
    let info = adapter.get_info();
    if !adapter.features().contains(needed)
        || info.subgroup_min_size != info.subgroup_max_size
        || adapter.limits().max_compute_workgroup_storage_size < COOP_GEMM_WORKGROUP_BYTES
    {
        return None;
    }
    let block = match info.subgroup_min_size {
        32 => 16,
        8 => 8,
        _ => return None,
    };
    adapter
        .cooperative_matrix_properties()
        .iter()
        .any(|c| {
            (c.m_size, c.n_size, c.k_size, c.ab_type, c.cr_type)
                == (block, block, block, S::F16, S::F32)
        })
        .then_some(block)
}

/// The runtime checks naga adds to coco's kernels natively (the browser applies its own).
/// `COCO_SHADER_CHECKS=all` keeps wgpu's defaults; `loops` drops only the loop bounding;
/// `bounds` (the default) also drops the integer-division checks. Buffer bounds checks stay in
/// every mode (wgpu adds them only where the driver can't enforce them).
///
/// Loop bounding gives every loop a counter that is decremented and tested each trip, so a
/// loop the compiler can't prove finite can't hang the GPU; the integer-division checks wrap
/// every `/` and `%` by a runtime value. coco's loops all run to bounds the host computed and
/// checked, and its runtime divisors (`heads / kv_heads`, slots per workgroup, subgroups per
/// slot) are checked non-zero before a dispatch.
#[cfg(not(target_arch = "wasm32"))]
fn shader_checks() -> wgpu::ShaderRuntimeChecks {
    let mut checks = wgpu::ShaderRuntimeChecks::checked();
    match shader_checks_name() {
        "all" => {}
        "loops" => checks.force_loop_bounding = false,
        _ => {
            checks.force_loop_bounding = false;
            checks.int_div_checks = false;
        }
    }
    checks
}

/// Whether wgpu zeroes each workgroup's memory before its kernel starts (its default, and
/// WebGPU's rule). `COCO_WG_ZERO=0` turns it off natively: an A/B diagnostic of what the
/// zeroing costs per dispatch, not a setting, until every kernel is shown to write each
/// workgroup word before reading it.
fn zero_workgroup_memory() -> bool {
    cfg!(target_arch = "wasm32") || std::env::var("COCO_WG_ZERO").map_or(true, |v| v != "0")
}

/// With `COCO_DUMP_WGSL=<dir>`, every kernel's WGSL as compiled goes to `<dir>/<label>.wgsl`,
/// for `examples/pipeline_stats.rs` (the driver's registers, stack and shared memory per
/// kernel). A diagnostic: a file that can't be written is reported once per kernel and skipped.
#[cfg(not(target_arch = "wasm32"))]
fn dump_source(label: &str, source: &str) {
    let Some(dir) = std::env::var_os("COCO_DUMP_WGSL") else {
        return;
    };
    let name: String = label
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = std::path::Path::new(&dir).join(format!("{name}.wgsl"));
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| std::fs::write(&path, source)) {
        log::warn!("COCO_DUMP_WGSL: {}: {e}", path.display());
    }
}

/// The shaders' runtime checks as `COCO_SHADER_CHECKS` names them: `all`, `loops` (the
/// integer-division checks without loop bounding) or `off` (the default); `browser` in the
/// page, where the browser's WGSL compiler decides.
pub fn shader_checks_name() -> &'static str {
    if cfg!(target_arch = "wasm32") {
        return "browser";
    }
    match std::env::var("COCO_SHADER_CHECKS").as_deref() {
        Ok("all") => "all",
        Ok("loops") => "loops",
        _ => "off",
    }
}

/// Labels of the devices coco opens, unique per page so the browser's feature request
/// (`browser_features.js`) finds its own call.
static DEVICES_OPENED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl GpuContext {
    /// Opens the default adapter with the default options (subgroups where offered).
    pub async fn new() -> Result<GpuContext, GpuError> {
        Self::with_options(DeviceOptions::default()).await
    }

    /// Opens the default adapter. Natively `WGPU_BACKEND` picks the backend and
    /// `WGPU_ADAPTER_NAME` (substring, case-insensitive) picks the adapter.
    pub async fn with_options(options: DeviceOptions) -> Result<GpuContext, GpuError> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = Self::pick_adapter(&instance).await?;
        let info = adapter.get_info();
        let limits = adapter.limits();
        let mut features = adapter.features() & WANTED_FEATURES;
        if !options.wants_subgroups() {
            features.remove(wgpu::Features::SUBGROUP | wgpu::Features::SUBGROUP_BARRIER);
        }
        let label = format!(
            "coco-{}",
            DEVICES_OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        #[cfg(target_arch = "wasm32")]
        if options.wants_subgroups() {
            super::features::browser::ask_for_subgroups(&label, options.gemm == GemmChoice::Matrix);
        }
        #[cfg_attr(not(target_arch = "wasm32"), allow(unused_mut))]
        let mut cooperative_matrix = describe_cooperative_matrix(&adapter);
        let coop_block = coop_gemm_block(&adapter).filter(|_| options.wants_subgroups());
        let experimental_features = if coop_block.is_some() {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu asks for this opt-in because its experimental features may have
            // bugs that reach undefined behaviour. coco uses only the cooperative-matrix
            // feature, only in the prefill GEMMs, with the configuration the adapter
            // reported; they are checked against the CPU reference on the H200
            // (tests/kernels_matmul.rs) and against HF's logits (tests/model.rs);
            // COCO_COOPMAT=0 keeps them off.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some(&label),
                required_features: features,
                required_limits: limits.clone(),
                experimental_features,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| GpuError::RequestDevice(e.to_string()))?;
        #[cfg(not(target_arch = "wasm32"))]
        let subgroups = SubgroupDecision::native(
            options,
            features.contains(wgpu::Features::SUBGROUP),
            (info.subgroup_min_size, info.subgroup_max_size),
        );
        #[cfg(not(target_arch = "wasm32"))]
        let subgroup_matrix_i8 = false;
        #[cfg(target_arch = "wasm32")]
        let (subgroups, subgroup_matrix_i8) = {
            let grant = super::features::browser::granted(&label);
            super::features::set_packed_4x8_dot(grant.as_ref().is_some_and(|g| g.packed_4x8));
            let decision = SubgroupDecision::browser(
                options,
                grant.as_ref(),
                info.device_type == wgpu::DeviceType::Cpu,
            );
            // wgpu's own feature set never holds SUBGROUP here; coco's does when the browser
            // granted it, which is all that selects the subgroup kernels (wgpu's web backend
            // hands WGSL to the browser unparsed).
            if decision.used {
                features |= wgpu::Features::SUBGROUP;
            }
            let matrix_i8 = decision.used
                && options.gemm == GemmChoice::Matrix
                && limits.max_compute_workgroup_storage_size >= MATRIX_I8_WORKGROUP_BYTES
                && grant.as_ref().is_some_and(|g| g.int8_matrix());
            // wgpu's web backend knows no cooperative matrices; the browser's own offer is
            // what the report can say.
            if let Some(g) = &grant {
                cooperative_matrix = g.describe_matrices(
                    features.contains(wgpu::Features::SHADER_F16),
                    options.gemm == GemmChoice::Matrix,
                    matrix_i8,
                );
            }
            (decision, matrix_i8)
        };
        let faults = Arc::new(Mutex::new(Faults::default()));
        let sink = faults.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut f = sink.lock().unwrap_or_else(|p| p.into_inner());
            f.error.get_or_insert_with(|| match e {
                wgpu::Error::OutOfMemory { .. } => GpuError::OutOfMemory(e.to_string()),
                _ => GpuError::Validation(e.to_string()),
            });
        }));
        let sink = faults.clone();
        device.set_device_lost_callback(move |reason, message| {
            let mut f = sink.lock().unwrap_or_else(|p| p.into_inner());
            f.lost = Some(match reason {
                wgpu::DeviceLostReason::Destroyed if message.is_empty() => {
                    "device destroyed".into()
                }
                wgpu::DeviceLostReason::Destroyed => format!("device destroyed: {message}"),
                _ => message,
            });
        });
        if let GemmChoice::Force(w) = options.gemm {
            if w.half && !features.contains(wgpu::Features::SHADER_F16) {
                return Err(GpuError::Unsupported {
                    setting: "gemm",
                    why: format!(
                        "not yet: gemm={} (the wide tiles in f16) needs shader-f16, which this \
                         device lacks; gemm={} runs them in f32",
                        w.name(),
                        WideTile { half: false, ..w }.name()
                    ),
                });
            }
        }
        Ok(GpuContext {
            device,
            queue,
            info,
            limits,
            features,
            cooperative_matrix,
            coop_block,
            subgroups,
            subgroup_matrix_i8,
            attention_merge: options.attention_merge,
            batches_in_flight: options
                .batches_in_flight
                .unwrap_or(crate::model::DEFAULT_BATCHES_IN_FLIGHT)
                .clamp(1, crate::model::MAX_BATCHES_IN_FLIGHT),
            gemm: options.gemm,
            attention_blocked: options.attention_blocked,
            kernels: Mutex::default(),
            layouts: Mutex::default(),
            scratch: Mutex::new(HashMap::new()),
            params: Mutex::new(None),
            submit_lock: Mutex::new(()),
            bind_groups: Mutex::default(),
            staging: Mutex::new(HashMap::new()),
            faults,
            buffers_created: Default::default(),
        })
    }

    /// Blocking constructor for the CLI and tests.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking() -> Result<GpuContext, GpuError> {
        pollster::block_on(Self::with_options(DeviceOptions::from_env()))
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn pick_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, GpuError> {
        if let Ok(wanted) = std::env::var("WGPU_ADAPTER_NAME") {
            let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
            let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
            return adapters
                .into_iter()
                .find(|a| {
                    a.get_info()
                        .name
                        .to_lowercase()
                        .contains(&wanted.to_lowercase())
                })
                .ok_or_else(|| GpuError::AdapterNameNotFound(wanted, names.join(", ")));
        }
        Self::default_adapter(instance).await
    }

    #[cfg(target_arch = "wasm32")]
    async fn pick_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, GpuError> {
        Self::default_adapter(instance).await
    }

    async fn default_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, GpuError> {
        instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::NoAdapter(e.to_string()))
    }

    /// The device-lost message, once the device is gone.
    pub fn lost(&self) -> Option<String> {
        self.faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lost
            .clone()
    }

    /// Fails with the device-lost message or the first uncaptured GPU error since the last
    /// check (which it clears). Called after each step's readback and after a load.
    pub fn check_health(&self) -> Result<(), GpuError> {
        let mut f = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(lost) = &f.lost {
            return Err(GpuError::Lost(lost.clone()));
        }
        match f.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    pub fn has_f16(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_F16)
    }

    /// Whether the cooperative-matrix prefill GEMM runs here (see `coop_gemm_block`).
    pub fn has_coop_gemm(&self) -> bool {
        self.coop_block.is_some()
    }

    pub fn has_subgroups(&self) -> bool {
        self.features.contains(wgpu::Features::SUBGROUP)
    }

    /// Largest range one storage binding may cover, rounded down to 4 bytes.
    pub fn max_binding_bytes(&self) -> u64 {
        let limit = self.limits.max_storage_buffer_binding_size;
        limit.min(self.limits.max_buffer_size) & !3
    }

    /// What the capability check needs to know of this adapter.
    pub fn adapter_facts(&self) -> crate::capabilities::AdapterFacts {
        crate::capabilities::AdapterFacts {
            description: self.describe(),
            max_binding_bytes: self.max_binding_bytes(),
            max_buffer_bytes: self.limits.max_buffer_size,
            max_invocations_per_workgroup: self.limits.max_compute_invocations_per_workgroup,
            shader_f16: self.has_f16(),
            subgroups: self.has_subgroups(),
            storage_offset_alignment: self.limits.min_storage_buffer_offset_alignment,
        }
    }

    /// A one-line description: "NVIDIA H200 (Vulkan, DiscreteGpu)".
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?})",
            self.info.name, self.info.backend, self.info.device_type
        )
    }

    /// The kernel named `label`, compiled from `source()` on first use. The label names the
    /// variant (STYLE.md: `matmul_q4_k_tiled`), so it is the cache key; a label whose source
    /// another label already compiled shares that pipeline (`KernelCache`).
    pub fn pipeline(&self, label: &str, source: impl FnOnce() -> String) -> Arc<Kernel> {
        let mut cache = self.kernels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kernel) = cache.by_label(label) {
            return kernel;
        }
        let source = source();
        let id = super::cache::SourceId::of(&source);
        let kernel = Arc::new(match cache.by_source(id) {
            Some((pipeline, layout)) => Kernel {
                pipeline,
                label: label.to_string(),
                layout,
            },
            None => {
                let kernel = self.compile(label, source);
                cache.insert_source(id, &kernel);
                kernel
            }
        });
        cache.insert_label(kernel.clone());
        kernel
    }

    /// The kernel of the variant `key`: cached by the key itself, so a hit neither formats
    /// the label nor builds the defines. On a miss `make` gives (label, source), or the error
    /// that says why this variant can't be built; variants with one label share one kernel.
    pub fn keyed_pipeline<K, E>(
        &self,
        key: &K,
        make: impl FnOnce() -> Result<(String, String), E>,
    ) -> Result<Arc<Kernel>, E>
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    {
        self.by_key_or(key, || {
            let (label, source) = make()?;
            Ok(self.pipeline(&label, || source))
        })
    }

    /// The kernel cached for `key`, or the one `build` makes, cached.
    fn by_key_or<K, E>(
        &self,
        key: &K,
        build: impl FnOnce() -> Result<Arc<Kernel>, E>,
    ) -> Result<Arc<Kernel>, E>
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    {
        let cached = self
            .kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_key(key);
        if let Some(kernel) = cached {
            return Ok(kernel);
        }
        let kernel = build()?;
        self.kernels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert_key(key.clone(), kernel.clone());
        Ok(kernel)
    }

    /// The bind group layout of `entries`: one per distinct list, shared by every kernel that
    /// declares it, so a bind group made for one serves all of them (a product's tile variants,
    /// whose split counts change with the step's length, bind the same buffers).
    fn shared_layout(&self, entries: Vec<wgpu::BindGroupLayoutEntry>) -> wgpu::BindGroupLayout {
        let mut layouts = self.layouts.lock().unwrap_or_else(|p| p.into_inner());
        layouts
            .entry(entries)
            .or_insert_with_key(|entries| {
                self.device
                    .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                        label: None,
                        entries,
                    })
            })
            .clone()
    }

    /// Compiles `source`'s `main` in the binding layout its source declares
    /// ([`super::shader::declared_bindings`]), shared with every kernel that declares the same
    /// bindings ([`GpuContext::shared_layout`]). Not wgpu's automatic layout: that is one per
    /// pipeline (WebGPU makes no two compatible), so each kernel needed bind groups of its own.
    fn compile(&self, label: &str, source: String) -> Kernel {
        let layout = self.shared_layout(super::shader::declared_bindings(&source));
        #[cfg(not(target_arch = "wasm32"))]
        dump_source(label, &source);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        #[cfg(not(target_arch = "wasm32"))]
        // SAFETY: see `shader_checks`: every loop in coco's kernels is bounded by dispatch
        // parameters the host validated, and every runtime divisor is checked non-zero there.
        let module = unsafe {
            self.device
                .create_shader_module_trusted(desc, shader_checks())
        };
        #[cfg(target_arch = "wasm32")]
        let module = self.device.create_shader_module(desc);
        let pipeline_layout = self
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(label),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(label),
                layout: Some(&pipeline_layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: wgpu::PipelineCompilationOptions {
                    zero_initialize_workgroup_memory: zero_workgroup_memory(),
                    ..Default::default()
                },
                cache: None,
            });
        Kernel {
            layout,
            pipeline,
            label: label.to_string(),
        }
    }

    fn create_buffer(&self, desc: &wgpu::BufferDescriptor<'_>) -> wgpu::Buffer {
        self.buffers_created
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.device.create_buffer(desc)
    }

    pub fn resource_counts(&self) -> ResourceCounts {
        ResourceCounts {
            buffers_created: self
                .buffers_created
                .load(std::sync::atomic::Ordering::Relaxed),
            pipelines: self.pipeline_count(),
            bind_groups: self.cached_bind_groups(),
            readback_buffers: self.staging.lock().map(|s| s.len()).unwrap_or(0),
        }
    }

    pub fn pipeline_count(&self) -> usize {
        self.kernels.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// A buffer the host maps to read `size` bytes copied into it (counted like every
    /// buffer coco creates).
    pub fn readback_buffer(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (size.max(4) + 3) & !3,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    /// A zeroed storage buffer; `size` is rounded up to 4 bytes (wgpu's copy alignment).
    pub fn storage_buffer(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (size.max(4) + 3) & !3,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// The context's one scratch buffer named `name`, `bytes` long, created zeroed on first
    /// use. For kernels that leave it as they found it (the split matvec's arrival counters
    /// are back at 0 after each dispatch), or whose values live from one dispatch to the next
    /// only (the tensor-core GEMM's per-token scales), so every dispatch on this device may
    /// share it: dispatches that write it run one after another.
    pub fn shared_scratch(&self, name: &'static str, bytes: u64) -> wgpu::Buffer {
        let mut cache = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        cache
            .entry(name)
            .or_insert_with(|| self.storage_buffer(name, bytes))
            .clone()
    }

    /// As [`GpuContext::shared_scratch`], but grown to hold `bytes` (to the next power of two)
    /// when the one the context has is smaller; the bind groups of the smaller one are dropped
    /// with it. For scratch whose size follows the step (the tensor-core tiles' f16 x').
    pub fn shared_scratch_at_least(&self, name: &'static str, bytes: u64) -> wgpu::Buffer {
        let mut cache = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = cache.get(name) {
            if old.size() >= bytes {
                return old.clone();
            }
            let old = cache.remove(name).expect("just found");
            self.forget_bind_groups_using(&[&old]);
        }
        let size = bytes
            .next_power_of_two()
            .min(self.max_binding_bytes())
            .max(bytes);
        let buffer = self.storage_buffer(name, size);
        cache.insert(name, buffer.clone());
        buffer
    }

    /// A storage buffer holding `data` (padded with zeros to 4 bytes).
    pub fn storage_buffer_init(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        let buffer = self.storage_buffer(label, data.len() as u64);
        self.write_padded(&buffer, 0, data);
        buffer
    }

    /// `queue.write_buffer` that accepts any length: the tail is zero-padded to 4 bytes.
    /// `offset` must be a multiple of 4.
    pub fn write_padded(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        let whole = data.len() & !3;
        if whole > 0 {
            self.queue.write_buffer(buffer, offset, &data[..whole]);
        }
        if whole < data.len() {
            let mut tail = [0u8; 4];
            tail[..data.len() - whole].copy_from_slice(&data[whole..]);
            self.queue
                .write_buffer(buffer, offset + whole as u64, &tail);
        }
    }

    /// The shared parameter buffer, holding `data` from offset 0 (grown when too small).
    pub(crate) fn params_buffer(&self, data: &[u8]) -> wgpu::Buffer {
        let mut slot = self.params.lock().unwrap_or_else(|p| p.into_inner());
        let needed = (data.len().max(16) as u64 + 15) & !15;
        if slot.as_ref().is_none_or(|b| b.size() < needed) {
            // Grown buffers invalidate every cached bind group that pointed at the old one.
            self.clear_bind_groups();
            *slot = Some(self.create_buffer(&wgpu::BufferDescriptor {
                label: Some("params"),
                size: needed.next_power_of_two().max(1 << 16),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
        let buffer = slot.clone().expect("params buffer just ensured");
        self.write_padded(&buffer, 0, data);
        buffer
    }

    /// The bind group of each `(kernel, params block size, storage)`, in order, with the
    /// parameter blocks in `params_buffer`: cached, or created and cached (one lock for all).
    pub(crate) fn bind_groups<'b>(
        &self,
        params_buffer: &wgpu::Buffer,
        dispatches: impl Iterator<Item = (&'b Arc<Kernel>, u64, &'b [Binding])>,
    ) -> Vec<wgpu::BindGroup> {
        let mut cache = self.bind_groups.lock().unwrap_or_else(|p| p.into_inner());
        dispatches
            .map(|(kernel, params_size, storage)| {
                cache.get_or_create(
                    &self.device,
                    &kernel.layout,
                    params_buffer,
                    params_size,
                    storage,
                )
            })
            .collect()
    }

    /// Drops the cached bind groups that bind any of `buffers` (and with them their
    /// references to those buffers): what a session that ends calls with its own buffers, so
    /// the bind groups of the sessions still alive stay cached.
    pub fn forget_bind_groups_using(&self, buffers: &[&wgpu::Buffer]) {
        self.bind_groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .forget_using(buffers);
    }

    /// Drops every cached bind group (and with them the references they hold to buffers).
    pub fn clear_bind_groups(&self) {
        self.bind_groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    pub fn cached_bind_groups(&self) -> usize {
        self.bind_groups.lock().map(|c| c.len()).unwrap_or(0)
    }

    pub(crate) fn command_encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    /// Copies `size` bytes at `offset` of `buffer` back to the CPU.
    pub async fn read_buffer_async(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>, GpuError> {
        let size = (size + 3) & !3;
        let cached = self
            .staging
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&size);
        let staging = cached.unwrap_or_else(|| {
            self.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: size.max(4),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        let mut encoder = self.command_encoder("readback");
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        self.queue.submit([encoder.finish()]);
        let (sender, receiver) = futures_channel::oneshot::channel();
        staging
            .slice(..)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        // A lost device fails the poll and the map too; say so rather than "map failed".
        let failed = |why: String| self.check_health().err().unwrap_or(GpuError::Readback(why));
        #[cfg(not(target_arch = "wasm32"))]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| failed(e.to_string()))?;
        receiver
            .await
            .map_err(|_| failed("map callback dropped".into()))?
            .map_err(|e| failed(e.to_string()))?;
        let data = staging
            .slice(..)
            .get_mapped_range()
            .map_err(|e| GpuError::Readback(e.to_string()))?
            .to_vec();
        staging.unmap();
        let mut cache = self.staging.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() < 8 {
            cache.insert(size, staging);
        }
        Ok(data)
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_buffer(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>, GpuError> {
        pollster::block_on(self.read_buffer_async(buffer, offset, size))
    }

    /// Reads `count` f32 values starting at element `first`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn read_f32(
        &self,
        buffer: &wgpu::Buffer,
        first: u64,
        count: u64,
    ) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_buffer(buffer, first * 4, count * 4)?;
        Ok(bytes
            .chunks_exact(4)
            .take(count as usize)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}
