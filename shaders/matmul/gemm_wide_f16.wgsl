// The wide GEMM in f16 (GEMM_WIDE with X16: `WideTile::f16`, the portable tiles where the
// device has shader-f16; select.rs wide_f16). Included by matmul.wgsl in place of
// gemm_wide.wgsl, whose register tiles, grid and GLU pairing it keeps.
//
// Why: gemm_wide.wgsl is bound by instructions, 128 FMAs and 12 vec4 reads of workgroup
// memory per 4 of K (27 TFLOP/s of an H100's 67 in f32; BENCHMARKS.md "session 41"). Here W
// and x' are staged as f16, and each product instruction is a vec2<f16> fma: two
// multiply-adds (NVIDIA's HFMA2, issued at the f32 FMA's rate), so per 4 of K a thread reads
// 12 8-byte vec4s and issues 64 fmas for the same 128 multiply-adds, with no transposes. On
// an H100 the Llama-1B shape's gate/up took 20.5 → 14.9 ms of a 512-token step, W_o and
// W_down 15.0 → 10.9 (BENCHMARKS.md "session 45"). W is staged as the tensor-core tiles stage
// it (tiles.wgsl F16_STAGING: Q4_0, Q5_0, Q8_0 decoded without integer conversions).
//
// Numerics: W and x' rounded to f16, as on the tensor cores, and each (slot, token)'s
// products summed in f16 over 32 of K (two lanes of 16: its even and its odd elements) before they
// are added to its f32 sum: at most 16 roundings of 2^-11 of a lane's partial, so the error
// stays within 18 · 2^-11 of Σ|w·x'| (tests/common WIDE_F16_ATOL_PER_ABS_SUM). llama.cpp's
// Vulkan matrix kernels sum in f16 by default too. A lane's partial is at most 16 · max|w| ·
// max|x'|; the scale pass brings each token's largest |x'| into (2^7, 2^8] (HEADROOM in
// token_scale.wgsl), so it stays within f16's 65,504 for weights below 16 in magnitude.
//
// x' arrives as the scale pass's f16 rows (x16; zeros past the step's tokens, up to the
// tile's), and tscales holds what each token's sums are multiplied by (its power of two, and
// with NORM the norm's factor: the pass applied norm_w).

const KV: u32 = G_KC / 4u;     // vec4s of a staged chunk per row
const GROUPS: u32 = G_KC / 8u; // 8-element groups of a staged chunk per row
const SUMS: u32 = GT_N * GT_T; // (slot, token) sums per thread
// 8-element groups each thread stages per chunk: a tile's rows × GROUPS over 256 threads.
const W_STAGES: u32 = (TILE_N * GROUPS + 255u) / 256u;
const X_STAGES: u32 = (TILE_T * GROUPS + 255u) / 256u;

@group(0) @binding(B_SCALES) var<storage, read> tscales: array<f32>; // [p.t]
var<private> tile_t0: u32; // the workgroup's first token

// What tile token `tok`'s sums are multiplied by (tiles.wgsl's store_tile reads it too).
fn token_scale(tok: u32) -> f32 {
    return tscales[tile_t0 + tok];
}

// K-major as gemm_wide.wgsl: vec4 j of row n at [j · rows + n], 4 consecutive elements of K.
var<workgroup> wt: array<vec4<f16>, KV * TILE_N>;
var<workgroup> xt: array<vec4<f16>, KV * TILE_T>;

// Elements 8q .. 8q + 7 of chunk c of token t's staged row.
fn x_half8(t: u32, c: u32, q: u32) -> array<vec4<f16>, 2> {
#ifdef ABLATE_X
    // The diagnostic COCO_ABLATE=x (select.rs ablations): no loads.
    return array<vec4<f16>, 2>(vec4<f16>(0.125h), vec4<f16>(0.375h));
#endif
    let i = (t * p.k + G_KC * c + 8u * q) / 4u;
    return array<vec4<f16>, 2>(x16[i], x16[i + 1u]);
}

// Thread li's 8-element groups of chunk c: its W rows' (held) and its tokens'.
fn load_chunk(
    c: u32,
    li: u32,
    t0: u32,
    w_rows: ptr<function, array<vec2<u32>, W_STAGES>>,
    w_live: ptr<function, array<bool, W_STAGES>>,
    w_next: ptr<function, array<HeldW, W_STAGES>>,
    x_next: ptr<function, array<array<vec4<f16>, 2>, X_STAGES>>,
) {
    for (var s = 0u; s < W_STAGES; s++) {
        if ((*w_live)[s]) {
            (*w_next)[s] = hold_w((*w_rows)[s], c * GROUPS + (li + 256u * s) % GROUPS);
        }
    }
    for (var s = 0u; s < X_STAGES; s++) {
        let e = li + 256u * s;
        if (e < TILE_T * GROUPS) {
            (*x_next)[s] = x_half8(t0 + e / GROUPS, c, e % GROUPS);
        }
    }
}

