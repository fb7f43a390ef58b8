// Attention over the KV cache, and the cache write that precedes it.
//
// Variants (defines; the binding layouts differ):
//   KV_WRITE    k_cache[pos0 + t] = k[t], v_cache[pos0 + t] = v[t]; one invocation per element
//   TILED       out = softmax(cap(scale * q k^T)) v, causal, optionally windowed, grouped-query;
//               one workgroup per (head, tile of query tokens) walks all their keys
//   SPLIT       flash-decoding: one workgroup per (key range, head, query token) writes the
//               range's running max m, sum l and unnormalized sum acc of p * v; with
//               LAST_COMBINES the last of them to finish for its (token, head) merges the
//               ranges with the log-sum-exp rescaling and writes out
//   COMBINE     the merge as its own dispatch, one workgroup per (head, query token)
//   (SPLIT and COMBINE also take RANGES, the partials' layout; MERGE adds the merge)
//   EMIT_LEVELS (with MERGE) the merge also writes out as the int8 levels of W_o's x' (the
//               chunk matvec's LEVELS_IN), so W_o quantizes nothing itself; needs subgroups
//               and head_dim a multiple of 32 (whole chunks per head)
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

#ifdef TILED
// Flash attention over tiles (Dao et al. 2022) for every step the plan doesn't split, which is
// all of prefill. A workgroup owns BQ consecutive query tokens of one head and walks their
// visible keys in blocks of BK: the block's K rows, then its V rows, are staged once in
// workgroup memory and serve all BQ queries. (The one-query-per-workgroup kernel this replaced
// re-read every key row from global memory per query and summed values one key per loop
// trip: 1.9 ms per Llama-3.2-1B layer for a 512-token prefill on the H200.)
//
// Prepended by kernels/attention.rs: HD (head_dim, a multiple of 4), BQ and BK, chosen so the
// three tiles fit WebGPU's guaranteed 16 KiB of workgroup memory for any HD <= 256
// (BQ·HD <= 1024 and BK·HD <= 2048 floats, BQ·BK <= 512). Tile rows are padded by one vec4 so
// that neighbouring rows start in different banks (the score phase reads 8 rows at once).
#include "common/attention_pass.wgsl"

@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>; // [T, heads, HD / 4]

const WG: u32 = 128u;
const HD4: u32 = HD / 4u;
const ROW: u32 = HD4 + 1u;  // padded tile row, in vec4
const SROW: u32 = BK + 1u;  // padded row of scores
// Invocations per query row in the softmax and P·V phase; each owns vec4 `part` and
// `part + TPQ` of the row (HD4 <= 2·TPQ follows from BQ·HD <= 1024).
const TPQ: u32 = WG / BQ;
var<workgroup> q_tile: array<vec4<f32>, BQ * ROW>;
var<workgroup> kv_tile: array<vec4<f32>, BK * ROW>; // the block's K rows, then its V rows
var<workgroup> scores: array<f32, BQ * SROW>;

// Stores the score of tile query `qi` and block key `jj` (cache row j0 + jj) from its dot
// product's four partial sums, or LOWEST where the mask hides the key.
fn store_score(qi: u32, jj: u32, j0: u32, t0: u32, n_q: u32, dot4: vec4<f32>) {
    let j = j0 + jj;
    let pos = p.pos0 + t0 + qi;
    var s = LOWEST;
    if (qi < n_q && j <= pos && j >= first_key(pos)) {
        s = ((dot4.x + dot4.y) + (dot4.z + dot4.w)) * p.scale;
        if (p.softcap > 0.0) {
            s = softcap(s, p.softcap);
        }
    }
    scores[qi * SROW + jj] = s;
}

