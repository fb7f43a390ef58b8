//! Attention over the KV cache (`shaders/attention.wgsl`): the cache write and the causal,
//! optionally sliding-window, grouped-query attention itself.
//!
//! Mask convention (the same in [`crate::reference::ops::attention`]): query token `t` of the
//! step sits at position `pos = pos0 + t` and sees cache rows `j` with `j <= pos` and, when
//! `window > 0`, `j > pos - window`: the `window` most recent positions including itself.
//! That is HF's `sliding_window_overlay` (`kv_idx > q_idx - sliding_window`) and llama.cpp's
//! SWA mask (masked when `pos - j >= n_swa`).
//!
//! Two paths, chosen per call by [`plan`]:
//! - **single pass** (`attention_tiled_hd{head_dim}`, flash attention; Dao et al. 2022): one
//!   workgroup of 128 invocations per (head, tile of [`tiled_tile`] query tokens) walks their
//!   keys in blocks staged in workgroup memory, with an online softmax. Right for prefill,
//!   where the tiles already fill the GPU. Each key and value row is read once per tile
//!   rather than once per query: a 512-token Llama-3.2-1B prefill spent 30.7 ms of its
//!   81 ms in the one-query-per-workgroup kernel this replaced (H200, BENCHMARKS.md).
//!   On a device with cooperative matrices, steps of [`COOP_MIN_T`]+ tokens run it on
//!   tensor cores instead ([`coop_tile`]; `COCO_ATTN_COOP=0` is the A/B baseline,
//!   `shaders/attention_coop.wgsl`, `attention_tiled_hd{head_dim}_coop{BQ}x{BK}`): Q·Kᵀ and
//!   P·V as f16 block products with f32 sums, 32 or 64 queries a tile.
//! - **flash-decoding** (`attention_split_merge`; Dao et al. 2023): the visible keys of each
//!   (token, head) are cut into `splits` ranges of `chunk` keys, one workgroup each, which
//!   write their running max, sum and unnormalized `Σ p·v` into a partials buffer; the last
//!   workgroup of each (token, head) to finish, found by an atomic arrival counter, merges
//!   the ranges with the log-sum-exp rescaling. One dispatch, where the first version took
//!   two (`attention_split` + `attention_combine`, kept behind `COCO_ATTN_MERGE=separate`
//!   as the A/B baseline: `GpuContext::attention_merge`).
//!   A decode step (`t = 1`) otherwise runs only `heads` workgroups (32 for Llama-3.2-1B,
//!   4 for Gemma-3-270M) on a GPU with 100+ SMs, each walking thousands of keys serially.
//!   Its K/V reads are coalesced vec4 loads: neighbouring invocations read neighbouring
//!   16-byte pieces of a row. Decode is latency-bound, not bandwidth-bound (Gemma-3-270M at
//!   512 keys reads 1 MiB of K/V per layer: 0.25 µs at 4 TB/s), so the plan cuts the keys
//!   into ranges of as little as one 16-key block, and a workgroup requests all of a block's
//!   key and value rows before it waits on any: about one memory round trip per block.
//!
//! Predicted on the H200 (132 SMs) at 513 keys, per layer, against the 98 µs and 40 µs that
//! the 64-key plan with scalar loads measured: Gemma-3-270M (4 heads) runs 33 ranges × 4
//! heads = 132 split workgroups of one block each (a q load overlapped with one K+V round
//! trip, two barriers), then 4 combine workgroups merging 33 ranges with 4 loads in flight:
//! ~5 µs + ~4 µs (about the 3.5 µs dispatch floor each), so ≤ 15 µs. Llama-3.2-1B (32
//! heads): 17 ranges of 32 keys × 32 heads = 544 workgroups of two blocks, about 4 per SM
//! and all resident at once, then 32 combine workgroups: also ≤ 15 µs.
//!
//! `head_dim` must be a multiple of 4 (every supported model's is: 64, 128, 256), since the
//! kernels bind q and the keys as `array<vec4<f32>>`, and the split and combine kernels also
//! the values, the partials and out.
//!
//! Query heads that share a KV head run in separate workgroups and read the same K/V rows;
//! those repeats come from L2. Sharing one workgroup per KV head would cut that traffic by
//! the group size, but its workgroup memory (queries, scores, per-group sums) grows with the
//! group, which is unbounded for multi-query models, and it divides the workgroup count by
//! the group: at decode the shortage of workgroups is the very problem.

use bytemuck::{Pod, Zeroable};

use super::elementwise::{check_len, grid};
use super::matmul::LEVELS_CHUNK_BYTES;
use super::KernelError;
use crate::gpu::{preprocess, AttentionMerge, Binding, GpuContext, StepRecorder, Work};

/// Largest head_dim the attention kernel handles (gemma3's 256); `MAX_HEAD_DIM` in the shader.
pub const MAX_HEAD_DIM: u32 = 256;

/// Invocations per workgroup of the `KV_WRITE` variant.
const KV_WRITE_WG: u32 = 256;

/// Keys per block of the `SPLIT` variant (`BLOCK` in the shader). A range shorter than one
/// block leaves invocations idle, so chunks are whole blocks. 16 keys of a 256-dim head are
/// 16 KiB of K and 16 KiB of V: 8 + 8 vec4 loads per invocation of 128, all in flight at once.
pub const SPLIT_BLOCK: u32 = 16;

