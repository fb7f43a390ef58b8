// Q5_K: block_q5_K { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] } = 176
// bytes per 256 elements. Like Q4_K with q in 0..31: bit 4 of sub-block sb's element l is
// bit sb of qh[l]. 176 is a multiple of 4: word-aligned. Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let sb = chunk & 7u;
    let i = (row_byte + (chunk >> 3u) * 176u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let sm = scale_min_k4(sb, w[i + 1u], w[i + 2u], w[i + 3u]);
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let qh = i + 4u;
    let qs = i + 12u + 8u * (sb >> 1u);
    let shift = 4u * (sb & 1u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let q = nibbles(w[qs + j], shift) + 16.0 * vec4<f32>(byte_bits(w[qh + j], sb));
        v[j] = dl * q - ml;
    }
    return v;
}

// Elements 4q..4q+3 of the row: word q % 8 of sub-block (q / 8) % 8 of super-block q / 64.
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let sb = (q >> 3u) & 7u;
    let i = (row_byte + (q >> 6u) * 176u) >> 2u;
    let dm = unpack2x16float(w[i]);
    let sm = scale_min_k4(sb, w[i + 1u], w[i + 2u], w[i + 3u]);
    let jw = q & 7u;
    let v = nibbles(w[i + 12u + 8u * (sb >> 1u) + jw], 4u * (sb & 1u)) + 16.0 * vec4<f32>(byte_bits(w[i + 4u + jw], sb));
    return (dm.x * sm.x) * v - dm.y * sm.y;
}
