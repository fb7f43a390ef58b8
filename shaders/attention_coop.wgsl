// Flash attention on tensor cores: the single-pass kernel of prefill steps where the device
// multiplies f16 blocks into f32 (GpuContext::coop_block), Q·Kᵀ and P·V as cooperative-matrix
// products. kernels/attention.rs prepends `enable f16; enable wgpu_cooperative_matrix;` and
// HD (head_dim, a multiple of 16), BQ (query tokens per tile, 32 or 64) and BK (keys per
// block, 32 or 64), chosen so the tiles fit the device's workgroup memory and every subgroup
// gets the same number of blocks (`coop_tile`). It runs with `COCO_ATTN_COOP=1` (off by
// default until timed on a GPU); otherwise attention.wgsl's TILED kernel runs, as on every
// device without cooperative matrices.
//
// Why: the TILED kernel computes every score and every p·v term on the f32 units, for tiles
// of 16 queries × 32 keys (WebGPU's 16 KiB of workgroup memory): on the H200 a 512-token
// Llama-3.2-1B prefill spent 2.3 of its 17.4 ms there (~7 TFLOP/s, BENCHMARKS.md "session
// 33"). Here the products run on the tensor cores and each staged key block serves 64 queries;
// what stays on the f32 units is the online softmax (one exp per score) and the rescale of
// the running output (one FMA per output element and key block).
//
// A workgroup owns BQ consecutive query tokens of one head. Per key block:
//   1. stage the block's K rows as f16 (kvt);                                      barrier
//   2. S = Q·Kᵀ: each subgroup NS blocks of CB × CB, stored as f32 rows (st);      barrier
//   3. stage the V rows over K (kvt); the online softmax over st: each row's TPR
//      invocations turn their KPL scores into p = exp(s − m_new) as f16 rows (pt),
//      and the row's rescale exp(m − m_new) goes to row_rescale;                   barrier
//   4. P·V: each subgroup NPV blocks of CB × CB into fresh accumulators, parked in st
//      (PSLOTS per subgroup at a time), then each lane folds its 8 values of a block
//      into its running outputs: o = o · rescale(row) + pv.                         2 barriers
// The running outputs stay in f32 registers (the cooperative matrices' elements can't be
// rescaled where they are), so only the block products round to f16.
//
// Numerics: q, k, v and p are rounded to f16 (relative error ≤ 2^-11 each), products and every
// sum in f32. f16 ends at 65,504: like llama.cpp, whose KV cache is f16 by default, this path
// assumes q, k and v within it.
//
// Mask convention: attention.wgsl's (causal, optional window).

#include "common/coop_block.wgsl"
#include "common/attention_pass.wgsl"

@group(0) @binding(4) var<storage, read_write> out: array<f32>;     // [T, heads, HD]

const WG: u32 = 256u;
const HD4: u32 = HD / 4u;
// Row strides. Every matrix load and store starts a row at a multiple of 16 bytes (what
// cooperative-matrix loads want), and the pads put neighbouring rows in other banks.
const QS: u32 = HD + 8u; // f16 rows of qt and kvt
const SS: u32 = BK + 4u; // f32 rows of st
const PS: u32 = BK + 8u; // f16 rows of pt
const QB: u32 = BQ / CB; // query blocks of the tile
const KB: u32 = BK / CB; // key blocks of a key block
const DB: u32 = HD / CB; // blocks across a head
const NS: u32 = QB * KB / NSG; // score blocks per subgroup
const NPV: u32 = QB * DB / NSG; // output blocks per subgroup
const PSLOTS: u32 = min(NPV, (BQ * SS) / (NSG * CB * CB)); // parked blocks per subgroup at once
const TPR: u32 = WG / BQ; // invocations per query row in the softmax
const KPL: u32 = BK / TPR; // scores per invocation in the softmax (a multiple of 4)

