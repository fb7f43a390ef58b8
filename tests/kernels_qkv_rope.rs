//! `kernels::qkv_rope::matmul_qkv_rope_kv` (Q/K/V + RoPE + the KV-cache write in one
//! dispatch) on the GPU against the CPU reference: `reference::matmul`, then
//! `reference::ops::rope` on q and k, then the cache rows. Every matvec shape, both pair
//! layouts, whole and partial rotation (4 of 6 or 8 dimensions, cos and sin scaled as
//! LongRoPE's attention factor scales them), T = 1..3 at a nonzero `pos0`, with and without
//! the folded norm and the biases, and with gemma3's per-head Q/K norm folded in (its last
//! workgroup per head: heads of 6 and 8 rows, split across workgroups or several in one), and
//! with V left out (a W_v of another type, written by its own product): the V cache untouched.
//!
//! The shapes are small and awkward on purpose: 5 query heads and 3 KV heads of 6 or 8, so
//! the q/k/v boundaries fall inside workgroups and inside the subgroup matvec's tasks, and a
//! head of 6 has an odd number of pairs (NeoX pairs (i, i + 3)).
//!
//! Tolerance per output: the product's (tests/kernels_matmul_fused.rs: atol = 2e-6·Σ|w·x'|,
//! rtol = 1e-5); a rotated value adds both halves' allowances (|cos|, |sin| ≤ 1) and 1e-6 of
//! their magnitude for the angle (the shader's sin/cos are accurate to a few f32 ulps). The
//! Q/K norm propagates a value's allowance to first order: y·s·w with s = rsqrt(mean(y²) +
//! eps) moves by s·|w|·(tol + |y|·Σ|y_j|·tol_j / Σy_j²), plus 1e-6 of its magnitude.

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{Binding, StepRecorder};
use coco::kernels::matmul::MatmulVariant::{
    self, MatvecChunk, MatvecRows, MatvecSubgroup, MatvecWorkgroup, Tiled,
};
use coco::kernels::qkv_rope::{matmul_qkv_rope_kv_variant, qkv_rope_fuses};
use coco::kernels::rope::{QkNorm, RopeKvShape, RopeLayout, Rotary};
use coco::reference::ops;
use coco::reference::quant::{self, SeenX};
use common::{ctx, random_f32, reference_product, weight};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-5;
const HEADS: usize = 5;
const KV_HEADS: usize = 3;
/// Cache rows of the test: the step writes rows pos0 .. pos0 + t, the rest must keep this.
const CONTEXT: usize = 48;
const UNTOUCHED: f32 = 7.25;

#[derive(Clone, Copy, Debug)]
struct Case {
    variant: MatmulVariant,
    t: usize,
    pos0: usize,
    head_dim: usize,
    rotary: Rotary,
    norm: bool,
    bias: bool,
    qk_norm: bool,
    /// V left out of the dispatch (a W_v of another type): the V cache stays untouched.
    v_apart: bool,
}

fn buffer(name: &str, data: &[f32]) -> wgpu::Buffer {
    ctx().storage_buffer_init(name, bytemuck::cast_slice(data))
}

/// Reference outputs `[t, n]` of x'·wᵀ (+ bias) with their tolerances.
fn product(
    w: &[f32],
    xn: &SeenX,
    bias: Option<&[f32]>,
    n: usize,
    k: usize,
    t: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut want, tol) = reference_product(w, xn, n, k, t, "matvec");
    if let Some(b) = bias {
        for (i, v) in want.iter_mut().enumerate() {
            *v += b[i % n] as f64;
        }
    }
    (want, tol)
}

/// The per-head RMSNorm of the reference product `[rows, head_dim]` (in f64) with weights
/// `w`, and each output's tolerance propagated from the product's (module comment).
fn normed((want, tol): (Vec<f64>, Vec<f64>), w: &[f32], head_dim: usize) -> (Vec<f64>, Vec<f64>) {
    let mut values = Vec::with_capacity(want.len());
    let mut tols = Vec::with_capacity(want.len());
    for (y, t) in want.chunks(head_dim).zip(tol.chunks(head_dim)) {
        let sq: f64 = y.iter().map(|v| v * v).sum();
        let s = 1.0 / (sq / head_dim as f64 + EPS as f64).sqrt();
        let spread: f64 = y.iter().zip(t).map(|(v, t)| v.abs() * t).sum::<f64>() / sq.max(1e-30);
        for i in 0..head_dim {
            let v = y[i] * s * w[i] as f64;
            values.push(v);
            tols.push(s * (w[i] as f64).abs() * (t[i] + y[i].abs() * spread) + 1e-6 * v.abs());
        }
    }
    (values, tols)
}

