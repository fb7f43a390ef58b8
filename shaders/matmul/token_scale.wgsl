// The per-token scales of the tensor-core GEMM (`gemm_coop.wgsl`), one workgroup per token:
// scales[t] = 2^-e, the fewest whole e ≥ 0 that bring the largest |staged value| of token t
// (x'[t], with NORM x[t] ⊙ norm_w: what the GEMM rounds to f16) to ≤ 2^15. f16 ends at
// 65,504, and some models' residual streams and FFN activations pass it; the GEMM stages such
// a token times its scale and multiplies its sums back, which is exact (powers of two only
// move the exponent). A token that fits gets 1.
//
// Its own dispatch, once per product, because inside the GEMM every one of a product's
// slot-group workgroups re-read all of K for its 128 tokens first: 11–12% of the Llama
// shapes' pp512 on the H200 (BENCHMARKS.md "session 22").

struct Params {
    k: u32,
    t: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;         // [t][k]
#ifdef NORM
@group(0) @binding(2) var<storage, read> norm_w: array<vec4<f32>>;    // [k]
@group(0) @binding(3) var<storage, read_write> scales: array<f32>;    // [t]
#else
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;    // [t]
#endif

var<workgroup> partial: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let t = wid.x;
    let kv = p.k / 4u;
    var m = 0.0;
    for (var i = li; i < kv; i += 256u) {
#ifdef NORM
        let a = abs(x[t * kv + i] * norm_w[i]);
#else
        let a = abs(x[t * kv + i]);
#endif
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
    }
    partial[li] = m;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (li < s) {
            partial[li] = max(partial[li], partial[li + s]);
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        scales[t] = exp2(-max(0.0, ceil(log2(partial[0])) - 15.0));
    }
}
