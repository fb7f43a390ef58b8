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

// Elements 8o..8o+7 of the row: words 2j, 2j+1 of block o / 4 (j = o % 4).
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let b = row_byte + (o >> 2u) * 34u;
    let d = load_f16(b);
    let q = load_words2(b + 2u + 8u * (o & 3u));
    return array<vec4<f32>, 2>(d * i8x4(q.x), d * i8x4(q.y));
}
