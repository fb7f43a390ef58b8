//! The fused matmuls (`kernels::matmul::{matmul_normed, matmul_glu, matmul_qkv}`) on the GPU
//! against the CPU reference (`reference::ops::{rms_norm, glu}` then `reference::matmul`),
//! for every weight type coco reads, every kernel shape, T = 1, 2, 3, 17 and 64, odd row
//! counts, with and without the folded norm and biases, whole and split weights.
//!
//! Run on lavapipe:
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test kernels_matmul_fused -- --nocapture`
//! (prints the max error of every case).
//!
//! Tolerances are those of tests/kernels_matmul.rs: a product may differ from the f64
//! reference by `atol + rtol·|ref|` with atol = 2e-6·Σ|w·x'| and rtol = 1e-5 (x' = the
//! reference's f32 RMSNorm output). For GLU the gate's and up's allowances are propagated
//! through act(g)·u (|act'| ≤ 1.2 for SiLU and GELU-tanh).

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{Binding, GpuTensor, StepRecorder};
use coco::kernels::elementwise::Activation;
use coco::kernels::matmul::MatmulVariant::{
    self, Coop128, CoopStream, Dot4I8, MatrixI8, MatvecChunk, MatvecChunkWide, MatvecRows,
    MatvecSubgroup, MatvecWorkgroup, Tiled, TiledCoop,
};
use coco::kernels::matmul::{
    has_levels8, matmul_glu_variant, matmul_normed_variant, matmul_post_norm_add_variant,
    matmul_qkv_variant, MatmulArgs, PostNormAdd,
};
use coco::reference::ops;
use coco::reference::quant::{self, SeenX};
use common::{ctx, is_k_quant, random_f32, reference_product, weight, Worst as Err, RTOL};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const EPS: f32 = 1e-5;

/// K for the type: 2 super-blocks for K-quants, else 5 blocks of 32 (odd, so Q8_0/Q4_0/Q5_0
/// rows alternate between word-aligned and 2-mod-4 starts). `long` makes each matvec lane
/// take both its unrolled loop and its tail.
fn k_for(ty: GgmlType, long: bool) -> usize {
    match (is_k_quant(ty), long) {
        (true, false) => 512,
        (true, true) => 1280,
        (false, false) => 160,
        (false, true) => 800,
    }
}

/// A weight of another type with the same K class, for Q/K/V type mixes.
fn other_type(ty: GgmlType) -> GgmlType {
    match ty {
        GgmlType::Q4_K => GgmlType::Q6_K,
        t if is_k_quant(t) => GgmlType::Q4_K,
        GgmlType::Q8_0 => GgmlType::Q5_0,
        _ => GgmlType::Q8_0,
    }
}

/// A residual stream `[t, k]` whose tokens have very different magnitudes (0.05 … 20), so
/// a wrong or missing per-token norm shows.
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

/// Compares `got` with `want` (`[rows, n]`, `tol` per element); see `common::assert_close`.
fn compare(what: &str, got: &[f32], want: &[f64], tol: &[f64], n: usize) -> Err {
    common::assert_close(what, got, want, |i, _| tol[i], n)
}

/// x' as the kernel `label` sees it: the reference RMSNorm of x, or x itself; for the int8
/// forms, staged as their int8 levels with their slack (`quant::x_seen`, `common::x_levels`).
fn normed(x: &[f32], norm_w: Option<&[f32]>, t: usize, k: usize, label: &str) -> SeenX {
    quant::x_seen(x, norm_w, t, k, EPS, common::x_levels(label))
}

#[derive(Clone, Copy, Debug)]
struct Case {
    t: usize,
    variant: Option<MatmulVariant>,
    norm: bool,
    bias: bool,
    accumulate: bool,
    long: bool,
    /// K = 4,352: past CHUNK_TILE_MAX_K, so a chunk matvec stages x' in two tiles or more
    /// (and sums each token's Σx² over them).
    two_tiles: bool,
    part_rows: Option<usize>,
    /// GLU: the activation; QKV: W_k and W_v of another type (the three-dispatch fallback).
    gelu: bool,
    mixed: bool,
}

fn case(t: usize, variant: Option<MatmulVariant>) -> Case {
    Case {
        t,
        variant,
        norm: true,
        bias: false,
        accumulate: false,
        long: false,
        two_tiles: false,
        part_rows: None,
        gelu: false,
        mixed: false,
    }
}

impl Case {
    fn no_norm(self) -> Case {
        Case {
            norm: false,
            ..self
        }
    }
    fn bias(self) -> Case {
        Case { bias: true, ..self }
    }
    fn accumulate(self) -> Case {
        Case {
            accumulate: true,
            ..self
        }
    }
    fn long(self) -> Case {
        Case { long: true, ..self }
    }
    fn two_tiles(self) -> Case {
        Case {
            two_tiles: true,
            ..self
        }
    }
    /// K of this case for weights of type `ty`.
    fn k(&self, ty: GgmlType) -> usize {
        if self.two_tiles {
            4352
        } else {
            k_for(ty, self.long)
        }
    }
    fn split(self, rows: usize) -> Case {
        Case {
            part_rows: Some(rows),
            ..self
        }
    }
    fn gelu(self) -> Case {
        Case { gelu: true, ..self }
    }
    fn mixed(self) -> Case {
        Case {
            mixed: true,
            ..self
        }
    }
}

/// The wide GEMM with `slots` × `tokens` per thread.
fn wide(slots: u32, tokens: u32) -> MatmulVariant {
    MatmulVariant::Wide(coco::kernels::matmul::WideTile::new(slots, tokens))
}

/// The same in f16 (`gemm_wide_f16.wgsl`).
fn wide_f16(slots: u32, tokens: u32) -> MatmulVariant {
    MatmulVariant::Wide(coco::kernels::matmul::WideTile::new(slots, tokens).f16())
}

/// Shapes every op is tried in: each matvec reduction, the tiled kernel for 1, 17 (a partial
/// tile) and 70 tokens (two z slices), and the automatic choice for 64 tokens.
fn variants_cases(ty: GgmlType, base: impl Fn(Case) -> Case) -> Vec<Case> {
    let mut cases = vec![
        base(case(1, Some(MatvecWorkgroup))),
        base(case(3, Some(MatvecWorkgroup))).long(),
        base(case(2, Some(MatvecWorkgroup))).no_norm(),
        base(case(17, Some(Tiled))),
        base(case(1, Some(Tiled))).no_norm(),
        base(case(64, None)).long(),
        base(case(70, Some(Tiled))), // two token tiles, the last of 6
        base(case(17, Some(Tiled))).two_tiles(), // K split 17 ways (tile_splits)
        // The wide GEMM, each register tile (two slot tiles of a GLU's 134 slots at 8 × 8).
        base(case(17, Some(wide(8, 4)))),
        base(case(70, Some(wide(8, 4)))).no_norm(),
        base(case(33, Some(wide(4, 8)))).long(),
        // Tokens past the first 64 of a 128-token tile, normed.
        base(case(100, Some(wide(4, 8)))),
        base(case(5, Some(wide(4, 4)))),
        base(case(1, None)),
        base(case(17, Some(MatvecWorkgroup))),
        // One row per invocation (CPU adapters): odd row counts leave slots idle.
        base(case(1, Some(MatvecRows))),
        base(case(3, Some(MatvecRows))).no_norm(),
    ];
    if ctx().has_f16() {
        cases.extend([
            base(case(17, Some(wide_f16(8, 4)))),
            base(case(70, Some(wide_f16(8, 4)))).no_norm(),
            base(case(33, Some(wide_f16(4, 8)))).long(),
            base(case(100, Some(wide_f16(4, 8)))),
            base(case(5, Some(wide_f16(4, 4)))),
        ]);
    } else {
        println!("no shader-f16 on this adapter; the f16 wide tiles are not tested");
    }
    if ctx().has_subgroups() {
        cases.extend([
            base(case(1, Some(MatvecSubgroup))),
            base(case(2, Some(MatvecSubgroup))).long(),
            base(case(3, Some(MatvecSubgroup))).no_norm(),
            base(case(32, Some(MatvecSubgroup))),
            base(case(1, Some(MatvecChunk))),
            base(case(2, Some(MatvecChunk))).long(),
            base(case(3, Some(MatvecChunk))).no_norm(),
            base(case(32, Some(MatvecChunk))).long(),
            base(case(2, Some(MatvecChunk))).two_tiles(),
        ]);
    } else {
        println!("no SUBGROUP on this adapter; subgroup matvec not tested");
    }
    if ctx().has_coop_gemm() {
        cases.extend([
            base(case(17, Some(TiledCoop))),
            base(case(70, Some(TiledCoop))).no_norm(),
            base(case(64, Some(TiledCoop))).long(),
            base(case(33, Some(TiledCoop))).two_tiles(),
        ]);
        // The short-step tiles (COCO_COOP_STREAM): 5 to 32 tokens.
        let stream = CoopStream(ctx().coop_block.expect("coop GEMM on"));
        cases.extend([
            base(case(5, Some(stream))),
            base(case(32, Some(stream))).no_norm(),
            base(case(17, Some(stream))).long(),
            base(case(9, Some(stream))).two_tiles(),
        ]);
        common::say_coop128_form();
        cases.extend([
            base(case(17, Some(Coop128))),
            base(case(150, Some(Coop128))).no_norm(),
            base(case(130, Some(Coop128))).long(),
        ]);
    } else {
        println!(
            "the f16 cooperative-matrix GEMM is off (not offered here, or COCO_COOPMAT=0); not tested"
        );
    }
    if has_levels8(ty) {
        // The browser's int8 subgroup-matrix GEMM, its matrix builtins emulated, and the same
        // levels on dot4I8Packed (gemm=dot4).
        for int8 in [MatrixI8 { emulated: true }, Dot4I8] {
            cases.extend([
                base(case(17, Some(int8))),
                base(case(70, Some(int8))).no_norm(),
                base(case(33, Some(int8))).long(),
            ]);
        }
    }
    cases
}

/// A kernel that failed validation (a shader the driver rejected) leaves its output as it
/// was, NaN here, which the comparison would only report as a mismatch: name the cause.
fn assert_healthy(label: &str) {
    ctx()
        .check_health()
        .unwrap_or_else(|e| panic!("{label}: {e}"));
}

fn label_of(rec: &StepRecorder) -> String {
    let labels = common::product_labels(rec);
    let mut first = labels.first().cloned().unwrap_or_default();
    if labels.len() > 1 {
        first += &format!(" (+{} more)", labels.len() - 1);
    }
    first
}

// ---- matmul_normed ----

/// y (+)= norm(x)·wᵀ (+ bias) for N = 67; returns the max |error|.
fn run_normed(ty: GgmlType, c: Case, seed: u64) -> Err {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (n, k, t) = (67, c.k(ty), c.t);
    let (wt, w) = weight(&mut rng, "w", ty, n, k, c.part_rows, 2.0);
    let x = residual(&mut rng, t, k);
    let nw = random_f32(&mut rng, k, -1.5, 1.5);
    let bias = random_f32(&mut rng, n, -1.0, 1.0);
    let y0 = if c.accumulate {
        random_f32(&mut rng, t * n, -1.0, 1.0)
    } else {
        vec![f32::NAN; t * n] // an output the kernel never writes fails
    };
    let (xb, nwb, bb, yb) = (
        buffer("x", &x),
        buffer("norm_w", &nw),
        buffer("bias", &bias),
        buffer("y", &y0),
    );
    let mut rec = StepRecorder::new(ctx());
    let args = MatmulArgs {
        bias: c.bias.then_some(&bb),
        accumulate: c.accumulate,
        ..MatmulArgs::default()
    };
    let x_binding = Binding::from(&xb);
    let y_binding = Binding::from(&yb);
    if c.norm {
        let nwb = Binding::from(&nwb);
        matmul_normed_variant(
            &mut rec, &wt, &x_binding, &nwb, EPS, &y_binding, t as u32, args, c.variant,
        )
    } else {
        coco::kernels::matmul::matmul_variant(
            &mut rec, &wt, &x_binding, &y_binding, t as u32, args, c.variant,
        )
    }
    .expect("matmul_normed");
    assert_eq!(
        common::product_labels(&rec).len(),
        wt.parts.len(),
        "one dispatch per part"
    );
    let label = label_of(&rec);
    rec.submit();
    let got = ctx().read_f32(&yb, 0, (t * n) as u64).expect("readback");
    assert_healthy(&label);

    let xn = normed(&x, c.norm.then_some(&nw[..]), t, k, &label);
    let (mut want, tol) = reference_product(&w, &xn, n, k, t, &label);
    for (i, v) in want.iter_mut().enumerate() {
        if c.bias {
            *v += bias[i % n] as f64;
        }
        if c.accumulate {
            *v += y0[i] as f64;
        }
    }
    let what = format!("{c:?} ({label})");
    let err = compare(&what, &got, &want, &tol, n);
    println!(
        "{label:<44} T={t:<3} K={k:<5} norm={:<5} bias={:<5} acc={:<5} parts={:<2} {err}",
        c.norm,
        c.bias,
        c.accumulate,
        wt.parts.len()
    );
    err
}

fn normed_type(ty: GgmlType) -> Err {
    let mut cases = variants_cases(ty, |c| c.bias());
    cases.extend([
        case(3, Some(MatvecWorkgroup)).accumulate(),
        case(1, Some(MatvecWorkgroup)).bias().accumulate().split(12),
        case(17, Some(Tiled)).bias().accumulate().split(12),
        case(2, None).split(12),
    ]);
    if ctx().has_subgroups() {
        cases.push(case(1, Some(MatvecSubgroup)).bias().split(12));
        cases.push(case(1, Some(MatvecChunk)).bias().split(12));
    }
    let mut worst = Err::default();
    for (i, c) in cases.into_iter().enumerate() {
        if !common::variant_selected(c.variant) {
            continue;
        }
        worst = worst.max(run_normed(ty, c, 1000 * ty.id() as u64 + i as u64));
    }
    worst
}

// ---- matmul_glu ----

/// out = act(x'·w_gateᵀ) ⊙ (x'·w_upᵀ) for ffn = 67; returns the max |error|.
fn run_glu(ty: GgmlType, c: Case, seed: u64) -> Err {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (ffn, k, t) = (67, c.k(ty), c.t);
    let (wg, gate_w) = weight(&mut rng, "w_gate", ty, ffn, k, c.part_rows, 2.0);
    let (wu, up_w) = weight(&mut rng, "w_up", ty, ffn, k, c.part_rows, 2.0);
    let x = residual(&mut rng, t, k);
    let nw = random_f32(&mut rng, k, -1.5, 1.5);
    let act = if c.gelu {
        Activation::GeluTanh
    } else {
        Activation::Silu
    };
    let (xb, nwb) = (buffer("x", &x), buffer("norm_w", &nw));
    let outb = buffer("out", &vec![f32::NAN; t * ffn]);
    let nwb = Binding::from(&nwb);
    let norm = c.norm.then_some((&nwb, EPS));
    let mut rec = StepRecorder::new(ctx());
    matmul_glu_variant(
        &mut rec,
        &wg,
        &wu,
        &Binding::from(&xb),
        norm,
        &Binding::from(&outb),
        None,
        t as u32,
        act,
        c.variant,
    )
    .expect("matmul_glu");
    assert_eq!(
        common::product_labels(&rec).len(),
        wg.parts.len(),
        "one dispatch per part pair"
    );
    let label = label_of(&rec);
    rec.submit();
    let got = ctx()
        .read_f32(&outb, 0, (t * ffn) as u64)
        .expect("readback");
    assert_healthy(&label);

    let xn = normed(&x, c.norm.then_some(&nw[..]), t, k, &label);
    let (g, g_tol) = reference_product(&gate_w, &xn, ffn, k, t, &label);
    let (u, u_tol) = reference_product(&up_w, &xn, ffn, k, t, &label);
    let g32: Vec<f32> = g.iter().map(|&v| v as f32).collect();
    let up32: Vec<f32> = u.iter().map(|&v| v as f32).collect();
    let want: Vec<f64> = ops::glu(&g32, &up32, act)
        .iter()
        .map(|&v| v as f64)
        .collect();
    let tol: Vec<f64> = (0..want.len())
        .map(|i| {
            let a = ops::activation(g[i], act).abs();
            1.2 * g_tol[i] * (u[i].abs() + u_tol[i]) + a * u_tol[i] + RTOL * want[i].abs() + 1e-6
        })
        .collect();
    let what = format!("{c:?} ({label})");
    let err = compare(&what, &got, &want, &tol, ffn);
    println!(
        "{label:<44} T={t:<3} K={k:<5} norm={:<5} parts={:<2} {err}",
        c.norm,
        wg.parts.len()
    );
    err
}

fn glu_type(ty: GgmlType) -> Err {
    let mut cases = variants_cases(ty, |c| c);
    cases.extend([
        case(2, Some(MatvecWorkgroup)).gelu(),
        case(17, Some(Tiled)).gelu().no_norm(),
        case(1, Some(MatvecWorkgroup)).split(12),
        case(17, Some(Tiled)).split(12).gelu(),
    ]);
    if ctx().has_subgroups() {
        cases.push(case(3, Some(MatvecSubgroup)).split(12).gelu());
        cases.push(case(3, Some(MatvecChunk)).split(12).gelu());
        cases.push(case(2, Some(MatvecChunkWide(64))).long());
    }
    let mut worst = Err::default();
    for (i, c) in cases.into_iter().enumerate() {
        if !common::variant_selected(c.variant) {
            continue;
        }
        worst = worst.max(run_glu(ty, c, 2000 * ty.id() as u64 + i as u64));
    }
    worst
}

// ---- matmul_qkv ----

/// q, k, v = x'·w_{q,k,v}ᵀ (+ biases) for Nq = 67, Nk = Nv = 19 (so Q/K and K/V boundaries
/// fall inside workgroups); returns the max |error|.
fn run_qkv(ty: GgmlType, c: Case, seed: u64) -> Err {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (k, t) = (c.k(ty), c.t);
    let ns = [67usize, 19, 19];
    let kv_ty = if c.mixed { other_type(ty) } else { ty };
    let (wq, q_w) = weight(&mut rng, "wq", ty, ns[0], k, c.part_rows, 2.0);
    let (wk, k_w) = weight(&mut rng, "wk", kv_ty, ns[1], k, c.part_rows, 2.0);
    let (wv, v_w) = weight(&mut rng, "wv", kv_ty, ns[2], k, c.part_rows, 2.0);
    let x = residual(&mut rng, t, k);
    let nw = random_f32(&mut rng, k, -1.5, 1.5);
    let biases: Vec<Vec<f32>> = ns
        .iter()
        .map(|&n| random_f32(&mut rng, n, -1.0, 1.0))
        .collect();

    let (xb, nwb) = (buffer("x", &x), Binding::from(&buffer("norm_w", &nw)));
    let outs: Vec<wgpu::Buffer> = ns
        .iter()
        .map(|&n| buffer("out", &vec![f32::NAN; t * n]))
        .collect();
    let bbs: Vec<Binding> = biases
        .iter()
        .map(|b| Binding::from(&buffer("b", b)))
        .collect();
    let ob: Vec<Binding> = outs.iter().map(Binding::from).collect();
    let mut rec = StepRecorder::new(ctx());
    matmul_qkv_variant(
        &mut rec,
        &wq,
        &wk,
        &wv,
        &Binding::from(&xb),
        c.norm.then_some((&nwb, EPS)),
        &ob[0],
        &ob[1],
        &ob[2],
        t as u32,
        c.bias.then_some((&bbs[0], &bbs[1], &bbs[2])),
        c.variant,
    )
    .expect("matmul_qkv");
    let limit = ctx().limits.max_storage_buffers_per_shader_stage;
    let bindings = 7 + c.norm as u32 + 3 * c.bias as u32;
    let fuses = !c.mixed && c.part_rows.is_none() && bindings <= limit;
    let parts = wq.parts.len() + wk.parts.len() + wv.parts.len();
    let expected = if fuses { 1 } else { parts };
    assert_eq!(
        common::product_labels(&rec).len(),
        expected,
        "{c:?}: dispatches"
    );
    let label = label_of(&rec);
    rec.submit();

    let xn = normed(&x, c.norm.then_some(&nw[..]), t, k, &label);
    let mut err = Err::default();
    for (i, (w, name)) in [&q_w, &k_w, &v_w].iter().zip(["q", "k", "v"]).enumerate() {
        let n = ns[i];
        let got = ctx()
            .read_f32(&outs[i], 0, (t * n) as u64)
            .expect("readback");
        assert_healthy(&label);
        let (mut want, tol) = reference_product(w, &xn, n, k, t, &label);
        if c.bias {
            for (j, v) in want.iter_mut().enumerate() {
                *v += biases[i][j % n] as f64;
            }
        }
        let what = format!("{c:?} ({label}) output {name}");
        err = err.max(compare(&what, &got, &want, &tol, n));
    }
    println!(
        "{label:<44} T={t:<3} K={k:<5} norm={:<5} bias={:<5} kv={:<5} dispatches={expected:<2} {err}",
        c.norm,
        c.bias,
        kv_ty.name()
    );
    err
}

fn qkv_type(ty: GgmlType) -> Err {
    let mut cases = variants_cases(ty, |c| c);
    cases.extend([
        case(1, Some(MatvecWorkgroup)).bias(),
        case(3, Some(MatvecWorkgroup)).no_norm().bias(),
        case(17, Some(Tiled)).bias(),
        case(64, None).no_norm().bias(),
        // Fallbacks to three dispatches: a type mix, and split weights.
        case(1, None).bias().mixed(),
        case(17, None).mixed(),
        case(2, Some(MatvecWorkgroup)).bias().split(12),
    ]);
    if ctx().has_subgroups() {
        cases.push(case(1, Some(MatvecSubgroup)).bias());
        cases.push(case(1, Some(MatvecChunk)).bias());
        cases.push(case(1, Some(MatvecChunkWide(32))).bias());
    }
    let mut worst = Err::default();
    for (i, c) in cases.into_iter().enumerate() {
        if !common::variant_selected(c.variant) {
            continue;
        }
        worst = worst.max(run_qkv(ty, c, 3000 * ty.id() as u64 + i as u64));
    }
    worst
}

// ---- matmul_post_norm_add ----

/// residual += RMSNorm(x·wᵀ) ⊙ post_w (gemma's post-norms folded into W_o / W_down) for `n`
/// rows: the product's reference, then the norm of each token's row in f64. A row's norm
/// sees every element's error: each output may be off by its own allowance plus the row's
/// largest, times its weight and the row's 1/rms.
fn run_post_norm(ty: GgmlType, n: usize, t: usize, variant: MatmulVariant, seed: u64) -> Err {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let k = k_for(ty, false);
    let (wt, w) = weight(&mut rng, "w", ty, n, k, None, 2.0);
    let x = random_f32(&mut rng, t * k, -2.0, 2.0);
    let post_w = random_f32(&mut rng, n, 0.5, 2.5);
    let res0 = random_f32(&mut rng, t * n, -4.0, 4.0);
    let (xb, pwb, rb) = (
        buffer("x", &x),
        buffer("post_w", &post_w),
        buffer("res", &res0),
    );
    let mut rec = StepRecorder::new(ctx());
    let (pw, res) = (Binding::from(&pwb), Binding::from(&rb));
    let post = PostNormAdd {
        w: &pw,
        eps: EPS,
        residual: &res,
    };
    matmul_post_norm_add_variant(
        &mut rec,
        &wt,
        &Binding::from(&xb),
        post,
        t as u32,
        Some(variant),
    )
    .expect("matmul_post_norm_add");
    assert_eq!(rec.dispatch_count(), 1, "one dispatch");
    let label = label_of(&rec);
    rec.submit();
    let got = ctx().read_f32(&rb, 0, (t * n) as u64).expect("readback");
    assert_healthy(&label);

    let xs = normed(&x, None, t, k, &label);
    let (prod, tol) = reference_product(&w, &xs, n, k, t, &label);
    let (mut want, mut tol_out) = (vec![0.0; t * n], vec![0.0; t * n]);
    for tok in 0..t {
        let row = tok * n..(tok + 1) * n;
        let mean_sq = prod[row.clone()].iter().map(|v| v * v).sum::<f64>() / n as f64;
        let inv_rms = 1.0 / (mean_sq + EPS as f64).sqrt();
        let worst = tol[row.clone()].iter().cloned().fold(0.0, f64::max);
        for i in row {
            let pw = post_w[i % n] as f64;
            want[i] = res0[i] as f64 + prod[i] * inv_rms * pw;
            tol_out[i] = pw * inv_rms * (tol[i] + worst) + RTOL * want[i].abs();
        }
    }
    let err = compare(
        &format!("post norm {variant:?} N={n} T={t} ({label})"),
        &got,
        &want,
        &tol_out,
        n,
    );
    println!("{label:<44} T={t:<3} K={k:<5} N={n:<4} {err}");
    err
}

fn post_norm_type(ty: GgmlType) -> Err {
    let mut worst = Err::default();
    if !ctx().has_subgroups() {
        println!("no SUBGROUP on this adapter; the post-norm epilogue not tested");
        return worst;
    }
    // Row counts over several workgroups (the last arriving one norms them all), one a
    // Gemma-3-270M row (640), tokens 1 to 3 (a counter each).
    for (i, (variant, n, t)) in [
        (MatvecSubgroup, 67, 1),
        (MatvecSubgroup, 640, 3),
        (MatvecChunk, 67, 2),
        (MatvecChunk, 640, 1),
        (MatvecChunkWide(32), 133, 1),
    ]
    .into_iter()
    .enumerate()
    {
        if !common::variant_selected(Some(variant)) {
            continue;
        }
        worst = worst.max(run_post_norm(
            ty,
            n,
            t,
            variant,
            5000 * ty.id() as u64 + i as u64,
        ));
    }
    worst
}

/// The shapes without the epilogue refuse it rather than compute something else.
#[test]
fn post_norm_refused_by_shapes_without_it() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (wt, _) = weight(&mut rng, "w", GgmlType::Q8_0, 16, 160, None, 2.0);
    let (x, pw, res) = (
        buffer("x", &[0.5; 160]),
        buffer("pw", &[1.0; 16]),
        buffer("r", &[0.0; 16]),
    );
    let (pw, res) = (Binding::from(&pw), Binding::from(&res));
    for variant in [MatvecWorkgroup, MatvecRows, Tiled] {
        let mut rec = StepRecorder::new(ctx());
        let post = PostNormAdd {
            w: &pw,
            eps: EPS,
            residual: &res,
        };
        let err =
            matmul_post_norm_add_variant(&mut rec, &wt, &Binding::from(&x), post, 1, Some(variant))
                .expect_err("no post-norm epilogue");
        assert!(
            err.to_string().contains("post-norm epilogue"),
            "{variant:?}: {err}"
        );
        assert_eq!(rec.dispatch_count(), 0);
    }
}

fn fused_type(ty: GgmlType) {
    let normed = normed_type(ty);
    let glu = glu_type(ty);
    let qkv = qkv_type(ty);
    let post_norm = post_norm_type(ty);
    println!("{ty}: normed {normed}; glu {glu}; qkv {qkv}; post norm {post_norm}");
}

#[test]
fn fused_f32() {
    fused_type(GgmlType::F32);
}
#[test]
fn fused_f16() {
    fused_type(GgmlType::F16);
}
#[test]
fn fused_bf16() {
    fused_type(GgmlType::BF16);
}
#[test]
fn fused_q8_0() {
    fused_type(GgmlType::Q8_0);
}
#[test]
fn fused_q4_0() {
    fused_type(GgmlType::Q4_0);
}
#[test]
fn fused_q5_0() {
    fused_type(GgmlType::Q5_0);
}
#[test]
fn fused_q4_k() {
    fused_type(GgmlType::Q4_K);
}
#[test]
fn fused_q5_k() {
    fused_type(GgmlType::Q5_K);
}
#[test]
fn fused_q6_k() {
    fused_type(GgmlType::Q6_K);
}
#[test]
fn fused_q4_1() {
    fused_type(GgmlType::Q4_1);
}
#[test]
fn fused_q5_1() {
    fused_type(GgmlType::Q5_1);
}
#[test]
fn fused_iq4_nl() {
    fused_type(GgmlType::IQ4_NL);
}
#[test]
fn fused_q2_k() {
    fused_type(GgmlType::Q2_K);
}
#[test]
fn fused_q3_k() {
    fused_type(GgmlType::Q3_K);
}
#[test]
fn fused_iq4_xs() {
    fused_type(GgmlType::IQ4_XS);
}

/// Gate and up of different types cannot share a dispatch: a typed error, nothing recorded.
#[test]
fn glu_rejects_mismatched_weights() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (wg, _) = weight(&mut rng, "w_gate", GgmlType::Q8_0, 8, 64, None, 2.0);
    let (wu, _) = weight(&mut rng, "w_up", GgmlType::Q4_0, 8, 64, None, 2.0);
    let x = buffer("x", &[0.5; 64]);
    let out = buffer("out", &[0.0; 8]);
    let mut rec = StepRecorder::new(ctx());
    let r = matmul_glu_variant(
        &mut rec,
        &wg,
        &wu,
        &Binding::from(&x),
        None,
        &Binding::from(&out),
        None,
        1,
        Activation::Silu,
        None,
    );
    assert!(r.is_err(), "mismatched gate/up must be refused");
    assert_eq!(rec.dispatch_count(), 0);
}

// ---- throughput (not a correctness test) ----

/// One decoder layer's inputs to its matmuls, [N, K] weights of one type.
struct BenchLayer {
    wq: GpuTensor,
    wk: GpuTensor,
    wv: GpuTensor,
    w_gate: GpuTensor,
    w_up: GpuTensor,
}

/// Median wall time of one step recording `record` (one compute pass), over 9 steps after 2
/// warm-ups.
fn time_step(record: &dyn Fn(&mut StepRecorder)) -> f64 {
    let ctx = ctx();
    let mut times = Vec::new();
    for rep in 0..11 {
        let mut rec = StepRecorder::new(ctx);
        record(&mut rec);
        let start = std::time::Instant::now();
        rec.submit();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        if rep >= 2 {
            times.push(start.elapsed().as_secs_f64());
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

/// Unfused against fused decode (T = 1) for Llama-3.2-1B's shapes (dim 2048, Q 2048, K/V 512,
/// FFN 8192) over 16 layers of distinct random weights (so the H200's L2 holds none of them):
/// norm + Q + K + V (4 dispatches) vs `matmul_qkv` (1), and norm + gate + up + glu (4) vs
/// `matmul_glu` (1). On the H200:
/// `cargo test --release --test kernels_matmul_fused -- --ignored --nocapture bench`.
#[test]
#[ignore]
fn bench_fused() {
    use coco::kernels::elementwise::glu;
    use coco::kernels::matmul::matmul_variant;
    use coco::kernels::norm::rms_norm;
    let ctx = ctx();
    // BENCH_DIV=8 shrinks the shapes to try the bench on lavapipe.
    let div: u64 = std::env::var("BENCH_DIV")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // BENCH_SHARED=1: every layer reads the same weights (L2-resident when they fit);
    // BENCH_ZERO=1: all-zero weight bytes (no NaN/denormal scales); BENCH_TYPES=Q4_0,Q4_K.
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let (shared, zero) = (flag("BENCH_SHARED"), flag("BENCH_ZERO"));
    let types = std::env::var("BENCH_TYPES").unwrap_or_else(|_| "Q4_0,Q8_0,Q4_K,F16".into());
    let (dim, nq, nkv, ffn, layers) = (2048 / div, 2048 / div, 512 / div, 8192 / div, 16);
    let mut s = 0x9e3779b97f4a7c15u64;
    let mut random_bytes = |len: u64| -> Vec<u8> {
        if zero {
            return vec![0; len as usize];
        }
        (0..len.div_ceil(8))
            .flat_map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s.to_le_bytes()
            })
            .take(len as usize)
            .collect()
    };
    println!("{}", ctx.describe());
    let mut variants = vec![MatvecWorkgroup];
    if ctx.has_subgroups() {
        variants.extend([MatvecSubgroup, MatvecChunk]);
    }
    println!("shared weights: {shared}; zero weights: {zero}");
    for ty in GgmlType::SUPPORTED {
        if !types.split(',').any(|t| t == ty.name()) {
            continue;
        }
        if ty.bytes_for(dim).is_none() {
            continue; // K-quants need K % 256 == 0 (a BENCH_DIV too large)
        }
        let mut tensor = |name: &str, n: u64| {
            let bytes = random_bytes(n * ty.bytes_for(dim).unwrap());
            GpuTensor::from_bytes(ctx, name, ty, dim, n, &bytes, ctx.max_binding_bytes())
        };
        let distinct = if shared { 1 } else { layers };
        let owned: Vec<BenchLayer> = (0..distinct)
            .map(|_| BenchLayer {
                wq: tensor("wq", nq),
                wk: tensor("wk", nkv),
                wv: tensor("wv", nkv),
                w_gate: tensor("w_gate", ffn),
                w_up: tensor("w_up", ffn),
            })
            .collect();
        let layer: Vec<&BenchLayer> = (0..layers).map(|l| &owned[l % distinct]).collect();
        let x = buffer("x", &vec![0.5; dim as usize]);
        let nw = buffer("norm_w", &vec![1.0; dim as usize]);
        let xn = ctx.storage_buffer("xn", dim * 4);
        let (q, k, v) = (
            ctx.storage_buffer("q", nq * 4),
            ctx.storage_buffer("k", nkv * 4),
            ctx.storage_buffer("v", nkv * 4),
        );
        let (gate, up, act) = (
            ctx.storage_buffer("gate", ffn * 4),
            ctx.storage_buffer("up", ffn * 4),
            ctx.storage_buffer("act", ffn * 4),
        );
        let b = Binding::from;
        let eps = 1e-5;
        for &variant in &variants {
            let vr = Some(variant);
            let none = MatmulArgs::default();
            let qkv_unfused = time_step(&|rec| {
                for l in &layer {
                    rms_norm(rec, &b(&x), &b(&nw), &b(&xn), 1, dim as u32, eps).unwrap();
                    matmul_variant(rec, &l.wq, &b(&xn), &b(&q), 1, none, vr).unwrap();
                    matmul_variant(rec, &l.wk, &b(&xn), &b(&k), 1, none, vr).unwrap();
                    matmul_variant(rec, &l.wv, &b(&xn), &b(&v), 1, none, vr).unwrap();
                }
            });
            let qkv_fused = time_step(&|rec| {
                for l in &layer {
                    let norm = Some((&b(&nw), eps));
                    matmul_qkv_variant(
                        rec,
                        &l.wq,
                        &l.wk,
                        &l.wv,
                        &b(&x),
                        norm,
                        &b(&q),
                        &b(&k),
                        &b(&v),
                        1,
                        None,
                        vr,
                    )
                    .unwrap();
                }
            });
            let ffn_unfused = time_step(&|rec| {
                for l in &layer {
                    rms_norm(rec, &b(&x), &b(&nw), &b(&xn), 1, dim as u32, eps).unwrap();
                    matmul_variant(rec, &l.w_gate, &b(&xn), &b(&gate), 1, none, vr).unwrap();
                    matmul_variant(rec, &l.w_up, &b(&xn), &b(&up), 1, none, vr).unwrap();
                    glu(
                        rec,
                        &b(&gate),
                        &b(&up),
                        &b(&act),
                        ffn as u32,
                        Activation::Silu,
                    )
                    .unwrap();
                }
            });
            let ffn_fused = time_step(&|rec| {
                for l in &layer {
                    let norm = Some((&b(&nw), eps));
                    matmul_glu_variant(
                        rec,
                        &l.w_gate,
                        &l.w_up,
                        &b(&x),
                        norm,
                        &b(&act),
                        None,
                        1,
                        Activation::Silu,
                        vr,
                    )
                    .unwrap();
                }
            });
            let gate_only = time_step(&|rec| {
                for l in &layer {
                    matmul_variant(rec, &l.w_gate, &b(&xn), &b(&gate), 1, none, vr).unwrap();
                }
            });
            let per = |t: f64| t / layers as f64 * 1e6;
            println!(
                "{ty:<5} {variant:<16?} one [{ffn}, {dim}] matvec per layer: {:7.1} µs",
                per(gate_only)
            );
            println!(
                "{ty:<5} {variant:<16?} per layer: norm+qkv {:7.1} µs (4 disp) → fused {:7.1} µs (1)  ×{:.2} | norm+gate+up+glu {:7.1} µs (4) → fused {:7.1} µs (1)  ×{:.2}",
                per(qkv_unfused),
                per(qkv_fused),
                qkv_unfused / qkv_fused,
                per(ffn_unfused),
                per(ffn_fused),
                ffn_unfused / ffn_fused
            );
        }
    }
}