/// RoPE of the reference product `[t, heads, head_dim]`, with each output's tolerance: the
/// two halves' allowances plus 1e-6 of their magnitudes.
fn rotated(
    (want, tol): (Vec<f64>, Vec<f64>),
    inv_freq: &[f32],
    c: &Case,
    heads: usize,
) -> (Vec<f64>, Vec<f64>) {
    let mut values: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    ops::rope(
        &mut values,
        inv_freq,
        c.t,
        heads,
        c.head_dim,
        c.pos0,
        c.rotary,
    );
    let dims = c.rotary.dims as usize;
    // The other half of a rotated dimension's pair; a pass-through one is its own.
    let partner = |i: usize| {
        let d = i % c.head_dim;
        let other = match c.rotary.layout {
            _ if d >= dims => d,
            RopeLayout::Normal => d ^ 1,
            RopeLayout::Neox => (d + dims / 2) % dims,
        };
        i - d + other
    };
    let tol = (0..want.len())
        .map(|i| {
            let j = partner(i);
            if j == i {
                return tol[i];
            }
            c.rotary.scale as f64 * (tol[i] + tol[j] + 1e-6 * (want[i].abs() + want[j].abs()))
        })
        .collect();
    (values.iter().map(|&v| v as f64).collect(), tol)
}

/// The worst error as a fraction of its tolerance; panics past 1 with the first offender.
fn check(what: &str, got: &[f32], want: &[f64], tol: &[f64]) -> f64 {
    common::assert_close(what, got, want, |i, _| tol[i], 0).ratio
}

