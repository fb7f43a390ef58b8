// The 128 × 128 tensor-core tiles with x' prestaged (X16), warp-specialized (WARP_SPEC;
// COCO_COOP_WS=1, the A/B against matmul/gemm_coop_x16.wgsl): 256 consumer threads (the NSG
// subgroups below NSG) only multiply, and PRODUCERS more threads only stage. Included by
// matmul.wgsl in place of gemm_coop_x16.wgsl; the blocks, the GLU pairing, the numerics and
// the records of split K (SPLIT_PASS only) are its.
//
// Why: in gemm_coop_x16.wgsl every subgroup multiplies chunk c, then stores chunk c + 1 and
// meets the others at the barrier, with one workgroup an SM (the accumulators' registers): the
// tensor cores idle while the staging runs, and the staging waits on loads issued only one
// chunk's products earlier. Here the consumers' products of chunk c run while the producers
// store chunk c + 1 (decoded from words they loaded during chunk c - 1) and issue the loads of
// chunk c + 2, which nothing reads before the next barrier: one barrier per chunk still, but
// products and staging overlap, and a load has a whole chunk to arrive.
//
// A producer (index pi: slots and tokens pi / 4 + 32 i, i < 4; elements 8 (pi % 4) ..) holds
// one chunk: 4 rows' words as loaded (RAW_W: Q4_0 Q5_0 Q8_0; other types their decoded f16,
// whose loads it waits for at once) and 4 tokens' f16 x'. Workgroup memory as the x16 kernel:
// 2 × 10 KiB of W, 2 × 10 KiB of x', a CB × CB f32 block per consumer subgroup.

const KC: u32 = 32u;       // K elements per staged chunk
const KS: u32 = KC + 8u;   // row stride of the staged tiles (as gemm_coop_x16.wgsl)
const HALF_N: u32 = TILE_N / 2u;
const W_TILE: u32 = TILE_N * KS; // f16 per buffer of W
const X_TILE: u32 = TILE_T * KS; // f16 per buffer of x'
const PRODUCERS: u32 = 128u;
const P_ROWS: u32 = PRODUCERS / 4u; // slots (and tokens) one pass of the producers covers

var<workgroup> wt16: array<StagedHalf, (2u * W_TILE) / SV>; // [buffer][slot][k]: W chunks (A)
var<workgroup> xt16: array<StagedHalf, (2u * X_TILE) / SV>; // [buffer][token][k]: x' chunks (B)
var<workgroup> ct: array<f32, NSG * CB * CB>; // [consumer subgroup][CB × CB]: a parked block (C)

#ifdef SPLIT_K
const COOP_RECORD: u32 = TILE_N * TILE_T;

// The first word of split `split`'s record of tile `tile` (slot s, tile token n at n · TILE_N +
// s): merged by the dispatch after (matmul/split_merge.wgsl).
fn record_base(tile: u32, split: u32) -> u32 {
    return SPLIT_COUNTERS + (tile * p.splits + split) * COOP_RECORD;
}
#endif

// One producer's share of a chunk.
struct Held {
    w: array<HeldW, 4>,
    x: array<array<vec4<f16>, 2>, 4>,
}

// Chunk c's share of producer (row part pr, element group q): W slots (rows `rows`, zeros
// where not `lives`) and tokens t0 + pr + P_ROWS i.
fn hold_chunk(c: u32, rows: array<vec2<u32>, 4>, lives: array<bool, 4>, t0: u32, pr: u32, q: u32) -> Held {
    var h: Held;
    for (var i = 0u; i < 4u; i++) {
        if (lives[i]) {
            h.w[i] = hold_w(rows[i], 4u * c + q);
        }
        h.x[i] = x8(t0 + pr + P_ROWS * i, c, q);
    }
    return h;
}

// Stores a held chunk c into buffer c % 2.
fn store_chunk(c: u32, h: Held, pr: u32, q: u32) {
    for (var i = 0u; i < 4u; i++) {
        let at = (pr + P_ROWS * i) * KS + 8u * q;
        stage_w16((c & 1u) * W_TILE + at, decode_w(h.w[i]));
        stage_x8((c & 1u) * X_TILE + at, h.x[i]);
    }
}

