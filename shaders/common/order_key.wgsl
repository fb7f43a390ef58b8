// Order-preserving u32 keys of f32 bits (`coco::reference::sample::order_key`): a larger
// float has a larger key, so comparisons and radix digits work on plain u32s, with nothing
// depending on how a driver treats NaN or ±inf (WGSL lets implementations assume there are
// none). key(x) = bits | 0x80000000 for x ≥ 0, ~bits for x < 0; -0.0 maps like +0.0; every
// non-NaN value gets a key ≥ key(-inf) = 0x007fffff, and NaN gets 0.

fn is_nan(bits: u32) -> bool {
    return (bits & 0x7fffffffu) > 0x7f800000u;
}

fn key_of(bits: u32) -> u32 {
    if (is_nan(bits)) {
        return 0u;
    }
    var b = bits;
    if (b == 0x80000000u) {
        b = 0u; // -0.0 ties with +0.0
    }
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}
