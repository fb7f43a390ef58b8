// Short steps on tensor cores (COOP_STREAM, with X16 and COOP_STAGING; included by
// matmul.wgsl after matmul/tiles.wgsl). What COCO_COOP_STREAM=1 runs for steps of 5 to 32
// tokens natively, until the H200 has timed it against the matvec those steps run by default.
//
// Why: a 32-token step on the matvec decodes every weight once per token (the Llama-1B shape's
// gate/up took 213 µs per layer, 10 TFLOP/s), and on the 64-token tiles each of a few hundred
// workgroups walks all of K one staged chunk and two workgroup barriers at a time (195 µs;
// BENCHMARKS.md "session 29"). Here a workgroup owns TILE_N = CB slots × TILE_T = 2 CB tokens
// (one block of rows, two of tokens) and its NSG subgroups split K: each dequantizes only its
// own chunks' CB × 32 weights into its own slice of workgroup memory, multiplies them by x'
// loaded as matrices straight from the f16 rows of the scale pass (matmul/token_scale.wgsl:
// nothing of x' is staged), and syncs with subgroupBarrier only. One workgroup barrier
// before the subgroups' sums are added. The Llama-1B shape's gate/up is then 1,024
// workgroups, each weight dequantized once per step.
//
// Numerics: those of the other tensor-core tiles (W and x' as f16, sums in f32, the per-token
// factors of the scale pass at B_SCALES applied in the epilogue).

// Row stride of a subgroup's W slice: 80 bytes with blocks of 16 (so the rows a matrix load
// reads start in different banks), 64 with blocks of 8 (the slices and sums then fill exactly
// lavapipe's 32 KiB).
const AS: u32 = 32u + 8u * (CB / 16u);

var<workgroup> wt16: array<StagedHalf, (NSG * CB * AS) / SV>; // [subgroup][slot][k]: its W chunk (A, row-major)
var<workgroup> ct: array<f32, NSG * 2u * CB * CB>;           // [subgroup][token][slot]: its sums (C, column-major)

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_id) sg: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let chunks = p.k / 32u;
    // Subgroup sg multiplies chunks sg · per .. + per - 1 (the same trip count in every
    // subgroup, so the barriers stay in uniform control flow).
    let per = (chunks + NSG - 1u) / NSG;
    let slice = sg * CB * AS;
    let scratch = sg * 2u * CB * CB;
    // The zeros the accumulators start from (a block is 8 values per lane).
    for (var i = 0u; i < 8u; i++) {
        ct[scratch + SGS * i + lane] = 0.0;
    }
    workgroupBarrier();
    var c0 = coopLoad<CoopC>(&ct[scratch], CB);
    var c1 = c0;
    // A chunk of the slice is CB slots × 4 groups of 8 elements; lane l stages groups
    // l · GROUPS .. + GROUPS - 1 (group u: slot u / 4, elements 8(u % 4) ..).
    let groups = 4u * CB / SGS;
    let xs = p.k / 4u; // an x16 row, in vec4s
    let zero8 = array<vec4<f16>, 2>(vec4<f16>(0.0h), vec4<f16>(0.0h));
    // The matrix work stays in uniform control flow (naga requires it of cooperative-matrix
    // operations): a subgroup past the last chunk multiplies zeros by the last chunk's x'.
    for (var j = 0u; j < per; j++) {
        let c = sg * per + j;
        let mine = c < chunks;
        for (var i = 0u; i < groups; i++) {
            let u = lane * groups + i;
            let slot = u / 4u;
            let mr = locate(g * TILE_N + slot, TILE_N);
            var w8 = zero8;
            if (mine && live(mr)) {
                w8 = dequant_w8h(mr, 4u * c + u % 4u);
            }
            stage_w16(slice + slot * AS + 8u * (u % 4u), w8);
        }
        subgroupBarrier();
        let cx = min(c, chunks - 1u);
        for (var kk = 0u; kk < 32u; kk += CB) {
            let a = coopLoadT<CoopA>(&wt16[(slice + kk) / SV], AS / SV);
            let xb = (t0 * p.k + 32u * cx + kk) / 4u;
            let b0 = coopLoad<CoopB>(&x16[xb], xs);
            let b1 = coopLoad<CoopB>(&x16[xb + CB * xs], xs);
            c0 = coopMultiplyAdd(a, b0, c0);
            c1 = coopMultiplyAdd(a, b1, c1);
        }
        // The slice is rewritten by the next chunk.
        subgroupBarrier();
    }
    coopStore(c0, &ct[scratch], CB);
    coopStore(c1, &ct[scratch + CB * CB], CB);
    workgroupBarrier();
    // The subgroups' sums added per (token, slot), in subgroup order, times the token's factor.
#ifdef GLU
    // Slots s < CB / 2 are gate rows, s + CB / 2 the up rows of the same rows (locate).
    for (var o = li; o < CB * CB; o += 256u) {
        let tok = o / (CB / 2u);
        let s = o % (CB / 2u);
        let t = t0 + tok;
        let mr = locate(g * TILE_N + s, TILE_N);
        if (t < p.t && live(mr)) {
            var gate = 0.0;
            var up = 0.0;
            for (var q = 0u; q < NSG; q++) {
                gate += ct[q * 2u * CB * CB + tok * CB + s];
                up += ct[q * 2u * CB * CB + tok * CB + s + CB / 2u];
            }
            let f = tscale(t);
            store_glu(t, mr.y, gate * f, up * f);
        }
    }
#else
    for (var o = li; o < 2u * CB * CB; o += 256u) {
        let tok = o / CB;
        let s = o % CB;
        let t = t0 + tok;
        let mr = locate(g * TILE_N + s, TILE_N);
        if (t < p.t && live(mr)) {
            var v = 0.0;
            for (var q = 0u; q < NSG; q++) {
                v += ct[q * 2u * CB * CB + o];
            }
            store(mr.x, t, mr.y, v * tscale(t));
        }
    }
#endif
}
