//! Which matvec shape runs a product, and with what tuning: the kernels' grid constants,
//! the subgroup matvec's shape (`COCO_MATVEC`), and the kernels a device runs.

use super::{GemmChoice, MatmulVariant, WideTile};

/// Matvec workgroups: MV_ROWS slots × MV_LANES lanes = 256 invocations (browsers allow no
/// more); 32 lanes per slot so that a 32-wide warp streams one row.
pub const MV_ROWS: u32 = 8;
pub const MV_LANES: u32 = 32;
/// The subgroup matvec's workgroup: SG_ROWS slots (its subgroups split each task's row
/// range when there are more subgroups than tasks, which puts more warps on small matrices).
pub const SG_ROWS: u32 = 8;
/// 8-element groups each lane of the subgroup matvec reads per loop trip (1 or 2; the
/// workgroup matvec's one-row loop always takes 2).
pub const MV_UNROLL: u32 = 1;
/// Rows per task of the subgroup matvec: its invocations load each group of x' once for
/// this many rows (BENCHMARKS.md "session 10").
pub const SG_ROWS_PER_TASK: u32 = 2;
/// The chunk matvec's slots per workgroup and rows per task: 16 × 4 measured best of
/// 8 × 2, 16 × 2, 16 × 4, 32 × 2 and 32 × 4 on the H200 (BENCHMARKS.md "session 13"); its
/// x' staging is repaid over more rows than the lane-per-8 matvec's 8.
pub const CHUNK_ROWS: u32 = 16;
pub const CHUNK_ROWS_PER_TASK: u32 = 4;

/// [`MatmulVariant::MatvecChunkWide`]'s slots per workgroup, widest first, each with the
/// fewest workgroups it may leave a product with; its rows per task are
/// [`CHUNK_WIDE_ROWS_PER_TASK`]. 32 × 4 was measured best of 8 × 1, 16 × 2, 16 × 4 and 32 × 4
/// where it keeps about four workgroups per SM of the H200's 132 (BENCHMARKS.md "session
/// 17"). 64 slots won where they keep 448 or more (the 8B's gate/up 1,164 → 985 µs per step,
/// the 1B's and 8B's LM heads 70 → 61 and 101 → 93) and lost at 256 (the 1B's gate/up 261 →
/// 288) and below (BENCHMARKS.md "session 21").
pub const CHUNK_WIDE: [(u32, u64); 2] = [(64, 448), (32, 512)];
pub const CHUNK_WIDE_ROWS_PER_TASK: u32 = 4;

/// The chunk matvec's (slots per workgroup, rows per task): ([`CHUNK_ROWS`],
/// [`CHUNK_ROWS_PER_TASK`]), or [`chunk_shape_override`].
pub fn chunk_shape() -> (u32, u32) {
    chunk_shape_override().unwrap_or((CHUNK_ROWS, CHUNK_ROWS_PER_TASK))
}

/// The tuning override `COCO_CHUNK=<slots>x<rows per task>` (slots a power of two in 2..=64,
/// rows per task a power of two up to min(8, slots / 2), as for [`MatvecShape`]), read once
/// per process; while set, every chunk matvec runs that shape (`MatmulKey::sized` picks no
/// [`MatmulVariant::MatvecChunkWide`]). An invalid value is ignored with a warning.
pub fn chunk_shape_override() -> Option<(u32, u32)> {
    static SHAPE: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *SHAPE.get_or_init(|| {
        let v = std::env::var("COCO_CHUNK").ok()?;
        let parsed = v
            .split_once('x')
            .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)));
        let valid = parsed.filter(|&(rows, per_task)| {
            rows.is_power_of_two()
                && (2..=64).contains(&rows)
                && per_task.is_power_of_two()
                && per_task <= 8
                && per_task <= rows / 2
        });
        if valid.is_none() {
            log::warn!(
                "COCO_CHUNK={v:?} ignored: expected <slots>x<rows per task>, slots a power of two \
                 in 2..=64, rows per task a power of two up to min(8, slots / 2)"
            );
        }
        valid
    })
}
/// Split K in the chunk matvec (`SPLIT_K` in matvec_chunk.wgsl): each row group's K shared
/// by n workgroups over their own ranges of whole chunks, the last to finish adding the
/// ranges' sums. It pays only where the unsplit grid leaves most of the GPU idle and each
/// range is still long: decode steps (T = 1) of K ≥ [`AUTO_SPLIT`]'s over at most its row
/// groups, split its ways. Measured on the H200 (BENCHMARKS.md "session 24"): Qwen-0.5B's
/// W_down (K 4,864, 56 row groups of 16) 343 → 297 µs per step, Llama-1B's (K 8,192, 128
/// groups) 271 → 239; shorter ranges lost (the 1B's W_o, K 2,048: 184 → 213; Gemma-3-270M's
/// W_down, K 2,048: 237 → 271), and so did the wider grids (the 8B's 4,096-row products' 256
/// groups: o + down 1,423 → 1,610, session 18). `COCO_CHUNK_SPLITS` overrides the rule.
///
/// The split scratch's arrival counters (one per token and row group; the shader's
/// SPLIT_COUNTERS) and words for the ranges' records after them (MV_ROWS + 1 per token, row
/// group and range): a split that would need more runs unsplit.
pub const SPLIT_COUNTERS: u64 = 4096;
pub const SPLIT_RECORD_WORDS: u64 = 1 << 18;
/// (least K, most row groups, ways) of the split rule ([`chunk_splits`]).
pub const AUTO_SPLIT: (u64, u64, u32) = (4096, 128, 4);

/// Workgroups per row group of a chunk matvec over `groups` row groups of `rows` slots,
/// `chunks` 32-element chunks of K and `t` tokens: [`chunk_splits_override`], else
/// [`AUTO_SPLIT`]'s rule (at most one per chunk), where the scratch holds it; else 1.
pub fn chunk_splits(groups: u64, rows: u32, chunks: u64, t: u32) -> u32 {
    let (min_k, max_groups, ways) = AUTO_SPLIT;
    let wanted = match chunk_splits_override() {
        Some(n) => n,
        None if t == 1 && chunks * 32 >= min_k && groups <= max_groups => ways,
        None => return 1,
    };
    let s = (wanted as u64).min(chunks).max(1);
    let fits = groups * t as u64 <= SPLIT_COUNTERS
        && groups * t as u64 * s * (rows as u64 + 1) <= SPLIT_RECORD_WORDS;
    if fits {
        s as u32
    } else {
        1
    }
}

