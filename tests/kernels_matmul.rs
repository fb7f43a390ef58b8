//! `kernels::matmul` and `kernels::get_rows` on the GPU against `reference::{matmul, quant}`,
//! for every weight type coco reads, and `reference::quant` against gguf-py's bytes.
//!
//! Run on lavapipe:
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --test kernels_matmul -- --nocapture` (prints the max error of every case).
//!
//! Weights are random values quantized by `reference::quant`; the reference multiplies their
//! CPU dequantization in f64, so a GPU result differs from it only by f32 rounding of the
//! dot product. The tolerance is `atol + rtol·|ref|` with atol = 2e-6·Σ|w·x| (the scale of an
//! f32 sum's rounding error) and rtol = 1e-5.

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{Binding, GpuTensor, StepRecorder};
use coco::kernels::get_rows::get_rows;
use coco::kernels::matmul::MatmulVariant::{
    self, Coop128, CoopStream, Dot4I8, MatrixI8, MatvecChunk, MatvecChunkWide, MatvecRows,
    MatvecSubgroup, MatvecWorkgroup, Tiled, TiledCoop,
};
use coco::kernels::matmul::{has_levels8, matmul_variant, MatmulArgs, WideTile};
use coco::reference::{matmul as reference, ops, quant};
use common::{ctx, is_k_quant, RTOL};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// K for the type: 2 super-blocks for K-quants and IQ4_XS, else 5 blocks of 32 (an odd block
/// count, so Q8_0/Q4_0/Q5_0/IQ4_NL rows alternate between word-aligned and 2-mod-4 starts).
fn k_for(ty: GgmlType) -> usize {
    if is_k_quant(ty) {
        512
    } else {
        160
    }
}

/// Random `[rows, k]` weights of type `ty`: the raw bytes and their dequantized values.
/// Rows get different magnitudes (and a few outliers) so per-block scales vary.
fn random_weights(
    rng: &mut ChaCha8Rng,
    ty: GgmlType,
    rows: usize,
    k: usize,
) -> (Vec<u8>, Vec<f32>) {
    let mut values = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let scale = rng.gen_range(0.05f32..2.0);
        for _ in 0..k {
            let outlier = if rng.gen_ratio(1, 200) { 6.0 } else { 1.0 };
            values.push(rng.gen_range(-1.0f32..1.0) * scale * outlier);
        }
    }
    let bytes = quant::quantize(ty, &values).expect("quantize");
    let deq = quant::dequantize(ty, &bytes, values.len()).expect("dequantize");
    (bytes, deq)
}

fn random_f32(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

#[derive(Clone, Copy, Debug)]
struct Case {
    ty: GgmlType,
    n: usize,
    k: usize,
    t: usize,
    variant: Option<MatmulVariant>,
    bias: bool,
    accumulate: bool,
    /// MatmulArgs::scale (granite's residual and logit scales): 1 in most cases.
    scale: f32,
    /// Rows per part when the weight is split (a multiple of 4, see `GpuTensor::rows_per_part`).
    part_rows: Option<usize>,
    /// Soft-cap the outputs in the store (gemma2's LM head), with a cap of a third of the
    /// largest |output|, so most outputs bend and the largest saturate.
    softcap: bool,
    /// Every other token's x times this (1 in most cases): past f16's 65,504 it checks that
    /// the tensor-core GEMM stages such tokens scaled, per token.
    odd_token_x: f32,
}

impl Case {
    fn new(ty: GgmlType, n: usize, t: usize, variant: Option<MatmulVariant>) -> Case {
        Case {
            ty,
            n,
            k: k_for(ty),
            t,
            variant,
            bias: false,
            accumulate: false,
            scale: 1.0,
            part_rows: None,
            softcap: false,
            odd_token_x: 1.0,
        }
    }
    /// Odd tokens' x around ±2^20, far past f16's range.
    fn beyond_f16(self) -> Case {
        Case {
            odd_token_x: (1 << 20) as f32,
            ..self
        }
    }
    /// Odd tokens' x around ±2^-20: the f16 wide tiles' scale pass brings them up.
    fn tiny(self) -> Case {
        Case {
            odd_token_x: 1.0 / (1 << 20) as f32,
            ..self
        }
    }
    fn softcap(self) -> Case {
        Case {
            softcap: true,
            ..self
        }
    }
    fn bias(self) -> Case {
        Case { bias: true, ..self }
    }
    /// y (+)= 0.22 · (x·Wᵀ + b) (granite-3.x's residual multiplier).
    fn scaled(self) -> Case {
        Case {
            scale: 0.22,
            ..self
        }
    }
    fn accumulate(self) -> Case {
        Case {
            accumulate: true,
            ..self
        }
    }
    /// A longer row: matvec lanes then take both its unrolled loop and its tail.
    fn long(self) -> Case {
        Case {
            k: self.k * 5 / 2 + if is_k_quant(self.ty) { 0 } else { 400 },
            ..self
        }
    }
    /// K past the chunk matvec's largest staged tile (4,096), so it runs several tiles.
    fn wide(self) -> Case {
        Case { k: 4352, ..self }
    }
    fn split(self, rows: usize) -> Case {
        Case {
            part_rows: Some(rows),
            ..self
        }
    }
}

/// The wide GEMM with `slots` × `tokens` per thread.
fn wide(slots: u32, tokens: u32) -> MatmulVariant {
    MatmulVariant::Wide(WideTile::new(slots, tokens))
}

/// The same in f16 (`gemm_wide_f16.wgsl`).
fn wide_f16(slots: u32, tokens: u32) -> MatmulVariant {
    MatmulVariant::Wide(WideTile::new(slots, tokens).f16())
}

/// Runs one matmul on the GPU and checks it against the reference; returns the max |error|.
fn run_matmul(case: Case, seed: u64) -> f64 {
    let ctx = ctx();
    let Case { ty, n, k, t, .. } = case;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (bytes, w) = random_weights(&mut rng, ty, n, k);
    let mut x = random_f32(&mut rng, t * k);
    for row in x.chunks_mut(k).skip(1).step_by(2) {
        row.iter_mut().for_each(|v| *v *= case.odd_token_x);
    }
    let bias = random_f32(&mut rng, n);
    // Without accumulation y starts as NaN, so an output the kernel never wrote fails.
    let y0: Vec<f32> = if case.accumulate {
        random_f32(&mut rng, t * n)
    } else {
        vec![f32::NAN; t * n]
    };

    let row_bytes = ty.bytes_for(k as u64).unwrap();
    let max_part = case
        .part_rows
        .map_or(u64::MAX, |r| (r as u64 * row_bytes).div_ceil(16) * 16);
    let wt = GpuTensor::from_bytes(ctx, "w", ty, k as u64, n as u64, &bytes, max_part);
    if let Some(rows) = case.part_rows {
        assert_eq!(
            wt.parts.len(),
            n.div_ceil(rows),
            "the weight should be split into parts"
        );
    }
    let xb = ctx.storage_buffer_init("x", bytemuck::cast_slice(&x));
    let yb = ctx.storage_buffer_init("y", bytemuck::cast_slice(&y0));
    let bb = ctx.storage_buffer_init("bias", bytemuck::cast_slice(&bias));

    let mut rec = StepRecorder::new(ctx);
    let args = MatmulArgs {
        bias: case.bias.then_some(&bb),
        accumulate: case.accumulate,
        softcap: None, // set below, from the reference's range
        scale: case.scale,
        x_levels: None,
    };
    matmul_variant(
        &mut rec,
        &wt,
        &Binding::from(&xb),
        &Binding::from(&yb),
        t as u32,
        args,
        case.variant,
    )
    .expect("matmul");
    let labels = common::product_labels(&rec);
    drop(rec);
    // The int8 chunk matvec multiplies W by x' as it stages it (two int8 levels per chunk):
    // its oracle is the product with that x'', give or take a level where the staging's
    // roundings sit at a tie (reference::quant::x_seen).
    let seen = quant::x_seen(&x, None, t, k, 0.0, common::x_levels(&labels[0]));
    let mut want = reference::matmul(&w, &seen.values, n, k, t);
    let abs = reference::matmul_abs(&w, &seen.values, n, k, t);
    let slack = reference::matmul_abs(&w, &seen.slack, n, k, t);
    for (i, v) in want.iter_mut().enumerate() {
        if case.bias {
            *v += bias[i % n];
        }
        *v *= case.scale;
        if case.accumulate {
            *v += y0[i];
        }
    }
    // (the soft-capped cases never accumulate: the cap applies to the stored value)
    let cap = case
        .softcap
        .then(|| want.iter().fold(0f32, |m, v| m.max(v.abs())) / 3.0);
    if let Some(cap) = cap {
        for v in want.iter_mut() {
            *v = ops::softcap(*v as f64, cap) as f32;
        }
    }

    let mut rec = StepRecorder::new(ctx);
    let args = MatmulArgs {
        softcap: cap,
        ..args
    };
    matmul_variant(
        &mut rec,
        &wt,
        &Binding::from(&xb),
        &Binding::from(&yb),
        t as u32,
        args,
        case.variant,
    )
    .expect("matmul");
    assert_eq!(
        common::product_labels(&rec),
        labels,
        "the same kernels with the soft-cap set"
    );
    rec.submit();
    let got = ctx.read_f32(&yb, 0, (t * n) as u64).expect("readback");
    ctx.check_health()
        .unwrap_or_else(|e| panic!("{case:?} ({}): {e}", labels[0]));
    // Unforced cases pick the device's kernel, which is the f16 one on tensor-core adapters.
    let atol_per_abs = common::atol_per_abs_sum(&labels[0]);
    let want: Vec<f64> = want[..t * n].iter().map(|&w| w as f64).collect();
    let max_err = common::assert_close(
        &format!("{case:?} ({})", labels[0]),
        &got[..t * n],
        &want,
        |i, r| atol_per_abs * abs[i] as f64 + 1e-6 + RTOL * r.abs() + slack[i] as f64,
        n,
    )
    .abs;
    println!(
        "{:<34} T={:<3} N={:<4} K={:<4} bias={:<5} acc={:<5} cap={cap:<9?} scale={:<4} parts={:<2} max|err| {max_err:.2e}",
        labels[0],
        t,
        n,
        k,
        case.bias,
        case.accumulate,
        case.scale,
        wt.parts.len()
    );
    max_err
}

/// Every kernel shape, with and without bias/accumulation, whole and split, for one type.
fn matmul_type(ty: GgmlType) {
    let sg = ctx().has_subgroups();
    let mut cases = vec![
        Case::new(ty, 67, 1, Some(MatvecWorkgroup)),
        Case::new(ty, 67, 3, Some(MatvecWorkgroup))
            .bias()
            .accumulate()
            .scaled(),
        Case::new(ty, 67, 2, Some(MatvecWorkgroup)).long(),
        // The longest step the matvec runs (MATVEC_MAX_T: short prompts).
        Case::new(ty, 67, 32, Some(MatvecWorkgroup)).accumulate(),
        Case::new(ty, 67, 1, Some(MatvecRows)),
        Case::new(ty, 67, 3, Some(MatvecRows)).long(),
        Case::new(ty, 67, 17, Some(Tiled)),
        Case::new(ty, 131, 33, Some(Tiled))
            .bias()
            .accumulate()
            .scaled(),
        Case::new(ty, 67, 70, Some(Tiled)).accumulate(), // two token tiles, the last of 6
        Case::new(ty, 67, 1, None).bias().scaled(),
        Case::new(ty, 67, 33, None).accumulate(),
        // Split weights: 67 rows in parts of 12 → 6 parts, the last of 7 rows.
        Case::new(ty, 67, 1, Some(MatvecWorkgroup))
            .bias()
            .accumulate()
            .split(12),
        Case::new(ty, 67, 17, Some(Tiled))
            .bias()
            .accumulate()
            .split(12),
        Case::new(ty, 67, 5, Some(Tiled)).split(12),
        // gemma2's LM head: the final soft-cap in the store, on every product shape.
        Case::new(ty, 67, 1, Some(MatvecWorkgroup)).softcap(),
        Case::new(ty, 67, 3, Some(MatvecRows)).bias().softcap(),
        Case::new(ty, 67, 33, Some(Tiled)).softcap(),
        Case::new(ty, 67, 17, Some(Tiled)).split(12).softcap(),
        // K split among workgroups (tile_splits: 17 ranges of 8 chunks), one and two token tiles.
        Case::new(ty, 67, 17, Some(Tiled)).wide(),
        Case::new(ty, 67, 70, Some(Tiled))
            .wide()
            .bias()
            .accumulate(),
        // The wide GEMM, each register tile: partial slot and token tiles, two of each.
        Case::new(ty, 131, 33, Some(wide(8, 4)))
            .bias()
            .accumulate()
            .scaled(),
        Case::new(ty, 67, 70, Some(wide(8, 4))).accumulate(),
        Case::new(ty, 67, 140, Some(wide(4, 8))).bias(),
        Case::new(ty, 67, 17, Some(wide(4, 4))).split(12),
        Case::new(ty, 67, 17, Some(wide(8, 4))).split(12).softcap(),
    ];
    if sg {
        cases.extend([
            Case::new(ty, 67, 1, Some(MatvecSubgroup)),
            Case::new(ty, 67, 2, Some(MatvecSubgroup)).long(),
            Case::new(ty, 67, 3, Some(MatvecSubgroup))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 67, 32, Some(MatvecSubgroup)).bias(),
            Case::new(ty, 67, 1, Some(MatvecSubgroup))
                .bias()
                .accumulate()
                .split(12),
            Case::new(ty, 67, 1, Some(MatvecChunk)),
            Case::new(ty, 67, 2, Some(MatvecChunk)).long(),
            Case::new(ty, 67, 3, Some(MatvecChunk))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 67, 32, Some(MatvecChunk)).accumulate(),
            Case::new(ty, 67, 1, Some(MatvecChunk))
                .bias()
                .accumulate()
                .split(12),
            Case::new(ty, 19, 1, Some(MatvecChunk)).wide(),
            Case::new(ty, 67, 1, Some(MatvecSubgroup))
                .split(12)
                .softcap(),
            Case::new(ty, 67, 2, Some(MatvecChunk)).softcap(),
            Case::new(ty, 19, 1, Some(MatvecChunk)).wide().softcap(),
            Case::new(ty, 67, 2, Some(MatvecChunkWide(64)))
                .long()
                .bias(),
            Case::new(ty, 19, 1, Some(MatvecChunkWide(32)))
                .wide()
                .accumulate(),
        ]);
    } else {
        println!("{ty}: no SUBGROUP on this adapter; subgroup matvec not tested");
    }
    if ctx().has_f16() {
        // The wide GEMM in f16, each register tile: partial slot and token tiles, two of each,
        // split weights, long K, tokens past f16's range and tokens far below it (scaled up).
        cases.extend([
            Case::new(ty, 131, 33, Some(wide_f16(8, 4)))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 67, 70, Some(wide_f16(8, 4))).accumulate(),
            Case::new(ty, 67, 140, Some(wide_f16(4, 8))).bias(),
            Case::new(ty, 67, 17, Some(wide_f16(4, 4))).split(12),
            Case::new(ty, 67, 17, Some(wide_f16(8, 4)))
                .split(12)
                .softcap(),
            Case::new(ty, 67, 9, Some(wide_f16(4, 8))).beyond_f16(),
            Case::new(ty, 67, 9, Some(wide_f16(4, 4))).tiny(),
            Case::new(ty, 67, 17, Some(wide_f16(4, 8))).wide(),
        ]);
    } else {
        println!("{ty}: no shader-f16 on this adapter; the f16 wide tiles are not tested");
    }
    if ctx().has_coop_gemm() {
        cases.extend([
            Case::new(ty, 67, 17, Some(TiledCoop)),
            Case::new(ty, 131, 33, Some(TiledCoop))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 67, 70, Some(TiledCoop)).accumulate(),
            Case::new(ty, 67, 33, Some(TiledCoop)).softcap(),
            Case::new(ty, 67, 9, Some(TiledCoop)).beyond_f16(),
            Case::new(ty, 67, 9, Some(TiledCoop)).wide().beyond_f16(),
            Case::new(ty, 131, 70, Some(TiledCoop)).wide().accumulate(),
            Case::new(ty, 67, 17, Some(TiledCoop))
                .bias()
                .accumulate()
                .split(12),
        ]);
        // The short-step tiles (COCO_COOP_STREAM): one and several token tiles, partial ones,
        // long K (every subgroup several chunks, the last ones past K's end).
        let stream = CoopStream(ctx().coop_block.expect("coop GEMM on"));
        cases.extend([
            Case::new(ty, 67, 5, Some(stream)),
            Case::new(ty, 131, 32, Some(stream))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 67, 17, Some(stream)).softcap(),
            Case::new(ty, 67, 9, Some(stream)).beyond_f16(),
            Case::new(ty, 67, 23, Some(stream)).wide().accumulate(),
        ]);
    }
    if ctx().has_coop_gemm() {
        common::say_coop128_form();
        cases.extend([
            // 128 × 128 tiles: partial in slots and tokens, a second token tile, 2 slot tiles.
            Case::new(ty, 67, 17, Some(Coop128)),
            Case::new(ty, 131, 33, Some(Coop128))
                .bias()
                .accumulate()
                .scaled(),
            Case::new(ty, 200, 150, Some(Coop128)).accumulate(),
            Case::new(ty, 67, 33, Some(Coop128)).softcap(),
            Case::new(ty, 67, 9, Some(Coop128)).beyond_f16(),
            // Long K: prestaged, split 17 ways (coop128_splits), one and four
            // tiles.
            Case::new(ty, 67, 17, Some(Coop128)).wide(),
            Case::new(ty, 131, 150, Some(Coop128))
                .wide()
                .bias()
                .accumulate(),
        ]);
    }
    if !ctx().has_coop_gemm() {
        println!(
            "{ty}: the f16 cooperative-matrix GEMM is off (not offered here, or COCO_COOPMAT=0); not run"
        );
    }
    if has_levels8(ty) {
        // The browser's int8 subgroup-matrix GEMM with the matrix builtins emulated
        // (dot4I8Packed), and the dot-product tiles with 4 × 4 sums per thread and x' as one
        // level (gemm=dot4): staging, levels, scales and stores; partial slot and token tiles,
        // two of each, split weights, long K (split too). Their x'' is `common::x_levels`'.
        for int8 in [MatrixI8 { emulated: true }, Dot4I8] {
            cases.extend([
                Case::new(ty, 67, 17, Some(int8)),
                Case::new(ty, 131, 33, Some(int8))
                    .bias()
                    .accumulate()
                    .scaled(),
                Case::new(ty, 67, 70, Some(int8)).accumulate(),
                Case::new(ty, 67, 33, Some(int8)).softcap(),
                Case::new(ty, 67, 17, Some(int8)).bias().split(12),
                Case::new(ty, 67, 17, Some(int8)).wide(),
                Case::new(ty, 131, 70, Some(int8)).wide(),
            ]);
        }
    }
    let mut worst = 0f64;
    for (i, case) in cases.into_iter().enumerate() {
        if !common::variant_selected(case.variant) {
            continue;
        }
        worst = worst.max(run_matmul(case, 1000 * ty.id() as u64 + i as u64));
    }
    println!("{ty}: matmul max|err| over all cases {worst:.2e}");
}

#[test]
fn matmul_f32() {
    matmul_type(GgmlType::F32);
}
#[test]
fn matmul_f16() {
    matmul_type(GgmlType::F16);
}
#[test]
fn matmul_bf16() {
    matmul_type(GgmlType::BF16);
}
#[test]
fn matmul_q8_0() {
    matmul_type(GgmlType::Q8_0);
}
#[test]
fn matmul_q4_0() {
    matmul_type(GgmlType::Q4_0);
}
#[test]
fn matmul_q5_0() {
    matmul_type(GgmlType::Q5_0);
}
#[test]
fn matmul_q4_k() {
    matmul_type(GgmlType::Q4_K);
}
#[test]
fn matmul_q5_k() {
    matmul_type(GgmlType::Q5_K);
}
#[test]
fn matmul_q6_k() {
    matmul_type(GgmlType::Q6_K);
}
#[test]
fn matmul_q4_1() {
    matmul_type(GgmlType::Q4_1);
}
#[test]
fn matmul_q5_1() {
    matmul_type(GgmlType::Q5_1);
}
#[test]
fn matmul_iq4_nl() {
    matmul_type(GgmlType::IQ4_NL);
}
#[test]
fn matmul_q2_k() {
    matmul_type(GgmlType::Q2_K);
}
#[test]
fn matmul_q3_k() {
    matmul_type(GgmlType::Q3_K);
}
#[test]
fn matmul_iq4_xs() {
    matmul_type(GgmlType::IQ4_XS);
}

/// Large vocabularies need more matvec workgroups than one dimension allows; this shape
/// (530,000 rows / 8 per workgroup = 66,250 > 65,535) exercises the 2-D fold.
/// The x' staging pass (`X16`, the tensor-core tiles' f16 rows) against
/// its CPU reference, on any adapter with f16 (the tiles themselves need tensor cores): the
/// rows to an f16 step (lavapipe's conversion may round toward zero), zeros up to the tile's
/// last token, and the factors the sums are multiplied by; odd tokens at ±2^20 must come back
/// scaled into f16's range.
#[test]
fn x16_staging_matches_its_reference() {
    let ctx = ctx();
    if !ctx.has_f16() {
        println!("no shader-f16 on this adapter: the f16 staging pass is not run");
        return;
    }
    for (seed, t, k, normed, tile) in [
        (1u64, 5usize, 96usize, false, 64u32),
        (2, 70, 160, true, 64),
        (3, 130, 64, true, 128),
        (4, 9, 2048, false, 128),
    ] {
        let mut x = common::random_uniform(seed, t * k, 3.0);
        for (i, v) in x.iter_mut().enumerate() {
            if (i / k) % 2 == 1 && i % 7 == 0 {
                *v *= 1.0 + (1u32 << 20) as f32 / 3.0;
            }
        }
        let norm_w = common::random_uniform(seed + 100, k, 2.0);
        let eps = 1e-5;
        let xb = common::upload_f32("x", &x);
        let nb = common::upload_f32("norm_w", &norm_w);
        let nbind = Binding::from(&nb);
        let norm = normed.then_some((&nbind, eps));
        let mut rec = StepRecorder::new(ctx);
        let (factors, rows) = coco::kernels::matmul::record_x16_staging(
            &mut rec,
            &Binding::from(&xb),
            norm,
            t as u32,
            k as u32,
            tile,
        )
        .expect("staging");
        // Both outputs are the context's scratch, which a tensor-core product of another test
        // thread rewrites: copied out in the same submission, before any other can run.
        let padded = t.div_ceil(tile as usize) * tile as usize;
        let factors_copy = ctx.storage_buffer("factors", 4 * t as u64);
        let rows_copy = ctx.storage_buffer("rows", 2 * (padded * k) as u64);
        rec.submit_with(|encoder| {
            encoder.copy_buffer_to_buffer(&factors.buffer, 0, &factors_copy, 0, 4 * t as u64);
            encoder.copy_buffer_to_buffer(&rows.buffer, 0, &rows_copy, 0, 2 * (padded * k) as u64);
        });
        let (want_factors, want_rows) =
            reference::stage_x_f16(&x, normed.then_some((&norm_w[..], eps)), t, k);
        let what = format!("x16 staging, T={t} K={k} norm={normed} tile={tile}");
        let got = common::read_f32(&factors_copy, t);
        common::assert_close_f32(&format!("{what}: factors"), &got, &want_factors, 0.0, 1e-5);
        let words = ctx
            .read_f32(&rows_copy, 0, (padded * k / 2) as u64)
            .expect("readback");
        let got: Vec<f32> = bytemuck::cast_slice::<f32, u16>(&words)
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect();
        let want: Vec<f32> = want_rows
            .iter()
            .map(|v| v.to_f32())
            .chain(std::iter::repeat_n(0.0, (padded - t) * k))
            .collect();
        assert!(
            got.iter().all(|v| v.abs() <= 32768.0),
            "{what}: a value past 2^15"
        );
        // One f16 step at the value's magnitude: 2^-10 relative, 2^-24 below the normals.
        common::assert_close_f32(&format!("{what}: rows"), &got, &want, 6e-8, 1.0 / 1024.0);
    }
}

#[test]
fn matmul_folds_workgroups_past_the_dimension_limit() {
    let mut case = Case::new(GgmlType::Q8_0, 530_000, 1, Some(MatvecWorkgroup));
    case.k = 32;
    run_matmul(case, 7);
    if ctx().has_subgroups() {
        run_matmul(
            Case {
                variant: Some(MatvecSubgroup),
                ..case
            },
            8,
        );
    }
}

// ---- get_rows ----

/// Looks up `t` ids (with repeats and one id past the table) in a `[37, K]` table.
fn run_get_rows(ty: GgmlType, part_rows: Option<usize>, seed: u64) {
    let ctx = ctx();
    let (rows, dim, t) = (37usize, k_for(ty), 19usize);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (bytes, table) = random_weights(&mut rng, ty, rows, dim);
    let mut ids: Vec<u32> = (0..t).map(|_| rng.gen_range(0..rows as u32)).collect();
    ids[3] = rows as u32 - 1;
    ids[4] = 0;
    ids[7] = ids[2];
    ids[11] = rows as u32 + 5; // past the table: a zero row
    let scale = 1.7f32;

    let row_bytes = ty.bytes_for(dim as u64).unwrap();
    let max_part = part_rows.map_or(u64::MAX, |r| (r as u64 * row_bytes).div_ceil(16) * 16);
    let tt = GpuTensor::from_bytes(ctx, "table", ty, dim as u64, rows as u64, &bytes, max_part);
    let idb = ctx.storage_buffer_init("ids", bytemuck::cast_slice(&ids));
    let nan = vec![f32::NAN; t * dim];
    let out = ctx.storage_buffer_init("out", bytemuck::cast_slice(&nan));
    let mut rec = StepRecorder::new(ctx);
    get_rows(
        &mut rec,
        &tt,
        &Binding::from(&idb),
        &Binding::from(&out),
        t as u32,
        scale,
    )
    .expect("get_rows");
    rec.submit();
    let got = ctx.read_f32(&out, 0, (t * dim) as u64).expect("readback");
    let want = reference::get_rows(&table, dim, &ids, scale);
    let mut max_err = 0f64;
    for i in 0..t * dim {
        let (g, r) = (got[i] as f64, want[i] as f64);
        let err = (g - r).abs();
        // scale · (d·sc·q − dmin·m): the GPU may fuse a multiply-add, a few ulps at most.
        let tol = 1e-6 * r.abs() + 1e-6;
        assert!(
            err <= tol,
            "get_rows {ty} parts={}: first mismatch at out[t={}, {}] (id {}): gpu {g} vs reference {r}",
            tt.parts.len(),
            i / dim,
            i % dim,
            ids[i / dim]
        );
        max_err = max_err.max(err);
    }
    println!(
        "get_rows_{:<6} T={t} dim={dim} parts={:<2} max|err| {max_err:.2e}",
        ty.name().to_lowercase(),
        tt.parts.len()
    );
}

#[test]
fn get_rows_every_type_whole_and_split() {
    for ty in GgmlType::SUPPORTED {
        run_get_rows(ty, None, ty.id() as u64);
        run_get_rows(ty, Some(8), 100 + ty.id() as u64); // 37 rows → parts of 8, 8, 8, 8, 5
    }
}

/// A table over several relay pieces (`layout::RELAY_PIECE_BYTES` of file bytes each), whole
/// and split: the blocks of every piece, and of every part, land in their planes. Rows read
/// are those either side of each piece boundary, plus the first and last.
#[test]
fn get_rows_across_relay_pieces() {
    let ctx = ctx();
    for ty in GgmlType::SUPPORTED {
        if !coco::gpu::layout::is_relaid(ty) {
            continue;
        }
        let dim = k_for(ty);
        let row_bytes = ty.bytes_for(dim as u64).unwrap() as usize;
        let piece = coco::gpu::layout::RELAY_PIECE_BYTES;
        let rows = (2 * piece + piece / 2) / row_bytes;
        let mut rng = ChaCha8Rng::seed_from_u64(500 + ty.id() as u64);
        let (bytes, table) = random_weights(&mut rng, ty, rows, dim);
        let mut ids = vec![0u32, rows as u32 - 1];
        for b in 1..=2 {
            let r = (b * piece / row_bytes) as u32;
            ids.extend([r - 1, r, r + 1]);
        }
        for part_rows in [None, Some(rows / 3 / 4 * 4)] {
            let max_part = part_rows.map_or(u64::MAX, |r| {
                (r as u64 * row_bytes as u64).div_ceil(16) * 16
            });
            let tt =
                GpuTensor::from_bytes(ctx, "table", ty, dim as u64, rows as u64, &bytes, max_part);
            let idb = ctx.storage_buffer_init("ids", bytemuck::cast_slice(&ids));
            let out = ctx.storage_buffer("out", (ids.len() * dim * 4) as u64);
            let mut rec = StepRecorder::new(ctx);
            get_rows(
                &mut rec,
                &tt,
                &Binding::from(&idb),
                &Binding::from(&out),
                ids.len() as u32,
                1.0,
            )
            .expect("get_rows");
            rec.submit();
            let got = ctx
                .read_f32(&out, 0, (ids.len() * dim) as u64)
                .expect("readback");
            let want = reference::get_rows(&table, dim, &ids, 1.0);
            for i in 0..got.len() {
                assert!(
                    (got[i] - want[i]).abs() <= 1e-6 * want[i].abs() + 1e-6,
                    "{ty} rows={rows} parts={}: out[{}, {}] (row {}): gpu {} vs reference {}",
                    tt.parts.len(),
                    i / dim,
                    i % dim,
                    ids[i / dim],
                    got[i],
                    want[i]
                );
            }
            println!(
                "get_rows_{ty} over {} bytes, parts={}: ok",
                bytes.len(),
                tt.parts.len()
            );
        }
    }
}

// ---- reference::quant against gguf-py (tests/goldens/quant_*.json, tools/quant_goldens.py) ----

fn golden(ty: GgmlType) -> serde_json::Value {
    let path = format!(
        "{}/tests/goldens/quant_{}.json",
        env!("CARGO_MANIFEST_DIR"),
        ty.name().to_lowercase()
    );
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e} (run tools/quant_goldens.py)"));
    serde_json::from_str(&text).expect("golden JSON")
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect()
}

#[test]
fn dequantize_matches_gguf_py() {
    for ty in GgmlType::SUPPORTED {
        let g = golden(ty);
        let n = g["n"].as_u64().unwrap() as usize;
        let bytes = hex(g["bytes"].as_str().unwrap());
        let want = floats(&g["dequant"]);
        let got = quant::dequantize(ty, &bytes, n).unwrap();
        for i in 0..n {
            // Same f32 operations in the same order as gguf-py: bit-exact.
            assert!(
                got[i].to_bits() == want[i].to_bits(),
                "{ty} dequantize: first mismatch at [{i}]: coco {} vs gguf-py {}",
                got[i],
                want[i]
            );
        }
    }
}

#[test]
fn quantize_matches_gguf_py() {
    // gguf-py quantizes these with ggml's reference rounding; the K-quant and IQ4 goldens have
    // no input.
    for ty in [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_1,
        GgmlType::Q5_1,
    ] {
        let g = golden(ty);
        let input = floats(&g["input"]);
        let want = hex(g["bytes"].as_str().unwrap());
        let got = quant::quantize(ty, &input).unwrap();
        assert_eq!(got.len(), want.len(), "{ty}");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{ty} quantize: first differing byte {i}: coco {:#04x} vs gguf-py {:#04x}",
                got[i], want[i]
            );
        }
    }
}

// ---- throughput (not a correctness test) ----

/// Median time of one matmul dispatch, from `reps` steps of `per_step` dependent dispatches
/// each (one compute pass per step, as a decode step records them).
fn time_matmul(
    wt: &GpuTensor,
    x: &wgpu::Buffer,
    y: &wgpu::Buffer,
    t: u32,
    variant: MatmulVariant,
) -> f64 {
    let ctx = ctx();
    let (per_step, reps) = (20, 7);
    let mut times = Vec::new();
    for rep in 0..reps + 1 {
        let mut rec = StepRecorder::new(ctx);
        for _ in 0..per_step {
            let args = MatmulArgs {
                accumulate: true,
                ..MatmulArgs::default()
            };
            matmul_variant(
                &mut rec,
                wt,
                &Binding::from(x),
                &Binding::from(y),
                t,
                args,
                Some(variant),
            )
            .expect("matmul");
        }
        let start = std::time::Instant::now();
        rec.submit();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64() / per_step as f64); // rep 0 warms up
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// Throughput of every variant and type on this adapter, e.g. on the H200:
/// `cargo test --release --test kernels_matmul -- --ignored --nocapture bench`.
/// Weights are random bytes (values don't change the work), larger than the H200's L2.
#[test]
#[ignore]
fn bench_matmul() {
    let ctx = ctx();
    let mut s = 0x9e3779b97f4a7c15u64;
    let mut random_bytes = |len: usize| -> Vec<u8> {
        (0..len.div_ceil(8))
            .flat_map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s.to_le_bytes()
            })
            .take(len)
            .collect()
    };
    // BENCH_DIV=64 shrinks N and T to try the bench on lavapipe.
    let div: u64 = std::env::var("BENCH_DIV")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    println!("{}", ctx.describe());
    // BENCH_TYPES=q4_0,q8_0 limits the run to those types.
    let only: Option<Vec<String>> = std::env::var("BENCH_TYPES")
        .ok()
        .map(|v| v.split(',').map(|t| t.trim().to_lowercase()).collect());
    for ty in GgmlType::SUPPORTED {
        if only
            .as_ref()
            .is_some_and(|o| !o.contains(&ty.name().to_lowercase()))
        {
            continue;
        }
        // Decode: T = 1 over a [32768, 8192] weight (bandwidth), then a small-model shape
        // (latency: Gemma 3 270M's FFN is [2048, 640]; K-quants need K % 256 == 0), and for
        // Q8_0 the 262,144-row logits. Q4_0 and Q8_0 add Llama-3.2-1B's gate/up, down and
        // tied-logits shapes.
        let small_k = if is_k_quant(ty) { 768 } else { 640 };
        let mut shapes = vec![(32768 / div, 8192u64), (2048 / div, small_k)];
        if ty == GgmlType::Q8_0 {
            shapes.push((262144 / div, 640)); // Gemma 3's tied logits projection
        }
        if matches!(ty, GgmlType::Q4_0 | GgmlType::Q8_0) {
            shapes.extend([(8192 / div, 2048), (2048 / div, 8192), (128256 / div, 2048)]);
        }
        for (n, k) in shapes {
            let bytes = random_bytes((n * ty.bytes_for(k).unwrap()) as usize);
            let wt = GpuTensor::from_bytes(ctx, "w", ty, k, n, &bytes, ctx.max_binding_bytes());
            drop(bytes);
            let x = ctx.storage_buffer_init("x", bytemuck::cast_slice(&vec![0.5f32; k as usize]));
            let y = ctx.storage_buffer("y", n * 4);
            let mut variants = vec![MatvecWorkgroup];
            if ctx.has_subgroups() {
                variants.push(MatvecSubgroup);
            }
            for v in variants {
                let sec = time_matmul(&wt, &x, &y, 1, v);
                let gbs = wt.total_bytes() as f64 / sec / 1e9;
                println!(
                    "{ty:<5} {v:<16?} T=1   N={n} K={k}: {:8.1} µs  {gbs:7.0} GB/s",
                    sec * 1e6
                );
            }
        }
        // Prefill: T = 512 over a [4096, 4096] weight, and for Q4_0 and Q8_0 Llama-3.2-1B's
        // o, down and gate (or up) shapes; every wide tile, and the cooperative-matrix kernel where
        // it runs.
        let t = 512 / div as u32;
        let mut shapes = vec![(4096 / div, 4096u64)];
        if matches!(ty, GgmlType::Q4_0 | GgmlType::Q8_0) {
            shapes.extend([(2048 / div, 2048), (2048 / div, 8192), (8192 / div, 2048)]);
        }
        let mut variants = vec![Tiled];
        variants.extend(WideTile::ALL.map(MatmulVariant::Wide));
        if ctx.has_coop_gemm() {
            variants.extend([TiledCoop, Coop128]);
        }
        for (n, k) in shapes {
            let bytes = random_bytes((n * ty.bytes_for(k).unwrap()) as usize);
            let wt = GpuTensor::from_bytes(ctx, "w", ty, k, n, &bytes, ctx.max_binding_bytes());
            let x = ctx.storage_buffer_init(
                "x",
                bytemuck::cast_slice(&vec![0.5f32; (k * t as u64) as usize]),
            );
            let y = ctx.storage_buffer("y", n * 4 * t as u64);
            for &v in &variants {
                let sec = time_matmul(&wt, &x, &y, t, v);
                let tflops = 2.0 * (n * k) as f64 * t as f64 / sec / 1e12;
                println!(
                    "{ty:<5} {:<16} T={t} N={n} K={k}: {:8.1} µs  {tflops:7.2} TFLOP/s",
                    v.label(),
                    sec * 1e6
                );
            }
        }
    }
}
