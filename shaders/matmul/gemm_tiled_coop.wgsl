// The tile kernel on tensor cores (TILED_COOP, included by matmul.wgsl after matmul/tiles.wgsl
// and matmul/coop_staging.wgsl; native only: wgpu's experimental cooperative matrices;
// WebGPU has none). Staging and epilogue are TILED's, but W and x' are staged as f16 and each
// of the NSG subgroups multiplies a CB-slot × 2CB-token block with CB × CB × CB f16 matrices
// (CB 16 on subgroups of 32, 8 on subgroups of 8: coop_staging.wgsl), accumulating in f32. The price is rounding W and x' to f16 (11-bit significands, a relative
// error of at most 2^-11 per element; tests/kernels_matmul.rs bounds the result against the
// CPU reference). kernels/matmul.rs prepends `enable f16;` and `enable wgpu_cooperative_matrix;`.
// x' is staged scaled per token as in GEMM_COOP (matmul/coop_staging.wgsl); with X16 (the
// default; COCO_COOP_PRESTAGE=0 turns it off) it is copied from the f16 rows the dispatch
// before staged, and the tiles are double-buffered.
#ifdef X16
var<workgroup> wt16: array<StagedHalf, (2u * TILE_N * 32u) / SV>; // [buffer][TILE_N][32]: W chunks, row-major (A)
var<workgroup> xt16: array<StagedHalf, (2u * TILE_T * 32u) / SV>; // [buffer][TILE_T][32]: x' chunks by token (B, column-major)

// This thread's 8 elements of its W row and of its token in chunk c, into buffer c % 2.
fn stage_chunk(c: u32, at: u32, w8: array<vec4<f16>, 2>, x8s: array<vec4<f16>, 2>) {
    stage_w16((c & 1u) * TILE_N * 32u + at, w8);
    stage_x8((c & 1u) * TILE_T * 32u + at, x8s);
}
#else
var<workgroup> wt16: array<StagedHalf, (TILE_N * 32u) / SV>; // [TILE_N][32]: the W chunk, row-major (A)
var<workgroup> xt16: array<StagedHalf, (TILE_T * 32u) / SV>; // [TILE_T][32]: x' chunk by token (B, column-major)
#endif
var<workgroup> ct: array<f32, TILE_N * TILE_T>; // [TILE_T][TILE_N]: the outputs (C, column-major)
#ifdef X16
// The workgroup's first token: with X16 the scale pass left each token's whole factor in
// tscales, read where it is (no copy in workgroup memory: the double-buffered tiles and ct
// take exactly 32 KiB, lavapipe's limit).
var<private> tile_t0: u32;
#else
var<workgroup> token_unscale: array<f32, TILE_T>; // 2^e: token tok was staged times 2^-e
#endif
#ifdef NORM
var<workgroup> token_ss: array<f32, 256>; // Σ x² of each staging thread's elements
#endif

// What tile token `tok`'s sums are multiplied by: rsqrt(mean(x²) + eps) from its 4 staging
// threads' Σ x² (1 without NORM), times the inverse of its staging scale.
fn token_scale(tok: u32) -> f32 {
#ifdef X16
    return tscale(tile_t0 + tok);
#else
#ifdef NORM
    let s = token_ss[tok * 4u] + token_ss[tok * 4u + 1u] + token_ss[tok * 4u + 2u] + token_ss[tok * 4u + 3u];
    return inverseSqrt(s / f32(p.k) + p.eps) * token_unscale[tok];
#else
    return token_unscale[tok];
#endif
#endif
}

#ifdef MERGE_PASS
#include "matmul/split_merge.wgsl"
#else
@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let rg = row_group(g);
    let range = k_range(g);
    let sr = li / 4u; // the W row and the token this thread stages
    let q = li % 4u;  // … their elements 8q .. 8q + 7 of each chunk
    let staged = locate(rg * TILE_N + sr, TILE_N);
    let staged_live = live(staged);
    let t_stage = t0 + sr;
    // Subgroup sg owns slots r0 .. r0 + CB - 1 and tokens n0 .. n0 + 2CB - 1. The accumulators
    // start as the zeroed output tile (there is no zero constructor for cooperative matrices).
    let r0 = CB * (sg % (TILE_N / CB));
    let n0 = 2u * CB * (sg / (TILE_N / CB));
#ifdef X16
    tile_t0 = t0;
#else
    let scale = tscale(t_stage);
    if (q == 0u) {
        token_unscale[sr] = 1.0 / scale;
    }
#endif
    for (var i = li; i < TILE_N * TILE_T; i += 256u) {
        ct[i] = 0.0;
    }
    var ss = 0.0;