/// Split K in the 64 × 64 tile kernels (`SPLIT_K` with `TILED` or `TILED_COOP`,
/// `shaders/matmul/tile_split.wgsl`): a short step's grid of (token tiles × row groups) is
/// grown to about [`TILE_SPLIT_TARGET`] workgroups by sharing each tile's K among as many
/// workgroups, none taking fewer than [`TILE_SPLIT_MIN_CHUNKS`] chunks; the last to finish
/// adds the ranges' sums. A 32-token step of the Llama-1B shape runs W_o and W_down on 32
/// workgroups of 64 rows unsplit, each walking all of K.
pub const TILE_SPLIT_TARGET: u64 = 512;
pub const TILE_SPLIT_MIN_CHUNKS: u64 = 8;
/// The tile split scratch's words after its [`SPLIT_COUNTERS`]: TILE_SPLIT_RECORD per (token
/// tile, row group, range); a split that would need more runs unsplit (16 MiB in all).
pub const TILE_SPLIT_WORDS: u64 = 1 << 22;
/// The same scratch on a device with the 128-token tensor-core tiles, whose records are 64 KiB
/// a (tile, range): 32 MiB, so the Llama-8B shape's Q/K/V at 512 tokens (192 tiles) can split.
pub const COOP128_SPLIT_WORDS: u64 = 1 << 23;
pub const TILE_SPLIT_RECORD: u64 = 17 * 256;

/// Workgroups per (token tile, row group) of a 64 × 64 tile kernel over `groups` row groups,
/// `t_tiles` token tiles and `chunks` 32-element chunks of K: [`TILE_SPLIT_TARGET`]'s rule
/// (or the A/B override `COCO_TILE_SPLIT_TARGET`, 0 = never split), where the scratch holds
/// it; else 1.
pub fn tile_splits(groups: u64, t_tiles: u64, chunks: u64) -> u32 {
    let target = tile_split_target_override().unwrap_or(TILE_SPLIT_TARGET);
    grid_splits(
        groups * t_tiles,
        chunks,
        target,
        TILE_SPLIT_RECORD,
        TILE_SPLIT_WORDS,
    )
}

/// Ways to split each of `tiles` tiles' `chunks` chunks of K so the grid reaches about
/// `target` workgroups, no range under [`TILE_SPLIT_MIN_CHUNKS`], and no more than `words` of
/// the tile split scratch hold records of `record_words` per (tile, range) for (with a counter
/// per tile); else 1.
pub(super) fn grid_splits(
    tiles: u64,
    chunks: u64,
    target: u64,
    record_words: u64,
    words: u64,
) -> u32 {
    let tiles = tiles.max(1);
    let room = words / (tiles * record_words.max(1));
    let s = target
        .div_ceil(tiles)
        .min(chunks / TILE_SPLIT_MIN_CHUNKS)
        .min(room)
        .max(1);
    if tiles <= SPLIT_COUNTERS {
        s as u32
    } else {
        1
    }
}

/// Split K in the 128-token tensor-core tiles with x' prestaged (`SPLIT_K` with `GEMM_COOP` and
/// `X16`, `shaders/matmul/gemm_coop_x16.wgsl`; only with [`coop_prestage`], and not with
/// [`coop_subgroup_tile64`]): the grid grown to about [`COOP128_SPLIT_TARGET`] workgroups (one
/// fits an SM), ranges of at least [`TILE_SPLIT_MIN_CHUNKS`] chunks. At 512 tokens the
/// Llama-1B shape's W_o and W_down have 64 tiles for 132 SMs and took 10.8 of the step's 26 ms
/// at half the gate/up's TFLOP/s (BENCHMARKS.md "session 30"); split 4 ways (with vec4
/// staging) 5.9 ms, and at 128 tokens (16 tiles) 9.6 → 3.0 ms ("session 33"); with the ranges
/// added by a dispatch after ([`coop_split_pass`]) 3.2 ms at 512 tokens ("session 44", H100:
/// a target of 384 timed within 3% of 256 on three shapes, 128 up to 11% slower). Where the device can't hold the prestaged
/// tiles, [`MatmulKey::staged`] takes the split back. `COCO_TILE_SPLIT_TARGET=<workgroups>` sets
/// its target with the 64 × 64 tiles' (0: neither splits).
pub const COOP128_SPLIT_TARGET: u64 = 256;
/// Words of one (tile, range) record: the tile's 128 × 128 sums (the shader's COOP_RECORD).
pub const COOP128_SPLIT_RECORD: u64 = 128 * 128;

/// Workgroups per (token tile, row group) of the 128-token tensor-core tiles over `groups`
/// row groups, `t_tiles` token tiles and `chunks` 32-element chunks of K ([`COOP128_SPLIT_TARGET`]'s
/// rule, where the tile split scratch holds it); else 1.
pub fn coop128_splits(groups: u64, t_tiles: u64, chunks: u64) -> u32 {
    if !coop_prestage() || coop_subgroup_tile64() || tile_split_target_override() == Some(0) {
        return 1;
    }
    grid_splits(
        groups * t_tiles,
        chunks,
        tile_split_target_override().unwrap_or(COOP128_SPLIT_TARGET),
        COOP128_SPLIT_RECORD,
        COOP128_SPLIT_WORDS,
    )
}

/// The A/B switch `COCO_TILE_SPLIT_TARGET=<workgroups>` (0: the tiles never split K), read
/// once per process. An invalid value is ignored with a warning.
pub fn tile_split_target_override() -> Option<u64> {
    static TARGET: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    workgroups_from_env(&TARGET, "COCO_TILE_SPLIT_TARGET")
}

/// The workgroup count (at most 2^20) in the environment variable `name`, read once per
/// process into `cell`; an invalid value is ignored with a warning.
fn workgroups_from_env(cell: &'static std::sync::OnceLock<Option<u64>>, name: &str) -> Option<u64> {
    *cell.get_or_init(|| number_from_env(name, 1 << 20))
}

/// The whole number of at most `max` in the environment variable `name` (None where it is
/// unset; an invalid value is ignored with a warning). Callers keep it in a `OnceLock`.
pub(crate) fn number_from_env<T>(name: &str, max: T) -> Option<T>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    let v = std::env::var(name).ok()?;
    let parsed = v.trim().parse::<T>().ok().filter(|n| *n <= max);
    if parsed.is_none() {
        log::warn!("{name}={v:?} ignored: expected a whole number up to {max}");
    }
    parsed
}

/// A part of the prefill tile kernels' K loop that the diagnostic switch `COCO_ABLATE` leaves
/// out ([`ablations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ablation {
    /// The multiply: the matrix loads and products of the tensor-core tiles, the
    /// workgroup-memory reads and FMAs of the portable ones.
    Multiply,
    /// W's loads and dequantization (each thread stages constants instead).
    Weights,
    /// x''s loads (and with the norm fold, its Σx² and scaling).
    Activations,
}

impl Ablation {
    pub fn define(self) -> &'static str {
        match self {
            Ablation::Multiply => "ABLATE_MMA",
            Ablation::Weights => "ABLATE_W",
            Ablation::Activations => "ABLATE_X",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Ablation::Multiply => "mma",
            Ablation::Weights => "w",
            Ablation::Activations => "x",
        }
    }
}

/// `COCO_ABLATE=mma,w,x` (any subset), read once per process: a diagnostic for the per-kernel
/// profile, never a setting. The prefill tile kernels (`coop128x128` with x' prestaged,
/// `coop64x64`, `tiled64x64`, the wide portable tiles) leave those parts out of their K loop,
/// so `coco bench --profile` shows what the rest costs: which of loading, staging and
/// multiplying bounds them (BENCHMARKS.md "session 39"). **Their outputs are wrong**; the
/// labels end in `_ablate_…`, and the bench's JSON and `coco bench`'s header say so.
/// Unknown names are ignored with a warning.
pub fn ablations() -> &'static [Ablation] {
    static SET: std::sync::OnceLock<Vec<Ablation>> = std::sync::OnceLock::new();
    SET.get_or_init(|| {
        let all = [Ablation::Multiply, Ablation::Weights, Ablation::Activations];
        names_in_env("COCO_ABLATE", &all, |a| a.label())
    })
}

