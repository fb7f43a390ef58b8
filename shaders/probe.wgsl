// Micro-kernels that measure the adapter for the benchmark's floor (coco bench --probe).
//
//   READ   each invocation sums a strided slice of `src` and writes one value, so the
//          kernel's time is dominated by reading all of `src` once: read bandwidth.
//   EMPTY  touches one word: the cost of a dependent dispatch inside one compute pass.

struct Params {
    n_vec4: u32,   // elements of src as vec4 (READ)
    threads: u32,  // invocations in the whole grid (READ)
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef READ
@group(0) @binding(1) var<storage, read> src: array<vec4<f32>>; // [n_vec4]
@group(0) @binding(2) var<storage, read_write> dst: array<f32>; // [threads]
#else
@group(0) @binding(1) var<storage, read_write> dst: array<f32>; // [1]
#endif

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
#ifdef READ
    let id = gid.x + gid.y * nwg.x * 256u;
    if (id >= p.threads) {
        return;
    }
    var acc = vec4<f32>(0.0);
    for (var i = id; i < p.n_vec4; i += p.threads) {
        acc += src[i];
    }
    dst[id] = acc.x + acc.y + acc.z + acc.w;
#else
    if (gid.x == 0u) {
        dst[0] = dst[0] + f32(p.threads); // reads p so the auto layout keeps binding 0
    }
#endif
}
