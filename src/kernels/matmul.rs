//! `shaders/matmul.wgsl`: y[T, N] = x[T, K] · W[N, K]ᵀ (+ bias) (+ y), with W read as raw
//! GGUF blocks and dequantized in registers.
//!
//! Three shapes of the same product, picked by [`MatmulKey::choose`]:
//! - `matvec_wg256`: decode (T small); 256 invocations (SwiftShader's limit) = 8 rows × 32
//!   lanes, each lane taking every 32nd 8-element group of its row (coalesced reads),
//!   shared-memory reduction. What the browser runs.
//! - `matvec_sg256`: the same with `subgroupAdd`, when the device has SUBGROUP (native only:
//!   wgpu's WebGPU backend never enables it).
//! - `tiled64x32`: prefill; a 64-row × 32-token tile per workgroup, each W chunk dequantized
//!   once into workgroup memory and reused by all 32 tokens.
//!
//! A weight split into parts (`GpuTensor::parts`) gets one dispatch per part, each writing its
//! rows' columns of y.

use crate::gguf::GgmlType;
use crate::gpu::{preprocess, Binding, GpuTensor, StepRecorder};

use super::KernelError;

/// Matvec workgroups: MV_ROWS rows × MV_LANES lanes = 256 invocations (browsers allow no
/// more); 32 lanes per row so that a 32-wide warp streams one row.
pub const MV_ROWS: u32 = 8;
pub const MV_LANES: u32 = 32;
/// The tiled variant's output tile: W rows × tokens (the shader's 16×16 invocations each
/// own 4 rows × 2 tokens, so these are fixed by its thread layout).
pub const TILE_N: u32 = 64;
pub const TILE_T: u32 = 32;
/// Up to this many tokens the matvec (which reads W once per token) beats the tiled kernel
/// (which reads it once per 32 tokens but idles most of its tile).
pub const MATVEC_MAX_T: u32 = 3;

/// Which kernel shape computes the product.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum MatmulVariant {
    /// Matrix–vector, shared-memory reduction (every device; the browser path).
    MatvecWorkgroup,
    /// Matrix–vector, subgroup reduction (devices with `Features::SUBGROUP`).
    MatvecSubgroup,
    /// Tiled matrix–matrix (prefill).
    Tiled,
}

impl MatmulVariant {
    fn define(self) -> &'static str {
        match self {
            Self::MatvecWorkgroup => "MATVEC_WG",
            Self::MatvecSubgroup => "MATVEC_SG",
            Self::Tiled => "TILED",
        }
    }

    fn label(self) -> String {
        match self {
            Self::MatvecWorkgroup => format!("matvec_wg{}", MV_ROWS * MV_LANES),
            Self::MatvecSubgroup => format!("matvec_sg{}", MV_ROWS * MV_LANES),
            Self::Tiled => format!("tiled{TILE_N}x{TILE_T}"),
        }
    }
}

/// One compiled variant of `matmul.wgsl`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatmulKey {
    /// The weight's GGUF type: selects the dequantizer.
    pub ty: GgmlType,
    pub variant: MatmulVariant,
    /// Binding 4 holds bias[N] (a binding-layout change).
    pub bias: bool,
}

impl MatmulKey {
    /// The variant for `t` tokens on this device, unless `force`d (tests, A/B runs).
    pub fn choose(
        has_subgroups: bool,
        ty: GgmlType,
        t: u32,
        bias: bool,
        force: Option<MatmulVariant>,
    ) -> MatmulKey {
        let variant = force.unwrap_or(if t > MATVEC_MAX_T {
            MatmulVariant::Tiled
        } else if has_subgroups {
            MatmulVariant::MatvecSubgroup
        } else {
            MatmulVariant::MatvecWorkgroup
        });
        MatmulKey { ty, variant, bias }
    }

    /// `matmul_q4_k_matvec_wg256`, `matmul_f16_tiled64x32_bias`, …
    pub fn label(&self) -> String {
        let bias = if self.bias { "_bias" } else { "" };
        format!(
            "matmul_{}_{}{bias}",
            self.ty.name().to_lowercase(),
            self.variant.label()
        )
    }

    /// The defines that select this variant in `matmul.wgsl` (errors on an unsupported type).
    pub fn defines(&self) -> Result<Vec<&'static str>, KernelError> {
        let mut defines = vec![weight_define(self.ty)?, self.variant.define()];
        if self.bias {
            defines.push("BIAS");
        }
        Ok(defines)
    }
}