/// Workgroups the flash-decoding path aims for: about 4 per SM on a 132-SM H200, so each
/// range is short (a few blocks at a few thousand keys), which is what a latency-bound step
/// wants. Smaller GPUs just queue them; the extra cost is `splits · (head_dim + 4)` floats per
/// (token, head) to merge. Since a block's value rows load with its keys, a range's blocks
/// cost less than the merge of more ranges: 512 took the Llama-1B shape's step at ~576 keys
/// from 930 to 894 µs and the 8B's from 2,984 to 2,888 against 1,024, and 2,048 lost
/// (BENCHMARKS.md "session 19").
const TARGET_WORKGROUPS: u32 = 512;

/// The least K and V bytes a range reads (whole blocks): below it a range's one round trip
/// is too little work for the merge's cost per range. On the H200 at 513 keys, Qwen2.5-0.5B
/// (14 heads of 64) took its attention from 324 to 293 µs per step with ranges of two
/// blocks (16 KiB) instead of one (8 KiB), while Gemma-3-270M (heads of 256: 32 KiB a
/// block) lost 233 -> 237 with two, and the Llama shapes, whose ranges are three blocks,
/// lost with six (BENCHMARKS.md "session 26").
const MIN_RANGE_BYTES: u32 = 16 * 1024;

/// Up to this many visible keys, a decode step's ranges are single 16-key blocks whatever
/// [`MIN_RANGE_BYTES`] says (at most 8 ranges): at short contexts the step waits on each
/// range's round trips, not on the merge. Measured on an H100 (BENCHMARKS.md sessions 36 and
/// 37, `COCO_ATTN_RANGE_KIB=4` against 16, two runs each): at depth 0 the Qwen2.5-0.5B shape's
/// decode step 1,049 → 1,002 and 1,051 → 1,002 µs, the Llama-1B shape's 846 → 815 and
/// 840 → 818; at depth 512 one-block ranges lost on Qwen (tg128 916 → 883, 887 → 870), so
/// longer contexts keep the floor. Changes only heads of ≤ 64 (where a block is < 16 KiB).
pub const FINE_RANGE_MAX_KEYS: u32 = 128;

/// The A/B override `COCO_ATTN_RANGE_KIB=<KiB>`, read once per process (an invalid value is
/// ignored with a warning): the least K and V bytes of a range at every context length, in
/// place of [`FINE_RANGE_MAX_KEYS`]' and [`MIN_RANGE_BYTES`]' rule. Large values keep short
/// contexts in the single pass (no arrival counter, no merge), small ones split them finer.
pub fn range_bytes_override() -> Option<u32> {
    static BYTES: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *BYTES.get_or_init(|| {
        let v = std::env::var("COCO_ATTN_RANGE_KIB").ok()?;
        let parsed = v.parse::<u32>().ok().filter(|&k| k <= 1 << 20);
        if parsed.is_none() {
            log::warn!("COCO_ATTN_RANGE_KIB={v:?} ignored: expected KiB, at most 2^20");
        }
        parsed.map(|kib| kib * 1024)
    })
}

/// The fewest keys a range of a step whose last token sees `n` keys reads (before rounding
/// to whole blocks): one block up to [`FINE_RANGE_MAX_KEYS`], else [`MIN_RANGE_BYTES`] of K
/// and V (f32 rows), or [`range_bytes_override`]'s.
fn least_range_keys(n: u32, head_dim: u32) -> u32 {
    let row_bytes = 8 * head_dim.max(1); // a K and a V row, 4 bytes a float
    match range_bytes_override() {
        Some(bytes) => bytes / row_bytes,
        None if n <= FINE_RANGE_MAX_KEYS => SPLIT_BLOCK,
        None => MIN_RANGE_BYTES / row_bytes,
    }
}

/// Most ranges per (token, head): `MAX_SPLITS` in the shader's `COMBINE` workgroup arrays.
/// [`plan`] gives at most `TARGET_WORKGROUPS` ranges, which is not above this.
const MAX_SPLITS: u32 = 1024;
const _: () = assert!(TARGET_WORKGROUPS <= MAX_SPLITS);

/// Most (token, head) rows a step may have and still split its keys ([`plan`]'s first rule):
/// beyond it the single pass already has enough workgroups.
pub const SPLIT_MAX_ROWS: u32 = 512;

/// Arrival counters at the front of the partials, one per (token, head) of a split step
/// (the shader's `COUNTERS`): the split workgroups count themselves in, and the last one
/// merges. They are 0 between dispatches (the last workgroup resets its own), so the partials
/// buffer must start zeroed (WebGPU zero-initializes new buffers).
pub const RANGE_COUNTERS: u64 = SPLIT_MAX_ROWS as u64;

/// f32 per (token, head, range) in the partials: `vec4(m, l, 0, 0)`, then `acc[head_dim]`.
fn partial_row(head_dim: u32) -> u64 {
    head_dim as u64 + 4
}

