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
// One dispatch (no subgroups, ≤ 256 invocations: this runs in the browser): `groups`
// workgroups each reduce a contiguous `chunk` of the logits to one (key, index) pair, and the
// last of them to finish, found with an arrival counter, reduces the pairs and writes the
// winner into `ids[0]` (the next decode step's embedding lookup reads it) and
// `generated[slot]` (the readback ring). Two dispatches (partials, then a one-workgroup
// finish) cost the page ~14 µs more per token (BENCHMARKS.md, session 26).

struct Params {
    n: u32,      // vocabulary size: logits per row
    chunk: u32,  // logits per workgroup
    groups: u32, // workgroups = pairs to reduce
    slot: u32,   // index into `generated`
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<u32>;              // [n] f32 bits
// [0]: the arrival counter, 0 between dispatches; then per workgroup g its (key, index) at
// 1 + 2g. Atomic, as attention.wgsl's partials: the last workgroup reads what the others
// wrote in the same dispatch, and their storageBarrier (device-scoped in naga's SPIR-V)
// orders each pair before its writer's counter increment.
@group(0) @binding(2) var<storage, read_write> partials: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> ids: array<u32>;        // [1] next step's token
@group(0) @binding(4) var<storage, read_write> generated: array<u32>;  // [slots] readback ring

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu; // index of "no candidate" (key 0)

var<workgroup> keys: array<u32, 256>;
var<workgroup> idxs: array<u32, 256>;
var<workgroup> arrived: u32; // the counter's value before this workgroup's increment

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
        atomicStore(&partials[1u + 2u * wid.x], keys[0]);
        atomicStore(&partials[2u + 2u * wid.x], idxs[0]);
    }
    storageBarrier();
    if (li == 0u) {
        arrived = atomicAdd(&partials[0], 1u);
    }
    if (workgroupUniformLoad(&arrived) != p.groups - 1u) {
        return;
    }
    // The last workgroup: every pair is written. Reset the counter for the next dispatch.
    storageBarrier();
    if (li == 0u) {
        atomicStore(&partials[0], 0u);
    }
    k = 0u;
    i = NONE;
    if (li < p.groups) {
        k = atomicLoad(&partials[1u + 2u * li]);
        i = atomicLoad(&partials[2u + 2u * li]);
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
}