// Stages cache rows j0 .. j0 + BK of one kv head (its vec4s from `head4` in rows of `row4`),
// values or keys, zeros past row `last`. Coalesced: consecutive invocations, consecutive vec4s.
fn stage_block(values: bool, j0: u32, last: u32, row4: u32, head4: u32, lid: u32) {
    for (var i = lid; i < BK * HD4; i += WG) {
        let jj = i / HD4;
        let d = i % HD4;
        var v = vec4<f32>(0.0);
        if (j0 + jj <= last) {
            let at = (j0 + jj) * row4 + head4 + d;
            if (values) {
                v = v_cache[at];
            } else {
                v = k_cache[at];
            }
        }
        kv_tile[jj * ROW + d] = v;
    }
}

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let h = wid.x;
    let t0 = wid.y * BQ;
    let kvh = h / (p.heads / p.kv_heads);
    let row4 = p.kv_heads * HD4;
    let head4 = kvh * HD4;
    let n_q = min(BQ, p.t - t0);      // queries in this tile
    let last = p.pos0 + t0 + n_q - 1u; // the last key any of them sees

    for (var i = lid; i < BQ * HD4; i += WG) {
        let qi = i / HD4;
        var v = vec4<f32>(0.0);
        if (qi < n_q) {
            v = q[((t0 + qi) * p.heads + h) * HD4 + i % HD4];
        }
        q_tile[qi * ROW + i % HD4] = v;
    }

    // This invocation's query row and output vec4s in the softmax and P·V phase. Online
    // softmax (Milakov & Gimelshein 2018): m is the row's running max, l its running sum of
    // exp(s - m), acc its running Σ exp(s - m)·v, rescaled when m grows; the TPQ invocations
    // of a row keep the same m and l.
    let row = lid / TPQ;
    let part = lid % TPQ;
    let part2 = part + TPQ;
#ifdef PV4
    // A tile of BQ·HD > 1024 floats (COCO_ATTN_BLOCKED's larger tiles): up to 4 vec4s each.
    let part3 = part + 2u * TPQ;
    let part4 = part + 3u * TPQ;
    var acc3 = vec4<f32>(0.0);
    var acc4 = vec4<f32>(0.0);
