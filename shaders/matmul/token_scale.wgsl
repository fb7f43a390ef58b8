// The per-token scales of the tensor-core tiles (`gemm_coop.wgsl`, `gemm_tiled_coop.wgsl`),
// one workgroup per token: scales[t] = 2^-e, the fewest whole e ≥ 0 that bring the largest
// |staged value| of token t (x'[t], with NORM x[t] ⊙ norm_w: what the GEMM rounds to f16) to
// ≤ 2^15. f16 ends at 65,504, and some models' residual streams and FFN activations pass it;
// the GEMM stages such a token times its scale and multiplies its sums back, which is exact
// (powers of two only move the exponent). A token that fits gets 1.
//
// Its own dispatch, once per product, because inside the GEMM every one of a product's
// slot-group workgroups re-read all of K for its 128 tokens first: 11–12% of the Llama
// shapes' pp512 on the H200 (BENCHMARKS.md "session 22").
//
// With HEADROOM (the f16 wide tiles, gemm_wide_f16.wgsl, always with X16) the scale also
// brings the largest into (2^7, 2^8], up as well as down: see there.
//
// With X16 (the default; COCO_COOP_PRESTAGE=0 turns it off) the pass stages x' for
// the GEMM as well, once per product instead of once per row group: x16[t] = f16(x'[t] ·
// scales[t]) for every token of the tiles, zeros past the step's (so a tile's last matrix
// loads read zeros), and scales[t] becomes what the GEMM multiplies token t's sums by:
// 2^e, times rsqrt(mean(x[t]²) + eps) with NORM. The GEMM then loads x' straight into its
// matrices and stages only W. The rounding is the GEMM's own staging's (an f16 conversion;
// the host prepends `enable f16;`).

struct Params {
    k: u32,
    t: u32,      // the step's tokens
    eps: f32,    // NORM with X16: RMSNorm's epsilon
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;         // [t][k]
#ifdef NORM
@group(0) @binding(2) var<storage, read> norm_w: array<vec4<f32>>;    // [k]
@group(0) @binding(3) var<storage, read_write> scales: array<f32>;    // [t]
#ifdef X16
@group(0) @binding(4) var<storage, read_write> x16: array<vec4<f16>>; // [tiles' tokens][k / 4]
#endif
#else
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;    // [t]
#ifdef X16
@group(0) @binding(3) var<storage, read_write> x16: array<vec4<f16>>; // [tiles' tokens][k / 4]
#endif
#endif

var<workgroup> partial: array<vec2<f32>, 256>; // (largest |x'|, Σ x²) per thread

// Elements 4i .. 4i + 3 of x'[t].
fn staged(t: u32, i: u32) -> vec4<f32> {
#ifdef NORM
    return x[t * (p.k / 4u) + i] * norm_w[i];
#else
    return x[t * (p.k / 4u) + i];
#endif
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let t = wid.x;
    let kv = p.k / 4u;
#ifdef X16
    if (t >= p.t) {
        // A tile's tokens past the step's: zeros, so its matrix loads stay finite.
        for (var i = li; i < kv; i += 256u) {
            x16[t * kv + i] = vec4<f16>(0.0);
        }
        return;
    }
#endif
    var m = 0.0;
    var ss = 0.0;
    for (var i = li; i < kv; i += 256u) {
        let a = abs(staged(t, i));
        m = max(m, max(max(a.x, a.y), max(a.z, a.w)));
#ifdef X16
#ifdef NORM
        let r = x[t * kv + i];
        ss += dot(r, r);
#endif
#endif
    }
    partial[li] = vec2<f32>(m, ss);
    workgroupBarrier();
    for (var s = 128u; s > 0u; s >>= 1u) {
        if (li < s) {
            let o = partial[li + s];
            partial[li] = vec2<f32>(max(partial[li].x, o.x), partial[li].y + o.y);
        }
        workgroupBarrier();
    }
#ifdef HEADROOM
    // The f16 wide tiles sum 16 products in f16 (gemm_wide_f16.wgsl): the largest |x'| is
    // brought into (2^7, 2^8], up or down, leaving them room below 65,504. (A zero token keeps
    // 1; the exponent is clamped so no scale leaves f32's range.)
    let largest = partial[0].x;
    let scale = select(exp2(clamp(8.0 - ceil(log2(largest)), -120.0, 120.0)), 1.0, largest == 0.0);
#else
    let scale = exp2(-max(0.0, ceil(log2(partial[0].x)) - 15.0));
#endif
#ifdef X16
    for (var i = li; i < kv; i += 256u) {
        x16[t * kv + i] = vec4<f16>(staged(t, i) * scale);
    }
    if (li == 0u) {
#ifdef NORM
        scales[t] = inverseSqrt(partial[0].y / f32(p.k) + p.eps) / scale;
#else
        scales[t] = 1.0 / scale;
#endif
    }
#else
    if (li == 0u) {
        scales[t] = scale;
    }
#endif
}
