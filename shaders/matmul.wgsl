// y[T, N] = x[T, K] · W[N, K]ᵀ (+ bias[N]) (+ y when accumulating): every linear layer.
//
// W is read as the file's raw GGUF blocks and dequantized in registers (common/dequant.wgsl);
// no dequantized copy of a weight ever exists in GPU memory. One dispatch covers one part of
// W (rows row0 .. row0 + rows; see gpu::GpuTensor) and writes those columns of y.
//
// Defines (kernels/matmul.rs builds them from a MatmulKey):
//   weight type   F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K
//   kernel shape  MATVEC_WG | MATVEC_SG | TILED
//   BIAS          binding 4 holds bias[N] (a binding-layout change, hence a define)
// Constants prepended by kernels/matmul.rs (one source of truth for the host's grid math):
//   MV_ROWS, MV_LANES (matvec), TILE_N, TILE_T (tiled).
//
// Workgroups are folded into 2-D (x + y·num_workgroups.x) because a large vocabulary's logits
// can exceed the 65,535-per-dimension limit (matvec: from 524,288 rows at 8 rows per
// workgroup); groups past p.groups return at once.

#include "common/dequant.wgsl"

struct Params {
    k: u32,          // K: elements per row of W and of x
    n: u32,          // N: rows of the whole W = y's row stride
    t: u32,          // T: tokens
    row0: u32,       // first row of W held by this part
    rows: u32,       // rows in this part
    row_bytes: u32,  // bytes per row of W
    accumulate: u32, // 1: y += x·Wᵀ (residual adds fused in), 0: y = x·Wᵀ
    groups: u32,     // row groups/tiles that do work (the folded x·y grid may hold more)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<u32>;          // [rows, row_bytes] raw GGUF blocks
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;    // [T, K] f32
@group(0) @binding(3) var<storage, read_write> y: array<f32>;    // [T, N] f32
#ifdef BIAS
@group(0) @binding(4) var<storage, read> bias: array<f32>;       // [N] f32
#endif

// Writes y[t, row0 + row] from the dot product `v` (bias and accumulation applied here).
fn store(t: u32, row: u32, v: f32) {
    let n = p.row0 + row;
    var out = v;
#ifdef BIAS
    out += bias[n];
#endif
    let i = t * p.n + n;
    if (p.accumulate != 0u) {
        out += y[i];
    }
    y[i] = out;
}

// Partial dot product of W row `row` (of this part) with x[t], over the 8-element groups
// first, first + stride, …: consecutive invocations read consecutive words of W and x, so a
// warp streams each row (see dequant8 in common/dequant.wgsl for why). Two groups per trip
// keep more independent reads in flight per invocation.
fn dot_row(row: u32, t: u32, first: u32, stride: u32) -> f32 {
    let row_byte = row * p.row_bytes;
    let groups = p.k / 8u;
    let xrow = t * (p.k / 4u);
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var o = first;
    for (; o + stride < groups; o += 2u * stride) {
        let w0 = dequant8(row_byte, o);
        let w1 = dequant8(row_byte, o + stride);
        let x0 = xrow + 2u * o;
        let x1 = xrow + 2u * (o + stride);
        acc0 = fma(w0[0], x[x0], acc0);
        acc1 = fma(w0[1], x[x0 + 1u], acc1);
        acc0 = fma(w1[0], x[x1], acc0);
        acc1 = fma(w1[1], x[x1 + 1u], acc1);
    }
    if (o < groups) {
        let w0 = dequant8(row_byte, o);
        acc0 = fma(w0[0], x[xrow + 2u * o], acc0);
        acc1 = fma(w0[1], x[xrow + 2u * o + 1u], acc1);
    }
    let acc = acc0 + acc1;
    return (acc.x + acc.y) + (acc.z + acc.w);
}

#ifdef MATVEC_WG
// Matrix–vector (decode): a workgroup of 256 (SwiftShader's maximum) computes MV_ROWS rows
// of one token, MV_LANES lanes per row, then a shared-memory tree sums each row's lanes.
// This is the variant browsers run (wgpu's WebGPU backend never enables subgroups).
var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return; // uniform: depends only on the workgroup id
    }
    let t = wid.z;
    let lane = li % MV_LANES;
    let row = g * MV_ROWS + li / MV_LANES;
    var acc = 0.0;
    if (row < p.rows) {
        acc = dot_row(row, t, lane, MV_LANES);
    }
    partial[li] = acc;
    workgroupBarrier();
    for (var s = MV_LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[li] += partial[li + s];
        }
        workgroupBarrier();
    }
    if (lane == 0u && row < p.rows) {
        store(t, row, partial[li]);
    }
}
#endif

