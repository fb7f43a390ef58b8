// F16 weights: two per word, low half first (little-endian). Included by common/dequant.wgsl.

fn dequant32(row_byte: u32, chunk: u32) -> array<vec4<f32>, 8> {
    let i = (row_byte + chunk * 64u) >> 2u;
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 8u; j++) {
        v[j] = vec4<f32>(unpack2x16float(wl(i + 2u * j)), unpack2x16float(wl(i + 2u * j + 1u)));
    }
    return v;
}

// Elements 8o..8o+7 of the row (matvec: consecutive invocations read consecutive words).
fn dequant8(row_byte: u32, o: u32) -> array<vec4<f32>, 2> {
    let i = (row_byte >> 2u) + 4u * o;
    return array<vec4<f32>, 2>(
        vec4<f32>(unpack2x16float(wl(i)), unpack2x16float(wl(i + 1u))),
        vec4<f32>(unpack2x16float(wl(i + 2u)), unpack2x16float(wl(i + 3u))),
    );
}
