// Split K for the 64 × 64 tile kernels (TILED, TILED_COOP with SPLIT_K): p.splits consecutive
// workgroups share a (token tile, row group), each over its own range of whole 32-element
// chunks of K (tile_chunks). Included by matmul.wgsl.
//
// Why: a short step's grid is tiny. A 32-token step of the Llama-1B shape gives W_o and
// W_down 32 workgroups of 64 rows for the H200's 132 SMs, and each walks all of K (W_down:
// 256 chunks) one staged chunk and two barriers at a time, so the step costs the same at 8
// tokens as at 64 (BENCHMARKS.md "session 27"). Split s ways, the grid has s times the
// workgroups and each walks 1/s of K.
//
// The last workgroup of a tile to finish, found with an arrival counter, adds the ranges'
// sums in split order and runs the epilogue, so the product stays one dispatch. Each thread
// hands over the 16 sums it holds when its K loop ends (which 16 is the kernel's business)
// and the Σx² of what it staged. The scratch, u32 words accessed atomically (floats by
// bitcast; as attention.wgsl's partials, for the same reason):
//   [0, SPLIT_COUNTERS)  an arrival counter per (token tile, row group), 0 between dispatches;
//   then per (token tile, row group, split) TILE_RECORD words: sum i of thread li at
//   256 i + li, then thread li's Σx² at 4096 + li.
// The host (kernels/matmul/select.rs tile_splits) keeps both within bounds.

const SPLIT_COUNTERS: u32 = 4096u;
#ifdef SPLIT_PASS
// With SPLIT_PASS (the tensor-core tiles with x' prestaged: matmul/gemm_coop_x16.wgsl, and
// matmul/gemm_tiled_coop.wgsl with COCO_COOP64_SPLIT_PASS=1) no workgroup merges: each stores
// its range's sums as plain f32 records after the counters' words, and the dispatch after the
// product (MERGE_PASS, matmul/split_merge.wgsl) adds them. The counters are not used.
@group(0) @binding(B_SPLIT) var<storage, read_write> split_records: array<f32>;

// The first word of range `split`'s record of tile `tile` (token tile · row groups + row
// group, split_tile), which holds the sum of slot s and tile token n at n · TILE_N + s.
fn record_base(tile: u32, split: u32) -> u32 {
    return SPLIT_COUNTERS + (tile * p.splits + split) * TILE_N * TILE_T;
}
#else
@group(0) @binding(B_SPLIT) var<storage, read_write> split_sums: array<atomic<u32>>;
const TILE_RECORD: u32 = 17u * 256u;
#ifndef X16
var<workgroup> split_arrived: u32;
#endif
#endif

// Chunks [x, y) of K that split `split` multiplies (empty past the end of K).
fn tile_chunks(split: u32) -> vec2<u32> {
    let chunks = p.k / 32u;
    let per = (chunks + p.splits - 1u) / p.splits;
    let c0 = min(split * per, chunks);
    return vec2<u32>(c0, min(c0 + per, chunks));
}

#ifndef SPLIT_PASS
// Records thread li's sums `v` (those whose bit is set in `live`: the others belong to tokens
// past the step's) and Σx² `ss` for tile `tile` (token tile · row groups + row group), range
// `split`. Returns false unless this workgroup is the tile's last to arrive; then `v` and `ss`
// hold the sums over every range, added in split order, so the result does not depend on
// which workgroup finished last. Its storageBarrier is device-scoped in naga's SPIR-V,
// ordering the records before the counter increment.
fn split_merge(
    li: u32,
    tile: u32,
    split: u32,
    live: u32,
    v: ptr<function, array<f32, 16>>,
    ss: ptr<function, f32>,
) -> bool {
    let base = SPLIT_COUNTERS + tile * p.splits * TILE_RECORD;
    let own = base + split * TILE_RECORD;
    for (var i = 0u; i < 16u; i++) {
        if (((live >> i) & 1u) != 0u) {
            atomicStore(&split_sums[own + 256u * i + li], bitcast<u32>((*v)[i]));
        }
    }
    atomicStore(&split_sums[own + 4096u + li], bitcast<u32>(*ss));
    storageBarrier();
#ifdef X16
    // With X16 the 64-token tensor-core tiles fill 32 KiB (lavapipe's limit) exactly, so the
    // flag rides in ct[0]: its one reader, thread 0, has taken it into v already.
    if (li == 0u) {
        ct[0] = select(0.0, 1.0, atomicAdd(&split_sums[tile], 1u) == p.splits - 1u);
    }
    if (workgroupUniformLoad(&ct[0]) == 0.0) {
        return false;
    }
#else
    if (li == 0u) {
        split_arrived = atomicAdd(&split_sums[tile], 1u);
    }
    if (workgroupUniformLoad(&split_arrived) != p.splits - 1u) {
        return false;
    }
#endif
    storageBarrier();
    if (li == 0u) {
        atomicStore(&split_sums[tile], 0u);
    }
    for (var i = 0u; i < 16u; i++) {
        if (((live >> i) & 1u) != 0u) {
            var total = 0.0;
            for (var sp = 0u; sp < p.splits; sp++) {
                total += bitcast<f32>(atomicLoad(&split_sums[base + sp * TILE_RECORD + 256u * i + li]));
            }
            (*v)[i] = total;
        }
    }
    var total_ss = 0.0;
    for (var sp = 0u; sp < p.splits; sp++) {
        total_ss += bitcast<f32>(atomicLoad(&split_sums[base + sp * TILE_RECORD + 4096u + li]));
    }
    *ss = total_ss;
    return true;
}
#endif
