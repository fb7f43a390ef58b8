//! One compiled variant of `shaders/matmul.wgsl` ([`MatmulKey`]): its defines, its binding
//! layout, its label and its source, and the `Params` uniform every variant reads.

use crate::gguf::GgmlType;
use crate::gpu::preprocess;
pub use crate::gpu::{GemmChoice, WideTile};

use super::super::elementwise::Activation;
use super::super::rope::RopeLayout;
use super::super::KernelError;
use super::select::*;

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
    /// The chunk matvec with more slots per workgroup (one of [`CHUNK_WIDE`]'s): what
    /// [`MatmulKey::sized`] picks for an int8 product whose grid keeps that entry's
    /// workgroups.
    MatvecChunkWide(u32),
    /// Matrix–vector, one invocation per row and no reduction: for CPU adapters without
    /// subgroups (SwiftShader, the browser's fallback adapter). There a workgroup barrier
    /// costs a switch of every invocation's fiber, and the shared-memory reduction made the
    /// LM head alone take ~4 s per token on a 32,000-row vocabulary; coalescing, which the
    /// lanes exist for, buys nothing on a CPU.
    MatvecRows,
    /// Tiled matrix–matrix (prefill).
    Tiled,
    /// The same tiles multiplied with f16 cooperative matrices (tensor cores), where the
    /// native adapter offers them (`GpuContext::has_coop_gemm`), with
    /// [`MatmulVariant::Coop128`]'s per-token scaling of activations past f16's range: what
    /// [`MatmulKey::sized`] picks for steps of up to [`coop64_max_t`] tokens, and everywhere
    /// with `COCO_GEMM=tiled`.
    TiledCoop,
    /// Tensor cores with a 128 × 128 tile and 8 blocks per subgroup
    /// (`shaders/matmul/gemm_coop.wgsl`): what a device with coco's tensor-core GEMM runs
    /// unless `TiledCoop` is asked for ([`GemmChoice::pick_coop`]).
    Coop128,
    /// Short steps on tensor cores (`shaders/matmul/gemm_coop_stream.wgsl`): one block of
    /// slots × two blocks of tokens per workgroup (the device's cooperative-matrix block: 16,
    /// or 8 on lavapipe), K split among its subgroups, x' read from the scale pass's f16 rows.
    /// What [`MatmulKey::sized`] picks for steps of up to [`COOP_STREAM_MAX_T`] tokens with
    /// `COCO_COOP_STREAM=1` ([`coop_stream`]).
    CoopStream(u32),
    /// The portable GEMM with a larger register tile per thread
    /// (`shaders/matmul/gemm_wide.wgsl`): what [`MatmulKey::sized`] picks over `Tiled` where
    /// the grid stays full.
    Wide(WideTile),
    /// The browser's int8 subgroup matrices (Chromium's experimental
    /// `chromium-experimental-subgroup-matrix`, `shaders/matmul/gemm_matrix_i8.wgsl`): 64 ×
    /// 64 tiles whose 32-wide K chunks multiply as int8 levels, where the device was granted
    /// them (`GpuContext::subgroup_matrix_i8`) and the weight type has levels
    /// ([`has_levels8`]); [`MatmulKey::sized`] gives other types the portable tiles.
    /// `emulated`: the same kernel with dot4I8Packed in place of the matrix builtins
    /// (`MATRIX_EMULATED`), which the kernel tests run natively.
    MatrixI8 { emulated: bool },
    /// The weights' levels by x' as one int8 level per element on dot4I8Packed alone
    /// (`DOT4_TILES` in gemm_matrix_i8.wgsl, llama.cpp's q8_1 activations; WGSL's
    /// `packed_4x8_integer_dot_product`, [`crate::gpu::packed_4x8_dot`]), each thread 4 × 4
    /// (slot, token) sums: the portable GEMM for weight types with levels where `gemm=dot4`
    /// (`COCO_GEMM=dot4`) asks for it.
    Dot4I8,
}

/// Whether weight type `ty` has int8 levels per 32-element chunk with one scale and offset
/// (`levels8` in its dequant file), which [`MatmulVariant::MatrixI8`] multiplies.
pub fn has_levels8(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::Q4_K
    )
}

/// Whether `ty`'s tensor-core staging decodes its levels without integer → float conversions
/// (`HALF_W`, common/dequant.wgsl `half8`): the types whose w = d·(q − c) has d an f16 of the
/// file and c a small integer, so the exponent trick's f32 values are dequant8's exactly
/// (Q4_K's d and m are f32 products).
pub fn has_half8(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0)
}

