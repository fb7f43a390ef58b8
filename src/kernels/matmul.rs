//! `shaders/matmul.wgsl`: y[T, N] = x[T, K] · W[N, K]ᵀ (+ bias) (+ y), with W read as raw
//! GGUF blocks and dequantized in registers, and the fused forms a decode step uses to save
//! dependent dispatches (DESIGN.md "The pipeline"):
//! - [`matmul_normed`]: RMSNorm folded into the matmul that consumes it;
//! - [`matmul_glu`]: gate and up projections and the activation, optionally normed;
//! - [`matmul_qkv`]: the Q, K and V projections (+ biases), optionally normed.
//!
//! In a Llama layer, norm → Q, K, V (4 dispatches) becomes 1 and norm → gate, up → glu (4)
//! becomes 1: 6 fewer dependent dispatches per layer.
//!
//! Four shapes of the same product, picked by [`MatmulKey::choose`]:
//! - `matvec_wg256`: decode (T small); 256 invocations (SwiftShader's limit) = 8 slots × 32
//!   lanes, each lane taking every 32nd 8-element group of its row (coalesced reads),
//!   shared-memory reduction. What the browser runs.
//! - `matvec_sg256`: the same with `subgroupAdd`, when the device has SUBGROUP (native only:
//!   wgpu's WebGPU backend never enables it).
//! - `tiled64x64`: prefill; a 64-slot × 64-token tile per workgroup, each W chunk dequantized
//!   once into workgroup memory and reused by all 64 tokens.
//! - `coop64x64`: the same tiles multiplied on tensor cores with f16 cooperative matrices,
//!   where the native adapter offers them and `COCO_COOPMAT=1` asks for it (never in a
//!   browser).
//!
//! Every fused form exists in all four shapes, so it serves any T; only its speed, not its
//! dispatch count, depends on T.
//!
//! A weight split into parts (`GpuTensor::parts`) gets one dispatch per part, each writing its
//! rows' columns of y; [`matmul_glu`] pairs the gate's and up's parts (same shape, same split).
//! [`matmul_qkv`] needs single-part weights of one type and falls back to three
//! [`matmul_normed`] (or [`matmul`]) dispatches otherwise, or when its 7–11 storage bindings
//! exceed the device's per-stage limit (WebGPU's default is 8: Q/K/V with norm and biases
//! needs 11).

use crate::gguf::GgmlType;
use crate::gpu::{preprocess, Binding, GpuTensor, StepRecorder};

use super::elementwise::Activation;
use super::rope::RopeLayout;
use super::KernelError;

/// Matvec workgroups: MV_ROWS slots × MV_LANES lanes = 256 invocations (browsers allow no
/// more); 32 lanes per slot so that a 32-wide warp streams one row.
pub const MV_ROWS: u32 = 8;
pub const MV_LANES: u32 = 32;
/// The subgroup matvec's workgroup: SG_ROWS slots (its subgroups split each task's row
/// range when there are more subgroups than tasks, which puts more warps on small matrices).
pub const SG_ROWS: u32 = 8;
/// 8-element groups each lane of the subgroup matvec reads per loop trip (1 or 2; the
/// workgroup matvec's one-row loop always takes 2).
pub const MV_UNROLL: u32 = 1;
/// Rows per task of the subgroup matvec: its invocations load each group of x' once for
/// this many rows (BENCHMARKS.md "session 10").
pub const SG_ROWS_PER_TASK: u32 = 2;
/// The chunk matvec's slots per workgroup and rows per task: 16 × 4 measured best of
/// 8 × 2, 16 × 2, 16 × 4, 32 × 2 and 32 × 4 on the H200 (BENCHMARKS.md "session 13"); its
/// x' staging is repaid over more rows than the lane-per-8 matvec's 8.
pub const CHUNK_ROWS: u32 = 16;
pub const CHUNK_ROWS_PER_TASK: u32 = 4;
/// The chunk matvec runs the products with at least this K; shorter rows keep the lane-per-8
/// matvec, which measured faster on them (too few chunks per row to occupy a task's lanes;
/// BENCHMARKS.md "session 13").
pub const CHUNK_MIN_K: u64 = 2048;
/// Largest K whose x'[t] the subgroup matvec stages in workgroup memory (16 KiB of f32, the
/// least any WebGPU device offers; the device's own limit also applies).
pub const STAGE_MAX_K: u32 = 4096;
/// Largest x' tile (elements) the chunk matvec stages: 16 KiB of f32, the least any WebGPU
/// device offers; a longer K runs in tiles.
pub const CHUNK_TILE_MAX_K: u32 = 4096;

/// Which subgroup matvecs stage x'[t] in workgroup memory once per workgroup (`STAGE_X` in
/// matmul.wgsl) instead of each task reading it from global memory group by group. It takes
/// norm_w's loads, multiplies and the Σx² updates out of the row loop, but makes every
/// workgroup wait for x[t] and a barrier before its first weight load. It is built and
/// checked (lavapipe, in CI) but not yet timed on a GPU, so it stays off by default until
/// measured; `COCO_MATVEC=8x1x2x1` (or `x2`) turns it on for an A/B run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageX {
    Never,
    /// The RMSNorm-fused products (QKV, gate/up, LM head): they also drop norm_w's loads.
    Normed,
    /// Every product whose K fits.
    All,
}

/// The subgroup matvec's shape: slots per workgroup, 8-element groups per loop trip, rows
/// per task, and whether lanes take 32-element chunks ([`MatmulVariant::MatvecChunk`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecShape {
    pub rows: u32,
    pub unroll: u32,
    pub rows_per_task: u32,
    pub stage_x: StageX,
    pub chunk: bool,
}

impl MatvecShape {
    pub const DEFAULT: MatvecShape = MatvecShape {
        rows: SG_ROWS,
        unroll: MV_UNROLL,
        rows_per_task: SG_ROWS_PER_TASK,
        stage_x: StageX::Never,
        chunk: true,
    };

