// Sampling on the GPU: penalties → top-k → top-p → min-p → temperature → draw, over a full
// logits row, without sorting the vocabulary and without leaving the GPU. The definition each
// step implements is `coco::reference::sample` (its header); `kernels::sample` records the
// stages, one define each:
//
// - HISTOGRAM, level 0, 1, 2 (`groups` workgroups each): an exact radix select of the k-th
//   best key. Keys are the logits' order-preserving u32 bits (as in argmax.wgsl); level 0
//   counts keys by bits 31..21, level 1 the keys in the k-th's level-0 bin by bits 20..10,
//   level 2 the keys in its level-1 bin by bits 9..0. Each stage finds the bin the previous
//   level chose from that finished histogram (a suffix scan of its counts) and publishes it
//   in `counts` for the later stages (every workgroup stores the same values). With
//   PENALIZE (level 0, when a penalty is set) each workgroup first applies the repetition
//   penalty to the ids of the last `recent` tokens (the ring `recent`, indexed by position)
//   that fall in its chunk, in place.
// - COMPACT (`groups` workgroups): keys above the k-th's key (fewer than k) go to
//   `cands[0 ..]`; of the keys equal to it, each workgroup offers its lowest-id ones, in id
//   order, to `cands[MAX_CANDIDATES ..]` (1,024 slots; when more are offered, FINISH finds
//   the lowest-id ties itself by scanning the row: slow, but only for heavily tied logits).
// - FINISH (1 workgroup): sorts the ≤ k + 1,024 candidates by (key desc, id asc) with a
//   bitonic sort in workgroup memory, runs top-p, min-p and temperature on the best k, draws
//   with the counter-based uniform of (seed, position), and writes the id to `ids[0]` (the
//   next step's embedding lookup reads it), `generated[slot]` (the readback ring) and the
//   penalty ring. It then zeroes `counts` for the next step.
//
// Workgroup memory only, no subgroups, 256 invocations: the browser runs the same code. The
// scans over the 256 invocations are Hillis–Steele trees (8 steps, 16 barriers) on a GPU;
// with SERIAL_SCAN (CPU adapters, where every barrier switches all 256 invocations' fibers)
// invocation 0 runs them as a 256-step loop between two barriers.

