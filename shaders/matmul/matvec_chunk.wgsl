// Matrix–vector, one 32-element chunk per lane (native: subgroup sums). Included by
// matmul.wgsl for MATVEC_CHUNK, which provides the bindings, slots and epilogue.
//
// Why this shape: with a lane per 8 elements each lane's weight load is one 4-byte word, and
// the H200 read ~1 TB/s of its 4.1 whatever the layout (BENCHMARKS.md "session 13"): too few
// bytes in flight per warp. Here a lane takes a whole chunk of each of its rows (raw32, all
// loads issued before any decoding): Q4_0's quants are one 16-byte load, so a warp has 512
// bytes of weights in flight per load instruction and row. It then decodes word by word
// (decode8), so only 8 decoded weights and 8 elements of x' are live at once: with whole
// decoded chunks the H200 kept too few warps resident (BENCHMARKS.md "session 13").
//
// x' then has to come from workgroup memory: a lane needs 8 vec4s of x' per chunk, 128 bytes
// apart across lanes, which from global memory touch 32 cache lines per load instruction.
// The workgroup stages x' in tiles of MV_STAGE_VEC4 vec4s (all 256 invocations, RMSNorm's
// norm_w applied and Σx² taken on the way), and stores vec4 v of a tile at swz(v): the 8
// vec4s of a chunk rotate by the chunk's index, so 8 lanes reading "vec4 j of their chunk"
// hit 8 different bank groups instead of one.
//
// Work split as in the subgroup matvec (MATVEC_SG): MV_ROWS slots as tasks of MV_RPS rows,
// `spr` subgroups per task; after each tile a task's sums are added into `dots`, so K of
// any length runs in tiles with two barriers each.

#ifdef INT8
#include "common/levels.wgsl"
// With INT8 (weight types with an idot32) a tile of x' is staged as int8 levels instead
// (common/dequant.wgsl's XChunk): the inner loop then multiplies 4 weights per
// dot4I8Packed. The f32 loop was bound by instructions per weight (a convert and two FMAs
// each): ~1.2 TB/s of the H200's 4.1 on Q4_0 (BENCHMARKS.md "session 17"). Each level is
// its own plane of vec4s indexed by chunk, so the lanes' reads are consecutive.
#ifdef LEVELS_IN
// With LEVELS_IN the levels come ready from the kernel that made x (EMIT_LEVELS: the GLU
// before W_down, the attention merge before W_o; common/levels.wgsl), in the same planes per
// token in global memory: nothing is staged, so the
// workgroup runs all of its K without a barrier, and x is quantized once per step instead
// of once per workgroup (the 8B's W_down: 256 workgroups each quantized all 14,336 values).
// (x_levels: matmul.wgsl binds them in x's place.)
var<private> levels_base: u32; // token t's planes, from the workgroup's first chunk of K
#else
const MV_STAGE_CHUNKS: u32 = MV_STAGE_VEC4 / 8u;
var<workgroup> xq: array<vec4<u32>, 4u * MV_STAGE_CHUNKS>; // planes a0, a1, b0, b1
var<workgroup> xd: array<vec4<f32>, MV_STAGE_CHUNKS>;      // (d_a, d_b, Σx', 0)
#endif
#ifdef EMIT_LEVELS
// The GLU's outputs of this workgroup (MV_ROWS / 2 rows, whole chunks), for emit_levels.
@group(0) @binding(B_LEVELS) var<storage, read_write> levels_out: array<vec4<u32>>; // [T][5][N / 32]
var<workgroup> glu_h: array<vec4<f32>, MV_ROWS / 8u>;
#endif
#else
var<workgroup> xs: array<vec4<f32>, MV_STAGE_VEC4>; // a tile of x'[t] (⊙ norm_w with NORM)
#endif
var<workgroup> dots: array<f32, 64u * MV_RPS>;     // Σ w·x' per (slot, subgroup part)
#ifdef NORM
var<workgroup> xs_ss: array<f32, 64>;              // Σx² per subgroup (at most 64 of them)
#endif

