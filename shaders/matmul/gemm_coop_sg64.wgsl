// The 128 × 128 tensor-core tiles with 64 × 64 per subgroup (GEMM_COOP with X16 and SG64; the
// A/B switch COCO_COOP_SUBGROUP_TILE=64, with x' prestaged; not timed yet). Included by
// matmul.wgsl in place of gemm_coop_x16.wgsl, whose staging (x' copied from the f16 rows of
// matmul/token_scale.wgsl, double-buffered chunks, one barrier each), GLU pairing and numerics
// it keeps.
//
// Why: gemm_coop_x16.wgsl's 8 subgroups each own 32 slots × 64 tokens, 2 × 4 blocks: per
// 16-wide K step a subgroup loads 6 blocks from workgroup memory for 8 products, 24 KiB per
// workgroup and step, against a 128 B/clock workgroup memory: about as many clocks as the
// tensor work itself, so the two share the SM. Here 4 subgroups own 64 × 64 each, 4 × 4
// blocks: 8 loads for 16 products, 16 KiB per step for the same work. The price is 16
// accumulators per thread (128 registers), and each of the 128 threads stages 4 rows of W
// and 4 tokens per chunk; two workgroups fit an SM where gemm_coop_x16's one does.
//
// Subgroup s (of 128 / SGS: 4 of 32 lanes with blocks of 16, 16 of 8 with blocks of 8; see
// coop_staging.wgsl) owns slots 2CB(s % (32 / CB)) .. + 2CB - 1 and the same slots 64 on
// (with GLU a row's gate and up), and tokens 4CB(s / (32 / CB)) .. + 4CB - 1: 4 × 4 blocks.
// Workgroup memory: 2 × 10 KiB of W, 2 × 10 KiB of x', and one parked CB × CB f32 block per
// subgroup (44 KiB).

const KC: u32 = 32u;       // K elements per staged chunk
const KS: u32 = KC + 8u;   // row stride of the staged tiles: 80 bytes, so the 8 rows a
                           // matrix load reads at once start in different banks
const HALF_N: u32 = TILE_N / 2u;
const W_TILE: u32 = TILE_N * KS; // f16 per buffer of W
const X_TILE: u32 = TILE_T * KS; // f16 per buffer of x'

var<workgroup> wt16: array<StagedHalf, (2u * W_TILE) / SV>; // [buffer][slot][k]: W chunks, row-major (A)
var<workgroup> xt16: array<StagedHalf, (2u * X_TILE) / SV>; // [buffer][token][k]: x' chunks (B, column-major)
var<workgroup> ct: array<f32, (128u / SGS) * CB * CB>; // [subgroup][CB × CB]: a parked block (C)

alias W8 = array<vec4<f16>, 2>;
alias X8 = array<vec4<f16>, 2>;

// Chunk c's elements of this thread's 4 W rows and 4 tokens (32 apart), into buffer c % 2.
fn stage_chunk(c: u32, at: u32, w8: array<W8, 4>, x8s: array<X8, 4>) {
    let wb = (c & 1u) * W_TILE + at;
    let xb = (c & 1u) * X_TILE + at;
    for (var i = 0u; i < 4u; i++) {
        stage_w16(wb + 32u * i * KS, w8[i]);
        stage_x8(xb + 32u * i * KS, x8s[i]);
    }
}

// Chunk c's elements of tokens t, t + 32, t + 64 and t + 96 (rows past the step's are zeros).
fn x_chunk(t: u32, c: u32, q: u32) -> array<X8, 4> {
    return array<X8, 4>(x8(t, c, q), x8(t + 32u, c, q), x8(t + 64u, c, q), x8(t + 96u, c, q));
}