#ifdef MATVEC_SG
// Matrix–vector with subgroup sums (native only). The subgroup size varies by device (8 on
// lavapipe, 32 on NVIDIA, 64 on AMD), so work is assigned by subgroup_id rather than by
// assuming which invocations share a subgroup: each row gets `spr` whole subgroups (or each
// subgroup takes several rows when subgroups are wide), subgroupAdd sums each subgroup's
// lanes, and one shared-memory step adds the `spr` subgroup sums of a row.
var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t = wid.z;
    let spr = max(1u, nsg / MV_ROWS); // subgroups per row
    let part = sg % spr;
    let row_step = max(1u, nsg / spr); // rows are dealt to subgroups round-robin
    for (var r = sg / spr; r < MV_ROWS; r += row_step) {
        let row = g * MV_ROWS + r;
        var acc = 0.0;
        if (row < p.rows) {
            acc = dot_row(row, t, part * sg_size + lane, spr * sg_size);
        }
        let sum = subgroupAdd(acc);
        if (lane == 0u) {
            partial[r * spr + part] = sum;
        }
    }
    workgroupBarrier();
    let row = g * MV_ROWS + li;
    if (li < MV_ROWS && row < p.rows) {
        var sum = 0.0;
        for (var i = 0u; i < spr; i++) {
            sum += partial[li * spr + i];
        }
        store(t, row, sum);
    }
}
#endif

#ifdef TILED
// Matrix–matrix (prefill): a workgroup computes a TILE_N × TILE_T block of y. Per 32-wide
// K step, TILE_N threads dequantize one chunk of a W row each into workgroup memory, all
// threads stage the x tile, and every thread then reads both from shared memory for its
// 4 rows × 2 tokens: each weight is dequantized once per TILE_T tokens, not once per token.
// Rows are padded to 9 vec4 so the 16 row-threads of a warp spread over the banks.
const PAD: u32 = 9u;
var<workgroup> wt: array<vec4<f32>, TILE_N * PAD>; // [TILE_N, 32] dequantized W chunk
var<workgroup> xt: array<vec4<f32>, TILE_T * PAD>; // [TILE_T, 32] x chunk

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let row0 = g * TILE_N;
    let t0 = wid.z * TILE_T;
    let tx = li % 16u; // rows tx + 16i, i < 4
    let ty = li / 16u; // tokens ty + 16j, j < 2
    let chunks = p.k / 32u;
    var acc: array<vec4<f32>, 2>; // acc[j][i]: token ty + 16j, row tx + 16i
    for (var c = 0u; c < chunks; c++) {
        if (li < TILE_N) {
            let row = row0 + li;
            var v: array<vec4<f32>, 8>;
            if (row < p.rows) {
                v = dequant32(row * p.row_bytes, c);
            }
            for (var j = 0u; j < 8u; j++) {
                wt[li * PAD + j] = v[j];
            }
        }
        // TILE_T · 8 = 256 vec4: one per invocation.
        let tok = li / 8u;
        let t = t0 + tok;
        var xv = vec4<f32>(0.0);
        if (t < p.t) {
            xv = x[t * (p.k / 4u) + 8u * c + li % 8u];
        }
        xt[tok * PAD + li % 8u] = xv;
        workgroupBarrier();
        for (var j = 0u; j < 8u; j++) {
            let a = array<vec4<f32>, 4>(
                wt[tx * PAD + j],
                wt[(tx + 16u) * PAD + j],
                wt[(tx + 32u) * PAD + j],
                wt[(tx + 48u) * PAD + j],
            );
            for (var tj = 0u; tj < 2u; tj++) {
                let b = xt[(ty + 16u * tj) * PAD + j];
                acc[tj] += vec4<f32>(dot(a[0], b), dot(a[1], b), dot(a[2], b), dot(a[3], b));
            }
        }
        workgroupBarrier();
    }
    for (var tj = 0u; tj < 2u; tj++) {
        let t = t0 + ty + 16u * tj;
        for (var i = 0u; i < 4u; i++) {
            let row = row0 + tx + 16u * i;
            if (t < p.t && row < p.rows) {
                store(t, row, acc[tj][i]);
            }
        }
    }
}
#endif
