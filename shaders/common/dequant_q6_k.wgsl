// Q6_K: block_q6_K { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 } = 210 bytes
// per 256 elements; w = d·scale·(q − 32) with q in 0..63 and one int8 scale per 16 elements.
// Re-laid out (src/gpu/layout.rs): a body plane of 208 bytes (13 16-byte units) per
// super-block, then a plane of its f16 scales. In the body, 32-element chunk c has its low
// 4 bits at unit c (element order as Q4_0's quants), its top 2 bits at words 32 + 2c, +1
// (element 4g + i: byte i of word g / 4, bits 2(g % 4)), and sub-scales 2c, 2c+1 in the
// bytes of words 48..51. Included by common/dequant.wgsl.

// The two sub-scales of chunk c of super-block s, times its d.
fn q6_k_scales(s: u32, c: u32, blocks: u32) -> vec2<f32> {
    let sc = i8x4(wl(52u * s + 48u + (c >> 1u)));
    return plane_f16(52u * (blocks >> 3u), s) * select(sc.xy, sc.zw, (c & 1u) != 0u);
}

// Elements 4g..4g+3 (g = 2j + h) of a chunk from low-bits word j and its high-bits word.
fn q6_group(ql: u32, qh: u32, g: u32) -> vec4<f32> {
    let hs = vec4<u32>(2u * (g & 3u)) + vec4<u32>(0u, 8u, 16u, 24u);
    return nibbles(ql, 4u * (g & 1u)) + 16.0 * vec4<f32>((vec4<u32>(qh) >> hs) & vec4<u32>(3u)) - 32.0;
}

struct Raw32 {
    ql: vec4<u32>, // low 4 bits, element order
    qh: vec2<u32>, // top 2 bits
    sc: vec2<f32>, // d · the two sub-scales
}

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let s = (r.block + chunk) >> 3u;
    let c = chunk & 7u;
    let qhv = wv(13u * s + 8u + (c >> 1u));
    return Raw32(wv(13u * s + c), select(qhv.xy, qhv.zw, (c & 1u) != 0u), q6_k_scales(s, c, r.blocks));
}

// Elements 8j..8j+7 of the chunk: groups 2j, 2j+1, both of sub-scale j / 2.
fn decode8(c: Raw32, j: u32) -> array<vec4<f32>, 2> {
    let scale = select(c.sc.x, c.sc.y, j >= 2u);
    let qh = c.qh[j >> 1u];
    return array<vec4<f32>, 2>(scale * q6_group(c.ql[j], qh, 2u * j), scale * q6_group(c.ql[j], qh, 2u * j + 1u));
}

// Elements 8o..8o+7 of the row: groups 2m, 2m+1 (m = o % 4) of chunk (o / 4) % 8 of its
// super-block; both use sub-scale 2c + m / 2.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let s = (r.block + (o >> 2u)) >> 3u;
    let c = (o >> 2u) & 7u;
    let m = o & 3u;
    let sc = q6_k_scales(s, c, r.blocks);
    let ql = wl(52u * s + 4u * c + m);
    let qh = wl(52u * s + 32u + 2u * c + (m >> 1u));
    let scale = select(sc.x, sc.y, m >= 2u);
    return array<vec4<f32>, 2>(scale * q6_group(ql, qh, 2u * m), scale * q6_group(ql, qh, 2u * m + 1u));
}

#ifdef INT8
// q − 32 of four 6-bit quants (bytes 0..63) as signed bytes: flipping bit 5 subtracts 32 from
// q ≥ 32 and adds 32 to q < 32, whose results (bit 5 now set) then need bits 6 and 7 set.
fn q6_signed(v: vec4<u32>) -> vec4<u32> {
    let x = v ^ vec4<u32>(0x20202020u);
    let b5 = x & vec4<u32>(0x20202020u);
    return x | (b5 << vec4<u32>(1u)) | (b5 << vec4<u32>(2u));
}

// Σ d·scale·(q − 32)·x' with one scale per 16 elements: each half's int8 dot products alone.
// The quants in idot_split's order: lo[j] is group 2j (elements 8j..8j+3), hi[j] group 2j + 1;
// group g's top bits are bits 2(g % 4) of word g / 4 of qh.
fn idot32(c: Raw32, x: XChunk) -> f32 {
    let m = vec4<u32>(0x0F0F0F0Fu);
    let three = vec4<u32>(0x03030303u);
    let qh = vec4<u32>(c.qh.x, c.qh.x, c.qh.y, c.qh.y);
    let lo = q6_signed((c.ql & m) | (((qh >> vec4<u32>(0u, 4u, 0u, 4u)) & three) << vec4<u32>(4u)));
    let hi = q6_signed(((c.ql >> vec4<u32>(4u)) & m) | (((qh >> vec4<u32>(2u, 6u, 2u, 6u)) & three) << vec4<u32>(4u)));
    // Elements 0..15 (sub-scale sc.x): words x, y of lo and hi against x0; 16..31: z, w, x1.
    let a0 = (dot4I8Packed(lo.x, x.a0.x) + dot4I8Packed(hi.x, x.a0.y)) + (dot4I8Packed(lo.y, x.a0.z) + dot4I8Packed(hi.y, x.a0.w));
    let b0 = (dot4I8Packed(lo.x, x.b0.x) + dot4I8Packed(hi.x, x.b0.y)) + (dot4I8Packed(lo.y, x.b0.z) + dot4I8Packed(hi.y, x.b0.w));
    let a1 = (dot4I8Packed(lo.z, x.a1.x) + dot4I8Packed(hi.z, x.a1.y)) + (dot4I8Packed(lo.w, x.a1.z) + dot4I8Packed(hi.w, x.a1.w));
    let b1 = (dot4I8Packed(lo.z, x.b1.x) + dot4I8Packed(hi.z, x.b1.y)) + (dot4I8Packed(lo.w, x.b1.z) + dot4I8Packed(hi.w, x.b1.w));
    return c.sc.x * (x.d.x * f32(a0) + x.d.y * f32(b0)) + c.sc.y * (x.d.x * f32(a1) + x.d.y * f32(b1));
}
#endif
