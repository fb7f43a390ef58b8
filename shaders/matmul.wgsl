// y[T, N] = x[T, K] · W[N, K]ᵀ (+ bias[N]) (+ y when accumulating): every linear layer, and
// the fused forms that save a decode step's dependent dispatches (DESIGN.md "The pipeline"):
//   NORM   x is the raw residual stream and RMSNorm is applied on the fly:
//          y = (x · rsqrt(mean(x²) + eps) · norm_w) · Wᵀ
//   GLU    out = act(x'·W_gateᵀ) ⊙ (x'·W_upᵀ)          (x' = x, or its norm with NORM)
//   QKV    q, k, v = x'·W_qᵀ, x'·W_kᵀ, x'·W_vᵀ (+ their biases), from one flat range of rows
//   ROPE_KV  (QKV, matvec shapes) also RoPE and the KV-cache write: q rotated into y, k
//          rotated into the K cache and v into the V cache at row pos0 + t, which saves the
//          rope_kv_write dispatch of every layer's decode step (see store_rope_kv)
//
// W is read at the file's bits per weight (src/gpu/layout.rs) and dequantized in registers
// (common/dequant.wgsl); no dequantized copy of a weight ever exists in GPU memory. Without
// fusion one dispatch covers one part of W (rows row0 .. row0 + rows.x; see gpu::GpuTensor).
//
// Every kernel shape computes "slots": a workgroup owns `per` consecutive slots (MV_ROWS for
// the matvec, TILE_N for the tiled kernel), each a dot product of one row of one weight with
// x', and `locate` says which weight and row a slot is. QKV lays W_q, W_k, W_v's rows end to
// end; GLU gives a workgroup's first per/2 slots to W_gate rows and the rest to the same rows
// of W_up, so both halves of an output meet in one workgroup. No workgroup depends on another.
//
// RMSNorm's scale rsqrt(mean(x²) + eps) is one scalar per token, so it is factored out of the
// dot product: slots accumulate Σ w·(x ⊙ norm_w) and Σ x² side by side (the invocations
// streaming a row read all of x[t] anyway) and multiply at the end. That costs no extra pass
// over x, no barrier and no dispatch.
//
// Defines (kernels/matmul.rs builds them from a MatmulKey):
//   weight type   F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS
//                 (every weight has this type)
//   kernel shape  MATVEC_WG | MATVEC_SG | MATVEC_CHUNK | TILED | GEMM_WIDE | TILED_COOP |
//                 GEMM_COOP | COOP_STREAM (the last three with COOP_STAGING: per-token scales
//                 at B_SCALES; COOP_STREAM always with X16)
//                 | GEMM_MATRIX_I8 (int8 levels, with LEVELS8, and one of GEMM_MATRIX_SUBGROUPS
//                 (the browser's subgroup matrices), MATRIX_EMULATED (the same on
//                 dot4I8Packed, for the tests) or DOT4_TILES (register-blocked dot4I8Packed))
//   fusion        (none) | GLU + MULTI_W + SILU|GELU_TANH | QKV + MULTI_W [+ ROPE_KV [+ ROPE_NEOX]]
//   NORM          binding norm_w[K]
//   BIAS          binding bias[N] (of W, or of W_q); QKV_BIAS adds bias1, bias2 (W_k, W_v)
//   STAGE_X       (MATVEC_SG) x'[t] staged in workgroup memory, K = 4·MV_STAGE_VEC4
//   SPLIT_K       (MATVEC_CHUNK, TILED, TILED_COOP) p.splits workgroups share a row group
//                 (and token tile), each over a range of K; the last to finish adds their
//                 sums (binding split_sums at B_SPLIT; matmul/tile_split.wgsl for the tiles)
//   POST_NORM     (MATVEC_SG, MATVEC_CHUNK) y += RMSNorm(x·Wᵀ) ⊙ post_w: gemma's sandwich
//                 norm folded into W_o / W_down; the last workgroup of a token to finish
//                 norms the whole row (bindings post_w and post_scratch at B_POST)
//   QK_NORM       (ROPE_KV, matvec shapes) gemma3's per-head Q/K RMSNorm before the
//                 rotation; the last workgroup to finish a head norms and rotates it
//                 (bindings q_norm_w, k_norm_w and the scratch at B_QKN)
//   EMIT_LEVELS   (MATVEC_CHUNK, GLU, INT8) also writes its outputs as the int8 levels of
//                 x' the next product reads (binding levels_out at B_LEVELS)
//   LEVELS_IN     (MATVEC_CHUNK, INT8, no NORM) reads x' as those levels (binding x_levels in
//                 x's place, B_X) instead of staging it from x
//   X16           (TILED_COOP, GEMM_COOP, GEMM_WIDE; no NORM) reads x' as the f16 rows the
//                 pass before staged (binding x16 in x's place, per-token factors at B_SCALES;
//                 matmul/coop_staging.wgsl, or the wide GEMM in f16: gemm_wide_f16.wgsl)
//   F16_STAGING   (the tensor-core tiles, GEMM_WIDE with X16) W staged as f16: matmul/tiles.wgsl's
//                 dequant_w8h and the held words of the next chunk (RAW_W: Q4_0, Q5_0, Q8_0)
//   ABLATE_MMA ABLATE_W ABLATE_X  (TILED, GEMM_WIDE, TILED_COOP, GEMM_COOP with X16, DOT4_TILES) the
//                 diagnostic COCO_ABLATE leaves the multiply, W's loads or x''s loads out of
//                 the K loop, for timing only: the outputs are wrong (select.rs ablations)
// Constants prepended by kernels/matmul.rs (one source of truth for the host's grid math and
// binding order): MV_ROWS, MV_LANES, MV_UNROLL, MV_RPS, MV_STAGE_VEC4 (matvec), TILE_N,
// TILE_T (tiled), POST_COUNTERS (POST_NORM), and the binding numbers B_W1, B_W2, B_X, B_Y,
// B_NORM, B_BIAS, B_ROPE, B_QKN, B_POST, B_LEVELS, B_SPLIT, B_SCALES: storage bindings are numbered 1.. in
// the order the host lists them (weights, x, outputs, norm_w, biases, inv_freq, post_w,
// post_scratch, the levels, split_sums, GEMM_COOP's per-token scales), so the optional ones shift the rest.
//
// Workgroups are folded into 2-D (x + y·num_workgroups.x) because a large vocabulary's logits
// can exceed the 65,535-per-dimension limit (matvec: from 524,288 rows at 8 rows per
// workgroup); groups past p.groups return at once.

