// What both tensor-core tile kernels (TILED_COOP, GEMM_COOP) stage with: included by
// matmul.wgsl for either, each of which declares its own tiles wt16 (W, row-major) and xt16
// (x', by token) and its TILE_T. f16 ends at 65,504, and the staged x' (with NORM the raw
// residual times the norm weight) can pass it: some models' residual streams and FFN
// activations reach the thousands and beyond. So a token is staged times its power-of-two
// scale from `token_scale.wgsl` (the dispatch before; binding tscales), and the epilogue
// multiplies its sums back (exact: powers of two only move the exponent). Its
// small elements lose the precision f16 can't hold beside its largest, as in any f16 GEMM.
//
// With X16 that dispatch has staged x' already, once per product (x16, at x's binding: each
// token's values times its scale, rounded to f16, zeros past the step's tokens), and B_SCALES
// holds what each token's sums are multiplied by. The kernels then copy x' into their tiles as
// it lies (x8, stage_x8): no f32 loads, no norm weight, no conversion. Loading the matrices
// from x16 directly instead, with no staging at all, made the 128-token tiles 1.7× slower on
// the H200 (BENCHMARKS.md "session 30").

@group(0) @binding(B_SCALES) var<storage, read> tscales: array<f32>; // [p.t]: 2^-e per token

#include "common/coop_block.wgsl"

// What the tiles wt16 and xt16 are arrays of. With VEC_STAGE (the default; the A/B baseline
// is COCO_COOP_VEC_STAGE=0) vec4s of f16: a thread's 8 staged values are two 8-byte stores
// instead of eight 2-byte ones, and the matrix loads count offsets and strides in vec4s (SV
// elements each; every offset the kernels use is a multiple of 4 elements).
#ifdef VEC_STAGE
alias StagedHalf = vec4<f16>;
const SV: u32 = 4u;
#else
alias StagedHalf = f16;
const SV: u32 = 1u;
#endif

#ifdef GEMM_COOP
// Lane `lane`'s 8 values of a block the subgroup parked at ct[scratch] (ct is the 128-token
// kernel's): slot lane % CB of tokens lane / CB + (SGS / CB) i.
fn unpark(scratch: u32, lane: u32) -> array<f32, 8> {
    var v: array<f32, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = ct[scratch + CB * (lane / CB + (SGS / CB) * i) + lane % CB];
    }
    return v;
}
#endif

// tscales[t]: token t's staging scale, or with X16 what its sums are multiplied by; 1 past
// the step's tokens (which stage zeros, and whose sums are not stored).
fn tscale(t: u32) -> f32 {
    if (t < p.t) {
        return tscales[t];
    }
    return 1.0;
}

// The 8 values staged times `s`.
fn scaled8(v: array<vec4<f32>, 2>, s: f32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(v[0] * s, v[1] * s);
}

// Writes 8 staged values (two vec4) at element `at` (a multiple of 8) of wt16.
fn stage_w16(at: u32, v: array<vec4<f16>, 2>) {
#ifdef VEC_STAGE
    wt16[at / 4u] = v[0];
    wt16[at / 4u + 1u] = v[1];
#else
    for (var e = 0u; e < 4u; e++) {
        wt16[at + e] = v[0][e];
        wt16[at + 4u + e] = v[1][e];
    }
#endif
}

#ifdef X16
// Elements 8q .. 8q + 7 of 32-wide chunk c of token t's staged row.
fn x8(t: u32, c: u32, q: u32) -> array<vec4<f16>, 2> {
#ifdef ABLATE_X
    // The diagnostic COCO_ABLATE=x (select.rs ablations): no loads.
    return array<vec4<f16>, 2>(vec4<f16>(0.125h), vec4<f16>(0.375h));
#endif
    let i = (t * p.k + 32u * c + 8u * q) / 4u;
    return array<vec4<f16>, 2>(x16[i], x16[i + 1u]);
}

#ifndef COOP_STREAM
// Writes them at element `at` (a multiple of 8) of xt16.
fn stage_x8(at: u32, v: array<vec4<f16>, 2>) {
#ifdef VEC_STAGE
    xt16[at / 4u] = v[0];
    xt16[at / 4u + 1u] = v[1];
#else
    for (var e = 0u; e < 4u; e++) {
        xt16[at + e] = v[0][e];
        xt16[at + 4u + e] = v[1][e];
    }
#endif
}
#endif

#ifdef GEMM_COOP
// Stores lane `lane`'s values of a block pair of row group g: `lo` of slots slot0 .. + CB - 1,
// `hi` of the same slots 64 on (with GLU the up rows of the gate rows), for tokens
// tok0 + lane / CB + (SGS / CB) i.
fn finish_blocks(g: u32, tok0: u32, slot0: u32, lane: u32, lo: array<f32, 8>, hi: array<f32, 8>) {
    let slot = slot0 + lane % CB;
    let mlo = locate(g * TILE_N + slot, TILE_N);
    let mhi = locate(g * TILE_N + slot + HALF_N, TILE_N);
    for (var i = 0u; i < 8u; i++) {
        let t = tok0 + lane / CB + (SGS / CB) * i;
        if (t < p.t) {
            let scale = tscale(t);
#ifdef GLU
            if (live(mlo)) {
                store_glu(t, mlo.y, lo[i] * scale, hi[i] * scale);
            }
#else
            if (live(mlo)) {
                store(mlo.x, t, mlo.y, lo[i] * scale);
            }
            if (live(mhi)) {
                store(mhi.x, t, mhi.y, hi[i] * scale);
            }
#endif
        }
    }
}
#endif
#else
// Writes 8 staged f32 as f16 at element `at` (a multiple of 8) of xt16.
fn stage_x16(at: u32, v: array<vec4<f32>, 2>) {
#ifdef VEC_STAGE
    xt16[at / 4u] = vec4<f16>(v[0]);
    xt16[at / 4u + 1u] = vec4<f16>(v[1]);
#else
    for (var e = 0u; e < 4u; e++) {
        xt16[at + e] = f16(v[0][e]);
        xt16[at + 4u + e] = f16(v[1][e]);
    }
#endif
}
#endif