#endif
    var m = LOWEST;
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    for (var j0 = first_key(p.pos0 + t0); j0 <= last; j0 += BK) {
        stage_block(false, j0, last, row4, head4, lid);
        workgroupBarrier();
#ifdef SCORES_2X2
        // Scores as 2 × 2 blocks (COCO_ATTN_BLOCKED=1; the tile has 4 per invocation):
        // invocation lid takes queries qa, qa + BQ/2 and keys ka, ka + BK/2, so each vec4 of
        // q and k it loads feeds two dot products. BQ/2 consecutive invocations read BQ/2
        // different query rows (padded into different banks) and the same key rows
        // (broadcasts). Each pair's sum runs in the same order as below: the same scores.
        {
            let qa = lid % (BQ / 2u);
            let ka = lid / (BQ / 2u);
            let qb = qa + BQ / 2u;
            let kb = ka + BK / 2u;
            var d00 = vec4<f32>(0.0);
            var d01 = vec4<f32>(0.0);
            var d10 = vec4<f32>(0.0);
            var d11 = vec4<f32>(0.0);
            for (var d = 0u; d < HD4; d++) {
                let q0 = q_tile[qa * ROW + d];
                let q1 = q_tile[qb * ROW + d];
                let k0 = kv_tile[ka * ROW + d];
                let k1 = kv_tile[kb * ROW + d];
                d00 = fma(q0, k0, d00);
                d01 = fma(q0, k1, d01);
                d10 = fma(q1, k0, d10);
                d11 = fma(q1, k1, d11);
            }
            store_score(qa, ka, j0, t0, n_q, d00);
            store_score(qa, kb, j0, t0, n_q, d01);
            store_score(qb, ka, j0, t0, n_q, d10);
            store_score(qb, kb, j0, t0, n_q, d11);
        }
#else
        // Scores of every (query, key) pair of the tile; consecutive invocations take
        // consecutive queries of one key, so the key row is a broadcast.
        for (var i = lid; i < BQ * BK; i += WG) {
            let qi = i % BQ;
            let jj = i / BQ;
            let pos = p.pos0 + t0 + qi;
            var dot4 = vec4<f32>(0.0);
            if (qi < n_q && j0 + jj <= pos && j0 + jj >= first_key(pos)) {
                for (var d = 0u; d < HD4; d++) {
                    dot4 = fma(q_tile[qi * ROW + d], kv_tile[jj * ROW + d], dot4);
                }
            }
            store_score(qi, jj, j0, t0, n_q, dot4);
        }
#endif
        workgroupBarrier();
        stage_block(true, j0, last, row4, head4, lid);
#ifdef P_ONCE
        // COCO_ATTN_BLOCKED: the row's TPQ invocations each turn BK / TPQ of its scores into
        // p = exp(s - m_new) in place, between two barriers, instead of each computing all BK
        // exps (the same values: m_new is the same in all of them).
        var m_new = m;
        for (var jj = 0u; jj < BK; jj++) {
            m_new = max(m_new, scores[row * SROW + jj]);
        }
        workgroupBarrier(); // the values are staged and every row's max is read
        for (var jj = part; jj < BK; jj += TPQ) {
            let s = scores[row * SROW + jj];
            scores[row * SROW + jj] = select(0.0, exp(s - m_new), s > LOWEST);
        }
        workgroupBarrier();
#else
        workgroupBarrier();

        var m_new = m;
        for (var jj = 0u; jj < BK; jj++) {
            m_new = max(m_new, scores[row * SROW + jj]);
        }
#endif
        // exp(LOWEST - real) = 0 drops nothing; with nothing seen yet and a fully masked
        // block, m_new = m = LOWEST, the rescale is 1 and every p below is 0.
        let rescale = exp(m - m_new);
        m = m_new;
        l *= rescale;
        acc *= rescale;
        acc2 *= rescale;
#ifdef PV4
        acc3 *= rescale;
        acc4 *= rescale;
#endif
        for (var jj = 0u; jj < BK; jj++) {
#ifdef P_ONCE
            let pj = scores[row * SROW + jj];
#else
            let s = scores[row * SROW + jj];
            let pj = select(0.0, exp(s - m), s > LOWEST);
#endif
            l += pj;
            if (part < HD4) {
                acc = fma(vec4<f32>(pj), kv_tile[jj * ROW + part], acc);
            }
            if (part2 < HD4) {
                acc2 = fma(vec4<f32>(pj), kv_tile[jj * ROW + part2], acc2);
            }
#ifdef PV4
            if (part3 < HD4) {
                acc3 = fma(vec4<f32>(pj), kv_tile[jj * ROW + part3], acc3);
            }
            if (part4 < HD4) {
                acc4 = fma(vec4<f32>(pj), kv_tile[jj * ROW + part4], acc4);
            }
#endif
        }
        workgroupBarrier(); // the tiles are rewritten by the next block
    }

    // l >= 1 for a real query row: its largest score contributes exp(0).
    if (row < n_q) {
        let o = ((t0 + row) * p.heads + h) * HD4;
        if (part < HD4) {
            out[o + part] = acc / l;
        }
        if (part2 < HD4) {
            out[o + part2] = acc2 / l;
        }
#ifdef PV4
        if (part3 < HD4) {
            out[o + part3] = acc3 / l;
        }
        if (part4 < HD4) {
            out[o + part4] = acc4 / l;
        }
#endif
    }
}
#endif

#ifdef RANGES
// Flash-decoding, shared by SPLIT and COMBINE: the partials buffer and the merge.
struct Params {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32, // a multiple of 4 (the host checks)
    pos0: u32,
    window: u32, // 0 = no window
    scale: f32,
    splits: u32, // key ranges per (query token, head); at most MAX_SPLITS
    chunk: u32,  // keys per range (a multiple of BLOCK); range s of token t starts at first(t) + s * chunk
    softcap: f32, // > 0: scores <- softcap * tanh(score / softcap) (gemma2); 0 = none
    _pad1: u32,
    _pad2: u32,
}

