// Matrix–matrix (prefill), shared by the tile kernels (TILES plus TILED, GEMM_WIDE or TILED_COOP;
// included by matmul.wgsl): a workgroup computes TILE_N (64) slots × TILE_T (64) tokens. Per
// 32-wide K chunk every thread stages 8 dequantized elements of one W row (row li / 4,
// elements 8(li % 4) …; dequant8) and 8 elements of x' for one token, so all 256 threads share
// the decoding, and each weight is dequantized once per 64 tokens. In the epilogue thread (tx, ty) stores slots tx + 16i and
// tokens ty + 16j (i, j < 4). With GLU, i = 0, 1 are gate slots (< TILE_N / 2) and i = 2, 3
// the up slots of the same rows, so the thread combines them itself.

// Elements 8o .. 8o + 7 of row mr.y of weight mr.x (wsel as in dot_w).
fn dequant_w8(mr: vec2<u32>, o: u32) -> array<vec4<f32>, 2> {
#ifdef ABLATE_W
    // The diagnostic COCO_ABLATE=w (select.rs ablations): no loads, no decoding.
    return array<vec4<f32>, 2>(vec4<f32>(0.25), vec4<f32>(0.5));
#endif
    let wr = row_of(mr.x, mr.y);
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return as_f16_operands(dequant8(wr, o));
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return as_f16_operands(dequant8(wr, o));
    }
    wsel = 0u;
#endif
    return as_f16_operands(dequant8(wr, o));
}

#ifdef LEVELS8
// Elements 8o .. 8o + 7 of row mr.y of weight mr.x as levels (wsel as in dot_w): the int8
// tiles' view, and with HALF_W the tensor-core tiles' (coop_staging.wgsl dequant_w8h).
fn levels_w8(mr: vec2<u32>, o: u32) -> Levels8 {
#ifdef ABLATE_W
    // The diagnostic COCO_ABLATE=w (select.rs ablations): no loads, no decoding.
    return Levels8(vec2<u32>(0x01fe03fdu, 0x02fd01ffu), vec2<f32>(0.25, 0.0));
#endif
    let wr = row_of(mr.x, mr.y);
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return levels8(wr, o);
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return levels8(wr, o);
    }
    wsel = 0u;
#endif
    return levels8(wr, o);
}
#endif

#ifdef RAW_W
// levels_w8's words as loaded (common/dequant.wgsl raw8; wsel as in dot_w): the tensor-core
// tiles decode them after the chunk's products (hold_w below).
fn raw_w8(mr: vec2<u32>, o: u32) -> vec4<u32> {
#ifdef ABLATE_W
    // The diagnostic COCO_ABLATE=w: no loads (constant words; the outputs are wrong anyway).
    return vec4<u32>(0x01fe03fdu, 0x02fd01ffu, 0x3c003c00u, 0u);
#endif
    let wr = row_of(mr.x, mr.y);
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return raw8(wr, o);
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return raw8(wr, o);
    }
    wsel = 0u;
#endif
    return raw8(wr, o);
}
#endif

#ifdef F16_STAGING
// What the tiles that stage W as f16 share (F16_STAGING: the tensor-core tiles,
// coop_staging.wgsl, and the f16 wide tiles, gemm_wide_f16.wgsl).
// Elements 8o .. 8o + 7 of row mr.y of weight mr.x as the f16 tiles stage them:
// dequant_w8's f32 values rounded, with HALF_W decoded without integer conversions
// (common/dequant.wgsl half8 of tiles.wgsl levels_w8: the same bits; the A/B baseline is
// COCO_COOP_HALF_W=0).
fn dequant_w8h(mr: vec2<u32>, o: u32) -> array<vec4<f16>, 2> {
#ifdef HALF_W
    return half8(levels_w8(mr, o));
#else
    let v = dequant_w8(mr, o);
    return array<vec4<f16>, 2>(vec4<f16>(v[0]), vec4<f16>(v[1]));
#endif
}

// What a thread holds of a weight row's next 8 elements while the chunk before is multiplied:
// with RAW_W (Q4_0 Q5_0 Q8_0: the 128-token tensor-core tiles unless COCO_COOP_RAW_W=0, and
// the f16 wide tiles) the words as loaded, decoded only when staged, so nothing waits on the
// loads before the products; otherwise the values decoded as loaded.
#ifdef RAW_W
alias HeldW = vec4<u32>;

fn hold_w(mr: vec2<u32>, o: u32) -> HeldW {
    return raw_w8(mr, o);
}

fn decode_w(h: HeldW) -> array<vec4<f16>, 2> {
    return half8(levels_raw(h));
}
#else
alias HeldW = array<vec4<f16>, 2>;