/// The shape of one attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionShape {
    /// Query tokens in this step.
    pub t: u32,
    /// Query heads.
    pub heads: u32,
    /// Key/value heads; divides `heads` (query head `h` reads kv head `h / (heads / kv_heads)`).
    pub kv_heads: u32,
    /// Dimensions per head, at most [`MAX_HEAD_DIM`].
    pub head_dim: u32,
    /// Position of the first query token; the cache must hold rows `0..pos0 + t`.
    pub pos0: u32,
    /// Sliding window in positions (see the module docs); 0 = full causal attention.
    pub window: u32,
    /// Multiplies `q·k` before the softmax: `1/sqrt(head_dim)` for llama/qwen2,
    /// `query_pre_attn_scalar^-0.5` for gemma2 and gemma3.
    pub scale: f32,
    /// Gemma 2's attention soft-cap: each scaled score `s` becomes `cap·tanh(s / cap)` before
    /// the mask and softmax (HF `attn_logit_softcapping`). 0 = none.
    pub softcap: f32,
}

/// How one attention call runs; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionPlan {
    /// Key ranges per (token, head); 1 = the single-pass kernel, no partials.
    pub splits: u32,
    /// Keys per range (a multiple of the 16-key block); the whole key count when `splits == 1`.
    pub chunk: u32,
}

/// Keys that query position `pos` sees under the module's mask convention.
fn visible_keys(pos: u32, window: u32) -> u32 {
    if window == 0 {
        pos + 1
    } else {
        window.min(pos + 1)
    }
}

/// What attention does for `shape`: each token's q·k and p·v over the keys it sees (two
/// operations per multiply-add, so 4·head_dim per key and head), reading q, the cache rows
/// the step's tokens see (K and V, f32) and writing the output once.
fn attention_work(shape: &AttentionShape) -> Work {
    let &AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        ..
    } = shape;
    let seen: u64 = (pos0..pos0 + t)
        .map(|pos| visible_keys(pos, window) as u64)
        .sum();
    // Cache rows from the first key the first token sees (later tokens' windows start no
    // earlier) to the last token's own.
    let first = pos0 + 1 - visible_keys(pos0, window);
    let rows = (pos0 + t - first) as u64;
    let (heads, kv_heads, hd) = (heads as u64, kv_heads as u64, head_dim as u64);
    Work {
        bytes: 4 * (2 * t as u64 * heads * hd + 2 * rows * kv_heads * hd),
        flops: 4 * seen * heads * hd,
    }
}

/// Picks the path for `shape`. The rule:
///
/// - `t · heads > SPLIT_MAX_ROWS` (512): single pass. There are enough workgroups already.
/// - otherwise aim for `want = ⌈TARGET_WORKGROUPS / (t · heads)⌉` ranges per (token, head):
///   `chunk = ⌈n / want⌉`, at least [`least_range_keys`], rounded up to whole
///   16-key blocks, `splits = ⌈n / chunk⌉`, where `n` is the key count of the step's last
///   token (the largest).
/// - `splits == 1` (at most 16 keys): single pass.
///
/// Llama-3.2-1B decoding at 513 keys: `t · heads = 32`, `want = 16`, `chunk = 48`,
/// `splits = 11`: 352 split workgroups of three blocks each.
/// Gemma-3-270M at 513 keys: `t · heads = 4`, `want = 128`, `chunk = 16`, `splits = 33`.
/// Qwen2.5-0.5B at 513 keys: `t · heads = 14`, `want = 37`, `chunk = 32` (the bytes' floor,
/// not 16), `splits = 17`.
/// `splits <= want`, so `t · heads · splits < TARGET_WORKGROUPS + t · heads`: the partials
/// stay under `1024 · (head_dim + 4)` floats whatever the context ([`partials_len`]).
pub fn plan(shape: &AttentionShape) -> AttentionPlan {
    let single = |n: u32| AttentionPlan {
        splits: 1,
        chunk: n,
    };
    let rows = shape.t.saturating_mul(shape.heads);
    if shape.t == 0 || rows == 0 {
        return single(0);
    }
    let n = visible_keys(shape.pos0.saturating_add(shape.t - 1), shape.window);
    if rows > SPLIT_MAX_ROWS {
        return single(n);
    }
    let want = TARGET_WORKGROUPS.div_ceil(rows);
    let least = least_range_keys(n, shape.head_dim);
    let chunk = n.div_ceil(want).max(least).next_multiple_of(SPLIT_BLOCK);
    let splits = n.div_ceil(chunk);
    if splits < 2 {
        return single(n);
    }
    AttentionPlan { splits, chunk }
}

/// The fewest keys (up to [`DECODE_SPLIT_SEARCH`]) a one-token step of `heads` query heads
/// of `head_dim` must see for [`plan`] to split them (fewer run the single pass): 17 by
/// default ([`FINE_RANGE_MAX_KEYS`]' one-block ranges), other counts with
/// [`range_bytes_override`]; `None` if no count up to the bound splits. For the plan's text.
pub fn decode_split_keys(heads: u32, head_dim: u32) -> Option<u32> {
    (1..=DECODE_SPLIT_SEARCH).find(|&n| plan(&decode_shape(heads, head_dim, n)).splits > 1)
}

/// A one-token step of `heads` query heads of `head_dim` whose token sees `n` keys (`n` ≥ 1;
/// no window): the shape the key-range rule is stated for.
fn decode_shape(heads: u32, head_dim: u32, n: u32) -> AttentionShape {
    AttentionShape {
        t: 1,
        heads,
        kv_heads: 1,
        head_dim,
        pos0: n - 1,
        window: 0,
        scale: 1.0,
        softcap: 0.0,
    }
}

/// Key counts [`decode_split_keys`] tries.
pub const DECODE_SPLIT_SEARCH: u32 = 1 << 17;

