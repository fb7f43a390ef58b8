// Q4_1: block_q4_1 { d, m: f16, qs: [u8; 16] } = 20 bytes per 32 elements; w = d·q + m.
// Re-laid out (src/gpu/layout.rs): quants plane (one 16-byte unit per block, element order
// as Q4_0's), then one word per block holding (d, m). Included by common/dequant.wgsl.

struct Raw32 {
    q: vec4<u32>,
    dm: vec2<f32>, // (d, m)
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), unpack2x16float(wl(4u * r.blocks + b)));
}

// d·q + m as one fma per element.
fn q4_1_word(q: u32, dm: vec2<f32>) -> array<vec4<f32>, 2> {
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return array<vec4<f32>, 2>(fma(nibbles(q, 0u), d, m), fma(nibbles(q, 4u), d, m));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q4_1_word(c.q[j], c.dm);
}

// Elements 8o..8o+7 of the row: word o % 4 of block o / 4's quants.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    return q4_1_word(wl(4u * b + (o & 3u)), unpack2x16float(wl(4u * r.blocks + b)));
}

#ifdef INT8
// Σ (d·q + m)·x' = d·Σq·x' + m·Σx'.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let n = nibble_bytes(c.q);
    return c.dm.x * idot_levels_split(n[0], n[1], x) + c.dm.y * x.d.z;
}
#endif
