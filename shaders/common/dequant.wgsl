// Dequantization of weight rows in registers, shared by matmul.wgsl, get_rows.wgsl and
// ffn_megakernel.wgsl.
//
// Contract with the including shader:
//   - it declares `var<storage, read> w: array<vec4<u32>>;` holding one tensor part in the
//     layout src/gpu/layout.rs gives its type: the file's blocks in place (F32 F16 BF16 Q4_K
//     Q5_K) or the same bytes split into aligned planes (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL
//     Q2_K Q3_K Q6_K IQ4_XS);
//   - it defines exactly one weight type: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K
//     Q3_K Q4_K Q5_K Q6_K IQ4_XS;
//   - with MULTI_W it binds several weights of that type and defines `fn wv(i: u32) ->
//     vec4<u32>` and `fn wl(i: u32) -> u32` itself (16-byte unit i, word i of the weight it is
//     reading now; see matmul.wgsl). Every weight load below goes through them for that
//     reason: WGSL cannot pass a storage buffer to a function (naga lacks
//     unrestricted_pointer_parameters), so this is how one dequantizer serves several bindings.
// A row is named by a WRow (`w_row`): its first 32-element block and the blocks the whole
// buffer holds (planes follow one another, so that count locates them). For that type this
// type file provides these views of a row:
//   fn raw32(r: WRow, chunk: u32) -> Raw32  and  fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2>
//     a 32-element chunk's bits as loaded (16-byte loads of the re-laid types' quants; a few
//     registers), then its elements 8j .. 8j+7 decoded: the chunk matvec loads a chunk of
//     each of its rows first and decodes word by word, so the loads are in flight together
//     and no row's 32 decoded values occupy registers at once;
//   fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8>  (below, from the two above)
//     elements 32·chunk .. 32·chunk+31 in order (vec4 j holds elements 4j..4j+3): one
//     invocation decodes a whole chunk (get_rows);
//   fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2>
//     elements 8o .. 8o+7: the view of kernels whose consecutive invocations read
//     consecutive words (the workgroup matvec, the megakernel, the tiled GEMM's staging).
//   fn levels8(r: WRow, o: u32) -> Levels8  (with LEVELS8 only; see below)
//   fn idot32(c: Raw32, x: XChunk) -> f32  (types with an int8 form; with INT8 only)
//     Σ w·x' over a chunk from x' as int8 (XChunk, below): the chunk matvec's inner loop
//     with 4 multiply-adds per dot4I8Packed instead of a convert and two FMAs per weight;
//     Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K have it (`has_int8_dot` in
//     kernels/matmul/key.rs).
// Every type's blocks hold whole 32-element chunks (K-quant super-blocks are 8 chunks), so K
// must be a multiple of 32.
//
// Every load is aligned: that is what the re-layout is for (DESIGN.md "Read compressed"; in
// place, 2-byte-offset blocks took funnelled word pairs and left the matvecs bound by load
// instructions). f16 values are decoded with unpack2x16float (core WGSL: no shader-f16
// needed); bf16 by shifting its 16 bits into the top of an f32.

struct WRow {
    block: u32,  // the row's first 32-element block, counted from the buffer's start
    blocks: u32, // 32-element blocks in the whole buffer (rows · K / 32)
}

// Row `row` of a buffer holding `rows` rows of `k` elements.
fn w_row(row: u32, k: u32, rows: u32) -> WRow {
    return WRow(row * (k / 32u), rows * (k / 32u));
}

#ifndef MULTI_W
// 16-byte unit i and word i of the weight (the one-weight shaders).
fn wv(i: u32) -> vec4<u32> {
    return w[i];
}

fn wl(i: u32) -> u32 {
    return w[i >> 2u][i & 3u];
}
#endif

// The f16 number `n` of a plane of f16 values starting at word `first`, as f32.
fn plane_f16(first: u32, n: u32) -> f32 {
    let h = unpack2x16float(wl(first + (n >> 1u)));
    return select(h.x, h.y, (n & 1u) != 0u);
}

// The four 4-bit fields at bit `shift` of each byte of `u` (shift 0: low nibbles, 4: high).
// One mask for all four, then unpack4xU8 (a byte extract + convert per element where the
// hardware has one): the matvecs are bound by instructions per weight, not bytes.
fn nibbles(u: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xU8((u >> shift) & 0x0F0F0F0Fu));
}

// Bit `bit` of each byte of `u`, in {0, 1}.
fn byte_bits(u: u32, bit: u32) -> vec4<u32> {
    return (vec4<u32>(u) >> vec4<u32>(bit, bit + 8u, bit + 16u, bit + 24u)) & vec4<u32>(1u);
}

// The four 2-bit fields at bit `shift` of each byte of `u`.
fn two_bits(u: u32, shift: u32) -> vec4<u32> {
    return (vec4<u32>(u) >> vec4<u32>(shift, shift + 8u, shift + 16u, shift + 24u)) & vec4<u32>(3u);
}