#include "common/dequant.wgsl"
#ifdef GLU
#include "common/activation.wgsl"
#endif
#ifdef ROPE_KV
#include "common/rotary.wgsl"
#endif
// softcap(x, cap) for store()'s epilogue (gemma2's LM head), shared with the attention kernels.
#include "common/softcap.wgsl"

struct Params {
    k: u32,          // K: elements per row of every W and of x
    t: u32,          // T: tokens
    groups: u32,     // workgroups that do work (the folded x·y grid may hold more)
    row0: u32,       // first row of W held by this part (0 when fused)
    accumulate: u32, // 1: y += x'·Wᵀ (residual adds fused in), 0: y = x'·Wᵀ
    eps: f32,        // RMSNorm epsilon (NORM)
    pos0: u32,       // position of the step's token 0 (ROPE_KV)
    softcap: f32,    // > 0: y = softcap·tanh(y / softcap) (gemma2's LM head); 0: none
    rows: vec4<u32>, // rows of W, W1, W2 in this dispatch (a part's rows when split)
    n: vec4<u32>,    // row strides of y, y1, y2 (the whole weights' rows)
    head_dim: u32,   // ROPE_KV
    scale: f32,      // y (+)= scale · (x'·Wᵀ + bias): granite's residual and logit scales, else 1
    splits: u32,     // SPLIT_K: workgroups per row group, each over its own range of K; else 1
    rot_half: u32,   // ROPE_KV: rotated pairs per head (partial rotation: < head_dim / 2)
    rot_scale: f32,  // ROPE_KV: factor on cos and sin of the rotated pairs (LongRoPE), else 1
    qk_eps: f32,     // QK_NORM: eps of the per-head Q/K norm
    _pad4: u32,
    _pad5: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;           // [rows.x, K] W | W_gate | W_q (src/gpu/layout.rs)
#ifdef MULTI_W
@group(0) @binding(B_W1) var<storage, read> w1: array<vec4<u32>>;       // [rows.y, K] W_up | W_k
#endif
#ifdef QKV
@group(0) @binding(B_W2) var<storage, read> w2: array<vec4<u32>>;       // [rows.z, K] W_v
#endif
#ifdef LEVELS_IN
// x' as the int8 levels its producer wrote (matvec_chunk.wgsl), bound in x's place.
@group(0) @binding(B_X) var<storage, read> x_levels: array<vec4<u32>>;  // [T][5][K / 32]
#else
#ifdef X16
// x' as the f16 rows matmul/token_scale.wgsl staged (the tensor-core tiles), in x's place.
@group(0) @binding(B_X) var<storage, read> x16: array<vec4<f16>>;       // [tiles' tokens, K / 4]
#else
@group(0) @binding(B_X) var<storage, read> x: array<vec4<f32>>;         // [T, K] f32
#endif
#endif
@group(0) @binding(B_Y) var<storage, read_write> y: array<f32>;         // [T, n.x] f32: y | out | q
#ifdef QKV
@group(0) @binding(B_Y + 1u) var<storage, read_write> y1: array<f32>;   // [T, n.y] f32: k (ROPE_KV: K cache [ctx, n.y])
@group(0) @binding(B_Y + 2u) var<storage, read_write> y2: array<f32>;   // [T, n.z] f32: v (ROPE_KV: V cache [ctx, n.z])
#endif
#ifdef NORM
@group(0) @binding(B_NORM) var<storage, read> norm_w: array<vec4<f32>>; // [K] f32
#endif
#ifdef BIAS
@group(0) @binding(B_BIAS) var<storage, read> bias: array<f32>;         // [n.x] f32
#endif
#ifdef QKV_BIAS
@group(0) @binding(B_BIAS + 1u) var<storage, read> bias1: array<f32>;   // [n.y] f32
@group(0) @binding(B_BIAS + 2u) var<storage, read> bias2: array<f32>;   // [n.z] f32
#endif
#ifdef ROPE_KV
@group(0) @binding(B_ROPE) var<storage, read> inv_freq: array<f32>;     // [head_dim / 2] f32
#endif
#ifdef POST_NORM
@group(0) @binding(B_POST) var<storage, read> post_w: array<f32>;       // [rows.x] f32
// u32 words, accessed atomically (floats by bitcast), as split K's scratch: an arrival counter
// per token [0, POST_COUNTERS), 0 between dispatches, then the product's rows [T, rows.x].
@group(0) @binding(B_POST + 1u) var<storage, read_write> post_scratch: array<atomic<u32>>;
#endif

// ---- which weight a load reads (MULTI_W) ----

#ifdef MULTI_W
// The weight dequant.wgsl's wl() reads. Callers set it to a constant right before a call
// (see dot_w), so once inlined each copy of a loop reads one buffer and compilers drop the
// branches below instead of taking them on every load.
var<private> wsel: u32;
#endif
#ifdef GLU
fn wv(i: u32) -> vec4<u32> {
    if (wsel == 1u) {
        return w1[i];
    }
    return w[i];
}

fn wl(i: u32) -> u32 {
    if (wsel == 1u) {
        return w1[i >> 2u][i & 3u];
    }
    return w[i >> 2u][i & 3u];
}
#endif
#ifdef QKV
fn wv(i: u32) -> vec4<u32> {
    if (wsel == 2u) {
        return w2[i];
    }
    if (wsel == 1u) {
        return w1[i];
    }
    return w[i];
}

fn wl(i: u32) -> u32 {
    if (wsel == 2u) {
        return w2[i >> 2u][i & 3u];
    }
    if (wsel == 1u) {
        return w1[i >> 2u][i & 3u];
    }
    return w[i >> 2u][i & 3u];
}
#endif

// Row `row` of weight `m` (0: W, 1: W1, 2: W2) as dequant.wgsl names rows: each weight's
// buffer holds its `p.rows[m]` rows.
fn row_of(m: u32, row: u32) -> WRow {
    return w_row(row, p.k, p.rows[m]);
}

// ---- slots: (weight, row) ----

// (weight 0/1/2, row of it) computed by slot `f` of a grid with `per` slots per workgroup.
#ifndef MULTI_W
fn locate(f: u32, per: u32) -> vec2<u32> {
    return vec2<u32>(0u, f);
}
#endif
#ifdef GLU
fn locate(f: u32, per: u32) -> vec2<u32> {
    let half = per / 2u;
    return vec2<u32>((f % per) / half, (f / per) * half + f % half);
}
#endif
#ifdef QKV
fn locate(f: u32, per: u32) -> vec2<u32> {
    if (f >= p.rows.x + p.rows.y) {
        return vec2<u32>(2u, f - p.rows.x - p.rows.y);
    }
    if (f >= p.rows.x) {
        return vec2<u32>(1u, f - p.rows.x);
    }
    return vec2<u32>(0u, f);
}
#endif

// The row of the weight `wl` reads (wsel) that slot row `s` computes: `s` itself, except
// that ROPE_NEOX puts each rotated pair (i, i + rot_half) of W_q and W_k in two adjacent
// slots, as ROPE_KV's epilogue needs both halves of a pair in one workgroup (NORMAL pairs,
// (2i, 2i + 1), already are).
fn slot_row(s: u32) -> u32 {
#ifdef ROPE_NEOX
    if (wsel < 2u) {
        return neox_row(s);
    }
#endif
    return s;
}

#ifdef ROPE_NEOX
// Slot s = head·head_dim + 2j + half computes row head·head_dim + j + half·rot_half of the
// rotated dimensions; a pass-through slot (from 2·rot_half on) computes its own row.
fn neox_row(s: u32) -> u32 {
    let i = s % p.head_dim;
    if (i >= 2u * p.rot_half) {
        return s;
    }
    return s - i + i / 2u + (i & 1u) * p.rot_half;
}
#endif

// Whether slot (weight, row) exists (the last workgroup's slots may run past the rows).
fn live(mr: vec2<u32>) -> bool {
    return mr.y < p.rows[mr.x];
}

// ---- x' and the sums a slot accumulates ----

#ifdef NORM
alias Sums = vec2<f32>; // (Σ w·x', Σ x²)

fn sums(acc: vec4<f32>, ss: vec4<f32>) -> Sums {
    return vec2<f32>((acc.x + acc.y) + (acc.z + acc.w), (ss.x + ss.y) + (ss.z + ss.w));
}

// The output from a slot's sums: the dot product times the token's rsqrt(mean(x²) + eps).
fn finish(s: Sums) -> f32 {
    return s.x * inverseSqrt(s.y / f32(p.k) + p.eps);
}

#ifndef STAGE_X
// Elements 8o..8o+7 of x[t] (row start `xrow`, in vec4) times norm_w; adds their squares to ss.
fn x_group(xrow: u32, o: u32, ss: ptr<function, vec4<f32>>) -> array<vec4<f32>, 2> {
    let a = x[xrow + 2u * o];
    let b = x[xrow + 2u * o + 1u];
    *ss = fma(a, a, fma(b, b, *ss));
    return array<vec4<f32>, 2>(a * norm_w[2u * o], b * norm_w[2u * o + 1u]);
}
#endif
#else
alias Sums = f32; // Σ w·x

fn sums(acc: vec4<f32>, ss: vec4<f32>) -> Sums {
    return (acc.x + acc.y) + (acc.z + acc.w);
}

fn finish(s: Sums) -> f32 {
    return s;
}

#ifndef STAGE_X
#ifndef LEVELS_IN
#ifndef X16
// Elements 8o..8o+7 of x[t] (row start `xrow`, in vec4).
fn x_group(xrow: u32, o: u32, ss: ptr<function, vec4<f32>>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(x[xrow + 2u * o], x[xrow + 2u * o + 1u]);
}
#endif
#endif
#endif
#endif

#ifdef STAGE_X
// x'[t] staged in workgroup memory (subgroup matvec only): the workgroup reads x[t] (and
// norm_w) from global memory once, in its prologue, instead of every task re-reading x and
// norm_w for every group. Inside the row loop a group of x' is then two workgroup-memory
// vec4 loads, with no norm_w load, multiply or Σx² update.
var<workgroup> xs: array<vec4<f32>, MV_STAGE_VEC4>; // x'[t] = x[t] (⊙ norm_w with NORM)
#ifdef NORM
var<workgroup> xs_ss: array<f32, 64>; // Σx² per subgroup (at most 64 of them)
var<private> staged_ss: f32;          // Σx²[t], the same in every invocation
#endif

// Elements 8o..8o+7 of the staged x'[t] (`xrow` and `ss` are the unstaged loop's).
fn x_group(xrow: u32, o: u32, ss: ptr<function, vec4<f32>>) -> array<vec4<f32>, 2> {
    return array<vec4<f32>, 2>(xs[2u * o], xs[2u * o + 1u]);
}

// The workgroup's prologue: fills xs (and staged_ss) for token t. Ends with a barrier.
fn stage_x(t: u32, li: u32, sg: u32, nsg: u32, lane: u32) {
    let n = p.k / 4u;
    let xrow = t * n;
    var ss = 0.0;
    for (var i = li; i < n; i += 256u) {
        let a = x[xrow + i];
#ifdef NORM
        ss = fma(a.x, a.x, fma(a.y, a.y, fma(a.z, a.z, fma(a.w, a.w, ss))));
        xs[i] = a * norm_w[i];
#else
        xs[i] = a;
#endif
    }
#ifdef NORM
    let s = subgroupAdd(ss);
    if (lane == 0u) {
        xs_ss[sg] = s;
    }
#endif
    workgroupBarrier();
#ifdef NORM
    var total = 0.0;
    for (var i = 0u; i < nsg; i++) {
        total += xs_ss[i];
    }
    staged_ss = total;
#endif
}
#endif

// ---- outputs ----

// bias[r] of weight m (0 when it has none).
fn bias_of(m: u32, r: u32) -> f32 {
    var b = 0.0;
#ifdef BIAS
    if (m == 0u) {
        b = bias[r];
    }
#endif
#ifdef QKV_BIAS
    if (m == 1u) {
        b = bias1[r];
    }
    if (m == 2u) {
        b = bias2[r];
    }
#endif
    return b;
}

// Writes output (t, row) of weight m from its finished dot product `v`.
fn store(m: u32, t: u32, row: u32, v: f32) {
    let r = p.row0 + row;
    let out = v + bias_of(m, r);
#ifdef QKV
    if (m == 1u) {
        y1[t * p.n.y + r] = out;
        return;
    }
    if (m == 2u) {
        y2[t * p.n.z + r] = out;
        return;
    }
#endif
    // granite's multipliers scale the product; gemma2's final soft-cap bends the scaled
    // logits (no model has both; llama.cpp scales, then caps).
    var scaled = p.scale * out;
    if (p.softcap > 0.0) {
        scaled = softcap(scaled, p.softcap);
    }
    let i = t * p.n.x + r;
    if (p.accumulate != 0u) {
        y[i] = y[i] + scaled;
    } else {
        y[i] = scaled;
    }
}

#ifdef ROPE_KV
// Writes slot s of weight m for token t from its finished dot product `v` and that of the
// other half of its rotated pair, slot s ^ 1 (`other`): q rotated into y, k rotated into the
// K cache, v (unrotated) into the V cache. An even slot holds the pair's first element. The
// angle is one f32 product, as in rope.wgsl.
fn store_rope_kv(m: u32, t: u32, s: u32, v: f32, other: f32) {
    let pos = p.pos0 + t;
    if (m == 2u) {
        y2[pos * p.n.z + s] = v + bias_of(2u, s);
        return;
    }
    wsel = m;
    let row = slot_row(s);
    let mine = v + bias_of(m, row);
    let theirs = other + bias_of(m, slot_row(s ^ 1u));
    let i = row % p.head_dim;
    // The pair's index: the rotated ones first, then the pass-through (2j, 2j + 1) pairs,
    // which turn by the identity.
    var pair = i / 2u;
#ifdef ROPE_NEOX
    if (i < 2u * p.rot_half) {
        pair = i % p.rot_half;
    }
#endif
    var sc = vec2<f32>(0.0, 1.0);
    if (pair < p.rot_half) {
        sc = p.rot_scale * sin_cos(f32(pos) * inv_freq[pair]);
    }
    var out: f32;
    if ((s & 1u) == 0u) {
        out = rotate(mine, theirs, sc).x;
    } else {
        out = rotate(theirs, mine, sc).y;
    }
    if (m == 1u) {
        y1[pos * p.n.y + row] = out;
    } else {
        y[t * p.n.x + row] = out;
    }
}
#endif

#ifdef GLU
// An output from its finished gate and up dot products.
fn glu_value(gate: f32, up: f32) -> f32 {
    return act(gate) * up;
}

// out[t, row] from the finished gate and up dot products.
fn store_glu(t: u32, row: u32, gate: f32, up: f32) {
    y[t * p.n.x + p.row0 + row] = glu_value(gate, up);
}
#endif

// The slot whose sums slot `s` of a workgroup combines with in store_slot: a GLU gate slot's
// up slot (MV_ROWS / 2 on), the other half of a ROPE_KV pair (s ^ 1), else s itself.
fn partner_slot(s: u32) -> u32 {
#ifdef GLU
    return select(s, s + MV_ROWS / 2u, s < MV_ROWS / 2u);
#else
#ifdef ROPE_KV
    return s ^ 1u;
#else
    return s;
#endif
#endif
}

// Every matvec's epilogue: slot (weight, row) `mr`'s output for token t from its sums and
// its partner slot's.
fn store_slot(mr: vec2<u32>, t: u32, own: Sums, partner: Sums) {
#ifdef GLU
    if (mr.x == 0u) { // a gate slot: the up slots' sums are its partners
        store_glu(t, mr.y, finish(own), finish(partner));
    }
#else
#ifdef ROPE_KV
    store_rope_kv(mr.x, t, mr.y, finish(own), finish(partner));
#else
    store(mr.x, t, mr.y, finish(own));
#endif
#endif
}

#ifdef POST_NORM
#include "matmul/post_norm.wgsl"
#endif
#ifdef QK_NORM
#include "matmul/qk_norm.wgsl"
#endif

#ifdef MATVEC_WG
// Matrix–vector (decode): a workgroup of 256 (SwiftShader's maximum) computes MV_ROWS slots
// of one token, MV_LANES lanes per slot, then a shared-memory tree sums each slot's lanes.
// This is the variant browsers run (wgpu's WebGPU backend never enables subgroups).
var<workgroup> partial: array<Sums, 256>;

// The subgroup matvec's dot_rows for one row, without arrays: SwiftShader (the browser's CPU
// fallback, which runs this kernel with one lane per slot) kept dot_rows' one-element arrays
// in memory and decoded a third slower (0.41 → 0.27 tok/s, Gemma-3-270M in headless Chromium;
// BENCHMARKS.md "session 10"). Two groups per trip: more reads in flight per invocation
// measured best for this loop ("session 8").
fn dot_row(wr: WRow, xrow: u32, first: u32, stride: u32) -> Sums {
    let groups = p.k / 8u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var ss = vec4<f32>(0.0);
    var o = first;
    for (; o + stride < groups; o += 2u * stride) {
        let wa = dequant8(wr, o);
        let wb = dequant8(wr, o + stride);
        let xa = x_group(xrow, o, &ss);
        let xb = x_group(xrow, o + stride, &ss);
        acc0 = fma(wa[0], xa[0], acc0);
        acc1 = fma(wa[1], xa[1], acc1);
        acc0 = fma(wb[0], xb[0], acc0);
        acc1 = fma(wb[1], xb[1], acc1);
    }
    if (o < groups) {
        let wa = dequant8(wr, o);
        let xa = x_group(xrow, o, &ss);
        acc0 = fma(wa[0], xa[0], acc0);
        acc1 = fma(wa[1], xa[1], acc1);
    }
    return sums(acc0 + acc1, ss);
}

// dot_row for slot mr: row mr.y of weight mr.x. Each branch sets `wsel` to a constant (see
// wl); the branch itself is uniform across a slot's invocations.
fn dot_slot(mr: vec2<u32>, t: u32, first: u32, stride: u32) -> Sums {
    let xrow = t * (p.k / 4u);
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return dot_row(row_of(2u, slot_row(mr.y)), xrow, first, stride);
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return dot_row(row_of(1u, slot_row(mr.y)), xrow, first, stride);
    }
    wsel = 0u;
#endif
    return dot_row(row_of(0u, slot_row(mr.y)), xrow, first, stride);
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return; // uniform: depends only on the workgroup id
    }
    let t = wid.z;
    let lane = li % MV_LANES;
    let slot = li / MV_LANES;
    let mr = locate(g * MV_ROWS + slot, MV_ROWS);
    var acc = Sums(0.0);
    if (live(mr)) {
        acc = dot_slot(mr, t, lane, MV_LANES);
    }
    partial[li] = acc;
    workgroupBarrier();
    for (var s = MV_LANES / 2u; s > 0u; s >>= 1u) {
        if (lane < s) {
            partial[li] += partial[li + s];
        }
        workgroupBarrier();
    }
