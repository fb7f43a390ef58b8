// BF16 weights: two per word, low half first; a bf16 is the top half of an f32.
// Included by common/dequant.wgsl.

fn bf16x8(u: vec4<u32>) -> array<vec4<f32>, 2> {
    let lo = u << vec4<u32>(16u);
    let hi = u & vec4<u32>(0xffff0000u);
    return array<vec4<f32>, 2>(
        bitcast<vec4<f32>>(vec4<u32>(lo.x, hi.x, lo.y, hi.y)),
        bitcast<vec4<f32>>(vec4<u32>(lo.z, hi.z, lo.w, hi.w)),
    );
}

alias Raw32 = array<vec4<u32>, 4>;

fn raw32(r: WRow, chunk: u32) -> Raw32 {
    let i = 4u * (r.block + chunk);
    return Raw32(wv(i), wv(i + 1u), wv(i + 2u), wv(i + 3u));
}

fn decode8(q: Raw32, j: u32) -> array<vec4<f32>, 2> {
    return bf16x8(q[j]);
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    return bf16x8(wv(4u * r.block + o));
}
