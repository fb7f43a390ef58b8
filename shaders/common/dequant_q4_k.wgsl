// Q4_K: block_q4_K { d, dmin: f16, scales: [u8; 12], qs: [u8; 128] } = 144 bytes per 256
// elements, 8 sub-blocks (chunks) of 32; w = d·sc·q − dmin·m with q in 0..15. Sub-blocks 2g
// and 2g+1 share qs[32g..32g+32]: low nibbles, then high nibbles. 144 is a multiple of 4, so
// every field is word-aligned. Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let sb = chunk & 7u;
    let i = (row_byte + (chunk >> 3u) * 144u) >> 2u;
    let dm = unpack2x16float(wl(i));
    let sm = scale_min_k4(sb, wl(i + 1u), wl(i + 2u), wl(i + 3u));
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let qs = i + 4u + 8u * (sb >> 1u);
    let shift = 4u * (sb & 1u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = dl * nibbles(wl(qs + j), shift) - ml;
    }
    return v;
}

// Elements 8o..8o+7 of the row: words 2(o % 4), +1 of sub-block (o / 4) % 8 of super-block
// o / 32. The 32 invocations reading one super-block load the same d/scales words.
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let sb = (o >> 2u) & 7u;
    let i = (row_byte + (o >> 5u) * 144u) >> 2u;
    let dm = unpack2x16float(wl(i));
    let sm = scale_min_k4(sb, wl(i + 1u), wl(i + 2u), wl(i + 3u));
    let dl = dm.x * sm.x;
    let ml = dm.y * sm.y;
    let qs = i + 4u + 8u * (sb >> 1u) + 2u * (o & 3u);
    let shift = 4u * (sb & 1u);
    return array<vec4<f32>, 2>(dl * nibbles(wl(qs), shift) - ml, dl * nibbles(wl(qs + 1u), shift) - ml);
}
