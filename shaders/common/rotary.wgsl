// RoPE's rotation, shared by rope.wgsl and matmul.wgsl (QKV with ROPE_KV).

// sin and cos of `a`, accurate to a few f32 ulps for |a| up to ~6400 (and degrading only
// slowly beyond). WGSL's own sin/cos promise an absolute error of 2^-11 and only on
// [-pi, pi]; RoPE angles reach thousands of radians, so the reduction is done here.
//
// Cody-Waite: k = round(a / (pi/2)), r = a - k * pi/2 with pi/2 split into three parts.
// HALF_PI_1 has 8 significant bits and HALF_PI_2 12, so k * HALF_PI_1 and k * HALF_PI_2
// are exact while k < 4096, and each subtraction is exact or nearly so; |r| <= pi/4.
const HALF_PI_1: f32 = 1.5703125;              // 201 / 2^7
const HALF_PI_2: f32 = 4.838705062866211e-4;   // 4059 / 2^23
const HALF_PI_3: f32 = -4.371139e-8;           // pi/2 - HALF_PI_1 - HALF_PI_2
const TWO_OVER_PI: f32 = 0.6366197723675814;

fn sin_cos(a: f32) -> vec2<f32> {
    let k = round(a * TWO_OVER_PI);
    let r = ((a - k * HALF_PI_1) - k * HALF_PI_2) - k * HALF_PI_3;
    let z = r * r;
    // Taylor series to r^11 / r^12: the truncation error on |r| <= pi/4 is below 1e-10,
    // far under f32 rounding.
    let s = r * (1.0 + z * (-1.0 / 6.0 + z * (1.0 / 120.0 + z * (-1.0 / 5040.0
        + z * (1.0 / 362880.0 + z * (-1.0 / 39916800.0))))));
    let c = 1.0 + z * (-0.5 + z * (1.0 / 24.0 + z * (-1.0 / 720.0 + z * (1.0 / 40320.0
        + z * (-1.0 / 3628800.0 + z * (1.0 / 479001600.0))))));
    // a = k·pi/2 + r: quadrant q turns (sin r, cos r) by q quarter turns.
    switch (i32(k) & 3) {
        case 0: { return vec2<f32>(s, c); }
        case 1: { return vec2<f32>(c, -s); }
        case 2: { return vec2<f32>(-s, -c); }
        default: { return vec2<f32>(-c, s); }
    }
}

// (sin, cos) rotation of the pair (x0, x1).
fn rotate(x0: f32, x1: f32, sc: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(x0 * sc.y - x1 * sc.x, x0 * sc.x + x1 * sc.y);
}