#ifdef QK_NORM
    // Every invocation takes part; invocation i < MV_ROWS stores slot i.
    let own = locate(g * MV_ROWS + li, MV_ROWS);
    qk_norm_store(t, li, g, own, finish(partial[(li % MV_ROWS) * MV_LANES]), li < MV_ROWS && live(own));
#else
    if (lane == 0u && live(mr)) {
        store_slot(mr, t, partial[li], partial[partner_slot(slot) * MV_LANES]);
    }
#endif
}
#endif

#ifdef MATVEC_SG
// Matrix–vector with subgroup sums (native only). A workgroup computes MV_ROWS slots as
// MV_ROWS / MV_RPS tasks of MV_RPS consecutive slots each. The invocations of a task load
// each group of x' once and multiply it with all MV_RPS rows (in f32, x' is 7× the bytes of
// a Q4_0 row). Each row also holds registers in every invocation, and fewer resident warps
// cost more than the loads saved beyond 2 rows on the H200 (BENCHMARKS.md "session 10").
// The subgroup size varies by device (8 on lavapipe, 32 on NVIDIA, 64 on AMD), so work is
// assigned by subgroup_id rather than by assuming which invocations share a subgroup: each
// task gets `spr` whole subgroups (or each subgroup takes several tasks when subgroups are
// wide), subgroupAdd sums each subgroup's lanes, and one shared-memory step adds the `spr`
// subgroup sums of a slot.
// Slot r's subgroup sums at [r · spr, (r + 1) · spr): MV_ROWS · spr = MV_RPS · (subgroups),
// and a workgroup of 256 has at most 64 subgroups (WGSL's smallest subgroup size is 4).
var<workgroup> partial: array<Sums, 64u * MV_RPS>;

