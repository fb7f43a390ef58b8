// Greedy sampling on the GPU: the index of the largest logit, with exactly the semantics of
// `coco::sampler::argmax` (a sequential `if v > logits[best]` scan from best = 0):
// - ties go to the lowest index (+0.0 and -0.0 tie);
// - a NaN logit never wins; but if logits[0] is NaN the scan never moves, so the answer is 0.
//
// Logits are read as raw bits and compared as order-preserving u32 keys, so nothing depends on
// how the driver treats NaN or ±inf in float comparisons (WGSL lets implementations assume
// there are none). key(x) = bits | 0x80000000 for x ≥ 0, ~bits for x < 0: every non-NaN value
// gets a key ≥ key(-inf) = 0x007fffff, and a NaN gets key 0, which the strict `>` never picks.
//
// Two stages (no subgroups, ≤ 256 invocations: this runs in the browser):
// - PARTIAL: `groups` workgroups, each reducing a contiguous `chunk` of the logits to one
//   (key, index) pair in `partials[group]`;
// - FINISH: one workgroup reducing the partials, writing the winner into `ids[0]` (the next
//   decode step's embedding lookup reads it) and `generated[slot]` (the readback ring).

struct Params {
    n: u32,      // vocabulary size: logits per row
    chunk: u32,  // PARTIAL: logits per workgroup
    groups: u32, // workgroups of the PARTIAL stage = partials to reduce
    slot: u32,   // FINISH: index into `generated`
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef FINISH
@group(0) @binding(1) var<storage, read> partials: array<vec2<u32>>;   // [groups] (key, index)
@group(0) @binding(2) var<storage, read> logits: array<u32>;           // [n] f32 bits
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;        // [1] next step's token
@group(0) @binding(4) var<storage, read_write> generated: array<u32>;  // [slots] readback ring
#else
@group(0) @binding(1) var<storage, read> logits: array<u32>;           // [n] f32 bits
@group(0) @binding(2) var<storage, read_write> partials: array<vec2<u32>>; // [groups] (key, index)
#endif

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu; // index of "no candidate" (key 0)

var<workgroup> keys: array<u32, 256>;
var<workgroup> idxs: array<u32, 256>;

#include "common/order_key.wgsl"

// Tree reduction of (keys, idxs) over the workgroup: larger key wins, then lower index.
fn reduce(li: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (li < s) {
            let k = keys[li + s];
            let i = idxs[li + s];
            if (k > keys[li] || (k == keys[li] && i < idxs[li])) {
                keys[li] = k;
                idxs[li] = i;
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
#ifdef FINISH
    var k = 0u;
    var i = NONE;
    if (li < p.groups) {
        let c = partials[li];
        k = c.x;
        i = c.y;
    }
    keys[li] = k;
    idxs[li] = i;
    reduce(li);
    if (li == 0u) {
        var best = idxs[0];
        if (best == NONE || is_nan(logits[0])) {
            best = 0u;
        }
        ids[0] = best;
        generated[p.slot] = best;
    }
#else
    let start = wid.x * p.chunk;
    let end = min(start + p.chunk, p.n);
    var k = 0u;
    var i = NONE;
    // Increasing indices with a strict `>`: each invocation keeps its lowest-index maximum.
    for (var j = start + li; j < end; j += WG) {
        let kj = key_of(logits[j]);
        if (kj > k) {
            k = kj;
            i = j;
        }
    }
    keys[li] = k;
    idxs[li] = i;
    reduce(li);
    if (li == 0u) {
        partials[wid.x] = vec2<u32>(keys[0], idxs[0]);
    }
#endif
}