struct Params {
    n: u32,               // vocabulary: logits in the row
    chunk: u32,           // HISTOGRAM, COMPACT: logits per workgroup
    groups: u32,          // workgroups of HISTOGRAM and COMPACT
    level: u32,           // HISTOGRAM: 0, 1 or 2
    candidates: u32,      // top-k: candidates wanted, 1..=MAX_CANDIDATES
    top_p: f32,
    top_p_on: u32,
    min_p_log: f32,       // ln(min_p)
    min_p_on: u32,
    inv_temperature: f32,
    penalty: f32,
    inv_penalty: f32,
    recent: u32,          // PENALIZE: ids to look back over (≤ MAX_RECENT, ≤ position)
    position: u32,        // the drawn token's index in the sequence: RNG counter, ring slot
    seed_lo: u32,
    seed_hi: u32,
    slot: u32,            // FINISH: index into `generated`
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef PENALIZE
@group(0) @binding(1) var<storage, read_write> logits: array<u32>;      // [n] f32 bits
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>; // [COUNT_WORDS]
@group(0) @binding(3) var<storage, read> recent: array<u32>;            // [MAX_RECENT] ring
#else
@group(0) @binding(1) var<storage, read> logits: array<u32>;            // [n] f32 bits
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>; // [COUNT_WORDS]
#endif
#ifdef COMPACT
@group(0) @binding(3) var<storage, read_write> cands: array<vec2<u32>>; // [2 · MAX_CANDIDATES] (key, id)
#endif
#ifdef FINISH
@group(0) @binding(3) var<storage, read> cands: array<vec2<u32>>;       // [2 · MAX_CANDIDATES] (key, id)
@group(0) @binding(4) var<storage, read_write> recent: array<u32>;      // [MAX_RECENT] ring
@group(0) @binding(5) var<storage, read_write> ids: array<u32>;         // [1] next step's token
@group(0) @binding(6) var<storage, read_write> generated: array<u32>;   // [slots] readback ring
#endif

const WG: u32 = 256u;
const MAX_CANDIDATES: u32 = 1024u;
const MAX_RECENT: u32 = 512u;
// Keys of finite logits lie in [MIN_KEY, INF_KEY): NaN and -inf below, +inf at INF_KEY.
const MIN_KEY: u32 = 0x00800000u;
const INF_KEY: u32 = 0xff800000u;
// `counts` layout (u32 words).
const HIST0: u32 = 0u;       // [2048] keys by bits 31..21
const HIST1: u32 = 2048u;    // [2048] bits 20..10 of the keys in the chosen level-0 bin
const HIST2: u32 = 4096u;    // [1024] bits 9..0 of the keys in the chosen level-1 bin
const N_ABOVE: u32 = 5120u;  // keys above the cut written to cands[0 ..]
const N_TIES: u32 = 5121u;   // ties offered to cands[MAX_CANDIDATES ..]
const OVERFLOW: u32 = 5122u; // 1 when more ties were offered than there are slots
// The radix select's choices, published by the stage that makes each (every workgroup
// stores the same values), so later stages read them instead of re-scanning histograms:
const CUT: u32 = 5124u;      // [bin0, rank0, k, bin1, rank1, bin2, rank2, unused]
const COUNT_WORDS: u32 = 5132u;
const TIE_SLOTS: u32 = 1024u;


#include "common/order_key.wgsl"

fn finite(key: u32) -> bool {
    return key >= MIN_KEY && key < INF_KEY;
}

var<workgroup> scan: array<u32, 256>;
var<workgroup> found: vec2<u32>;
var<workgroup> total: u32;

// The bin of counts[base .. base + bins) holding the rank-th largest key (rank ≥ 1, clamped to
// the keys counted; bins / WG consecutive bins per invocation), and the key's rank within
// that bin: (bin, rank − keys in higher bins). Sets `total` to the keys counted.
fn find_bin(li: u32, base: u32, bins: u32, want: u32) -> vec2<u32> {
    let per = bins / WG;
    let lo_bin = li * per;
    var own = 0u;
    for (var j = 0u; j < per; j++) {
        own += atomicLoad(&counts[base + lo_bin + j]);
    }
    scan[li] = own;
    workgroupBarrier();
    // After a barrier: every invocation has read the previous call's `found`.
    if (li == 0u) {
        found = vec2<u32>(0u, 0u);
    }
    // Suffix sums from the top bin down: scan[i] = keys in bins ≥ i · per.
#ifdef SERIAL_SCAN
    if (li == 0u) {
        var acc = 0u;
        for (var t = WG; t > 0u; t--) {
            acc += scan[t - 1u];
            scan[t - 1u] = acc;
        }
    }
    workgroupBarrier();
#else
    for (var off = 1u; off < WG; off <<= 1u) {
        var v = scan[li];
        if (li + off < WG) {
            v += scan[li + off];
        }
        workgroupBarrier();
        scan[li] = v;
        workgroupBarrier();
    }
#endif
    let rank = min(want, scan[0]);
    let upto = scan[li];
    let higher = upto - own;
    if (higher < rank && rank <= upto) {
        var acc = higher;
        for (var j = per; j > 0u; j--) {
            let b = lo_bin + j - 1u;
            let c = atomicLoad(&counts[base + b]);
            if (acc + c >= rank) {
                found = vec2<u32>(b, rank - acc);
                break;
            }
            acc += c;
        }
    }
    if (li == 0u) {
        total = scan[0];
    }
    return workgroupUniformLoad(&found);
}

// The choices so far (see CUT): `k` = candidates wanted ∩ finite keys; level L's bin of the
// k-th key and its rank among the keys in that bin.
struct Cut {
    bin0: u32,
    rank0: u32,
    k: u32,
    bin1: u32,
    rank1: u32,
    bin2: u32,
    rank2: u32,
    unused: u32,
}

var<workgroup> cut_words: Cut;

// The published choices, read once per workgroup and made uniform.
fn load_cut(li: u32) -> Cut {
    if (li == 0u) {
        cut_words = Cut(
            atomicLoad(&counts[CUT]), atomicLoad(&counts[CUT + 1u]), atomicLoad(&counts[CUT + 2u]),
            atomicLoad(&counts[CUT + 3u]), atomicLoad(&counts[CUT + 4u]), atomicLoad(&counts[CUT + 5u]),
            atomicLoad(&counts[CUT + 6u]), 0u,
        );
    }
    return workgroupUniformLoad(&cut_words);
}

// Publishes a (bin, rank) choice at counts[at ..].
fn publish(li: u32, at: u32, choice: vec2<u32>) {
    if (li == 0u) {
        atomicStore(&counts[at], choice.x);
        atomicStore(&counts[at + 1u], choice.y);
    }
}

// Inclusive prefix count of `flag` over the workgroup, in invocation order (so in id order
// for a tile of consecutive ids): returns this invocation's count; the tile's total is then
// `workgroupUniformLoad(&scan[WG - 1u])` (read by the caller, so that it stays uniform: a
// vector mixing it with the non-uniform count would not be).
fn prefix_count(li: u32, flag: bool) -> u32 {
    workgroupBarrier(); // the previous call's readers are done with `scan`
    scan[li] = select(0u, 1u, flag);
    workgroupBarrier();
#ifdef SERIAL_SCAN
    if (li == 0u) {
        var acc = 0u;
        for (var t = 0u; t < WG; t++) {
            acc += scan[t];
            scan[t] = acc;
        }
    }
    workgroupBarrier();
#else
    for (var off = 1u; off < WG; off <<= 1u) {
        var v = scan[li];
        if (li >= off) {
            v += scan[li - off];
        }
        workgroupBarrier();
        scan[li] = v;
        workgroupBarrier();
    }
#endif
    return scan[li];
}

#ifdef PENALIZE
var<workgroup> recent_ids: array<u32, 512>;

// The repetition penalty, folded into the level-0 histogram: each distinct id of the last
// `recent` tokens that falls in this workgroup's chunk [start, end) gets its logit penalized
// in place. The chunks are disjoint, so no other workgroup touches those logits, and the
// later stages (separate dispatches) read them penalized.
fn penalize(li: u32, start: u32, end: u32) {
    let count = p.recent;
    for (var i = li; i < count; i += WG) {
        recent_ids[i] = recent[(p.position - count + i) & (MAX_RECENT - 1u)];
    }
    workgroupBarrier();
    for (var i = li; i < count; i += WG) {
        let id = recent_ids[i];
        var distinct = id >= start && id < end;
        for (var j = 0u; j < i && distinct; j++) {
            distinct = recent_ids[j] != id;
        }
        if (distinct) {
            let l = bitcast<f32>(logits[id]);
            logits[id] = bitcast<u32>(select(l * p.penalty, l * p.inv_penalty, l > 0.0));
        }
    }
    // The histogram below reads what other invocations of this workgroup just wrote.
    storageBarrier();
}
#endif

#ifdef HISTOGRAM
var<workgroup> local_hist: array<atomic<u32>, 2048>;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    for (var b = li; b < 2048u; b += WG) {
        atomicStore(&local_hist[b], 0u);
    }
    // The key bits chosen so far: level 1 chooses the level-0 bin from the finished level-0
    // histogram (and publishes it), level 2 the level-1 bin.
    var prefix = 0u;
    if (p.level == 1u) {
        let b0 = find_bin(li, HIST0, 2048u, p.candidates);
        let k = min(p.candidates, workgroupUniformLoad(&total));
        publish(li, CUT, b0);
        if (li == 0u) {
            atomicStore(&counts[CUT + 2u], k);
        }
        if (k == 0u) {
            return;
        }
        prefix = b0.x;
    } else if (p.level == 2u) {
        let c = load_cut(li);
        if (c.k == 0u) {
            return;
        }
        let b1 = find_bin(li, HIST1, 2048u, c.rank0);
        publish(li, CUT + 3u, b1);
        prefix = (c.bin0 << 11u) | b1.x;
    }
    let start = wid.x * p.chunk;
    let end = min(start + p.chunk, p.n);
#ifdef PENALIZE
    penalize(li, start, end);
#endif
    workgroupBarrier();
    for (var j = start + li; j < end; j += WG) {
        let key = key_of(logits[j]);
        if (!finite(key)) {
            continue;
        }
        if (p.level == 0u) {
            atomicAdd(&local_hist[key >> 21u], 1u);
        } else if (p.level == 1u) {
            if ((key >> 21u) == prefix) {
                atomicAdd(&local_hist[(key >> 10u) & 2047u], 1u);
            }
        } else if ((key >> 10u) == prefix) {
            atomicAdd(&local_hist[key & 1023u], 1u);
        }
    }
    workgroupBarrier();
    var base = HIST0;
    var bins = 2048u;
    if (p.level == 1u) {
        base = HIST1;
    } else if (p.level == 2u) {
        base = HIST2;
        bins = 1024u;
    }
    for (var b = li; b < bins; b += WG) {
        let c = atomicLoad(&local_hist[b]);
        if (c > 0u) {
            atomicAdd(&counts[base + b], c);
        }
    }
}
#endif

