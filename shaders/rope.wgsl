// Rotary position embedding, in place, one invocation per rotated pair.
// Token t of the step sits at position pos0 + t; pair i turns by angle pos * inv_freq[i].
//
// Variants (defines, because they change which elements pair up):
//   NORMAL   pairs (2i, 2i + 1)          llama GGUFs (the converter permutes Q/K weights)
//   NEOX     pairs (i, i + head_dim/2)   qwen2, gemma3 (HF's rotate_half)

struct Params {
    t: u32,
    heads: u32,
    head_dim: u32,
    pos0: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [T, heads, head_dim]
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>; // [head_dim / 2]

const WG: u32 = 256u;

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

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = p.head_dim / 2u;
    let idx = (wid.y * groups.x + wid.x) * WG + lid;
    if (idx >= p.t * p.heads * half) {
        return;
    }
    let row = idx / half;          // token * heads + head
    let i = idx % half;            // pair index
    let pos = p.pos0 + row / p.heads;

    // One f32 product, as HF forms the angle (inv_freq @ position_ids in float32), so the
    // angle carries the same rounding as the reference model's.
    let sc = sin_cos(f32(pos) * inv_freq[i]);

    let base = row * p.head_dim;
#ifdef NORMAL
    let ia = base + 2u * i;
    let ib = ia + 1u;
#endif
#ifdef NEOX
    let ia = base + i;
    let ib = ia + half;
#endif
    let x0 = x[ia];
    let x1 = x[ib];
    x[ia] = x0 * sc.y - x1 * sc.x;
    x[ib] = x0 * sc.x + x1 * sc.y;
}
