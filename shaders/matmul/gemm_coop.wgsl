// Matrix–matrix (prefill) on tensor cores with a 128 × 128 output tile: what COCO_COOPMAT=1
// runs natively (TILED_COOP's 64 × 64 tiles are its A/B baseline). Included by matmul.wgsl for
// GEMM_COOP (with TILES: dequant_w8, stage_x), which provides the bindings, slots and stores;
// kernels/matmul prepends `enable f16;` and `enable wgpu_cooperative_matrix;` and TILE_N =
// TILE_T = 128.
//
// Why: TILED_COOP's 8 subgroups each multiply 2 blocks of 16 × 16 per 16-wide K step, so its
// staging (dequantize, round to f16, store, two barriers per 32-wide chunk), paid once per 64
// tokens, bounds it at ~25 TFLOP/s (BENCHMARKS.md "session 9"). Here each subgroup owns 2 ×
// 4 blocks (32 slots × 64 tokens) and multiplies 8 per K step from 2 + 4 loads, and each
// weight is dequantized once per 128 tokens: 4× the tensor work per staged element.
//
// Subgroup s (of NSG: 8 of 32 lanes with blocks of 16, 32 of 8 with blocks of 8; see
// coop_staging.wgsl) owns slots CB(s % (64 / CB)) .. + CB - 1 and the same slots 64 on, and
// tokens 4CB(s / (64 / CB)) .. + 4CB - 1: 2 × 4 blocks. With GLU the first half of the tile's
// slots are gate rows and the second half the up slots of the same rows (see locate), so
// each subgroup holds a row's gate and up sums and combines them itself.
//
// Numerics: W and x' rounded to f16 (relative error ≤ 2^-11 per element), products
// accumulated in f32; tests/kernels_matmul.rs bounds the result against the CPU reference.
// x' is staged scaled per token, so values past f16's range stay finite
// (matmul/coop_staging.wgsl, which also holds the staging stores).

const KC: u32 = 32u;       // K elements per staged chunk
const KS: u32 = KC + 8u;   // row stride of the staged tiles: 80 bytes, so the 8 rows a
                           // matrix load reads at once start in different banks
const HALF_N: u32 = TILE_N / 2u;

var<workgroup> wt16: array<StagedHalf, (TILE_N * KS) / SV>; // [slot][k]: the W chunk, row-major (A)
var<workgroup> xt16: array<StagedHalf, (TILE_T * KS) / SV>; // [token][k]: the x' chunk (B, column-major)
// Per subgroup one CB × CB f32 block (C, column-major: [token][slot]): the zeros the
// accumulators start from, then the epilogue's way from matrices to (slot, token) values, one
// block at a time.
var<workgroup> ct: array<f32, NSG * CB * CB>;
var<workgroup> token_unscale: array<f32, TILE_T>; // 2^e: token tok was staged times 2^-e
#ifdef NORM
var<workgroup> token_ss: array<f32, 512>; // Σ x² of each staging thread's elements
#endif