/// f32 elements of the partials buffer that [`attention`] needs for any step of up to
/// `max_t` tokens, `heads` query heads of `head_dim`, and at most `context` cache rows (any
/// `pos0` and window). Allocate it once per session; it may be 0.
pub fn partials_len(heads: u32, head_dim: u32, max_t: u32, context: u32) -> u64 {
    // `splits` is at most `want` (see `plan`) and at most one range per 16-key block; the
    // bound is reached at some key count, and `plan` is not monotone in it, so take the bound.
    let blocks = context.div_ceil(SPLIT_BLOCK) as u64;
    (1..=max_t)
        .filter_map(|t| {
            let rows = t as u64 * heads as u64;
            if rows == 0 || rows > SPLIT_MAX_ROWS as u64 || blocks < 2 {
                return None;
            }
            let want = (TARGET_WORKGROUPS as u64).div_ceil(rows);
            Some(rows * want.min(blocks) * partial_row(head_dim))
        })
        .max()
        .map_or(0, |records| RANGE_COUNTERS + records)
}

/// Query tokens (BQ) and keys (BK) per tile of the `TILED` kernel for `head_dim`: powers of
/// two with BQ·head_dim <= 1024 floats of queries, BK·head_dim <= 2048 of keys or values and
/// BQ·BK <= 512 scores, so the tiles fit WebGPU's guaranteed 16 KiB of workgroup memory
/// ([`tiled_workgroup_bytes`]). Llama (64): 16 × 32; 128: 8 × 16; Gemma-3 (256): 4 × 8.
pub fn tiled_tile(head_dim: u32) -> (u32, u32) {
    tile_within(head_dim, 1024, 2048, 32)
}

/// With `COCO_ATTN_BLOCKED=1` (`GpuContext::attention_blocked`), where the device's workgroup memory
/// holds them: twice the floats per tile, BQ at most 16, so more head sizes reach the 4
/// scores per invocation of the 2 × 2 blocks and each staged key block serves more queries.
/// 128: 16 × 32 (27 KiB); 96: 16 × 32 (21 KiB); 256: 8 × 16 (25 KiB); 64 keeps 16 × 32.
/// Past BQ·head_dim = 1024 the P·V phase gives each invocation up to 4 vec4s of its query
/// row (`PV4`). Head sizes under 64, whose default tile has BQ 32, keep it.
fn large_tile(head_dim: u32) -> (u32, u32) {
    let (bq, bk) = tile_within(head_dim, 2048, 4096, 16);
    let small = tiled_tile(head_dim);
    if bq >= small.0 && bk >= small.1 {
        (bq, bk)
    } else {
        small
    }
}

/// Powers of two with BQ·head_dim <= `q_floats`, BQ <= `max_bq`, BK·head_dim <= `kv_floats`
/// and BQ·BK <= 512.
fn tile_within(head_dim: u32, q_floats: u32, kv_floats: u32, max_bq: u32) -> (u32, u32) {
    let pow2_floor = |n: u32| 1u32 << (31 - n.max(1).leading_zeros());
    let bq = pow2_floor(q_floats / head_dim.max(1)).min(max_bq);
    let bk = pow2_floor(kv_floats / head_dim.max(1)).min(512 / bq);
    (bq, bk)
}

/// Workgroup memory of the `TILED` kernel: the query and key/value tiles in vec4 rows padded
/// by one vec4, and the scores in rows padded by one f32 (the shader's ROW and SROW).
pub fn tiled_workgroup_bytes(head_dim: u32) -> u32 {
    tile_bytes(head_dim, tiled_tile(head_dim))
}

fn tile_bytes(head_dim: u32, (bq, bk): (u32, u32)) -> u32 {
    let row = head_dim / 4 + 1;
    16 * (bq + bk) * row + 4 * bq * (bk + 1)
}

// The A/B switch `COCO_ATTN_BLOCKED=1` (a link's `attn_blocked=1`; `GpuContext::
// attention_blocked`): the single-pass kernel computes each invocation's scores as a 2 × 2
// block (`SCORES_2X2`, where the tile has 4 per invocation), so each vec4 of q and k it loads
// from workgroup memory feeds two dot products instead of one, and it takes [`large_tile`]s
// where the device's workgroup memory holds them (head_dim 128: 16 × 32 instead of 8 × 16, so
// blocked too). Counted per 16 × 32 block of head_dim 64, the score phase's workgroup-memory
// reads drop from ~1,280 to ~256 wavefronts; the scores are bit for bit the same (each pair's
// dot product is summed in the same order). And each p = exp(s − m) is computed once per
// score, by one of the row's invocations (`P_ONCE`), where each of its 128 / BQ invocations
// computed all of the row's exps (8 at head_dim 64): one more barrier per key block for 1/8
// of the exps. Off by default until timed.

/// The single-pass kernel's variant for `head_dim` on `ctx`: its tile, whether its scores
/// are 2 × 2 blocks, and its pipeline label.
pub struct TiledChoice {
    pub bq: u32,
    pub bk: u32,
    pub blocked: bool,
    pub label: String,
}