// Partial sums of rows `row`, row + 1, … (MV_RPS of them, each clamped to `last`: the
// caller drops the sums of rows past it) of the weight `wsel` selects, with x'[t] over the
// 8-element groups first, first + stride, …: consecutive invocations read consecutive words of
// W and x, so a warp streams each row (see dequant8 in common/dequant.wgsl for why), and each
// group of x' is loaded once for all MV_RPS rows.
fn dot_rows(m: u32, row: u32, last: u32, xrow: u32, first: u32, stride: u32) -> array<Sums, MV_RPS> {
    let groups = p.k / 8u;
    var wr: array<WRow, MV_RPS>;
    var acc: array<vec4<f32>, MV_RPS>;
    for (var r = 0u; r < MV_RPS; r++) {
        wr[r] = row_of(m, slot_row(min(row + r, last)));
        acc[r] = vec4<f32>(0.0);
    }
    var ss = vec4<f32>(0.0);
    var o = first;
    // MV_UNROLL (1 or 2) groups per trip. The MV_RPS rows already give each invocation that
    // many independent reads per trip, and on the H200 a second group's registers cost more
    // resident warps than its reads gained (BENCHMARKS.md "session 10": 8 slots, 1 group,
    // 2 rows per task measured best).
    if (MV_UNROLL == 2u) {
        for (; o + stride < groups; o += 2u * stride) {
            let xa = x_group(xrow, o, &ss);
            let xb = x_group(xrow, o + stride, &ss);
            for (var r = 0u; r < MV_RPS; r++) {
                let wa = dequant8(wr[r], o);
                let wb = dequant8(wr[r], o + stride);
                acc[r] = fma(wa[0], xa[0], fma(wa[1], xa[1], acc[r]));
                acc[r] = fma(wb[0], xb[0], fma(wb[1], xb[1], acc[r]));
            }
        }
    }
    for (; o < groups; o += stride) {
        let xa = x_group(xrow, o, &ss);
        for (var r = 0u; r < MV_RPS; r++) {
            let wa = dequant8(wr[r], o);
            acc[r] = fma(wa[0], xa[0], fma(wa[1], xa[1], acc[r]));
        }
    }
    var out: array<Sums, MV_RPS>;
    for (var r = 0u; r < MV_RPS; r++) {
        out[r] = sums(acc[r], ss);
    }
    return out;
}

