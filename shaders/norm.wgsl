// RMSNorm over the last dimension, one workgroup per row:
//   y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w
// Serves the model norms ([T, dim]) and gemma3's per-head Q/K norms ([T * heads, head_dim]).
//
// Variants (exactly one define; they change the binding layout):
//   STORE_Y    y = norm(x) * w                 x read, y written
//   IN_PLACE   x = norm(x) * w                 x read_write (binding one buffer twice as
//                                              writable is invalid, so this needs its own layout)
//   ADD_TO_Y   y += norm(x) * w                gemma3's post-attention / post-FFN norms feeding
//                                              the residual stream

struct Params {
    rows: u32,
    n: u32,      // row length
    eps: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef IN_PLACE
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [rows, n]
#else
@group(0) @binding(1) var<storage, read> x: array<f32>; // [rows, n]
#endif
@group(0) @binding(2) var<storage, read> w: array<f32>; // [n]
#ifndef IN_PLACE
@group(0) @binding(3) var<storage, read_write> y: array<f32>; // [rows, n]
#endif

// 128 stays under SwiftShader's 256-invocation cap and keeps a 256-wide head row at two
// elements per invocation.
const WG: u32 = 128u;

var<workgroup> partial: array<f32, WG>;

#ifdef STORE_Y
fn store(i: u32, v: f32) {
    y[i] = v;
}
#endif
#ifdef IN_PLACE
fn store(i: u32, v: f32) {
    x[i] = v;
}
#endif
#ifdef ADD_TO_Y
fn store(i: u32, v: f32) {
    y[i] = y[i] + v;
}
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Rows beyond 65,535 spill into y (the per-dimension dispatch limit). `row` is uniform
    // across the workgroup, so this early return keeps the barriers below in uniform flow.
    let row = wid.y * groups.x + wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.n;

    var sum_sq = 0.0;
    for (var i = lid; i < p.n; i += WG) {
        let v = x[base + i];
        sum_sq += v * v;
    }
    partial[lid] = sum_sq;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            partial[lid] += partial[lid + stride];
        }
        workgroupBarrier();
    }
    let inv_rms = inverseSqrt(partial[0] / f32(p.n) + p.eps);

    // Each invocation rewrites only the elements it read above, so IN_PLACE has no race.
    for (var i = lid; i < p.n; i += WG) {
        store(base + i, x[base + i] * inv_rms * w[i]);
    }
}