#ifdef COMPACT
var<workgroup> chunk_ties: atomic<u32>;
var<workgroup> chunk_has_tie: u32;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let c = load_cut(li);
    if (c.k == 0u) {
        return;
    }
    let b2 = find_bin(li, HIST2, 1024u, c.rank1);
    publish(li, CUT + 5u, b2);
    let cut_key = (c.bin0 << 21u) | (c.bin1 << 10u) | b2.x;
    let need = b2.y; // ties at cut_key among the k best, lowest ids first
    let start = wid.x * p.chunk;
    let end = min(start + p.chunk, p.n);
    // Keys above the cut, in any order (fewer than k of them, so every slot is in range);
    // and whether this chunk holds a tie at all (usually only the k-th's chunk does).
    var ties = 0u;
    for (var j = start + li; j < end; j += WG) {
        let key = key_of(logits[j]);
        if (finite(key) && key > cut_key) {
            let slot = atomicAdd(&counts[N_ABOVE], 1u);
            if (slot < MAX_CANDIDATES) {
                cands[slot] = vec2<u32>(key, j);
            }
        }
        ties += select(0u, 1u, key == cut_key);
    }
    if (ties > 0u) {
        atomicAdd(&chunk_ties, ties);
    }
    workgroupBarrier();
    if (li == 0u) {
        chunk_has_tie = atomicLoad(&chunk_ties);
    }
    if (workgroupUniformLoad(&chunk_has_tie) == 0u) {
        return;
    }
    // Offer this chunk's lowest-id ties, in id order, tile by tile.
    var taken = 0u; // ties in this chunk before the current tile
    for (var base = start; base < end && taken < need; base += WG) {
        let j = base + li;
        let tie = j < end && key_of(logits[j]) == cut_key;
        let rank = prefix_count(li, tie);
        let tile_ties = workgroupUniformLoad(&scan[WG - 1u]);
        if (tie && taken + rank <= need) {
            let slot = atomicAdd(&counts[N_TIES], 1u);
            if (slot < TIE_SLOTS) {
                cands[MAX_CANDIDATES + slot] = vec2<u32>(cut_key, j);
            } else {
                atomicStore(&counts[OVERFLOW], 1u);
            }
        }
        taken += tile_ties;
    }
}
#endif