    /// `<rows>x<unroll>[x<rows per task>[x<stage>[x<chunk>]]]`, e.g. `8x2x4`, `8x1x2x0` or
    /// `16x1x2x0x1` (chunk 1: the chunk matvec, which always stages x'). Rows a power
    /// of two in 2..=64, unroll 1 or 2, rows per task a power of two up to 8 (each row holds
    /// registers in every invocation; 8 already measured far slower) and at most rows / 2 (a
    /// GLU task must lie wholly in the gate or the up half of a workgroup's slots); stage 0
    /// (never), 1 (normed products) or 2 (all), see [`StageX`]. Omitted fields: 1 row per
    /// task, the default staging.
    pub fn parse(v: &str) -> Option<MatvecShape> {
        let mut fields = v.split('x').map(|f| f.parse::<u32>().ok());
        let rows = fields.next()??;
        let unroll = fields.next()??;
        let rows_per_task = match fields.next() {
            None => 1,
            Some(f) => f?,
        };
        let stage_x = match fields.next() {
            None => Self::DEFAULT.stage_x,
            Some(Some(0)) => StageX::Never,
            Some(Some(1)) => StageX::Normed,
            Some(Some(2)) => StageX::All,
            Some(_) => return None,
        };
        let chunk = match fields.next() {
            None => Self::DEFAULT.chunk,
            Some(Some(c @ (0 | 1))) => c == 1,
            Some(_) => return None,
        };
        let valid = rows.is_power_of_two()
            && (2..=64).contains(&rows)
            && matches!(unroll, 1 | 2)
            && rows_per_task.is_power_of_two()
            && rows_per_task <= 8
            && rows_per_task <= rows / 2;
        (fields.next().is_none() && valid).then_some(MatvecShape {
            rows,
            unroll,
            rows_per_task,
            stage_x,
            chunk,
        })
    }
}

/// [`MatvecShape::DEFAULT`], or the tuning override `COCO_MATVEC` (see
/// [`MatvecShape::parse`]), read once per process: for measuring other shapes on a new GPU
/// without a rebuild. An invalid value is ignored with a warning.
pub fn matvec_shape() -> MatvecShape {
    static SHAPE: std::sync::OnceLock<MatvecShape> = std::sync::OnceLock::new();
    *SHAPE.get_or_init(|| {
        let Ok(v) = std::env::var("COCO_MATVEC") else {
            return MatvecShape::DEFAULT;
        };
        MatvecShape::parse(&v).unwrap_or_else(|| {
            log::warn!(
                "COCO_MATVEC={v:?} ignored: expected <rows>x<unroll>[x<rows per task>[x<stage>[x<chunk>]]], \
                 rows a power of two in 2..=64, unroll 1 or 2, rows per task a power of two up \
                 to min(8, rows / 2), stage 0, 1 or 2, chunk 0 or 1"
            );
            MatvecShape::DEFAULT
        })
    })
}

/// The tiled variant's output tile: W rows × tokens (the shader's 16×16 invocations each
/// own 4 rows × 4 tokens, and 4 threads stage each row and token, so these are fixed by its
/// thread layout).
pub const TILE_N: u32 = 64;
pub const TILE_T: u32 = 64;
/// Up to this many tokens the matvec (which reads W once per token) beats the tiled kernel
/// (which reads it once per 64 tokens but idles most of its tile).
pub const MATVEC_MAX_T: u32 = 3;

/// Which kernel shape computes the product.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum MatmulVariant {
    /// Matrix–vector, shared-memory reduction (every device; the browser path).
    MatvecWorkgroup,
    /// Matrix–vector, subgroup reduction (devices with `Features::SUBGROUP`).
    MatvecSubgroup,
    /// The subgroup matvec with a lane per 32-element chunk (16-byte weight loads) and x' in
    /// workgroup-memory tiles (`shaders/matmul/matvec_chunk.wgsl`).
    MatvecChunk,
    /// Matrix–vector, one invocation per row and no reduction: for CPU adapters without
    /// subgroups (SwiftShader, the browser's fallback adapter). There a workgroup barrier
    /// costs a switch of every invocation's fiber, and the shared-memory reduction made the
    /// LM head alone take ~4 s per token on a 32,000-row vocabulary; coalescing, which the
    /// lanes exist for, buys nothing on a CPU.
    MatvecRows,
    /// Tiled matrix–matrix (prefill).
    Tiled,
    /// The same tiles multiplied with f16 cooperative matrices (tensor cores), where the
    /// native adapter offers them and the user opted in (`GpuContext::has_coop_gemm`).
    TiledCoop,
}

impl MatmulVariant {
    fn define(self) -> &'static str {
        match self {
            Self::MatvecWorkgroup => "MATVEC_WG",
            Self::MatvecSubgroup => "MATVEC_SG",
            Self::MatvecChunk => "MATVEC_CHUNK",
            // The workgroup kernel with one lane per slot: its reduction loop is empty.
            Self::MatvecRows => "MATVEC_WG",
            Self::Tiled => "TILED",
            Self::TiledCoop => "TILED_COOP",
        }
    }

    pub(crate) fn is_tiled(self) -> bool {
        matches!(self, Self::Tiled | Self::TiledCoop)
    }

    fn label(self) -> String {
        match self {
            Self::MatvecWorkgroup => format!("matvec_wg{}", MV_ROWS * MV_LANES),
            Self::MatvecSubgroup => format!("matvec_sg{}", MV_ROWS * MV_LANES),
            Self::MatvecChunk => format!("matvec_chunk{}", MV_ROWS * MV_LANES),
            Self::MatvecRows => format!("matvec_rows{}", MV_ROWS * MV_LANES),
            Self::Tiled => format!("tiled{TILE_N}x{TILE_T}"),
            Self::TiledCoop => format!("coop{TILE_N}x{TILE_T}"),
        }
    }

    /// Slots (weight rows) per workgroup.
    fn slots_per_group(self) -> u32 {
        self.grid().0
    }

    /// (slots, lanes per slot) of a workgroup; 256 invocations for the matvecs.
    fn grid(self) -> (u32, u32) {
        match self {
            Self::Tiled | Self::TiledCoop => (TILE_N, 1),
            Self::MatvecRows => (MV_ROWS * MV_LANES, 1),
            Self::MatvecWorkgroup => (MV_ROWS, MV_LANES),
            // The shader deals lanes by subgroup size; MV_LANES is unused there.
            Self::MatvecSubgroup => (matvec_shape().rows, MV_LANES),
            Self::MatvecChunk => (CHUNK_ROWS, MV_LANES),
        }
    }
}

/// What one dispatch computes from its weights; each is its own binding layout.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Fusion {
    /// y (+)= x·Wᵀ (+ bias): one weight, one output.
    None,
    /// out = act(x·W_gateᵀ) ⊙ (x·W_upᵀ): two weights, one output.
    Glu(Activation),
    /// q, k, v = x·W_qᵀ, x·W_kᵀ, x·W_vᵀ (+ biases): three weights, three outputs.
    Qkv,
    /// Qkv, then RoPE on q and k and the KV-cache write: outputs q, the K cache and the V
    /// cache, plus an inv_freq binding (matvec shapes only; see `kernels::qkv_rope`).
    QkvRope(RopeLayout),
}

impl Fusion {
    fn weights(self) -> u32 {
        match self {
            Fusion::None => 1,
            Fusion::Glu(_) => 2,
            Fusion::Qkv | Fusion::QkvRope(_) => 3,
        }
    }

