//! Decode matvec designs side by side on one adapter, outside the engine: each candidate
//! kernel (WGSL below) and coco's own matvecs on the same re-laid Q4_0 / Q8_0 weights, at
//! the products of the issue's shapes, with enough copies of each weight that every dispatch
//! reads from memory, not L2. Prints µs per product and the weights' read rate, and each
//! candidate's largest difference from coco's chunk matvec (a fast wrong kernel is no
//! result), relative to its largest output: that kernel stages int8 levels by default
//! (within ~2e-5 of f32), `COCO_MATVEC=8x1x2x0x1x0` makes it the f32 loop (BENCHMARKS.md
//! "session 17" ran the lab against that one).
//!
//! `cargo run --release --example matvec_lab` (on the H200 through the device tool; on
//! lavapipe `LAB_DIV=16` shrinks the shapes).
//!
//! Candidates:
//! - `f32 R×C`: a subgroup owns R rows; a lane takes whole 32-element chunks (C per loop
//!   trip, all loads first), reads x'[chunk] from global memory (L1) once for its R rows, and
//!   folds Q4_0's −8 into one Σx per chunk; no workgroup memory, no barrier.
//! - `i8g R×C`: the same with x' quantized to int8 per 32-element block beforehand (on the
//!   CPU here) and `dot4I8Packed`: 4 multiply-adds per instruction (llama.cpp's MMVQ idea).
//! - `i8s R×C`: int8 x' quantized by each workgroup into workgroup memory in its prologue
//!   (what a fused kernel would pay), then as `i8g`.

use coco::gguf::GgmlType;
use coco::gpu::{Binding, GpuContext, GpuTensor, StepRecorder};
use coco::kernels::matmul::{matmul_variant, MatmulArgs, MatmulVariant};
use std::sync::Arc;

const HEADER: &str = r#"
struct P { k: u32, rows: u32, blocks: u32, groups: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
fn wl(i: u32) -> u32 { return w[i >> 2u][i & 3u]; }
// the f16 scale of block b (plane after the quants: word SCALE_WORD·blocks)
fn scale(b: u32) -> f32 {
    let h = unpack2x16float(wl(SCALE_WORD * p.blocks + (b >> 1u)));
    return select(h.x, h.y, (b & 1u) != 0u);
}
"#;

/// Σ q·x over one Q4_0 / Q8_0 chunk in f32: `q` is the chunk's quant units, x0 its x'.
const F32_KERNEL: &str = r#"
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) ss: u32,
) {
    let row0 = (wid.x * (256u / ss) + li / ss) * R;
    let nb = p.k / 32u;
    var acc: array<f32, R>;
    var rb: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        acc[r] = 0.0;
        rb[r] = min(row0 + r, p.rows - 1u) * nb;
    }
    for (var c0 = lane; c0 < nb; c0 += ss * C) {
        var q: array<array<vec4<u32>, UNITS>, RC>;
        var d: array<f32, RC>;
        for (var u = 0u; u < C; u++) {
            let c = min(c0 + ss * u, nb - 1u);
            for (var r = 0u; r < R; r++) {
                for (var i = 0u; i < UNITS; i++) {
                    q[u * R + r][i] = w[UNITS * (rb[r] + c) + i];
                }
                d[u * R + r] = select(0.0, scale(rb[r] + c), c0 + ss * u < nb);
            }
        }
        for (var u = 0u; u < C; u++) {
            let c = min(c0 + ss * u, nb - 1u);
            var s: array<f32, R>;
            for (var r = 0u; r < R; r++) { s[r] = 0.0; }
            var sx = vec4<f32>(0.0);
            for (var j = 0u; j < 4u; j++) {
                let xa = x[8u * c + 2u * j];
                let xb = x[8u * c + 2u * j + 1u];
                sx += xa + xb;
                for (var r = 0u; r < R; r++) {
                    s[r] += DOT8;
                }
            }
            for (var r = 0u; r < R; r++) {
                acc[r] += d[u * R + r] * (s[r] - OFFSET * ((sx.x + sx.y) + (sx.z + sx.w)));
            }
        }
    }
    for (var r = 0u; r < R; r++) {
        let t = subgroupAdd(acc[r]);
        if (lane == 0u && row0 + r < p.rows) {
            y[row0 + r] = t;
        }
    }
}
"#;