#ifdef SPLIT_K
// Split K (SPLIT_K, the A/B switch COCO_CHUNK_SPLITS): p.splits consecutive workgroups share
// a row group, each taking its own range of whole chunks of K, for products with few rows (a
// 4,096-row product is 256 workgroups of 16 rows, two per SM of the H200). It lost on every
// product measured (BENCHMARKS.md "session 18"), so it is off by default. The last to finish,
// found with an arrival counter, adds their sums in split order and runs the epilogue, so
// the product stays one dispatch. The scratch, as u32 words accessed atomically (floats by
// bitcast; as attention.wgsl's partials, for the same reason):
//   [0, SPLIT_COUNTERS)  an arrival counter per (token, row group), 0 between dispatches;
//   then per (token, row group, split) MV_ROWS + 1 words: each slot's sum over the split's
//   range, then the range's Σx² (NORM).
// The host (kernels/matmul/select.rs SPLIT_COUNTERS, SPLIT_RECORD_WORDS) keeps both within
// bounds; a unit test holds the two SPLIT_COUNTERS equal.
@group(0) @binding(B_SPLIT) var<storage, read_write> split_sums: array<atomic<u32>>;
const SPLIT_COUNTERS: u32 = 4096u;
var<workgroup> split_arrived: u32;
var<workgroup> split_x2: f32;

fn split_record(t: u32, rg: u32, s: u32) -> u32 {
    return SPLIT_COUNTERS + ((t * (p.groups / p.splits) + rg) * p.splits + s) * (MV_ROWS + 1u);
}
#endif

fn swz(v: u32) -> u32 {
    return v ^ ((v >> 3u) & 7u);
}

#ifdef INT8
// One 32-element chunk of x' (8 vec4s) as its two int8 levels.
fn quantize_chunk(v: array<vec4<f32>, 8>) -> XChunk {
    var m = vec4<f32>(0.0);
    for (var i = 0u; i < 8u; i++) {
        m = max(m, abs(v[i]));
    }
    let scale = chunk_scale(max(max(m.x, m.y), max(m.z, m.w)));
    var a: array<u32, 8>;
    var b: array<u32, 8>;
    var sum_a = 0;
    var sum_b = 0;
    for (var i = 0u; i < 8u; i++) {
        let word = level_word(v[i], scale);
        a[i] = word.a;
        b[i] = word.b;
        sum_a += word.sum_a;
        sum_b += word.sum_b;
    }
    return XChunk(
        vec4<u32>(a[0], a[1], a[2], a[3]),
        vec4<u32>(a[4], a[5], a[6], a[7]),
        vec4<u32>(b[0], b[1], b[2], b[3]),
        vec4<u32>(b[4], b[5], b[6], b[7]),
        chunk_d(scale.x, sum_a, sum_b),
    );
}

#ifdef LEVELS_IN
// Chunk c of the workgroup's range of x', from its producer's planes.
fn x_chunk(c: u32) -> XChunk {
    let n = p.k / 32u;
    let at = levels_base + c;
    return XChunk(
        x_levels[at],
        x_levels[at + n],
        x_levels[at + 2u * n],
        x_levels[at + 3u * n],
        bitcast<vec4<f32>>(x_levels[at + 4u * n]),
    );
}
#else
// Stages x'[t] vec4s v0 .. v0 + n4 as int8 levels, an invocation per 32-element chunk;
// returns this invocation's Σx² of them.
fn stage_tile(xrow: u32, v0: u32, n4: u32, li: u32) -> f32 {
    var ss = 0.0;
    let chunks = n4 / 8u;
    for (var c = li; c < chunks; c += 256u) {
        var v: array<vec4<f32>, 8>;
        for (var i = 0u; i < 8u; i++) {
            let a = x[xrow + v0 + 8u * c + i];
#ifdef NORM
            ss += dot(a, a);
            v[i] = a * norm_w[v0 + 8u * c + i];
#else
            v[i] = a;
#endif
        }
        let q = quantize_chunk(v);
        xq[c] = q.a0;
        xq[MV_STAGE_CHUNKS + c] = q.a1;
        xq[2u * MV_STAGE_CHUNKS + c] = q.b0;
        xq[3u * MV_STAGE_CHUNKS + c] = q.b1;
        xd[c] = q.d;
    }
    return ss;
}

// The staged chunk c of the tile.
fn x_chunk(c: u32) -> XChunk {
    return XChunk(
        xq[c],
        xq[MV_STAGE_CHUNKS + c],
        xq[2u * MV_STAGE_CHUNKS + c],
        xq[3u * MV_STAGE_CHUNKS + c],
        xd[c],
    );
}
#endif

