// Q6_K: block_q6_K { ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16 } = 210 bytes
// per 256 elements; w = d·scale·(q − 32) with q in 0..63 and one int8 scale per 16 elements.
// Each half h of 128 elements is four rows s of 32 (chunk = 4h + s): element l's low 4 bits
// are nibble s>>1 of ql[64h + 32(s&1) + l], its top 2 bits are bits 2s..2s+1 of qh[32h + l],
// its scale is scales[8h + 2s + l/16]. Odd blocks start at 2 mod 4 (210 B), so fields are
// read with funnelled word loads. Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let b = row_byte + (chunk >> 3u) * 210u;
    let h = (chunk >> 2u) & 1u;
    let s = chunk & 3u;
    let ql = load_words8(b + 64u * h + 32u * (s & 1u));
    let qh = load_words8(b + 128u + 32u * h);
    let sc = load_u32(b + 192u + 8u * h + 2u * s); // bytes 0, 1: the two scales of this chunk
    let d = load_f16(b + 208u);
    let lo_shift = 4u * (s >> 1u);
    let hi_shift = 2u * s;
    let scales = d * i8x4(sc).xy;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let hi = (vec4<u32>(qh[j]) >> vec4<u32>(hi_shift, hi_shift + 8u, hi_shift + 16u, hi_shift + 24u)) & vec4<u32>(3u);
        let q = nibbles(ql[j], lo_shift) + 16.0 * vec4<f32>(hi);
        v[j] = select(scales.y, scales.x, j < 4u) * (q - 32.0);
    }
    return v;
}

// Elements 8o..8o+7 of the row: words jw, jw+1 (jw = 2(o % 4)) of chunk (o / 4) % 8 of
// super-block o / 32; both use scales[8h + 2s + jw / 4].
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (o >> 5u) * 210u;
    let chunk = (o >> 2u) & 7u;
    let h = chunk >> 2u;
    let s = chunk & 3u;
    let jw = 2u * (o & 3u);
    let ql = load_words2(b + 64u * h + 32u * (s & 1u) + 4u * jw);
    let qh = load_words2(b + 128u + 32u * h + 4u * jw);
    let sc = load_f16(b + 208u) * i8x4(load_u32(b + 192u + 8u * h + 2u * s + (jw >> 2u))).x;
    let ls = 4u * (s >> 1u);
    let hs = vec4<u32>(2u * s) + vec4<u32>(0u, 8u, 16u, 24u);
    let v0 = nibbles(ql.x, ls) + 16.0 * vec4<f32>((vec4<u32>(qh.x) >> hs) & vec4<u32>(3u));
    let v1 = nibbles(ql.y, ls) + 16.0 * vec4<f32>((vec4<u32>(qh.y) >> hs) & vec4<u32>(3u));
    return array<vec4<f32>, 2>(sc * (v0 - 32.0), sc * (v1 - 32.0));
}
