// F32 weights: 32 elements = 8 aligned 16-byte units. Included by common/dequant.wgsl.

fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8> {
    let i = 8u * (r.block + chunk);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = bitcast<vec4<f32>>(wv(i + j));
    }
    return v;
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let i = 8u * r.block + 2u * o;
    return array<vec4<f32>, 2>(bitcast<vec4<f32>>(wv(i)), bitcast<vec4<f32>>(wv(i + 1u)));
}