/// The members of `all` that the comma-separated list in environment variable `var` names
/// (by `label`), each once, in the list's order; unknown names are ignored with a warning.
fn names_in_env<T: Copy + PartialEq>(var: &str, all: &[T], label: fn(T) -> &'static str) -> Vec<T> {
    let Ok(v) = std::env::var(var) else {
        return Vec::new();
    };
    let mut set = Vec::new();
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match all.iter().copied().find(|&t| label(t) == name) {
            Some(t) if !set.contains(&t) => set.push(t),
            Some(_) => {}
            None => {
                let known: Vec<_> = all.iter().map(|&t| label(t)).collect();
                log::warn!(
                    "{var}: {name:?} ignored (expected one of {})",
                    known.join(", ")
                );
            }
        }
    }
    set
}

/// Whether the scale pass before each tensor-core product stages x' once as f16 rows (`X16`,
/// shaders/matmul/token_scale.wgsl), the tiles copy it as it lies, and the 128-token tiles are
/// double-buffered and split K (shaders/matmul/gemm_coop_x16.wgsl); read once per process. On
/// by default where the device holds the tiles' workgroup arrays ([`MatmulKey::staged`]);
/// `COCO_COOP_PRESTAGE=0` is the A/B baseline, where every workgroup of a row group stages
/// (loads, norms, scales, converts) the same activations itself. Measured on the H200 with
/// [`coop_vec_stage`] (BENCHMARKS.md "session 33", Llama-1B Q4_0 shape): pp512 24.6 → 17.4
/// ms, pp128 18.0 → 8.3 ms (the split lets W_o and W_down fill the GPU at 128 tokens).
pub fn coop_prestage() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_COOP_PRESTAGE"))
}

/// Whether the tensor-core tiles hold their staged chunks as `vec4<f16>` and store each
/// thread's 8 staged values with two 8-byte stores (and two packed conversions) instead of
/// eight 2-byte stores, their matrix loads counting strides in vec4s (`VEC_STAGE`; llama.cpp's
/// Vulkan tiles load cooperative matrices from `f16vec2` arrays the same way); read once per
/// process. On by default; `COCO_COOP_VEC_STAGE=0` is the A/B baseline. Measured on the H200
/// (BENCHMARKS.md "session 33"): alone pp512 24.6 → 22.6 ms, the same logits bit for bit.
pub fn coop_vec_stage() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_COOP_VEC_STAGE"))
}

/// Whether the tensor-core tiles decode Q4_0, Q5_0 and Q8_0 levels to f32 by the exponent
/// trick ([`super::key::has_half8`], `HALF_W`) instead of an integer → float conversion per
/// weight, read once per process; the staged values are the same bit for bit. On by default;
/// `COCO_COOP_HALF_W=0` is the A/B baseline. H100 (BENCHMARKS.md "session 43"): pp512 on the
/// Llama-1B Q4_0 shape 16.20 → 15.88 ms, the 8B 86.44 → 85.25, Gemma's gate/up 7% faster.
pub fn coop_half_w() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_COOP_HALF_W"))
}

/// Weights from which a 128-token tensor-core product runs its token tiles fastest in
/// dispatch order ([`coop_tokens_first`]): past the 50 MB L2 of an H100 or H200 with room to
/// spare. Measured on the H100 (BENCHMARKS.md "session 43"): the Llama-8B shape's gate/up
/// (66 MB of Q4_0 per layer) 36.7 → 33.2 ms per 512-token step; the Llama-1B's (19 MB) 4%
/// slower that way, its W_o / W_down within 1%.
pub const COOP_TOKENS_FIRST_MIN_BYTES: u64 = 32 << 20;

/// Whether a 128-token tensor-core product with `weight_bytes` of weights takes its token
/// tiles fastest in dispatch order, so the tiles of one row group run together and read their
/// W rows from memory once (`TOKENS_FIRST`, shaders/matmul/gemm_coop_x16.wgsl). By the grid's
/// z, each token tile is a pass over all of W, which comes from memory again wherever W
/// outgrows the L2. By default past [`COOP_TOKENS_FIRST_MIN_BYTES`]; `COCO_COOP_ORDER=tokens`
/// (every product) and `=rows` (none) are the A/B switches, read once per process.
pub fn coop_tokens_first(weight_bytes: u64) -> bool {
    static ORDER: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = *ORDER.get_or_init(|| match std::env::var("COCO_COOP_ORDER").as_deref() {
        Ok("tokens") => Some(true),
        Ok("rows") => Some(false),
        Ok(v) => {
            log::warn!("COCO_COOP_ORDER={v:?} ignored: expected tokens or rows");
            None
        }
        Err(_) => None,
    });
    forced.unwrap_or(weight_bytes >= COOP_TOKENS_FIRST_MIN_BYTES)
}

/// Whether the 128-token tensor-core tiles' split K is merged by a second dispatch
/// (`SPLIT_PASS`, shaders/matmul/split_merge.wgsl): each workgroup stores its range's sums as
/// they lie in its accumulators, and a dispatch over every tile's outputs adds them. Otherwise
/// (`COCO_COOP_SPLIT_MERGE=last`, the A/B baseline) the tile's last workgroup to arrive merges,
/// through atomic loads, alone. Read once per process; the sums are added in the same order
/// either way.
pub fn coop_split_pass() -> bool {
    static PASS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PASS.get_or_init(|| match std::env::var("COCO_COOP_SPLIT_MERGE").as_deref() {
        Ok("last") => false,
        Ok("pass") | Err(_) => true,
        Ok(v) => {
            log::warn!("COCO_COOP_SPLIT_MERGE={v:?} ignored: expected pass or last");
            true
        }
    })
}

/// Whether the 128-token tensor-core tiles with x' prestaged hold the next chunk's Q4_0 / Q5_0
/// / Q8_0 weights as the words they loaded while they multiply, and decode them only when they
/// stage them (`RAW_W`), read once per process. Decoding as they loaded put the decode's wait
/// for the loads before the products, so the loads' latency was not hidden behind them (x''s,
/// held as loaded, was). On by default; `COCO_COOP_RAW_W=0` is the A/B baseline. H100
/// (BENCHMARKS.md "session 44"): pp512 on the Llama-1B Q4_0 shape 13.21 → 12.53 ms, the 8B
/// 74.68 → 71.13, Qwen's gate/up 13% faster; the same staged bits.
pub fn coop_raw_w() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_COOP_RAW_W"))
}