impl MatmulVariant {
    fn define(self) -> &'static str {
        match self {
            Self::MatvecWorkgroup => "MATVEC_WG",
            Self::MatvecSubgroup => "MATVEC_SG",
            Self::MatvecChunk | Self::MatvecChunkWide(_) => "MATVEC_CHUNK",
            // The workgroup kernel with one lane per slot: its reduction loop is empty.
            Self::MatvecRows => "MATVEC_WG",
            Self::Tiled => "TILED",
            Self::TiledCoop => "TILED_COOP",
            Self::Coop128 => "GEMM_COOP",
            Self::CoopStream(_) => "COOP_STREAM",
            Self::Wide(_) => "GEMM_WIDE",
            Self::MatrixI8 { .. } | Self::Dot4I8 => "GEMM_MATRIX_I8",
        }
    }

    pub(crate) fn is_tiled(self) -> bool {
        matches!(
            self,
            Self::Tiled
                | Self::TiledCoop
                | Self::Coop128
                | Self::CoopStream(_)
                | Self::Wide(_)
                | Self::MatrixI8 { .. }
                | Self::Dot4I8
        )
    }

    /// Whether this shape is the chunk matvec (a lane per 32-element chunk), either width.
    pub(crate) fn is_chunk(self) -> bool {
        matches!(self, Self::MatvecChunk | Self::MatvecChunkWide(_))
    }

    /// Whether this shape multiplies on cooperative matrices (tensor cores).
    pub(crate) fn is_coop(self) -> bool {
        matches!(self, Self::TiledCoop | Self::Coop128 | Self::CoopStream(_))
    }

    /// Whether this shape has the post-norm epilogue ([`Fusion::PostNorm`]): the matvecs
    /// whose last workgroup reduces with subgroup sums.
    pub(crate) fn has_post_norm(self) -> bool {
        matches!(
            self,
            Self::MatvecSubgroup | Self::MatvecChunk | Self::MatvecChunkWide(_)
        )
    }

    /// Tokens per workgroup of a tile kernel (the z extent of its grid).
    pub(super) fn tile_tokens(self) -> u32 {
        match self {
            Self::Wide(w) => w.tile().1,
            Self::Coop128 => COOP_TILE,
            Self::CoopStream(block) => 2 * block,
            _ => TILE_T,
        }
    }

    /// `matvec_wg256`, `tiled64x64`, …: the variant's part of a pipeline label.
    pub fn label(self) -> String {
        match self {
            Self::MatvecWorkgroup => format!("matvec_wg{}", MV_ROWS * MV_LANES),
            Self::MatvecSubgroup => format!("matvec_sg{}", MV_ROWS * MV_LANES),
            Self::MatvecChunk => format!("matvec_chunk{}", MV_ROWS * MV_LANES),
            Self::MatvecChunkWide(slots) => {
                format!("matvec_chunk{slots}x{CHUNK_WIDE_ROWS_PER_TASK}")
            }
            Self::MatvecRows => format!("matvec_rows{}", MV_ROWS * MV_LANES),
            Self::Tiled => format!("tiled{TILE_N}x{TILE_T}"),
            Self::TiledCoop => format!("coop{TILE_N}x{TILE_T}"),
            Self::Coop128 => format!("coop{COOP_TILE}x{COOP_TILE}"),
            Self::CoopStream(block) => format!("coopstream{block}x{}", 2 * block),
            Self::Wide(w) => {
                let (n, t) = w.tile();
                let half = if w.half { "h" } else { "" };
                format!("wide{half}{n}x{t}")
            }
            Self::MatrixI8 { emulated: false } => format!("matrix_i8_{TILE_N}x{TILE_T}"),
            Self::MatrixI8 { emulated: true } => format!("matrix_i8_emulated_{TILE_N}x{TILE_T}"),
            Self::Dot4I8 => format!("dot4_q8_{TILE_N}x{TILE_T}"),
        }
    }

    /// Slots (weight rows) per workgroup.
    pub(super) fn slots_per_group(self) -> u32 {
        self.grid().0
    }

    /// (slots, lanes per slot) of a workgroup; 256 invocations for the matvecs.
    fn grid(self) -> (u32, u32) {
        match self {
            Self::Tiled | Self::TiledCoop | Self::MatrixI8 { .. } | Self::Dot4I8 => (TILE_N, 1),
            Self::Coop128 => (COOP_TILE, 1),
            Self::CoopStream(block) => (block, 1),
            Self::Wide(w) => (w.tile().0, 1),
            Self::MatvecRows => (MV_ROWS * MV_LANES, 1),
            Self::MatvecWorkgroup => (MV_ROWS, MV_LANES),
            // The shader deals lanes by subgroup size; MV_LANES is unused there.
            Self::MatvecSubgroup => (matvec_shape().rows, MV_LANES),
            Self::MatvecChunk => (chunk_shape().0, MV_LANES),
            Self::MatvecChunkWide(slots) => (slots, MV_LANES),
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
    /// cache, plus an inv_freq binding (matvec shapes only; see `kernels::qkv_rope`). With
    /// `qk_norm`, gemma3's per-head Q/K RMSNorm before the rotation too, plus the q_norm_w,
    /// k_norm_w and scratch bindings.
    QkvRope { layout: RopeLayout, qk_norm: bool },
    /// y += RMSNorm(x·Wᵀ) ⊙ post_w, y the residual stream: gemma's sandwich norm folded into
    /// W_o and W_down, plus the post_w and scratch bindings (the subgroup and chunk matvecs
    /// only; see [`super::matmul_post_norm_add`]).
    PostNorm,
}

impl Fusion {
    fn weights(self) -> u32 {
        match self {
            Fusion::None => 1,
            Fusion::Glu(_) => 2,
            Fusion::Qkv | Fusion::QkvRope { .. } => 3,
            Fusion::PostNorm => 1,
        }
    }

    fn outputs(self) -> u32 {
        match self {
            Fusion::Qkv | Fusion::QkvRope { .. } => 3,
            _ => 1,
        }
    }
}

/// Whether a chunk matvec trades x' as int8 levels through global memory instead of each
/// workgroup quantizing its own copy ([`super::ffn_levels_fit`]).
#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
pub enum XLevels {
    /// x' is read as f32 and staged by every workgroup.
    #[default]
    Staged,
    /// The GLU also writes its outputs' levels (`EMIT_LEVELS`) for the W_down that follows.
    Emit,
    /// x' is read as the levels its producer wrote (`LEVELS_IN`); nothing is staged.
    Read,
}

/// One compiled variant of `matmul.wgsl`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatmulKey {
    /// The weights' GGUF type: selects the dequantizer.
    pub ty: GgmlType,
    pub variant: MatmulVariant,
    /// A `bias[N]` binding per output (a binding-layout change).
    pub bias: bool,
    /// x is the raw residual and RMSNorm is applied in the kernel (binding `norm_w[K]`).
    pub norm: bool,
    pub fusion: Fusion,
    /// K when the subgroup matvec stages `x'[t]` in workgroup memory (the chunk matvec: the
    /// elements per staged tile), else 0: set by the launch from K, the device and
    /// [`MatvecShape::stage_x`] (see [`MatmulKey::staged`]).
    pub stage_k: u32,
    /// Workgroups per row group of the chunk matvec, each over a range of K (`SPLIT_K`,
    /// [`chunk_splits`]); 1 everywhere else.
    pub splits: u32,
    /// Where the int8 chunk matvec's levels of x' come from (a binding-layout change).
    pub levels: XLevels,
    /// The tensor-core tiles read x' as f16 rows the scale pass before staged (`X16`; x16 in
    /// x's binding, no norm_w: the pass applied it): set by the launch ([`MatmulKey::staged`])
    /// unless `COCO_COOP_PRESTAGE=0` ([`coop_prestage`]) or the device lacks the workgroup
    /// memory.
    pub x16: bool,
    /// The 128-token tensor-core tiles with 64 × 64 per subgroup (`SG64`, with `x16`): set by
    /// the launch with `COCO_COOP_SUBGROUP_TILE=64` ([`coop_subgroup_tile64`]).
    pub sg64: bool,
    /// The tensor-core tiles' staged chunks held as vec4<f16> (`VEC_STAGE`): set by the launch
    /// unless `COCO_COOP_VEC_STAGE=0` ([`coop_vec_stage`]).
    pub vec_stage: bool,
    /// The 128-token tensor-core tiles take their token tiles fastest in dispatch order
    /// (`TOKENS_FIRST`, with `x16` and not `sg64`): set by [`MatmulKey::sized`] where the
    /// product's weights pass [`COOP_TOKENS_FIRST_MIN_BYTES`] ([`coop_tokens_first`]).
    pub tokens_first: bool,
    /// The device's tensor-core tiles multiply 8 × 8 × 8 blocks on subgroups of 8 (`COOP8`:
    /// lavapipe) instead of 16 × 16 × 16 on subgroups of 32 (its `coop_block`, from
    /// [`DeviceKernels`]); only the tensor-core variants read it.
    pub coop8: bool,
    /// The device's portable wide tiles run in f16 ([`DeviceKernels::wide_f16`]): what
    /// [`MatmulKey::sized`] makes of the wide tile it picks.
    pub wide_f16: bool,
}

