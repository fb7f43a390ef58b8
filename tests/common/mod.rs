//! Helpers shared by the kernel test files (`mod common;` in each): one GPU context per test
//! binary, seeded random weights uploaded in a GGUF type with their CPU dequantization, and
//! the matmul tolerance. Each test binary uses a subset, hence the allow.
#![allow(dead_code)]

use std::sync::OnceLock;

use coco::gguf::GgmlType;
use coco::gpu::{GpuContext, GpuTensor, StepRecorder};
use coco::reference::matmul as reference;
use coco::reference::quant::{self, SeenX, XLevels};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The test binary's GPU context (lavapipe in CI), opened once; prints what it got, so a
/// failure log says which adapter and which optional features ran.
pub fn ctx() -> &'static GpuContext {
    static CTX: OnceLock<GpuContext> = OnceLock::new();
    CTX.get_or_init(|| {
        let ctx = GpuContext::new_blocking().expect("a GPU adapter (lavapipe in CI)");
        eprintln!(
            "adapter: {}; subgroups: {}; storage buffers per stage: {}",
            ctx.describe(),
            ctx.has_subgroups(),
            ctx.limits.max_storage_buffers_per_shader_stage
        );
        ctx
    })
}

/// Q2_K … Q6_K and IQ4_XS: 256-element super-blocks, so K must be a multiple of 256.
pub fn is_k_quant(ty: GgmlType) -> bool {
    ty.is_super_block()
}