/// Whether the 64-token tensor-core tiles with x' prestaged (25–64-token steps natively) merge
/// their split K as the 128-token tiles do ([`coop_split_pass`]), by a dispatch after the
/// product instead of the tile's last workgroup to arrive; read once per process. On by
/// default; `COCO_COOP64_SPLIT_PASS=0` is the A/B baseline. H100 (BENCHMARKS.md "session 45"):
/// the Llama-1B Q4_0 shape's pp64 7.94 → 6.38 ms, a 32-token step on the tiles 7.17 → 6.19.
pub fn coop64_split_pass() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_COOP64_SPLIT_PASS"))
}

/// Whether the portable wide tiles the planner picks run in f16 where the device has
/// shader-f16 ([`DeviceKernels::wide_f16`]; shaders/matmul/gemm_wide_f16.wgsl: W and x'
/// staged as f16, products on vec2<f16> fmas summed in f16 per 32 of K), the fused Q/K/V
/// with them; read once per process. On by default; `COCO_WIDE_F16=0` is the A/B baseline
/// (the f32 tiles). H100, `COCO_COOPMAT=0` (BENCHMARKS.md "session 45"): pp512 on the
/// Llama-1B Q4_0 shape 11,644 → 15,549 tok/s, the 8B 1,819 → 2,428. Its sums in f16 about
/// double the tensor-core tiles' error against HF's logits (tests/model.rs).
///
/// The page too, where the browser grants shader-f16: in Chromium on an H100 (Dawn's
/// `vulkan_enable_f16_on_nvidia`) Gemma-3-270M's GLU ran 1.46× faster on them than on the f32
/// tiles, its pp512 step 4% (BENCHMARKS.md "session 46"). There no variable reaches it; a
/// link's `gemm=…` names a tile instead.
pub fn wide_f16() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_WIDE_F16"))
}

/// The A/B switch `COCO_WIDE_F16_PREFETCH=1`, read once per process: the f16 wide tiles load
/// chunk c + 1 while they multiply chunk c (`PREFETCH`), holding its words in registers.
pub fn wide_f16_prefetch() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COCO_WIDE_F16_PREFETCH").is_ok_and(|v| v == "1"))
}

/// A default-on switch: off only where the variable `name` is `0`.
fn switch_on_unless_zero(name: &str) -> bool {
    std::env::var(name).map_or(true, |v| v != "0")
}

/// The A/B switch `COCO_COOP_STREAM=1`, read once per process: on a device with coco's
/// tensor-core tiles, steps of [`COOP_STREAM_MIN_T`] to [`COOP_STREAM_MAX_T`] tokens run the
/// short-step tiles ([`MatmulVariant::CoopStream`], shaders/matmul/gemm_coop_stream.wgsl)
/// instead of the matvec ([`matvec_max_t`] drops to `COOP_STREAM_MIN_T - 1`; the plan then
/// treats those steps as tile steps: RoPE and the KV write apart). Issue 16's short-prompt
/// target: a 32-token step took 7–8 decode steps on the matvec. Not timed yet.
pub fn coop_stream() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COCO_COOP_STREAM").is_ok_and(|v| v == "1"))
}

/// The shortest step [`coop_stream`] takes off the matvec: up to 4 tokens the matvec reads W
/// in about one decode step's time (BENCHMARKS.md "session 29": pp8 3.4 ms against 1.2 per
/// decode step on the Llama-1B shape).
pub const COOP_STREAM_MIN_T: u32 = 5;

/// The longest step [`coop_stream`] runs on the short-step tiles; longer ones keep the 64-
/// and 128-token tiles.
pub const COOP_STREAM_MAX_T: u32 = 32;

/// The A/B switch `COCO_COOP_SUBGROUP_TILE=64`, read once per process: with
/// [`coop_prestage`], the 128-token tensor-core tiles give each of 4 subgroups 64 × 64 outputs
/// (shaders/matmul/gemm_coop_sg64.wgsl) instead of each of 8 subgroups 32 × 64: 8 matrix
/// loads per 16 products instead of 6 per 8. Not timed yet.
pub fn coop_subgroup_tile64() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COCO_COOP_SUBGROUP_TILE").is_ok_and(|v| v == "64"))
}

/// The A/B switch `COCO_FFN_LEVELS=0`, read once per process: W_down's x' is then staged by
/// each of its workgroups, as before the GLU wrote it as levels ([`super::ffn_levels_fit`]).
pub fn ffn_levels_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_FFN_LEVELS"))
}

/// The A/B switch `COCO_O_LEVELS=0`, read once per process: W_o's x' is then staged by each
/// of its workgroups, as before the attention merge wrote it as levels
/// ([`super::o_levels_fit`]).
pub fn o_levels_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| switch_on_unless_zero("COCO_O_LEVELS"))
}

/// The A/B switch `COCO_CHUNK_SPLITS=<n>` (1 ..= 64; 1 is unsplit), read once per process:
/// every chunk matvec then splits K n ways where the scratch holds it, instead of by
/// [`AUTO_SPLIT`]'s rule. An invalid value is ignored with a warning.
pub fn chunk_splits_override() -> Option<u32> {
    static SPLITS: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *SPLITS.get_or_init(|| {
        let v = std::env::var("COCO_CHUNK_SPLITS").ok()?;
        let parsed = v.parse::<u32>().ok().filter(|n| (1..=64).contains(n));
        if parsed.is_none() {
            log::warn!("COCO_CHUNK_SPLITS={v:?} ignored: expected a number of splits in 1..=64");
        }
        parsed
    })
}

/// The chunk matvec runs the products with at least this K; shorter rows keep the lane-per-8
/// matvec, which measured faster on them (too few chunks per row to occupy a task's lanes;
/// BENCHMARKS.md "session 13"). `COCO_CHUNK_MIN_K` overrides it ([`chunk_min_k`]).
pub const CHUNK_MIN_K: u64 = 2048;
/// Shorter rows still take the chunk matvec, with int8 levels, in products of at least this
/// K and this many rows: the LM heads of the small models, whose thousands of workgroups
/// hide each one's staging of x'. Measured on the H200 (BENCHMARKS.md "session 20"):
/// Gemma-3-270M's (K 640, 262,144 rows) 150 -> 98 µs per step, Qwen-0.5B's (896, 151,936)
/// 103 -> 67, while their few-hundred-workgroup products (gate/up, Q/K/V, W_o) lost
/// 20-40% each.
pub const CHUNK_SHORT_K_MIN: (u64, u64) = (512, 65_536);
/// Largest K whose `x'[t]` the subgroup matvec stages in workgroup memory (16 KiB of f32, the
/// least any WebGPU device offers; the device's own limit also applies).
pub const STAGE_MAX_K: u32 = 4096;
/// Largest x' tile (elements) the chunk matvec stages: 16 KiB of f32, the least any WebGPU
/// device offers; a longer K runs in tiles.
pub const CHUNK_TILE_MAX_K: u32 = 4096;

/// Which subgroup matvecs stage `x'[t]` in workgroup memory once per workgroup (`STAGE_X` in
/// matmul.wgsl) instead of each task reading it from global memory group by group. It takes
/// norm_w's loads, multiplies and the Σx² updates out of the row loop, but makes every
/// workgroup wait for `x[t]` and a barrier before its first weight load. It is built and
/// checked (lavapipe, in CI) but not yet timed on a GPU, so it stays off by default until
/// measured; `COCO_MATVEC=8x1x2x1` (or `x2`) turns it on for an A/B run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StageX {
    Never,
    /// The RMSNorm-fused products (QKV, gate/up, LM head): they also drop norm_w's loads.
    Normed,
    /// Every product whose K fits.
    All,
}