/// Storage binding numbers of a [`MatmulKey`]'s layout: the order the host lists them in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::kernels) struct Layout {
    pub(super) x: u32,
    pub(super) y: u32,
    pub(super) norm: u32,
    pub(super) bias: u32,
    pub(super) rope: u32,
    /// q_norm_w, k_norm_w, then the epilogue scratch (QkvRope with qk_norm).
    pub(super) qkn: u32,
    /// post_w, then the epilogue scratch (Fusion::PostNorm).
    pub(super) post: u32,
    /// The levels x' is written to (XLevels::Emit; a reader's take x's place).
    pub(super) levels: u32,
    /// The split scratch (SPLIT_K).
    pub(super) split: u32,
    /// The per-token f16 scales (the cooperative-matrix tiles), after every other binding.
    pub(super) scales: u32,
    /// Storage bindings in all.
    pub(in crate::kernels) count: u32,
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
        let tiled = matvec_max_t(kernels).is_some_and(|max_t| t > max_t);
        let variant = force.unwrap_or(if tiled { kernels.tiled } else { kernels.matvec });
        MatmulKey {
            ty,
            variant,
            bias,
            norm: false,
            fusion: Fusion::None,
            stage_k: 0,
            splits: 1,
            levels: XLevels::Staged,
            x16: false,
            sg64: false,
            vec_stage: false,
            coop8: kernels.coop_block == 8,
            tokens_first: false,
            wide_f16: kernels.wide_f16,
        }
    }

    /// This key for a product of K = `k` over `slots` weight rows (all parts, all fused
    /// weights) and `t` tokens with the device's `gemm` choice. When its variant was chosen,
    /// not forced: the chunk matvec only where it pays ([`CHUNK_MIN_K`], [`CHUNK_SHORT_K_MIN`]),
    /// and the portable tiles as the first [`MatmulVariant::Wide`] tile that still fills the GPU
    /// ([`GemmChoice::pick`]). Either way a chunk matvec splits K by [`chunk_splits`].
    pub fn sized(self, k: u64, slots: u64, t: u32, gemm: GemmChoice, forced: bool) -> MatmulKey {
        let variant = match self.variant {
            v if forced => v,
            MatmulVariant::MatvecChunk
                if k < chunk_min_k()
                    && !(self.int8_candidate()
                        && chunk_short_k_min()
                            .is_some_and(|(min_k, min_rows)| k >= min_k && slots >= min_rows)) =>
            {
                MatmulVariant::MatvecSubgroup
            }
            // With int8 levels the larger workgroup wins where the grid stays full: the 8B's
            // gate/up 1,367 -> 1,156 µs per step, its LM head 143 -> 102 (BENCHMARKS.md
            // "session 17"); the 4,096-row products lost 4% on it.
            MatmulVariant::MatvecChunk
                if self.int8_candidate() && chunk_shape_override().is_none() =>
            {
                CHUNK_WIDE
                    .iter()
                    .find(|&&(per, min_groups)| slots.div_ceil(per as u64) >= min_groups)
                    .map_or(MatmulVariant::MatvecChunk, |&(per, _)| {
                        MatmulVariant::MatvecChunkWide(per)
                    })
            }
            // The A/B switch for short steps (which it takes off the matvec: matvec_max_t).
            MatmulVariant::Coop128 | MatmulVariant::TiledCoop
                if coop_stream() && t <= COOP_STREAM_MAX_T =>
            {
                MatmulVariant::CoopStream(if self.coop8 { 8 } else { 16 })
            }
            // Short steps' small products take the 64-token tensor-core tiles: the 128-token
            // ones would leave most of the GPU idle there, even split.
            MatmulVariant::Coop128 if coop64_takes(t, slots, k) => MatmulVariant::TiledCoop,
            // The A/B switch for longer steps: a product whose 128 × 128 grid stays small.
            MatmulVariant::Coop128
                if coop128_min_groups().is_some_and(|min| {
                    slots.div_ceil(COOP_TILE as u64) * (t as u64).div_ceil(COOP_TILE as u64) < min
                }) =>
            {
                MatmulVariant::TiledCoop
            }
            MatmulVariant::Tiled => self.portable_tiles(gemm, slots, t),
            // Types without int8 levels take the portable tiles the device would run without
            // subgroup matrices.
            MatmulVariant::MatrixI8 { .. } | MatmulVariant::Dot4I8 if !has_levels8(self.ty) => {
                self.portable_tiles(gemm, slots, t)
            }
            v => v,
        };
        let splits = match variant {
            MatmulVariant::MatvecChunk | MatmulVariant::MatvecChunkWide(_) => {
                let rows = variant.slots_per_group();
                chunk_splits(slots.div_ceil(rows as u64), rows, k / 32, t)
            }
            MatmulVariant::Tiled
            | MatmulVariant::TiledCoop
            | MatmulVariant::MatrixI8 { .. }
            | MatmulVariant::Dot4I8 => tile_splits(
                slots.div_ceil(TILE_N as u64),
                (t as u64).div_ceil(TILE_T as u64),
                k / 32,
            ),
            MatmulVariant::Coop128 => coop128_splits(
                slots.div_ceil(COOP_TILE as u64),
                (t as u64).div_ceil(COOP_TILE as u64),
                k / 32,
            ),
            _ => 1,
        };
        let weight_bytes = self.ty.bytes_for(k).map_or(0, |row| row * slots);
        MatmulKey {
            variant,
            splits,
            tokens_first: variant == MatmulVariant::Coop128 && coop_tokens_first(weight_bytes),
            ..self
        }
    }

    /// The portable tiles for `slots` rows × `t` tokens ([`GemmChoice::pick`]), except that the
    /// fused Q/K/V keeps the 64 × 64 tiles rather than f32 wide ones: as wide64x128 it ran 2.8×
    /// slower on the Llama-8B shape (105.7 against 37.7 ms per 512-token step; BENCHMARKS.md
    /// "session 16"), the slowdown gemm_wide.wgsl warns of. In f16 the wide tiles beat them
    /// (the 8B's 37.8 → 25.9 ms, H100, BENCHMARKS.md "session 45").
    fn portable_tiles(&self, gemm: GemmChoice, slots: u64, t: u32) -> MatmulVariant {
        match gemm.pick(slots, t, self.wide_f16) {
            MatmulVariant::Wide(w) if !w.half && matches!(self.fusion, Fusion::Qkv) => {
                MatmulVariant::Tiled
            }
            v => v,
        }
    }

    /// This key for a product of K = `k`, with `x'[t]` staged when the kernel is the subgroup
    /// matvec, [`MatvecShape::stage_x`] covers the product, K ≤ [`STAGE_MAX_K`] and the
    /// workgroup memory fits the device (`workgroup_bytes`: its per-workgroup limit).
    /// The tensor-core tiles instead read x' prestaged as f16 where it fits
    /// ([`coop_prestage`]); the wide GEMM stages its own chunk (`stage_k` 0).
    pub fn staged(self, k: u32, workgroup_bytes: u32) -> MatmulKey {
        if self.variant.is_coop() {
            let prestaged = MatmulKey {
                stage_k: 0,
                x16: true,
                sg64: self.variant == MatmulVariant::Coop128 && coop_subgroup_tile64(),
                vec_stage: coop_vec_stage(),
                ..self
            };
            let fits = prestaged
                .prestage_workgroup_bytes()
                .is_none_or(|needed| needed <= workgroup_bytes);
            // The short-step tiles read x' only as the scale pass's f16 rows; the others by
            // default too, where the device holds their workgroup arrays. Where it doesn't
            // (the double-buffered 128-token tiles need 48 KiB, lavapipe has 32), those tiles
            // stage x' themselves and walk all of K (their split needs the prestaged form).
            if matches!(self.variant, MatmulVariant::CoopStream(_)) || (coop_prestage() && fits) {
                return prestaged;
            }
            let splits = if self.variant == MatmulVariant::Coop128 {
                1
            } else {
                self.splits
            };
            return MatmulKey {
                x16: false,
                sg64: false,
                splits,
                ..prestaged
            };
        }
        if let MatmulVariant::Wide(w) = self.variant {
            // Its own chunk (WideTile::chunk), within WebGPU's guaranteed 16 KiB; in f16 x'
            // comes as the scale pass's rows.
            return MatmulKey {
                stage_k: 0,
                x16: w.half,
                ..self
            };
        }
        let shape = matvec_shape();
        let wanted = match shape.stage_x {
            StageX::Never => false,
            StageX::Normed => self.norm,
            StageX::All => true,
        };
        // The kernel's other workgroup arrays: partial sums and Σx² per subgroup, and the
        // Q/K-norm epilogue's sums and arrival flag.
        let others = 64 * shape.rows_per_task * 8 + 64 * 4 + 516 * self.has_qk_norm() as u32;
        if self.levels == XLevels::Read {
            // The levels are read where they lie: nothing is staged.
            return MatmulKey { stage_k: 0, ..self };
        }
        if self.variant.is_chunk() {
            // Tiles of whole 32-element chunks, as many as the device's workgroup memory holds;
            // with split K no more than a workgroup's range.
            let fit = workgroup_bytes.saturating_sub(others) / 128 * 32;
            let range = (k / 32).div_ceil(self.splits.max(1)) * 32;
            return MatmulKey {
                stage_k: range.min(fit.clamp(32, CHUNK_TILE_MAX_K)),
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

    /// Whether this portable tile kernel rounds its operands as the tensor-core GEMM does
    /// ([`f16_operands`]).
    fn f16_operands(&self) -> bool {
        self.variant.is_tiled() && !self.variant.is_coop() && !self.x16 && f16_operands()
    }

    /// `matmul_q4_k_matvec_wg256`, `matmul_f16_tiled64x64_bias`,
    /// `matmul_q8_0_matvec_sg256_glu_silu_norm`, `matmul_q4_0_matvec_wg256_qkv_norm_bias`, …
    pub fn label(&self) -> String {
        let fusion = match self.fusion {
            Fusion::None => "",
            Fusion::Glu(Activation::Silu) => "_glu_silu",
            Fusion::Glu(Activation::GeluTanh) => "_glu_gelu_tanh",
            Fusion::Qkv => "_qkv",
            Fusion::QkvRope { layout, qk_norm } => match (layout, qk_norm) {
                (RopeLayout::Normal, false) => "_qkv_rope_normal",
                (RopeLayout::Neox, false) => "_qkv_rope_neox",
                (RopeLayout::Normal, true) => "_qkv_rope_normal_qk_norm",
                (RopeLayout::Neox, true) => "_qkv_rope_neox_qk_norm",
            },
            Fusion::PostNorm => "_post_norm",
        };
        let norm = if self.norm { "_norm" } else { "" };
        let bias = if self.bias { "_bias" } else { "" };
        let staged = if self.stage_k > 0 {
            format!("_xs{}", self.stage_k)
        } else {
            String::new()
        };
        let int8 = if self.int8() { "_i8" } else { "" };
        let splits = if self.split_pass() {
            format!("_k{}p", self.splits)
        } else if self.splits > 1 {
            format!("_k{}", self.splits)
        } else {
            String::new()
        };
        let f16 = if self.f16_operands() { "_f16ops" } else { "" };
        let levels = match self.levels {
            XLevels::Staged => "",
            XLevels::Emit => "_lvout",
            XLevels::Read => "_lvin",
        };
        let x16 = match (self.x16, self.sg64) {
            (true, true) => "_x16_sg64",
            (true, false) => "_x16",
            _ => "",
        };
        let vec = if self.vec_stage { "_v4" } else { "" };
        let half = if self.half_w() { "_h16" } else { "" };
        let order = if self.tokens_first() { "_tf" } else { "" };
        let raw = if self.raw_w() { "_raw" } else { "" };
        let raw = if self.wide_prefetch() {
            format!("{raw}_pf")
        } else {
            raw.to_string()
        };
        let vec = format!("{vec}{half}{order}{raw}");
        let block = if self.coop8 && self.variant.is_coop() {
            "_b8"
        } else {
            ""
        };
        let ablated: String = self
            .ablated()
            .iter()
            .map(|a| format!("_{}", a.label()))
            .collect();
        let ablated = if ablated.is_empty() {
            ablated
        } else {
            format!("_ablate{ablated}")
        };
        format!(
            "matmul_{}_{}{fusion}{norm}{bias}{staged}{int8}{levels}{x16}{vec}{block}{splits}{f16}{ablated}",
            self.ty.name().to_lowercase(),
            self.variant.label()
        )
    }

    /// Whether this tensor-core or f16 wide kernel decodes its weights without integer
    /// conversions ([`has_half8`], unless `COCO_COOP_HALF_W=0`: [`coop_half_w`]).
    pub fn half_w(&self) -> bool {
        (self.variant.is_coop() || self.is_wide_f16()) && has_half8(self.ty) && coop_half_w()
    }

    /// The f16 wide tiles loading the next chunk during the products ([`wide_f16_prefetch`]).
    fn wide_prefetch(&self) -> bool {
        self.is_wide_f16() && wide_f16_prefetch()
    }

    /// Whether this is the wide GEMM in f16 (`gemm_wide_f16.wgsl`).
    fn is_wide_f16(&self) -> bool {
        matches!(self.variant, MatmulVariant::Wide(w) if w.half)
    }

    /// Whether the scale pass (`shaders/matmul/token_scale.wgsl`) runs before this product
    /// and its per-token factors are bound last: the tensor-core tiles, the f16 wide tiles.
    pub(super) fn has_token_scales(&self) -> bool {
        self.variant.is_coop() || self.is_wide_f16()
    }

    /// The prestaged tensor-core tiles splitting K, merged by the dispatch after (`SPLIT_PASS`):
    /// the 128-token tiles by default ([`coop_split_pass`]), the 64-token ones with
    /// [`coop64_split_pass`].
    pub fn split_pass(&self) -> bool {
        let wanted = match self.variant {
            MatmulVariant::Coop128 => !self.sg64 && coop_split_pass(),
            MatmulVariant::TiledCoop => coop64_split_pass(),
            _ => false,
        };
        wanted && self.splits > 1 && self.x16
    }

    /// The prestaged 128-token tiles holding the next chunk's weights as loaded words
    /// ([`coop_raw_w`]; `RAW_W`), and the f16 wide tiles: types with [`has_half8`].
    pub fn raw_w(&self) -> bool {
        let held = (self.variant == MatmulVariant::Coop128 && self.x16 && !self.sg64)
            || self.is_wide_f16();
        self.half_w() && held && coop_raw_w()
    }

    /// The prestaged 128-token tiles with their token tiles fastest ([`MatmulKey::tokens_first`]).
    fn tokens_first(&self) -> bool {
        self.tokens_first && self.variant == MatmulVariant::Coop128 && self.x16 && !self.sg64
    }

    /// The parts of the K loop the diagnostic `COCO_ABLATE` leaves out of this kernel
    /// ([`ablations`]): only the prefill tile kernels that have the switches.
    pub fn ablated(&self) -> &'static [Ablation] {
        let has_switches = match self.variant {
            MatmulVariant::Tiled
            | MatmulVariant::TiledCoop
            | MatmulVariant::Wide(_)
            | MatmulVariant::Dot4I8 => true,
            MatmulVariant::Coop128 => self.x16 && !self.sg64,
            _ => false,
        };
        if has_switches {
            ablations()
        } else {
            &[]
        }
    }

    /// The defines that select this variant in `matmul.wgsl` (errors on an unsupported type).
    pub fn defines(&self) -> Result<Vec<&'static str>, KernelError> {
        let mut defines = vec![weight_define(self.ty)?, self.variant.define()];
        if self.variant.is_tiled() {
            defines.push("TILES");
        }
        if matches!(
            self.variant,
            MatmulVariant::MatrixI8 { .. } | MatmulVariant::Dot4I8
        ) {
            if !has_levels8(self.ty) {
                return Err(KernelError::Shape {
                    kernel: "matmul",
                    why: format!("{}: {:?} has no int8 levels", self.label(), self.ty),
                });
            }
            defines.push("LEVELS8");
            defines.push(match self.variant {
                MatmulVariant::MatrixI8 { emulated: true } => "MATRIX_EMULATED",
                MatmulVariant::MatrixI8 { emulated: false } => "GEMM_MATRIX_SUBGROUPS",
                _ => "DOT4_TILES",
            });
        }
        if self.variant.is_coop() || self.is_wide_f16() {
            defines.push("F16_STAGING");
        }
        if self.half_w() {
            defines.extend(["LEVELS8", "HALF_W"]);
        }
        if self.raw_w() {
            defines.push("RAW_W");
        }
        if self.wide_prefetch() {
            defines.push("PREFETCH");
        }
        if self.variant.is_coop() {
            defines.push("COOP_STAGING");
            if self.coop8 {
                defines.push("COOP8");
            }
            if self.tokens_first() {
                defines.push("TOKENS_FIRST");
            }
            if let MatmulVariant::CoopStream(block) = self.variant {
                // Its tile is the device's block; it reads x' only as the f16 rows.
                if block != if self.coop8 { 8 } else { 16 } || !self.x16 {
                    return Err(KernelError::Shape {
                        kernel: "matmul",
                        why: format!(
                            "{}: the short-step tiles need the device's block (8 with COOP8, \
                             else 16) and x' prestaged",
                            self.label()
                        ),
                    });
                }
            }
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
            Fusion::QkvRope { layout, qk_norm } => {
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
                if qk_norm {
                    defines.push("QK_NORM");
                }
            }
            Fusion::PostNorm => {
                if !self.variant.has_post_norm() {
                    return Err(KernelError::Shape {
                        kernel: "matmul_post_norm_add",
                        why: format!(
                            "the post-norm epilogue is in the subgroup and chunk matvecs, not {:?}",
                            self.variant
                        ),
                    });
                }
                defines.push("POST_NORM");
            }
        }
        if self.is_wide_f16() != (self.x16 && !self.variant.is_coop()) {
            return Err(KernelError::Shape {
                kernel: "matmul",
                why: format!(
                    "x' as the scale pass's f16 rows is read by the tensor-core tiles, and \
                     always by the f16 wide tiles: not by {:?} with x16 = {}",
                    self.variant, self.x16
                ),
            });
        }
        if self.x16 {
            // The scale pass applied the norm: the GEMM reads neither x nor norm_w.
            defines.push("X16");
            if self.sg64 {
                if self.variant != MatmulVariant::Coop128 {
                    return Err(KernelError::Shape {
                        kernel: "matmul",
                        why: format!(
                            "64 x 64 subgroup tiles are coop128x128's, not {:?}",
                            self.variant
                        ),
                    });
                }
                defines.push("SG64");
            }
        } else if self.norm {
            defines.push("NORM");
        }
        if self.vec_stage {
            if !self.variant.is_coop() {
                return Err(KernelError::Shape {
                    kernel: "matmul",
                    why: format!(
                        "vec4 staging is the tensor-core tiles', not {:?}",
                        self.variant
                    ),
                });
            }
            defines.push("VEC_STAGE");
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
        if self.int8() {
            defines.push("INT8");
        }
        if self.splits > 1 {
            let coop128_split = self.variant == MatmulVariant::Coop128 && self.x16 && !self.sg64;
            if !coop128_split
                && !matches!(
                    self.variant,
                    MatmulVariant::MatvecChunk
                        | MatmulVariant::MatvecChunkWide(_)
                        | MatmulVariant::Tiled
                        | MatmulVariant::TiledCoop
                        | MatmulVariant::MatrixI8 { .. }
                        | MatmulVariant::Dot4I8
                )
            {
                return Err(KernelError::Shape {
                    kernel: "matmul",
                    why: format!("split K is not in {:?}", self.variant),
                });
            }
            defines.push("SPLIT_K");
            if self.split_pass() {
                defines.push("SPLIT_PASS");
            }
        }
        match self.levels {
            XLevels::Staged => {}
            // The emitter's chunks are whole only in a workgroup of whole chunks of outputs,
            // and its barrier needs every workgroup to reach the epilogue (no split K).
            XLevels::Emit
                if self.int8()
                    && matches!(self.fusion, Fusion::Glu(_))
                    && self.variant.slots_per_group().is_multiple_of(64)
                    && self.splits == 1 =>
            {
                defines.push("EMIT_LEVELS")
            }
            XLevels::Read if self.int8() && !self.norm && self.fusion == Fusion::None => {
                defines.push("LEVELS_IN")
            }
            levels => {
                return Err(KernelError::Shape {
                    kernel: "matmul",
                    why: format!("x' levels {levels:?} do not apply to {}", self.label()),
                })
            }
        }
        if self.f16_operands() {
            defines.push("F16_OPERANDS");
        }
        defines.extend(self.ablated().iter().map(|a| a.define()));
        Ok(defines)
    }

    /// Whether this is the chunk matvec staging x' as int8 levels: its weight type has an
    /// int8 dot product and [`MatvecShape::int8`] is on.
    pub fn int8(&self) -> bool {
        self.variant.is_chunk() && self.int8_candidate()
    }

    /// Whether this key folds the per-head Q/K norm into the Q/K/V + RoPE matvec.
    pub(super) fn has_qk_norm(&self) -> bool {
        matches!(self.fusion, Fusion::QkvRope { qk_norm: true, .. })
    }

    /// This key with x' levels `levels`: an emitter runs unsplit (its epilogue's barrier
    /// needs every workgroup of a row group there), a reader keeps its split.
    pub fn with_levels(self, levels: XLevels) -> MatmulKey {
        let splits = if levels == XLevels::Emit {
            1
        } else {
            self.splits
        };
        MatmulKey {
            levels,
            splits,
            ..self
        }
    }

    /// Whether a chunk matvec of this key would stage int8 levels.
    fn int8_candidate(&self) -> bool {
        has_int8_dot(self.ty) && matvec_shape().int8 && crate::gpu::packed_4x8_dot()
    }

    /// Bindings 1.. in order: weights, x, outputs, norm_w, biases (one per output), inv_freq,
    /// q_norm_w, k_norm_w and the epilogue scratch, post_w and the epilogue scratch, the
    /// levels of x' (written or read), the split scratch, the per-token scales.
    pub(in crate::kernels) fn layout(&self) -> Layout {
        let x = 1 + self.fusion.weights();
        let y = x + 1;
        let norm = y + self.fusion.outputs();
        let bias = norm + (self.norm && !self.x16) as u32;
        let rope = bias + if self.bias { self.fusion.outputs() } else { 0 };
        let qkn = rope + matches!(self.fusion, Fusion::QkvRope { .. }) as u32;
        let post = qkn + 3 * self.has_qk_norm() as u32;
        let levels = post + 2 * (self.fusion == Fusion::PostNorm) as u32;
        // A reader's levels take x's binding.
        let split = levels + (self.levels == XLevels::Emit) as u32;
        let scales = split + (self.splits > 1) as u32;
        let count = scales - 1 + self.has_token_scales() as u32;
        Layout {
            x,
            y,
            norm,
            bias,
            rope,
            qkn,
            post,
            levels,
            split,
            scales,
            count,
        }
    }

    /// Workgroup memory the tensor-core tiles need with x' prestaged (`x16`): the
    /// double-buffered 128-token tiles 48 KiB (`gemm_coop_x16.wgsl`; `_sg64` 44), the 64-token
    /// ones exactly 32 (`gemm_tiled_coop.wgsl`, lavapipe's limit); `None` without it (the
    /// device check covers those: `COOP_GEMM_WORKGROUP_BYTES`).
    pub fn prestage_workgroup_bytes(&self) -> Option<u32> {
        (self.x16 && self.variant.is_coop()).then_some(if self.variant == MatmulVariant::Coop128 {
            48 * 1024
        } else {
            32 * 1024
        })
    }

    /// The preprocessed WGSL, with the grid constants and binding numbers the host also uses
    /// prepended (one source of truth; `GpuContext::pipeline` takes no override constants).
    pub(super) fn source(&self) -> Result<String, KernelError> {
        self.source_for(self.defines()?)
    }

    /// [`MatmulKey::source`] with `defines` in place of the key's own.
    pub(super) fn source_for(&self, defines: Vec<&'static str>) -> Result<String, KernelError> {
        self.source_in(defines, cfg!(target_arch = "wasm32"))
    }

    /// The WGSL the page hands the browser's compiler for this key (its `enable subgroups;`
    /// included), built natively: for checking the subgroup kernels in a browser whose
    /// adapter the page would not run them on (tests/e2e/subgroup_wgsl.test.mjs).
    pub fn browser_source(&self) -> Result<String, KernelError> {
        self.source_in(self.defines()?, true)
    }

    /// The source with `defines`, its directives as the browser (`browser`) or naga needs them.
    fn source_in(&self, defines: Vec<&'static str>, browser: bool) -> Result<String, KernelError> {
        let l = self.layout();
        let (mv_rows, mv_lanes) = match self.variant {
            v if v.is_tiled() => (MV_ROWS, MV_LANES),
            v => v.grid(),
        };
        // Directives come before any declaration.
        let enables = match self.variant {
            MatmulVariant::TiledCoop | MatmulVariant::Coop128 | MatmulVariant::CoopStream(_) => {
                "enable f16;\nenable wgpu_cooperative_matrix;\n"
            }
            MatmulVariant::Wide(w) if w.half => "enable f16;\n",
            // The browser's compiler needs it. naga takes the subgroup builtins without it,
            // and with it (naga 30, lavapipe) the subgroup matvec's sums come out NaN.
            MatmulVariant::MatvecSubgroup
            | MatmulVariant::MatvecChunk
            | MatmulVariant::MatvecChunkWide(_)
                if browser =>
            {
                "enable subgroups;\n"
            }
            // Tint's uniformity analysis proves workgroup uniformity only, and the matrix
            // loads' offsets follow subgroup_id (uniform per subgroup, which is what the
            // builtins need).
            MatmulVariant::MatrixI8 { emulated: false } => {
                "enable subgroups;\nenable chromium_experimental_subgroup_matrix;\n\
                 diagnostic(off, chromium.subgroup_matrix_uniformity);\n"
            }
            _ => "",
        };
        // Groups per trip and rows per task of the subgroup matvec's row loop (its tuned
        // shape); the other kernels don't use them.
        let (mv_unroll, mv_rps) = match self.variant {
            MatmulVariant::MatvecSubgroup => {
                let shape = matvec_shape();
                (shape.unroll, shape.rows_per_task)
            }
            MatmulVariant::MatvecChunk => (1, chunk_shape().1),
            MatmulVariant::MatvecChunkWide(_) => (1, CHUNK_WIDE_ROWS_PER_TASK),
            _ => (2, 1),
        };
        // The tile kernels' tile; the wide GEMM's register tile and K chunk.
        let (tile_n, tile_t, wide) = match self.variant {
            MatmulVariant::Wide(w) => (w.tile().0, w.tile().1, w),
            MatmulVariant::Coop128 => (COOP_TILE, COOP_TILE, WideTile::new(4, 4)),
            MatmulVariant::CoopStream(block) => (block, 2 * block, WideTile::new(4, 4)),
            _ => (TILE_N, TILE_T, WideTile::new(4, 4)),
        };
        let consts = format!(
            "const MV_ROWS: u32 = {mv_rows}u;\nconst MV_LANES: u32 = {mv_lanes}u;\n\
             const MV_UNROLL: u32 = {mv_unroll}u;\nconst MV_RPS: u32 = {mv_rps}u;\n\
             const MV_STAGE_VEC4: u32 = {}u;\n\
             const TILE_N: u32 = {tile_n}u;\nconst TILE_T: u32 = {tile_t}u;\n\
             const GT_N: u32 = {}u;\nconst GT_T: u32 = {}u;\nconst G_KC: u32 = {}u;\n\
             const B_W1: u32 = 2u;\nconst B_W2: u32 = 3u;\nconst B_X: u32 = {}u;\n\
             const B_Y: u32 = {}u;\nconst B_NORM: u32 = {}u;\nconst B_BIAS: u32 = {}u;\n\
             const B_ROPE: u32 = {}u;\nconst B_QKN: u32 = {}u;\nconst B_POST: u32 = {}u;\n\
             const B_LEVELS: u32 = {}u;\nconst B_SPLIT: u32 = {}u;\n\
             const B_SCALES: u32 = {}u;\n\
             const POST_COUNTERS: u32 = {}u;\n",
            (self.stage_k / 4).max(1),
            wide.slots,
            wide.tokens,
            wide.chunk(),
            l.x,
            l.y,
            l.norm,
            l.bias,
            l.rope,
            l.qkn,
            l.post,
            l.levels,
            l.split,
            l.scales,
            super::EPILOGUE_COUNTERS,
        );
        Ok(format!(
            "{enables}{consts}{}",
            preprocess("matmul.wgsl", &defines)
        ))
    }
}

/// Whether `ty`'s dequantizer has `idot32`, the int8 form of its chunk dot product
/// (common/dequant.wgsl): the types whose blocks are integers times one scale (plus an
/// offset or minimum) per 32 elements, or per 16 (Q6_K: each half's int8 dots alone).
pub fn has_int8_dot(ty: GgmlType) -> bool {
    matches!(
        ty,
        GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
    )
}

/// The forms of the subgroup matvecs (the chunk matvec and the lane-per-8 matvec) the page may
/// run for weights of type `ty`, one per fusion, norm, split and x'-levels form: what naga (the
/// unit tests) and the browser's compiler (`examples/subgroup_wgsl.rs`,
/// tests/e2e/subgroup_wgsl.test.mjs) are both held to. Staged for K = 4,096 in WebGPU's
/// guaranteed 16 KiB of workgroup memory, as the page plans for.
pub fn subgroup_matvec_forms(ty: GgmlType) -> Vec<MatmulKey> {
    let form = |variant, fusion, norm, levels, splits| MatmulKey {
        fusion,
        norm,
        levels,
        splits,
        ..MatmulKey::choose(
            DeviceKernels::with_matvec(variant),
            ty,
            1,
            false,
            Some(variant),
        )
    };
    let (chunk, lane8) = (MatmulVariant::MatvecChunk, MatmulVariant::MatvecSubgroup);
    let glu = Fusion::Glu(Activation::Silu);
    let rope = |qk_norm| Fusion::QkvRope {
        layout: RopeLayout::Neox,
        qk_norm,
    };
    let mut forms = vec![
        form(lane8, Fusion::None, true, XLevels::Staged, 1),
        form(lane8, Fusion::PostNorm, false, XLevels::Staged, 1),
        form(chunk, Fusion::PostNorm, false, XLevels::Staged, 1),
        form(chunk, rope(true), true, XLevels::Staged, 1),
        form(chunk, Fusion::None, true, XLevels::Staged, 3),
        form(chunk, Fusion::None, true, XLevels::Staged, 1),
        form(chunk, glu, true, XLevels::Staged, 1),
        form(chunk, rope(false), true, XLevels::Staged, 1),
        form(chunk, Fusion::Qkv, true, XLevels::Staged, 1),
    ];
    if has_int8_dot(ty) {
        let wide = MatmulVariant::MatvecChunkWide(64);
        forms.push(form(wide, glu, true, XLevels::Emit, 1));
        forms.push(form(chunk, Fusion::None, false, XLevels::Read, 1));
    }
    forms
        .into_iter()
        .map(|k| k.staged(4096, 16 * 1024))
        .collect()
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
        GgmlType::Q4_1 => "Q4_1",
        GgmlType::Q5_1 => "Q5_1",
        GgmlType::IQ4_NL => "IQ4_NL",
        GgmlType::Q2_K => "Q2_K",
        GgmlType::Q3_K => "Q3_K",
        GgmlType::IQ4_XS => "IQ4_XS",
        other => {
            return Err(KernelError::Shape {
                kernel: "dequant",
                why: format!("not yet: weights of type {other}"),
            });
        }
    })
}