@compute @workgroup_size(128)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let chunks = p.k / KC;
    // Each thread stages 8 elements of W rows (slots) sr + 32i and of tokens sr + 32i, i < 4.
    let sr = li / 4u;
    let q = li % 4u;
    let at = sr * KS + 8u * q;
    let rows = array<vec2<u32>, 4>(
        locate(g * TILE_N + sr, TILE_N),
        locate(g * TILE_N + sr + 32u, TILE_N),
        locate(g * TILE_N + sr + 64u, TILE_N),
        locate(g * TILE_N + sr + 96u, TILE_N),
    );
    let r0 = 2u * CB * (sg % (32u / CB));
    let n0 = 4u * CB * (sg / (32u / CB));
    let scratch = sg * CB * CB;
    for (var i = 0u; i < 8u; i++) {
        ct[scratch + SGS * i + lane] = 0.0;
    }
    let zero8 = W8(vec4<f16>(0.0h), vec4<f16>(0.0h));
    var w_next = array<W8, 4>(zero8, zero8, zero8, zero8);
    for (var i = 0u; i < 4u; i++) {
        if (live(rows[i])) {
            w_next[i] = dequant_w8h(rows[i], q);
        }
    }
    stage_chunk(0u, at, w_next, x_chunk(t0 + sr, 0u, q));
    workgroupBarrier();
    // Accumulators c<h><j>: slots r0 + CB h (h < 2) or r0 + 64 + CB(h - 2) .. + CB - 1,
    // tokens n0 + CB j .. + CB - 1.
    var c00 = coopLoad<CoopC>(&ct[scratch], CB);
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;
    var c20 = c00;
    var c21 = c00;
    var c22 = c00;
    var c23 = c00;
    var c30 = c00;
    var c31 = c00;
    var c32 = c00;
    var c33 = c00;
    for (var c = 0u; c < chunks; c++) {
        let more = c + 1u < chunks;
        // Chunk c + 1's loads, issued before chunk c's matrix work.
        var x_next = array<X8, 4>();
        if (more) {
            let o = 4u * (c + 1u) + q;
            for (var i = 0u; i < 4u; i++) {
                if (live(rows[i])) {
                    w_next[i] = dequant_w8h(rows[i], o);
                }
            }
            x_next = x_chunk(t0 + sr, c + 1u, q);
        }
        let wb = (c & 1u) * W_TILE;
        let xb = (c & 1u) * X_TILE;
        for (var kk = 0u; kk < KC; kk += CB) {
            let b0 = coopLoad<CoopB>(&xt16[(xb + (n0 + 0u) * KS + kk) / SV], KS / SV);
            let b1 = coopLoad<CoopB>(&xt16[(xb + (n0 + CB) * KS + kk) / SV], KS / SV);
            let b2 = coopLoad<CoopB>(&xt16[(xb + (n0 + 2u * CB) * KS + kk) / SV], KS / SV);
            let b3 = coopLoad<CoopB>(&xt16[(xb + (n0 + 3u * CB) * KS + kk) / SV], KS / SV);
            let a0 = coopLoadT<CoopA>(&wt16[(wb + (r0) * KS + kk) / SV], KS / SV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            let a1 = coopLoadT<CoopA>(&wt16[(wb + (r0 + CB) * KS + kk) / SV], KS / SV);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            let a2 = coopLoadT<CoopA>(&wt16[(wb + (r0 + HALF_N) * KS + kk) / SV], KS / SV);
            c20 = coopMultiplyAdd(a2, b0, c20);
            c21 = coopMultiplyAdd(a2, b1, c21);
            c22 = coopMultiplyAdd(a2, b2, c22);
            c23 = coopMultiplyAdd(a2, b3, c23);
            let a3 = coopLoadT<CoopA>(&wt16[(wb + (r0 + HALF_N + CB) * KS + kk) / SV], KS / SV);
            c30 = coopMultiplyAdd(a3, b0, c30);
            c31 = coopMultiplyAdd(a3, b1, c31);
            c32 = coopMultiplyAdd(a3, b2, c32);
            c33 = coopMultiplyAdd(a3, b3, c33);
        }
        // The other buffer was last read in chunk c - 1, before the barrier that ended it.
        if (more) {
            stage_chunk(c + 1u, at, w_next, x_next);
        }
        workgroupBarrier();
    }
    // The epilogue, one block pair at a time: the subgroup parks a block, each lane takes 8
    // of its values, then the pair's other block, and stores both.
    coopStore(c00, &ct[scratch], CB);
    workgroupBarrier();
    let lo00 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c20, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 0u, r0 + 0u, lane, lo00, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c10, &ct[scratch], CB);
    workgroupBarrier();
    let lo10 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c30, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 0u, r0 + CB, lane, lo10, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c01, &ct[scratch], CB);
    workgroupBarrier();
    let lo01 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c21, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + CB, r0 + 0u, lane, lo01, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c11, &ct[scratch], CB);
    workgroupBarrier();
    let lo11 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c31, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + CB, r0 + CB, lane, lo11, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c02, &ct[scratch], CB);
    workgroupBarrier();
    let lo02 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c22, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 2u * CB, r0 + 0u, lane, lo02, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c12, &ct[scratch], CB);
    workgroupBarrier();
    let lo12 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c32, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 2u * CB, r0 + CB, lane, lo12, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c03, &ct[scratch], CB);
    workgroupBarrier();
    let lo03 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c23, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 3u * CB, r0 + 0u, lane, lo03, unpark(scratch, lane));
    workgroupBarrier();
    coopStore(c13, &ct[scratch], CB);
    workgroupBarrier();
    let lo13 = unpark(scratch, lane);
    workgroupBarrier();
    coopStore(c33, &ct[scratch], CB);
    workgroupBarrier();
    finish_blocks(g, t0 + n0 + 3u * CB, r0 + CB, lane, lo13, unpark(scratch, lane));
    workgroupBarrier();
}
