// Attention over the KV cache, and the cache write that precedes it.
//
// Variants (defines; the binding layouts differ):
//   KV_WRITE    k_cache[pos0 + t] = k[t], v_cache[pos0 + t] = v[t]; one invocation per element
//   ATTENTION   out = softmax(scale * q k^T) v, causal, optionally windowed, grouped-query;
//               one workgroup per (head, query token)
//
// Mask convention: query token t sits at position pos = pos0 + t and sees cache rows j with
//   j <= pos                      (causal), and, when window > 0,
//   j > pos - window              (the `window` most recent positions, itself included).
// This is HF's sliding_window_overlay (kv_idx > q_idx - sliding_window) and llama.cpp's
// SWA mask (masked when pos - j >= n_swa).

#ifdef KV_WRITE
struct Params {
    n: u32,      // t * kv_heads * head_dim: elements of k (and of v)
    offset: u32, // pos0 * kv_heads * head_dim: where row pos0 starts in the caches
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> k: array<f32>; // [T, kv_heads, head_dim]
@group(0) @binding(2) var<storage, read> v: array<f32>; // [T, kv_heads, head_dim]
@group(0) @binding(3) var<storage, read_write> k_cache: array<f32>; // [ctx, kv_heads, head_dim]
@group(0) @binding(4) var<storage, read_write> v_cache: array<f32>; // [ctx, kv_heads, head_dim]

const WG: u32 = 256u;

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Rows pos0.. of a [ctx, kv_heads, head_dim] cache are contiguous, so this is a copy.
    let i = (wid.y * groups.x + wid.x) * WG + lid;
    if (i >= p.n) {
        return;
    }
    k_cache[p.offset + i] = k[i];
    v_cache[p.offset + i] = v[i];
}
#else
struct Params {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32, // 0 = no window
    scale: f32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>; // [T, heads, head_dim]
@group(0) @binding(2) var<storage, read> k_cache: array<f32>; // [ctx, kv_heads, head_dim]
@group(0) @binding(3) var<storage, read> v_cache: array<f32>; // [ctx, kv_heads, head_dim]
@group(0) @binding(4) var<storage, read_write> out: array<f32>; // [T, heads, head_dim]

// Invocations per workgroup, which is also the number of keys scored per block.
// 128 stays under SwiftShader's 256 cap.
const WG: u32 = 128u;
// Largest head_dim (gemma3): each invocation owns DIMS = MAX_HEAD_DIM / WG output dims.
const MAX_HEAD_DIM: u32 = 256u;
const DIMS: u32 = 2u;
// Below any real score; finite, because WGSL lets implementations assume no infinities.
const LOWEST: f32 = -3.0e38;

var<workgroup> q_row: array<f32, MAX_HEAD_DIM>; // [head_dim] this query
var<workgroup> block: array<f32, WG>;           // [WG] scores, then probabilities, of a block

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let h = wid.x;
    let t = wid.y;
    let kvh = h / (p.heads / p.kv_heads);
    let pos = p.pos0 + t;
    var first = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        first = pos + 1u - p.window;
    }
    let hd = p.head_dim;
    let row_stride = p.kv_heads * hd;  // one cache row (position)
    let head_off = kvh * hd;

    let q_base = (t * p.heads + h) * hd;
    for (var d = lid; d < hd; d += WG) {
        q_row[d] = q[q_base + d];
    }
    workgroupBarrier();

    // Online softmax (Milakov & Gimelshein 2018) over blocks of WG keys: m is the running
    // max, l the running sum of exp(s - m), acc the running sum of exp(s - m) * v, all
    // rescaled when m grows. Every invocation keeps the same m and l; it owns dims
    // lid, lid + WG of acc.
    var m = LOWEST;
    var l = 0.0;
    var acc = array<f32, DIMS>(0.0, 0.0);
    for (var j0 = first; j0 <= pos; j0 += WG) {
        let count = min(WG, pos + 1u - j0);

        // Scores: invocation lid takes key j0 + lid.
        if (lid < count) {
            let k_base = (j0 + lid) * row_stride + head_off;
            var dot = 0.0;
            for (var d = 0u; d < hd; d++) {
                dot += q_row[d] * k_cache[k_base + d];
            }
            block[lid] = dot * p.scale;
        }
        workgroupBarrier();

        var m_new = m;
        for (var j = 0u; j < count; j++) {
            m_new = max(m_new, block[j]);
        }
        workgroupBarrier(); // everyone has read the scores before they are overwritten
        if (lid < count) {
            block[lid] = exp(block[lid] - m_new);
        }
        workgroupBarrier();

        let rescale = exp(m - m_new); // 0 on the first block, since m = LOWEST
        m = m_new;
        l *= rescale;
        for (var c = 0u; c < DIMS; c++) {
            acc[c] *= rescale;
        }
        for (var j = 0u; j < count; j++) {
            let pj = block[j];
            l += pj;
            let v_base = (j0 + j) * row_stride + head_off;
            for (var c = 0u; c < DIMS; c++) {
                let d = lid + c * WG;
                if (d < hd) {
                    acc[c] += pj * v_cache[v_base + d];
                }
            }
        }
        workgroupBarrier(); // the block is rewritten by the next iteration
    }

    // l >= 1: the largest score contributes exp(0).
    for (var c = 0u; c < DIMS; c++) {
        let d = lid + c * WG;
        if (d < hd) {
            out[q_base + d] = acc[c] / l;
        }
    }
}
#endif
