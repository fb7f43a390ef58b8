// The FFN megakernel: a whole gated FFN for one token row in ONE workgroup, one dispatch for
// the whole FFN half of a block (DESIGN.md "The pipeline", BENCHMARKS.md "The FFN megakernel"):
//   x' = RMSNorm(x)·ffn_norm
//   h  = act(x'·W_gateᵀ) ⊙ (x'·W_upᵀ)                  act = SiLU (SILU) | GELU-tanh (GELU_TANH)
//   d  = h·W_downᵀ
//   x += d                                             llama, qwen2
//   x += RMSNorm(d)·post_norm                          gemma3 (POST_NORM)
//
// It exists to be measured, not to win. The grid is T workgroups (T = tokens in the step),
// so a decode step runs ONE workgroup of 256 invocations on the whole GPU: one SM of an
// H200's 132 (BENCHMARKS.md gives the arithmetic). Every phase is a loop of that one
// workgroup over all rows, where the fused path spreads the same rows over ffn/8 workgroups.
// It is off by default; `Session::set_megakernel` checks it against the normal path first.
//
// Only workgroup memory and barriers, no subgroups: wgpu's WebGPU backend never enables
// them, and this must run in the browser too (TOOLCHAIN.md).
//
// Layout of the work: 8 slots × 32 lanes (as matmul.wgsl's matvec): each phase takes 8 rows
// at a time, each row streamed by 32 lanes over its 8-element groups lane, lane + 32, … so
// that neighbouring invocations read neighbouring words, then a shared-memory tree sums each
// row's 32 lanes.
//
// Where the intermediate vectors live:
//   h [T, ffn] goes through a storage scratch (the session's `act` buffer), not workgroup
//     memory: ffn·4 bytes is 32 KiB for Llama-1B (ffn 8192) and 56 KiB for 8B models, over
//     WebGPU's default 16 KiB of workgroup storage, and one code path for every size is
//     easier to trust. storageBarrier() makes the lane-0 writes visible to the whole
//     workgroup before the down phase reads them (each workgroup reads only its own row).
//   d (POST_NORM only) [T, dim] goes through the `proj` scratch for the same reason; the
//     post-norm runs inside this kernel (a second reduction over d), so gemma3's FFN is one
//     dispatch too rather than the megakernel plus a separate norm-add.
//
// Weights are dequantized in registers (common/dequant.wgsl, MULTI_W: wv()/wl() below pick
// the weight). W_gate and W_up share one type (that type's dequantizer); W_down may
// have another (Q4_K_M files mix Q6_K and Q4_K downs with Q5_0 gate/ups): the host then
// appends that type's dequantizer with its names suffixed `_down` (`dequant8_down`, …;
// kernels/megakernel.rs); with one type, DOWN_SAME_TYPE forwards dequant8_down.
// Each weight is one buffer: a weight split into parts is refused on the host.

#include "common/dequant.wgsl"
#include "common/activation.wgsl"

const WG: u32 = 256u;   // invocations (SwiftShader's and default WebGPU's maximum)
const ROWS: u32 = 8u;   // rows per trip (slots)
const LANES: u32 = 32u; // invocations per row

struct Params {
    dim: u32,            // model dim: K of W_gate/W_up, rows of W_down
    ffn: u32,            // FFN dim: rows of W_gate/W_up, K of W_down
    t: u32,              // T: token rows (= workgroups)
    eps: f32,            // RMSNorm epsilon (both norms)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w_gate: array<vec4<u32>>; // [ffn, dim] (src/gpu/layout.rs)
@group(0) @binding(2) var<storage, read> w_up: array<vec4<u32>>;   // [ffn, dim]
@group(0) @binding(3) var<storage, read> w_down: array<vec4<u32>>; // [dim, ffn]
@group(0) @binding(4) var<storage, read_write> x: array<f32>;    // [T, dim] residual stream
@group(0) @binding(5) var<storage, read> norm_w: array<f32>;     // [dim] ffn_norm
@group(0) @binding(6) var<storage, read_write> hid: array<f32>;  // [T, ffn] scratch: h
#ifdef POST_NORM
@group(0) @binding(7) var<storage, read> post_w: array<f32>;     // [dim] post_ffw_norm
@group(0) @binding(8) var<storage, read_write> proj: array<f32>; // [T, dim] scratch: d
#endif

// ---- which weight dequant.wgsl reads ----

// Set to a constant right before each dequant call, as matmul.wgsl does: 0 gate, 1 up, 2 down.
var<private> wsel: u32;

fn wv(i: u32) -> vec4<u32> {
    if (wsel == 2u) {
        return w_down[i];
    }
    if (wsel == 1u) {
        return w_up[i];
    }
    return w_gate[i];
}

fn wl(i: u32) -> u32 {
    if (wsel == 2u) {
        return w_down[i >> 2u][i & 3u];
    }
    if (wsel == 1u) {
        return w_up[i >> 2u][i & 3u];
    }
    return w_gate[i >> 2u][i & 3u];
}

#ifdef DOWN_SAME_TYPE
fn dequant8_down(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    return dequant8(r, o);
}
#endif

// ---- workgroup reductions (workgroup memory only) ----

var<workgroup> red: array<vec2<f32>, WG>;

// Σ of every invocation's `v`, returned to all of them. Call in uniform control flow.
fn workgroup_sum(li: u32, v: f32) -> f32 {
    red[li] = vec2<f32>(v, 0.0);
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (li < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
    let total = red[0].x;
    workgroupBarrier(); // all have read red[0] before anyone writes red again
    return total;
}

// Sums each slot's LANES partials; slot r's total lands in red[r * LANES], which only that
// slot's lane 0 reads (and only it overwrites on the next call).
fn lane_sums(li: u32, v: vec2<f32>) {
    red[li] = v;
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s >>= 1u) {
        if (li % LANES < s) {
            red[li] += red[li + s];
        }
        workgroupBarrier();
    }
}

// ---- the three matvecs ----

fn hsum(v: vec4<f32>) -> f32 {
    return (v.x + v.y) + (v.z + v.w);
}

// (Σ gate·x', Σ up·x') of FFN row `row` over this lane's groups, with x' = x ⊙ norm_w: the
// norm's per-row rsqrt is a scalar, so the caller applies it to the finished sums.
fn dot_gate_up(row: u32, xrow: u32, lane: u32) -> vec2<f32> {
    let rb = w_row(row, p.dim, p.ffn);
    var g = vec4<f32>(0.0);
    var u = vec4<f32>(0.0);
    for (var o = lane; o < p.dim / 8u; o += LANES) {
        let e = xrow + 8u * o;
        let xa = vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]) * vec4<f32>(norm_w[8u * o], norm_w[8u * o + 1u], norm_w[8u * o + 2u], norm_w[8u * o + 3u]);
        let xb = vec4<f32>(x[e + 4u], x[e + 5u], x[e + 6u], x[e + 7u]) * vec4<f32>(norm_w[8u * o + 4u], norm_w[8u * o + 5u], norm_w[8u * o + 6u], norm_w[8u * o + 7u]);
        wsel = 0u;
        let wg = dequant8(rb, o);
        wsel = 1u;
        let wu = dequant8(rb, o);
        g = fma(wg[0], xa, fma(wg[1], xb, g));
        u = fma(wu[0], xa, fma(wu[1], xb, u));
    }
    return vec2<f32>(hsum(g), hsum(u));
}

