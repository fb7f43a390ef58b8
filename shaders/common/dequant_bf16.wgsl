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

fn dequant32(r: WRow, chunk: u32) -> array<vec4<f32>, 8> {
    let i = 4u * (r.block + chunk);
    var v: array<vec4<f32>, 8>;
    for (var j = 0u; j < 4u; j++) {
        let h = bf16x8(wv(i + j));
        v[2u * j] = h[0];
        v[2u * j + 1u] = h[1];
    }
    return v;
}

// Elements 8o..8o+7 of the row (consecutive invocations read consecutive units).
fn dequant8(r: WRow, o: u32) -> array<vec4<f32>, 2> {
    return bf16x8(wv(4u * r.block + o));
}