/// The subgroup matvec's shape: slots per workgroup, 8-element groups per loop trip, rows
/// per task, whether lanes take 32-element chunks ([`MatmulVariant::MatvecChunk`]), and
/// whether the chunk matvec stages x' as int8 levels for the types that have an int8 dot
/// product (`INT8` in matvec_chunk.wgsl; [`super::has_int8_dot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatvecShape {
    pub rows: u32,
    pub unroll: u32,
    pub rows_per_task: u32,
    pub stage_x: StageX,
    pub chunk: bool,
    pub int8: bool,
}

impl MatvecShape {
    pub const DEFAULT: MatvecShape = MatvecShape {
        rows: SG_ROWS,
        unroll: MV_UNROLL,
        rows_per_task: SG_ROWS_PER_TASK,
        stage_x: StageX::Never,
        chunk: true,
        // Where the WGSL compiler has the packed 4×8-bit dot product
        // ([`crate::gpu::packed_4x8_dot`]: naga always; a browser when its
        // wgslLanguageFeatures list it). The page reaches the chunk matvec only with
        // subgroups, on a real GPU (Chromium on the H200: BENCHMARKS.md "session 24").
        int8: true,
    };

    /// `<rows>x<unroll>[x<rows per task>[x<stage>[x<chunk>[x<int8>]]]]`, e.g. `8x2x4`,
    /// `8x1x2x0` or `16x1x2x0x1x0` (chunk 1: the chunk matvec, which always stages x'; int8
    /// 0: its x' in f32 for every type, the A/B baseline of the int8 levels). Rows a power
    /// of two in 2..=64, unroll 1 or 2, rows per task a power of two up to 8 (each row holds
    /// registers in every invocation; 8 already measured far slower) and at most rows / 2 (a
    /// GLU task must lie wholly in the gate or the up half of a workgroup's slots); stage 0
    /// (never), 1 (normed products) or 2 (all), see [`StageX`]. Omitted fields: 1 row per
    /// task, the default staging.
    pub fn parse(v: &str) -> Option<MatvecShape> {
        let mut fields = v.split('x').map(|f| f.parse::<u32>().ok());
        let rows = fields.next()??;
        let unroll = fields.next()??;
        let rows_per_task = match fields.next() {
            None => 1,
            Some(f) => f?,
        };
        let stage_x = match fields.next() {
            None => Self::DEFAULT.stage_x,
            Some(Some(0)) => StageX::Never,
            Some(Some(1)) => StageX::Normed,
            Some(Some(2)) => StageX::All,
            Some(_) => return None,
        };
        let chunk = match fields.next() {
            None => Self::DEFAULT.chunk,
            Some(Some(c @ (0 | 1))) => c == 1,
            Some(_) => return None,
        };
        let int8 = match fields.next() {
            None => Self::DEFAULT.int8,
            Some(Some(c @ (0 | 1))) => c == 1,
            Some(_) => return None,
        };
        let valid = rows.is_power_of_two()
            && (2..=64).contains(&rows)
            && matches!(unroll, 1 | 2)
            && rows_per_task.is_power_of_two()
            && rows_per_task <= 8
            && rows_per_task <= rows / 2;
        (fields.next().is_none() && valid).then_some(MatvecShape {
            rows,
            unroll,
            rows_per_task,
            stage_x,
            chunk,
            int8,
        })
    }
}

impl std::fmt::Display for MatvecShape {
    /// The form [`MatvecShape::parse`] reads (`COCO_MATVEC`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let stage = match self.stage_x {
            StageX::Never => 0,
            StageX::Normed => 1,
            StageX::All => 2,
        };
        write!(
            f,
            "{}x{}x{}x{stage}x{}x{}",
            self.rows, self.unroll, self.rows_per_task, self.chunk as u8, self.int8 as u8
        )
    }
}

/// The kernel choices and tuning overrides a measurement ran with (`coco bench --json`'s and
/// the page's `kernels`): what a figure needs to be reproduced.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelSettings {
    /// The decode matvec (`matvec_chunk256`, `matvec_wg256`, …).
    pub matvec: String,
    /// The subgroup matvec's shape as `COCO_MATVEC` spells it.
    pub matvec_shape: String,
    /// The longest step the matvec runs (null: every step, a CPU adapter's prefill too).
    pub matvec_max_t: Option<u32>,
    /// The prefill tiles: `tiled64x64`, or `coop128x128` (tensor cores; `coop64x64` with
    /// `COCO_GEMM=tiled`).
    pub tiles: String,
    /// The portable GEMM choice: `auto`, `tiled`, `4x8`, `8x4` or `4x4` (`4x8h`, … in f16).
    pub gemm: String,
    /// Whether the wide tiles the planner picks run in f16 ([`DeviceKernels::wide_f16`]: a
    /// device with shader-f16, unless `COCO_WIDE_F16=0`).
    pub wide_f16: bool,
    /// Whether the f16 wide tiles load the next chunk during the products
    /// ([`wide_f16_prefetch`]).
    pub wide_f16_prefetch: bool,
    /// Who merges flash-decoding's key ranges: `in_split` or `separate`.
    pub attention_merge: &'static str,
    /// Decode batches the GPU loop keeps in flight (`COCO_IN_FLIGHT`, the page's `in_flight`).
    pub batches_in_flight: u32,
    /// The grid the 64 × 64 tiles split K up to ([`TILE_SPLIT_TARGET`], or
    /// `COCO_TILE_SPLIT_TARGET`, which sets the 128-token tiles' too; 0: never).
    pub tile_split_target: u64,
    /// The grid the 128-token tensor-core tiles split K up to ([`COOP128_SPLIT_TARGET`], or
    /// `COCO_TILE_SPLIT_TARGET`).
    pub coop128_split_target: u64,
    /// `COCO_COOP128_MIN_GROUPS` ([`coop128_min_groups`]); null: unset.
    pub coop128_min_groups: Option<u64>,
    /// Whether the tensor-core tiles read x' prestaged as f16 ([`coop_prestage`]).
    pub coop_prestage: bool,
    /// Whether the 128-token tensor-core tiles give each subgroup 64 × 64
    /// ([`coop_subgroup_tile64`], with `coop_prestage`).
    pub coop_subgroup_tile64: bool,
    /// Whether the tensor-core tiles stage with vec4 stores ([`coop_vec_stage`]).
    pub coop_vec_stage: bool,
    /// Whether the tensor-core tiles decode Q4_0 / Q5_0 / Q8_0 without integer conversions
    /// ([`coop_half_w`]).
    pub coop_half_w: bool,
    /// Who adds the 128-token tensor-core tiles' split-K ranges: `pass` (a dispatch after the
    /// product) or `last` (the tile's last workgroup to arrive) ([`coop_split_pass`]).
    pub coop_split_merge: &'static str,
    /// Whether the 64-token tensor-core tiles merge their split K by a dispatch after
    /// ([`coop64_split_pass`]).
    pub coop64_split_pass: bool,
    /// Whether those tiles hold the next chunk's Q4_0 / Q5_0 / Q8_0 weights as loaded words
    /// ([`coop_raw_w`]).
    pub coop_raw_w: bool,
    /// Whether steps of 5–32 tokens run the short-step tensor-core tiles ([`coop_stream`]).
    pub coop_stream: bool,
    /// Whether the single-pass attention computes 2 × 2 score blocks and takes larger tiles
    /// (`GpuContext::attention_blocked`: `COCO_ATTN_BLOCKED=1`, a link's `attn_blocked=1`).
    pub attention_blocked: bool,
    /// Whether the single-pass attention of prefill steps runs on tensor cores
    /// (`kernels::attention::coop_tile`: a device with cooperative matrices, unless
    /// `COCO_ATTN_COOP=0`).
    pub attention_coop: bool,
    /// The least K and V bytes of a flash-decoding key range, in KiB, where
    /// `COCO_ATTN_RANGE_KIB` sets it (`kernels::attention::range_bytes_override`); `None`:
    /// the planner's rule (one-block ranges up to 128 keys, 16 KiB beyond).
    pub attention_range_kib: Option<u32>,
    /// The chunk matvec's (slots per workgroup)x(rows per task) ([`chunk_shape`]:
    /// `COCO_CHUNK`).
    pub chunk: String,
    /// `COCO_CHUNK_SPLITS` ([`chunk_splits_override`]); null: the planner's split.
    pub chunk_splits: Option<u32>,
    /// `COCO_CHUNK_MIN_K` ([`chunk_min_k_override`]); null: the default K rules.
    pub chunk_min_k: Option<u64>,
    /// Whether the GLU hands W_down its x' as int8 levels ([`ffn_levels_enabled`]:
    /// `COCO_FFN_LEVELS`).
    pub ffn_levels: bool,
    /// Whether attention hands W_o its x' as int8 levels ([`o_levels_enabled`]:
    /// `COCO_O_LEVELS`).
    pub o_levels: bool,
    /// Whether the portable tiles round their operands to f16 ([`f16_operands`]:
    /// `COCO_GEMM_F16_OPERANDS=1`).
    pub f16_operands: bool,
    /// The shaders' runtime checks natively (`COCO_SHADER_CHECKS`: `off`, `loops`, `all`;
    /// `browser` on the page, whose compiler adds its own).
    pub shader_checks: &'static str,
    /// Whether the subgroup kernels run (`GpuContext::subgroups`: `COCO_SUBGROUPS`, a link's
    /// `subgroups`).
    pub subgroups: bool,
    /// The diagnostic `COCO_ABLATE` ([`ablations`]): the parts the prefill tiles leave out,
    /// whose outputs are then wrong; empty in every real run.
    pub ablate: Vec<&'static str>,
}

