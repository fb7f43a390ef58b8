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

// Elements 4q..4q+3 of the row: group j = q % 8 of block q / 8 is the low (j < 4) or high
// nibbles of qs word j % 4.
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let b = row_byte + (q >> 3u) * 18u;
    let j = q & 7u;
    return load_f16(b) * (nibbles(load_u32(b + 2u + 4u * (j & 3u)), 4u * (j >> 2u)) - 8.0);
}
