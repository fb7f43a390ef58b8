// Attention over the KV cache, and the cache write that precedes it.
//
// Variants (defines; the binding layouts differ):
//   KV_WRITE    k_cache[pos0 + t] = k[t], v_cache[pos0 + t] = v[t]; one invocation per element
//   SINGLE      out = softmax(scale * q k^T) v, causal, optionally windowed, grouped-query;
//               one workgroup per (head, query token) walks all its keys (the baseline)
//   SPLIT       flash-decoding, first half: one workgroup per (key range, head, query token)
//               writes the range's running max m, sum l and unnormalized sum acc of p * v
//   COMBINE     flash-decoding, second half: one workgroup per (head, query token) merges the
//               ranges with the log-sum-exp rescaling and writes out
// (Dao et al., "Flash-Decoding for long-context inference", 2023; the merge is the online
// softmax of Milakov & Gimelshein 2018 applied across workgroups.)
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
#endif

#ifdef SINGLE
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

#ifdef SPLIT
struct Params {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32, // 0 = no window
    scale: f32,
    splits: u32, // key ranges per (query token, head)
    chunk: u32,  // keys per range; range s of token t starts at first(t) + s * chunk
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>; // [T, heads, head_dim]
@group(0) @binding(2) var<storage, read> k_cache: array<f32>; // [ctx, kv_heads, head_dim]
@group(0) @binding(3) var<storage, read> v_cache: array<f32>; // [ctx, kv_heads, head_dim]
// [T, heads, splits, 2 + head_dim]: per range (m, l, acc[head_dim])
@group(0) @binding(4) var<storage, read_write> partials: array<f32>;

// 128 invocations stay under SwiftShader's and WebGPU's default 256 cap.
const WG: u32 = 128u;
const MAX_HEAD_DIM: u32 = 256u;
// Keys per iteration of the online softmax: one score per key, from LANES invocations.
const BLOCK: u32 = 64u;
// Scores: LANES neighbouring invocations share one key and read 8 consecutive f32 of its
// row (one 32-byte sector) per step, so a 32-wide wave reads 4 whole sectors. A wider lane
// group would need a longer reduction, and without subgroups that goes through memory.
const LANES: u32 = 8u;
const KEYS_PER_PASS: u32 = WG / LANES;
// The padded row of `dots`: 9 is odd, so the per-key sums below hit different banks.
const DOTS_ROW: u32 = LANES + 1u;
// Weighted sum of values: V_LANES invocations (one 32-wide wave) share a key and read
// 128 contiguous bytes of its value row; V_GROUPS such groups take every V_GROUPS-th key.
const V_LANES: u32 = 32u;
const V_GROUPS: u32 = WG / V_LANES;
const V_DIMS: u32 = MAX_HEAD_DIM / V_LANES; // dims of acc per invocation
const LOWEST: f32 = -3.0e38; // as in SINGLE: finite, below any real score

var<workgroup> q_row: array<f32, MAX_HEAD_DIM>;           // [head_dim] this query
var<workgroup> dots: array<f32, BLOCK * DOTS_ROW>;        // [BLOCK, LANES (+1 pad)] partial q·k
var<workgroup> scores: array<f32, BLOCK>;                 // [BLOCK] scaled q·k of the block
var<workgroup> probs: array<f32, BLOCK>;                  // [BLOCK] exp(score - m)
var<workgroup> sums: array<f32, V_GROUPS * MAX_HEAD_DIM>; // [V_GROUPS, head_dim] acc per group
var<workgroup> group_l: array<f32, V_GROUPS>;             // [V_GROUPS] l per group

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let s = wid.x;
    let h = wid.y;
    let t = wid.z;
    let kvh = h / (p.heads / p.kv_heads);
    let pos = p.pos0 + t;
    var first = 0u;
    if (p.window > 0u && pos + 1u > p.window) {
        first = pos + 1u - p.window;
    }
    // The chunk is sized for the step's last token, which sees the most keys; an earlier
    // token's last ranges may be empty, and then write m = LOWEST, l = 0, acc = 0.
    let start = first + s * p.chunk;
    let end = min(start + p.chunk, pos + 1u);
    let hd = p.head_dim;
    let row_stride = p.kv_heads * hd;
    let head_off = kvh * hd;

    let q_base = (t * p.heads + h) * hd;
    for (var d = lid; d < hd; d += WG) {
        q_row[d] = q[q_base + d];
    }
    workgroupBarrier();

