// Q8_0: block_q8_0 { d: f16, qs: [i8; 32] } = 34 bytes per 32 elements; w = d·q.
// Re-laid out (src/gpu/layout.rs): quants plane (32 B per block, two 16-byte units), then
// the scales plane (one f16 per block). Included by common/dequant.wgsl.

struct Raw32 {
    q: array<vec4<u32>, 2>,
    d: f32,
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(array<vec4<u32>, 2>(wv(2u * b), wv(2u * b + 1u)), plane_f16(8u * r.blocks, b));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    let u = c.q[j >> 1u];
    let q = select(u.xy, u.zw, (j & 1u) != 0u);
    return array<vec4<f32>, 2>(c.d * i8x4(q.x), c.d * i8x4(q.y));
}

// Elements 8o..8o+7 of the row: words 2j, 2j+1 of block o / 4's quants (j = o % 4).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let d = plane_f16(8u * r.blocks, b);
    let i = 8u * b + 2u * (o & 3u);
    return array<vec4<f32>, 2>(d * i8x4(wl(i)), d * i8x4(wl(i + 1u)));
}

#ifdef INT8
// Σ d·q·x' with the int8 quants as they are.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    return c.d * idot_levels_bytes(c.q[0], c.q[1], x);
}
#endif

#ifdef LEVELS8
// The int8 quants as they are, w = d·q.
fn levels8(r: WRow, o: u32) -> Levels8 {
    let b = r.block + (o >> 2u);
    let i = 8u * b + 2u * (o & 3u);
    return Levels8(vec2<u32>(wl(i), wl(i + 1u)), vec2<f32>(plane_f16(8u * r.blocks, b), 0.0));
}
#endif

#ifdef HALF_W
// The int8 quants, w = d·q: each byte xor 0x80 is q + 128 as an unsigned byte.
fn half8(l: Levels8) -> array<vec4<f16>, 2> {
    return half_levels(l.q ^ vec2<u32>(0x80808080u), 128.0, l.dm.x);
}
#endif

#ifdef RAW_W
// levels8's words as loaded: two quant words, the scale plane's word and which of its halves.
fn raw8(r: WRow, o: u32) -> vec4<u32> {
    let b = r.block + (o >> 2u);
    let i = 8u * b + 2u * (o & 3u);
    return vec4<u32>(wl(i), wl(i + 1u), wl(8u * r.blocks + (b >> 1u)), b & 1u);
}

fn levels_raw(raw: vec4<u32>) -> Levels8 {
    return Levels8(raw.xy, vec2<f32>(raw_scale(raw.z, raw.w), 0.0));
}
#endif
