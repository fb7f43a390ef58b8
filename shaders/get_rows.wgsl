// out[T, dim] = scale · dequant(table[ids[t], :]): the token-embedding lookup, for any weight
// type, dequantizing the table's rows in registers (common/dequant.wgsl).
//
// A table larger than the binding limit is split by rows into parts (Gemma's 262,144 × 640
// Q8_0 table is 178 MB); the host dispatches once per part and each invocation writes only if
// its id falls in that part's rows. An id past the whole table gets a zero row from the part
// flagged `zero_missing`, so no output is left stale.
//
// Defines: the weight type (F32 … IQ4_XS). One invocation per (token, 32-element chunk); the
// 1-D invocation space is folded into 2-D workgroups (x + y·num_workgroups.x).

#include "common/dequant.wgsl"

struct Params {
    dim: u32,          // elements per row (multiple of 32)
    t: u32,            // T: tokens
    row0: u32,         // first table row held by this part
    rows: u32,         // rows in this part
    n_rows: u32,       // rows of the whole table
    zero_missing: u32, // 1: this dispatch also zeroes rows for ids >= n_rows
    scale: f32,        // multiplier (Gemma scales embeddings by sqrt(dim))
    _pad: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;         // [rows, dim] (src/gpu/layout.rs)
@group(0) @binding(2) var<storage, read> ids: array<u32>;             // [T] token ids
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>; // [T, dim] f32

const WG: u32 = 64u;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let chunks = p.dim / 32u;
    let i = (wid.x + wid.y * nwg.x) * WG + li;
    if (i >= p.t * chunks) {
        return;
    }
    let tok = i / chunks;
    let c = i % chunks;
    let id = ids[tok];
    let o = tok * (p.dim / 4u) + 8u * c;
    if (id >= p.row0 && id - p.row0 < p.rows) {
        let v = dequant32(w_row(id - p.row0, p.dim, p.rows), c);
        for (var j = 0u; j < 8u; j++) {
            out[o + j] = p.scale * v[j];
        }
    } else if (p.zero_missing != 0u && id >= p.n_rows) {
        for (var j = 0u; j < 8u; j++) {
            out[o + j] = vec4<f32>(0.0);
        }
    }
}