/// The int8 kernels' x' access: read pre-quantized from global memory (`i8g`), or staged
/// by the workgroup (`i8s`, with [`I8_STAGING`] as the prologue).
const I8_GLOBAL: &str = r#"
fn xq(i: u32) -> vec4<u32> { return xq_g[i]; }
fn xd(c: u32) -> vec2<f32> { return xd_g[c]; }
"#;
const I8_STAGED: &str = r#"
var<workgroup> xq_s: array<vec4<u32>, 2u * MAXB>;
var<workgroup> xd_s: array<vec2<f32>, MAXB>;
fn xq(i: u32) -> vec4<u32> { return xq_s[i]; }
fn xd(c: u32) -> vec2<f32> { return xd_s[c]; }
"#;
/// 8 invocations per 32-element block, a vec4 each: block max and Σq by xor shuffles.
const I8_STAGING: &str = r#"
    for (var v = li; v < p.k / 4u; v += 256u) {
        let a = x[v];
        var m = max(max(abs(a.x), abs(a.y)), max(abs(a.z), abs(a.w)));
        m = max(m, subgroupShuffleXor(m, 1u));
        m = max(m, subgroupShuffleXor(m, 2u));
        m = max(m, subgroupShuffleXor(m, 4u));
        let dx = m / 127.0;
        let inv = select(0.0, 127.0 / m, m > 0.0);
        let qi = vec4<i32>(round(a * inv));
        var sq = (qi.x + qi.y) + (qi.z + qi.w);
        sq += subgroupShuffleXor(sq, 1u);
        sq += subgroupShuffleXor(sq, 2u);
        sq += subgroupShuffleXor(sq, 4u);
        // vec4 v of x' is word v of the int8 row: unit v / 4, component v % 4
        xq_s[v >> 2u][v & 3u] = pack4xI8(qi);
        if ((v & 7u) == 0u) {
            xd_s[v >> 3u] = vec2<f32>(dx, f32(sq));
        }
    }
    workgroupBarrier();
"#;

/// The int8 kernels: x' as int8 words (8 per chunk) and per chunk (d_x, Σq_x), through
/// `xq`/`xd` (X_ACCESS), with the staged variant's prologue at STAGING.
const I8_KERNEL: &str = r#"
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> xq_g: array<vec4<u32>>;
@group(0) @binding(5) var<storage, read> xd_g: array<vec2<f32>>;
X_ACCESS
@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) ss: u32,
) {
    let row0 = (wid.x * (256u / ss) + li / ss) * R;
    let nb = p.k / 32u;
    if (p.groups == 0u) {
        y[0] = x[0].x; // keeps binding 2 in the derived layout of the global variant
    }
STAGING
    var acc: array<f32, R>;
    var rb: array<u32, R>;
    for (var r = 0u; r < R; r++) {
        acc[r] = 0.0;
        rb[r] = min(row0 + r, p.rows - 1u) * nb;
    }
    for (var c0 = lane; c0 < nb; c0 += ss * C) {
        var q: array<array<vec4<u32>, UNITS>, RC>;
        var d: array<f32, RC>;
        for (var u = 0u; u < C; u++) {
            let c = min(c0 + ss * u, nb - 1u);
            for (var r = 0u; r < R; r++) {
                for (var i = 0u; i < UNITS; i++) {
                    q[u * R + r][i] = w[UNITS * (rb[r] + c) + i];
                }
                d[u * R + r] = select(0.0, scale(rb[r] + c), c0 + ss * u < nb);
            }
        }
        for (var u = 0u; u < C; u++) {
            let c = min(c0 + ss * u, nb - 1u);
            let x0 = xq(2u * c);
            let x1 = xq(2u * c + 1u);
            let dx = xd(c);
            for (var r = 0u; r < R; r++) {
                let qq = q[u * R + r];
                let si = IDOT;
                acc[r] += d[u * R + r] * dx.x * (f32(si) - OFFSET * dx.y);
            }
        }
    }
    for (var r = 0u; r < R; r++) {
        let t = subgroupAdd(acc[r]);
        if (lane == 0u && row0 + r < p.rows) {
            y[row0 + r] = t;
        }
    }
}
"#;

#[derive(Clone, Copy, Debug)]
enum Kind {
    F32,
    I8Global,
    I8Staged,
}