// rsqrt(mean(x²) + eps) of tile token `tok` from its 4 staging threads' Σ x², or 1 without
// NORM. Thread li staged tokens li / 4 and li / 4 + 64 (token_ss[li] and [256 + li]).
fn token_scale(tok: u32) -> f32 {
#ifdef NORM
    let b = 4u * tok;
    let s = token_ss[b] + token_ss[b + 1u] + token_ss[b + 2u] + token_ss[b + 3u];
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
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let chunks = p.k / KC;
    // Each thread stages 8 elements of two W rows (slots sr and sr + 64: with GLU a row's
    // gate and up) and of two tokens (sr and sr + 64) per chunk.
    let sr = li / 4u;
    let q = li % 4u;
    let w_lo = locate(g * TILE_N + sr, TILE_N);
    let w_hi = locate(g * TILE_N + sr + HALF_N, TILE_N);
    let lo_live = live(w_lo);
    let hi_live = live(w_hi);
    let t_lo = t0 + sr;
    let t_hi = t0 + sr + HALF_N;
    let r0 = CB * (sg % (HALF_N / CB));
    let n0 = 4u * CB * (sg / (HALF_N / CB));
    let scratch = sg * CB * CB;
    // The scales of the two tokens this thread stages.
    let scale_lo = tscale(t_lo);
    let scale_hi = tscale(t_hi);
    if (q == 0u) {
        token_unscale[sr] = 1.0 / scale_lo;
        token_unscale[sr + HALF_N] = 1.0 / scale_hi;
    }
    for (var i = 0u; i < 8u; i++) {
        ct[scratch + SGS * i + lane] = 0.0;
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
    var ss_lo = 0.0;
    var ss_hi = 0.0;
    let zero8 = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
    // Chunk c + 1 is loaded while chunk c is multiplied, as in TILED.
    var w_lo_next = zero8;
    var w_hi_next = zero8;
    if (lo_live) {
        w_lo_next = dequant_w8h(w_lo, q);
    }
    if (hi_live) {
        w_hi_next = dequant_w8h(w_hi, q);
    }
    var x_lo_next = stage_x(t_lo, 0u, q, &ss_lo);
    var x_hi_next = stage_x(t_hi, 0u, q, &ss_hi);
    for (var c = 0u; c < chunks; c++) {
        stage_w16(sr * KS + 8u * q, w_lo_next);
        stage_w16((sr + HALF_N) * KS + 8u * q, w_hi_next);
        stage_x16(sr * KS + 8u * q, scaled8(x_lo_next, scale_lo));
        stage_x16((sr + HALF_N) * KS + 8u * q, scaled8(x_hi_next, scale_hi));
        workgroupBarrier();
        if (c + 1u < chunks) {
            let o = 4u * (c + 1u) + q;
            if (lo_live) {
                w_lo_next = dequant_w8h(w_lo, o);
            }
            if (hi_live) {
                w_hi_next = dequant_w8h(w_hi, o);
            }
            x_lo_next = stage_x(t_lo, c + 1u, q, &ss_lo);
            x_hi_next = stage_x(t_hi, c + 1u, q, &ss_hi);
        }
        for (var kk = 0u; kk < KC; kk += CB) {
            let a0 = coopLoadT<CoopA>(&wt16[(r0 * KS + kk) / SV], KS / SV);
            let a1 = coopLoadT<CoopA>(&wt16[((r0 + HALF_N) * KS + kk) / SV], KS / SV);
            let b0 = coopLoad<CoopB>(&xt16[(n0 * KS + kk) / SV], KS / SV);
            let b1 = coopLoad<CoopB>(&xt16[((n0 + CB) * KS + kk) / SV], KS / SV);
            let b2 = coopLoad<CoopB>(&xt16[((n0 + 2u * CB) * KS + kk) / SV], KS / SV);
            let b3 = coopLoad<CoopB>(&xt16[((n0 + 3u * CB) * KS + kk) / SV], KS / SV);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        workgroupBarrier();
    }
#ifdef NORM
    token_ss[li] = ss_lo;
    token_ss[256u + li] = ss_hi;
#endif
    // Four rounds, one per token block: the subgroup parks block h = 0 then 1 (slots r0 + 64h
    // ..), and lane l takes slot r0 + l % CB (and its partner 64 on) of tokens
    // l / CB + (SGS / CB) i (coop_staging.wgsl unpark).
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
        let slot = r0 + lane % CB;
        let lo = locate(g * TILE_N + slot, TILE_N);
        let hi = locate(g * TILE_N + slot + HALF_N, TILE_N);
        for (var i = 0u; i < 8u; i++) {
            let tok = n0 + CB * j + lane / CB + (SGS / CB) * i;
            let t = t0 + tok;
            if (t < p.t) {
                let scale = token_scale(tok) * token_unscale[tok];
#ifdef GLU
                if (live(lo)) {
                    store_glu(t, lo.y, v_lo[i] * scale, v_hi[i] * scale);
                }
#else
                if (live(lo)) {
                    store(lo.x, t, lo.y, v_lo[i] * scale);
                }
                if (live(hi)) {
                    store(hi.x, t, hi.y, v_hi[i] * scale);
                }
#endif
            }
        }
    }
}
