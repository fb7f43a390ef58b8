// Micro-kernels that measure the adapter for the benchmark's floor (coco bench --probe).
//
//   READ   each invocation sums a strided slice of `src` and writes one value, so the
//          kernel's time is dominated by reading all of `src` once: read bandwidth.
//   EMPTY  touches one word: the cost of a dependent dispatch inside one compute pass (with
//          as many workgroups as the host asks, most of them idle).
//   GRID_SYNC  `rounds` grid-wide barriers inside one dispatch: every workgroup counts itself
//          in on one atomic counter and spins until all have, the way a persistent kernel
//          would order its phases instead of ending a dispatch. Nothing in WebGPU or Vulkan
//          promises that a dispatch's workgroups run at the same time, so the spin is bounded
//          (SPIN_LIMIT loads): a workgroup that gives up raises a flag, every other one stops
//          at its next round, and the host reports the grid as not co-resident. The per-round
//          cost against EMPTY's per-dispatch cost is what a persistent decode step would save.
//   FMA    8 independent chains of vec4 f32 FMAs per invocation: the arithmetic ceiling of
//          the portable kernels (what the browser's GEMM can at most reach).
//   MMA    (native, with wgpu's cooperative matrices; the host prepends the enables) each
//          subgroup multiplies 16 × 16 × 16 f16 blocks into 8 f32 accumulators: the tensor
//          cores' ceiling through this path. With WG_LOADS each step first loads its 2 A and 4 B
//          blocks from workgroup memory, as a coop128x128 subgroup does per 16-wide K step.

struct Params {
    n_vec4: u32,   // elements of src as vec4 (READ); steps per invocation (FMA, MMA); rounds (GRID_SYNC)
    threads: u32,  // invocations in the whole grid (READ); workgroups in the grid (GRID_SYNC)
    mul: f32,      // FMA's operands, from the host so the compiler can't fold the chains
    add: f32,
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef FMA
@group(0) @binding(1) var<storage, read_write> dst: array<f32>; // [4096]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = gid.x + gid.y * nwg.x * 256u;
    let m = vec4<f32>(p.mul);
    let c = vec4<f32>(p.add);
    var a0 = vec4<f32>(f32(id & 7u));
    var a1 = a0 + 1.0;
    var a2 = a0 + 2.0;
    var a3 = a0 + 3.0;
    var a4 = a0 + 4.0;
    var a5 = a0 + 5.0;
    var a6 = a0 + 6.0;
    var a7 = a0 + 7.0;
    for (var i = 0u; i < p.n_vec4; i++) {
        a0 = fma(a0, m, c);
        a1 = fma(a1, m, c);
        a2 = fma(a2, m, c);
        a3 = fma(a3, m, c);
        a4 = fma(a4, m, c);
        a5 = fma(a5, m, c);
        a6 = fma(a6, m, c);
        a7 = fma(a7, m, c);
    }
    let s = (a0 + a1) + (a2 + a3) + (a4 + a5) + (a6 + a7);
    dst[id & 4095u] = s.x + s.y + s.z + s.w;
}
#endif
#ifdef MMA
@group(0) @binding(1) var<storage, read_write> dst: array<f32>; // [16 · 8 · 8 · 256]

// 16 blocks of 16 × 16 operands (small values, so the sums stay finite), and the f32 zeros
// the accumulators start from.
var<workgroup> blocks: array<f16, 16u * 256u>;
var<workgroup> zeros: array<f32, 256>;

