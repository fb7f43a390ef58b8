// BF16 weights: two per word, low half first; a bf16 is the top half of an f32.
// Included by common/dequant.wgsl.

fn bf16x2(u: u32) -> vec2<f32> {
    return bitcast<vec2<f32>>(vec2<u32>(u << 16u, u & 0xffff0000u));
}

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let i = (row_byte + chunk * 64u) >> 2u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(bf16x2(w[i + 2u * j]), bf16x2(w[i + 2u * j + 1u]));
    }
    return v;
}

// Elements 4q..4q+3 of the row (matvec: consecutive lanes read consecutive words).
fn dequant4(row_byte: u32, q: u32) -> vec4<f32> {
    let i = (row_byte >> 2u) + 2u * q;
    return vec4<f32>(bf16x2(w[i]), bf16x2(w[i + 1u]));
}