    fn outputs(self) -> u32 {
        match self {
            Fusion::Qkv | Fusion::QkvRope(_) => 3,
            _ => 1,
        }
    }
}

/// One compiled variant of `matmul.wgsl`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatmulKey {
    /// The weights' GGUF type: selects the dequantizer.
    pub ty: GgmlType,
    pub variant: MatmulVariant,
    /// A bias[N] binding per output (a binding-layout change).
    pub bias: bool,
    /// x is the raw residual and RMSNorm is applied in the kernel (binding norm_w[K]).
    pub norm: bool,
    pub fusion: Fusion,
    /// K when the subgroup matvec stages x'[t] in workgroup memory (the chunk matvec: the
    /// elements per staged tile), else 0: set by the launch from K, the device and
    /// [`MatvecShape::stage_x`] (see [`MatmulKey::staged`]).
    pub stage_k: u32,
}

/// Storage binding numbers of a [`MatmulKey`]'s layout: the order the host lists them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    x: u32,
    y: u32,
    norm: u32,
    bias: u32,
    rope: u32,
    /// Storage bindings in all.
    pub(super) count: u32,
}

impl MatmulKey {
    /// The unfused variant for `t` tokens on a device running `kernels`, unless `force`d
    /// (tests, A/B runs).
    pub fn choose(
        kernels: DeviceKernels,
        ty: GgmlType,
        t: u32,
        bias: bool,
        force: Option<MatmulVariant>,
    ) -> MatmulKey {
        // On a CPU adapter the tiled kernel's barriers cost more than reading W once per
        // token, so prefill stays on the row-per-invocation matvec there too.
        let matvec = kernels.matvec;
        let variant = force.unwrap_or(if t > MATVEC_MAX_T && matvec != MatmulVariant::MatvecRows {
            kernels.tiled
        } else {
            matvec
        });
        MatmulKey {
            ty,
            variant,
            bias,
            norm: false,
            fusion: Fusion::None,
            stage_k: 0,
        }
    }

    /// This key for a product of K = `k` when its variant was chosen, not forced: the chunk
    /// matvec only where it pays ([`CHUNK_MIN_K`]).
    pub fn sized(self, k: u64, forced: bool) -> MatmulKey {
        if self.variant == MatmulVariant::MatvecChunk && k < CHUNK_MIN_K && !forced {
            MatmulKey {
                variant: MatmulVariant::MatvecSubgroup,
                ..self
            }
        } else {
            self
        }
    }

    /// This key for a product of K = `k`, with x'[t] staged when the kernel is the subgroup
    /// matvec, [`MatvecShape::stage_x`] covers the product, K ≤ [`STAGE_MAX_K`] and the
    /// workgroup memory fits the device (`workgroup_bytes`: its per-workgroup limit).
    pub fn staged(self, k: u32, workgroup_bytes: u32) -> MatmulKey {
        let shape = matvec_shape();
        let wanted = match shape.stage_x {
            StageX::Never => false,
            StageX::Normed => self.norm,
            StageX::All => true,
        };
        // The kernel's other workgroup arrays: partial sums and Σx² per subgroup.
        let others = 64 * shape.rows_per_task * 8 + 64 * 4;
        if self.variant == MatmulVariant::MatvecChunk {
            // Tiles of whole 32-element chunks, as many as the device's workgroup memory holds.
            let fit = workgroup_bytes.saturating_sub(others) / 128 * 32;
            return MatmulKey {
                stage_k: k.min(fit.clamp(32, CHUNK_TILE_MAX_K)),
                ..self
            };
        }
        let fits = k <= STAGE_MAX_K && k.is_multiple_of(8) && 4 * k + others <= workgroup_bytes;
        let staged = self.variant == MatmulVariant::MatvecSubgroup && wanted && fits;
        MatmulKey {
            stage_k: if staged { k } else { 0 },
            ..self
        }
    }

    /// `matmul_q4_k_matvec_wg256`, `matmul_f16_tiled64x64_bias`,
    /// `matmul_q8_0_matvec_sg256_glu_silu_norm`, `matmul_q4_0_matvec_wg256_qkv_norm_bias`, …
    pub fn label(&self) -> String {
        let fusion = match self.fusion {
            Fusion::None => "",
            Fusion::Glu(Activation::Silu) => "_glu_silu",
            Fusion::Glu(Activation::GeluTanh) => "_glu_gelu_tanh",
            Fusion::Qkv => "_qkv",
            Fusion::QkvRope(RopeLayout::Normal) => "_qkv_rope_normal",
            Fusion::QkvRope(RopeLayout::Neox) => "_qkv_rope_neox",
        };
        let norm = if self.norm { "_norm" } else { "" };
        let bias = if self.bias { "_bias" } else { "" };
        let staged = if self.stage_k > 0 {
            format!("_xs{}", self.stage_k)
        } else {
            String::new()
        };
        format!(
            "matmul_{}_{}{fusion}{norm}{bias}{staged}",
            self.ty.name().to_lowercase(),
            self.variant.label()
        )
    }

