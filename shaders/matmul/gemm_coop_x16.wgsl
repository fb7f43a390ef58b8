// The 128 × 128 tensor-core tiles (GEMM_COOP) with X16 (the default where 48 KiB of workgroup
// memory exist; COCO_COOP_PRESTAGE=0 is the A/B baseline): x' arrives staged once per product
// as f16 rows (matmul/token_scale.wgsl), and the tiles are double-buffered. Included by
// matmul.wgsl in place of gemm_coop.wgsl; the subgroups' blocks, the GLU pairing and the
// numerics are its.
//
// Why: gemm_coop.wgsl passes two barriers per 32-wide chunk with one workgroup per SM (its
// 8 accumulators per thread hold 64 registers), and between them each thread dequantizes 16
// weights, loads, norms, scales and converts 16 activations, and stores 32 f16 values. Here
// each thread copies its 16 activations as they lie, and chunk c + 1 is stored into the other
// buffer while chunk c is multiplied: one barrier per chunk, and the next chunk's global loads
// are in flight during the matrix work.
//
// Workgroup memory is the device limit's 48 KiB at most: 2 × 10 KiB of W, 2 × 10 KiB of x',
// and one CB × CB f32 block per subgroup for the accumulators' zeros and the epilogue, which
// parks one block at a time (gemm_coop.wgsl parks two, in 16 KiB).

const KC: u32 = 32u;       // K elements per staged chunk
const KS: u32 = KC + 8u;   // row stride of the staged tiles: 80 bytes, so the 8 rows a
                           // matrix load reads at once start in different banks
const HALF_N: u32 = TILE_N / 2u;
const W_TILE: u32 = TILE_N * KS; // f16 per buffer of W
const X_TILE: u32 = TILE_T * KS; // f16 per buffer of x'

var<workgroup> wt16: array<StagedHalf, (2u * W_TILE) / SV>; // [buffer][slot][k]: W chunks, row-major (A)
var<workgroup> xt16: array<StagedHalf, (2u * X_TILE) / SV>; // [buffer][token][k]: x' chunks (B, column-major)
var<workgroup> ct: array<f32, NSG * CB * CB>; // [subgroup][CB × CB]: a parked block (C)

#ifdef SPLIT_K
// Split K (where the grid is small; select.rs coop128_splits): the
// p.splits workgroups of a (token tile, row group) each multiply their own range of chunks
// (matmul/tile_split.wgsl's tile_chunks) and record their 128 × 128 sums in the split
// scratch, after its arrival counters: COOP_RECORD words per (tile, split). The dispatch
// after adds them (SPLIT_PASS, matmul/split_merge.wgsl), or with COCO_COOP_SPLIT_MERGE=last
// the tile's last workgroup to arrive does.
const COOP_RECORD: u32 = TILE_N * TILE_T;

#ifndef SPLIT_PASS
// The record word of lane `lane`'s value e (< 8: the gate / low block, else the partner 64
// slots on) of token round j, subgroup sg, in split `split`'s record of tile `tile`.
fn record_word(tile: u32, split: u32, sg: u32, j: u32, e: u32, lane: u32) -> u32 {
    return SPLIT_COUNTERS + (tile * p.splits + split) * COOP_RECORD + ((sg * 4u + j) * 16u + e) * SGS + lane;
}
#endif
#endif

