//! The pass before each tensor-core product (`shaders/matmul/token_scale.wgsl`): each token's
//! power-of-two f16 scale, and by default (`COCO_COOP_PRESTAGE=0` turns it off) its x' staged
//! once as f16 rows.

use crate::gpu::{Binding, StepRecorder, Work};

use super::super::KernelError;
use super::{
    check_binding, check_norm, DeviceKernels, MatmulKey, MatmulVariant, Norm, Params, COOP_TILE,
    TILE_T,
};

/// Tokens per step the tensor-core GEMM's per-token scales cover (the context's scratch
/// holds one f32 each); prefill steps are 512 tokens.
pub const COOP_SCALES_MAX_T: u32 = 8192;

/// Records `shaders/matmul/token_scale.wgsl` for the product `key` is about to run, over its
/// `x` and (when normed) `norm_w`: each of the step's tokens' power-of-two f16 scale into the
/// context's scratch, which it returns as the GEMM's binding at B_SCALES. With `key.x16` the
/// pass also stages x' as f16 rows for every token of the tiles, returned second (the GEMM's
/// x), and the scales become what the sums are multiplied by (the norm's factor included).
pub(super) fn record_token_scales(
    rec: &mut StepRecorder,
    key: &MatmulKey,
    params: &Params,
    x: &Binding,
    norm_w: Option<&Binding>,
) -> Result<(Binding, Option<Binding>), KernelError> {
    const KERNEL: &str = "matmul_token_scale";
    if params.t > COOP_SCALES_MAX_T {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!(
                "not yet: a tensor-core GEMM step of {} tokens (at most {COOP_SCALES_MAX_T})",
                params.t
            ),
        });
    }
    let ctx = rec.ctx();
    let scales =
        Binding::from(&ctx.shared_scratch("coop GEMM token scales", 4 * COOP_SCALES_MAX_T as u64));
    let mut inputs = vec![x.clone()];
    inputs.extend(norm_w.cloned());
    inputs.push(scales.clone());
    // Every token of the tiles gets a row (zeros past the step's).
    let tokens = params.t.div_ceil(key.variant.tile_tokens()) * key.variant.tile_tokens();
    let x16 = if key.x16 {
        let bytes = 2 * tokens as u64 * params.k as u64;
        if bytes > ctx.max_binding_bytes() {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: format!(
                    "not yet: {tokens} tokens of {} f16 values ({bytes} bytes) exceed this \
                     device's largest binding ({} bytes)",
                    params.k,
                    ctx.max_binding_bytes()
                ),
            });
        }
        let x16 = Binding::from(&ctx.shared_scratch_at_least("coop GEMM f16 x'", bytes));
        inputs.push(x16.clone());
        Some(x16)
    } else {
        None
    };
    let (label, defines) = scale_pass(key);
    let pipeline = ctx.pipeline(label, || token_scale_source(defines));
    let scale_params: [u32; 4] = [params.k, params.t, params.eps.to_bits(), 0];
    let workgroups = if key.x16 { tokens } else { params.t };
    // x read once (and norm_w), a factor per token out, and with X16 the f16 rows; Σx² and
    // the scaling are its operations.
    let (t, k) = (params.t as u64, params.k as u64);
    let rows_out = if key.x16 { 2 * tokens as u64 * k } else { 0 };
    let work = Work {
        bytes: 4 * t * k + 4 * k * key.norm as u64 + 4 * t + rows_out,
        flops: 2 * t * k,
    };
    rec.dispatch_counted(
        &pipeline,
        bytemuck::bytes_of(&scale_params),
        &inputs,
        [workgroups, 1, 1],
        Some(work),
    )?;
    Ok((scales, x16))
}

/// The label and defines of the scale pass before the tensor-core or f16 wide product `key`
/// (the latter with `HEADROOM`: its f16 sums need it).
pub(super) fn scale_pass(key: &MatmulKey) -> (&'static str, &'static [&'static str]) {
    if !key.variant.is_coop() {
        return if key.norm {
            (
                "matmul_token_scale_x16_norm_h8",
                &["X16", "NORM", "HEADROOM"],
            )
        } else {
            ("matmul_token_scale_x16_h8", &["X16", "HEADROOM"])
        };
    }
    match (key.x16, key.norm) {
        (true, true) => ("matmul_token_scale_x16_norm", &["X16", "NORM"]),
        (true, false) => ("matmul_token_scale_x16", &["X16"]),
        (false, true) => ("matmul_token_scale_norm", &["NORM"]),
        (false, false) => ("matmul_token_scale", &[]),
    }
}

/// Records the x' staging pass (`X16`) alone, as it runs before a tensor-core
/// product of K = `k` over `t` tokens of `x` (normed by `norm` when given) in tiles of
/// `tile_tokens` (64 or 128): for tests against `reference::matmul::stage_x_f16`. Returns the
/// per-token factors `[t]` f32 and the f16 rows `[t rounded up to tile_tokens, k]`, both the
/// context's scratch, which the next tensor-core product overwrites.
pub fn record_x16_staging(
    rec: &mut StepRecorder,
    x: &Binding,
    norm: Option<Norm>,
    t: u32,
    k: u32,
    tile_tokens: u32,
) -> Result<(Binding, Binding), KernelError> {
    const KERNEL: &str = "matmul_token_scale_x16";
    let variant = match tile_tokens {
        COOP_TILE => MatmulVariant::Coop128,
        TILE_T => MatmulVariant::TiledCoop,
        _ => {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: format!("tiles of {tile_tokens} tokens: {TILE_T} or {COOP_TILE}"),
            })
        }
    };
    if t == 0 || !k.is_multiple_of(32) {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{t} tokens of K = {k}: at least one token, K a multiple of 32"),
        });
    }
    check_binding(KERNEL, "x [T, K]", x, t as u64 * k as u64)?;
    check_norm(KERNEL, norm, k as u64)?;
    let key = MatmulKey {
        norm: norm.is_some(),
        x16: true,
        ..MatmulKey::choose(
            DeviceKernels::of(rec.ctx()),
            crate::gguf::GgmlType::F32,
            t,
            false,
            Some(variant),
        )
    };
    let params = Params {
        k,
        t,
        eps: norm.map_or(0.0, |n| n.1),
        ..Params::default()
    };
    let (scales, x16) = record_token_scales(rec, &key, &params, x, norm.map(|n| n.0))?;
    Ok((scales, x16.expect("x16 keys stage x'")))
}

/// `shaders/matmul/token_scale.wgsl` with `defines` (`X16` writes f16: `enable f16;`).
pub(super) fn token_scale_source(defines: &[&str]) -> String {
    let enable = if defines.contains(&"X16") {
        "enable f16;\n"
    } else {
        ""
    };
    format!(
        "{enable}{}",
        crate::gpu::preprocess("matmul/token_scale.wgsl", defines)
    )
}
