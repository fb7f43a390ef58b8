// F32 weights: 32 elements = 8 aligned 16-byte units. Included by common/dequant.wgsl.

alias Raw32 = array<vec4<u32>, 8>;

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let i = 8u * (r.block + chunk);
    var q: Raw32;
    for (var j = 0u; j < 8u; j++) {
        q[j] = wv(i + j);
    }
    return q;
}

fn decode8(q: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(bitcast<vec4<f32>>(q[2u * j]), bitcast<vec4<f32>>(q[2u * j + 1u]));
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    let i = 8u * r.block + 2u * o;
    return array<vec4<f32>, 2>(bitcast<vec4<f32>>(wv(i)), bitcast<vec4<f32>>(wv(i + 1u)));
}
