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