// dot_rows for rows mr.y, mr.y + 1, … (clamped to `last`) of weight mr.x and token t. Each
// branch sets `wsel` to a constant (see wl); the branch itself is uniform across the
// invocations that share the rows.
fn dot_w(mr: vec2<u32>, last: u32, t: u32, first: u32, stride: u32) -> array<Sums, MV_RPS> {
    let xrow = t * (p.k / 4u);
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return dot_rows(2u, mr.y, last, xrow, first, stride);
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return dot_rows(1u, mr.y, last, xrow, first, stride);
    }
    wsel = 0u;
#endif
    return dot_rows(0u, mr.y, last, xrow, first, stride);
}

// The sums of task slots f, f + 1, … for token t. A QKV task whose slots straddle two weights
// (row counts that are not multiples of MV_RPS: at most two tasks per dispatch) takes one row
// at a time, each computed MV_RPS times over by clamping.
fn dot_task(f: u32, t: u32, first: u32, stride: u32) -> array<Sums, MV_RPS> {
    let mr = locate(f, MV_ROWS);
#ifdef QKV
    if (locate(f + MV_RPS - 1u, MV_ROWS).x != mr.x) {
        var out: array<Sums, MV_RPS>;
        for (var r = 0u; r < MV_RPS; r++) {
            let mr_r = locate(f + r, MV_ROWS);
            out[r] = Sums(0.0);
            if (live(mr_r)) {
                out[r] = dot_w(mr_r, mr_r.y, t, first, stride)[0];
            }
        }
        return out;
    }
#endif
    return dot_w(mr, p.rows[mr.x] - 1u, t, first, stride);
}

