//! W_down's x' as int8 levels written by the GLU before it (`matmul_glu`'s `levels_out`,
//! EMIT_LEVELS) and read by W_down (`MatmulArgs::x_levels`, LEVELS_IN), on the GPU against
//! the CPU reference: W_down · int8_levels(h), h the GLU's own output as the GPU stored it
//! (`reference::quant::x_seen`), for every weight type with an int8 dot product.
//!
//! ffn = 4,352: 136 chunks (17 K-quant super-blocks), so the GLU's 64-slot workgroups each emit one whole chunk, and a
//! one-token W_down of K = 4,352 over 67 rows splits K four ways (`AUTO_SPLIT`), so each
//! range starts its levels at its own chunk. Three tokens run unsplit; a GLU split into parts
//! of 1,024 rows emits each part's chunks at their place.
//!
//! Run on lavapipe:
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test kernels_matmul_levels -- --nocapture`

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{Binding, StepRecorder};
use coco::kernels::elementwise::Activation;
use coco::kernels::matmul::MatmulVariant::{MatvecChunk, MatvecChunkWide};
use coco::kernels::matmul::{
    has_int8_dot, levels_scratch, matmul_glu_variant, matmul_variant, MatmulArgs,
};
use coco::reference::quant;
use common::{ctx, random_f32, reference_product, weight, Worst};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const FFN: usize = 4352;
const DOWN_ROWS: usize = 67;

fn buffer(name: &str, data: &[f32]) -> wgpu::Buffer {
    ctx().storage_buffer_init(name, bytemuck::cast_slice(data))
}

/// One GLU → W_down pair through the levels; returns the worst error of W_down's output.
fn run(ty: GgmlType, t: usize, glu_part_rows: Option<usize>, seed: u64) -> Worst {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let k = if common::is_k_quant(ty) { 512 } else { 160 };
    let (wg, _) = weight(&mut rng, "w_gate", ty, FFN, k, glu_part_rows, 2.0);
    let (wu, _) = weight(&mut rng, "w_up", ty, FFN, k, glu_part_rows, 2.0);
    let (wd, down_w) = weight(&mut rng, "w_down", ty, DOWN_ROWS, FFN, None, 2.0);
    let x = random_f32(&mut rng, t * k, -2.0, 2.0);
    let nw = random_f32(&mut rng, k, -1.5, 1.5);
    let (xb, nwb) = (buffer("x", &x), buffer("norm_w", &nw));
    let hb = buffer("h", &vec![f32::NAN; t * FFN]);
    let yb = buffer("y", &vec![f32::NAN; t * DOWN_ROWS]);
    let levels = Binding::from(&levels_scratch(ctx()));
    let nwb = Binding::from(&nwb);

    let mut rec = StepRecorder::new(ctx());
    matmul_glu_variant(
        &mut rec,
        &wg,
        &wu,
        &Binding::from(&xb),
        Some((&nwb, 1e-5)),
        &Binding::from(&hb),
        Some(&levels),
        t as u32,
        Activation::Silu,
        Some(MatvecChunkWide(64)),
    )
    .expect("matmul_glu with levels out");
    let args = MatmulArgs {
        x_levels: Some(&levels),
        ..MatmulArgs::default()
    };
    let (hbind, ybind) = (Binding::from(&hb), Binding::from(&yb));
    matmul_variant(
        &mut rec,
        &wd,
        &hbind,
        &ybind,
        t as u32,
        args,
        Some(MatvecChunk),
    )
    .expect("W_down from the levels");
    let labels = common::product_labels(&rec);
    assert!(
        labels
            .iter()
            .take(wg.parts.len())
            .all(|l| l.contains("_lvout"))
            && labels.last().is_some_and(|l| l.contains("_lvin")),
        "the GLU emits and W_down reads the levels: {labels:?}"
    );
    rec.submit();
    ctx().check_health().expect("no GPU validation error");
    let h = ctx()
        .read_f32(&hb, 0, (t * FFN) as u64)
        .expect("readback h");
    let got = ctx()
        .read_f32(&yb, 0, (t * DOWN_ROWS) as u64)
        .expect("readback y");
    let stored = h.iter().filter(|v| v.is_finite()).count();
    assert_eq!(stored, h.len(), "every GLU output stored ({labels:?})");

    // The levels of the h the GPU stored: the kernels quantize those very values.
    let seen = quant::x_seen(&h, None, t, FFN, 0.0, true);
    let down = labels.last().cloned().unwrap_or_default();
    let (want, tol) = reference_product(&down_w, &seen, DOWN_ROWS, FFN, t, &down);
    let what = format!("{ty} T={t} GLU parts {} ({down})", wg.parts.len());
    let err = common::assert_close(&what, &got, &want, |i, _| tol[i], DOWN_ROWS);
    println!("{what:<70} {err}");
    err
}

fn levels_type(ty: GgmlType) {
    assert!(has_int8_dot(ty));
    if !ctx().has_subgroups() {
        println!("{ty}: no subgroups on this device, so no chunk matvec: nothing to check");
        return;
    }
    let seed = 7000 * ty.id() as u64;
    let worst = [
        run(ty, 1, None, seed),
        run(ty, 3, None, seed + 1),
        run(ty, 2, Some(1024), seed + 2),
    ]
    .into_iter()
    .fold(Worst::default(), Worst::max);
    println!("{ty}: worst {worst}");
}

#[test]
fn levels_q4_0() {
    levels_type(GgmlType::Q4_0);
}
#[test]
fn levels_q4_1() {
    levels_type(GgmlType::Q4_1);
}
#[test]
fn levels_q5_0() {
    levels_type(GgmlType::Q5_0);
}
#[test]
fn levels_q5_1() {
    levels_type(GgmlType::Q5_1);
}
#[test]
fn levels_q8_0() {
    levels_type(GgmlType::Q8_0);
}
#[test]
fn levels_q4_k() {
    levels_type(GgmlType::Q4_K);
}
#[test]
fn levels_q5_k() {
    levels_type(GgmlType::Q5_K);
}
#[test]
fn levels_q6_k() {
    levels_type(GgmlType::Q6_K);
}
