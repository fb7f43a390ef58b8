// Q5_0: block_q5_0 { d: f16, qh: [u8; 4], qs: [u8; 16] } = 22 bytes per 32 elements.
// Like Q4_0, plus bit 4 of element e is bit e of qh (a little-endian u32); w = d·(q − 16).
// Included by common/dequant.wgsl.

// Bits first..first+3 of `qh`, each moved to bit 4.
fn q5_high(qh: u32, first: u32) -> vec4<u32> {
    return ((vec4<u32>(qh) >> vec4<u32>(first, first + 1u, first + 2u, first + 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
}

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let b = row_byte + chunk * 22u;
    let d = load_f16(b);
    let qh = load_u32(b + 2u);
    let q = load_words4(b + 6u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let lo = vec4<u32>(nibbles(q[j], 0u)) | q5_high(qh, 4u * j);
        let hi = vec4<u32>(nibbles(q[j], 4u)) | q5_high(qh, 16u + 4u * j);
        v[j] = d * (vec4<f32>(lo) - 16.0);
        v[j + 4u] = d * (vec4<f32>(hi) - 16.0);
    }
    return v;
}

// Elements 8o..8o+7 of the row: as Q4_0, with bits 8j..8j+7 of qh on top (j = o % 4).
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (o >> 2u) * 22u;
    let j = o & 3u;
    let d = load_f16(b);
    let qh = load_u32(b + 2u);
    let q = load_words2(b + 6u + 8u * (j & 1u));
    let shift = 4u * (j >> 1u);
    let lo = vec4<u32>(nibbles(q.x, shift)) | q5_high(qh, 8u * j);
    let hi = vec4<u32>(nibbles(q.y, shift)) | q5_high(qh, 8u * j + 4u);
    return array<vec4<f32>, 2>(d * (vec4<f32>(lo) - 16.0), d * (vec4<f32>(hi) - 16.0));
}
