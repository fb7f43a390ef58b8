// F16 weights: two per word, low half first (little-endian); 8 per 16-byte unit.
// Included by common/dequant.wgsl.

fn f16x8(u: vec4<u32>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(unpack2x16float(u.x), unpack2x16float(u.y)),
        vec4<f32>(unpack2x16float(u.z), unpack2x16float(u.w)),
    );
}

fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8> {
    let i = 4u * (r.block + chunk);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let h = f16x8(wv(i + j));
        v[2u * j] = h[0];
        v[2u * j + 1u] = h[1];
    }
    return v;
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    return f16x8(wv(4u * r.block + o));
}