pub fn tiled_choice(ctx: &GpuContext, head_dim: u32) -> TiledChoice {
    let mut tile = tiled_tile(head_dim);
    let mut label = format!("attention_tiled_hd{head_dim}");
    if ctx.attention_blocked {
        let large = large_tile(head_dim);
        if tile_bytes(head_dim, large) <= ctx.limits.max_compute_workgroup_storage_size {
            tile = large;
        }
        label = format!("{label}_{}x{}", tile.0, tile.1);
    }
    let (bq, bk) = tile;
    let blocked = ctx.attention_blocked && bq * bk == 4 * TILED_WG;
    if blocked {
        label.push_str("_2x2");
    }
    TiledChoice {
        bq,
        bk,
        blocked,
        label,
    }
}

/// Invocations of the single-pass kernel (the shader's WG).
const TILED_WG: u32 = 128;

/// Steps of fewer query tokens keep the `TILED` kernel where the tensor-core one exists: its
/// 32- or 64-query tiles would be mostly empty (decode steps of ≤ 16 keys are single-pass
/// too, at one token).
pub const COOP_MIN_T: u32 = 8;

/// Whether prefill steps run the single-pass attention on tensor cores where the device has
/// coco's tensor-core tiles ([`coop_tile`]), read once per process: on unless
/// `COCO_ATTN_COOP=0` (the A/B baseline). On an H100 (BENCHMARKS.md session 36) pp512's
/// attention took 2,248 → 1,035 µs on the Llama-1B shape and 8,449 → 3,894 on the 8B (pp512
/// −7% and −5%), its kernel cases passed with 16 × 16 blocks, and a 403-token prompt's
/// greedy ids and top-1 stayed those of the f32 kernel (max |Δlogit| 0.040).
pub fn attention_coop_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COCO_ATTN_COOP").map_or(true, |v| v != "0"))
}

/// Query tokens (BQ) and keys (BK) per tile of the tensor-core single-pass kernel
/// (`shaders/attention_coop.wgsl`) for a step of `t` tokens and `head_dim`, or None where it
/// doesn't run: no cooperative matrices (`GpuContext::coop_block`; never in the browser),
/// with `COCO_ATTN_COOP=0`, fewer than [`COOP_MIN_T`] tokens, or no tile that fits. A
/// tile fits where its arrays fit the device's workgroup memory ([`coop_tile_bytes`]) and
/// deals every subgroup whole blocks: the tile's score blocks and output blocks are multiples
/// of the subgroup count (NSG · CB² = 2,048 elements on either block size). Largest first:
/// head_dim 64 on the H200 (48 KiB) 64 × 64, on lavapipe 26 (32 KiB) 64 × 32; 128: 64 × 32
/// on the H200, none on lavapipe.
pub fn coop_tile(ctx: &GpuContext, head_dim: u32, t: u32) -> Option<(u32, u32)> {
    let cb = ctx.coop_block?;
    if !attention_coop_enabled() || t < COOP_MIN_T || !head_dim.is_multiple_of(16) {
        return None;
    }
    const BLOCK_ELEMENTS: u32 = 2048;
    [(64u32, 64u32), (64, 32), (32, 64)]
        .into_iter()
        .find(|&(bq, bk)| {
            (bq * bk).is_multiple_of(BLOCK_ELEMENTS)
                && (bq * head_dim).is_multiple_of(BLOCK_ELEMENTS)
                && coop_tile_bytes(head_dim, (bq, bk), cb)
                    <= ctx.limits.max_compute_workgroup_storage_size
        })
}

/// Workgroup memory of the tensor-core kernel (its arrays: the query and key/value tiles as
/// f16 rows padded by 8, the scores as f32 rows padded by 4, p as f16 rows padded by 8, a zero
/// block, two floats per query row).
pub fn coop_tile_bytes(head_dim: u32, (bq, bk): (u32, u32), cb: u32) -> u32 {
    2 * (bq + bk) * (head_dim + 8) + 4 * bq * (bk + 4) + 2 * bq * (bk + 8) + 4 * cb * cb + 8 * bq
}

/// `shaders/attention_coop.wgsl` for `head_dim` and tile (bq, bk), with 8 × 8 blocks (`cb8`)
/// or 16 × 16.
fn coop_source(head_dim: u32, (bq, bk): (u32, u32), cb8: bool) -> String {
    let defines: &[&str] = if cb8 { &["COOP8"] } else { &[] };
    format!(
        "enable f16;\nenable wgpu_cooperative_matrix;\nconst HD: u32 = {head_dim}u;\n\
         const BQ: u32 = {bq}u;\nconst BK: u32 = {bk}u;\n"
    ) + &preprocess("attention_coop.wgsl", defines)
}

/// The single-pass kernel's label for a step of `t` tokens (the tensor-core one where
/// [`coop_tile`] gives a tile): what the dispatch records and the model's plan lists.
pub fn single_pass_label(ctx: &GpuContext, head_dim: u32, t: u32) -> String {
    match coop_tile(ctx, head_dim, t) {
        Some(tile) => coop_label(ctx, head_dim, tile).0,
        None => tiled_choice(ctx, head_dim).label,
    }
}

/// The tensor-core kernel's label (it starts as the `TILED` kernel's: it is the single pass)
/// and whether it multiplies 8 × 8 blocks (`COOP8`: lavapipe's).
fn coop_label(ctx: &GpuContext, head_dim: u32, (bq, bk): (u32, u32)) -> (String, bool) {
    let cb8 = ctx.coop_block == Some(8);
    let label = format!(
        "attention_tiled_hd{head_dim}_coop{bq}x{bk}{}",
        if cb8 { "_cb8" } else { "" }
    );
    (label, cb8)
}

