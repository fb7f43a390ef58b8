// Dequantization of raw GGUF blocks in registers, shared by matmul.wgsl and get_rows.wgsl.
//
// Contract with the including shader:
//   - it declares `var<storage, read> w: array<u32>;` holding one tensor part's raw blocks
//     (the file's bytes, uploaded unchanged; rows start at row * row_bytes);
//   - it defines exactly one weight type: F32 F16 BF16 Q8_0 Q4_0 Q5_0 Q4_K Q5_K Q6_K;
//   - with MULTI_W it binds several weights of that type and defines `fn wl(i: u32) -> u32`
//     itself (word i of the weight it is reading now; see matmul.wgsl). Every weight word
//     below is read through wl() for that reason: WGSL cannot pass a storage buffer to a
//     function (naga lacks unrestricted_pointer_parameters), so this is how one dequantizer
//     serves several bindings.
// This file then provides, for that type, two views of the row starting at byte `row_byte`:
//   fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8>
//     elements 32·chunk .. 32·chunk+31 in order (vec4 j holds elements 4j..4j+3): one
//     invocation decodes a whole chunk (tiled matmul, get_rows), scales decoded once.
//   fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2>
//     elements 8o .. 8o+7: the matvec's view, so that consecutive invocations read
//     consecutive words. (With a chunk per invocation, each load instruction of a warp touched
//     32 cache lines and every type was capped near 0.5 ms for a 32768×8192 matvec on the
//     H200, whatever its bytes.) Scales are re-decoded per 8 elements; their loads hit the
//     same addresses across neighbouring invocations.
// Every type's blocks hold whole 32-element chunks (K-quant super-blocks are 8 chunks), so K
// must be a multiple of 32.
//
// Byte addressing (DESIGN.md "Read compressed"): blocks are loaded IN PLACE, not re-packed at
// upload. Q8_0 (34 B), Q4_0 (18 B), Q5_0 (22 B) and Q6_K (210 B) blocks start 2 bytes past
// a word boundary for every other block, so their fields are read as u32 words at byte offsets
// with shifts: `load_u32` / `load_words*` fetch the aligned words covering the bytes and funnel
// neighbours together. All ggml block sizes are even, so every offset here is 0 or 2 mod 4.
// F32/F16/BF16 rows (K·4 or K·2 bytes, K % 32 == 0) and Q4_K/Q5_K blocks (144, 176 B) are
// always word-aligned and use plain word loads. A load may touch the word after the last
// block of a buffer; WGSL's robust buffer access makes that harmless and its bytes unused.
//
// f16 values are decoded with unpack2x16float (core WGSL: no shader-f16 needed); bf16 by
// shifting its 16 bits into the top of an f32.

#ifndef MULTI_W
// Word i of the weight (the one-weight shaders: matmul without fusion, get_rows).
fn wl(i: u32) -> u32 {
    return w[i];
}
#endif

// The u32 made of the 4 bytes at `byte` (any alignment).
fn load_u32(byte: u32) -> u32 {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    // WGSL takes shift counts mod 32, so s == 0 must not use the funnel (it would OR in the next word).
    return select((wl(i) >> s) | (wl(i + 1u) << (32u - s)), wl(i), s == 0u);
}

// The f16 at an even `byte`, as f32.
fn load_f16(byte: u32) -> f32 {
    let h = unpack2x16float(wl(byte >> 2u));
    return select(h.x, h.y, (byte & 2u) != 0u);
}

// 2 consecutive u32 at `byte`, each aligned word loaded once.
fn load_words2(byte: u32) -> vec2<u32> {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    let a = wl(i);
    let b = wl(i + 1u);
    let c = wl(i + 2u);
    return select(vec2<u32>((a >> s) | (b << (32u - s)), (b >> s) | (c << (32u - s))), vec2<u32>(a, b), s == 0u);
}

// 4 consecutive u32 at `byte`, each aligned word loaded once.
fn load_words4(byte: u32) -> array<u32, 4> {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    var out: array<u32, 4>;
    var lo = wl(i);
    for (var j = 0u; j < 4u; j++) {
        let hi = wl(i + j + 1u);
        out[j] = select((lo >> s) | (hi << (32u - s)), lo, s == 0u);
        lo = hi;
    }
    return out;
}

// 8 consecutive u32 at `byte`, each aligned word loaded once.
fn load_words8(byte: u32) -> array<u32, 8> {
    let i = byte >> 2u;
    let s = (byte & 3u) * 8u;
    var out: array<u32, 8>;
    var lo = wl(i);
    for (var j = 0u; j < 8u; j++) {
        let hi = wl(i + j + 1u);
        out[j] = select((lo >> s) | (hi << (32u - s)), lo, s == 0u);
        lo = hi;
    }
    return out;
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

// The four bytes of `u` as signed int8 values.
fn i8x4(u: u32) -> vec4<f32> {
    return vec4<f32>(unpack4xI8(u));
}

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
#ifdef Q4_K
#include "common/dequant_q4_k.wgsl"
#endif
#ifdef Q5_K
#include "common/dequant_q5_k.wgsl"
#endif
#ifdef Q6_K
#include "common/dequant_q6_k.wgsl"
#endif