    /// The defines that select this variant in `matmul.wgsl` (errors on an unsupported type).
    pub fn defines(&self) -> Result<Vec<&'static str>, KernelError> {
        let mut defines = vec![weight_define(self.ty)?, self.variant.define()];
        if self.variant.is_tiled() {
            defines.push("TILES");
        }
        match self.fusion {
            Fusion::None => {}
            Fusion::Glu(act) => defines.extend([
                "GLU",
                "MULTI_W",
                match act {
                    Activation::Silu => "SILU",
                    Activation::GeluTanh => "GELU_TANH",
                },
            ]),
            Fusion::Qkv => defines.extend(["QKV", "MULTI_W"]),
            Fusion::QkvRope(layout) => {
                if self.variant.is_tiled() {
                    return Err(KernelError::Shape {
                        kernel: "matmul_qkv_rope_kv",
                        why: "RoPE and the KV write are folded into the matvec shapes only".into(),
                    });
                }
                defines.extend(["QKV", "MULTI_W", "ROPE_KV"]);
                if layout == RopeLayout::Neox {
                    defines.push("ROPE_NEOX");
                }
            }
        }
        if self.norm {
            defines.push("NORM");
        }
        if self.bias {
            defines.push("BIAS");
            if self.fusion.weights() == 3 {
                defines.push("QKV_BIAS");
            }
        }
        if self.stage_k > 0 && self.variant == MatmulVariant::MatvecSubgroup {
            defines.push("STAGE_X");
        }
        Ok(defines)
    }

    /// Bindings 1.. in order: weights, x, outputs, norm_w, biases (one per output), inv_freq.
    pub(super) fn layout(&self) -> Layout {
        let x = 1 + self.fusion.weights();
        let y = x + 1;
        let norm = y + self.fusion.outputs();
        let bias = norm + self.norm as u32;
        let rope = bias + if self.bias { self.fusion.outputs() } else { 0 };
        let count = rope - 1 + matches!(self.fusion, Fusion::QkvRope(_)) as u32;
        Layout {
            x,
            y,
            norm,
            bias,
            rope,
            count,
        }
    }

    /// The preprocessed WGSL, with the grid constants and binding numbers the host also uses
    /// prepended (one source of truth; `GpuContext::pipeline` takes no override constants).
    fn source(&self) -> Result<String, KernelError> {
        let defines = self.defines()?;
        let l = self.layout();
        let (mv_rows, mv_lanes) = match self.variant {
            v if v.is_tiled() => (MV_ROWS, MV_LANES),
            v => v.grid(),
        };
        // Directives come before any declaration.
        let enables = match self.variant {
            MatmulVariant::TiledCoop => "enable f16;\nenable wgpu_cooperative_matrix;\n",
            _ => "",
        };
        // Groups per trip and rows per task of the subgroup matvec's row loop (its tuned
        // shape); the other kernels don't use them.
        let (mv_unroll, mv_rps) = match self.variant {
            MatmulVariant::MatvecSubgroup => {
                let shape = matvec_shape();
                (shape.unroll, shape.rows_per_task)
            }
            MatmulVariant::MatvecChunk => (1, CHUNK_ROWS_PER_TASK),
            _ => (2, 1),
        };
        let consts = format!(
            "const MV_ROWS: u32 = {mv_rows}u;\nconst MV_LANES: u32 = {mv_lanes}u;\n\
             const MV_UNROLL: u32 = {mv_unroll}u;\nconst MV_RPS: u32 = {mv_rps}u;\n\
             const MV_STAGE_VEC4: u32 = {}u;\n\
             const TILE_N: u32 = {TILE_N}u;\nconst TILE_T: u32 = {TILE_T}u;\n\
             const B_W1: u32 = 2u;\nconst B_W2: u32 = 3u;\nconst B_X: u32 = {}u;\n\
             const B_Y: u32 = {}u;\nconst B_NORM: u32 = {}u;\nconst B_BIAS: u32 = {}u;\n\
             const B_ROPE: u32 = {}u;\n",
            (self.stage_k / 4).max(1),
            l.x,
            l.y,
            l.norm,
            l.bias,
            l.rope
        );
        Ok(format!(
            "{enables}{consts}{}",
            preprocess("matmul.wgsl", &defines)
        ))
    }
}

/// The kernel shapes a device runs: its decode matvec and its prefill tile kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceKernels {
    pub matvec: MatmulVariant,
    pub tiled: MatmulVariant,
}

impl DeviceKernels {
    /// What a device without subgroups or cooperative matrices runs (a browser's GPU).
    pub const PORTABLE: DeviceKernels = DeviceKernels {
        matvec: MatmulVariant::MatvecWorkgroup,
        tiled: MatmulVariant::Tiled,
    };

    /// The matvec: subgroup sums where SUBGROUP exists, one row per invocation on a CPU
    /// adapter without them (SwiftShader), shared-memory sums elsewhere. The tiles: on
    /// tensor cores where coco's cooperative-matrix GEMM can run, portable otherwise.
    pub fn of(ctx: &crate::gpu::GpuContext) -> DeviceKernels {
        let matvec = if ctx.has_subgroups() {
            if matvec_shape().chunk {
                MatmulVariant::MatvecChunk
            } else {
                MatmulVariant::MatvecSubgroup
            }
        } else if ctx.info.device_type == wgpu::DeviceType::Cpu {
            MatmulVariant::MatvecRows
        } else {
            MatmulVariant::MatvecWorkgroup
        };
        let tiled = if ctx.has_coop_gemm() {
            MatmulVariant::TiledCoop
        } else {
            MatmulVariant::Tiled
        };
        DeviceKernels { matvec, tiled }
    }

    /// Portable tiles with this matvec (tests).
    pub fn with_matvec(matvec: MatmulVariant) -> DeviceKernels {
        DeviceKernels {
            matvec,
            ..Self::PORTABLE
        }
    }
}

/// The define that makes `common/dequant.wgsl` read `ty`, or a "not yet" error.
pub(crate) fn weight_define(ty: GgmlType) -> Result<&'static str, KernelError> {
    Ok(match ty {
        GgmlType::F32 => "F32",
        GgmlType::F16 => "F16",
        GgmlType::BF16 => "BF16",
        GgmlType::Q8_0 => "Q8_0",
        GgmlType::Q4_0 => "Q4_0",
        GgmlType::Q5_0 => "Q5_0",
        GgmlType::Q4_K => "Q4_K",
        GgmlType::Q5_K => "Q5_K",
        GgmlType::Q6_K => "Q6_K",
        other => {
            return Err(KernelError::Shape {
                kernel: "dequant",
                why: format!("not yet: weights of type {other}"),
            });
        }
    })
}

/// Checks that `w` can be read by `dequant32`: rows of whole 32-element chunks, row bytes
/// as the type says, every part bindable (`max_binding` bytes) and addressable in u32.
pub(crate) fn check_weight(
    kernel: &'static str,
    w: &GpuTensor,
    max_binding: u64,
) -> Result<(), KernelError> {
    let err = |why: String| Err(KernelError::Shape { kernel, why });
    weight_define(w.ty)?;
    if w.row_len == 0 || !w.row_len.is_multiple_of(32) {
        return err(format!(
            "{}: row length {} is not a positive multiple of 32",
            w.name, w.row_len
        ));
    }
    if w.ty.bytes_for(w.row_len) != Some(w.row_bytes) {
        return err(format!(
            "{}: {} bytes per row does not match {} × {}",
            w.name, w.row_bytes, w.row_len, w.ty
        ));
    }
    for part in &w.parts {
        if part.buffer.size() > max_binding {
            return err(format!(
                "{}: a part of {} bytes exceeds the binding limit {max_binding} (split it with a smaller max_part_bytes)",
                w.name,
                part.buffer.size()
            ));
        }
        // The shaders index a part's words and 32-element blocks in u32.
        if part.buffer.size() / 4 > u32::MAX as u64 {
            return err(format!(
                "{}: a part of {} rows exceeds u32 word offsets",
                w.name, part.n_rows
            ));
        }
    }
    if w.n_rows > u32::MAX as u64 {
        return err(format!("{}: {} rows exceed u32", w.name, w.n_rows));
    }
    Ok(())
}

/// Bytes a binding covers.
pub(crate) fn binding_bytes(b: &Binding) -> u64 {
    b.size
        .unwrap_or_else(|| b.buffer.size().saturating_sub(b.offset))
}

