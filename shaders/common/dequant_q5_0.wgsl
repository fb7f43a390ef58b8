// Q5_0: block_q5_0 { d: f16, qh: [u8; 4], qs: [u8; 16] } = 22 bytes per 32 elements.
// Like Q4_0, plus bit 4 of element e is bit e of qh (a little-endian u32); w = d·(q − 16).
// Re-laid out (src/gpu/layout.rs): quants plane (16-byte units, element order as Q4_0's),
// high-bits plane (one word per block), scales plane (one f16 per block).
// Included by common/dequant.wgsl.

// Bits first..first+3 of `qh`, each moved to bit 4.
fn q5_high(qh: u32, first: u32) -> vec4<u32> {
    return ((vec4<u32>(qh) >> vec4<u32>(first, first + 1u, first + 2u, first + 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
}

// Elements 8j..8j+7 of a block from its quant word j and high-bits word.
fn q5_group(q: u32, qh: u32, j: u32, d: f32) -> array<vec4<f32>, 2> {
    let lo = vec4<u32>(nibbles(q, 0u)) | q5_high(qh, 8u * j);
    let hi = vec4<u32>(nibbles(q, 4u)) | q5_high(qh, 8u * j + 4u);
    return array<vec4<f32>, 2>(d * (vec4<f32>(lo) - 16.0), d * (vec4<f32>(hi) - 16.0));
}

struct Raw32 {
    q: vec4<u32>,
    qh: u32,
    d: f32,
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), wl(4u * r.blocks + b), plane_f16(5u * r.blocks, b));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q5_group(c.q[j], c.qh, j, c.d);
}

// Elements 8o..8o+7 of the row: word j = o % 4 of block o / 4's quants, with bits
// 8j..8j+7 of its high bits on top.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let j = o & 3u;
    let d = plane_f16(5u * r.blocks, b);
    return q5_group(wl(4u * b + j), wl(4u * r.blocks + b), j, d);
}

#ifdef INT8
// Σ d·(q − 16)·x', q = nibble | fifth bit · 16 (bytes 0..31).
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let n = nibble_bytes(c.q);
    let lo = n[0] | high_bytes(c.qh, 0u);
    let hi = n[1] | high_bytes(c.qh, 4u);
    return c.d * (idot_levels_split(lo, hi, x) - 16.0 * x.d.z);
}
#endif

#ifdef LEVELS8
// Nibble | fifth bit · 16 as it is, w = d·q − 16d.
fn levels8(r: WRow, o: u32) -> Levels8 {
    let b = r.block + (o >> 2u);
    let j = o & 3u;
    let d = plane_f16(5u * r.blocks, b);
    let u = wl(4u * b + j);
    let qh = wl(4u * r.blocks + b);
    let lo = (u & 0x0F0F0F0Fu) | fifth_bits(qh, 8u * j);
    let hi = ((u >> 4u) & 0x0F0F0F0Fu) | fifth_bits(qh, 8u * j + 4u);
    return Levels8(vec2<u32>(lo, hi), vec2<f32>(d, -16.0 * d));
}
#endif

#ifdef HALF_W
// Nibble | fifth bit · 16, w = d·(q − 16).
fn half8(l: Levels8) -> array<vec4<f16>, 2> {
    return half_levels(l.q, 16.0, l.dm.x);
}
#endif

#ifdef RAW_W
// levels8's words as loaded: the quant word, the fifth bits' word, the scale plane's word, and
// which of its halves (bit 0) and which word of the block (bits 1-2).
fn raw8(r: WRow, o: u32) -> vec4<u32> {
    let b = r.block + (o >> 2u);
    let j = o & 3u;
    return vec4<u32>(wl(4u * b + j), wl(4u * r.blocks + b), wl(5u * r.blocks + (b >> 1u)), (b & 1u) | (j << 1u));
}

fn levels_raw(raw: vec4<u32>) -> Levels8 {
    let d = raw_scale(raw.z, raw.w & 1u);
    let j = raw.w >> 1u;
    let lo = (raw.x & 0x0F0F0F0Fu) | fifth_bits(raw.y, 8u * j);
    let hi = ((raw.x >> 4u) & 0x0F0F0F0Fu) | fifth_bits(raw.y, 8u * j + 4u);
    return Levels8(vec2<u32>(lo, hi), vec2<f32>(d, -16.0 * d));
}
#endif