/// Must match `Params` in matmul.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(in crate::kernels) struct Params {
    pub(in crate::kernels) k: u32,
    pub(in crate::kernels) t: u32,
    pub(in crate::kernels) groups: u32,
    pub(in crate::kernels) row0: u32,
    pub(in crate::kernels) accumulate: u32,
    pub(in crate::kernels) eps: f32,
    pub(in crate::kernels) pos0: u32,
    /// > 0: the output soft-capped, cap·tanh(y / cap), in the store (gemma2's LM head).
    pub(in crate::kernels) softcap: f32,
    pub(in crate::kernels) rows: [u32; 4],
    pub(in crate::kernels) n: [u32; 4],
    pub(in crate::kernels) head_dim: u32,
    /// The stored (or added) value is `scale · (x'·Wᵀ + bias)` (MatmulArgs::scale).
    pub(in crate::kernels) scale: f32,
    /// Workgroups per row group (SPLIT_K; the launch sets it from the key), else 1.
    pub(in crate::kernels) splits: u32,
    /// Rotated pairs per head (`Rotary::dims / 2`; QKV with RoPE only).
    pub(in crate::kernels) rot_half: u32,
    /// The factor on cos and sin of the rotated pairs (`Rotary::scale`; QKV with RoPE only).
    pub(in crate::kernels) rot_scale: f32,
    /// eps of the per-head Q/K norm (QkvRope with qk_norm only).
    pub(in crate::kernels) qk_eps: f32,
    pub(in crate::kernels) _pad: [u32; 2],
}

impl Default for Params {
    /// Everything 0 but the scale and the splits, 1: the products that take no scale store
    /// x'·Wᵀ as it is.
    fn default() -> Self {
        Params {
            scale: 1.0,
            splits: 1,
            ..bytemuck::Zeroable::zeroed()
        }
    }
}