#ifdef MERGE_PASS
#include "matmul/split_merge.wgsl"
#else
@compute @workgroup_size(256 + PRODUCERS)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
#ifdef TOKENS_FIRST
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
    let rg = row_group(g);
    let range = k_range(g);
    // Subgroups below NSG consume, the others produce (uniform within each subgroup, as the
    // matrix operations need).
    let consumer = sg < NSG;
    let pi = (max(sg, NSG) - NSG) * SGS + lane;
    let pr = pi / 4u;
    let q = pi % 4u;
    var rows: array<vec2<u32>, 4>;
    var lives: array<bool, 4>;
    for (var i = 0u; i < 4u; i++) {
        rows[i] = locate(rg * TILE_N + pr + P_ROWS * i, TILE_N);
        lives[i] = live(rows[i]);
    }
    let r0 = CB * (sg % (HALF_N / CB));
    let n0 = 4u * CB * ((sg % NSG) / (HALF_N / CB));
    let scratch = (sg % NSG) * CB * CB;
#ifdef SPLIT_K
    let tile = split_tile(tz, rg);
    let split = g % p.splits;
#endif
    if (consumer) {
        for (var i = 0u; i < 8u; i++) {
            ct[scratch + SGS * i + lane] = 0.0;
        }
    }
    var held: Held;
    if (!consumer && range.x < range.y) {
        store_chunk(range.x, hold_chunk(range.x, rows, lives, t0, pr, q), pr, q);
        if (range.x + 1u < range.y) {
            held = hold_chunk(range.x + 1u, rows, lives, t0, pr, q);
        }
    }
    workgroupBarrier();
    var c00 = coopLoad<CoopC>(&ct[scratch], CB);
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;
    for (var c = range.x; c < range.y; c++) {
        if (consumer) {
            let wb = (c & 1u) * W_TILE;
            let xb = (c & 1u) * X_TILE;
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
        } else if (c + 1u < range.y) {
            // The other buffer was last read in chunk c - 1, before the barrier that ended it.
            store_chunk(c + 1u, held, pr, q);
            if (c + 2u < range.y) {
                held = hold_chunk(c + 2u, rows, lives, t0, pr, q);
            }
        }
        workgroupBarrier();
    }
#ifdef SPLIT_K
    // The accumulators as they lie: block c<h><j> at slots r0 + 64h .., tokens n0 + CB j ...
    if (consumer) {
        let rec = record_base(tile, split);
        coopStore(c00, &split_records[rec + n0 * TILE_N + r0], TILE_N);
        coopStore(c01, &split_records[rec + (n0 + CB) * TILE_N + r0], TILE_N);
        coopStore(c02, &split_records[rec + (n0 + 2u * CB) * TILE_N + r0], TILE_N);
        coopStore(c03, &split_records[rec + (n0 + 3u * CB) * TILE_N + r0], TILE_N);
        coopStore(c10, &split_records[rec + n0 * TILE_N + r0 + HALF_N], TILE_N);
        coopStore(c11, &split_records[rec + (n0 + CB) * TILE_N + r0 + HALF_N], TILE_N);
        coopStore(c12, &split_records[rec + (n0 + 2u * CB) * TILE_N + r0 + HALF_N], TILE_N);
        coopStore(c13, &split_records[rec + (n0 + 3u * CB) * TILE_N + r0 + HALF_N], TILE_N);
    }
#else
    // Four rounds, one per token block, as gemm_coop_x16.wgsl's; the producers only keep the
    // barriers.
    for (var j = 0u; j < 4u; j++) {
        if (consumer) {
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
        }
        workgroupBarrier();
        let v_lo = unpark(scratch, lane);
        workgroupBarrier();
        if (consumer) {
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
        }
        workgroupBarrier();
        let v_hi = unpark(scratch, lane);
        workgroupBarrier();
        if (consumer) {
            finish_blocks(rg, t0 + n0 + CB * j, r0, lane, v_lo, v_hi);
        }
    }
#endif
}
#endif
