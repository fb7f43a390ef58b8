// Q5_1: block_q5_1 { d, m: f16, qh: [u8; 4], qs: [u8; 16] } = 24 bytes per 32 elements;
// q as Q5_0's (bit 4 of element e is bit e of qh), w = d·q + m. Re-laid out
// (src/gpu/layout.rs): quants plane (16-byte units, element order as Q4_0's), high-bits
// plane (one word per block), then one word per block holding (d, m).
// Included by common/dequant.wgsl.

// Elements 8j..8j+7 of a block from its quant word j and high-bits word.
fn q5_1_group(q: u32, qh: u32, j: u32, dm: vec2<f32>) -> array<vec4<f32>, 2> {
    let lo = vec4<u32>(nibbles(q, 0u)) | (bit_run(qh, 8u * j) << vec4<u32>(4u));
    let hi = vec4<u32>(nibbles(q, 4u)) | (bit_run(qh, 8u * j + 4u) << vec4<u32>(4u));
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(dm.y);
    return array<vec4<f32>, 2>(fma(vec4<f32>(lo), d, m), fma(vec4<f32>(hi), d, m));
}

struct Raw32 {
    q: vec4<u32>,
    qh: u32,
    dm: vec2<f32>, // (d, m)
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    return Raw32(wv(b), wl(4u * r.blocks + b), unpack2x16float(wl(5u * r.blocks + b)));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q5_1_group(c.q[j], c.qh, j, c.dm);
}

// Elements 8o..8o+7 of the row: word j = o % 4 of block o / 4's quants, with bits
// 8j..8j+7 of its high bits on top.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let j = o & 3u;
    let dm = unpack2x16float(wl(5u * r.blocks + b));
    return q5_1_group(wl(4u * b + j), wl(4u * r.blocks + b), j, dm);
}

#ifdef INT8
// Σ (d·q + m)·x', q as Q5_0's.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let n = nibble_bytes(c.q);
    let lo = n[0] | high_bytes(c.qh, 0u);
    let hi = n[1] | high_bytes(c.qh, 4u);
    return c.dm.x * idot_levels_split(lo, hi, x) + c.dm.y * x.d.z;
}
#endif