// Bits first..first+3 of `u`, each in {0, 1}.
fn bit_run(u: u32, first: u32) -> vec4<u32> {
    return (vec4<u32>(u) >> vec4<u32>(first, first + 1u, first + 2u, first + 3u)) & vec4<u32>(1u);
}

// The four bytes of `u` as signed int8 values.
fn i8x4(u: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(u));
}

#ifdef INT8
// x' of one 32-element chunk as two int8 levels, x' ≈ d.x·a + d.y·b, with d.y = d.x / 254:
// a = round(x' / d.x) (d.x = max|x'| / 127) and b the rounded remainder, so an element is
// off by at most max|x'| / 64,516 (~1.6e-5 of the chunk's largest), where one int8 level
// would be off by 1/254 of it. Word i of a0 a1 holds elements 4i..4i+3 of a (a0: words
// 0..3); b0 b1 likewise. d.z is d.x·Σa + d.y·Σb, the levels' Σx' (offsets, minimums).
struct XChunk {
    a0: vec4<u32>,
    a1: vec4<u32>,
    b0: vec4<u32>,
    b1: vec4<u32>,
    d: vec4<f32>, // (d_a, d_b, Σx', 0)
}

// Σ q·x over a chunk whose 32 weights are bytes in element order (q0: words 0..3, q1: 4..7)
// against the int8 level (x0, x1).
fn idot_bytes(q0: vec4<u32>, q1: vec4<u32>, x0: vec4<u32>, x1: vec4<u32>) -> i32 {
    return (dot4I8Packed(q0.x, x0.x) + dot4I8Packed(q0.y, x0.y))
        + (dot4I8Packed(q0.z, x0.z) + dot4I8Packed(q0.w, x0.w))
        + (dot4I8Packed(q1.x, x1.x) + dot4I8Packed(q1.y, x1.y))
        + (dot4I8Packed(q1.z, x1.z) + dot4I8Packed(q1.w, x1.w));
}

// The same for weights in the 4-bit planes' order: byte i of lo[j] is element 8j + i, of
// hi[j] element 8j + 4 + i.
fn idot_split(lo: vec4<u32>, hi: vec4<u32>, x0: vec4<u32>, x1: vec4<u32>) -> i32 {
    return (dot4I8Packed(lo.x, x0.x) + dot4I8Packed(hi.x, x0.y))
        + (dot4I8Packed(lo.y, x0.z) + dot4I8Packed(hi.y, x0.w))
        + (dot4I8Packed(lo.z, x1.x) + dot4I8Packed(hi.z, x1.y))
        + (dot4I8Packed(lo.w, x1.z) + dot4I8Packed(hi.w, x1.w));
}

// Σ q·x' ≈ d_a·Σq·a + d_b·Σq·b for integer weights q given as bytes in element order.
fn idot_levels_bytes(q0: vec4<u32>, q1: vec4<u32>, x: XChunk) -> f32 {
    return x.d.x * f32(idot_bytes(q0, q1, x.a0, x.a1)) + x.d.y * f32(idot_bytes(q0, q1, x.b0, x.b1));
}

// Σ q·x' ≈ d_a·Σq·a + d_b·Σq·b for integer weights q given as split nibble-order bytes.
fn idot_levels_split(lo: vec4<u32>, hi: vec4<u32>, x: XChunk) -> f32 {
    return x.d.x * f32(idot_split(lo, hi, x.a0, x.a1)) + x.d.y * f32(idot_split(lo, hi, x.b0, x.b1));
}

// The low and high nibbles of a 4-bit quant unit, each byte one element (idot_split's order).
fn nibble_bytes(q: vec4<u32>) -> array<vec4<u32>, 2> {
    let m = vec4<u32>(0x0F0F0F0Fu);
    return array<vec4<u32>, 2>(q & m, (q >> vec4<u32>(4u)) & m);
}

// Q5's fifth bits: for each word j, bits 8j + first .. 8j + first + 3 of qh as bit 4 of
// bytes 0..3 (first 0: the low nibbles' elements, 4: the high ones').
fn high_bytes(qh: u32, first: u32) -> vec4<u32> {
    let b = (vec4<u32>(qh) >> vec4<u32>(first, first + 8u, first + 16u, first + 24u)) & vec4<u32>(15u);
    return ((b | (b << vec4<u32>(7u)) | (b << vec4<u32>(14u)) | (b << vec4<u32>(21u))) & vec4<u32>(0x01010101u)) << vec4<u32>(4u);
}
#endif

#ifdef LEVELS8
// Elements 8o .. 8o + 7 of a row as int8 levels and their chunk's (d, m), w = d·q + m: what
// the browser's subgroup-matrix GEMM (matmul/gemm_matrix_i8.wgsl) multiplies on the matrix
// units before it applies d and m. Each type file with it provides
//   fn levels8(r: WRow, o: u32) -> Levels8
// (Q4_0 Q5_0 Q8_0 Q4_K: `has_levels8` in kernels/matmul/key.rs).
struct Levels8 {
    q: vec2<u32>,   // bytes: elements 8o .. 8o + 3, then 8o + 4 .. 8o + 7
    dm: vec2<f32>,  // (d, m)
}