impl KernelSettings {
    pub fn of(ctx: &crate::gpu::GpuContext) -> KernelSettings {
        let kernels = DeviceKernels::of(ctx);
        KernelSettings {
            matvec: kernels.matvec.label(),
            matvec_shape: matvec_shape().to_string(),
            matvec_max_t: matvec_max_t(kernels),
            tiles: kernels.tiled.label(),
            gemm: ctx.gemm.name(),
            wide_f16: kernels.wide_f16,
            wide_f16_prefetch: wide_f16_prefetch(),
            attention_merge: ctx.attention_merge.name(),
            batches_in_flight: ctx.batches_in_flight,
            tile_split_target: tile_split_target_override().unwrap_or(TILE_SPLIT_TARGET),
            coop128_split_target: tile_split_target_override().unwrap_or(COOP128_SPLIT_TARGET),
            coop128_min_groups: coop128_min_groups(),
            coop_prestage: coop_prestage(),
            coop_subgroup_tile64: coop_prestage() && coop_subgroup_tile64(),
            coop_vec_stage: coop_vec_stage(),
            coop_half_w: coop_half_w(),
            coop_split_merge: if coop_split_pass() { "pass" } else { "last" },
            coop64_split_pass: coop64_split_pass(),
            coop_raw_w: coop_raw_w(),
            coop_stream: coop_stream(),
            attention_blocked: ctx.attention_blocked,
            attention_coop: ctx.coop_block.is_some()
                && crate::kernels::attention::attention_coop_enabled(),
            attention_range_kib: crate::kernels::attention::range_bytes_override()
                .map(|bytes| bytes / 1024),
            chunk: {
                let (slots, rows) = chunk_shape();
                format!("{slots}x{rows}")
            },
            chunk_splits: chunk_splits_override(),
            chunk_min_k: chunk_min_k_override(),
            ffn_levels: ffn_levels_enabled(),
            o_levels: o_levels_enabled(),
            f16_operands: f16_operands(),
            shader_checks: crate::gpu::shader_checks_name(),
            subgroups: ctx.subgroups.used,
            ablate: ablations().iter().map(|a| a.label()).collect(),
        }
    }
}

/// [`MatvecShape::DEFAULT`], or the tuning override `COCO_MATVEC` (see
/// [`MatvecShape::parse`]), read once per process: for measuring other shapes on a new GPU
/// without a rebuild. An invalid value is ignored with a warning.
pub fn matvec_shape() -> MatvecShape {
    static SHAPE: std::sync::OnceLock<MatvecShape> = std::sync::OnceLock::new();
    *SHAPE.get_or_init(|| {
        let Ok(v) = std::env::var("COCO_MATVEC") else {
            return MatvecShape::DEFAULT;
        };
        MatvecShape::parse(&v).unwrap_or_else(|| {
            log::warn!(
                "COCO_MATVEC={v:?} ignored: expected <rows>x<unroll>[x<rows per task>[x<stage>[x<chunk>[x<int8>]]]], \
                 rows a power of two in 2..=64, unroll 1 or 2, rows per task a power of two up \
                 to min(8, rows / 2), stage 0, 1 or 2, chunk 0 or 1, int8 0 or 1"
            );
            MatvecShape::DEFAULT
        })
    })
}

/// The tiled variant's output tile: W rows × tokens (the shader's 16×16 invocations each
/// own 4 rows × 4 tokens, and 4 threads stage each row and token, so these are fixed by its
/// thread layout).
pub const TILE_N: u32 = 64;
pub const TILE_T: u32 = 64;
/// The fewest workgroups a [`WideTile`] may leave a product with: below it the next smaller
/// tile (or `Tiled`) runs, since a grid that doesn't fill the GPU several times over loses
/// more than the wider tile saves. 256 ≈ two workgroups per SM on the H200's 132; measured in
/// BENCHMARKS.md "session 16".
pub const WIDE_MIN_GROUPS: u64 = 256;

/// The tensor-core GEMM's tile, slots × tokens (`gemm_coop.wgsl`: 8 subgroups of 2 × 4
/// blocks of 16 × 16).
pub const COOP_TILE: u32 = 128;
impl GemmChoice {
    /// The tensor-core kernel: the 128 × 128 tiles, or with `tiled` the 64 × 64 ones (the
    /// A/B baseline of session 22, which stages x' without the per-token scale).
    pub fn pick_coop(self) -> MatmulVariant {
        if self == GemmChoice::Tiled {
            MatmulVariant::TiledCoop
        } else {
            MatmulVariant::Coop128
        }
    }