fn source(kind: Kind, ty: GgmlType, r: u32, c: u32, max_blocks: u32) -> String {
    let q4 = ty == GgmlType::Q4_0;
    let (units, scale_word, offset) = if q4 { (1, 4, "8.0") } else { (2, 8, "0.0") };
    let dot8 = if q4 {
        "dot(vec4<f32>(unpack4xU8(q[u * R + r][0][j] & 0x0F0F0F0Fu)), xa) + dot(vec4<f32>(unpack4xU8((q[u * R + r][0][j] >> 4u) & 0x0F0F0F0Fu)), xb)"
    } else {
        "dot(vec4<f32>(unpack4xI8(q[u * R + r][j >> 1u][(j & 1u) * 2u])), xa) + dot(vec4<f32>(unpack4xI8(q[u * R + r][j >> 1u][(j & 1u) * 2u + 1u])), xb)"
    };
    let idot = if q4 {
        "dot4I8Packed(qq[0].x & 0x0F0F0F0Fu, x0.x) + dot4I8Packed((qq[0].x >> 4u) & 0x0F0F0F0Fu, x0.y) \
         + dot4I8Packed(qq[0].y & 0x0F0F0F0Fu, x0.z) + dot4I8Packed((qq[0].y >> 4u) & 0x0F0F0F0Fu, x0.w) \
         + dot4I8Packed(qq[0].z & 0x0F0F0F0Fu, x1.x) + dot4I8Packed((qq[0].z >> 4u) & 0x0F0F0F0Fu, x1.y) \
         + dot4I8Packed(qq[0].w & 0x0F0F0F0Fu, x1.z) + dot4I8Packed((qq[0].w >> 4u) & 0x0F0F0F0Fu, x1.w)"
    } else {
        "dot4I8Packed(qq[0].x, x0.x) + dot4I8Packed(qq[0].y, x0.y) + dot4I8Packed(qq[0].z, x0.z) \
         + dot4I8Packed(qq[0].w, x0.w) + dot4I8Packed(qq[1].x, x1.x) + dot4I8Packed(qq[1].y, x1.y) \
         + dot4I8Packed(qq[1].z, x1.z) + dot4I8Packed(qq[1].w, x1.w)"
    };
    let body = match kind {
        Kind::F32 => F32_KERNEL.to_string(),
        Kind::I8Global => I8_KERNEL
            .replace("X_ACCESS", I8_GLOBAL)
            .replace("STAGING\n", ""),
        Kind::I8Staged => I8_KERNEL
            .replace("X_ACCESS", I8_STAGED)
            .replace("STAGING\n", I8_STAGING),
    };
    let consts = format!(
        "const R: u32 = {r}u;\nconst C: u32 = {c}u;\nconst RC: u32 = {}u;\nconst UNITS: u32 = {units}u;\n\
         const SCALE_WORD: u32 = {scale_word}u;\nconst OFFSET: f32 = {offset};\nconst MAXB: u32 = {max_blocks}u;\n",
        r * c
    );
    format!(
        "{consts}{HEADER}{}",
        body.replace("DOT8", dot8).replace("IDOT", idot)
    )
}

fn random_bytes(seed: &mut u64, len: usize) -> Vec<u8> {
    (0..len.div_ceil(8))
        .flat_map(|_| {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            seed.to_le_bytes()
        })
        .take(len)
        .collect()
}

/// Blocks with sane scales: random quants, f16 scale 0.01 in every block.
fn weight_bytes(seed: &mut u64, ty: GgmlType, n: u64, k: u64) -> Vec<u8> {
    let mut b = random_bytes(seed, (n * ty.bytes_for(k).unwrap()) as usize);
    let block = ty.bytes_for(32).unwrap() as usize;
    let d = half::f16::from_f32(0.01).to_le_bytes();
    for chunk in b.chunks_mut(block) {
        chunk[..2].copy_from_slice(&d);
    }
    b
}

