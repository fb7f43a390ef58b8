// The merge of the tensor-core tiles' split K (MERGE_PASS: the dispatch after a product with
// SPLIT_PASS; select.rs coop_split_pass, coop64_split_pass): adds each output's p.splits
// records in split order, times its token's scale, and stores it as the tiles' epilogue would
// (finish_blocks, store_tile). Included by matmul/gemm_coop_x16.wgsl or
// matmul/gemm_tiled_coop.wgsl in place of its main, with the same defines and binding layout
// (the host binds both alike).
//
// Why a second dispatch: the tiles merged in the tile's last workgroup to arrive, which read
// every range's record (64 KiB for a 128 × 128 tile) through atomic loads, one workgroup per
// tile, while the SM's next workgroups waited behind it. Here the whole GPU shares the merge, with plain loads that the
// dispatch boundary orders after the records' stores (BENCHMARKS.md "session 44").
//
// Consecutive lanes take consecutive slots (with GLU a gate slot and its up slot, MERGE_HALF on),
// so loads and stores are contiguous, and each thread MERGE_PER tokens, whose loads are in
// flight together; workgroup w takes MERGE_TOKENS tokens of tile w / MERGE_BLOCKS (token
// tile · row groups + row group, as split_tile numbers them).

const MERGE_HALF: u32 = TILE_N / 2u; // the tiles' GLU pairing: gate slots, then their up slots
#ifdef GLU
const MERGE_SLOTS: u32 = MERGE_HALF;
#else
const MERGE_SLOTS: u32 = TILE_N;
#endif
const MERGE_PER: u32 = 4u;
const MERGE_TOKENS: u32 = (256u / MERGE_SLOTS) * MERGE_PER; // 128-slot tiles: 8, or with GLU 16
const MERGE_BLOCKS: u32 = TILE_T / MERGE_TOKENS;

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let w = wid.x + wid.y * nwg.x;
    let row_groups = p.groups / p.splits;
    let tile = w / MERGE_BLOCKS;
    if (tile >= row_groups * ((p.t + TILE_T - 1u) / TILE_T)) {
        return;
    }
    let slot = li % MERGE_SLOTS;
    let m = locate((tile % row_groups) * TILE_N + slot, TILE_N);
    if (!live(m)) {
        return;
    }
    // Tile tokens n0 .. n0 + MERGE_PER - 1 (the step's t0 + n).
    let n0 = (w % MERGE_BLOCKS) * MERGE_TOKENS + (li / MERGE_SLOTS) * MERGE_PER;
    let t0 = (tile / row_groups) * TILE_T;
    let at = record_base(tile, 0u) + n0 * TILE_N + slot;
    var lo: array<f32, MERGE_PER>;
#ifdef GLU
    var hi: array<f32, MERGE_PER>;
#endif
    // Range by range in split order (so the sums are the last-to-arrive merge's, bit for bit).
    for (var sp = 0u; sp < p.splits; sp++) {
        let rec = at + sp * TILE_N * TILE_T;
        for (var i = 0u; i < MERGE_PER; i++) {
            lo[i] += split_records[rec + i * TILE_N];
#ifdef GLU
            hi[i] += split_records[rec + i * TILE_N + MERGE_HALF];
#endif
        }
    }
    for (var i = 0u; i < MERGE_PER; i++) {
        let t = t0 + n0 + i;
        if (t < p.t) {
            let scale = tscale(t);
#ifdef GLU
            store_glu(t, m.y, lo[i] * scale, hi[i] * scale);
#else
            store(m.x, t, m.y, lo[i] * scale);
#endif
        }
    }
}
