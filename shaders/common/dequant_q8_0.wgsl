// Q8_0: block_q8_0 { d: f16, qs: [i8; 32] } = 34 bytes per 32 elements; w = d·q.
// Odd blocks start at 2 mod 4, so qs is read with funnelled word loads.
// Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let b = row_byte + chunk * 34u;
    let d = load_f16(b);
    let q = load_words8(b + 2u);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = d * i8x4(q[j]);
    }
    return v;
}

// Elements 4q..4q+3 of the row: word q % 8 of block q / 8.
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let b = row_byte + (q >> 3u) * 34u;
    return load_f16(b) * i8x4(load_u32(b + 2u + 4u * (q & 7u)));
}