#ifdef EMIT_LEVELS
// Token t's GLU outputs of this workgroup, rows row0 + rg·MV_ROWS/2 on (whole chunks: the
// host checks that row0 and MV_ROWS / 2 are multiples of 32), as the int8 levels W_down
// reads with LEVELS_IN. `h` is invocation li's output (li < MV_ROWS / 2, `has`: a live row).
// Eight invocations per chunk each quantize one word (4 elements) against the chunk's max,
// which each reads from workgroup memory; the chunk's Σ of levels is summed over its eight
// (aligned groups of 8 lanes: li = subgroup · size + lane, sizes multiples of 8). A single
// invocation quantizing the whole chunk cost the 8B's gate/up 74 µs a step.
// Every invocation of the workgroup calls this (a barrier, subgroup shuffles).
fn emit_levels(t: u32, li: u32, rg: u32, h: f32, has: bool) {
    if (li < MV_ROWS / 2u) {
        glu_h[li / 4u][li % 4u] = select(0.0, h, has);
    }
    workgroupBarrier();
    let first = p.row0 + rg * (MV_ROWS / 2u);
    let c = li / 8u;
    let w = li % 8u;
    var scale = vec2<f32>(0.0);
    var word = LevelWord(0u, 0u, 0, 0);
    if (li < MV_ROWS / 8u) {
        var m = vec4<f32>(0.0);
        for (var i = 0u; i < 8u; i++) {
            m = max(m, abs(glu_h[8u * c + i]));
        }
        scale = chunk_scale(max(max(m.x, m.y), max(m.z, m.w)));
        word = level_word(glu_h[8u * c + w], scale);
    }
    var sum_a = word.sum_a;
    var sum_b = word.sum_b;
    for (var x = 1u; x < 8u; x *= 2u) {
        sum_a += subgroupShuffleXor(sum_a, x);
        sum_b += subgroupShuffleXor(sum_b, x);
    }
    if (li < MV_ROWS / 8u && first + 32u * c < p.n.x) {
        let n = p.n.x / 32u;
        let at = t * 5u * n + first / 32u + c;
        // Word w of planes a (a0: words 0-3, a1: 4-7) and b.
        levels_out[at + (w / 4u) * n][w % 4u] = word.a;
        levels_out[at + (2u + w / 4u) * n][w % 4u] = word.b;
        if (w == 0u) {
            levels_out[at + 4u * n] = bitcast<vec4<u32>>(chunk_d(scale.x, sum_a, sum_b));
        }
    }
}
#endif

// Σ w·x' of rows `row`, row + 1, … (MV_RPS, each clamped to `last`) of weight m over the
// staged tile's chunks first, first + stride, … < chunks (the tile starts at chunk c0).
fn dot_chunks(m: u32, row: u32, last: u32, c0: u32, chunks: u32, first: u32, stride: u32) -> array<f32, MV_RPS> {
    var wr: array<WRow, MV_RPS>;
    var out: array<f32, MV_RPS>;
    for (var r = 0u; r < MV_RPS; r++) {
        wr[r] = row_of(m, slot_row(min(row + r, last)));
        out[r] = 0.0;
    }
    for (var c = first; c < chunks; c += stride) {
        var raw: array<Raw32, MV_RPS>;
        for (var r = 0u; r < MV_RPS; r++) {
            raw[r] = raw32(wr[r], c0 + c);
        }
        let xc = x_chunk(c);
        for (var r = 0u; r < MV_RPS; r++) {
            out[r] += idot32(raw[r], xc);
        }
    }
    return out;
}
#else
// Stages x'[t] vec4s v0 .. v0 + n4 into xs; returns this invocation's Σx² of them.
fn stage_tile(xrow: u32, v0: u32, n4: u32, li: u32) -> f32 {
    var ss = 0.0;
    for (var i = li; i < n4; i += 256u) {
        let a = x[xrow + v0 + i];
#ifdef NORM
        ss += dot(a, a);
        xs[swz(i)] = a * norm_w[v0 + i];
#else
        xs[swz(i)] = a;
#endif
    }
    return ss;
}

