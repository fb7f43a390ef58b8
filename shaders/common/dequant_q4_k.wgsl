// Q4_K: block_q4_K { d, dmin: f16, scales: [u8; 12], qs: [u8; 128] } = 144 bytes per 256
// elements, 8 sub-blocks (chunks) of 32; w = d·sc·q − dmin·m with q in 0..15. Sub-blocks 2g
// and 2g+1 share qs[32g..32g+32]: low nibbles, then high nibbles. 144 is a multiple of 4, so
// every field is word-aligned. Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let sb = chunk & 7u;
    let i = (row_byte + (chunk >> 3u) * 144u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let sm = scale_min_k4(sb, w[i + 1u], w[i + 2u], w[i + 3u]);
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let qs = i + 4u + 8u * (sb >> 1u);
    let shift = 4u * (sb & 1u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = dl * nibbles(w[qs + j], shift) - ml;
    }
    return v;
}

// Elements 4q..4q+3 of the row: word q % 8 of sub-block (q / 8) % 8 of super-block q / 64.
// The 64 lanes reading one super-block load the same d/scales words (one broadcast).
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let sb = (q >> 3u) & 7u;
    let i = (row_byte + (q >> 6u) * 144u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let sm = scale_min_k4(sb, w[i + 1u], w[i + 2u], w[i + 3u]);
    let word = w[i + 4u + 8u * (sb >> 1u) + (q & 7u)];
    return (dm.x * sm.x) * nibbles(word, 4u * (sb & 1u)) - dm.y * sm.y;
}
