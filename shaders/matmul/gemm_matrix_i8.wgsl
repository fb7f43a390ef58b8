// Matrix–matrix (prefill) on the browser's subgroup matrices: Chromium's experimental
// `chromium-experimental-subgroup-matrix`, which on NVIDIA offers only int8 products (16 × 16
// × 32 and 16 × 8 × 32, i8 → i32) and no f16 (BENCHMARKS.md "session 37"). Included by
// matmul.wgsl for GEMM_MATRIX_I8 (with TILES: stage_x, and the slots and stores); the host
// prepends the enables and turns off Tint's subgroup-matrix uniformity diagnostic (the loads'
// offsets come from subgroup_id, which its workgroup-uniformity analysis can't follow).
//
// A workgroup computes TILE_N (64) slots × TILE_T (64) tokens, one 32-wide K chunk at a time:
// the K of one matrix product is one Q4_0 / Q5_0 / Q8_0 block or one Q4_K sub-block, so each
// product's integer sum has one weight scale. Per chunk:
//   1. each thread stages 8 weights of one slot as int8 levels q (w = d·q + m; levels8 in
//      the type's dequant file) and 8 values of x' for one token (stage_x);
//   2. x' becomes two int8 levels per element, as the int8 matvec quantizes it
//      (common/levels.wgsl): x'' = d_a·a + d_b·b, d_a = max|x'| / 127 over the token's
//      chunk, d_b = d_a / 254, so an element is off by at most max|x'| / 64,516;
//   3. subgroup s (of 8 of 32 lanes) multiplies slot blocks 16(s % 2) and 32 + 16(s % 2)
//      with token block 16(s / 2): R = 254·(q·a) + q·b in i32 (at most 32·128·127·255 <
//      2^31), then Σ w·x' = d·d_b·R + m·Σx' per (slot, token), added to f32 sums in
//      registers. The i32 blocks go through workgroup memory (ct) to reach the lanes: WGSL
//      can't take a subgroup matrix apart.
// Invocation 32s + l keeps token 16(s / 2) + l % 16 of slots 16(s % 2) + l / 16 + 2i and the
// same 32 on (i < 8): with GLU a row's gate and up, so it combines them itself.
// With SPLIT_K (a short step's small grid, matmul/tile_split.wgsl) p.splits workgroups share a
// tile, each over its own range of chunks, and the last to arrive adds the ranges' sums.
// MATRIX_EMULATED (the kernel tests, natively) computes the same integer sums with
// dot4I8Packed instead of the matrix builtins: everything but those is checked on lavapipe.
//
// DOT4_TILES (`MatmulVariant::Dot4I8`: no subgroup matrices, only dot4I8Packed, which WGSL
// has where the browser lists `packed_4x8_integer_dot_product`) stages the same weight levels
// but x' as one int8 level per element (common/levels.wgsl's level_word_one: x'' = d_a·a, off
// by at most max|x'| / 254, llama.cpp's q8_1 activations; two levels took two dot products
// per 4 multiply-adds, which tied the f32 tiles, BENCHMARKS.md "session 41"), and multiplies
// them on the lanes, register-blocked: thread li keeps slots li % 16 + 16i and tokens
// li / 16 + 16j (i, j < 4; with GLU slot s's partner s + 32 is i + 2), and per 4-word step of
// a chunk reads 4 W and 4 x' vec4s of workgroup memory for 64 dot products of 4 (the portable
// f32 tiles read 12 vec4s per 128 FMAs, the bound session 39 measured). Σ w·x'' =
// d·d_a·Σq·a + m·Σx''.

#include "common/levels.wgsl"

const KS: u32 = 48u;      // bytes per staged row: 32 levels, padded so rows start in other banks
const KW: u32 = KS / 4u;  // the same in words

#ifdef DOT4_TILES
// The same rows as vec4s of words (KW = 3 vec4s: 8 quarter-warp lanes reading 8 rows'
// vec4 j touch 8 different bank quads).
var<workgroup> wq: array<vec4<u32>, TILE_N * KW / 4u>;
var<workgroup> xa: array<vec4<u32>, TILE_T * KW / 4u>; // x' levels a

