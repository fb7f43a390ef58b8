// Q4_0: block_q4_0 { d: f16, qs: [u8; 16] } = 18 bytes per 32 elements.
// Element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; w = d·(q − 8).
// Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let b = row_byte + chunk * 18u;
    let d = load_f16(b);
    let q = load_words4(b + 2u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        v[j] = d * (nibbles(q[j], 0u) - 8.0);
        v[j + 4u] = d * (nibbles(q[j], 4u) - 8.0);
    }
    return v;
}

// Elements 8o..8o+7 of the row: for j = o % 4 of block o / 4, the low (j < 2) or high
// nibbles of qs words 2(j % 2) and 2(j % 2) + 1.
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (o >> 2u) * 18u;
    let j = o & 3u;
    let d = load_f16(b);
    let q = load_words2(b + 2u + 8u * (j & 1u));
    let shift = 4u * (j >> 1u);
    // d·(q − 8) as one fma per element.
    let dv = vec4<f32>(d);
    let m8 = vec4<f32>(-8.0 * d);
    return array<vec4<f32>, 2>(fma(nibbles(q.x, shift), dv, m8), fma(nibbles(q.y, shift), dv, m8));
}
