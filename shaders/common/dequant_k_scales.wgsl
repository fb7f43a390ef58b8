// The 6-bit (scale, min) pairs of Q4_K/Q5_K super-blocks. Included by dequant_q4_k/q5_k.wgsl.
//
// ggml packs eight pairs into 12 bytes (`get_scale_min_k4`): sub-blocks 0–3 use the low
// 6 bits of bytes sb and sb+4; sub-blocks 4–7 take their low 4 bits from the nibbles of byte
// sb+4 and their top 2 bits from the spare top bits of bytes sb−4 and sb.

fn byte_of(u: u32, i: u32) -> u32 {
    return (u >> (8u * i)) & 255u;
}

// (scale, min) of sub-block `sb`; s0, s1, s2 are the 12 scale bytes as three words.
fn scale_min_k4(sb: u32, s0: u32, s1: u32, s2: u32) -> vec2<f32> {
    let j = sb & 3u;
    let a = byte_of(s0, j);
    let b = byte_of(s1, j);
    let c = byte_of(s2, j);
    let low = vec2<u32>(a & 63u, b & 63u);
    let high = vec2<u32>((c & 15u) | ((a >> 6u) << 4u), (c >> 4u) | ((b >> 6u) << 4u));
    return vec2<f32>(select(high, low, sb < 4u));
}
