//! The FFN megakernel (`kernels::megakernel::ffn_megakernel`) on the GPU against the CPU
//! reference chain `reference::ops::rms_norm → reference::matmul (gate, up) → ops::glu →
//! reference::matmul (down) [→ ops::rms_norm (post-norm)] → + x`, for Q4_0, Q8_0, Q4_K, F16
//! and mixed gate/up vs down types (Q5_0 + Q6_K as in Gemma's Q4_K_M files, Q4_K + Q5_K),
//! odd block counts, SiLU and GELU-tanh, with and without gemma3's post-norm, T = 1 and 3.
//!
//! Run on lavapipe:
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test megakernel -- --nocapture`
//!
//! Tolerances propagate tests/kernels_matmul_fused.rs's per-product allowance (atol = 2e-6·Σ|w·x|,
//! rtol = 1e-5) through the chain: the gate/up allowances through act(g)·u (|act'| ≤ 1.2),
//! h's allowance through the down product (Σ|w_down|·tol_h), the post-norm's first-order
//! sensitivity to d and to its RMS, and one f32 rounding of the residual add.

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{Binding, StepRecorder};
use coco::kernels::elementwise::Activation;
use coco::kernels::megakernel::{can_use_megakernel, ffn_megakernel, PostNorm};
use coco::reference::{matmul as reference, ops};
use common::{ctx, random_f32, weight, ATOL_PER_ABS_SUM, RTOL};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-6;

/// Residual rows `[t, k]` of very different magnitudes (0.05 … 20): a wrong or shared
/// per-row norm shows.
fn residual(rng: &mut ChaCha8Rng, t: usize, k: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(t * k);
    for _ in 0..t {
        let scale = 10f32.powf(rng.gen_range(-1.3f32..1.3));
        x.extend((0..k).map(|_| rng.gen_range(-1.0f32..1.0) * scale));
    }
    x
}

fn buffer(name: &str, data: &[f32]) -> wgpu::Buffer {
    ctx().storage_buffer_init(name, bytemuck::cast_slice(data))
}

#[derive(Clone, Copy, Debug)]
struct Case {
    gate_up: GgmlType,
    down: GgmlType,
    dim: usize,
    ffn: usize,
    t: usize,
    act: Activation,
    post_norm: bool,
}

/// (value, tolerance) per element of a product `x·wᵀ` `[t, n]`, where x itself carries a
/// per-element allowance `x_tol` (zero for exact inputs).
fn product(
    w: &[f32],
    x: &[f32],
    x_tol: &[f64],
    n: usize,
    k: usize,
    t: usize,
) -> (Vec<f64>, Vec<f64>) {
    let want = reference::matmul(w, x, n, k, t);
    let abs = reference::matmul_abs(w, x, n, k, t);
    let tol_f32: Vec<f32> = x_tol.iter().map(|&v| v as f32).collect();
    let carried = reference::matmul_abs(w, &tol_f32, n, k, t);
    let tol = (0..want.len())
        .map(|i| {
            ATOL_PER_ABS_SUM * abs[i] as f64
                + carried[i] as f64
                + RTOL * (want[i] as f64).abs()
                + 1e-6
        })
        .collect();
    (want.iter().map(|&v| v as f64).collect(), tol)
}

/// Runs one case; returns (max |err|, max |err| / tol).
fn run(c: Case, seed: u64) -> (f64, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (dim, ffn, t) = (c.dim, c.ffn, c.t);
    let (wg, gate_w) = weight(&mut rng, "w_gate", c.gate_up, ffn, dim, None, 0.5);
    let (wu, up_w) = weight(&mut rng, "w_up", c.gate_up, ffn, dim, None, 0.5);
    let (wd, down_w) = weight(&mut rng, "w_down", c.down, dim, ffn, None, 0.5);
    let x = residual(&mut rng, t, dim);
    let nw = random_f32(&mut rng, dim, -1.5, 1.5);
    let pw = random_f32(&mut rng, dim, -1.5, 1.5);

    let (xb, nwb, pwb) = (
        buffer("x", &x),
        buffer("norm_w", &nw),
        buffer("post_w", &pw),
    );
    let hb = buffer("hidden", &vec![f32::NAN; t * ffn]);
    let pb = buffer("proj", &vec![f32::NAN; t * dim]);
    let (nwb, pwb, pbb) = (Binding::from(&nwb), Binding::from(&pwb), Binding::from(&pb));
    let post = c.post_norm.then_some(PostNorm {
        w: &pwb,
        scratch: &pbb,
    });
    let mut rec = StepRecorder::new(ctx());
    ffn_megakernel(
        &mut rec,
        &wg,
        &wu,
        &wd,
        (&nwb, EPS),
        post,
        &Binding::from(&xb),
        &Binding::from(&hb),
        t as u32,
        c.act,
    )
    .expect("ffn_megakernel");
    assert_eq!(rec.dispatch_count(), 1, "one dispatch for the whole FFN");
    let label = rec.labels()[0].clone();
    rec.submit();
    let got = ctx().read_f32(&xb, 0, (t * dim) as u64).expect("readback");

    // The reference chain, each stage with its allowance.
    let xn = ops::rms_norm(&x, &nw, t, dim, EPS);
    let zero = vec![0.0; t * dim];
    let (g, g_tol) = product(&gate_w, &xn, &zero, ffn, dim, t);
    let (u, u_tol) = product(&up_w, &xn, &zero, ffn, dim, t);
    let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
    let u32_: Vec<f32> = u.iter().map(|&v| v as f32).collect();
    let h = ops::glu(&g32, &u32_, c.act);
    let h_tol: Vec<f64> = (0..h.len())
        .map(|i| {
            let a = ops::activation(g[i], c.act).abs();
            1.2 * g_tol[i] * (u[i].abs() + u_tol[i])
                + a * u_tol[i]
                + RTOL * (h[i] as f64).abs()
                + 1e-6
        })
        .collect();
    let (d, d_tol) = product(&down_w, &h, &h_tol, dim, ffn, t);
    let mut want = vec![0f64; t * dim];
    let mut tol = vec![0f64; t * dim];
    for r in 0..t {
        let span = r * dim..(r + 1) * dim;
        if c.post_norm {
            let ss: f64 = span.clone().map(|i| d[i] * d[i]).sum();
            let rms = (ss / dim as f64 + EPS as f64).sqrt();
            // First-order relative error of the RMS: Σ|d·δd| / Σd².
            let rms_rel: f64 = span.clone().map(|i| (d[i] * d_tol[i]).abs()).sum::<f64>() / ss;
            for i in span {
                let dn = d[i] / rms * pw[i % dim] as f64;
                want[i] = x[i] as f64 + dn;
                tol[i] = (pw[i % dim] as f64).abs() * d_tol[i] / rms
                    + dn.abs() * rms_rel
                    + RTOL * dn.abs();
            }
        } else {
            for i in span {
                want[i] = x[i] as f64 + d[i];
                tol[i] = d_tol[i];
            }
        }
    }
    // One f32 rounding of the residual add.
    for (t_, w) in tol.iter_mut().zip(&want) {
        *t_ += w.abs() * f32::EPSILON as f64;
    }

    let worst = common::assert_close(&format!("{c:?} ({label})"), &got, &want, |i, _| tol[i], dim);
    let (max_err, max_ratio) = (worst.abs, worst.ratio);
    println!(
        "{label:<54} T={t} dim={dim:<4} ffn={ffn:<4} max|err| {max_err:.2e} ({:.0}% of tol)",
        100.0 * max_ratio
    );
    (max_err, max_ratio)
}

fn case(gate_up: GgmlType, down: GgmlType, dim: usize, ffn: usize) -> Case {
    Case {
        gate_up,
        down,
        dim,
        ffn,
        t: 1,
        act: Activation::Silu,
        post_norm: false,
    }
}

/// For one type (or type pair): T = 1 with SiLU and a plain residual add (llama), T = 3 with
/// GELU-tanh and the post-norm (gemma3), and T = 3 SiLU without it.
fn check_types(gate_up: GgmlType, down: GgmlType, dim: usize, ffn: usize) {
    let base = case(gate_up, down, dim, ffn);
    let cases = [
        base,
        Case {
            t: 3,
            act: Activation::GeluTanh,
            post_norm: true,
            ..base
        },
        Case { t: 3, ..base },
        Case {
            act: Activation::GeluTanh,
            post_norm: true,
            ..base
        },
    ];
    for (i, c) in cases.into_iter().enumerate() {
        run(
            c,
            7000 + 100 * gate_up.id() as u64 + 10 * down.id() as u64 + i as u64,
        );
    }
}

// Sizes: non-K types use odd block counts (dim 160 = 5 blocks of 32, ffn 96 / 224 = 3 / 7
// blocks), so Q4_0/Q8_0 rows alternate between word-aligned and 2-mod-4 starts; K-quants
// need 256-multiples (ffn 768 = 3 super-blocks). Every lane's loop runs both whole trips
// and a partial last one.

#[test]
fn q4_0_matches_reference() {
    check_types(GgmlType::Q4_0, GgmlType::Q4_0, 160, 96);
}

#[test]
fn q8_0_matches_reference() {
    check_types(GgmlType::Q8_0, GgmlType::Q8_0, 352, 224);
}

#[test]
fn q4_k_matches_reference() {
    check_types(GgmlType::Q4_K, GgmlType::Q4_K, 256, 768);
}

#[test]
fn f16_matches_reference() {
    check_types(GgmlType::F16, GgmlType::F16, 96, 224);
}

/// Gemma-3 Q4_K_M's layers: Q5_0 gate/up with a Q6_K down (the down's dequantizer is a
/// second, renamed copy), and two K-quants sharing the scale helpers.
#[test]
fn mixed_down_types_match_reference() {
    check_types(GgmlType::Q5_0, GgmlType::Q6_K, 160, 256);
    check_types(GgmlType::Q4_K, GgmlType::Q5_K, 256, 512);
    check_types(GgmlType::BF16, GgmlType::Q8_0, 64, 96);
}

/// The 32-element types with an offset or a grid, and the super-block types whose planes
/// the down copy reads (Q2_K/Q3_K, IQ4_XS with IQ4_NL sharing the grid helpers).
#[test]
fn more_types_match_reference() {
    check_types(GgmlType::Q4_1, GgmlType::Q5_1, 160, 96);
    check_types(GgmlType::IQ4_NL, GgmlType::IQ4_NL, 160, 224);
    check_types(GgmlType::Q2_K, GgmlType::Q3_K, 256, 512);
    check_types(GgmlType::Q3_K, GgmlType::Q3_K, 256, 768);
    check_types(GgmlType::IQ4_XS, GgmlType::IQ4_NL, 256, 96);
}

/// A weight split into row parts is refused with a reason, not run wrongly.
#[test]
fn split_weights_are_refused() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (wg, _) = weight(&mut rng, "w_gate", GgmlType::Q8_0, 64, 64, Some(16), 0.5);
    let (wu, _) = weight(&mut rng, "w_up", GgmlType::Q8_0, 64, 64, Some(16), 0.5);
    let (wd, _) = weight(&mut rng, "w_down", GgmlType::Q8_0, 64, 64, None, 0.5);
    let why = can_use_megakernel(ctx(), &wg, &wu, &wd, false).expect_err("split must be refused");
    assert!(why.contains("split into 4 buffers"), "{why}");
    let (wu, _) = weight(&mut rng, "w_up", GgmlType::Q4_0, 64, 64, None, 0.5);
    let (wg, _) = weight(&mut rng, "w_gate", GgmlType::Q8_0, 64, 64, None, 0.5);
    let why = can_use_megakernel(ctx(), &wg, &wu, &wd, false).expect_err("type mix refused");
    assert!(why.contains("differ in type"), "{why}");
}