// Σ of the four packed products of `w` and `x` (16 levels each).
fn dot16(w: vec4<u32>, x: vec4<u32>) -> i32 {
    return (dot4I8Packed(w.x, x.x) + dot4I8Packed(w.y, x.y)) + (dot4I8Packed(w.z, x.z) + dot4I8Packed(w.w, x.w));
}
#else
var<workgroup> wq: array<i32, TILE_N * KW>;   // [slot][k]: the chunk's weight levels, 4 per word
var<workgroup> xa: array<i32, TILE_T * KW>;   // [token][k]: x' levels a
var<workgroup> xb: array<i32, TILE_T * KW>;   // [token][k]: x' levels b
#endif
var<workgroup> wdm: array<vec2<f32>, TILE_N>; // (d, m) of each slot's chunk
// The scale of each token's chunk's last level: d_b (two levels), d_a (DOT4_TILES' one).
var<workgroup> xd: array<f32, TILE_T>;
// Per staging thread: max|x'| of its 8 values (after the K loop its Σx², with NORM), and
// their Σx'' (the levels' sum: the offsets m multiply the same x'' the quants do).
var<workgroup> xmax: array<f32, 256>;
var<workgroup> xsum: array<f32, 256>;

#ifndef DOT4_TILES
#ifdef MATRIX_EMULATED
// The same integer sums from dot4I8Packed, for the kernel tests on adapters without
// subgroup matrices (lavapipe): R = 254·Σq·a + Σq·b of slot `slot` and token `tok`.
fn chunk_sum(slot: u32, tok: u32) -> i32 {
    var sa = 0;
    var sb = 0;
    for (var i = 0u; i < 8u; i++) {
        let q = bitcast<u32>(wq[slot * KW + i]);
        sa += dot4I8Packed(q, bitcast<u32>(xa[tok * KW + i]));
        sb += dot4I8Packed(q, bitcast<u32>(xb[tok * KW + i]));
    }
    return 254 * sa + sb;
}
#else
alias WLeft = subgroup_matrix_left<i8, 32, 16>;     // 16 slots × 32 k, row-major in wq
alias XRight = subgroup_matrix_right<i8, 16, 32>;   // 32 k × 16 tokens, column-major in xa/xb
var<workgroup> ct: array<i32, 8u * 2u * 256u>; // per subgroup its two 16 × 16 sums, row-major

// Subgroup `sg`'s two blocks of this chunk, parked in ct for the lanes.
fn multiply_chunk(sg: u32) {
    let slot0 = 16u * (sg % 2u);
    let tok0 = 16u * (sg / 2u);
    let w_lo = subgroupMatrixLoad<WLeft>(&wq, slot0 * KS, false, KS);
    let w_hi = subgroupMatrixLoad<WLeft>(&wq, (slot0 + 32u) * KS, false, KS);
    let x_a = subgroupMatrixLoad<XRight>(&xa, tok0 * KS, true, KS);
    let x_b = subgroupMatrixLoad<XRight>(&xb, tok0 * KS, true, KS);
    let r_lo = subgroupMatrixMultiplyAccumulate(w_lo, x_b,
        subgroupMatrixScalarMultiply(subgroupMatrixMultiply<i32>(w_lo, x_a), 254i));
    let r_hi = subgroupMatrixMultiplyAccumulate(w_hi, x_b,
        subgroupMatrixScalarMultiply(subgroupMatrixMultiply<i32>(w_hi, x_a), 254i));
    subgroupMatrixStore(&ct, sg * 512u, r_lo, false, 16u);
    subgroupMatrixStore(&ct, sg * 512u + 256u, r_hi, false, 16u);
}
#endif
#endif