/// Errors unless `b` holds at least `elems` f32/u32 values.
pub(crate) fn check_binding(
    kernel: &'static str,
    what: &str,
    b: &Binding,
    elems: u64,
) -> Result<(), KernelError> {
    let have = binding_bytes(b);
    if have < elems * 4 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("{what} holds {have} bytes, needs {}", elems * 4),
        });
    }
    if elems > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("{what}: {elems} elements exceed u32 indexing"),
        });
    }
    Ok(())
}

/// `groups` workgroups folded into (x, y) so neither exceeds `max` (65,535 in WebGPU).
pub(crate) fn fold(groups: u32, max: u32) -> [u32; 2] {
    if groups <= max {
        [groups, 1]
    } else {
        [max, groups.div_ceil(max)]
    }
}

/// Optional parts of a matmul.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatmulArgs<'a> {
    /// bias[N] f32, added to every token's row.
    pub bias: Option<&'a wgpu::Buffer>,
    /// y += x·Wᵀ instead of y = x·Wᵀ (residual adds fused into the producing matmul).
    pub accumulate: bool,
}

/// RMSNorm folded into a matmul: `(norm_w[K] f32, eps)`; x is then the raw residual stream.
pub type Norm<'a> = (&'a Binding, f32);

/// Must match `Params` in matmul.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) k: u32,
    pub(super) t: u32,
    pub(super) groups: u32,
    pub(super) row0: u32,
    pub(super) accumulate: u32,
    pub(super) eps: f32,
    pub(super) pos0: u32,
    pub(super) _pad3: u32,
    pub(super) rows: [u32; 4],
    pub(super) n: [u32; 4],
    pub(super) head_dim: u32,
    pub(super) _pad: [u32; 3],
}

/// Records y[T, N] (+)= x[T, K] · w[N, K]ᵀ (+ bias[N]): one dispatch per part of `w`, with
/// the kernel shape chosen by T and the device. `x` must not share a buffer with `y` (a
/// writable binding may not alias another in one dispatch).
pub fn matmul(
    rec: &mut StepRecorder,
    w: &GpuTensor, // [N, K] raw GGUF blocks
    x: &Binding,   // [T, K] f32
    y: &Binding,   // [T, N] f32
    t: u32,
    args: MatmulArgs,
) -> Result<(), KernelError> {
    matmul_variant(rec, w, x, y, t, args, None)
}

/// [`matmul`] with the kernel shape forced (`Some`) for tests and A/B runs; `None` chooses.
pub fn matmul_variant(
    rec: &mut StepRecorder,
    w: &GpuTensor, // [N, K] raw GGUF blocks
    x: &Binding,   // [T, K] f32
    y: &Binding,   // [T, N] f32
    t: u32,
    args: MatmulArgs,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    let bias = args.bias.map(Binding::from);
    single(rec, w, x, None, y, t, bias, args.accumulate, variant)
}

/// Records y[T, N] (+)= (x · rsqrt(mean(x²) + eps) · norm_w) · w[N, K]ᵀ (+ bias[N]): the
/// RMSNorm of each token folded into the matmul that consumes it, one dispatch per part of
/// `w` (each recomputes the tokens' Σx², which costs no extra pass: see matmul.wgsl).
#[allow(clippy::too_many_arguments)]
pub fn matmul_normed(
    rec: &mut StepRecorder,
    w: &GpuTensor,    // [N, K] raw GGUF blocks
    x: &Binding,      // [T, K] f32, the raw residual stream
    norm_w: &Binding, // [K] f32
    eps: f32,
    y: &Binding, // [T, N] f32, not sharing a buffer with x
    t: u32,
    args: MatmulArgs,
) -> Result<(), KernelError> {
    matmul_normed_variant(rec, w, x, norm_w, eps, y, t, args, None)
}

/// [`matmul_normed`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_normed_variant(
    rec: &mut StepRecorder,
    w: &GpuTensor,    // [N, K] raw GGUF blocks
    x: &Binding,      // [T, K] f32, the raw residual stream
    norm_w: &Binding, // [K] f32
    eps: f32,
    y: &Binding, // [T, N] f32
    t: u32,
    args: MatmulArgs,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    let bias = args.bias.map(Binding::from);
    let norm = Some((norm_w, eps));
    single(rec, w, x, norm, y, t, bias, args.accumulate, variant)
}

/// Records out[T, ffn] = act(x'·w_gateᵀ) ⊙ (x'·w_upᵀ) in one dispatch (per part pair), with
/// x' = x, or x's RMSNorm when `norm` is given. The two weights must have the same type and
/// shape (then they are split alike); check with [`can_fuse_glu`] and keep the unfused
/// matmul, matmul, glu otherwise.
#[allow(clippy::too_many_arguments)]
pub fn matmul_glu(
    rec: &mut StepRecorder,
    w_gate: &GpuTensor, // [ffn, K] raw GGUF blocks
    w_up: &GpuTensor,   // [ffn, K] raw GGUF blocks, the type of w_gate
    x: &Binding,        // [T, K] f32 (the raw residual with `norm`)
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    out: &Binding,      // [T, ffn] f32, not sharing a buffer with x
    t: u32,
    act: Activation,
) -> Result<(), KernelError> {
    matmul_glu_variant(rec, w_gate, w_up, x, norm, out, t, act, None)
}

/// Whether [`matmul_glu`] can pair these weights: one type, one shape, one split.
pub fn can_fuse_glu(w_gate: &GpuTensor, w_up: &GpuTensor) -> bool {
    w_gate.ty == w_up.ty
        && w_gate.row_len == w_up.row_len
        && w_gate.n_rows == w_up.n_rows
        && w_gate.parts.len() == w_up.parts.len()
        && w_gate
            .parts
            .iter()
            .zip(&w_up.parts)
            .all(|(g, u)| g.first_row == u.first_row && g.n_rows == u.n_rows)
}