// Chunk c's elements of this thread's two W rows and two tokens, into buffer c % 2.
fn stage_chunk(c: u32, at: u32, w8: array<HeldW, 2>, x8s: array<array<vec4<f16>, 2>, 2>) {
    let wb = (c & 1u) * W_TILE + at;
    let xb = (c & 1u) * X_TILE + at;
    stage_w16(wb, decode_w(w8[0]));
    stage_w16(wb + HALF_N * KS, decode_w(w8[1]));
    stage_x8(xb, x8s[0]);
    stage_x8(xb + HALF_N * KS, x8s[1]);
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
    @builtin(subgroup_invocation_id) lane: u32,
) {
#ifdef TOKENS_FIRST
    // Where W outgrows the L2 (select.rs coop_tokens_first): the token tiles of one row group
    // are consecutive workgroups in dispatch order (x fastest), so they run together and read
    // their W rows from memory once, where the grid's z puts a whole pass over W between them.
    let lin = (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
    let tz = lin % nwg.z;
    let g = lin / nwg.z;
#else
    let tz = wid.z;
    let g = wid.x + wid.y * nwg.x;
#endif
    if (g >= p.groups) {
        return;
    }
    let t0 = tz * TILE_T;
    // Without SPLIT_K the row group is g and the range all of K (matmul/tiles.wgsl).
    let rg = row_group(g);
    let range = k_range(g);
    // Each thread stages 8 elements of two W rows (slots sr and sr + 64: with GLU a row's
    // gate and up) and of two tokens (sr and sr + 64) per chunk.
    let sr = li / 4u;
    let q = li % 4u;
    let at = sr * KS + 8u * q;
    let w_lo = locate(rg * TILE_N + sr, TILE_N);
    let w_hi = locate(rg * TILE_N + sr + HALF_N, TILE_N);
    let lo_live = live(w_lo);
    let hi_live = live(w_hi);
    let t_lo = t0 + sr;
    let t_hi = t0 + sr + HALF_N;
    let r0 = CB * (sg % (HALF_N / CB));
    let n0 = 4u * CB * (sg / (HALF_N / CB));
    let scratch = sg * CB * CB;
#ifdef SPLIT_K
    let tile = split_tile(tz, rg);
    let split = g % p.splits;
#endif
    for (var i = 0u; i < 8u; i++) {
        ct[scratch + SGS * i + lane] = 0.0;
    }
    var w_next: array<HeldW, 2>; // zeros: rows past the weight's stage zeros
    if (range.x < range.y) {
        if (lo_live) {
            w_next[0] = hold_w(w_lo, 4u * range.x + q);
        }
        if (hi_live) {
            w_next[1] = hold_w(w_hi, 4u * range.x + q);
        }
        let x0 = array<array<vec4<f16>, 2>, 2>(x8(t_lo, range.x, q), x8(t_hi, range.x, q));
        stage_chunk(range.x, at, w_next, x0);
    }
    workgroupBarrier();
    // Accumulators c<h><j>: slots r0 + 64h .. + CB - 1, tokens n0 + CB j .. + CB - 1.
    var c00 = coopLoad<CoopC>(&ct[scratch], CB);
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;
    for (var c = range.x; c < range.y; c++) {
        let more = c + 1u < range.y;
        // Chunk c + 1's loads, issued before chunk c's matrix work.
        var x_next = array<array<vec4<f16>, 2>, 2>();
        if (more) {
            let o = 4u * (c + 1u) + q;
            if (lo_live) {
                w_next[0] = hold_w(w_lo, o);
            }
            if (hi_live) {
                w_next[1] = hold_w(w_hi, o);
            }
            x_next = array<array<vec4<f16>, 2>, 2>(x8(t_lo, c + 1u, q), x8(t_hi, c + 1u, q));
        }
        let wb = (c & 1u) * W_TILE;
        let xb = (c & 1u) * X_TILE;
#ifndef ABLATE_MMA
        for (var kk = 0u; kk < KC; kk += CB) {
            let a0 = coopLoadT<CoopA>(&wt16[(wb + r0 * KS + kk) / SV], KS / SV);
            let a1 = coopLoadT<CoopA>(&wt16[(wb + (r0 + HALF_N) * KS + kk) / SV], KS / SV);
            let b0 = coopLoad<CoopB>(&xt16[(xb + n0 * KS + kk) / SV], KS / SV);
            let b1 = coopLoad<CoopB>(&xt16[(xb + (n0 + CB) * KS + kk) / SV], KS / SV);
            let b2 = coopLoad<CoopB>(&xt16[(xb + (n0 + 2u * CB) * KS + kk) / SV], KS / SV);
            let b3 = coopLoad<CoopB>(&xt16[(xb + (n0 + 3u * CB) * KS + kk) / SV], KS / SV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
#endif
        // The other buffer was last read in chunk c - 1, before the barrier that ended it.
        if (more) {
            stage_chunk(c + 1u, at, w_next, x_next);
        }
        workgroupBarrier();
    }
#ifdef SPLIT_PASS
    // The accumulators as they lie, block c<h><j> at slots r0 + 64h .., tokens n0 + CB j ..:
    // no parking, no barriers.
    let rec = record_base(tile, split);
    coopStore(c00, &split_records[rec + n0 * TILE_N + r0], TILE_N);
    coopStore(c01, &split_records[rec + (n0 + CB) * TILE_N + r0], TILE_N);
    coopStore(c02, &split_records[rec + (n0 + 2u * CB) * TILE_N + r0], TILE_N);
    coopStore(c03, &split_records[rec + (n0 + 3u * CB) * TILE_N + r0], TILE_N);
    coopStore(c10, &split_records[rec + n0 * TILE_N + r0 + HALF_N], TILE_N);
    coopStore(c11, &split_records[rec + (n0 + CB) * TILE_N + r0 + HALF_N], TILE_N);
    coopStore(c12, &split_records[rec + (n0 + 2u * CB) * TILE_N + r0 + HALF_N], TILE_N);
    coopStore(c13, &split_records[rec + (n0 + 3u * CB) * TILE_N + r0 + HALF_N], TILE_N);
#else
    // Four rounds, one per token block: the subgroup parks block h = 0 then 1 (slots r0 + 64h
    // ..), and lane l takes slot r0 + l % CB (and its partner 64 on) of tokens
    // l / CB + (SGS / CB) i.
    for (var j = 0u; j < 4u; j++) {
        switch j {
            case 0u: {
                coopStore(c00, &ct[scratch], CB);
            }
            case 1u: {
                coopStore(c01, &ct[scratch], CB);
            }
            case 2u: {
                coopStore(c02, &ct[scratch], CB);
            }
            default: {
                coopStore(c03, &ct[scratch], CB);
            }
        }
        workgroupBarrier();
        let v_lo = unpark(scratch, lane);
        workgroupBarrier();
        switch j {
            case 0u: {
                coopStore(c10, &ct[scratch], CB);
            }
            case 1u: {
                coopStore(c11, &ct[scratch], CB);
            }
            case 2u: {
                coopStore(c12, &ct[scratch], CB);
            }
            default: {
                coopStore(c13, &ct[scratch], CB);
            }
        }
        workgroupBarrier();
        let v_hi = unpark(scratch, lane);
        workgroupBarrier();
#ifdef SPLIT_K
        for (var i = 0u; i < 8u; i++) {
            atomicStore(&split_sums[record_word(tile, split, sg, j, i, lane)], bitcast<u32>(v_lo[i]));
            atomicStore(&split_sums[record_word(tile, split, sg, j, 8u + i, lane)], bitcast<u32>(v_hi[i]));
        }
#else
        finish_blocks(rg, t0 + n0 + CB * j, r0, lane, v_lo, v_hi);
#endif
    }
#ifdef SPLIT_K
    // The tile's last workgroup to arrive adds the ranges' records in split order (so the
    // result doesn't depend on which finished last) and stores; storageBarrier is
    // device-scoped in naga's SPIR-V, ordering the records before the counter.
    // (Whether this is the last arrives through ct[0], free after the rounds' last barrier:
    // tile_split.wgsl's split_arrived would pass the 48 KiB by 4 bytes.)
    storageBarrier();
    if (li == 0u) {
        ct[0] = select(0.0, 1.0, atomicAdd(&split_sums[tile], 1u) == p.splits - 1u);
    }
    if (workgroupUniformLoad(&ct[0]) == 0.0) {
        return;
    }
    storageBarrier();
    if (li == 0u) {
        atomicStore(&split_sums[tile], 0u);
    }
    for (var j = 0u; j < 4u; j++) {
        var v_lo: array<f32, 8>;
        var v_hi: array<f32, 8>;
        for (var i = 0u; i < 8u; i++) {
            var lo = 0.0;
            var hi = 0.0;
            for (var sp = 0u; sp < p.splits; sp++) {
                lo += bitcast<f32>(atomicLoad(&split_sums[record_word(tile, sp, sg, j, i, lane)]));
                hi += bitcast<f32>(atomicLoad(&split_sums[record_word(tile, sp, sg, j, 8u + i, lane)]));
            }
            v_lo[i] = lo;
            v_hi[i] = hi;
        }
        finish_blocks(rg, t0 + n0 + CB * j, r0, lane, v_lo, v_hi);
    }
#endif
#endif
}
#endif