var<workgroup> qt: array<vec4<f16>, BQ * QS / 4u>;  // the tile's queries, row-major [q][d]
var<workgroup> kvt: array<vec4<f16>, BK * QS / 4u>; // the block's K rows, then its V rows [j][d]
var<workgroup> st: array<f32, BQ * SS>;             // scores [q][j]; then parked P·V blocks
var<workgroup> pt: array<vec4<f16>, BQ * PS / 4u>;  // p = exp(s − m) [q][j]
var<workgroup> zeros: array<f32, CB * CB>;          // what the accumulators start from
var<workgroup> row_rescale: array<f32, BQ>;
var<workgroup> row_sum: array<f32, BQ>;

// Stages cache rows j0 .. j0 + BK of one kv head as f16 rows of kvt, values or keys, zeros
// past row `last`. Coalesced: consecutive invocations, consecutive vec4s of a row.
fn stage_block(values: bool, j0: u32, last: u32, row4: u32, head4: u32, tid: u32) {
    for (var i = tid; i < BK * HD4; i += WG) {
        let jj = i / HD4;
        let d4 = i % HD4;
        var v = vec4<f32>(0.0);
        if (j0 + jj <= last) {
            let at = (j0 + jj) * row4 + head4 + d4;
            if (values) {
                v = v_cache[at];
            } else {
                v = k_cache[at];
            }
        }
        kvt[(jj * QS) / 4u + d4] = vec4<f16>(v);
    }
}

