// Q4_0: block_q4_0 { d: f16, qs: [u8; 16] } = 18 bytes per 32 elements; w = d·(q − 8).
// Re-laid out (src/gpu/layout.rs): quants plane (one 16-byte unit per block, in element
// order: word j's low nibbles are elements 8j..8j+3, its high nibbles 8j+4..8j+7), then the
// scales plane (one f16 per block). Included by common/dequant.wgsl.

struct Raw32 {
    q: vec4<u32>,
    d: f32,
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), plane_f16(4u * r.blocks, b));
}

// d·(q − 8) as one fma per element.
fn q4_0_word(q: u32, d: f32) -> array<vec4<f32>, 2> {
    let dv = vec4<f32>(d);
    let m8 = vec4<f32>(-8.0 * d);
    return array<vec4<f32>, 2>(fma(nibbles(q, 0u), dv, m8), fma(nibbles(q, 4u), dv, m8));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q4_0_word(c.q[j], c.d);
}

// Elements 8o..8o+7 of the row: word o % 4 of block o / 4's quants.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let d = plane_f16(4u * r.blocks, b);
    return q4_0_word(wl(4u * b + (o & 3u)), d);
}

#ifdef INT8
// Σ d·(q − 8)·x' = d·(Σq·x' − 8·Σx').
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let n = nibble_bytes(c.q);
    return c.d * (idot_levels_split(n[0], n[1], x) - 8.0 * x.d.z);
}
#endif

#ifdef LEVELS8
// The nibbles as they are, w = d·q − 8d.
fn levels8(r: WRow, o: u32) -> Levels8 {
    let b = r.block + (o >> 2u);
    let d = plane_f16(4u * r.blocks, b);
    let u = wl(4u * b + (o & 3u));
    return Levels8(vec2<u32>(u & 0x0F0F0F0Fu, (u >> 4u) & 0x0F0F0F0Fu), vec2<f32>(d, -8.0 * d));
}
#endif

#ifdef HALF_W
// The nibbles, w = d·(q − 8).
fn half8(l: Levels8) -> array<vec4<f16>, 2> {
    return half_levels(l.q, 8.0, l.dm.x);
}
#endif

#ifdef RAW_W
// levels8's words as loaded: the quant word, the scale plane's word and which of its halves.
fn raw8(r: WRow, o: u32) -> vec4<u32> {
    let b = r.block + (o >> 2u);
    return vec4<u32>(wl(4u * b + (o & 3u)), wl(4u * r.blocks + (b >> 1u)), b & 1u, 0u);
}

fn levels_raw(raw: vec4<u32>) -> Levels8 {
    let d = raw_scale(raw.y, raw.z);
    return Levels8(vec2<u32>(raw.x & 0x0F0F0F0Fu, (raw.x >> 4u) & 0x0F0F0F0Fu), vec2<f32>(d, -8.0 * d));
}
#endif
