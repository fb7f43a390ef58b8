// Matrix–matrix (prefill) with a larger register tile per thread: the portable GEMM that
// replaces TILED's 4 × 4 where the grid stays full. Included by matmul.wgsl for GEMM_WIDE
// (with TILES: dequant_w8, stage_x), which provides the bindings, slots and stores.
//
// Why: TILED's thread reads 8 vec4s of workgroup memory per 64 FMAs, and on the H200 those
// reads, not the FMAs, bound it at ~20 TFLOP/s (BENCHMARKS.md "session 9"). A thread here
// owns GT_N slots × GT_T tokens (the host prepends GT_N, GT_T, G_KC, TILE_N = 16·GT_N and
// TILE_T = 16·GT_T): 4 × 8 reads 12 vec4s per 128 FMAs, and each weight is dequantized once
// per TILE_T = 128 tokens instead of 64 (26.5 TFLOP/s against TILED's 21.2 on a 4096² Q4_0
// product; BENCHMARKS.md "session 16"). 8 × 8 measured 6–8 TFLOP/s (its 64 accumulators and
// 8 transposed slot vectors did not stay in registers) and is not offered. Both staged tiles
// stay within WebGPU's guaranteed 16 KiB (K chunks of G_KC = 16 elements for the 192-wide
// pairs, 32 for 64 × 64), so the browser runs it too. Per chunk each thread stages at most
// one 8-element group of a W row and one of x' (TILE · G_KC / 8 ≤ 256). Chunks of 32 for the
// 192-wide pairs (two groups per thread of the longer tile, 24 KiB) made no difference on the
// H200 (BENCHMARKS.md "session 33") and were removed.
//
// Thread (tx, ty) of the 16 × 16 grid owns slots tx + 16i (i < GT_N) and tokens ty + 16j
// (j < GT_T). With GLU the first GT_N/2 of its slots are gate rows (< TILE_N / 2, see
// locate) and the others the up slots of the same rows, so it combines them itself.
//
// The indexing below (one accumulator array indexed by token · SN + slot group, slot
// vectors in an array, the epilogue reading acc[…][i % 4] in place) is what measured fast;
// a rewrite with named slot vectors and a store helper taking the accumulators by value ran
// 3.5× slower on the H200 (BENCHMARKS.md "session 16"), so change it only with a bench run.

const KV: u32 = G_KC / 4u;      // vec4s of a staged chunk per row
const GROUPS: u32 = G_KC / 8u;  // 8-element groups of a staged chunk per row
const SN: u32 = GT_N / 4u;      // vec4s of slots per thread
const ACCS: u32 = SN * GT_T;    // vec4 accumulators per thread

// K-major, as TILED: vec4 j of row n at [j · TILE_N + n], so the 16 threads reading a row
// of the tile take consecutive vec4s. xt has ≥ 256 vec4s: after the K loop it also holds
// each staging thread's Σ x².
var<workgroup> wt: array<vec4<f32>, KV * TILE_N>;
var<workgroup> xt: array<vec4<f32>, KV * TILE_T>;

// rsqrt(mean(x²) + eps) of tile token `tok` from its GROUPS staging threads' Σ x² (left in
// xt[·].x after the K loop), or 1 without NORM.
fn token_scale(tok: u32) -> f32 {
#ifdef NORM
    var s = 0.0;
    for (var q = 0u; q < GROUPS; q++) {
        s += xt[tok * GROUPS + q].x;
    }
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
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let tx = li % 16u;
    let ty = li / 16u;
    let chunks = p.k / G_KC;
    // The W row and the token this thread stages, and which group of each chunk.
    let sr = li / GROUPS;
    let q = li % GROUPS;
    let stages_w = sr < TILE_N;
    let stages_x = sr < TILE_T;
    let staged = locate(g * TILE_N + sr, TILE_N);
    let staged_live = stages_w && live(staged);
    let t_stage = t0 + sr;
    var ss = 0.0;
    var acc: array<vec4<f32>, ACCS>; // [j · SN + s]: token ty + 16j, lane e: slot tx + 16(4s + e)
    for (var c = 0u; c < chunks; c++) {
        let o = c * GROUPS + q; // this thread's 8-element group of the row
        if (stages_w) {
            var wv = array<vec4<f32>, 2>(vec4<f32>(0.0), vec4<f32>(0.0));
            if (staged_live) {
                wv = dequant_w8(staged, o);
            }
            wt[(2u * q) * TILE_N + sr] = wv[0];
            wt[(2u * q + 1u) * TILE_N + sr] = wv[1];
        }
        if (stages_x) {
            let xv = stage_x(t_stage, o / 4u, o % 4u, &ss);
            xt[(2u * q) * TILE_T + sr] = xv[0];
            xt[(2u * q + 1u) * TILE_T + sr] = xv[1];
        }
        workgroupBarrier();
#ifndef ABLATE_MMA
        for (var kv = 0u; kv < KV; kv++) {
            // The thread's slots, transposed in groups of 4: at[4s + e] holds element e of
            // slots 4s .. 4s + 3, so each token's vec4 of x' feeds 16 FMAs per group.
            var at: array<vec4<f32>, GT_N>;
            for (var s = 0u; s < SN; s++) {
                let a0 = wt[kv * TILE_N + tx + 16u * (4u * s)];
                let a1 = wt[kv * TILE_N + tx + 16u * (4u * s + 1u)];
                let a2 = wt[kv * TILE_N + tx + 16u * (4u * s + 2u)];
                let a3 = wt[kv * TILE_N + tx + 16u * (4u * s + 3u)];
                at[4u * s] = vec4<f32>(a0.x, a1.x, a2.x, a3.x);
                at[4u * s + 1u] = vec4<f32>(a0.y, a1.y, a2.y, a3.y);
                at[4u * s + 2u] = vec4<f32>(a0.z, a1.z, a2.z, a3.z);
                at[4u * s + 3u] = vec4<f32>(a0.w, a1.w, a2.w, a3.w);
            }
            for (var j = 0u; j < GT_T; j++) {
                let b = xt[kv * TILE_T + ty + 16u * j];
                for (var s = 0u; s < SN; s++) {
                    let i = j * SN + s;
                    acc[i] = fma(at[4u * s + 3u], vec4<f32>(b.w),
                        fma(at[4u * s + 2u], vec4<f32>(b.z),
                        fma(at[4u * s + 1u], vec4<f32>(b.y),
                        fma(at[4u * s], vec4<f32>(b.x), acc[i]))));
                }
            }
        }
#endif
        workgroupBarrier();
    }
#ifdef NORM
    xt[li] = vec4<f32>(ss, 0.0, 0.0, 0.0); // thread li staged token li / GROUPS
    workgroupBarrier();
#endif
    for (var j = 0u; j < GT_T; j++) {
        let tok = ty + 16u * j;
        let t = t0 + tok;
        if (t >= p.t) {
            continue;
        }
        let scale = token_scale(tok);
#ifdef GLU
        for (var i = 0u; i < GT_N / 2u; i++) {
            let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
            let up = i + GT_N / 2u;
            if (live(mr)) {
                let gate_v = acc[j * SN + i / 4u][i % 4u] * scale;
                let up_v = acc[j * SN + up / 4u][up % 4u] * scale;
                store_glu(t, mr.y, gate_v, up_v);
            }
        }
#else
        for (var i = 0u; i < GT_N; i++) {
            let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
            if (live(mr)) {
                store(mr.x, t, mr.y, acc[j * SN + i / 4u][i % 4u] * scale);
            }
        }
#endif
    }
}