// Σ w·x' of rows `row`, row + 1, … (MV_RPS, each clamped to `last`) of weight m over the
// staged tile's chunks first, first + stride, … < chunks (the tile starts at chunk c0).
fn dot_chunks(m: u32, row: u32, last: u32, c0: u32, chunks: u32, first: u32, stride: u32) -> array<f32, MV_RPS> {
    var wr: array<WRow, MV_RPS>;
    var acc: array<vec4<f32>, MV_RPS>;
    for (var r = 0u; r < MV_RPS; r++) {
        wr[r] = row_of(m, slot_row(min(row + r, last)));
        acc[r] = vec4<f32>(0.0);
    }
    for (var c = first; c < chunks; c += stride) {
        var raw: array<Raw32, MV_RPS>;
        for (var r = 0u; r < MV_RPS; r++) {
            raw[r] = raw32(wr[r], c0 + c);
        }
        for (var j = 0u; j < 4u; j++) {
            let xa = xs[swz(8u * c + 2u * j)];
            let xb = xs[swz(8u * c + 2u * j + 1u)];
            for (var r = 0u; r < MV_RPS; r++) {
                let w = decode8(raw[r], j);
                acc[r] = fma(w[0], xa, fma(w[1], xb, acc[r]));
            }
        }
    }
    var out: array<f32, MV_RPS>;
    for (var r = 0u; r < MV_RPS; r++) {
        out[r] = (acc[r].x + acc[r].y) + (acc[r].z + acc[r].w);
    }
    return out;
}
#endif

// dot_chunks for rows mr.y, … of weight mr.x; each branch sets `wsel` to a constant.
fn dot_chunks_w(mr: vec2<u32>, last: u32, c0: u32, chunks: u32, first: u32, stride: u32) -> array<f32, MV_RPS> {
#ifdef QKV
    if (mr.x == 2u) {
        wsel = 2u;
        return dot_chunks(2u, mr.y, last, c0, chunks, first, stride);
    }
#endif
#ifdef MULTI_W
    if (mr.x == 1u) {
        wsel = 1u;
        return dot_chunks(1u, mr.y, last, c0, chunks, first, stride);
    }
    wsel = 0u;
#endif
    return dot_chunks(0u, mr.y, last, c0, chunks, first, stride);
}

