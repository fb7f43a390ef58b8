// Q3_K: block_q3_K { hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16 } = 110 bytes
// per 256 elements, 16 sub-blocks of 16 with a 6-bit scale sc; w = d·(sc − 32)·(q − 4) with
// q in 0..7 (2 low bits in qs, the top bit in hmask). Re-laid out (src/gpu/layout.rs): a body
// plane of 96 bytes (6 16-byte units) per super-block — chunk c's 2-bit fields at bytes
// 8c..8c+7 (as Q2_K's), its top bits at word 16 + c (element 4g + i: bit g of byte i) — then
// a plane of the 12 packed scale bytes (3 words) and one of the f16 d per super-block.
// Included by common/dequant.wgsl.

// d·(sc − 32) of sub-block i (0..16) of super-block s. ggml packs sc's low 4 bits as nibble
// i / 8 of byte i % 8 and its top 2 bits as bits 2(i / 4) of byte 8 + i % 4.
fn q3_k_scale(s: u32, i: u32, blocks: u32) -> f32 {
    let base = 24u * (blocks >> 3u) + 3u * s;
    let lo = (wl(base + ((i & 7u) >> 2u)) >> (8u * (i & 3u) + 4u * (i >> 3u))) & 15u;
    let hi = (wl(base + 2u) >> (8u * (i & 3u) + 2u * (i >> 2u))) & 3u;
    return plane_f16(27u * (blocks >> 3u), s) * f32(i32(lo | (hi << 4u)) - 32);
}

// Elements 8j..8j+7 of a chunk (groups 2j, 2j+1) from its 2-bit word j / 2 and top-bit word.
fn q3_k_group(q: u32, qh: u32, j: u32, d: f32) -> array<vec4<f32>, 2> {
    let shift = 4u * (j & 1u);
    let q0 = two_bits(q, shift) + 4u * byte_bits(qh, 2u * j);
    let q1 = two_bits(q, shift + 2u) + 4u * byte_bits(qh, 2u * j + 1u);
    return array<vec4<f32>, 2>(d * (vec4<f32>(q0) - 4.0), d * (vec4<f32>(q1) - 4.0));
}

struct Raw32 {
    q: vec2<u32>,   // the chunk's 2-bit fields
    qh: u32,        // its top bits
    d: vec2<f32>,   // d·(sc − 32) of its two sub-blocks
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let b = r.block + chunk;
    let s = b >> 3u;
    let c = b & 7u;
    let qv = wv(6u * s + (c >> 1u));
    return Raw32(
        select(qv.xy, qv.zw, (c & 1u) != 0u),
        wl(24u * s + 16u + c),
        vec2<f32>(q3_k_scale(s, 2u * c, r.blocks), q3_k_scale(s, 2u * c + 1u, r.blocks)),
    );
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return q3_k_group(c.q[j >> 1u], c.qh, j, select(c.d.x, c.d.y, j >= 2u));
}

// Elements 8o..8o+7 of the row: groups 2j, 2j+1 (j = o % 4) of chunk (o / 4) % 8 of its
// super-block, both of sub-block 2c + j / 2.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let s = b >> 3u;
    let c = b & 7u;
    let j = o & 3u;
    let d = q3_k_scale(s, 2u * c + (j >> 1u), r.blocks);
    return q3_k_group(wl(24u * s + 2u * c + (j >> 1u)), wl(24u * s + 16u + c), j, d);
}
