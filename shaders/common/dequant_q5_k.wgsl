// Q5_K: block_q5_K { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] } = 176
// bytes per 256 elements. Like Q4_K with q in 0..31: bit 4 of sub-block sb's element l is
// bit sb of qh[l]. 176 is a multiple of 4: word-aligned. Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let sb = chunk & 7u;
    let i = (row_byte + (chunk >> 3u) * 176u) >> 2u;
    let dm = unpack2x16float(wl(i));
    let sm = scale_min_k4(sb, wl(i + 1u), wl(i + 2u), wl(i + 3u));
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let qh = i + 4u;
    let qs = i + 12u + 8u * (sb >> 1u);
    let shift = 4u * (sb & 1u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let q = nibbles(wl(qs + j), shift) + 16.0 * vec4<f32>(byte_bits(wl(qh + j), sb));
        v[j] = dl * q - ml;
    }
    return v;
}

// Elements 8o..8o+7 of the row: words 2(o % 4), +1 of sub-block (o / 4) % 8 of super-block
// o / 32, with the matching qh words.
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let sb = (o >> 2u) & 7u;
    let i = (row_byte + (o >> 5u) * 176u) >> 2u;
    let dm = unpack2x16float(wl(i));
    let sm = scale_min_k4(sb, wl(i + 1u), wl(i + 2u), wl(i + 3u));
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let jw = 2u * (o & 3u);
    let qs = i + 12u + 8u * (sb >> 1u) + jw;
    let qh = i + 4u + jw;
    let shift = 4u * (sb & 1u);
    let v0 = nibbles(wl(qs), shift) + 16.0 * vec4<f32>(byte_bits(wl(qh), sb));
    let v1 = nibbles(wl(qs + 1u), shift) + 16.0 * vec4<f32>(byte_bits(wl(qh + 1u), sb));
    return array<vec4<f32>, 2>(dl * v0 - ml, dl * v1 - ml);
}