/// Mirrors `Params` of the KV_WRITE variant.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct KvWriteParams {
    n: u32,
    offset: u32,
    _pad: [u32; 2],
}

/// Mirrors `Params` of the attention variant.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct AttentionParams {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32,
    scale: f32,
    softcap: f32,
}

/// Mirrors `Params` of the RANGES variants (SPLIT and COMBINE).
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct SplitParams {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32,
    scale: f32,
    splits: u32,
    chunk: u32,
    softcap: f32,
    _pad: [u32; 2],
}

/// Copies this step's keys and values into cache rows `pos0..pos0 + t`.
///
/// - `k`, `v`: `[t, kv_heads, head_dim]` f32 (after RoPE on k)
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32 with `ctx >= pos0 + t`, written
#[allow(clippy::too_many_arguments)] // the shape is spelled out, as at every other kernel call
pub fn kv_write(
    rec: &mut StepRecorder,
    k: &Binding,
    v: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    t: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "attention_kv_write";
    let row = kv_heads as u64 * head_dim as u64;
    let n = t as u64 * row;
    let offset = pos0 as u64 * row;
    check_len(KERNEL, "k", k, n)?;
    check_len(KERNEL, "v", v, n)?;
    check_len(KERNEL, "k_cache", k_cache, offset + n)?;
    check_len(KERNEL, "v_cache", v_cache, offset + n)?;
    let label = "attention_kv_write";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("attention.wgsl", &["KV_WRITE"]));
    // check_len bounded offset + n by u32::MAX.
    let params = KvWriteParams {
        n: n as u32,
        offset: offset as u32,
        _pad: [0; 2],
    };
    let bindings = [k.clone(), v.clone(), k_cache.clone(), v_cache.clone()];
    // K and V read once and written once, f32; no arithmetic.
    let work = Work {
        bytes: 4 * 4 * n,
        flops: 0,
    };
    rec.dispatch_counted(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        grid((n as u32).div_ceil(KV_WRITE_WG)),
        Some(work),
    )?;
    Ok(())
}

/// `out = softmax(cap(scale · q·kᵀ) + mask) · v` (`cap` the identity unless `shape.softcap`) for the step's `t` query tokens, reading cache
/// rows `0..pos0 + t` under the module's mask convention. Runs the path [`plan`] picks: one
/// dispatch, or two when the keys are split (see [`attention_planned`]).
pub fn attention(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    out: &Binding,
    partials: &Binding,
    shape: &AttentionShape,
) -> Result<(), KernelError> {
    attention_planned(
        rec,
        q,
        k_cache,
        v_cache,
        out,
        partials,
        shape,
        plan(shape),
        None,
    )
}