    /// The tile kernel for `slots` rows × `t` tokens: a wide tile chosen here is in f16 where
    /// `f16` ([`DeviceKernels::wide_f16`]); one asked for by name is as named.
    pub fn pick(self, slots: u64, t: u32, f16: bool) -> MatmulVariant {
        match self {
            GemmChoice::Tiled => MatmulVariant::Tiled,
            GemmChoice::Force(w) => MatmulVariant::Wide(w),
            GemmChoice::Auto | GemmChoice::Matrix | GemmChoice::Dot4 => WideTile::ALL
                .into_iter()
                .find(|w| {
                    let (n, tt) = w.tile();
                    slots.div_ceil(n as u64) * (t as u64).div_ceil(tt as u64) >= WIDE_MIN_GROUPS
                })
                .map_or(MatmulVariant::Tiled, |w| {
                    MatmulVariant::Wide(if f16 { w.f16() } else { w })
                }),
        }
    }
}

/// In steps of up to this many tokens (and more than the matvec's) the small products
/// ([`coop64_takes`]) run the 64-token tensor-core tiles ([`MatmulVariant::TiledCoop`]) rather
/// than the 128-token ones. Measured on the H200 before the 128-token tiles split K
/// (BENCHMARKS.md "session 27"), prefill ms, 64-token vs 128-token tiles: Llama-1B Q4_0 pp64
/// 12.64 vs 17.11, pp128 15.26 vs 18.70, pp256 22.67 vs 21.00; Llama-8B Q4_0 pp64 53.8 vs
/// 67.2, pp128 77.0 vs 73.3, pp256 134.9 vs 95.3.
pub const COOP64_MAX_T: u32 = 64;

/// [`COOP64_MAX_T`], or the A/B override `COCO_COOP64_MAX_T=<tokens>` (0..=512; 0: every tile
/// step runs the 128-token tiles), read once per process. Session 27's rule predates the
/// 128-token tiles' split K: since session 44 they take a 128-token step in less time than the
/// 64-token tiles take 32 or 64 tokens (H100, Llama-1B Q4_0: pp128 5.06 ms against pp64 6.52).
pub fn coop64_max_t() -> u32 {
    static MAX_T: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAX_T.get_or_init(|| number_from_env("COCO_COOP64_MAX_T", 512).unwrap_or(COOP64_MAX_T))
}

/// Products of at least this many weights (slots × K) take the 128-token tensor-core tiles
/// with their split K even in steps of up to [`coop64_max_t`] tokens: their many row groups fill
/// the GPU, and each of their workgroups walks its range of K at less cost per weight than
/// the 64-token tiles' (BENCHMARKS.md "session 48", H100, µs per step at 32 tokens, 64-token →
/// 128-token tiles: Llama-1B Q4_0 gate/up (33.6 M weights) 2,138 → 1,321, W_down (16.8 M)
/// 1,127 → 789, W_o (4.2 M) 374 → 323, Q/K/V (6.3 M) 554 → 507; Qwen-0.5B gate/up (8.7 M) 1,240
/// → 855, W_down (4.4 M) 830 → 714, but Q/K/V (1.0 M) 434 → 528, W_o (0.8 M) 411 → 478;
/// Gemma-3-270M gate/up (2.6 M) 300 → 314, Q/K/V 300 → 363). `COCO_COOP64_MAX_WEIGHTS=<n>`
/// overrides it (0: no short step takes the 64-token tiles).
pub const COOP64_MAX_WEIGHTS: u64 = 1 << 22;

/// Whether a step of `t` tokens multiplies a product of `slots` × `k` weights on the 64-token
/// tensor-core tiles rather than the 128-token ones ([`coop64_max_t`], [`COOP64_MAX_WEIGHTS`]).
pub fn coop64_takes(t: u32, slots: u64, k: u64) -> bool {
    static MAX_WEIGHTS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let max_weights = *MAX_WEIGHTS.get_or_init(|| {
        number_from_env("COCO_COOP64_MAX_WEIGHTS", u64::MAX).unwrap_or(COOP64_MAX_WEIGHTS)
    });
    t <= coop64_max_t() && slots.saturating_mul(k) < max_weights
}

/// The A/B switch `COCO_COOP128_MIN_GROUPS=<workgroups>`, read once per process: a product of
/// a longer step whose 128 × 128 grid (row groups × token tiles) would hold fewer workgroups
/// runs the 64 × 64 tensor-core tiles, which split K ([`tile_splits`]). Unset (the default):
/// steps of more than [`COOP64_MAX_T`] tokens run `coop128x128` everywhere. Measured whole-step
/// on the H200 (BENCHMARKS.md "session 29"), the split 64-token tiles won at 128 tokens on the
/// Llama-1B shape (18.35 → 13.94 ms; its products' 128 × 128 grids hold 16–128) and lost on
/// the 8B (72.53 → 80.39; 32–224): a per-product rule may take both, unmeasured as yet.
pub fn coop128_min_groups() -> Option<u64> {
    static MIN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    workgroups_from_env(&MIN, "COCO_COOP128_MIN_GROUPS")
}

/// Up to this many tokens the matvec (which reads W once per token) beats the tiled kernel
/// (which reads it once per 64 tokens, but whose few workgroups each walk all of K).
/// Measured on the H200 (BENCHMARKS.md, session 14), prefill of T tokens, matvec vs tiles:
/// Llama-3.2-1B shape T = 4: 3.2 vs 16.6 ms, 8: 4.6 vs 16.5, 16: 7.0 vs 16.5, 32: 11.7 vs
/// 16.7; Gemma-3-270M shape T = 32: 6.1 vs 8.2 ms.
pub const MATVEC_MAX_T: u32 = 32;

/// [`MATVEC_MAX_T`] where the tiles are the tensor-core ones: from 25 tokens their 64-token
/// tiles, with split K merged by a dispatch ([`coop64_split_pass`]), beat the int8 chunk
/// matvec. H100 (BENCHMARKS.md "session 45"), prefill ms, matvec vs tiles: Llama-1B Q4_0
/// 16: 4.77 vs 6.79, 24: 6.56 vs 7.03, 32: 8.28 vs 7.10; Gemma-270M Q5_0 24: 4.32 vs 4.18,
/// 32: 5.19 vs 4.75; Qwen-0.5B Q8_0 24: 7.19 vs 6.38, 32: 9.02 vs 7.47. With the large
/// products on the 128-token tiles ([`coop64_takes`]) the crossing moved lower on the small
/// shapes (session 48, every product on them: Llama-1B 16: 4.98 vs 5.55, 24: 6.86 vs 5.16;
/// Qwen 16: 5.49 vs 6.39, 24: 7.41 vs 6.27), but on the 8B the matvec's step grows ~1 ms a
/// token while the tiles' stays ~25 ms: unmeasured between 17 and 24 tokens, so 24 stays.
pub const COOP_MATVEC_MAX_T: u32 = 24;

