// gemma3's (and qwen3's) per-head RMSNorm of q and k folded into the Q/K/V + RoPE matvec
// (QK_NORM, with ROPE_KV): included by matmul.wgsl, whose matvec mains call qk_norm_store in
// place of store_slot.
//
// The norm of a head needs all head_dim of its outputs, which several workgroups compute (or
// one workgroup computes several heads'). So every workgroup records its finished q and k
// values in a scratch, then bumps the arrival counter of each head its slots touch; the last
// workgroup to arrive for a head reads the head back, takes its Σy², scales by
// rsqrt(mean + eps) · q_norm_w (or k_norm_w) and rotates: q into y, k into the K cache. v
// needs no norm and goes straight to the V cache. This is the rope_kv_write dispatch with
// QK_NORM (rope.wgsl) folded in, by the mechanism of post_norm.wgsl. Each storageBarrier is
// device-scoped in naga's SPIR-V: the records are ordered before the counter increment, and
// the last workgroup's reads after it.

@group(0) @binding(B_QKN) var<storage, read> q_norm_w: array<f32>;      // [head_dim] f32
@group(0) @binding(B_QKN + 1u) var<storage, read> k_norm_w: array<f32>; // [head_dim] f32
// u32 words, accessed atomically (floats by bitcast): an arrival counter per (token, q or k
// head) in [0, POST_COUNTERS), 0 between dispatches, then the q and k rows [T, rows.x + rows.y].
@group(0) @binding(B_QKN + 2u) var<storage, read_write> qkn_scratch: array<atomic<u32>>;

var<workgroup> qkn_arrived: u32;
var<workgroup> qkn_sum: array<f32, 128>; // a head's Σy² per pair (head_dim ≤ 256)

// The offsets within a head of pair i, as rope.wgsl pairs them: NeoX (i, i + rot_half) for
// the rotated pairs, then (2i, 2i + 1) over the pass-through dimensions; llama's (2i, 2i + 1).
fn qkn_pair(i: u32) -> vec2<u32> {
#ifdef ROPE_NEOX
    if (i < p.rot_half) {
        return vec2<u32>(i, i + p.rot_half);
    }
#endif
    return vec2<u32>(2u * i, 2u * i + 1u);
}

// The last workgroup's part for head h (q heads, then k heads) of token t: norm and rotate.
fn qk_norm_head(t: u32, h: u32, li: u32) {
    let hd = p.head_dim;
    let heads = p.rows.x / hd;
    let is_k = h >= heads;
    let base = POST_COUNTERS + t * (p.rows.x + p.rows.y) + h * hd;
    let o = qkn_pair(li);
    let live = li < hd / 2u;
    var a = 0.0;
    var b = 0.0;
    if (live) {
        a = bitcast<f32>(atomicLoad(&qkn_scratch[base + o.x]));
        b = bitcast<f32>(atomicLoad(&qkn_scratch[base + o.y]));
    }
    if (li < 128u) {
        qkn_sum[li] = a * a + b * b;
    }
    workgroupBarrier();
    for (var s = 64u; s > 0u; s >>= 1u) {
        if (li < s) {
            qkn_sum[li] += qkn_sum[li + s];
        }
        workgroupBarrier();
    }
    let scale = inverseSqrt(qkn_sum[0] / f32(hd) + p.qk_eps);
    workgroupBarrier(); // everyone has the sum before another head reuses qkn_sum
    if (live) {
        var wa = q_norm_w[o.x];
        var wb = q_norm_w[o.y];
        if (is_k) {
            wa = k_norm_w[o.x];
            wb = k_norm_w[o.y];
        }
        let pos = p.pos0 + t;
        var sc = vec2<f32>(0.0, 1.0);
        if (li < p.rot_half) {
            sc = p.rot_scale * sin_cos(f32(pos) * inv_freq[li]);
        }
        let r = rotate(a * scale * wa, b * scale * wb, sc);
        if (is_k) {
            let dst = pos * p.n.y + (h - heads) * hd;
            y1[dst + o.x] = r.x;
            y1[dst + o.y] = r.y;
        } else {
            let dst = t * p.n.x + h * hd;
            y[dst + o.x] = r.x;
            y[dst + o.y] = r.y;
        }
    }
}

// The QK_NORM epilogue of row group rg for token t, called by every invocation: slot li
// (`has`: a live slot) of weight and slot row `mr` finished with the dot product `v`.
fn qk_norm_store(t: u32, li: u32, rg: u32, mr: vec2<u32>, v: f32, has: bool) {
    let hd = p.head_dim;
    let qk_rows = p.rows.x + p.rows.y;
    if (has) {
        if (mr.x == 2u) {
            y2[(p.pos0 + t) * p.n.z + mr.y] = v + bias_of(2u, mr.y);
        } else {
            wsel = mr.x;
            let row = slot_row(mr.y);
            let flat = select(0u, p.rows.x, mr.x == 1u) + row;
            let value = v + bias_of(mr.x, row);
            atomicStore(&qkn_scratch[POST_COUNTERS + t * qk_rows + flat], bitcast<u32>(value));
        }
    }
    let first = rg * MV_ROWS;
    if (first >= qk_rows) {
        return; // uniform: a workgroup of v rows only
    }
    storageBarrier();
    let last = min(first + MV_ROWS, qk_rows) - 1u;
    // Heads touched by this row group; head h's slots are h·hd .. (h + 1)·hd - 1 (NeoX's pair
    // order stays inside a head), so the row groups that touch it are these many.
    for (var h = first / hd; h <= last / hd; h++) {
        let arrivals = ((h + 1u) * hd - 1u) / MV_ROWS - (h * hd) / MV_ROWS + 1u;
        let counter = t * (qk_rows / hd) + h;
        if (li == 0u) {
            qkn_arrived = atomicAdd(&qkn_scratch[counter], 1u);
        }
        if (workgroupUniformLoad(&qkn_arrived) == arrivals - 1u) {
            storageBarrier();
            if (li == 0u) {
                atomicStore(&qkn_scratch[counter], 0u); // ready for the next dispatch
            }
            qk_norm_head(t, h, li);
        }
        workgroupBarrier(); // qkn_arrived is read before the next head's increment
    }
}