/// [`attention`] on the path `how` (what `model::Plan` chose for the step by [`plan`]'s
/// rule): the single pass when `how.splits == 1`, else the split and combine dispatches.
///
/// - `q`: `[t, heads, head_dim]` f32 (after RoPE)
/// - `k_cache`, `v_cache`: `[ctx, kv_heads, head_dim]` f32, rows `0..pos0 + t` written
/// - `out`: `[t, heads, head_dim]` f32
/// - `partials`: scratch, `[t, heads, splits, 4 + head_dim]` f32 when split; sized for every
///   step by [`partials_len`], unread by the single pass
/// - `levels_out`: where [`levels_fit`], the merge also writes `out` as the int8 levels of
///   W_o's x' (`EMIT_LEVELS`; W_o reads them with `MatmulArgs::x_levels`)
#[allow(clippy::too_many_arguments)] // each buffer is its own binding
pub fn attention_planned(
    rec: &mut StepRecorder,
    q: &Binding,
    k_cache: &Binding,
    v_cache: &Binding,
    out: &Binding,
    partials: &Binding,
    shape: &AttentionShape,
    how: AttentionPlan,
    levels_out: Option<&Binding>,
) -> Result<(), KernelError> {
    const KERNEL: &str = "attention";
    let AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
        softcap,
    } = *shape;
    let bad = |why: String| {
        Err(KernelError::Shape {
            kernel: KERNEL,
            why,
        })
    };
    if head_dim == 0 || head_dim > MAX_HEAD_DIM || !head_dim.is_multiple_of(4) {
        return bad(format!(
            "head_dim {head_dim} is not a multiple of 4 in 4..={MAX_HEAD_DIM} (the split \
             kernels read rows as vec4)"
        ));
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return bad(format!(
            "heads {heads} is not a multiple of kv_heads {kv_heads}"
        ));
    }
    if !scale.is_finite() {
        return bad(format!("scale {scale} is not finite"));
    }
    if !(softcap.is_finite() && softcap >= 0.0) {
        return bad(format!("softcap {softcap} is not finite and >= 0"));
    }
    // Workgroups are (head, token) or (range, head, token); each must fit one dispatch
    // dimension (ranges are at most MAX_SPLITS).
    if heads > 65_535 || t > 65_535 {
        return bad(format!("t {t} and heads {heads} must each be <= 65535"));
    }
    let rows = pos0 as u64 + t as u64;
    let elems = t as u64 * heads as u64 * head_dim as u64;
    check_len(KERNEL, "q", q, elems)?;
    check_len(KERNEL, "out", out, elems)?;
    let cache = rows * kv_heads as u64 * head_dim as u64;
    check_len(KERNEL, "k_cache", k_cache, cache)?;
    check_len(KERNEL, "v_cache", v_cache, cache)?;

    let AttentionPlan { splits, chunk } = how;
    if splits == 0 || splits > MAX_SPLITS {
        return bad(format!("{splits} key ranges: not in 1..={MAX_SPLITS}"));
    }
    let last = (pos0 + t).saturating_sub(1);
    if splits > 1 && (chunk == 0 || chunk.saturating_mul(splits) < visible_keys(last, window)) {
        return bad(format!(
            "{splits} ranges of {chunk} keys do not cover the last token's keys"
        ));
    }
    if let Some(levels) = levels_out {
        if !levels_fit(rec.ctx(), shape, how) {
            return bad(format!(
                "W_o's x' levels need split key ranges, subgroups and head_dim a multiple of                  32 (splits {splits}, head_dim {head_dim})"
            ));
        }
        let words = t as u64 * (heads * head_dim / 32) as u64 * LEVELS_CHUNK_BYTES / 4;
        check_len(KERNEL, "levels_out", levels, words)?;
    }
    let work = Some(attention_work(shape));
    let params = AttentionParams {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
        softcap,
    };
    if splits == 1 {
        // The tensor-core kernel where it runs, else the f32 tiles; the same bindings and grid.
        let (pipeline, bq) = if let Some((bq, bk)) = coop_tile(rec.ctx(), head_dim, t) {
            let (label, cb8) = coop_label(rec.ctx(), head_dim, (bq, bk));
            let pipeline = rec
                .ctx()
                .pipeline(&label, || coop_source(head_dim, (bq, bk), cb8));
            (pipeline, bq)
        } else {
            let TiledChoice {
                bq,
                bk,
                blocked,
                label,
            } = tiled_choice(rec.ctx(), head_dim);
            let pipeline = rec.ctx().pipeline(&label, || {
                let mut defines = vec!["TILED"];
                if rec.ctx().attention_blocked {
                    defines.push("P_ONCE");
                }
                if blocked {
                    defines.push("SCORES_2X2");
                }
                if bq * head_dim > 1024 {
                    defines.push("PV4");
                }
                format!(
                    "const HD: u32 = {head_dim}u;\nconst BQ: u32 = {bq}u;\nconst BK: u32 = {bk}u;\n"
                ) + &preprocess("attention.wgsl", &defines)
            });
            (pipeline, bq)
        };
        let bindings = [q.clone(), k_cache.clone(), v_cache.clone(), out.clone()];
        rec.dispatch_counted(
            &pipeline,
            bytemuck::bytes_of(&params),
            &bindings,
            [heads, t.div_ceil(bq), 1],
            work,
        )?;
        return Ok(());
    }

    let rows = elems / head_dim as u64;
    if rows > RANGE_COUNTERS {
        return bad(format!(
            "{rows} (token, head) rows split: more than the {RANGE_COUNTERS} arrival counters"
        ));
    }
    let partial_elems = RANGE_COUNTERS + rows * splits as u64 * partial_row(head_dim);
    check_len(KERNEL, "partials", partials, partial_elems)?;
    let merged = rec.ctx().attention_merge == AttentionMerge::InSplit;
    let emit = levels_out.is_some();
    let label = match (merged, emit) {
        (true, false) => "attention_split_merge",
        (true, true) => "attention_split_merge_lvout",
        (false, _) => "attention_split",
    };
    let pipeline = rec.ctx().pipeline(label, || {
        let mut defines = vec!["RANGES", "SPLIT"];
        if merged {
            defines.extend(["MERGE", "LAST_COMBINES"]);
        }
        merge_source(&mut defines, merged && emit)
    });
    let params = SplitParams {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale,
        splits,
        chunk,
        softcap,
        _pad: [0; 2],
    };
    let mut bindings = vec![
        q.clone(),
        k_cache.clone(),
        v_cache.clone(),
        partials.clone(),
    ];
    if merged {
        bindings.push(out.clone());
        bindings.extend(levels_out.cloned());
    }
    let params = bytemuck::bytes_of(&params);
    // Split with a separate combine, the work is the split's (the combine counts none).
    rec.dispatch_counted(&pipeline, params, &bindings, [splits, heads, t], work)?;
    if merged {
        return Ok(());
    }

    let label = if emit {
        "attention_combine_lvout"
    } else {
        "attention_combine"
    };
    let pipeline = rec.ctx().pipeline(label, || {
        merge_source(&mut vec!["RANGES", "MERGE", "COMBINE"], emit)
    });
    let mut bindings = vec![partials.clone(), out.clone()];
    bindings.extend(levels_out.cloned());
    rec.dispatch(&pipeline, params, &bindings, [heads, t, 1])?;
    Ok(())
}

/// attention.wgsl with `defines`, plus `EMIT_LEVELS` (and, in the browser, the subgroups
/// directive its shuffles need) when `emit`.
fn merge_source(defines: &mut Vec<&'static str>, emit: bool) -> String {
    if !emit {
        return preprocess("attention.wgsl", defines);
    }
    defines.push("EMIT_LEVELS");
    let enable = if cfg!(target_arch = "wasm32") {
        "enable subgroups;\n"
    } else {
        ""
    };
    format!("{enable}{}", preprocess("attention.wgsl", defines))
}

