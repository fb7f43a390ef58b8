//! x' as int8 levels written by the kernel that produces it and read by the chunk matvec
//! that consumes it (`MatmulArgs::x_levels`, LEVELS_IN), on the GPU against the CPU
//! reference: the product of the int8 levels of the producer's own output as the GPU stored
//! it (`reference::quant::x_seen`). W_down's from the GLU (`matmul_glu`'s `levels_out`,
//! EMIT_LEVELS), for every weight type with an int8 dot product; W_o's from the attention
//! merge (`attention_planned`'s `levels_out`).
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
use coco::gpu::{AttentionMerge, Binding, StepRecorder};
use coco::kernels::attention::{self, AttentionShape};
use coco::kernels::elementwise::Activation;
use coco::kernels::matmul::MatmulVariant::{MatvecChunk, MatvecChunkWide};
use coco::kernels::matmul::{
    has_int8_dot, levels_scratch, matmul_glu_variant, matmul_variant, MatmulArgs,
};
use coco::reference::quant::{self, XLevels};
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
    let seen = quant::x_seen(&h, None, t, FFN, 0.0, XLevels::Int8Pair);
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
        // heads of 2 and 4 chunks (the 1B's 64, the 8B's 128); K-quants need K % 256 == 0
        run_attention(ty, 1, 8, 64, seed + 3),
        run_attention(ty, 2, 4, 128, seed + 4),
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

/// Attention at `pos0` (split key ranges) writing W_o's x' as levels, then W_o (67 rows)
/// reading them; returns the worst error of W_o's output.
fn run_attention(ty: GgmlType, t: u32, heads: u32, head_dim: u32, seed: u64) -> Worst {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (kv_heads, pos0) = (heads / 2, 200);
    let shape = AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window: 0,
        scale: 1.0 / (head_dim as f32).sqrt(),
        softcap: 0.0,
    };
    let how = attention::plan(&shape);
    assert!(how.splits > 1, "{shape:?} splits its keys");
    assert!(attention::levels_fit(ctx(), &shape, how));
    let rows = (pos0 + t) as usize * (kv_heads * head_dim) as usize;
    let k = (heads * head_dim) as usize;
    let (qb, kb, vb) = (
        buffer("q", &random_f32(&mut rng, t as usize * k, -2.0, 2.0)),
        buffer("k_cache", &random_f32(&mut rng, rows, -2.0, 2.0)),
        buffer("v_cache", &random_f32(&mut rng, rows, -2.0, 2.0)),
    );
    let outb = buffer("attn", &vec![f32::NAN; t as usize * k]);
    let partials = attention::partials_len(heads, head_dim, t, pos0 + t);
    let pb = ctx().storage_buffer("partials", 4 * partials);
    let (wo, wo_w) = weight(&mut rng, "w_o", ty, DOWN_ROWS, k, None, 2.0);
    let yb = buffer("y", &vec![f32::NAN; t as usize * DOWN_ROWS]);
    let levels = Binding::from(&levels_scratch(ctx()));

    let mut rec = StepRecorder::new(ctx());
    let b = Binding::from;
    attention::attention_planned(
        &mut rec,
        &b(&qb),
        &b(&kb),
        &b(&vb),
        &b(&outb),
        &b(&pb),
        &shape,
        how,
        Some(&levels),
    )
    .expect("attention with levels out");
    let args = MatmulArgs {
        x_levels: Some(&levels),
        ..MatmulArgs::default()
    };
    matmul_variant(
        &mut rec,
        &wo,
        &b(&outb),
        &b(&yb),
        t,
        args,
        Some(MatvecChunk),
    )
    .expect("W_o from the levels");
    let labels = rec.labels();
    let merge = match ctx().attention_merge {
        AttentionMerge::InSplit => "attention_split_merge_lvout",
        _ => "attention_combine_lvout",
    };
    assert!(labels.iter().any(|l| l == merge), "{labels:?}");
    rec.submit();
    ctx().check_health().expect("no GPU validation error");
    let out = ctx()
        .read_f32(&outb, 0, t as u64 * k as u64)
        .expect("readback out");
    let got = ctx()
        .read_f32(&yb, 0, t as u64 * DOWN_ROWS as u64)
        .expect("readback y");

    let seen = quant::x_seen(&out, None, t as usize, k, 0.0, XLevels::Int8Pair);
    let down = labels.last().cloned().unwrap_or_default();
    assert!(down.contains("_lvin"), "W_o reads the levels: {down}");
    let (want, tol) = reference_product(&wo_w, &seen, DOWN_ROWS, k, t as usize, &down);
    let what = format!("{ty} T={t} heads {heads} × {head_dim} ({down})");
    let err = common::assert_close(&what, &got, &want, |i, _| tol[i], DOWN_ROWS);
    println!("{what:<70} {err}");
    err
}