// The partials, as u32 words accessed atomically (floats by bitcast):
//   [0, COUNTERS)  one arrival counter per (token, head), 0 between dispatches (attention.rs
//                  RANGE_COUNTERS: SPLIT_MAX_ROWS, the most rows a split step has);
//   then per (token, head, range) a record of 4 + head_dim words: m, l, 0, 0, acc[head_dim].
// Atomic accesses because in LAST_COMBINES one workgroup reads what others wrote in the
// same dispatch: an atomic load is never served from a stale cache line, and the writers'
// storageBarrier before their counter increment orders their records before it.
const COUNTERS: u32 = 512u;
const MAX_SPLITS: u32 = 1024u; // attention.rs MAX_SPLITS; 2 * 4 KiB of workgroup memory
const WG: u32 = 128u; // under SwiftShader's and WebGPU's default 256 cap
const LOWEST: f32 = -3.0e38; // as in TILED: finite, below any real score
// Ranges whose acc loads one invocation has in flight at once in the merge.
const UNROLL: u32 = 4u;

fn record_of(t: u32, h: u32, s: u32) -> u32 {
    return COUNTERS + ((t * p.heads + h) * p.splits + s) * (4u + p.head_dim);
}

fn load_f32(i: u32) -> f32 {
    return bitcast<f32>(atomicLoad(&partials[i]));
}

fn load_vec4(i: u32) -> vec4<f32> {
    return vec4<f32>(load_f32(i), load_f32(i + 1u), load_f32(i + 2u), load_f32(i + 3u));
}

fn store_vec4(i: u32, v: vec4<f32>) {
    atomicStore(&partials[i], bitcast<u32>(v.x));
    atomicStore(&partials[i + 1u], bitcast<u32>(v.y));
    atomicStore(&partials[i + 2u], bitcast<u32>(v.z));
    atomicStore(&partials[i + 3u], bitcast<u32>(v.w));
}

#ifdef MERGE
#ifdef EMIT_LEVELS
#include "common/levels.wgsl"
#endif
var<workgroup> range_m: array<f32, MAX_SPLITS>; // [splits] m of each range, then its weight
var<workgroup> range_l: array<f32, MAX_SPLITS>; // [splits] l of each range
var<workgroup> red: array<f32, WG>;             // [WG] tree reduction scratch
#endif
var<workgroup> sums: array<vec4<f32>, WG>;      // [groups, head_dim / 4] acc per group (SPLIT: per value group)
#ifdef MERGE