/// `n` values uniform in `[lo, hi)`.
pub fn random_f32(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// Random `[rows, k]` weights of type `ty` on the GPU (split into parts of `part_rows` rows
/// when given) and their CPU dequantization. Each row gets its own scale in
/// `[0.05, max_scale)` and one value in 200 is a 6× outlier, as real weights have.
pub fn weight(
    rng: &mut ChaCha8Rng,
    name: &str,
    ty: GgmlType,
    rows: usize,
    k: usize,
    part_rows: Option<usize>,
    max_scale: f32,
) -> (GpuTensor, Vec<f32>) {
    let mut values = Vec::with_capacity(rows * k);
    for _ in 0..rows {
        let scale = rng.gen_range(0.05f32..max_scale);
        for _ in 0..k {
            let outlier = if rng.gen_ratio(1, 200) { 6.0 } else { 1.0 };
            values.push(rng.gen_range(-1.0f32..1.0) * scale * outlier);
        }
    }
    let bytes = quant::quantize(ty, &values).expect("quantize");
    let deq = quant::dequantize(ty, &bytes, values.len()).expect("dequantize");
    let row_bytes = ty.bytes_for(k as u64).unwrap();
    let max_part = part_rows.map_or(u64::MAX, |r| (r as u64 * row_bytes).div_ceil(16) * 16);
    let t = GpuTensor::from_bytes(ctx(), name, ty, k as u64, rows as u64, &bytes, max_part);
    if let Some(r) = part_rows {
        assert_eq!(t.parts.len(), rows.div_ceil(r), "{name} should be split");
    }
    (t, deq)
}

/// The labels of `rec`'s product dispatches: without the per-token scale pass that records
/// before each tensor-core GEMM (`matmul_token_scale`, `…_norm`), nor the merge after a
/// 128-token tensor-core GEMM that split K (`…_merge`).
pub fn product_labels(rec: &StepRecorder) -> Vec<String> {
    rec.labels()
        .into_iter()
        .filter(|l| !l.starts_with("matmul_token_scale") && !l.ends_with("_merge"))
        .collect()
}

/// Whether a kernel test case of `variant` (None: the launcher's own choice) runs: all do,
/// unless `COCO_TEST_VARIANTS` lists label parts (comma-separated, e.g. `coop`) and the
/// variant's label contains none of them. For device runs of the tensor-core cases alone,
/// whose full suites take minutes there.
pub fn variant_selected(variant: Option<coco::kernels::matmul::MatmulVariant>) -> bool {
    let Ok(wanted) = std::env::var("COCO_TEST_VARIANTS") else {
        return true;
    };
    let label = variant.map_or("chosen".to_string(), |v| v.label());
    wanted.split(',').any(|part| label.contains(part.trim()))
}

/// Says which form the 128-token tensor-core tiles take here: prestaged (double-buffered, split
/// K) they need 48 KiB of workgroup memory, which lavapipe (32 KiB) lacks, and the launch then
/// runs the form that stages x' itself (`MatmulKey::staged`); the 64-token tiles fit either way.
pub fn say_coop128_form() {
    use coco::kernels::matmul::{coop_prestage, DeviceKernels, MatmulKey, MatmulVariant};
    let ctx = ctx();
    let have = ctx.limits.max_compute_workgroup_storage_size;
    let key = MatmulKey::choose(
        DeviceKernels::of(ctx),
        GgmlType::Q4_0,
        130,
        false,
        Some(MatmulVariant::Coop128),
    )
    .staged(4096, have);
    if coop_prestage() && !key.x16 {
        println!(
            "{}: the prestaged 128-token tiles need 48 KiB of workgroup memory, this device \
             has {have} bytes; the tiles that stage x' themselves run instead",
            key.label()
        );
    }
}

/// A product may differ from the f64 reference by `atol + rtol·|ref|`, with
/// atol = ATOL_PER_ABS_SUM·Σ|w·x| (the scale of an f32 sum's rounding error) + 1e-6.
pub const RTOL: f64 = 1e-5;
pub const ATOL_PER_ABS_SUM: f64 = 2e-6;
/// The cooperative-matrix GEMM rounds W and x' to f16 (relative error ≤ 2^-11 each), so its
/// error bound per Σ|w·x| is about 2 · 2^-11; 2e-3 leaves a little headroom.
pub const COOP_ATOL_PER_ABS_SUM: f64 = 2e-3;

/// The f16 wide tiles (`gemm_wide_f16.wgsl`) also sum each 16 products of a lane in f16: at
/// most 16 roundings of 2^-11 of the partial's Σ|w·x|, beside the operands' 2 · 2^-11, so
/// 18 · 2^-11 ≈ 8.8e-3 bounds the error per Σ|w·x|.
pub const WIDE_F16_ATOL_PER_ABS_SUM: f64 = 9e-3;

/// The error allowed per Σ|w·x| for the kernel `label`: the f16 wide tiles', the f16
/// operands' ([`has_f16_operands`]) or an f32 sum's.
pub fn atol_per_abs_sum(label: &str) -> f64 {
    if label.contains("_wideh") {
        WIDE_F16_ATOL_PER_ABS_SUM
    } else if has_f16_operands(label) {
        COOP_ATOL_PER_ABS_SUM
    } else {
        ATOL_PER_ABS_SUM
    }
}

/// Whether the kernel `label` multiplies f16-rounded operands: the cooperative-matrix GEMM, or
/// the portable tiles emulating it (`COCO_GEMM_F16_OPERANDS=1`, labels ending `_f16ops`).
pub fn has_f16_operands(label: &str) -> bool {
    label.contains("_coop") || label.ends_with("_f16ops")
}

/// How the kernel `label` stages x' (`quant::XLevels`): the dot-product GEMM (`dot4_q8`) as
/// one int8 level per element, the int8 chunk matvec and the subgroup-matrix GEMM (`_i8`) as
/// two, every other product as it is.
pub fn x_levels(label: &str) -> XLevels {
    if label.contains("dot4_q8") {
        XLevels::Int8
    } else if label.contains("_i8") {
        XLevels::Int8Pair
    } else {
        XLevels::Exact
    }
}

/// The reference product x'·wᵀ `[t, n]` in f64-accurate f32 and its tolerance per element
/// for the kernel `label` (the f16 cooperative-matrix GEMM gets [`COOP_ATOL_PER_ABS_SUM`]),
/// widened by Σ|w|·slack where x' as the kernel stages it may round either way
/// (`quant::int8_stage`).
pub fn reference_product(
    w: &[f32],
    x: &SeenX,
    n: usize,
    k: usize,
    t: usize,
    label: &str,
) -> (Vec<f64>, Vec<f64>) {
    let want = reference::matmul(w, &x.values, n, k, t);
    let abs = reference::matmul_abs(w, &x.values, n, k, t);
    let slack = reference::matmul_abs(w, &x.slack, n, k, t);
    let atol = atol_per_abs_sum(label);
    let tol = want
        .iter()
        .zip(abs.iter().zip(&slack))
        .map(|(&r, (&a, &s))| atol * a as f64 + 1e-6 + RTOL * (r as f64).abs() + s as f64)
        .collect();
    (want.iter().map(|&v| v as f64).collect(), tol)
}

/// The worst error of a comparison: absolute, and as a fraction of its tolerance.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Worst {
    pub abs: f64,
    pub ratio: f64,
}

