// W_o folded into flash-decoding (O_PROJ): included by attention.wgsl's SPLIT variant with
// LAST_COMBINES, whose merging workgroups call o_project. Why: W_o as its own dispatch costs
// the page ~14 µs per layer in the browser's per-dispatch overhead (BENCHMARKS.md, sessions
// 25 and 26), more than its work on a small model. Folded in, it must not take the GPU's
// occupancy with it (the megakernel's lesson), so the plan folds it only where each head's
// slice of W_o and the last head's sum over heads are small (model/plan.rs `o_fold`).
//
//   y_h = W_o[:, h·head_dim .. (h + 1)·head_dim] · o_h     by head h's merging workgroup
//   x  += o_scale · Σ_h y_h                                by the token's last head
//   x  += RMSNorm(Σ_h y_h) · post_w                        (POST_NORM: gemma's sandwich norm)
//
// The heads' sums go through the partials (from o_base, per (token, head) o_rows words) and
// are added in head order, so the result doesn't depend on which head finishes last.
//
// Prepended by kernels/attention.rs: O_CHUNKS (head_dim / 32: W_o's 32-element chunks per
// head and row) and O_BATCH (rows whose chunks one invocation loads before it decodes any:
// O_BATCH · O_CHUNKS = 8 loads in flight, as the chunk matvec keeps them).

@group(0) @binding(5) var<storage, read> w: array<vec4<u32>>; // W_o [o_rows, heads · head_dim]
@group(0) @binding(6) var<storage, read_write> x: array<f32>;  // [T, o_rows] the residual stream
#ifdef POST_NORM
@group(0) @binding(7) var<storage, read> post_w: array<f32>;   // [o_rows] the post-norm's weight
#endif

#include "common/dequant.wgsl"

var<workgroup> o_head: array<vec4<f32>, MAX_HD4>; // [head_dim / 4] the merged head output
var<workgroup> o_arrived: u32; // the token's head counter before this workgroup's increment

// Heads' sums one invocation loads before it adds them (atomic loads are not hoisted).
const O_UNROLL: u32 = 8u;

// Head h's slice of W_o times o_head, into its partial row; then the last head of token t
// sums the heads into the residual stream. Call from uniform control flow.
fn o_project(t: u32, h: u32, lid: u32) {
    workgroupBarrier(); // merge_ranges' writes of o_head
    let k = p.heads * p.head_dim;
    let c0 = h * O_CHUNKS;
    let mine = p.o_base + (t * p.heads + h) * p.o_rows;
    for (var r0 = lid; r0 < p.o_rows; r0 += WG * O_BATCH) {
        var raw: array<Raw32, O_BATCH * O_CHUNKS>;
        for (var b = 0u; b < O_BATCH; b++) {
            let wr = w_row(min(r0 + b * WG, p.o_rows - 1u), k, p.o_rows);
            for (var c = 0u; c < O_CHUNKS; c++) {
                raw[b * O_CHUNKS + c] = raw32(wr, c0 + c);
            }
        }
        for (var b = 0u; b < O_BATCH; b++) {
            var acc = vec4<f32>(0.0);
            for (var c = 0u; c < O_CHUNKS; c++) {
                for (var j = 0u; j < 4u; j++) {
                    let wv8 = decode8(raw[b * O_CHUNKS + c], j);
                    let at = 8u * c + 2u * j;
                    acc = fma(wv8[0], o_head[at], fma(wv8[1], o_head[at + 1u], acc));
                }
            }
            let r = r0 + b * WG;
            if (r < p.o_rows) {
                atomicStore(&partials[mine + r], bitcast<u32>((acc.x + acc.y) + (acc.z + acc.w)));
            }
        }
    }
    // As the range records: ordered before the counter increment, device-scoped.
    storageBarrier();
    let counter = ROW_COUNTERS + t;
    if (lid == 0u) {
        o_arrived = atomicAdd(&partials[counter], 1u);
    }
    if (workgroupUniformLoad(&o_arrived) != p.heads - 1u) {
        return;
    }
    storageBarrier();
    if (lid == 0u) {
        atomicStore(&partials[counter], 0u); // ready for the next dispatch
    }
    let first = p.o_base + t * p.heads * p.o_rows;
    var ss = 0.0;
    for (var r = lid; r < p.o_rows; r += WG) {
        var y = 0.0;
        for (var h0 = 0u; h0 < p.heads; h0 += O_UNROLL) {
            var v: array<f32, O_UNROLL>;
            for (var u = 0u; u < O_UNROLL; u++) {
                v[u] = 0.0;
                if (h0 + u < p.heads) {
                    v[u] = load_f32(first + (h0 + u) * p.o_rows + r);
                }
            }
            for (var u = 0u; u < O_UNROLL; u++) {
                y += v[u];
            }
        }
#ifdef POST_NORM
        ss += y * y;
        // Head 0's row keeps the sum for the second pass (the same invocation reads it back).
        atomicStore(&partials[first + r], bitcast<u32>(y));
#else
        x[t * p.o_rows + r] += p.o_scale * y;
#endif
    }
#ifdef POST_NORM
    let inv_rms = inverseSqrt(reduce(lid, ss, false) / f32(p.o_rows) + p.eps);
    for (var r = lid; r < p.o_rows; r += WG) {
        x[t * p.o_rows + r] += load_f32(first + r) * inv_rms * post_w[r];
    }
#endif
}