// The f16 lanes' partial sums added to the f32 sums, and zeroed.
fn flush(part: ptr<function, array<vec2<f16>, SUMS>>, sums: ptr<function, array<f32, SUMS>>) {
    for (var i = 0u; i < SUMS; i++) {
        let h = vec2<f32>((*part)[i]);
        (*sums)[i] += h.x + h.y;
        (*part)[i] = vec2<f16>(0.0h);
    }
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
    tile_t0 = t0;
    let tx = li % 16u;
    let ty = li / 16u;
    let chunks = p.k / G_KC;
    // The W rows this thread stages (entry li + 256s of the tile's rows × groups), located once.
    var w_rows: array<vec2<u32>, W_STAGES>;
    var w_live: array<bool, W_STAGES>;
    for (var s = 0u; s < W_STAGES; s++) {
        let e = li + 256u * s;
        w_rows[s] = locate(g * TILE_N + e / GROUPS, TILE_N);
        w_live[s] = e < TILE_N * GROUPS && live(w_rows[s]);
    }
    // Sums of slot tx + 16i and token ty + 16j at [j · GT_N + i]: f32 over the chunks so far,
    // f16 lanes over the current 32 of K.
    var sums: array<f32, SUMS>;
    var part: array<vec2<f16>, SUMS>;
    for (var i = 0u; i < SUMS; i++) {
        sums[i] = 0.0;
        part[i] = vec2<f16>(0.0h);
    }
    // With PREFETCH chunk c + 1's loads are issued before chunk c's products and staged after
    // them, so their latency can hide behind the products; otherwise each chunk is loaded just
    // before it is staged. One buffer either way: two barriers per chunk.
    var w_next: array<HeldW, W_STAGES>; // zeros: rows past the weight's stage zeros
    var x_next: array<array<vec4<f16>, 2>, X_STAGES>;
#ifdef PREFETCH
    load_chunk(0u, li, t0, &w_rows, &w_live, &w_next, &x_next);
#endif
    for (var c = 0u; c < chunks; c++) {
#ifndef PREFETCH
        load_chunk(c, li, t0, &w_rows, &w_live, &w_next, &x_next);
#endif
        for (var s = 0u; s < W_STAGES; s++) {
            let e = li + 256u * s;
            if (e < TILE_N * GROUPS) {
                let v = decode_w(w_next[s]);
                wt[(2u * (e % GROUPS)) * TILE_N + e / GROUPS] = v[0];
                wt[(2u * (e % GROUPS) + 1u) * TILE_N + e / GROUPS] = v[1];
            }
        }
        for (var s = 0u; s < X_STAGES; s++) {
            let e = li + 256u * s;
            if (e < TILE_T * GROUPS) {
                xt[(2u * (e % GROUPS)) * TILE_T + e / GROUPS] = x_next[s][0];
                xt[(2u * (e % GROUPS) + 1u) * TILE_T + e / GROUPS] = x_next[s][1];
            }
        }
        workgroupBarrier();
#ifdef PREFETCH
        if (c + 1u < chunks) {
            load_chunk(c + 1u, li, t0, &w_rows, &w_live, &w_next, &x_next);
        }
#endif
#ifndef ABLATE_MMA
        for (var kv = 0u; kv < KV; kv++) {
            var a: array<vec4<f16>, GT_N>;
            for (var i = 0u; i < GT_N; i++) {
                a[i] = wt[kv * TILE_N + tx + 16u * i];
            }
            for (var j = 0u; j < GT_T; j++) {
                let b = xt[kv * TILE_T + ty + 16u * j];
                for (var i = 0u; i < GT_N; i++) {
                    let s = j * GT_N + i;
                    part[s] = fma(a[i].zw, b.zw, fma(a[i].xy, b.xy, part[s]));
                }
            }
        }
#endif
        workgroupBarrier();
        // Every 32 of K (K is whole 32-element blocks), the f16 lanes into the f32 sums.
        // (Every 16 halved no error: each fma's rounding, not the partials' length, sets it.)
        if ((c + 1u) * G_KC % 32u == 0u) {
            flush(&part, &sums);
        }
    }
    for (var j = 0u; j < GT_T; j++) {
        let t = t0 + ty + 16u * j;
        if (t >= p.t) {
            continue;
        }
        let scale = token_scale(ty + 16u * j);
#ifdef GLU
        for (var i = 0u; i < GT_N / 2u; i++) {
            let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
            if (live(mr)) {
                let up = i + GT_N / 2u;
                store_glu(t, mr.y, sums[j * GT_N + i] * scale, sums[j * GT_N + up] * scale);
            }
        }
#else
        for (var i = 0u; i < GT_N; i++) {
            let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
            if (live(mr)) {
                store(mr.x, t, mr.y, sums[j * GT_N + i] * scale);
            }
        }
#endif
    }
}