#ifdef FINISH
var<workgroup> skey: array<u32, 2048>;
var<workgroup> sid: array<u32, 2048>;
var<workgroup> vals: array<f32, 1024>;
var<workgroup> wts: array<f32, 1024>;
var<workgroup> fscan: array<f32, 256>;
var<workgroup> pick: atomic<u32>;
var<workgroup> picked: u32;
var<workgroup> stored: vec2<u32>;

// The counter-based uniform in [0, 1) of (seed, position): `coco::sampler::uniform`.
fn mix32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

fn uniform01() -> f32 {
    let key = mix32(p.seed_lo ^ mix32(p.seed_hi ^ 0x9e3779b9u));
    let h = mix32(mix32(p.position ^ key) + key);
    return f32(h >> 8u) * (1.0 / 16777216.0);
}

// a before b: larger key first, then lower id.
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

// Bitonic sort of skey/sid[0 .. size) (size a power of two) into "before" order.
fn sort(li: u32, size: u32) {
    for (var width = 2u; width <= size; width <<= 1u) {
        for (var stride = width >> 1u; stride > 0u; stride >>= 1u) {
            for (var t = li; t < size / 2u; t += WG) {
                let i = (t / stride) * 2u * stride + (t % stride);
                let j = i + stride;
                let a_first = before(skey[i], sid[i], skey[j], sid[j]);
                if (a_first != ((i & width) == 0u)) {
                    let k = skey[i];
                    skey[i] = skey[j];
                    skey[j] = k;
                    let d = sid[i];
                    sid[i] = sid[j];
                    sid[j] = d;
                }
            }
            workgroupBarrier();
        }
    }
}

