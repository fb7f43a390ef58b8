// Q4_0: block_q4_0 { d: f16, qs: [u8; 16] } = 18 bytes per 32 elements; w = d·(q − 8).
// Re-laid out (src/gpu/layout.rs): quants plane (one 16-byte unit per block, in element
// order: word j's low nibbles are elements 8j..8j+3, its high nibbles 8j+4..8j+7), then the
// scales plane (one f16 per block). Included by common/dequant.wgsl.

fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8> {
    let b = r.block + chunk;
    let d = plane_f16(4u * r.blocks, b);
    let q = wv(b);
    // d·(q − 8) as one fma per element.
    let dv = vec4<f32>(d);
    let m8 = vec4<f32>(-8.0 * d);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        v[2u * j] = fma(nibbles(q[j], 0u), dv, m8);
        v[2u * j + 1u] = fma(nibbles(q[j], 4u), dv, m8);
    }
    return v;
}

// Elements 8o..8o+7 of the row: word o % 4 of block o / 4's quants.
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let b = r.block + (o >> 2u);
    let d = plane_f16(4u * r.blocks, b);
    let q = wl(4u * b + (o & 3u));
    let dv = vec4<f32>(d);
    let m8 = vec4<f32>(-8.0 * d);
    return array<vec4<f32>, 2>(fma(nibbles(q, 0u), dv, m8), fma(nibbles(q, 4u), dv, m8));
}