fn run(ty: GgmlType, c: Case, seed: u64) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Whole blocks: 2 super-blocks for K-quants, else 5 blocks of 32 (odd, so legacy rows
    // alternate between word-aligned and 2-mod-4 starts).
    let k = if common::is_k_quant(ty) { 512 } else { 160 };
    let (nq, nkv) = (HEADS * c.head_dim, KV_HEADS * c.head_dim);
    let (wq, q_w) = weight(&mut rng, "wq", ty, nq, k, None, 2.0);
    let (wk, k_w) = weight(&mut rng, "wk", ty, nkv, k, None, 2.0);
    let (wv, v_w) = weight(&mut rng, "wv", ty, nkv, k, None, 2.0);
    let x = random_f32(&mut rng, c.t * k, -3.0, 3.0);
    let nw = random_f32(&mut rng, k, -1.5, 1.5);
    let biases = [nq, nkv, nkv].map(|n| random_f32(&mut rng, n, -1.0, 1.0));
    // gemma3's norm weights sit around 1 (GGUF stores 1 + w).
    let qk_w = [0, 1].map(|_| random_f32(&mut rng, c.head_dim, 0.5, 1.5));
    // Llama-style frequencies over the rotated dimensions, base 10,000; 0 past them.
    let dims = c.rotary.dims as usize;
    let inv_freq: Vec<f32> = (0..c.head_dim / 2)
        .map(|i| {
            if i < dims / 2 {
                10000f32.powf(-((2 * i) as f32) / dims as f32)
            } else {
                0.0
            }
        })
        .collect();

    let xb = buffer("x", &x);
    let nwb = buffer("norm_w", &nw);
    let qb = buffer("q", &vec![f32::NAN; c.t * nq]);
    let kcb = buffer("k_cache", &vec![UNTOUCHED; CONTEXT * nkv]);
    let vcb = buffer("v_cache", &vec![UNTOUCHED; CONTEXT * nkv]);
    let fb = buffer("inv_freq", &inv_freq);
    let bb: Vec<wgpu::Buffer> = biases.iter().map(|b| buffer("bias", b)).collect();
    let bbind: Vec<Binding> = bb.iter().map(Binding::from).collect();
    let nwbind = Binding::from(&nwb);
    let qkb: Vec<Binding> = qk_w
        .iter()
        .map(|w| Binding::from(&buffer("qk_norm_w", w)))
        .collect();
    let shape = RopeKvShape {
        t: c.t as u32,
        heads: HEADS as u32,
        kv_heads: KV_HEADS as u32,
        head_dim: c.head_dim as u32,
        pos0: c.pos0 as u32,
        rotary: c.rotary,
    };
    let mut rec = StepRecorder::new(ctx());
    assert!(
        qkv_rope_fuses(
            &rec,
            &wq,
            &wk,
            (!c.v_apart).then_some(&wv),
            c.norm,
            c.bias,
            c.qk_norm,
            &shape
        ),
        "{c:?} should fuse"
    );
    matmul_qkv_rope_kv_variant(
        &mut rec,
        &wq,
        &wk,
        (!c.v_apart).then_some(&wv),
        &Binding::from(&xb),
        c.norm.then_some((&nwbind, EPS)),
        &Binding::from(&qb),
        &Binding::from(&kcb),
        &Binding::from(&vcb),
        &Binding::from(&fb),
        c.bias.then_some((&bbind[0], &bbind[1], &bbind[2])),
        c.qk_norm.then_some(QkNorm {
            q: &qkb[0],
            k: &qkb[1],
            eps: EPS,
        }),
        &shape,
        Some(c.variant),
    )
    .expect("matmul_qkv_rope_kv");
    assert_eq!(rec.dispatch_count(), 1, "{c:?}: one dispatch");
    let label = rec.labels().first().cloned().unwrap_or_default();
    rec.submit();

    // x' as the kernel sees it (the int8 chunk matvec: its staged int8 levels).
    let xn = quant::x_seen(
        &x,
        c.norm.then_some(&nw[..]),
        c.t,
        k,
        EPS,
        common::x_levels(&label),
    );
    let bias = |i: usize| c.bias.then_some(&biases[i][..]);
    let qk_normed = |p: (Vec<f64>, Vec<f64>), i: usize| {
        if c.qk_norm {
            normed(p, &qk_w[i], c.head_dim)
        } else {
            p
        }
    };
    let (q_want, q_tol) = rotated(
        qk_normed(product(&q_w, &xn, bias(0), nq, k, c.t), 0),
        &inv_freq,
        &c,
        HEADS,
    );
    let (k_want, k_tol) = rotated(
        qk_normed(product(&k_w, &xn, bias(1), nkv, k, c.t), 1),
        &inv_freq,
        &c,
        KV_HEADS,
    );
    let (v_want, v_tol) = product(&v_w, &xn, bias(2), nkv, k, c.t);

    let read = |b: &wgpu::Buffer, n: usize| ctx().read_f32(b, 0, n as u64).expect("readback");
    let what = format!("{ty} {c:?} ({label})");
    let mut worst = check(&format!("{what} q"), &read(&qb, c.t * nq), &q_want, &q_tol);
    let rows = c.pos0 * nkv..(c.pos0 + c.t) * nkv;
    let caches = [("k", &kcb, &k_want, &k_tol), ("v", &vcb, &v_want, &v_tol)];
    let written = if c.v_apart { 1 } else { 2 };
    if c.v_apart {
        let got = read(&vcb, CONTEXT * nkv);
        let stray = got.iter().enumerate().find(|&(_, &v)| v != UNTOUCHED);
        assert!(
            stray.is_none(),
            "{what}: V left out, but the V cache was written: {stray:?}"
        );
    }
    for (name, cache, want, tol) in caches.into_iter().take(written) {
        let got = read(cache, CONTEXT * nkv);
        worst = worst.max(check(
            &format!("{what} {name} cache rows"),
            &got[rows.clone()],
            want,
            tol,
        ));
        let stray = got
            .iter()
            .enumerate()
            .find(|&(i, &v)| !rows.contains(&i) && v != UNTOUCHED);
        assert!(
            stray.is_none(),
            "{what}: {name} cache element outside the step's rows written: {stray:?}"
        );
    }
    println!(
        "{label:<56} T={:<2} pos0={:<2} head_dim={} rotated={} norm={:<5} bias={:<5} \
         qk_norm={:<5} v_apart={:<5} {:.0}% of tol",
        c.t,
        c.pos0,
        c.head_dim,
        c.rotary.dims,
        c.norm,
        c.bias,
        c.qk_norm,
        c.v_apart,
        100.0 * worst
    );
    worst
}