#ifdef X16
    // Double-buffered, as gemm_coop_x16.wgsl: chunk c + 1's loads are issued before chunk c's
    // matrix work and stored into the other buffer after it, one barrier per chunk.
    var w_next: array<vec4<f16>, 2>;
    if (range.x < range.y) {
        if (staged_live) {
            w_next = dequant_w8h(staged, 4u * range.x + q);
        }
        stage_chunk(range.x, sr * 32u + 8u * q, w_next, x8(t_stage, range.x, q));
    }
    workgroupBarrier();
    var c0 = coopLoad<CoopC>(&ct[n0 * TILE_N + r0], TILE_N);
    var c1 = coopLoad<CoopC>(&ct[(n0 + CB) * TILE_N + r0], TILE_N);
    for (var c = range.x; c < range.y; c++) {
        let more = c + 1u < range.y;
        var x_next: array<vec4<f16>, 2>;
        if (more) {
            if (staged_live) {
                w_next = dequant_w8h(staged, 4u * (c + 1u) + q);
            }
            x_next = x8(t_stage, c + 1u, q);
        }
        let wb = (c & 1u) * TILE_N * 32u;
        let xb = (c & 1u) * TILE_T * 32u;
#ifndef ABLATE_MMA
        for (var kk = 0u; kk < 32u; kk += CB) {
            let a = coopLoadT<CoopA>(&wt16[(wb + r0 * 32u + kk) / SV], 32u / SV);
            let b0 = coopLoad<CoopB>(&xt16[(xb + n0 * 32u + kk) / SV], 32u / SV);
            let b1 = coopLoad<CoopB>(&xt16[(xb + (n0 + CB) * 32u + kk) / SV], 32u / SV);
            c0 = coopMultiplyAdd(a, b0, c0);
            c1 = coopMultiplyAdd(a, b1, c1);
        }
#endif
        // The other buffer was last read in chunk c - 1, before the barrier that ended it.
        if (more) {
            stage_chunk(c + 1u, sr * 32u + 8u * q, w_next, x_next);
        }
        workgroupBarrier();
    }
#else
    workgroupBarrier();
    var c0 = coopLoad<CoopC>(&ct[n0 * TILE_N + r0], TILE_N);
    var c1 = coopLoad<CoopC>(&ct[(n0 + CB) * TILE_N + r0], TILE_N);
    // Chunk c + 1 is loaded while chunk c is multiplied, as in TILED.
    var w_next: array<vec4<f16>, 2>;
    var x_next: array<vec4<f32>, 2>;
    if (range.x < range.y) {
        if (staged_live) {
            w_next = dequant_w8h(staged, 4u * range.x + q);
        }
        x_next = stage_x(t_stage, range.x, q, &ss);
    }
    for (var c = range.x; c < range.y; c++) {
        stage_w16(sr * 32u + 8u * q, w_next);
        stage_x16(sr * 32u + 8u * q, scaled8(x_next, scale));
        workgroupBarrier();
        if (c + 1u < range.y) {
            if (staged_live) {
                w_next = dequant_w8h(staged, 4u * (c + 1u) + q);
            }
            x_next = stage_x(t_stage, c + 1u, q, &ss);
        }
#ifndef ABLATE_MMA
        for (var kk = 0u; kk < 32u; kk += CB) {
            let a = coopLoadT<CoopA>(&wt16[(r0 * 32u + kk) / SV], 32u / SV);
            let b0 = coopLoad<CoopB>(&xt16[(n0 * 32u + kk) / SV], 32u / SV);
            let b1 = coopLoad<CoopB>(&xt16[((n0 + CB) * 32u + kk) / SV], 32u / SV);
            c0 = coopMultiplyAdd(a, b0, c0);
            c1 = coopMultiplyAdd(a, b1, c1);
        }
#endif
        workgroupBarrier();
    }
#endif
#ifdef SPLIT_PASS
    // The accumulators as they lie, into this range's record; the dispatch after merges them.
    let rec = record_base(split_tile(wid.z, rg), g % p.splits);
    coopStore(c0, &split_records[rec + n0 * TILE_N + r0], TILE_N);
    coopStore(c1, &split_records[rec + (n0 + CB) * TILE_N + r0], TILE_N);
#else
    coopStore(c0, &ct[n0 * TILE_N + r0], TILE_N);
    coopStore(c1, &ct[(n0 + CB) * TILE_N + r0], TILE_N);
    workgroupBarrier();
#ifdef SPLIT_K
    // Sum i of this thread is ct[li + 256 i]: token li / 64 + 4i of the tile.
    var v: array<f32, 16>;
    var live = 0u;
    for (var i = 0u; i < 16u; i++) {
        v[i] = ct[li + 256u * i];
        if (t0 + li / TILE_N + 4u * i < p.t) {
            live |= 1u << i;
        }
    }
    if (!split_merge(li, split_tile(wid.z, rg), g % p.splits, live, &v, &ss)) {
        return;
    }
    for (var i = 0u; i < 16u; i++) {
        ct[li + 256u * i] = v[i];
    }
#endif
#ifdef NORM
    token_ss[li] = ss; // thread li staged token li / 4 (see token_scale)
#endif
    workgroupBarrier();
    let tx = li % 16u;
    let ty = li / 16u;
    for (var j = 0u; j < 4u; j++) {
        let tok = ty + 16u * j;
        let o = tok * TILE_N + tx;
        store_tile(rg, tx, t0 + tok, tok, vec4<f32>(ct[o], ct[o + 16u], ct[o + 32u], ct[o + 48u]));
    }
#endif
}
#endif
