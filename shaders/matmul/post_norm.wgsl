// Gemma's sandwich norm folded into the product that feeds it (POST_NORM): included by
// matmul.wgsl, which declares post_w and post_scratch, for the subgroup and chunk matvecs
// (their mains call post_norm_add in place of the store).

var<workgroup> post_arrived: u32;
var<workgroup> post_ss: array<f32, 64>; // Σy² per subgroup (at most 64 of them)

// The POST_NORM epilogue. Every workgroup records its finished rows (`has`: slot li holds
// `row`'s value v); the last of token t's `arrivals` workgroups to finish reads the whole row
// back, takes its Σy² and adds y_i · rsqrt(mean(y²) + eps) · post_w[i] into the residual
// stream y. That is gemma's norm_rms_add dispatch folded in: the row's norm depends on every
// workgroup's rows, which only the last to arrive can see (as split K's last range). Each
// storageBarrier is device-scoped in naga's SPIR-V: the records are ordered before the
// counter increment, and the last workgroup's reads after it.
fn post_norm_add(t: u32, li: u32, sg: u32, nsg: u32, lane: u32, row: u32, v: f32, has: bool,
                 arrivals: u32) {
    let values = POST_COUNTERS + t * p.rows.x;
    if (has) {
        atomicStore(&post_scratch[values + row], bitcast<u32>(v));
    }
    storageBarrier();
    if (li == 0u) {
        post_arrived = atomicAdd(&post_scratch[t], 1u);
    }
    if (workgroupUniformLoad(&post_arrived) != arrivals - 1u) {
        return;
    }
    storageBarrier();
    var ss = 0.0;
    for (var i = li; i < p.rows.x; i += 256u) {
        let y = bitcast<f32>(atomicLoad(&post_scratch[values + i]));
        ss += y * y;
    }
    let sum = subgroupAdd(ss);
    if (lane == 0u) {
        post_ss[sg] = sum;
    }
    workgroupBarrier();
    var total = 0.0;
    for (var i = 0u; i < nsg; i++) {
        total += post_ss[i];
    }
    if (li == 0u) {
        atomicStore(&post_scratch[t], 0u); // ready for the next dispatch
    }
    let inv_rms = inverseSqrt(total / f32(p.rows.x) + p.eps);
    for (var i = li; i < p.rows.x; i += 256u) {
        let y_i = bitcast<f32>(atomicLoad(&post_scratch[values + i]));
        y[t * p.n.x + i] += y_i * inv_rms * post_w[i];
    }
}