// vals[0 .. count) (count ≤ 1024) → its inclusive prefix sums: 4 consecutive per invocation
// summed in order, then a scan over the invocations. Returns the total, uniformly.
fn prefix_sums(li: u32, count: u32) -> f32 {
    workgroupBarrier();
    let lo = li * 4u;
    var run = 0.0;
    for (var q = 0u; q < 4u; q++) {
        if (lo + q < count) {
            run += vals[lo + q];
        }
    }
    fscan[li] = run;
    workgroupBarrier();
#ifdef SERIAL_SCAN
    if (li == 0u) {
        var acc = 0.0;
        for (var t = 0u; t < WG; t++) {
            acc += fscan[t];
            fscan[t] = acc;
        }
    }
    workgroupBarrier();
#else
    for (var off = 1u; off < WG; off <<= 1u) {
        var v = fscan[li];
        if (li >= off) {
            v += fscan[li - off];
        }
        workgroupBarrier();
        fscan[li] = v;
        workgroupBarrier();
    }
#endif
    var acc = 0.0;
    if (li > 0u) {
        acc = fscan[li - 1u];
    }
    for (var q = 0u; q < 4u; q++) {
        if (lo + q < count) {
            acc += vals[lo + q];
            vals[lo + q] = acc;
        }
    }
    return workgroupUniformLoad(&fscan[WG - 1u]);
}

// The smallest i < count flagged by `hit` (count when none): reset before, read uniformly.
fn first_hit(li: u32, count: u32, kind: u32, goal: f32) -> u32 {
    if (li == 0u) {
        atomicStore(&pick, count);
    }
    workgroupBarrier();
    for (var i = li; i < count; i += WG) {
        var hit = false;
        if (kind == 0u) {
            hit = vals[i] >= goal; // top-p: the running mass reaches the goal
        } else if (kind == 1u) {
            hit = bitcast<f32>(logits[sid[i]]) < goal; // min-p: below the floor
        } else {
            hit = vals[i] > goal; // the draw
        }
        if (hit) {
            atomicMin(&pick, i);
        }
    }
    workgroupBarrier();
    if (li == 0u) {
        picked = atomicLoad(&pick);
    }
    return workgroupUniformLoad(&picked);
}

