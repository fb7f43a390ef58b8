// IQ4_NL: block_iq4_nl { d: f16, qs: [u8; 16] } = 18 bytes per 32 elements; w = d·grid[q],
// nibbles as Q4_0's. Re-laid out (src/gpu/layout.rs) as Q4_0: index plane (16-byte units,
// element order), then the scales plane (one f16 per block). Included by common/dequant.wgsl.

#include "common/dequant_iq4_grid.wgsl"

struct Raw32 {
    q: vec4<u32>,
    d: f32,
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), plane_f16(4u * r.blocks, b));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return iq4_word(c.q[j], c.d);
}

// Elements 8o..8o+7 of the row: word o % 4 of block o / 4's indices.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    return iq4_word(wl(4u * b + (o & 3u)), plane_f16(4u * r.blocks, b));
}