/// Whether the attention of `shape` on path `how` can write W_o's x' as int8 levels
/// (`attention_planned`'s `levels_out`): split key ranges (the merge writes them), subgroups
/// (its shuffles) and heads of whole 32-element chunks.
pub fn levels_fit(ctx: &GpuContext, shape: &AttentionShape, how: AttentionPlan) -> bool {
    how.splits > 1 && ctx.has_subgroups() && shape.head_dim.is_multiple_of(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tile `coop_tile` can pick, on either block size, through naga to SPIR-V (lavapipe
    /// 22 has no cooperative matrices; lavapipe 26 runs head_dim 64's 64 × 32 tile), using the
    /// workgroup memory `coop_tile_bytes` counts.
    #[test]
    fn coop_attention_compiles_to_spirv_for_every_tile() {
        for head_dim in [32u32, 64, 96, 128, 256] {
            for tile in [(64, 64), (64, 32), (32, 64)] {
                if !(tile.0 * head_dim).is_multiple_of(2048) {
                    continue;
                }
                for cb8 in [false, true] {
                    let label = format!("coop hd{head_dim} {tile:?} cb8 {cb8}");
                    let bytes =
                        crate::gpu::compile_to_spirv(&label, &coop_source(head_dim, tile, cb8));
                    let cb = if cb8 { 8 } else { 16 };
                    assert_eq!(bytes, coop_tile_bytes(head_dim, tile, cb), "{label}");
                }
            }
        }
    }

    /// The plan's text names the key count where decode steps start to split: past one
    /// 16-key block (short contexts split into single blocks); never past SPLIT_MAX_ROWS
    /// rows. (Assumes COCO_ATTN_RANGE_KIB unset, as the tests run.)
    #[test]
    fn decode_steps_split_past_one_block() {
        assert_eq!(decode_split_keys(32, 64), Some(17));
        assert_eq!(decode_split_keys(14, 64), Some(17));
        assert_eq!(decode_split_keys(32, 128), Some(17));
        assert_eq!(decode_split_keys(4, 256), Some(17));
        assert_eq!(decode_split_keys(SPLIT_MAX_ROWS + 1, 64), None);
    }

    /// Up to FINE_RANGE_MAX_KEYS keys a range is one block; past it, at least 16 KiB of K and
    /// V (two blocks of head_dim 64, one of 128 or 256).
    #[test]
    fn ranges_are_single_blocks_up_to_the_fine_limit() {
        let decode = |heads, head_dim, n| plan(&decode_shape(heads, head_dim, n));
        let p = decode(14, 64, FINE_RANGE_MAX_KEYS);
        assert_eq!((p.splits, p.chunk), (8, 16));
        let p = decode(14, 64, FINE_RANGE_MAX_KEYS + 1);
        assert_eq!((p.splits, p.chunk), (5, 32));
        let p = decode(32, 128, 600);
        assert_eq!(p.chunk, 48); // ⌈600 / 16⌉ rounded to blocks, above the 16-key floor
        let p = decode(32, 64, 300);
        assert_eq!((p.splits, p.chunk), (10, 32)); // ⌈300 / 16⌉ = 19 → the 32-key floor
    }

    #[test]
    fn tiled_tiles_fit_webgpu_workgroup_memory_for_every_head_dim() {
        for head_dim in (4..=MAX_HEAD_DIM).step_by(4) {
            let (bq, bk) = tiled_tile(head_dim);
            let bytes = tiled_workgroup_bytes(head_dim);
            assert!(bytes <= 16_384, "head_dim {head_dim}: {bytes} bytes");
            // The shader's P·V phase gives each query row 128 / BQ invocations, each owning at
            // most two of the row's head_dim / 4 vec4s.
            assert!(bq.is_power_of_two() && bq <= 32 && head_dim / 4 <= 2 * (128 / bq));
            assert!(
                bk.is_power_of_two() && bk >= 8,
                "head_dim {head_dim}: BK {bk}"
            );
        }
        assert_eq!(tiled_tile(64), (16, 32));
        assert_eq!(tiled_tile(128), (8, 16));
        assert_eq!(tiled_tile(256), (4, 8));
    }

    /// COCO_ATTN_BLOCKED's larger tiles: within 32 KiB (what lavapipe offers, so CI runs
    /// them), at most the P·V phase's 4 vec4s per invocation (`PV4`), and the head sizes of
    /// the supported models with 4 scores per invocation (the 2 × 2 blocks).
    #[test]
    fn large_tiles_fit_and_block_the_common_head_sizes() {
        for head_dim in (4..=MAX_HEAD_DIM).step_by(4) {
            let (bq, bk) = large_tile(head_dim);
            let bytes = tile_bytes(head_dim, (bq, bk));
            assert!(bytes <= 32 * 1024, "head_dim {head_dim}: {bytes} bytes");
            assert!(bq.is_power_of_two() && head_dim / 4 <= 4 * (TILED_WG / bq));
            assert!(bq >= tiled_tile(head_dim).0, "head_dim {head_dim}");
            assert!(bk.is_power_of_two() && bk >= tiled_tile(head_dim).1);
            assert!(bq * bk <= 4 * TILED_WG);
        }
        for head_dim in [64, 96, 128] {
            let (bq, bk) = large_tile(head_dim);
            assert_eq!(bq * bk, 4 * TILED_WG, "head_dim {head_dim}: 2 x 2 blocks");
        }
        assert_eq!(large_tile(64), (16, 32));
        assert_eq!(large_tile(128), (16, 32));
        assert_eq!(large_tile(256), (8, 16));
    }
}