/// The preprocessed WGSL for `defines`, with the grid constants the host also uses prepended
/// (one source of truth; `GpuContext::pipeline` takes no override constants).
fn source(defines: &[&str]) -> String {
    let consts = format!(
        "const MV_ROWS: u32 = {MV_ROWS}u;\nconst MV_LANES: u32 = {MV_LANES}u;\n\
         const TILE_N: u32 = {TILE_N}u;\nconst TILE_T: u32 = {TILE_T}u;\n"
    );
    consts + &preprocess("matmul.wgsl", defines)
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
        // +8: the funnelled loads may touch the word after a block.
        if part.n_rows * w.row_bytes + 8 > u32::MAX as u64 {
            return err(format!(
                "{}: a part of {} rows exceeds u32 byte offsets",
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

/// Must match `Params` in matmul.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    k: u32,
    n: u32,
    t: u32,
    row0: u32,
    rows: u32,
    row_bytes: u32,
    accumulate: u32,
    groups: u32,
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
    const KERNEL: &str = "matmul";
    let err = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
    check_weight(KERNEL, w, rec.ctx().max_binding_bytes())?;
    if t == 0 {
        return Ok(());
    }
    let (k, n) = (w.row_len, w.n_rows);
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k)?;
    check_binding(KERNEL, "y [T, N]", y, t as u64 * n)?;
    let bias = args.bias.map(Binding::from);
    if let Some(b) = &bias {
        check_binding(KERNEL, "bias [N]", b, n)?;
    }
    let ctx = rec.ctx();
    let key = MatmulKey::choose(ctx.has_subgroups(), w.ty, t, bias.is_some(), variant);
    if key.variant == MatmulVariant::MatvecSubgroup && !ctx.has_subgroups() {
        return err("the subgroup matvec needs Features::SUBGROUP, which this device lacks".into());
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    let (per_group, t_groups) = match key.variant {
        MatmulVariant::Tiled => (TILE_N, t.div_ceil(TILE_T)),
        _ => (MV_ROWS, t), // one token per z slice
    };
    if t_groups > max {
        return err(format!(
            "{t} tokens need {t_groups} workgroups along z, over the limit {max}"
        ));
    }
    let defines = key.defines()?;
    let label = key.label();
    let pipeline = ctx.pipeline(&label, || source(&defines));
    for part in &w.parts {
        let groups = (part.n_rows as u32).div_ceil(per_group);
        let [gx, gy] = fold(groups, max);
        let params = Params {
            k: k as u32,
            n: n as u32,
            t,
            row0: part.first_row as u32,
            rows: part.n_rows as u32,
            row_bytes: w.row_bytes as u32,
            accumulate: args.accumulate as u32,
            groups,
        };
        let mut bindings = vec![Binding::from(&part.buffer), x.clone(), y.clone()];
        bindings.extend(bias.clone());
        rec.dispatch(
            &label,
            &pipeline,
            bytemuck::bytes_of(&params),
            &bindings,
            [gx, gy, t_groups],
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_variant() {
        let key = MatmulKey::choose(false, GgmlType::Q4_K, 1, false, None);
        assert_eq!(key.label(), "matmul_q4_k_matvec_wg256");
        let key = MatmulKey::choose(true, GgmlType::Q8_0, 1, true, None);
        assert_eq!(key.label(), "matmul_q8_0_matvec_sg256_bias");
        let key = MatmulKey::choose(true, GgmlType::BF16, 64, false, None);
        assert_eq!(key.label(), "matmul_bf16_tiled64x32");
    }

    #[test]
    fn fold_keeps_each_dimension_under_the_limit() {
        assert_eq!(fold(10, 65535), [10, 1]);
        assert_eq!(fold(65536, 65535), [65535, 2]);
        assert_eq!(fold(262144 / 8 * 5, 65535), [65535, 3]);
    }

    #[test]
    fn every_variant_preprocesses() {
        for ty in GgmlType::SUPPORTED {
            for variant in [
                MatmulVariant::MatvecWorkgroup,
                MatmulVariant::MatvecSubgroup,
                MatmulVariant::Tiled,
            ] {
                let src = source(
                    &MatmulKey {
                        ty,
                        variant,
                        bias: true,
                    }
                    .defines()
                    .unwrap(),
                );
                assert!(
                    src.contains("fn dequant32") && src.contains("fn main"),
                    "{ty} {variant:?}"
                );
            }
        }
    }
}