/// [`matmul_glu`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_glu_variant(
    rec: &mut StepRecorder,
    w_gate: &GpuTensor, // [ffn, K] raw GGUF blocks
    w_up: &GpuTensor,   // [ffn, K] raw GGUF blocks
    x: &Binding,        // [T, K] f32
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    out: &Binding,      // [T, ffn] f32
    t: u32,
    act: Activation,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_glu";
    let max_binding = rec.ctx().max_binding_bytes();
    check_weight(KERNEL, w_gate, max_binding)?;
    check_weight(KERNEL, w_up, max_binding)?;
    if !can_fuse_glu(w_gate, w_up) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!(
                "{} ({}, [{}, {}]) and {} ({}, [{}, {}]) differ in type, shape or split",
                w_gate.name,
                w_gate.ty,
                w_gate.n_rows,
                w_gate.row_len,
                w_up.name,
                w_up.ty,
                w_up.n_rows,
                w_up.row_len
            ),
        });
    }
    if t == 0 {
        return Ok(());
    }
    let (k, ffn) = (w_gate.row_len, w_gate.n_rows);
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "out [T, ffn]", out, t as u64 * ffn)?;
    check_norm(KERNEL, norm, k)?;
    let ctx = rec.ctx();
    let key = MatmulKey {
        norm: norm.is_some(),
        fusion: Fusion::Glu(act),
        ..MatmulKey::choose(DeviceKernels::of(ctx), w_gate.ty, t, false, variant)
    }
    .sized(k, variant.is_some());
    for (pg, pu) in w_gate.parts.iter().zip(&w_up.parts) {
        let rows = pg.n_rows as u32;
        let params = Params {
            k: k as u32,
            t,
            row0: pg.first_row as u32,
            eps: norm.map_or(0.0, |n| n.1),
            rows: [rows, rows, 0, 0],
            n: [ffn as u32, ffn as u32, 0, 0],
            ..Params::default()
        };
        let mut bindings = vec![
            Binding::from(&pg.buffer),
            Binding::from(&pu.buffer),
            x.clone(),
            out.clone(),
        ];
        bindings.extend(norm.map(|n| n.0.clone()));
        launch(rec, KERNEL, &key, params, 2 * rows, &bindings)?;
    }
    Ok(())
}

/// Q/K/V biases: `(bq [Nq], bk [Nk], bv [Nv])`, f32.
pub type QkvBiases<'a> = (&'a Binding, &'a Binding, &'a Binding);

/// Records q, k, v = x'·w_qᵀ, x'·w_kᵀ, x'·w_vᵀ (+ biases), with x' = x or x's RMSNorm, in
/// ONE dispatch whose workgroups cover the three weights' rows end to end. Falls back to
/// three dispatches (one per weight, each still normed) when the weights differ in type
/// (e.g. Gemma's Q4_K/Q5_0 mixes), when one is split into parts, or when the 7–11 storage
/// bindings exceed the device's per-stage limit.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv(
    rec: &mut StepRecorder,
    wq: &GpuTensor,     // [Nq, K] raw GGUF blocks
    wk: &GpuTensor,     // [Nk, K] raw GGUF blocks
    wv: &GpuTensor,     // [Nv, K] raw GGUF blocks
    x: &Binding,        // [T, K] f32 (the raw residual with `norm`)
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    q: &Binding,        // [T, Nq] f32
    k: &Binding,        // [T, Nk] f32
    v: &Binding,        // [T, Nv] f32
    t: u32,
    biases: Option<QkvBiases>,
) -> Result<(), KernelError> {
    matmul_qkv_variant(rec, wq, wk, wv, x, norm, q, k, v, t, biases, None)
}

/// Whether [`matmul_qkv`] runs as one dispatch for these weights on this device.
pub fn qkv_fuses(
    rec: &StepRecorder,
    wq: &GpuTensor,
    wk: &GpuTensor,
    wv: &GpuTensor,
    norm: bool,
    biases: bool,
) -> bool {
    let key = MatmulKey {
        ty: wq.ty,
        variant: MatmulVariant::MatvecWorkgroup,
        bias: biases,
        norm,
        fusion: Fusion::Qkv,
        stage_k: 0,
    };
    qkv_key_fits(rec, &key, [wq, wk, wv])
}

/// Whether one dispatch of `key` can read these three weights: one type, one part each, and
/// the key's storage bindings within the device's per-stage limit.
pub(super) fn qkv_key_fits(rec: &StepRecorder, key: &MatmulKey, w: [&GpuTensor; 3]) -> bool {
    let limit = rec.ctx().limits.max_storage_buffers_per_shader_stage;
    w.iter().all(|w| w.ty == key.ty && w.parts.len() == 1) && key.layout().count <= limit
}

/// [`matmul_qkv`] with the kernel shape forced (`Some`) for tests and A/B runs.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qkv_variant(
    rec: &mut StepRecorder,
    wq: &GpuTensor,     // [Nq, K] raw GGUF blocks
    wk: &GpuTensor,     // [Nk, K] raw GGUF blocks
    wv: &GpuTensor,     // [Nv, K] raw GGUF blocks
    x: &Binding,        // [T, K] f32
    norm: Option<Norm>, // (norm_w [K] f32, eps)
    q: &Binding,        // [T, Nq] f32
    k: &Binding,        // [T, Nk] f32
    v: &Binding,        // [T, Nv] f32
    t: u32,
    biases: Option<QkvBiases>,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul_qkv";
    let max_binding = rec.ctx().max_binding_bytes();
    let weights = [wq, wk, wv];
    for w in weights {
        check_weight(KERNEL, w, max_binding)?;
    }
    let kdim = wq.row_len;
    if let Some(w) = weights.iter().find(|w| w.row_len != kdim) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!(
                "{} has rows of {}, {} of {}: one x cannot feed both",
                w.name, w.row_len, wq.name, kdim
            ),
        });
    }
    let outputs = [q, k, v];
    let bias = biases.map(|(bq, bk, bv)| [bq, bk, bv]);
    if !qkv_fuses(rec, wq, wk, wv, norm.is_some(), bias.is_some()) {
        for i in 0..3 {
            let b = bias.map(|b| b[i].clone());
            single(rec, weights[i], x, norm, outputs[i], t, b, false, variant)?;
        }
        return Ok(());
    }
    if t == 0 {
        return Ok(());
    }
    check_binding(KERNEL, "x [T, K]", x, t as u64 * kdim)?;
    for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
        let n = weights[i].n_rows;
        check_binding(KERNEL, &format!("{name} [T, N]"), outputs[i], t as u64 * n)?;
        if let Some(b) = &bias {
            check_binding(KERNEL, &format!("b{name} [N]"), b[i], n)?;
        }
    }
    check_norm(KERNEL, norm, kdim)?;
    let slots = wq.n_rows + wk.n_rows + wv.n_rows;
    if slots > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{slots} rows in all exceed u32"),
        });
    }
    let ctx = rec.ctx();
    let key = MatmulKey {
        norm: norm.is_some(),
        fusion: Fusion::Qkv,
        ..MatmulKey::choose(DeviceKernels::of(ctx), wq.ty, t, bias.is_some(), variant)
    }
    .sized(kdim, variant.is_some());
    let rows = [wq.n_rows as u32, wk.n_rows as u32, wv.n_rows as u32, 0];
    let params = Params {
        k: kdim as u32,
        t,
        eps: norm.map_or(0.0, |n| n.1),
        rows,
        n: rows,
        ..Params::default()
    };
    let mut bindings: Vec<Binding> = weights
        .iter()
        .map(|w| Binding::from(&w.parts[0].buffer))
        .collect();
    bindings.push(x.clone());
    bindings.extend(outputs.iter().map(|o| (*o).clone()));
    bindings.extend(norm.map(|n| n.0.clone()));
    if let Some(b) = bias {
        bindings.extend(b.iter().map(|b| (*b).clone()));
    }
    launch(rec, KERNEL, &key, params, slots as u32, &bindings)
}