// The sums of task slots f, f + 1, … over the tile; a QKV task straddling two weights takes
// one row at a time (as dot_task in MATVEC_SG).
fn dot_chunk_task(f: u32, c0: u32, chunks: u32, first: u32, stride: u32) -> array<f32, MV_RPS> {
    let mr = locate(f, MV_ROWS);
#ifdef QKV
    if (locate(f + MV_RPS - 1u, MV_ROWS).x != mr.x) {
        var out: array<f32, MV_RPS>;
        for (var r = 0u; r < MV_RPS; r++) {
            let mr_r = locate(f + r, MV_ROWS);
            out[r] = 0.0;
            if (live(mr_r)) {
                out[r] = dot_chunks_w(mr_r, mr_r.y, c0, chunks, first, stride)[0];
            }
        }
        return out;
    }
#endif
    return dot_chunks_w(mr, p.rows[mr.x] - 1u, c0, chunks, first, stride);
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
    let k4 = p.k / 4u;
    // The row group, and the vec4s of x'[t] this workgroup reads: whole chunks of K, all of
    // it unless split.
#ifdef SPLIT_K
    let rg = g / p.splits;
    let split = g % p.splits;
    let per_split = (p.k / 32u + p.splits - 1u) / p.splits;
    let kv0 = min(8u * split * per_split, k4);
    let kv1 = min(kv0 + 8u * per_split, k4);
#else
    let rg = g;
    let kv0 = 0u;
    let kv1 = k4;
#endif
    let xrow = t * (p.k / 4u);
    for (var i = li; i < 64u * MV_RPS; i += 256u) {
        dots[i] = 0.0;
    }
    let tasks = MV_ROWS / MV_RPS;
    let spr = max(1u, nsg / tasks); // subgroups per task
    let part = sg % spr;
    let task_step = max(1u, nsg / spr); // tasks are dealt to subgroups round-robin
    var ss = 0.0;
#ifdef LEVELS_IN
    // One tile: the workgroup's whole range of K, read from the producer's levels.
    let tile_vec4 = kv1 - kv0;
    levels_base = t * 5u * (p.k / 32u) + kv0 / 8u;
    workgroupBarrier(); // dots is zeroed
#else
    let tile_vec4 = MV_STAGE_VEC4;
#endif
    for (var v0 = kv0; v0 < kv1; v0 += tile_vec4) {
        let n4 = min(tile_vec4, kv1 - v0);
#ifndef LEVELS_IN
        workgroupBarrier(); // the previous tile's readers are done (and dots is zeroed)
        ss += stage_tile(xrow, v0, n4, li);
        workgroupBarrier();
#endif
        for (var k = sg / spr; k < tasks; k += task_step) {
            let f = rg * MV_ROWS + k * MV_RPS;
            var acc: array<f32, MV_RPS>;
            for (var r = 0u; r < MV_RPS; r++) {
                acc[r] = 0.0;
            }
            if (live(locate(f, MV_ROWS))) {
                acc = dot_chunk_task(f, v0 / 8u, n4 / 8u, part * sg_size + lane, spr * sg_size);
            }
            for (var r = 0u; r < MV_RPS; r++) {
                let sum = subgroupAdd(acc[r]);
                if (lane == 0u) {
                    dots[(k * MV_RPS + r) * spr + part] += sum;
                }
            }
        }
    }
#ifdef NORM
    let s = subgroupAdd(ss);
    if (lane == 0u) {
        xs_ss[sg] = s;
    }
#endif
    workgroupBarrier();
    var x2 = 0.0;
#ifdef NORM
    for (var i = 0u; i < nsg; i++) {
        x2 += xs_ss[i];
    }
#endif
#ifdef SPLIT_K
    if (p.splits > 1u) {
        // Record this range's sums; the workgroup that arrives last for (t, rg) reads every
        // range's back, in split order, as its own (dots, x2). Its storageBarrier is
        // device-scoped in naga's SPIR-V, ordering the records before the counter increment.
        let record = split_record(t, rg, split);
        if (li < MV_ROWS) {
            atomicStore(&split_sums[record + li], bitcast<u32>(chunk_dot(li, spr)));
        }
        if (li == MV_ROWS) {
            atomicStore(&split_sums[record + MV_ROWS], bitcast<u32>(x2));
        }
        storageBarrier();
        let counter = t * (p.groups / p.splits) + rg;
        if (li == 0u) {
            split_arrived = atomicAdd(&split_sums[counter], 1u);
        }
        if (workgroupUniformLoad(&split_arrived) != p.splits - 1u) {
            return;
        }
        storageBarrier();
        if (li == 0u) {
            atomicStore(&split_sums[counter], 0u);
        }
        if (li <= MV_ROWS) {
            var total = 0.0;
            for (var sp = 0u; sp < p.splits; sp++) {
                total += bitcast<f32>(atomicLoad(&split_sums[split_record(t, rg, sp) + li]));
            }
            if (li < MV_ROWS) {
                dots[li * spr] = total;
                for (var i = 1u; i < spr; i++) {
                    dots[li * spr + i] = 0.0;
                }
            } else {
                split_x2 = total;
            }
        }
        workgroupBarrier();
        x2 = split_x2;
    }
#endif
    let mr = locate(rg * MV_ROWS + li, MV_ROWS);
#ifdef POST_NORM
    // The row groups arrive (with split K, each group's last range).
    let has = li < MV_ROWS && live(mr);
    var v = 0.0;
    if (has) {
        v = finish(chunk_sums(li, spr, x2)) + bias_of(0u, mr.y);
    }
    post_norm_add(t, li, sg, nsg, lane, mr.y, v, has, p.groups / p.splits);
#else
#ifdef QK_NORM
    qk_norm_store(t, li, rg, mr, finish(chunk_sums(li, spr, x2)), li < MV_ROWS && live(mr));
#else
    if (li < MV_ROWS && live(mr)) {
        store_slot(mr, t, chunk_sums(li, spr, x2), chunk_sums(partner_slot(li), spr, x2));
    }
#ifdef EMIT_LEVELS
    // The same value store_glu wrote, for W_down's levels.
    var h = 0.0;
    let has = li < MV_ROWS / 2u && live(mr);
    if (has) {
        h = glu_value(finish(chunk_sums(li, spr, x2)), finish(chunk_sums(partner_slot(li), spr, x2)));
    }
    emit_levels(t, li, rg, h, has);
#endif
#endif
#endif
}

// Slot r's Σ w·x' from its `spr` parts.
fn chunk_dot(r: u32, spr: u32) -> f32 {
    var s = 0.0;
    for (var i = 0u; i < spr; i++) {
        s += dots[r * spr + i];
    }
    return s;
}

// Slot r's Sums from its `spr` parts (and Σx²[t] with NORM).
fn chunk_sums(r: u32, spr: u32, x2: f32) -> Sums {
#ifdef NORM
    return Sums(chunk_dot(r, spr), x2);
#else
    return chunk_dot(r, spr);
#endif
}
