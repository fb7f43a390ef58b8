// Q4_K: block_q4_K { d, dmin: f16, scales: [u8; 12], qs: [u8; 128] } = 144 bytes per 256
// elements, 8 sub-blocks (chunks) of 32; w = d·sc·q − dmin·m with q in 0..15. Sub-blocks 2g
// and 2g+1 share qs[32g..32g+32]: low nibbles, then high nibbles. 144 is 9 16-byte units, so
// blocks stay in place (src/gpu/layout.rs) and every field is aligned.
// Included by common/dequant.wgsl.

#include "common/dequant_k_scales.wgsl"

// Super-block `s`'s (d·scale, dmin·min) of sub-block `sb`.
fn q4_k_scale(s: u32, sb: u32) -> vec2<f32> {
    let head = wv(9u * s);
    let dm = unpack2x16float(head.x);
    return dm * scale_min_k4(sb, head.y, head.z, head.w);
}

struct Raw32 {
    q: array<vec4<u32>, 2>, // the 8 qs words this sub-block shares with its neighbour
    shift: u32,             // 0: low nibbles, 4: high
    dm: vec2<f32>,          // (d·scale, dmin·min)
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let s = (r.block + chunk) >> 3u;
    let sb = chunk & 7u;
    let qs = 9u * s + 1u + 2u * (sb >> 1u);
    return Raw32(array<vec4<u32>, 2>(wv(qs), wv(qs + 1u)), 4u * (sb & 1u), q4_k_scale(s, sb));
}

fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    let u = c.q[j >> 1u];
    let q = select(u.xy, u.zw, (j & 1u) != 0u);
    return array<vec4<f32>, 2>(c.dm.x * nibbles(q.x, c.shift) - c.dm.y, c.dm.x * nibbles(q.y, c.shift) - c.dm.y);
}

// Elements 8o..8o+7 of the row: words 2(o % 4), +1 of sub-block (o / 4) % 8 of its
// super-block. The 32 invocations reading one super-block load the same scale unit.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let s = (r.block + (o >> 2u)) >> 3u;
    let sb = (o >> 2u) & 7u;
    let dm = q4_k_scale(s, sb);
    let qs = 36u * s + 4u + 8u * (sb >> 1u) + 2u * (o & 3u);
    let shift = 4u * (sb & 1u);
    return array<vec4<f32>, 2>(dm.x * nibbles(wl(qs), shift) - dm.y, dm.x * nibbles(wl(qs + 1u), shift) - dm.y);
}

#ifdef INT8
// Σ (d·sc·q − dmin·m)·x' = d·sc·Σq·x' − dmin·m·Σx'; this sub-block's nibbles of the 8 shared
// words are its 32 quants as bytes in element order.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let m = vec4<u32>(0x0F0F0F0Fu);
    let s = vec4<u32>(c.shift);
    return c.dm.x * idot_levels_bytes((c.q[0] >> s) & m, (c.q[1] >> s) & m, x) - c.dm.y * x.d.z;
}
#endif

#ifdef LEVELS8
// This sub-block's nibbles as they are, w = (d·sc)·q − dmin·m.
fn levels8(r: WRow, o: u32) -> Levels8 {
    let s = (r.block + (o >> 2u)) >> 3u;
    let sb = (o >> 2u) & 7u;
    let dm = q4_k_scale(s, sb);
    let qs = 36u * s + 4u + 8u * (sb >> 1u) + 2u * (o & 3u);
    let shift = 4u * (sb & 1u);
    let m = 0x0F0F0F0Fu;
    return Levels8(vec2<u32>((wl(qs) >> shift) & m, (wl(qs + 1u) >> shift) & m), vec2<f32>(dm.x, -dm.y));
}
#endif