impl Worst {
    pub fn max(self, o: Worst) -> Worst {
        Worst {
            abs: self.abs.max(o.abs),
            ratio: self.ratio.max(o.ratio),
        }
    }
}

impl std::fmt::Display for Worst {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "max|err| {:.2e} ({:.0}% of tol)",
            self.abs,
            100.0 * self.ratio
        )
    }
}

/// The one comparison every kernel test makes: `got` (the GPU's) against `want` (the
/// reference, in f64) element by element, `tol(i, want[i])` the tolerance of element `i`.
/// Panics at the first mismatch (a NaN is one) with both values and its position — `[t, n]`
/// for rows of width `row`, or the flat index when `row` is 0 — and returns the worst error.
pub fn assert_close(
    what: &str,
    got: &[f32],
    want: &[f64],
    tol: impl Fn(usize, f64) -> f64,
    row: usize,
) -> Worst {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values, want {}",
        got.len(),
        want.len()
    );
    let mut worst = Worst::default();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (g, t) = (g as f64, tol(i, w));
        let err = (g - w).abs();
        // Written so that a NaN error (a NaN output) fails too.
        if err.partial_cmp(&t).is_none_or(|o| o.is_gt()) {
            let at = match i.checked_div(row) {
                Some(tok) => format!("[t={tok}, n={}]", i % row),
                None => format!("[{i}]"),
            };
            panic!("{what}: first mismatch at {at}: gpu {g} vs reference {w} (|err| {err:.3e} > tol {t:.3e})");
        }
        worst = worst.max(Worst {
            abs: err,
            ratio: if t > 0.0 { err / t } else { 0.0 },
        });
    }
    worst
}

// ---- f32 helpers of the non-matmul kernel tests ---------------------------------------

/// `n` values uniform in `[-amp, amp)`, from `seed`.
pub fn random_uniform(seed: u64, n: usize, amp: f32) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-amp..amp)).collect()
}

pub fn upload_f32(label: &str, data: &[f32]) -> wgpu::Buffer {
    ctx().storage_buffer_init(label, bytemuck::cast_slice(data))
}

pub fn read_f32(buffer: &wgpu::Buffer, count: usize) -> Vec<f32> {
    ctx().read_f32(buffer, 0, count as u64).expect("readback")
}

/// Asserts `|got - want| <= atol + rtol·|want|` everywhere and prints the worst error.
pub fn assert_close_f32(what: &str, got: &[f32], want: &[f32], atol: f32, rtol: f32) {
    let want: Vec<f64> = want.iter().map(|&w| w as f64).collect();
    let (atol, rtol) = (atol as f64, rtol as f64);
    let worst = assert_close(what, got, &want, |_, w| atol + rtol * w.abs(), 0);
    println!("{what}: {worst}, {} values", got.len());
}
