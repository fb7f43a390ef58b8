// Q5_K: block_q5_K { d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128] } = 176
// bytes per 256 elements. Like Q4_K with q in 0..31: bit 4 of sub-block sb's element l is
// bit sb of qh[l]. 176 is 11 16-byte units: blocks stay in place (src/gpu/layout.rs).
// Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

// Super-block `s`'s (d·scale, dmin·min) of sub-block `sb`.
fn q5_k_scale(s: u32, sb: u32) -> vec2<f32> {
    let head = wv(11u * s);
    let dm = unpack2x16float(head.x);
    return dm * scale_min_k4(sb, head.y, head.z, head.w);
}

struct Raw32 {
    q: array<vec4<u32>, 2>,  // the 8 qs words this sub-block shares with its neighbour
    qh: array<vec4<u32>, 2>, // the super-block's 8 qh words
    sb: u32,                 // sub-block: nibble half and qh bit
    dm: vec2<f32>,           // (d·scale, dmin·min)
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let s = (r.block + chunk) >> 3u;
    let sb = chunk & 7u;
    let qs = 11u * s + 3u + 2u * (sb >> 1u);
    return Raw32(
        array<vec4<u32>, 2>(wv(qs), wv(qs + 1u)),
        array<vec4<u32>, 2>(wv(11u * s + 1u), wv(11u * s + 2u)),
        sb,
        q5_k_scale(s, sb),
    );
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    let u = c.q[j >> 1u];
    let h = c.qh[j >> 1u];
    let odd = (j & 1u) != 0u;
    let q = select(u.xy, u.zw, odd);
    let qh = select(h.xy, h.zw, odd);
    let shift = 4u * (c.sb & 1u);
    let v0 = nibbles(q.x, shift) + 16.0 * vec4<f32>(byte_bits(qh.x, c.sb));
    let v1 = nibbles(q.y, shift) + 16.0 * vec4<f32>(byte_bits(qh.y, c.sb));
    return array<vec4<f32>, 2>(c.dm.x * v0 - c.dm.y, c.dm.x * v1 - c.dm.y);
}

// Elements 8o..8o+7 of the row: words 2(o % 4), +1 of sub-block (o / 4) % 8 of its
// super-block, with the matching qh words.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let s = (r.block + (o >> 2u)) >> 3u;
    let sb = (o >> 2u) & 7u;
    let dm = q5_k_scale(s, sb);
    let jw = 2u * (o & 3u);
    let qs = 44u * s + 12u + 8u * (sb >> 1u) + jw;
    let qh = 44u * s + 4u + jw;
    let shift = 4u * (sb & 1u);
    let v0 = nibbles(wl(qs), shift) + 16.0 * vec4<f32>(byte_bits(wl(qh), sb));
    let v1 = nibbles(wl(qs + 1u), shift) + 16.0 * vec4<f32>(byte_bits(wl(qh + 1u), sb));
    return array<vec4<f32>, 2>(dm.x * v0 - dm.y, dm.x * v1 - dm.y);
}

#ifdef INT8
// As Q4_K's, with bit `sb` of each qh byte as bit 4 of the element's quant.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let m = vec4<u32>(0x0F0F0F0Fu);
    let s = vec4<u32>(4u * (c.sb & 1u));
    let h = vec4<u32>(c.sb);
    let one = vec4<u32>(0x01010101u);
    let q0 = ((c.q[0] >> s) & m) | (((c.qh[0] >> h) & one) << vec4<u32>(4u));
    let q1 = ((c.q[1] >> s) & m) | (((c.qh[1] >> h) & one) << vec4<u32>(4u));
    return c.dm.x * idot_levels_bytes(q0, q1, x) - c.dm.y * x.d.z;
}
#endif
