// F16 weights: two per word, low half first (little-endian). Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let i = (row_byte + chunk * 64u) >> 2u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(unpack2x16float(w[i + 2u * j]), unpack2x16float(w[i + 2u * j + 1u]));
    }
    return v;
}

// Elements 4q..4q+3 of the row (matvec: consecutive lanes read consecutive words).
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let i = (row_byte >> 2u) + 2u * q;
    return vec4<f32>(unpack2x16float(w[i]), unpack2x16float(w[i + 1u]));
}