/// Median seconds per dispatch of `per` dispatches in one pass; `record(rec, i)` records
/// one on weight copy `i` (cycling over `copies`, so no dispatch finds its weights in L2).
fn time(ctx: &GpuContext, mut record: impl FnMut(&mut StepRecorder, usize), copies: usize) -> f64 {
    let per = 40;
    let mut times = Vec::new();
    for rep in 0..6 {
        let mut rec = StepRecorder::new(ctx);
        for i in 0..per {
            record(&mut rec, i % copies);
        }
        let start = std::time::Instant::now();
        rec.submit();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        if rep > 0 {
            times.push(start.elapsed().as_secs_f64() / per as f64);
        }
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

fn main() {
    let ctx = Arc::new(GpuContext::new_blocking().expect("gpu"));
    println!("{}", ctx.describe());
    assert!(ctx.has_subgroups(), "the lab's kernels need subgroups");
    let div: u64 = std::env::var("LAB_DIV")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let mut seed = 0x9e3779b97f4a7c15u64;
    // (what, N, K): Llama-3.1-8B's gate+up, down, Q/K/V; Llama-3.2-1B's gate+up, down, Q/K/V.
    let quick = std::env::var("LAB_QUICK").is_ok();
    let shapes = [
        ("8B gate+up", 28672 / div, 4096u64),
        ("8B down", 4096 / div, 14336),
        ("8B qkv", 6144 / div, 4096),
        ("1B gate+up", 16384 / div, 2048),
        ("1B down", 2048 / div, 8192),
        ("1B qkv", 3072 / div, 2048),
    ];
    let configs: Vec<(Kind, u32, u32)> = vec![
        (Kind::F32, 1, 1),
        (Kind::F32, 2, 1),
        (Kind::F32, 4, 1),
        (Kind::F32, 2, 2),
        (Kind::F32, 1, 4),
        (Kind::I8Global, 1, 1),
        (Kind::I8Global, 2, 1),
        (Kind::I8Global, 4, 1),
        (Kind::I8Global, 2, 2),
        (Kind::I8Global, 1, 4),
        (Kind::I8Staged, 2, 1),
        (Kind::I8Staged, 4, 1),
        (Kind::I8Staged, 2, 2),
        (Kind::I8Staged, 4, 2),
    ];
    println!("| type | product | N × K | kernel | µs | GB/s | max rel diff vs chunk |");
    println!("|---|---|---|---|---|---|---|");
    for ty in [GgmlType::Q4_0, GgmlType::Q8_0] {
        for &(what, n, k) in &shapes[..if quick { 2 } else { shapes.len() }] {
            let bytes = weight_bytes(&mut seed, ty, n, k);
            let size = bytes.len() as u64;
            let copies = (300_000_000 / size).clamp(1, 24) as usize;
            let ws: Vec<GpuTensor> = (0..copies)
                .map(|_| {
                    GpuTensor::from_bytes(&ctx, "w", ty, k, n, &bytes, ctx.max_binding_bytes())
                })
                .collect();
            drop(bytes);
            let xv: Vec<f32> = random_bytes(&mut seed, k as usize)
                .iter()
                .map(|&b| b as f32 / 128.0 - 1.0)
                .collect();
            // int8 blocks of x' and their (d, Σq), as the staged kernel makes them
            let mut xq = Vec::new();
            let mut xd = Vec::new();
            for blk in xv.chunks(32) {
                let m = blk.iter().fold(0f32, |a, v| a.max(v.abs()));
                let inv = if m > 0.0 { 127.0 / m } else { 0.0 };
                let q: Vec<i8> = blk.iter().map(|v| (v * inv).round() as i8).collect();
                xd.push(m / 127.0);
                xd.push(q.iter().map(|&v| v as i32).sum::<i32>() as f32);
                xq.extend(q.iter().map(|&v| v as u8));
            }
            let x = ctx.storage_buffer_init("x", bytemuck::cast_slice(&xv));
            let xq = ctx.storage_buffer_init("xq", &xq);
            let xd = ctx.storage_buffer_init("xd", bytemuck::cast_slice(&xd));
            let y = ctx.storage_buffer("y", n * 4);
            let xb = Binding::from(&x);
            let yb = Binding::from(&y);
            let gbs = |sec: f64| size as f64 / sec / 1e9;
            let mut reference = Vec::new();
            for v in [MatmulVariant::MatvecChunk, MatmulVariant::MatvecSubgroup] {
                let sec = time(
                    &ctx,
                    |rec, i| {
                        matmul_variant(rec, &ws[i], &xb, &yb, 1, MatmulArgs::default(), Some(v))
                            .expect("matmul")
                    },
                    copies,
                );
                if reference.is_empty() {
                    reference = ctx.read_f32(&y, 0, n).expect("read");
                }
                println!(
                    "| {} | {what} | {n} × {k} | coco {v:?} | {:.1} | {:.0} | |",
                    ty.name(),
                    sec * 1e6,
                    gbs(sec)
                );
            }
            let scale = reference.iter().fold(0f32, |a, v| a.max(v.abs())).max(1e-6);
            for &(kind, r, c) in &configs {
                let blocks = (n * k / 32) as u32;
                let src = source(kind, ty, r, c, (k / 32) as u32);
                let label = format!("lab_{kind:?}_{}_{r}x{c}_{k}", ty.name());
                let pipeline = ctx.pipeline(&label, || src);
                let groups = (n as u32).div_ceil(8 * r);
                let params = [k as u32, n as u32, blocks, groups];
                let sec = time(
                    &ctx,
                    |rec, i| {
                        let mut b = vec![
                            Binding::from(&ws[i].parts[0].buffer),
                            xb.clone(),
                            yb.clone(),
                        ];
                        if matches!(kind, Kind::I8Global) {
                            b.push(Binding::from(&xq));
                            b.push(Binding::from(&xd));
                        }
                        rec.dispatch(&pipeline, bytemuck::cast_slice(&params), &b, [groups, 1, 1])
                            .expect("dispatch")
                    },
                    copies,
                );
                let got = ctx.read_f32(&y, 0, n).expect("read");
                let diff = got
                    .iter()
                    .zip(&reference)
                    .fold(0f32, |a, (g, r)| a.max((g - r).abs()))
                    / scale;
                let name = match kind {
                    Kind::F32 => "f32",
                    Kind::I8Global => "i8g",
                    Kind::I8Staged => "i8s",
                };
                println!(
                    "| {} | {what} | {n} × {k} | {name} {r}×{c} | {:.1} | {:.0} | {diff:.1e} |",
                    ty.name(),
                    sec * 1e6,
                    gbs(sec)
                );
            }
        }
    }
}