fn hold_w(mr: vec2<u32>, o: u32) -> HeldW {
    return dequant_w8h(mr, o);
}

fn decode_w(h: HeldW) -> array<vec4<f16>, 2> {
    return h;
}
#endif
#endif

// With F16_OPERANDS (select.rs f16_operands: the tensor-core GEMM's numerics on the portable
// tiles) each staged element rounded to the nearest f16 value, ties to even; otherwise as is.
fn as_f16_operands(v: array<vec4<f32>, 2>) -> array<vec4<f32>, 2> {
#ifdef F16_OPERANDS
    return array<vec4<f32>, 2>(round_f16(v[0]), round_f16(v[1]));
#else
    return v;
#endif
}

#ifdef F16_OPERANDS
// f16 has 10 stored significand bits down to 2^-14 and steps of 2^-24 below: add half a step
// (less one ulp of f32 where the kept bit is even, so ties go to even) and cut the low 13
// bits, or round to whole steps of 2^-24. f32's range stays (see f16_operands).
fn round_f16(v: vec4<f32>) -> vec4<f32> {
    let u = bitcast<vec4<u32>>(v);
    let normal = bitcast<vec4<f32>>((u + 0x0fffu + ((u >> vec4<u32>(13u)) & vec4<u32>(1u))) & vec4<u32>(0xffffe000u));
    let sub = round(v * 16777216.0) / 16777216.0;
    return select(normal, sub, abs(v) < vec4<f32>(6.103515625e-05));
}
#endif

#ifndef X16
// Elements 8q .. 8q + 7 of 32-wide chunk c of x'[t] (zeros past the step's tokens); with NORM
// their squares are added to ss before the norm weight scales them.
fn stage_x(t: u32, c: u32, q: u32, ss: ptr<function, f32>) -> array<vec4<f32>, 2> {
#ifdef ABLATE_X
    // The diagnostic COCO_ABLATE=x (select.rs ablations): no loads.
    return array<vec4<f32>, 2>(vec4<f32>(0.125), vec4<f32>(0.375));
#endif
    var xa = vec4<f32>(0.0);
    var xb = vec4<f32>(0.0);
    if (t < p.t) {
        let xi = t * (p.k / 4u) + 8u * c + 2u * q;
        xa = x[xi];
        xb = x[xi + 1u];
#ifdef NORM
        *ss += dot(xa, xa) + dot(xb, xb);
        xa *= norm_w[8u * c + 2u * q];
        xb *= norm_w[8u * c + 2u * q + 1u];
#endif
    }
    return as_f16_operands(array<vec4<f32>, 2>(xa, xb));
}
#endif

// acc + the 4 dot products of slots a0..a3 with b, where at[e] holds element e of every slot
// (the slots' vec4s transposed): 16 FMAs, where vec4 dot() products cost a multiply, 3 FMAs
// and an add per slot.
fn mac4x(at: array<vec4<f32>, 4>, b: vec4<f32>, acc: vec4<f32>) -> vec4<f32> {
    return fma(at[3], vec4<f32>(b.w), fma(at[2], vec4<f32>(b.z), fma(at[1], vec4<f32>(b.y), fma(at[0], vec4<f32>(b.x), acc))));
}

#ifndef GEMM_COOP
#ifndef COOP_STREAM
// Stores the 4 slots of token `t` (tile token tok) that thread tx owns.
// (The 128-token tiles store per lane instead, the short-step tiles per (token, slot).)
fn store_tile(g: u32, tx: u32, t: u32, tok: u32, acc: vec4<f32>) {
    if (t >= p.t) {
        return;
    }
    let v = acc * token_scale(tok);
#ifdef GLU
    for (var i = 0u; i < 2u; i++) {
        let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
        if (live(mr)) {
            store_glu(t, mr.y, v[i], v[i + 2u]);
        }
    }
#else
    for (var i = 0u; i < 4u; i++) {
        let mr = locate(g * TILE_N + tx + 16u * i, TILE_N);
        if (live(mr)) {
            store(mr.x, t, mr.y, v[i]);
        }
    }
#endif
}
#endif
#endif

#ifdef SPLIT_K
#include "matmul/tile_split.wgsl"

// The row group of workgroup g, and the chunks of K it multiplies.
fn row_group(g: u32) -> u32 {
    return g / p.splits;
}

fn k_range(g: u32) -> vec2<u32> {
    return tile_chunks(g % p.splits);
}

// The arrival counter and records of row group rg's token tile z.
fn split_tile(z: u32, rg: u32) -> u32 {
    return z * (p.groups / p.splits) + rg;
}
#else
fn row_group(g: u32) -> u32 {
    return g;
}

fn k_range(g: u32) -> vec2<u32> {
    return vec2<u32>(0u, p.k / 32u);
}
#endif

