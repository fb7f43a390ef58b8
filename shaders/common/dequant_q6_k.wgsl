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

// Elements 4q..4q+3 of the row: word jw = q % 8 of chunk (q / 8) % 8 of super-block q / 64;
// its scale is scales[8h + 2s + jw / 4].
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let b = row_byte + (q >> 6u) * 210u;
    let chunk = (q >> 3u) & 7u;
    let h = chunk >> 2u;
    let s = chunk & 3u;
    let jw = q & 7u;
    let ql = load_u32(b + 64u * h + 32u * (s & 1u) + 4u * jw);
    let qh = load_u32(b + 128u + 32u * h + 4u * jw);
    let sc = i8x4(load_u32(b + 192u + 8u * h + 2u * s + (jw >> 2u))).x;
    let hs = 2u * s;
    let hi = (vec4<u32>(qh) >> vec4<u32>(hs, hs + 8u, hs + 16u, hs + 24u)) & vec4<u32>(3u);
    let v = nibbles(ql, 4u * (s >> 1u)) + 16.0 * vec4<f32>(hi);
    return (load_f16(b + 208u) * sc) * (v - 32.0);
}