// The sum (or max) of x over the TPR consecutive lanes of a query row.
fn row_reduce(x: f32, is_max: bool) -> f32 {
    var r = x;
    for (var s = 1u; s < TPR; s <<= 1u) {
        let o = subgroupShuffleXor(r, s);
        r = select(r + o, max(r, o), is_max);
    }
    return r;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    // Invocation numbers from the subgroup's, so a query row's TPR invocations (TPR ≤ 8 ≤ the
    // subgroup size) are lanes of one subgroup for row_reduce's shuffles.
    let tid = sg * SGS + lane;
    let h = wid.x;
    let t0 = wid.y * BQ;
    let kvh = h / (p.heads / p.kv_heads);
    let row4 = p.kv_heads * HD4;
    let head4 = kvh * HD4;
    let n_q = min(BQ, p.t - t0);      // queries in this tile
    let last = p.pos0 + t0 + n_q - 1u; // the last key any of them sees

    for (var i = tid; i < BQ * HD4; i += WG) {
        let qi = i / HD4;
        var v = vec4<f32>(0.0);
        if (qi < n_q) {
            v = q[((t0 + qi) * p.heads + h) * HD4 + i % HD4];
        }
        qt[(qi * QS) / 4u + i % HD4] = vec4<f16>(v);
    }
    for (var i = tid; i < CB * CB; i += WG) {
        zeros[i] = 0.0;
    }

    // The softmax's row: its running max m (the same in its TPR invocations) and this
    // invocation's part of the running sum l, over its scores part·KPL .. + KPL − 1.
    let row = tid / TPR;
    let part = tid % TPR;
    let pos = p.pos0 + t0 + row;
    let row_live = row < n_q;
    var m = LOWEST;
    var l_part = 0.0;
    // This lane's outputs: of output block b (query block b % QB, head block b / QB, taken by
    // subgroup sg as b = sg·NPV + i), column lane % CB of rows lane / CB + (SGS / CB)·e.
    var o: array<f32, NPV * 8u>;
    for (var i = 0u; i < NPV * 8u; i++) {
        o[i] = 0.0;
    }
    workgroupBarrier();

    for (var j0 = first_key(p.pos0 + t0); j0 <= last; j0 += BK) {
        stage_block(false, j0, last, row4, head4, tid);
        workgroupBarrier();
        // S blocks: b = sg·NS + i, query block b % QB, key block b / QB.
        for (var i = 0u; i < NS; i++) {
            let b = sg * NS + i;
            let q0 = CB * (b % QB);
            let k0 = CB * (b / QB);
            var c = coopLoad<CoopC>(&zeros[0], CB);
            for (var d0 = 0u; d0 < HD; d0 += CB) {
                let a = coopLoadT<CoopA>(&qt[(q0 * QS + d0) / 4u], QS / 4u);
                let bk = coopLoad<CoopB>(&kvt[(k0 * QS + d0) / 4u], QS / 4u);
                c = coopMultiplyAdd(a, bk, c);
            }
            coopStoreT(c, &st[q0 * SS + k0], SS);
        }
        workgroupBarrier();

        stage_block(true, j0, last, row4, head4, tid);
        // The online softmax (Milakov & Gimelshein 2018) over this invocation's KPL scores.
        var s: array<f32, KPL>;
        var block_max = LOWEST;
        for (var e = 0u; e < KPL; e++) {
            let jj = part * KPL + e;
            let j = j0 + jj;
            var v = LOWEST;
            if (row_live && j <= pos && j >= first_key(pos)) {
                v = st[row * SS + jj] * p.scale;
                if (p.softcap > 0.0) {
                    v = softcap(v, p.softcap);
                }
            }
            s[e] = v;
            block_max = max(block_max, v);
        }
        // exp(LOWEST − real) = 0 drops nothing; with nothing seen yet and a fully masked
        // block, m_new = m = LOWEST, the rescale is 1 and every p is 0.
        let m_new = max(m, row_reduce(block_max, true));
        let rescale = exp(m - m_new);
        m = m_new;
        var sum = 0.0;
        for (var e = 0u; e < KPL; e += 4u) {
            var pv = vec4<f32>(0.0);
            for (var f = 0u; f < 4u; f++) {
                pv[f] = select(0.0, exp(s[e + f] - m_new), s[e + f] > LOWEST);
            }
            sum += (pv.x + pv.y) + (pv.z + pv.w);
            pt[(row * PS + part * KPL + e) / 4u] = vec4<f16>(pv);
        }
        l_part = l_part * rescale + sum;
        if (part == 0u) {
            row_rescale[row] = rescale;
        }
        workgroupBarrier();

        // P·V, PSLOTS output blocks of this subgroup at a time.
        for (var i0 = 0u; i0 < NPV; i0 += PSLOTS) {
            for (var i = i0; i < min(i0 + PSLOTS, NPV); i++) {
                let b = sg * NPV + i;
                let q0 = CB * (b % QB);
                let d0 = CB * (b / QB);
                var c = coopLoad<CoopC>(&zeros[0], CB);
                for (var k0 = 0u; k0 < BK; k0 += CB) {
                    let a = coopLoadT<CoopA>(&pt[(q0 * PS + k0) / 4u], PS / 4u);
                    let bv = coopLoadT<CoopB>(&kvt[(k0 * QS + d0) / 4u], QS / 4u);
                    c = coopMultiplyAdd(a, bv, c);
                }
                coopStoreT(c, &st[(sg * PSLOTS + i - i0) * CB * CB], CB);
            }
            workgroupBarrier();
            for (var i = i0; i < min(i0 + PSLOTS, NPV); i++) {
                let q0 = CB * ((sg * NPV + i) % QB);
                let park = (sg * PSLOTS + i - i0) * CB * CB;
                for (var e = 0u; e < 8u; e++) {
                    let r = lane / CB + (SGS / CB) * e;
                    let at = i * 8u + e;
                    o[at] = fma(o[at], row_rescale[q0 + r], st[park + r * CB + lane % CB]);
                }
            }
            workgroupBarrier();
        }
    }

    // l ≥ 1 for a real query row: its largest score contributes exp(0).
    let l = row_reduce(l_part, false);
    if (part == 0u) {
        row_sum[row] = l;
    }
    workgroupBarrier();
    for (var i = 0u; i < NPV; i++) {
        let b = sg * NPV + i;
        let q0 = CB * (b % QB);
        let d = CB * (b / QB) + lane % CB;
        for (var e = 0u; e < 8u; e++) {
            let r = q0 + lane / CB + (SGS / CB) * e;
            if (r < n_q) {
                out[((t0 + r) * p.heads + h) * HD + d] = o[i * 8u + e] / row_sum[r];
            }
        }
    }
}