// Bits first..first+3 of `qh` as bit 4 of bytes 0..3 (Q5's fifth bits).
fn fifth_bits(qh: u32, first: u32) -> u32 {
    let b = (qh >> first) & 15u;
    return ((b | (b << 7u) | (b << 14u) | (b << 21u)) & 0x01010101u) << 4u;
}
#endif

#ifdef HALF_W
// The tensor-core tiles' weights, exactly as dequant8 gives them, without an integer → float
// conversion (with LEVELS8), for the types whose w = d·(q − c) has d an f16 of the file and c
// a small integer: Q4_0 Q5_0 Q8_0 (`has_half8` in kernels/matmul/key.rs). Each type file
// provides
//   fn half8(l: Levels8) -> array<vec4<f16>, 2>
// the levels8 view's elements rounded to f16 as the f32 path stages them, bit for bit: q − c, and
// its product with d (≤ 19 significant bits), are exact in f32 either way, and the one
// rounding is the same conversion to f16. Why: dequant8 converts every level with an
// integer → f32 instruction, which NVIDIA's SMs issue at a fraction of the FMA rate (CUDA's
// throughput table: 16 a clock against 128); here a level is an OR and a subtraction. On the
// H100 that gave 1–2% on the Llama shapes' prefill (BENCHMARKS.md "session 43"): the
// conversions were not what the weights' staging costs. (Decoding straight to f16 would drop
// the conversion to f16 too, but naga's bitcast can't reinterpret a u32 as vec2<f16>.)

#ifdef RAW_W
// The tensor-core tiles (matmul/coop_staging.wgsl hold_w) load the next chunk's words before
// they multiply and decode them only after, so nothing waits on the loads before the products.
// Each HALF_W type file provides
//   fn raw8(r: WRow, o: u32) -> vec4<u32>       the words levels8 reads, as loaded (no ALU)
//   fn levels_raw(raw: vec4<u32>) -> Levels8    levels8 of them
// The f16 scale `half` (0: low, 1: high) of the scale plane's word `u`.
fn raw_scale(u: u32, half: u32) -> f32 {
    let h = unpack2x16float(u);
    return select(h.x, h.y, half != 0u);
}
#endif

// b − offset for the four bytes b of `u` (unsigned, in byte order): a byte placed in the low
// mantissa bits of 2^23 (0x4B000000) is the f32 2^23 + b, so b − offset is one exact
// subtraction of 2^23 + offset.
fn f32_bytes(u: u32, offset: f32) -> vec4<f32> {
    let b = (vec4<u32>(u) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
    return bitcast<vec4<f32>>(b | vec4<u32>(0x4B000000u)) - vec4<f32>(8388608.0 + offset);
}

// (b − offset)·d of the 8 bytes of `q` (elements 8o .. 8o + 3, then 8o + 4 .. 8o + 7), in f16.
fn half_levels(q: vec2<u32>, offset: f32, d: f32) -> array<vec4<f16>, 2> {
    return array<vec4<f16>, 2>(vec4<f16>(f32_bytes(q.x, offset) * d), vec4<f16>(f32_bytes(q.y, offset) * d));
}
#endif

#ifdef F32
#include "common/dequant_f32.wgsl"
#endif
#ifdef F16
#include "common/dequant_f16.wgsl"
#endif
#ifdef BF16
#include "common/dequant_bf16.wgsl"
#endif
#ifdef Q8_0
#include "common/dequant_q8_0.wgsl"
#endif
#ifdef Q4_0
#include "common/dequant_q4_0.wgsl"
#endif
#ifdef Q5_0
#include "common/dequant_q5_0.wgsl"
#endif
#ifdef Q4_1
#include "common/dequant_q4_1.wgsl"
#endif
#ifdef Q5_1
#include "common/dequant_q5_1.wgsl"
#endif
#ifdef IQ4_NL
#include "common/dequant_iq4_nl.wgsl"
#endif
#ifdef Q2_K
#include "common/dequant_q2_k.wgsl"
#endif
#ifdef Q3_K
#include "common/dequant_q3_k.wgsl"
#endif
#ifdef IQ4_XS
#include "common/dequant_iq4_xs.wgsl"
#endif
#ifdef Q4_K
#include "common/dequant_q4_k.wgsl"
#endif
#ifdef Q5_K
#include "common/dequant_q5_k.wgsl"
#endif
#ifdef Q6_K
#include "common/dequant_q6_k.wgsl"
#endif

// Elements 32·chunk .. 32·chunk+31 of the row, in order.
fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8> {
    let c = raw32(r, chunk);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let e = decode8(c, j);
        v[2u * j] = e[0];
        v[2u * j + 1u] = e[1];
    }
    return v;
}