/// The unfused (optionally normed) product, one dispatch per part of `w`.
#[allow(clippy::too_many_arguments)]
fn single(
    rec: &mut StepRecorder,
    w: &GpuTensor,
    x: &Binding,
    norm: Option<Norm>,
    y: &Binding,
    t: u32,
    bias: Option<Binding>,
    accumulate: bool,
    variant: Option<MatmulVariant>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "matmul";
    check_weight(KERNEL, w, rec.ctx().max_binding_bytes())?;
    if t == 0 {
        return Ok(());
    }
    let (k, n) = (w.row_len, w.n_rows);
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "y [T, N]", y, t as u64 * n)?;
    if let Some(b) = &bias {
        check_binding(KERNEL, "bias [N]", b, n)?;
    }
    check_norm(KERNEL, norm, k)?;
    let key = MatmulKey {
        norm: norm.is_some(),
        ..MatmulKey::choose(
            DeviceKernels::of(rec.ctx()),
            w.ty,
            t,
            bias.is_some(),
            variant,
        )
    }
    .sized(k, variant.is_some());
    for part in &w.parts {
        let rows = part.n_rows as u32;
        let params = Params {
            k: k as u32,
            t,
            row0: part.first_row as u32,
            accumulate: accumulate as u32,
            eps: norm.map_or(0.0, |n| n.1),
            rows: [rows, 0, 0, 0],
            n: [n as u32, 0, 0, 0],
            ..Params::default()
        };
        let mut bindings = vec![Binding::from(&part.buffer), x.clone(), y.clone()];
        bindings.extend(norm.map(|n| n.0.clone()));
        bindings.extend(bias.clone());
        launch(rec, KERNEL, &key, params, rows, &bindings)?;
    }
    Ok(())
}

/// Errors unless the folded norm's weight holds K values and its eps is usable.
pub(super) fn check_norm(
    kernel: &'static str,
    norm: Option<Norm>,
    k: u64,
) -> Result<(), KernelError> {
    let Some((norm_w, eps)) = norm else {
        return Ok(());
    };
    if !eps.is_finite() || eps < 0.0 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("eps {eps} is not a finite value >= 0"),
        });
    }
    check_binding(kernel, "norm_w [K]", norm_w, k)
}

