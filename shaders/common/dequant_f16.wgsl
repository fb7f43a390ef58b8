// F16 weights: two per word, low half first (little-endian); 8 per 16-byte unit.
// Included by common/dequant.wgsl.

fn f16x8(u: vec4<u32>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(
        vec4<f32>(unpack2x16float(u.x), unpack2x16float(u.y)),
        vec4<f32>(unpack2x16float(u.z), unpack2x16float(u.w)),
    );
}

alias Raw32 = array<vec4<u32>, 4>;

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let i = 4u * (r.block + chunk);
    return Raw32(wv(i), wv(i + 1u), wv(i + 2u), wv(i + 3u));
}

fn decode8(q: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return f16x8(q[j]);
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    return f16x8(wv(4u * r.block + o));
}