// Σ down·h of model row `row` over this lane's groups (h row starts at `hrow`).
fn dot_down(row: u32, hrow: u32, lane: u32) -> f32 {
    let rb = w_row(row, p.ffn, p.dim);
    var acc = vec4<f32>(0.0);
    for (var o = lane; o < p.ffn / 8u; o += LANES) {
        let e = hrow + 8u * o;
        let ha = vec4<f32>(hid[e], hid[e + 1u], hid[e + 2u], hid[e + 3u]);
        let hb = vec4<f32>(hid[e + 4u], hid[e + 5u], hid[e + 6u], hid[e + 7u]);
        wsel = 2u;
        let w = dequant8_down(rb, o);
        acc = fma(w[0], ha, fma(w[1], hb, acc));
    }
    return hsum(acc);
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let t = wid.x; // this workgroup's token row
    if (t >= p.t) {
        return; // uniform: depends only on the workgroup id
    }
    let lane = li % LANES;
    let slot = li / LANES;
    let xrow = t * p.dim;
    let hrow = t * p.ffn;

    // 1. RMSNorm's per-row scale rsqrt(mean(x²) + eps)
    var ss = 0.0;
    for (var i = li; i < p.dim; i += WG) {
        let v = x[xrow + i];
        ss = fma(v, v, ss);
    }
    let scale = inverseSqrt(workgroup_sum(li, ss) / f32(p.dim) + p.eps);

    // 2. h = act(x'·W_gateᵀ) ⊙ x'·W_upᵀ, ROWS FFN rows per trip
    for (var r0 = 0u; r0 < p.ffn; r0 += ROWS) {
        let row = r0 + slot;
        var acc = vec2<f32>(0.0);
        if (row < p.ffn) {
            acc = dot_gate_up(row, xrow, lane);
        }
        lane_sums(li, acc);
        if (lane == 0u && row < p.ffn) {
            let gu = red[li] * scale;
            hid[hrow + row] = act(gu.x) * gu.y;
        }
    }
    // Every lane reads all of h next: make the lane-0 writes visible (and x's reads done
    // before the llama path writes x).
    storageBarrier();

    // 3. d = h·W_downᵀ, ROWS model rows per trip, added into x (or kept for the post-norm)
    var dd = 0.0; // Σ d² over the rows this invocation stored (POST_NORM)
    for (var r0 = 0u; r0 < p.dim; r0 += ROWS) {
        let row = r0 + slot;
        var acc = 0.0;
        if (row < p.dim) {
            acc = dot_down(row, hrow, lane);
        }
        lane_sums(li, vec2<f32>(acc, 0.0));
        if (lane == 0u && row < p.dim) {
            let d = red[li].x;
#ifdef POST_NORM
            proj[xrow + row] = d;
            dd = fma(d, d, dd);
#else
            x[xrow + row] = x[xrow + row] + d;
#endif
        }
    }

#ifdef POST_NORM
    // 4. gemma3: x += RMSNorm(d)·post_w (as norm.wgsl's ADD_TO_Y)
    let post_scale = inverseSqrt(workgroup_sum(li, dd) / f32(p.dim) + p.eps);
    storageBarrier(); // d, written by lane 0s above, is read by every invocation
    for (var i = li; i < p.dim; i += WG) {
        x[xrow + i] = x[xrow + i] + proj[xrow + i] * post_scale * post_w[i];
    }
#endif
}
