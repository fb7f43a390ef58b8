// Rotary position embedding, in place, one invocation per pair of a head's dimensions.
// Token t of the step sits at position pos0 + t; rotated pair i < rot_half turns by angle
// pos * inv_freq[i], scaled by rot_scale (LongRoPE's attention factor, else 1). With partial
// rotation (rot_half < head_dim / 2: Phi-4-mini turns 96 of 128 dimensions) the pairs from
// rot_half on are the pass-through dimensions, copied unturned.
//
// Variants (defines, because they change which elements pair up):
//   NORMAL   pairs (2i, 2i + 1)          llama GGUFs (the converter permutes Q/K weights)
//   NEOX     pairs (i, i + rot_half)     qwen2, gemma3, phi3 (HF's rotate_half on the
//            rotated dimensions), then (2i, 2i + 1) over the pass-through ones
// and, for the fused pipeline:
//   KV       also the KV-cache write: each token's rows are its `heads` Q heads, rotated in
//            place in x, then its `kv_heads` K heads, rotated from k straight into k_cache
//            row pos0 + t, with the same two elements of v copied into v_cache. That is
//            rope(q), rope(k) and attention's kv_write in one dispatch instead of three
//            dependent ones (~5 µs each on the H200; BENCHMARKS.md).
//   QK_NORM  (with KV) also gemma3's per-head RMSNorm of Q and K before the rotation: one
//            workgroup per head row, whose invocations hold the row's pairs, sums their
//            squares in workgroup memory and scales by rsqrt(mean + eps) · q_norm_w (or
//            k_norm_w). Two more dependent dispatches per layer saved.

struct Params {
    t: u32,
    heads: u32,
    head_dim: u32,
    pos0: u32,
    kv_heads: u32, // KV only
    eps: f32,      // QK_NORM only
    rot_half: u32, // rotated pairs per head (rotated dimensions / 2)
    rot_scale: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>; // [T, heads, head_dim]
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>; // [head_dim / 2]
#ifdef KV
@group(0) @binding(3) var<storage, read> k: array<f32>; // [T, kv_heads, head_dim]
@group(0) @binding(4) var<storage, read> v: array<f32>; // [T, kv_heads, head_dim]
@group(0) @binding(5) var<storage, read_write> k_cache: array<f32>; // [ctx, kv_heads, head_dim]
@group(0) @binding(6) var<storage, read_write> v_cache: array<f32>; // [ctx, kv_heads, head_dim]
#endif
#ifdef QK_NORM
@group(0) @binding(7) var<storage, read> q_norm_w: array<f32>; // [head_dim]
@group(0) @binding(8) var<storage, read> k_norm_w: array<f32>; // [head_dim]
#endif

const WG: u32 = 256u;

#include "common/rotary.wgsl"

// The offsets within a head of pair i.
fn pair(i: u32) -> vec2<u32> {
#ifdef NEOX
    if (i < p.rot_half) {
        return vec2<u32>(i, i + p.rot_half);
    }
#endif
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The (sin, cos) that turn pair i at `pos`: scaled for a rotated pair, the identity (0, 1)
// for a pass-through one. One f32 product forms the angle, as HF forms it (inv_freq @
// position_ids in float32), so it carries the same rounding as the reference model's.
fn turn(i: u32, pos: u32) -> vec2<f32> {
    if (i >= p.rot_half) {
        return vec2<f32>(0.0, 1.0);
    }
    return p.rot_scale * sin_cos(f32(pos) * inv_freq[i]);
}

#ifndef QK_NORM
@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = p.head_dim / 2u;
#ifdef KV
    let rows_per_token = p.heads + p.kv_heads;
#else
    let rows_per_token = p.heads;
#endif
    let idx = (wid.y * groups.x + wid.x) * WG + lid;
    if (idx >= p.t * rows_per_token * half) {
        return;
    }
    let row = idx / half;          // token * rows_per_token + head
    let i = idx % half;            // pair index
    let tok = row / rows_per_token;
    let head = row % rows_per_token;
    let pos = p.pos0 + tok;

    let sc = turn(i, pos);
    let o = pair(i);
    let oa = o.x;
    let ob = o.y;
#ifdef KV
    if (head >= p.heads) {
        let kv_head = head - p.heads;
        let src = (tok * p.kv_heads + kv_head) * p.head_dim;
        let dst = (pos * p.kv_heads + kv_head) * p.head_dim;
        let r = rotate(k[src + oa], k[src + ob], sc);
        k_cache[dst + oa] = r.x;
        k_cache[dst + ob] = r.y;
        v_cache[dst + oa] = v[src + oa];
        v_cache[dst + ob] = v[src + ob];
        return;
    }
#endif
    let base = (tok * p.heads + head) * p.head_dim;
    let r = rotate(x[base + oa], x[base + ob], sc);
    x[base + oa] = r.x;
    x[base + ob] = r.y;
}
#endif

#ifdef QK_NORM
// Invocations per head row: the largest head (256) has 128 pairs.
const ROW_WG: u32 = 128u;
var<workgroup> partial: array<f32, ROW_WG>;

@compute @workgroup_size(ROW_WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let half = p.head_dim / 2u;
    let rows_per_token = p.heads + p.kv_heads;
    let row = wid.y * groups.x + wid.x; // token * rows_per_token + head
    if (row >= p.t * rows_per_token) {
        return; // uniform: the whole workgroup
    }
    let tok = row / rows_per_token;
    let head = row % rows_per_token;
    let pos = p.pos0 + tok;
    let is_k = head >= p.heads;
    let kv_head = head - select(0u, p.heads, is_k);
    let src = select((tok * p.heads + head) * p.head_dim, (tok * p.kv_heads + kv_head) * p.head_dim, is_k);
    let o = pair(lid);
    let live = lid < half;
    var a = 0.0;
    var b = 0.0;
    if (live) {
        if (is_k) {
            a = k[src + o.x];
            b = k[src + o.y];
        } else {
            a = x[src + o.x];
            b = x[src + o.y];
        }
    }
    partial[lid] = a * a + b * b;
    workgroupBarrier();
    for (var s = ROW_WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (!live) {
        return;
    }
    let scale = inverseSqrt(partial[0] / f32(p.head_dim) + p.eps);
    var wa = q_norm_w[o.x];
    var wb = q_norm_w[o.y];
    if (is_k) {
        wa = k_norm_w[o.x];
        wb = k_norm_w[o.y];
    }
    let r = rotate(a * scale * wa, b * scale * wb, turn(lid, pos));
    if (is_k) {
        let dst = (pos * p.kv_heads + kv_head) * p.head_dim;
        k_cache[dst + o.x] = r.x;
        k_cache[dst + o.y] = r.y;
        v_cache[dst + o.x] = v[src + o.x];
        v_cache[dst + o.y] = v[src + o.y];
    } else {
        x[src + o.x] = r.x;
        x[src + o.y] = r.y;
    }
}
#endif