// The max (or sum) of x over the workgroup, in log2 steps rather than a serial scan over up
// to MAX_SPLITS ranges. Invocation lid's x covers ranges lid, lid + WG, …, so with fewer
// ranges than WG only the first `splits` hold any and the tree spans the power of two that
// covers them: 2 levels (and barriers) for 3 ranges instead of 7. Call from uniform control
// flow.
fn reduce(lid: u32, x: f32, is_max: bool) -> f32 {
    red[lid] = x;
    workgroupBarrier();
    var width = 1u;
    while (width < min(p.splits, WG)) {
        width *= 2u;
    }
    for (var stride = width / 2u; stride > 0u; stride /= 2u) {
        if (lid < stride) {
            let a = red[lid];
            let b = red[lid + stride];
            red[lid] = select(a + b, max(a, b), is_max);
        }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier(); // red is rewritten by the next reduction
    return r;
}

// Merges the ranges of (token t, head h) with the log-sum-exp rescaling and writes out.
// Call from uniform control flow.
fn merge_ranges(t: u32, h: u32, lid: u32) {
    let hd4 = p.head_dim / 4u;
    var m_mine = LOWEST;
    for (var s = lid; s < p.splits; s += WG) {
        let r = record_of(t, h, s);
        let m_s = load_f32(r);
        range_m[s] = m_s;
        range_l[s] = load_f32(r + 1u);
        m_mine = max(m_mine, m_s);
    }
    // Range 0 is never empty (it starts at the query's first visible key), so m is a real
    // score and the empty ranges (m = LOWEST) get weight 0.
    let m = reduce(lid, m_mine, true);
    // Each invocation rewrites only its own ranges; reduce's barriers publish the weights.
    var l_mine = 0.0;
    for (var s = lid; s < p.splits; s += WG) {
        let w = exp(range_m[s] - m);
        range_m[s] = w;
        l_mine += w * range_l[s];
    }
    // softmax · v = (sum_s w_s acc_s) / (sum_s w_s l_s). l >= 1: the range holding the
    // largest score has w = 1, and that score contributed exp(0) to its l.
    let l = reduce(lid, l_mine, false);

    // acc: hd4 neighbouring invocations read one range's acc row; the groups of them take
    // every groups-th range, UNROLL ranges per trip.
    let groups = WG / hd4;
    let v_lane = lid % hd4;
    let g = lid / hd4;
    if (g < groups) {
        var a = vec4<f32>(0.0);
        for (var s0 = g; s0 < p.splits; s0 += UNROLL * groups) {
            // All UNROLL rows' loads first, then their sums: the loads are atomic, which a
            // compiler does not hoist above the arithmetic between them.
            var rows: array<vec4<f32>, UNROLL>;
            for (var u = 0u; u < UNROLL; u++) {
                let s = s0 + u * groups;
                rows[u] = vec4<f32>(0.0);
                if (s < p.splits) {
                    rows[u] = load_vec4(record_of(t, h, s) + 4u + 4u * v_lane);
                }
            }
            for (var u = 0u; u < UNROLL; u++) {
                let s = s0 + u * groups;
                if (s < p.splits) {
                    a += range_m[s] * rows[u];
                }
            }
        }
        sums[lid] = a;
    }
    workgroupBarrier();
    var o = vec4<f32>(0.0);
    if (lid < hd4) {
        var a = vec4<f32>(0.0);
        for (var gg = 0u; gg < groups; gg++) {
            a += sums[gg * hd4 + lid];
        }
        o = a / l;
        out[(t * p.heads + h) * hd4 + lid] = o;
    }
#ifdef EMIT_LEVELS
    emit_head_levels(t, h, lid, o);
#endif
}

#ifdef EMIT_LEVELS
// Head h's output for token t (invocation lid < head_dim / 4 holds its vec4 `o`) as the int8
// levels of W_o's x': a head is head_dim / 32 whole chunks, eight invocations each (aligned
// groups of 8 lanes in subgroup order: lid = subgroup · size + lane, sizes multiples of 8), so
// a chunk's max and sums are subgroup shuffles, with no barrier. Call from uniform control
// flow.
fn emit_head_levels(t: u32, h: u32, lid: u32, o: vec4<f32>) {
    var m = max(max(abs(o.x), abs(o.y)), max(abs(o.z), abs(o.w)));
    for (var x = 1u; x < 8u; x *= 2u) {
        m = max(m, subgroupShuffleXor(m, x));
    }
    let scale = chunk_scale(m);
    let word = level_word(o, scale);
    var sum_a = word.sum_a;
    var sum_b = word.sum_b;
    for (var x = 1u; x < 8u; x *= 2u) {
        sum_a += subgroupShuffleXor(sum_a, x);
        sum_b += subgroupShuffleXor(sum_b, x);
    }
    if (lid < p.head_dim / 4u) {
        let n = p.heads * p.head_dim / 32u; // chunks per token
        let at = t * 5u * n + h * (p.head_dim / 32u) + lid / 8u;
        let w = lid % 8u;
        // Word w of planes a (a0: words 0-3, a1: 4-7) and b, as matmul's XChunk reads them.
        levels_out[at + (w / 4u) * n][w % 4u] = word.a;
        levels_out[at + (2u + w / 4u) * n][w % 4u] = word.b;
        if (w == 0u) {
            levels_out[at + 4u * n] = bitcast<vec4<u32>>(chunk_d(scale.x, sum_a, sum_b));
        }
    }
}
#endif
#endif
#endif

#ifdef SPLIT
// Everything as vec4: a row of head_dim floats is head_dim / 4 16-byte loads.
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>; // [T, heads, head_dim / 4]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<f32>>; // [ctx, kv_heads, head_dim / 4]
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<f32>>; // [ctx, kv_heads, head_dim / 4]
@group(0) @binding(4) var<storage, read_write> partials: array<atomic<u32>>; // see RANGES
#ifdef LAST_COMBINES
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>; // [T, heads, head_dim / 4]
var<workgroup> arrived: u32; // the counter's value before this workgroup's increment
#ifdef EMIT_LEVELS
@group(0) @binding(6) var<storage, read_write> levels_out: array<vec4<u32>>; // [T][5][heads · head_dim / 32]
#endif
#endif

const MAX_HD4: u32 = 64u; // MAX_HEAD_DIM / 4
// Keys per step of the online softmax (attention.rs SPLIT_BLOCK). A decode range is often
// a single block, so the work of a workgroup is about one round trip to memory.
const BLOCK: u32 = 16u;
// Scores: LANES neighbouring invocations share one key; lane i reads vec4s i, i + LANES, …
// of its row, so 8 lanes read 128 contiguous bytes per step and a 32-wide wave 4 rows.
const LANES: u32 = WG / BLOCK;
// Values: head_dim / 4 neighbouring invocations read one whole value row (one vec4 each);
// the WG / (head_dim / 4) >= 2 such groups take every group-th key of the block, so an
// invocation holds at most BLOCK / 2 of them.
const V_PER_GROUP: u32 = BLOCK / 2u;

var<workgroup> q_row: array<vec4<f32>, MAX_HD4>; // [head_dim / 4] the query
var<workgroup> dots: array<f32, WG>;         // [LANES, BLOCK] partial q·k
var<workgroup> scores: array<f32, BLOCK>;    // [BLOCK] scaled q·k of the block, LOWEST past its end

#include "common/softcap.wgsl"

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
    let hd4 = p.head_dim / 4u;
    let row4 = p.kv_heads * hd4; // one cache row (position)
    let head4 = kvh * hd4;

    let key = lid / LANES;
    let lane = lid % LANES;
    // The query row, in workgroup memory for every block. (This kernel first held q and
    // prefetched value rows in per-lane arrays indexed in loops; the H200's driver kept those
    // in local memory, and the kernel took 24 µs per Llama-1B layer instead of 15 µs.
    // BENCHMARKS.md "session 8".)
    let q_base = (t * p.heads + h) * hd4;
    if (lid < hd4) {
        q_row[lid] = q[q_base + lid];
    }
    workgroupBarrier();
    let v_groups = WG / hd4;
    let v_lane = lid % hd4;
    let v_group = lid / hd4; // idle when >= v_groups (head_dim / 4 not dividing WG)

    // Online softmax over the range, as in TILED. m and l are the same in every invocation
    // (each sums the whole block's probabilities); acc covers this invocation's value group
    // (every v_groups-th key) and dims v_lane, and the groups are added at the end.
    var m = LOWEST;
    var l = 0.0;
    var acc = vec4<f32>(0.0);
    for (var j0 = start; j0 < end; j0 += BLOCK) {
        let count = min(BLOCK, end - j0);
        // This invocation's value rows of the block, loaded before the scores are known so
        // that the K and V reads share one trip to memory (a decode range is often a single
        // block, so that trip is most of the workgroup's time). A fixed-size array indexed
        // only by the unrolled loop counters, so it stays in registers.
        var v_rows: array<vec4<f32>, V_PER_GROUP>;
        for (var i = 0u; i < V_PER_GROUP; i++) {
            let k = v_group + i * v_groups;
            v_rows[i] = vec4<f32>(0.0);
            if (v_group < v_groups && k < count) {
                v_rows[i] = v_cache[(j0 + k) * row4 + head4 + v_lane];
            }
        }

        var part = 0.0;
        if (key < count) {
            let k_base = (j0 + key) * row4 + head4;
            for (var d = lane; d < hd4; d += LANES) {
                part += dot(q_row[d], k_cache[k_base + d]);
            }
        }
        dots[lane * BLOCK + key] = part;
        workgroupBarrier();
        if (lid < BLOCK) {
            var dot_sum = 0.0;
            for (var i = 0u; i < LANES; i++) {
                dot_sum += dots[i * BLOCK + lid];
            }
            var score = dot_sum * p.scale;
            if (p.softcap > 0.0) {
                score = softcap(score, p.softcap);
            }
            scores[lid] = select(LOWEST, score, lid < count);
        }
        workgroupBarrier();
        // The next block writes dots only after this barrier and scores only after its
        // first one, which every invocation reaches after its reads of scores below.

        var m_new = m;
        for (var k = 0u; k < BLOCK; k++) {
            m_new = max(m_new, scores[k]);
        }
        // exp(LOWEST - m_new) = 0: keys past the range's end add nothing.
        var l_block = 0.0;
        for (var k = 0u; k < BLOCK; k++) {
            l_block += exp(scores[k] - m_new);
        }
        let rescale = exp(m - m_new); // 0 on the first block, since m = LOWEST
        m = m_new;
        l = l * rescale + l_block;
        acc *= rescale;
        for (var i = 0u; i < V_PER_GROUP; i++) {
            let k = v_group + i * v_groups;
            if (v_group < v_groups && k < count) {
                acc += exp(scores[k] - m_new) * v_rows[i];
            }
        }
    }

    // Merge the value groups: they share m, so their sums simply add.
    if (v_group < v_groups) {
        sums[lid] = acc; // lid = v_group * hd4 + v_lane
    }
    workgroupBarrier();
    let record = record_of(t, h, s);
    if (lid == 0u) {
        store_vec4(record, vec4<f32>(m, l, 0.0, 0.0));
    }
    if (lid < hd4) {
        var a = vec4<f32>(0.0);
        for (var g = 0u; g < v_groups; g++) {
            a += sums[g * hd4 + lid];
        }
        store_vec4(record + 4u + 4u * lid, a);
    }
#ifdef LAST_COMBINES
    // The workgroup that finishes last for (t, h) merges the ranges, so flash-decoding is one
    // dispatch (issue 14: a global dependency is what a second dispatch costs). Its
    // storageBarrier is device-scoped release/acquire in naga's SPIR-V (OpControlBarrier
    // with memory scope Device); the counter is back at 0 for the next dispatch.
    storageBarrier();
    let counter = t * p.heads + h;
    if (lid == 0u) {
        arrived = atomicAdd(&partials[counter], 1u);
    }
    if (workgroupUniformLoad(&arrived) == p.splits - 1u) {
        storageBarrier();
        if (lid == 0u) {
            atomicStore(&partials[counter], 0u);
        }
        merge_ranges(t, h, lid);
    }
#endif
}
#endif

#ifdef COMBINE
// The separate merge dispatch (COCO_ATTN_MERGE=separate: the A/B baseline of
// LAST_COMBINES): one workgroup per (head, query token).
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> partials: array<atomic<u32>>; // see RANGES
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>; // [T, heads, head_dim / 4]
#ifdef EMIT_LEVELS
@group(0) @binding(3) var<storage, read_write> levels_out: array<vec4<u32>>; // [T][5][heads · head_dim / 32]
#endif

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    merge_ranges(wid.y, wid.x, lid);
}
#endif