// Slot r's total from its `spr` subgroup sums.
fn slot_sum(r: u32, spr: u32) -> Sums {
    var s = Sums(0.0);
    for (var i = 0u; i < spr; i++) {
        s += partial[r * spr + i];
    }
#ifdef STAGE_X
#ifdef NORM
    s.y = staged_ss; // the prologue summed x² once for the whole workgroup
#endif
#endif
    return s;
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) nsg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) sg_size: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t = wid.z;
#ifdef STAGE_X
    stage_x(t, li, sg, nsg, lane);
#endif
    let tasks = MV_ROWS / MV_RPS;
    let spr = max(1u, nsg / tasks); // subgroups per task
    let part = sg % spr;
    let task_step = max(1u, nsg / spr); // tasks are dealt to subgroups round-robin
    for (var k = sg / spr; k < tasks; k += task_step) {
        let f = g * MV_ROWS + k * MV_RPS;
        var acc: array<Sums, MV_RPS>;
        for (var r = 0u; r < MV_RPS; r++) {
            acc[r] = Sums(0.0);
        }
        if (live(locate(f, MV_ROWS))) {
            acc = dot_task(f, t, part * sg_size + lane, spr * sg_size);
        }
        for (var r = 0u; r < MV_RPS; r++) {
            let sum = subgroupAdd(acc[r]);
            if (lane == 0u) {
                partial[(k * MV_RPS + r) * spr + part] = sum;
            }
        }
    }
    workgroupBarrier();
    let mr = locate(g * MV_ROWS + li, MV_ROWS);