// rsqrt(mean(x²) + eps) of tile token `tok` from its 4 staging threads' Σ x² (xmax after the
// K loop), or 1 without NORM.
fn token_scale(tok: u32) -> f32 {
#ifdef NORM
    let b = 4u * tok;
    let s = xmax[b] + xmax[b + 1u] + xmax[b + 2u] + xmax[b + 3u];
    return inverseSqrt(s / f32(p.k) + p.eps);
#else
    return 1.0;
#endif
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
#ifdef GEMM_MATRIX_SUBGROUPS
    @builtin(subgroup_id) sg: u32,
#endif
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let rg = row_group(g);
    let range = k_range(g);
    let sr = li / 4u; // the slot and the token this thread stages
    let q = li % 4u;  // … their elements 8q .. 8q + 7 of each chunk
    let staged = locate(rg * TILE_N + sr, TILE_N);
    let staged_live = live(staged);
    let t_stage = t0 + sr;
#ifdef DOT4_TILES
    // The sums this thread keeps: 4 slots × 4 tokens.
    let ts = li % 16u;
    let tt = li / 16u;
    var acc: array<f32, 16>; // [4j + i]: slot ts + 16i, token tt + 16j
#else
    // The sums this thread keeps: those of the blocks subgroup li / 32 multiplies (whichever
    // subgroup the hardware made it part of: every ct block is read after a barrier).
    let block = li / 32u;
    let lane = li % 32u;
    let slot0 = 16u * (block % 2u); // slot blocks slot0 .. + 15 and 32 on
    let tok = 16u * (block / 2u) + lane % 16u;
    var acc: array<f32, 16>; // [8h + i]: slot slot0 + 32h + lane / 16 + 2i, token tok
#endif
    for (var i = 0u; i < 16u; i++) {
        acc[i] = 0.0;
    }
    var ss = 0.0;
    // Chunk c + 1's loads are issued before chunk c's products, as in TILED.
    var w_next = Levels8(vec2<u32>(0u), vec2<f32>(0.0));
    var x_next: array<vec4<f32>, 2>;
    if (range.x < range.y) {
        if (staged_live) {
            w_next = levels_w8(staged, 4u * range.x + q);
        }
        x_next = stage_x(t_stage, range.x, q, &ss);
    }
    for (var c = range.x; c < range.y; c++) {
        let at = sr * KW + 2u * q;
#ifdef DOT4_TILES
        // Words at and at + 1: half of one vec4 (at is even).
        if (at % 4u == 0u) {
            wq[at / 4u].x = w_next.q.x;
            wq[at / 4u].y = w_next.q.y;
        } else {
            wq[at / 4u].z = w_next.q.x;
            wq[at / 4u].w = w_next.q.y;
        }
#else
        wq[at] = bitcast<i32>(w_next.q.x);
        wq[at + 1u] = bitcast<i32>(w_next.q.y);
#endif
        if (q == 0u) {
            wdm[sr] = w_next.dm;
        }
        let xv = x_next;
        let m4 = max(abs(xv[0]), abs(xv[1]));
        xmax[li] = max(max(m4.x, m4.y), max(m4.z, m4.w));
        workgroupBarrier();
        let b4 = 4u * sr;
        let scale = chunk_scale(max(max(xmax[b4], xmax[b4 + 1u]), max(xmax[b4 + 2u], xmax[b4 + 3u])));
#ifdef DOT4_TILES
        let lo = level_word_one(xv[0], scale);
        let hi = level_word_one(xv[1], scale);
        if (at % 4u == 0u) {
            xa[at / 4u].x = lo.a;
            xa[at / 4u].y = hi.a;
        } else {
            xa[at / 4u].z = lo.a;
            xa[at / 4u].w = hi.a;
        }
        let d = chunk_d(scale.x, lo.sum_a + hi.sum_a, 0);
        if (q == 0u) {
            xd[sr] = d.x;
        }
#else
        let lo = level_word(xv[0], scale);
        let hi = level_word(xv[1], scale);
        xa[at] = bitcast<i32>(lo.a);
        xa[at + 1u] = bitcast<i32>(hi.a);
        xb[at] = bitcast<i32>(lo.b);
        xb[at + 1u] = bitcast<i32>(hi.b);
        let d = chunk_d(scale.x, lo.sum_a + hi.sum_a, lo.sum_b + hi.sum_b);
        if (q == 0u) {
            xd[sr] = d.y;
        }
#endif
        xsum[li] = d.z;
        workgroupBarrier();
        if (c + 1u < range.y) {
            if (staged_live) {
                w_next = levels_w8(staged, 4u * (c + 1u) + q);
            }
            x_next = stage_x(t_stage, c + 1u, q, &ss);
        }
#ifdef DOT4_TILES
        // Σq·a per (slot, token), two 4-word steps. (Zeroed explicitly: in Chromium 156 on
        // SwiftShader a `var` declared without a value inside a loop keeps the previous
        // iteration's contents instead of starting at zero.)
        var sa = array<i32, 16>();
#ifndef ABLATE_MMA
        for (var v = 0u; v < 2u; v++) {
            var wv: array<vec4<u32>, 4>;
            for (var i = 0u; i < 4u; i++) {
                wv[i] = wq[(ts + 16u * i) * (KW / 4u) + v];
            }
            for (var j = 0u; j < 4u; j++) {
                let av = xa[(tt + 16u * j) * (KW / 4u) + v];
                for (var i = 0u; i < 4u; i++) {
                    sa[4u * j + i] += dot16(wv[i], av);
                }
            }
        }
#endif
        for (var j = 0u; j < 4u; j++) {
            let tj = tt + 16u * j;
            let da = xd[tj];
            let sx = (xsum[4u * tj] + xsum[4u * tj + 1u]) + (xsum[4u * tj + 2u] + xsum[4u * tj + 3u]);
            for (var i = 0u; i < 4u; i++) {
                let dm = wdm[ts + 16u * i];
                acc[4u * j + i] = fma(f32(sa[4u * j + i]), dm.x * da, fma(dm.y, sx, acc[4u * j + i]));
            }
        }
#else
#ifdef GEMM_MATRIX_SUBGROUPS
        multiply_chunk(sg);
        workgroupBarrier();
#endif
        let db = xd[tok];
        let sx = (xsum[4u * tok] + xsum[4u * tok + 1u]) + (xsum[4u * tok + 2u] + xsum[4u * tok + 3u]);
        for (var h = 0u; h < 2u; h++) {
            for (var i = 0u; i < 8u; i++) {
                let s = lane / 16u + 2u * i;
                let dm = wdm[slot0 + 32u * h + s];
#ifdef MATRIX_EMULATED
                let r = f32(chunk_sum(slot0 + 32u * h + s, tok));
#else
                let r = f32(ct[block * 512u + 256u * h + 16u * s + lane % 16u]);
#endif
                acc[8u * h + i] = fma(r, dm.x * db, fma(dm.y, sx, acc[8u * h + i]));
            }
        }
#endif
        workgroupBarrier();
    }
#ifdef SPLIT_K
#ifdef DOT4_TILES
    var live_sums = 0u; // the sums of tokens within the step
    for (var j = 0u; j < 4u; j++) {
        if (t0 + tt + 16u * j < p.t) {
            live_sums |= 0xfu << (4u * j);
        }
    }
#else
    let live_sums = select(0u, 0xffffu, t0 + tok < p.t);
#endif
    if (!split_merge(li, split_tile(wid.z, rg), g % p.splits, live_sums, &acc, &ss)) {
        return;
    }
#endif
#ifdef NORM
    xmax[li] = ss; // thread li staged token li / 4 (see token_scale)
    workgroupBarrier();
#endif
#ifdef DOT4_TILES
    for (var j = 0u; j < 4u; j++) {
        let t = t0 + tt + 16u * j;
        if (t >= p.t) {
            break;
        }
        let scale = token_scale(tt + 16u * j);
#ifdef GLU
        for (var i = 0u; i < 2u; i++) {
            let mr = locate(rg * TILE_N + ts + 16u * i, TILE_N);
            if (live(mr)) {
                store_glu(t, mr.y, acc[4u * j + i] * scale, acc[4u * j + i + 2u] * scale);
            }
        }
#else
        for (var i = 0u; i < 4u; i++) {
            let mr = locate(rg * TILE_N + ts + 16u * i, TILE_N);
            if (live(mr)) {
                store(mr.x, t, mr.y, acc[4u * j + i] * scale);
            }
        }
#endif
    }
#else
    let t = t0 + tok;
    if (t >= p.t) {
        return;
    }
    let scale = token_scale(tok);
    for (var i = 0u; i < 8u; i++) {
        let s = slot0 + lane / 16u + 2u * i;
        let lo = locate(rg * TILE_N + s, TILE_N);
#ifdef GLU
        if (live(lo)) {
            store_glu(t, lo.y, acc[i] * scale, acc[8u + i] * scale);
        }
#else
        let hi = locate(rg * TILE_N + s + 32u, TILE_N);
        if (live(lo)) {
            store(lo.x, t, lo.y, acc[i] * scale);
        }
        if (live(hi)) {
            store(hi.x, t, hi.y, acc[8u + i] * scale);
        }
#endif
    }
#endif
}
