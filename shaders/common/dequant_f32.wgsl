// F32 weights: 32 elements = 32 aligned words. Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let i = (row_byte + chunk * 128u) >> 2u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        let k = i + 4u * j;
        v[j] = bitcast<vec4<f32>>(vec4<u32>(w[k], w[k + 1u], w[k + 2u], w[k + 3u]));
    }
    return v;
}

// Elements 4q..4q+3 of the row (matvec: consecutive lanes read consecutive words).
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let i = (row_byte >> 2u) + 4u * q;
    return bitcast<vec4<f32>>(vec4<u32>(w[i], w[i + 1u], w[i + 2u], w[i + 3u]));
}