#ifdef POST_NORM
    let has = li < MV_ROWS && live(mr);
    var v = 0.0;
    if (has) {
        v = finish(slot_sum(li, spr)) + bias_of(0u, mr.y);
    }
    post_norm_add(t, li, sg, nsg, lane, mr.y, v, has, p.groups);
#else
#ifdef QK_NORM
    qk_norm_store(t, li, g, mr, finish(slot_sum(li, spr)), li < MV_ROWS && live(mr));
#else
    if (li < MV_ROWS && live(mr)) {
        store_slot(mr, t, slot_sum(li, spr), slot_sum(partner_slot(li), spr));
    }
#endif
#endif
}
#endif

#ifdef MATVEC_CHUNK
#include "matmul/matvec_chunk.wgsl"
#endif

#ifdef TILES
#include "matmul/tiles.wgsl"
#endif

#ifdef TILED
#include "matmul/gemm_tiled.wgsl"
#endif

#ifdef GEMM_WIDE
#ifdef X16
#include "matmul/gemm_wide_f16.wgsl"
#else
#include "matmul/gemm_wide.wgsl"
#endif
#endif

#ifdef COOP_STAGING
#include "matmul/coop_staging.wgsl"
#endif

#ifdef GEMM_COOP
#ifdef X16
#ifdef SG64
#include "matmul/gemm_coop_sg64.wgsl"
#else
#include "matmul/gemm_coop_x16.wgsl"
#endif
#else
#include "matmul/gemm_coop.wgsl"
#endif
#endif

#ifdef TILED_COOP
#include "matmul/gemm_tiled_coop.wgsl"
#endif

#ifdef GEMM_MATRIX_I8
#include "matmul/gemm_matrix_i8.wgsl"
#endif

#ifdef COOP_STREAM
#include "matmul/gemm_coop_stream.wgsl"
#endif