@compute @workgroup_size(256)
fn main(
    @builtin(local_invocation_index) li: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
) {
    for (var i = li; i < 16u * 256u; i += 256u) {
        blocks[i] = f16(f32(i % 13u) * p.mul);
    }
    zeros[li] = 0.0;
    workgroupBarrier();
    var c0 = coopLoad<coop_mat16x16<f32, C>>(&zeros[0], 16u);
    var c1 = c0;
    var c2 = c0;
    var c3 = c0;
    var c4 = c0;
    var c5 = c0;
    var c6 = c0;
    var c7 = c0;
    var a0 = coopLoad<coop_mat16x16<f16, A>>(&blocks[0u], 16u);
    var a1 = coopLoad<coop_mat16x16<f16, A>>(&blocks[256u], 16u);
    var b0 = coopLoad<coop_mat16x16<f16, B>>(&blocks[512u], 16u);
    var b1 = coopLoad<coop_mat16x16<f16, B>>(&blocks[768u], 16u);
    var b2 = coopLoad<coop_mat16x16<f16, B>>(&blocks[1024u], 16u);
    var b3 = coopLoad<coop_mat16x16<f16, B>>(&blocks[1280u], 16u);
    for (var i = 0u; i < p.n_vec4; i++) {
#ifdef WG_LOADS
        // Another 6 of the 16 operand blocks each step, so no load can leave the loop.
        let o = ((i * 5u) & 7u) * 256u;
        a0 = coopLoad<coop_mat16x16<f16, A>>(&blocks[o], 16u);
        a1 = coopLoad<coop_mat16x16<f16, A>>(&blocks[o + 256u], 16u);
        b0 = coopLoad<coop_mat16x16<f16, B>>(&blocks[o + 512u], 16u);
        b1 = coopLoad<coop_mat16x16<f16, B>>(&blocks[o + 768u], 16u);
        b2 = coopLoad<coop_mat16x16<f16, B>>(&blocks[o + 1024u], 16u);
        b3 = coopLoad<coop_mat16x16<f16, B>>(&blocks[o + 1280u], 16u);
#endif
        c0 = coopMultiplyAdd(a0, b0, c0);
        c1 = coopMultiplyAdd(a0, b1, c1);
        c2 = coopMultiplyAdd(a0, b2, c2);
        c3 = coopMultiplyAdd(a0, b3, c3);
        c4 = coopMultiplyAdd(a1, b0, c4);
        c5 = coopMultiplyAdd(a1, b1, c5);
        c6 = coopMultiplyAdd(a1, b2, c6);
        c7 = coopMultiplyAdd(a1, b3, c7);
    }
    // Every accumulator to its own place (workgroups share 16 sets), so none is dead.
    let at = (((wid.x + wid.y * nwg.x) & 15u) * 8u + sg) * 8u * 256u;
    coopStore(c0, &dst[at], 16u);
    coopStore(c1, &dst[at + 256u], 16u);
    coopStore(c2, &dst[at + 512u], 16u);
    coopStore(c3, &dst[at + 768u], 16u);
    coopStore(c4, &dst[at + 1024u], 16u);
    coopStore(c5, &dst[at + 1280u], 16u);
    coopStore(c6, &dst[at + 1536u], 16u);
    coopStore(c7, &dst[at + 1792u], 16u);
}
#endif
#ifdef READ
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>; // [n_vec4]
@group(0) @binding(2) var<storage, read_write> dst: array<f32>; // [threads]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let id = gid.x + gid.y * nwg.x * 256u;
    if (id >= p.threads) {
        return;
    }
    var acc = vec4<f32>(0.0);
    for (var i = id; i < p.n_vec4; i += p.threads) {
        acc += src[i];
    }
    dst[id] = acc.x + acc.y + acc.z + acc.w;
}
#endif
#ifdef EMPTY
@group(0) @binding(1) var<storage, read_write> dst: array<f32>; // [1]

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x == 0u) {
        dst[0] = dst[0] + f32(p.threads); // reads p so the auto layout keeps binding 0
    }
}
#endif

#ifdef GRID_SYNC
// [0] arrivals over all rounds, [1] 1 once a workgroup gave up waiting, [2] stale reads;
// zeroed by the host.
@group(0) @binding(1) var<storage, read_write> sync: array<atomic<u32>>;
// [workgroups]: what each workgroup wrote last round, with plain stores and loads, as a
// persistent kernel's phases would hand over their outputs.
@group(0) @binding(2) var<storage, read_write> slots: array<u32>;

// Loads of the counter before a workgroup gives up: on the H200 an atomic load that misses
// its SM is ~1 µs, so a grid that is not all resident costs ~30 ms, not a hang, while a
// resident grid's workgroups arrive within microseconds. Below 65,535: lavapipe's compiler
// ends any loop after that many trips without a word (gallivm's loop limiter), which made a
// larger limit's spins end early, as if everyone had arrived.
const SPIN_LIMIT: u32 = 32768u;

var<workgroup> gave_up: u32;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let g = wid.x;
    let groups = p.threads;
    for (var r = 0u; r < p.n_vec4; r++) {
        // This round's output, released before the workgroup counts itself in.
        if (li == 0u) {
            slots[g] = r + 1u;
        }
        storageBarrier();
        if (li == 0u) {
            atomicAdd(&sync[0], 1u);
            let all = (r + 1u) * groups;
            var spins = 0u;
            loop {
                if (atomicLoad(&sync[0]) >= all || atomicLoad(&sync[1]) != 0u) {
                    break;
                }
                spins++;
                if (spins == SPIN_LIMIT) {
                    atomicStore(&sync[1], 1u);
                    break;
                }
            }
            gave_up = atomicLoad(&sync[1]);
        }
        // Every invocation waits for lane 0 here, then acquires the others' writes.
        if (workgroupUniformLoad(&gave_up) != 0u) {
            break;
        }
        storageBarrier();
        // Two other workgroups' outputs by plain loads: a line this SM cached last round
        // must not be served stale (the question a persistent kernel's design hangs on).
        if (li < 2u) {
            let other = (g + 1u + li * (groups / 2u)) % groups;
            if (slots[other] < r + 1u) { // (it may already have written round r + 1's)
                atomicAdd(&sync[2], 1u);
            }
        }
    }
}
#endif
