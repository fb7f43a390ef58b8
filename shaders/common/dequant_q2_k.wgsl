// Q2_K: block_q2_K { scales: [u8; 16], qs: [u8; 64], d, dmin: f16 } = 84 bytes per 256
// elements, 16 sub-blocks of 16 with a 4-bit scale (low nibble) and min (high nibble);
// w = d·sc·q − dmin·m with q in 0..3. Re-laid out (src/gpu/layout.rs): a body plane of 80
// bytes (5 16-byte units) per super-block — chunk c's 2-bit fields at bytes 8c..8c+7
// (element 4g + i: byte i of word g / 4, bits 2(g % 4)), then the 16 sub-scale bytes at
// 64 — and a plane of one (d, dmin) word per super-block. Included by common/dequant.wgsl.

// (d·sc, dmin·m) of sub-block 2c + h of super-block s.
fn q2_k_scale(s: u32, c: u32, h: u32, blocks: u32) -> vec2<f32> {
    let sc = (wl(20u * s + 16u + (c >> 1u)) >> (8u * (2u * (c & 1u) + h))) & 255u;
    let dm = unpack2x16float(wl(20u * (blocks >> 3u) + s));
    return dm * vec2<f32>(f32(sc & 15u), f32(sc >> 4u));
}

// Elements 8j..8j+7 of a chunk (groups 2j, 2j+1) from its 2-bit word j / 2.
fn q2_k_group(q: u32, j: u32, dm: vec2<f32>) -> array<vec4<f32>, 2> {
    let shift = 4u * (j & 1u);
    let d = vec4<f32>(dm.x);
    let m = vec4<f32>(-dm.y);
    return array<vec4<f32>, 2>(fma(vec4<f32>(two_bits(q, shift)), d, m), fma(vec4<f32>(two_bits(q, shift + 2u)), d, m));
}

struct Raw32 {
    q: vec2<u32>,                // the chunk's 2-bit fields
    dm: array<vec2<f32>, 2>,     // (d·sc, dmin·m) of its two sub-blocks
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    let s = b >> 3u;
    let c = b & 7u;
    let qv = wv(5u * s + (c >> 1u));
    return Raw32(
        select(qv.xy, qv.zw, (c & 1u) != 0u),
        array<vec2<f32>, 2>(q2_k_scale(s, c, 0u, r.blocks), q2_k_scale(s, c, 1u, r.blocks)),
    );
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q2_k_group(c.q[j >> 1u], j, c.dm[j >> 1u]);
}

// Elements 8o..8o+7 of the row: groups 2j, 2j+1 (j = o % 4) of chunk (o / 4) % 8 of its
// super-block, both of sub-block 2c + j / 2.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let s = b >> 3u;
    let c = b & 7u;
    let j = o & 3u;
    let dm = q2_k_scale(s, c, j >> 1u, r.blocks);
    return q2_k_group(wl(20u * s + 2u * c + (j >> 1u)), j, dm);
}
