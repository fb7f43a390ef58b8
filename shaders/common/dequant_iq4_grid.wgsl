// The 16-level non-linear grid of IQ4_NL and IQ4_XS (llama.cpp's `kvalues_iq4nl`: -127 -104
// -83 -65 -49 -35 -22 -10 1 13 25 38 53 69 89 113, in units of the block's scale).
// Included by dequant_iq4_nl/iq4_xs.wgsl.
//
// The levels are packed as int8 into four words and picked with selects and a shift: no
// dynamically indexed array, which naga spills to a per-invocation copy.
const IQ4_GRID_0 = 0xBFAD9881u; // levels 0..3, one byte each
const IQ4_GRID_1 = 0xF6EADDCFu; // 4..7
const IQ4_GRID_2 = 0x26190D01u; // 8..11
const IQ4_GRID_3 = 0x71594535u; // 12..15

// The grid levels of four indices 0..15.
fn iq4_levels(q: vec4<u32>) -> vec4<f32> {
    let odd_word = (q & vec4<u32>(4u)) != vec4<u32>(0u);
    let low = select(vec4<u32>(IQ4_GRID_0), vec4<u32>(IQ4_GRID_1), odd_word);
    let high = select(vec4<u32>(IQ4_GRID_2), vec4<u32>(IQ4_GRID_3), odd_word);
    let w = select(low, high, q >= vec4<u32>(8u));
    // Byte q % 4 to the top, then an arithmetic shift down sign-extends it.
    let top = w << ((vec4<u32>(3u) - (q & vec4<u32>(3u))) * 8u);
    return vec4<f32>(bitcast<vec4<i32>>(top) >> vec4<u32>(24u));
}

// The grid levels of the four 4-bit indices at bit `shift` of each byte of `u`.
fn iq4_nibbles(u: u32, shift: u32) -> vec4<f32> {
    return iq4_levels(unpack4xU8((u >> shift) & 0x0F0F0F0Fu));
}

// Elements 8j..8j+7 of a 32-element block (word j of its indices) at scale d.
fn iq4_word(q: u32, d: f32) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(d * iq4_nibbles(q, 0u), d * iq4_nibbles(q, 4u));
}