fn cases() -> Vec<Case> {
    let mut variants = vec![MatvecWorkgroup, MatvecRows];
    if ctx().has_subgroups() {
        variants.extend([MatvecSubgroup, MatvecChunk]);
    } else {
        println!("no SUBGROUP on this adapter; subgroup matvec not tested");
    }
    // (t, pos0, head_dim, norm, bias)
    let whole = [
        (1, 37, 8, true, false),
        (2, 5, 6, true, true),
        (3, 0, 6, false, true),
        (1, 46, 8, false, false),
        // A short prompt: the matvec runs steps of up to MATVEC_MAX_T tokens.
        (32, 9, 8, true, true),
    ];
    // Partial rotation, 4 dimensions of 6 or 8: pass-through dimensions inside every head's
    // slots. Listed after the whole-head cases, which keep their seeds (the case's index).
    let partial = [(2, 5, 6, true, true), (1, 46, 8, false, false)];
    // The per-head Q/K norm folded in (last, so the cases above keep their seeds): heads of 6
    // straddle the workgroups' slots, heads of 8 fill them or share them.
    let qk_whole = [
        (1, 37, 8, true, false),
        (3, 0, 6, true, true),
        (32, 9, 8, true, true),
    ];
    let qk_partial = [(2, 5, 6, true, false)];
    // V left out (W_v of another type), with and without the Q/K norm (last again).
    let v_apart = [(1, 37, 8, true, true), (3, 0, 6, true, false)];
    let mut cases = Vec::new();
    for (shapes, dims, qk_norm, v_apart) in [
        (&whole[..], None, false, false),
        (&partial[..], Some(4), false, false),
        (&qk_whole[..], None, true, false),
        (&qk_partial[..], Some(4), true, false),
        (&v_apart[..], None, false, true),
        (&v_apart[..], None, true, true),
    ] {
        for &variant in &variants {
            for layout in [RopeLayout::Normal, RopeLayout::Neox] {
                for &(t, pos0, head_dim, norm, bias) in shapes {
                    let rotary = match dims {
                        None => Rotary::full(layout, head_dim as u32),
                        Some(dims) => Rotary {
                            layout,
                            dims,
                            scale: 1.19,
                        },
                    };
                    cases.push(Case {
                        variant,
                        t,
                        pos0,
                        head_dim,
                        rotary,
                        norm,
                        bias,
                        qk_norm,
                        v_apart,
                    });
                }
            }
        }
    }
    cases
}

fn run_type(ty: GgmlType) {
    let worst = cases()
        .into_iter()
        .enumerate()
        .map(|(i, c)| run(ty, c, 7000 * ty.id() as u64 + i as u64))
        .fold(0.0, f64::max);
    println!("{ty}: worst {:.0}% of tolerance", 100.0 * worst);
}

#[test]
fn qkv_rope_kv_f32() {
    run_type(GgmlType::F32);
}
#[test]
fn qkv_rope_kv_q8_0() {
    run_type(GgmlType::Q8_0);
}
#[test]
fn qkv_rope_kv_q4_0() {
    run_type(GgmlType::Q4_0);
}
#[test]
fn qkv_rope_kv_q5_0() {
    run_type(GgmlType::Q5_0);
}
#[test]
fn qkv_rope_kv_q4_k() {
    run_type(GgmlType::Q4_K);
}
#[test]
fn qkv_rope_kv_q3_k() {
    run_type(GgmlType::Q3_K);
}
#[test]
fn qkv_rope_kv_iq4_nl() {
    run_type(GgmlType::IQ4_NL);
}

/// A prefill chunk takes the tiled kernel, which has no RoPE epilogue: the fusion says no,
/// and forcing it is an error rather than a wrong result.
#[test]
fn tiled_steps_keep_the_separate_rope() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (wq, _) = weight(&mut rng, "wq", GgmlType::Q8_0, HEADS * 8, 160, None, 2.0);
    let (wk, _) = weight(&mut rng, "wk", GgmlType::Q8_0, KV_HEADS * 8, 160, None, 2.0);
    let (wv, _) = weight(&mut rng, "wv", GgmlType::Q8_0, KV_HEADS * 8, 160, None, 2.0);
    let shape = |t| RopeKvShape {
        t,
        heads: HEADS as u32,
        kv_heads: KV_HEADS as u32,
        head_dim: 8,
        pos0: 0,
        rotary: Rotary::full(RopeLayout::Normal, 8),
    };
    let mut rec = StepRecorder::new(ctx());
    assert!(!qkv_rope_fuses(
        &rec,
        &wq,
        &wk,
        Some(&wv),
        false,
        false,
        false,
        &shape(64)
    ));
    let b = |n: usize| buffer("b", &vec![0.0; n]);
    let (x, q, kc, vc, f) = (b(17 * 160), b(17 * 40), b(17 * 24), b(17 * 24), b(4));
    let err = matmul_qkv_rope_kv_variant(
        &mut rec,
        &wq,
        &wk,
        Some(&wv),
        &Binding::from(&x),
        None,
        &Binding::from(&q),
        &Binding::from(&kc),
        &Binding::from(&vc),
        &Binding::from(&f),
        None,
        None,
        &shape(17),
        Some(Tiled),
    )
    .expect_err("the tiled kernel has no RoPE epilogue");
    assert!(err.to_string().contains("tiled"), "{err}");
    assert_eq!(rec.dispatch_count(), 0);
}
