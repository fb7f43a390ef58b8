// IQ4_XS: block_iq4_xs { d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128] } = 136
// bytes per 256 elements: 8 sub-blocks (chunks) of 32 on the IQ4_NL grid, each with a 6-bit
// scale ls (low 4 bits: nibble c of scales_l, top 2: bits 2c of scales_h); w = d·(ls − 32)·grid[q].
// Re-laid out (src/gpu/layout.rs): an index plane of 8 16-byte units per super-block (unit c:
// chunk c in element order, as IQ4_NL's), then a plane of two words per super-block:
// d | scales_h << 16, and scales_l. Included by common/dequant.wgsl.

#include "common/dequant_iq4_grid.wgsl"

// d·(ls − 32) of chunk c of super-block s.
fn iq4_xs_scale(s: u32, c: u32, blocks: u32) -> f32 {
    let head = 32u * (blocks >> 3u) + 2u * s;
    let w0 = wl(head);
    let ls = ((wl(head + 1u) >> (4u * c)) & 15u) | (((w0 >> (16u + 2u * c)) & 3u) << 4u);
    return unpack2x16float(w0).x * f32(i32(ls) - 32);
}

struct Raw32 {
    q: vec4<u32>,
    d: f32, // d·(ls − 32)
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), iq4_xs_scale(b >> 3u, b & 7u, r.blocks));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return iq4_word(c.q[j], c.d);
}

// Elements 8o..8o+7 of the row: word o % 4 of chunk o / 4's indices.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    return iq4_word(wl(4u * b + (o & 3u)), iq4_xs_scale(b >> 3u, b & 7u, r.blocks));
}