    let lane = lid % LANES;
    let slot = lid / LANES;
    let v_lane = lid % V_LANES;
    let v_group = lid / V_LANES;
    // Online softmax over the range, as in SINGLE. m is the same in every invocation; l and
    // acc cover only this invocation's group of keys (every V_GROUPS-th), merged at the end.
    var m = LOWEST;
    var l = 0.0;
    var acc = array<f32, V_DIMS>();
    for (var j0 = start; j0 < end; j0 += BLOCK) {
        let count = min(BLOCK, end - j0);

        // Partial dot products: invocation (slot, lane) takes dims lane, lane + LANES, …
        // of keys slot, slot + KEYS_PER_PASS, … of the block.
        for (var k = slot; k < count; k += KEYS_PER_PASS) {
            let k_base = (j0 + k) * row_stride + head_off;
            var dot = 0.0;
            for (var d = lane; d < hd; d += LANES) {
                dot += q_row[d] * k_cache[k_base + d];
            }
            dots[k * DOTS_ROW + lane] = dot;
        }
        workgroupBarrier();
        if (lid < count) {
            var dot = 0.0;
            for (var i = 0u; i < LANES; i++) {
                dot += dots[lid * DOTS_ROW + i];
            }
            scores[lid] = dot * p.scale;
        }
        workgroupBarrier();

        var m_new = m;
        for (var k = 0u; k < count; k++) {
            m_new = max(m_new, scores[k]);
        }
        // A separate array, so nobody overwrites a score another invocation still reads.
        if (lid < count) {
            probs[lid] = exp(scores[lid] - m_new);
        }
        workgroupBarrier();
        // The next block writes dots, scores and probs only after its first, second and
        // third barrier, each of which every invocation reaches after its reads here.

        let rescale = exp(m - m_new); // 0 on the first block, since m = LOWEST
        m = m_new;
        l *= rescale;
        for (var i = 0u; i < V_DIMS; i++) {
            acc[i] *= rescale;
        }
        for (var k = v_group; k < count; k += V_GROUPS) {
            let pk = probs[k];
            l += pk;
            let v_base = (j0 + k) * row_stride + head_off;
            // A constant trip count, so acc stays in registers once unrolled.
            for (var i = 0u; i < V_DIMS; i++) {
                let d = v_lane + i * V_LANES;
                if (d < hd) {
                    acc[i] += pk * v_cache[v_base + d];
                }
            }
        }
    }

    // Merge the groups: they share m, so their sums simply add.
    for (var i = 0u; i < V_DIMS; i++) {
        let d = v_lane + i * V_LANES;
        if (d < hd) {
            sums[v_group * MAX_HEAD_DIM + d] = acc[i];
        }
    }
    if (v_lane == 0u) {
        group_l[v_group] = l;
    }
    workgroupBarrier();

    let out_base = ((t * p.heads + h) * p.splits + s) * (hd + 2u);
    if (lid == 0u) {
        var l_all = 0.0;
        for (var g = 0u; g < V_GROUPS; g++) {
            l_all += group_l[g];
        }
        partials[out_base] = m;
        partials[out_base + 1u] = l_all;
    }
    for (var d = lid; d < hd; d += WG) {
        var a = 0.0;
        for (var g = 0u; g < V_GROUPS; g++) {
            a += sums[g * MAX_HEAD_DIM + d];
        }
        partials[out_base + 2u + d] = a;
    }
}
#endif

#ifdef COMBINE
struct Params {
    heads: u32,
    head_dim: u32,
    splits: u32, // key ranges per (query token, head); at most MAX_SPLITS
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// [T, heads, splits, 2 + head_dim]: per range (m, l, acc[head_dim]), from SPLIT
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // [T, heads, head_dim]

const WG: u32 = 128u;
// Bounds the host's split count (attention.rs MAX_SPLITS); 2 * 2 KiB of workgroup memory.
const MAX_SPLITS: u32 = 512u;
const LOWEST: f32 = -3.0e38;

var<workgroup> range_m: array<f32, MAX_SPLITS>; // [splits] m of each range
var<workgroup> weight: array<f32, MAX_SPLITS>;  // [splits] exp(m_s - max_s m_s)

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let h = wid.x;
    let t = wid.y;
    let hd = p.head_dim;
    let row = hd + 2u;
    let base = (t * p.heads + h) * p.splits * row;

    for (var s = lid; s < p.splits; s += WG) {
        range_m[s] = partials[base + s * row];
    }
    workgroupBarrier();
    var m = LOWEST;
    for (var s = 0u; s < p.splits; s++) {
        m = max(m, range_m[s]);
    }
    // Range 0 is never empty (it starts at the query's first visible key), so m is a real
    // score and the empty ranges (m = LOWEST) get weight 0.
    for (var s = lid; s < p.splits; s += WG) {
        weight[s] = exp(range_m[s] - m);
    }
    workgroupBarrier();

    // softmax · v = (sum_s w_s acc_s) / (sum_s w_s l_s). l >= 1: the range holding the
    // largest score has w = 1, and that score contributed exp(0) to its l.
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        l += weight[s] * partials[base + s * row + 1u];
    }
    let out_base = (t * p.heads + h) * hd;
    for (var d = lid; d < hd; d += WG) {
        var a = 0.0;
        for (var s = 0u; s < p.splits; s++) {
            a += weight[s] * partials[base + s * row + 2u + d];
        }
        out[out_base + d] = a / l;
    }
}
#endif