/// The most tokens a step may have and still run the matvec on a device running `kernels`
/// (`None`: every step): [`MATVEC_MAX_T`], or [`COOP_MATVEC_MAX_T`] where the tiles are the
/// tensor-core ones, unless `COCO_MATVEC_MAX_T` sets it. On a CPU adapter the tiled kernel's barriers cost more than reading
/// W once per token, so prefill stays on the row-per-invocation matvec there too, unless a
/// GEMM was asked for by name (`DeviceOptions::gemm`: the page's check of the tile kernels
/// in the browser's compiler). The one rule [`MatmulKey::choose`](super::MatmulKey::choose) and `model::Plan` share.
pub fn matvec_max_t(kernels: DeviceKernels) -> Option<u32> {
    let tiles = kernels.matvec != MatmulVariant::MatvecRows
        || !matches!(kernels.gemm, GemmChoice::Auto | GemmChoice::Matrix);
    let stream = kernels.tiled.is_coop() && coop_stream();
    tiles.then(|| match matvec_max_t_override() {
        None if stream => COOP_STREAM_MIN_T - 1,
        None if kernels.tiled.is_coop() => COOP_MATVEC_MAX_T,
        setting => setting.unwrap_or(MATVEC_MAX_T),
    })
}

/// [`CHUNK_MIN_K`], or the tuning override `COCO_CHUNK_MIN_K` ([`chunk_min_k_override`]):
/// where the chunk matvec takes over from the lane-per-8 one.
pub fn chunk_min_k() -> u64 {
    chunk_min_k_override().unwrap_or(CHUNK_MIN_K)
}

/// [`CHUNK_SHORT_K_MIN`], unless `COCO_CHUNK_MIN_K` is set: the override alone then says
/// which products run the chunk matvec (`COCO_CHUNK_MIN_K=2048` is the A/B baseline of the
/// LM-head rule).
pub fn chunk_short_k_min() -> Option<(u64, u64)> {
    chunk_min_k_override()
        .is_none()
        .then_some(CHUNK_SHORT_K_MIN)
}

/// The tuning override `COCO_CHUNK_MIN_K` (32..=1,048,576), read once per process: for A/B
/// runs, for putting every product on the chunk matvec in the tests, and for keeping
/// lavapipe's whole-model tests off it where it is slow on a CPU (scripts/test.sh).
pub fn chunk_min_k_override() -> Option<u64> {
    static MIN_K: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MIN_K.get_or_init(|| {
        let v = std::env::var("COCO_CHUNK_MIN_K").ok()?;
        match v.trim().parse::<u64>() {
            Ok(k) if (32..=1 << 20).contains(&k) => Some(k),
            _ => {
                log::warn!(
                    "COCO_CHUNK_MIN_K={v:?} ignored: expected a whole number in 32..=1048576"
                );
                None
            }
        }
    })
}

/// [`MATVEC_MAX_T`], or the tuning override `COCO_MATVEC_MAX_T` (1..=512), read once per
/// process: for measuring where the matvec stops beating the tiles on a new GPU.
/// `COCO_GEMM_F16_OPERANDS=1`: the portable tiles round each staged weight and x' element to
/// f16 (round to nearest even, f16's subnormals included), as the tensor-core GEMM stages
/// them, and multiply-add in f32 as it does. So an adapter without tensor cores (lavapipe)
/// can show what the tensor-core path's numerics do to every HF golden: on the H200 the
/// tensor-core GEMM and this emulation gave the same figures where both ran (BENCHMARKS.md
/// "session 25"), and `tests/model.rs` holds both to the same f16 bounds. Only x''s range
/// is not f16's: the tensor-core GEMM scales a token whose x' passes 2^15 by a power of two,
/// which keeps its rounding relative, as f32's range does here.
pub fn f16_operands() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("COCO_GEMM_F16_OPERANDS").is_ok_and(|v| v == "1"))
}

/// `COCO_MATVEC_MAX_T` (1..=512), read once per process.
fn matvec_max_t_override() -> Option<u32> {
    static MAX_T: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *MAX_T.get_or_init(|| {
        let v = std::env::var("COCO_MATVEC_MAX_T").ok()?;
        match v.trim().parse::<u32>() {
            Ok(t) if (1..=512).contains(&t) => Some(t),
            _ => {
                log::warn!("COCO_MATVEC_MAX_T={v:?} ignored: expected a whole number in 1..=512");
                None
            }
        }
    })
}

/// The kernel shapes a device runs: its decode matvec and its prefill tile kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceKernels {
    pub matvec: MatmulVariant,
    pub tiled: MatmulVariant,
    /// Which portable tiles prefill runs (`DeviceOptions::gemm`).
    pub gemm: GemmChoice,
    /// The cooperative-matrix block of the tensor-core tiles (`GpuContext::coop_block`; 16
    /// where there is none, so a forced variant names the tensor cores' block).
    pub coop_block: u32,
    /// The portable wide tiles run in f16 ([`WideTile::f16`]): where the device has
    /// shader-f16 and [`wide_f16`] is on.
    pub wide_f16: bool,
}

impl DeviceKernels {
    /// What a device without subgroups or cooperative matrices runs (a browser's GPU).
    pub const PORTABLE: DeviceKernels = DeviceKernels {
        matvec: MatmulVariant::MatvecWorkgroup,
        tiled: MatmulVariant::Tiled,
        gemm: GemmChoice::Auto,
        coop_block: 16,
        wide_f16: false,
    };

    /// The matvec: subgroup sums where SUBGROUP exists, one row per invocation on a CPU
    /// adapter without them (SwiftShader), shared-memory sums elsewhere. The tiles: on
    /// tensor cores where coco's cooperative-matrix GEMM can run, portable otherwise.
    pub fn of(ctx: &crate::gpu::GpuContext) -> DeviceKernels {
        let matvec = if ctx.has_subgroups() {
            if matvec_shape().chunk {
                MatmulVariant::MatvecChunk
            } else {
                MatmulVariant::MatvecSubgroup
            }
        } else if ctx.info.device_type == wgpu::DeviceType::Cpu {
            MatmulVariant::MatvecRows
        } else {
            MatmulVariant::MatvecWorkgroup
        };
        let tiled = if ctx.has_coop_gemm() {
            ctx.gemm.pick_coop()
        } else if ctx.subgroup_matrix_i8 {
            MatmulVariant::MatrixI8 { emulated: false }
        } else if ctx.gemm == GemmChoice::Dot4 && crate::gpu::packed_4x8_dot() {
            MatmulVariant::Dot4I8
        } else {
            MatmulVariant::Tiled
        };
        DeviceKernels {
            matvec,
            tiled,
            gemm: ctx.gemm,
            coop_block: ctx.coop_block.unwrap_or(16),
            wide_f16: ctx.has_f16() && wide_f16(),
        }
    }

    /// Portable tiles with this matvec (tests).
    pub fn with_matvec(matvec: MatmulVariant) -> DeviceKernels {
        DeviceKernels {
            matvec,
            ..Self::PORTABLE
        }
    }
}