/// Dispatches `key` over `slots` weight rows for `params.t` tokens (`params.groups` is filled
/// in here), with `bindings` in the key's layout order.
pub(super) fn launch(
    rec: &mut StepRecorder,
    kernel: &'static str,
    key: &MatmulKey,
    mut params: Params,
    slots: u32,
    bindings: &[Binding],
) -> Result<(), KernelError> {
    let err = |why: String| Err(KernelError::Shape { kernel, why });
    let ctx = rec.ctx();
    if matches!(
        key.variant,
        MatmulVariant::MatvecSubgroup | MatmulVariant::MatvecChunk
    ) && !ctx.has_subgroups()
    {
        return err("the subgroup matvec needs Features::SUBGROUP, which this device lacks".into());
    }
    if key.variant == MatmulVariant::TiledCoop && !ctx.has_coop_gemm() {
        return err(
            "the cooperative-matrix GEMM needs wgpu's experimental cooperative \
                    matrices (16x16x16 f16 -> f32), which this device lacks"
                .into(),
        );
    }
    let layout = key.layout();
    debug_assert_eq!(layout.count as usize, bindings.len(), "{}", key.label());
    let limit = ctx.limits.max_storage_buffers_per_shader_stage;
    if layout.count > limit {
        return err(format!(
            "{} storage bindings exceed this device's per-stage limit of {limit}",
            layout.count
        ));
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    let t = params.t;
    let t_groups = match key.variant {
        v if v.is_tiled() => t.div_ceil(TILE_T),
        _ => t, // one token per z slice
    };
    if t_groups > max {
        return err(format!(
            "{t} tokens need {t_groups} workgroups along z, over the limit {max}"
        ));
    }
    let key = &key.staged(params.k, ctx.limits.max_compute_workgroup_storage_size);
    // Defines are checked here; the source is only built on a pipeline-cache miss (this runs
    // for every dispatch of every step).
    key.defines()?;
    let label = key.label();
    let pipeline = ctx.pipeline(&label, || key.source().expect("defines checked above"));
    params.groups = slots.div_ceil(key.variant.slots_per_group());
    let [gx, gy] = fold(params.groups, max);
    rec.dispatch(
        &label,
        &pipeline,
        bytemuck::bytes_of(&params),
        bindings,
        [gx, gy, t_groups],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_variant() {
        let key = MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecWorkgroup),
            GgmlType::Q4_K,
            1,
            false,
            None,
        );
        assert_eq!(key.label(), "matmul_q4_k_matvec_wg256");
        let key = MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
            GgmlType::Q8_0,
            1,
            true,
            None,
        );
        assert_eq!(key.label(), "matmul_q8_0_matvec_sg256_bias");
        let key = MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
            GgmlType::BF16,
            64,
            false,
            None,
        );
        assert_eq!(key.label(), "matmul_bf16_tiled64x64");
        let key = MatmulKey {
            norm: true,
            fusion: Fusion::Glu(Activation::GeluTanh),
            ..MatmulKey::choose(
                DeviceKernels::with_matvec(MatmulVariant::MatvecWorkgroup),
                GgmlType::Q6_K,
                1,
                false,
                None,
            )
        };
        assert_eq!(key.label(), "matmul_q6_k_matvec_wg256_glu_gelu_tanh_norm");
        let key = MatmulKey {
            norm: true,
            fusion: Fusion::Qkv,
            ..MatmulKey::choose(
                DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
                GgmlType::Q5_0,
                1,
                true,
                None,
            )
        };
        assert_eq!(key.label(), "matmul_q5_0_matvec_sg256_qkv_norm_bias");
        // CPU adapters keep the row-per-invocation matvec even for prefill-sized steps.
        let key = MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecRows),
            GgmlType::Q8_0,
            64,
            false,
            None,
        );
        assert_eq!(key.label(), "matmul_q8_0_matvec_rows256");
    }

    /// Parses and validates `source` with every naga capability and writes SPIR-V, as wgpu
    /// does on Vulkan: catches shader errors in variants lavapipe can't run.
    fn compile_to_spirv(label: &str, source: &str) {
        let module = naga::front::wgsl::parse_str(source)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
        naga::back::spv::write_vec(&module, &info, &Default::default(), None)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
    }

    #[test]
    fn cooperative_matrix_gemm_compiles_to_spirv_in_every_fusion() {
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q8_0,
            GgmlType::Q4_K,
            GgmlType::F16,
        ] {
            for (fusion, norm, bias) in [
                (Fusion::None, false, false),
                (Fusion::None, false, true),
                (Fusion::Glu(Activation::Silu), true, false),
                (Fusion::Qkv, true, true),
            ] {
                let key = MatmulKey {
                    ty,
                    variant: MatmulVariant::TiledCoop,
                    bias,
                    norm,
                    fusion,
                    stage_k: 0,
                };
                let source = key.source().unwrap();
                assert!(source.contains("coopMultiplyAdd"), "{}", key.label());
                compile_to_spirv(&key.label(), &source);
            }
        }
        let key = MatmulKey::choose(
            DeviceKernels {
                matvec: MatmulVariant::MatvecSubgroup,
                tiled: MatmulVariant::TiledCoop,
            },
            GgmlType::Q4_0,
            64,
            false,
            None,
        );
        assert_eq!(key.label(), "matmul_q4_0_coop64x64");
    }

    #[test]
    fn layouts_number_bindings_in_host_order() {
        let key = |fusion, norm, bias| MatmulKey {
            ty: GgmlType::F16,
            variant: MatmulVariant::Tiled,
            bias,
            norm,
            fusion,
            stage_k: 0,
        };
        // w, x, y, [norm_w], [bias]
        let l = key(Fusion::None, false, true).layout();
        assert_eq!((l.x, l.y, l.bias, l.count), (2, 3, 4, 4));
        let l = key(Fusion::None, true, true).layout();
        assert_eq!((l.norm, l.bias, l.count), (4, 5, 5));
        // w_gate, w_up, x, out, norm_w
        let l = key(Fusion::Glu(Activation::Silu), true, false).layout();
        assert_eq!((l.x, l.y, l.norm, l.count), (3, 4, 5, 5));
        // wq, wk, wv, x, q, k, v, norm_w, bq, bk, bv
        let l = key(Fusion::Qkv, true, true).layout();
        assert_eq!((l.x, l.y, l.norm, l.bias, l.count), (4, 5, 8, 9, 11));
        let l = key(Fusion::Qkv, false, true).layout();
        assert_eq!((l.bias, l.count), (8, 10));
        // wq, wk, wv, x, q, k_cache, v_cache, norm_w, [bq, bk, bv], inv_freq
        let l = key(Fusion::QkvRope(RopeLayout::Neox), true, true).layout();
        assert_eq!((l.norm, l.bias, l.rope, l.count), (8, 9, 12, 12));
        let l = key(Fusion::QkvRope(RopeLayout::Normal), true, false).layout();
        assert_eq!((l.rope, l.count), (9, 9));
    }

    #[test]
    fn fold_keeps_each_dimension_under_the_limit() {
        assert_eq!(fold(10, 65535), [10, 1]);
        assert_eq!(fold(65536, 65535), [65535, 2]);
        assert_eq!(fold(262144 / 8 * 5, 65535), [65535, 3]);
    }

    #[test]
    fn matvec_shape_parses_and_bounds_the_override() {
        let shape = |rows, unroll, rows_per_task, stage_x| MatvecShape {
            rows,
            unroll,
            rows_per_task,
            stage_x,
            chunk: MatvecShape::DEFAULT.chunk,
        };
        let default = MatvecShape::DEFAULT.stage_x;
        assert_eq!(MatvecShape::parse("8x2"), Some(shape(8, 2, 1, default)));
        assert_eq!(MatvecShape::parse("16x1x8"), Some(shape(16, 1, 8, default)));
        assert_eq!(
            MatvecShape::parse("8x1x2x0"),
            Some(shape(8, 1, 2, StageX::Never))
        );
        assert_eq!(
            MatvecShape::parse("8x1x2x2"),
            Some(shape(8, 1, 2, StageX::All))
        );
        assert_eq!(
            MatvecShape::parse("16x1x2x0x1"),
            Some(MatvecShape {
                chunk: true,
                ..shape(16, 1, 2, StageX::Never)
            })
        );
        let bad = "8 8x3 8x4 8x0 12x2 8x2x8 32x2x16 8x2x3 8x2x4x3 8x2x4x1x2 8x2x4x1x1x1 ax2 8x2x";
        for bad in bad.split(' ').chain([""]) {
            assert_eq!(MatvecShape::parse(bad), None, "{bad}");
        }
        assert!(
            MatvecShape::parse(&format!("{}x{}x{}", SG_ROWS, MV_UNROLL, SG_ROWS_PER_TASK))
                .is_some_and(|s| s == MatvecShape::DEFAULT)
        );
    }

    #[test]
    fn qkv_rope_compiles_for_the_matvecs_and_is_refused_for_tiles() {
        for variant in [
            MatmulVariant::MatvecWorkgroup,
            MatmulVariant::MatvecSubgroup,
            MatmulVariant::MatvecRows,
            MatmulVariant::Tiled,
        ] {
            for layout in [RopeLayout::Normal, RopeLayout::Neox] {
                let key = MatmulKey {
                    ty: GgmlType::Q4_0,
                    variant,
                    bias: true,
                    norm: true,
                    fusion: Fusion::QkvRope(layout),
                    stage_k: 0,
                };
                if variant.is_tiled() {
                    assert!(key.defines().is_err(), "{}", key.label());
                } else {
                    compile_to_spirv(&key.label(), &key.source().unwrap());
                }
            }
        }
    }

    #[test]
    fn every_variant_preprocesses() {
        for ty in GgmlType::SUPPORTED {
            for variant in [
                MatmulVariant::MatvecWorkgroup,
                MatmulVariant::MatvecSubgroup,
                MatmulVariant::Tiled,
            ] {
                for fusion in [Fusion::None, Fusion::Glu(Activation::Silu), Fusion::Qkv] {
                    let key = MatmulKey {
                        ty,
                        variant,
                        bias: fusion != Fusion::Glu(Activation::Silu),
                        norm: true,
                        fusion,
                        stage_k: 0,
                    };
                    let src = key.source().unwrap();
                    assert!(
                        src.contains("fn dequant32") && src.contains("fn main"),
                        "{}",
                        key.label()
                    );
                    if variant == MatmulVariant::MatvecSubgroup {
                        // the staged forms, with and without the norm, must compile too
                        for norm in [true, false] {
                            let key = MatmulKey {
                                norm,
                                stage_k: 2048,
                                ..key
                            };
                            compile_to_spirv(&key.label(), &key.source().unwrap());
                        }
                    }
                }
            }
        }
    }
}
