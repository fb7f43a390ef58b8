// F32 weights: 32 elements = 32 aligned words. Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let i = (row_byte + chunk * 128u) >> 2u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let k = i + 4u * j;
        v[j] = bitcast<vec4<f32>>(vec4<u32>(wl(k), wl(k + 1u), wl(k + 2u), wl(k + 3u)));
    }
    return v;
}

// Elements 8o..8o+7 of the row (matvec: consecutive invocations read consecutive words).
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let i = (row_byte >> 2u) + 8u * o;
    return array<vec4<f32>, 2>(
        bitcast<vec4<f32>>(vec4<u32>(wl(i), wl(i + 1u), wl(i + 2u), wl(i + 3u))),
        bitcast<vec4<f32>>(vec4<u32>(wl(i + 4u), wl(i + 5u), wl(i + 6u), wl(i + 7u))),
    );
}