// The drawn id, for k ≥ 1 candidates whose cut is `c`.
fn choose(li: u32, c: Cut) -> u32 {
    let cut_key = (c.bin0 << 21u) | (c.bin1 << 10u) | c.bin2;
    let need = c.rank2;
    let k = c.k;
    let above = k - need;
    if (li == 0u) {
        stored = vec2<u32>(min(atomicLoad(&counts[N_TIES]), TIE_SLOTS), atomicLoad(&counts[OVERFLOW]));
    }
    let ties = workgroupUniformLoad(&stored);
    for (var i = li; i < above; i += WG) {
        let e = cands[i];
        skey[i] = e.x;
        sid[i] = e.y;
    }
    var m = above + need;
    if (ties.y == 0u) {
        for (var i = li; i < ties.x; i += WG) {
            let e = cands[MAX_CANDIDATES + i];
            skey[above + i] = e.x;
            sid[above + i] = e.y;
        }
        m = above + ties.x;
    } else {
        // Too many ties to store: the `need` lowest-id ones, by scanning the row in order.
        var got = 0u;
        for (var base = 0u; base < p.n; base += WG) {
            let j = base + li;
            let tie = j < p.n && key_of(logits[j]) == cut_key;
            let rank = prefix_count(li, tie);
            let tile_ties = workgroupUniformLoad(&scan[WG - 1u]);
            if (tie && got + rank <= need) {
                skey[above + got + rank - 1u] = cut_key;
                sid[above + got + rank - 1u] = j;
            }
            got += tile_ties;
            if (got >= need) {
                break;
            }
        }
    }
    var size = 1u;
    while (size < m) {
        size <<= 1u;
    }
    for (var i = m + li; i < size; i += WG) {
        skey[i] = 0u;
        sid[i] = 0xffffffffu;
    }
    workgroupBarrier();
    sort(li, size);
    // The k best are skey/sid[0 .. k), best first; their logits are the penalized ones.
    let l0 = bitcast<f32>(logits[sid[0]]);
    var keep = k;
    if (p.top_p_on != 0u) {
        for (var i = li; i < k; i += WG) {
            vals[i] = exp(bitcast<f32>(logits[sid[i]]) - l0);
        }
        let mass = prefix_sums(li, k);
        keep = min(first_hit(li, k, 0u, p.top_p * mass) + 1u, k);
    }
    if (p.min_p_on != 0u) {
        keep = min(keep, first_hit(li, keep, 1u, l0 + p.min_p_log));
    }
    keep = max(keep, 1u);
    for (var i = li; i < keep; i += WG) {
        let w = exp((bitcast<f32>(logits[sid[i]]) - l0) * p.inv_temperature);
        vals[i] = w;
        wts[i] = w;
    }
    let weight = prefix_sums(li, keep);
    var chosen = first_hit(li, keep, 2u, uniform01() * weight);
    if (chosen == keep) {
        // Rounding left the target at the total: the last candidate with any weight.
        workgroupBarrier(); // every invocation has read `picked`
        if (li == 0u) {
            var last = 0u;
            for (var i = 0u; i < keep; i++) {
                if (wts[i] > 0.0) {
                    last = i;
                }
            }
            picked = last;
        }
        chosen = workgroupUniformLoad(&picked);
    }
    return sid[chosen];
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32) {
    let c = load_cut(li);
    var id = 0u; // no finite logit at all
    if (c.k > 0u) {
        id = choose(li, c);
    }
    if (li == 0u) {
        ids[0] = id;
        generated[p.slot] = id;
        recent[p.position & (MAX_RECENT - 1u)] = id;
    }
    // Every read of `counts` above is done: zero them for the next step.
    storageBarrier();
    workgroupBarrier();
    for (var w = li; w < COUNT_WORDS; w += WG) {
        atomicStore(&counts[w], 0u);
    }
}
#endif
