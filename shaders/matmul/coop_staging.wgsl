// What both tensor-core tile kernels (TILED_COOP, GEMM_COOP) stage with: included by
// matmul.wgsl for either, each of which declares its own tiles wt16 (W, row-major) and xt16
// (x', by token) and its TILE_T. f16 ends at 65,504, and the staged x' (with NORM the raw
// residual times the norm weight) can pass it: some models' residual streams and FFN
// activations reach the thousands and beyond. So a token is staged times its power-of-two
// scale from `token_scale.wgsl` (the dispatch before; binding tscales), and the epilogue
// multiplies its sums by token_unscale (exact: powers of two only move the exponent). Its
// small elements lose the precision f16 can't hold beside its largest, as in any f16 GEMM.

var<workgroup> token_unscale: array<f32, TILE_T>; // 2^e: token tok was staged times 2^-e
@group(0) @binding(B_SCALES) var<storage, read> tscales: array<f32>; // [p.t]: 2^-e per token

// Token t's staging scale: 1 past the step's tokens, which stage zeros.
fn staging_scale(t: u32) -> f32 {
    if (t < p.t) {
        return tscales[t];
    }
    return 1.0;
}

// The 8 values staged times `s`.
fn scaled8(v: array<vec4<f32>, 2>, s: f32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(v[0] * s, v[1] * s);
}

// Writes 8 staged f32 (two vec4) as f16 at `at` in wt16 or xt16.
fn stage_w16(at: u32, v: array<vec4<f32>, 2>) {
    for (var e = 0u; e < 4u; e++) {
        wt16[at + e] = f16(v[0][e]);
        wt16[at + 4u + e] = f16(v[1][e]);
    }
}

fn stage_x16(at: u32, v: array<vec4<f32>, 2>) {
    for (var e = 0u; e < 4u; e++) {
        xt16[at + e] = f16(v[0][e]);
        xt16[at + 4u + e] = f16(v[1][e]);
    }
}
