//! The adapter figures behind `coco bench --probe`: read bandwidth, the cost of a dependent
//! dispatch, the submit-and-readback round trip, the arithmetic ceilings the GEMMs are held
//! against, what a grid-wide barrier inside one dispatch costs instead of a dispatch, and
//! what one dispatch reading a decode product's worth of bytes reaches.

use serde::Serialize;

use super::median;
use crate::engine::EngineError;
use crate::gpu::{Binding, GpuContext, StepRecorder, Timing};
use crate::kernels::probe::{
    fma_flops, mma_flops, probe_empty, probe_fma, probe_grid_sync, probe_mma, probe_read,
    probe_read_grid, GRID_SYNC_WORDS, MMA_DST_FLOATS, READ_THREADS,
};
use crate::util::Clock;

/// Adapter figures measured by [`probe`].
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    pub read_gb_s: f64,
    /// µs per dependent dispatch by the wall clock: 500 one-workgroup dispatches from the
    /// submit call to a readback, so the host's encoding of each is in it (a decode step
    /// overlaps that with the GPU: `grid_sync`'s dispatches are the GPU's share).
    pub dispatch_us: f64,
    pub round_trip_us: f64,
    /// Dependent dispatches against grid-wide barriers, per grid size ([`probe_grid_syncs`]).
    pub grid_sync: Vec<GridSync>,
    /// One dispatch's read bandwidth per size and grid ([`probe_matrix_reads`]).
    pub matrix_reads: Vec<MatrixRead>,
    /// The compute ceilings ([`probe_compute`]).
    #[serde(flatten)]
    pub compute: ComputeProbe,
}

impl Probe {
    /// Grid of the dependent dispatch the floor charges: 128 workgroups, about what a decode
    /// step's products launch.
    const STEP_GRID: u32 = 128;

    /// µs a decode step's dependent dispatch costs the GPU: `grid_sync`'s 128-workgroup
    /// dispatch where timestamps timed it, else the wall-clock `dispatch_us` (which includes
    /// the host's encoding: 3.77 against 2.11 µs on an H100, BENCHMARKS.md session 36).
    pub fn step_dispatch_us(&self) -> f64 {
        self.grid_sync
            .iter()
            .find(|g| g.gpu_timed && g.workgroups == Self::STEP_GRID)
            .map_or(self.dispatch_us, |g| g.dispatch_us)
    }
}

/// The arithmetic ceilings the GEMMs are held against, measured by [`probe_compute`].
#[derive(Clone, Debug, Serialize)]
pub struct ComputeProbe {
    /// TFLOP/s of independent vec4 f32 FMAs: the portable kernels' ceiling.
    pub fma_tflops: f64,
    /// TFLOP/s of 16 × 16 × 16 f16 cooperative-matrix products with f32 sums, operands in
    /// registers: the tensor cores' ceiling through wgpu's cooperative matrices. `None`
    /// where the device has none.
    pub coop_tflops: Option<f64>,
    /// The same with each step's 2 A and 4 B blocks loaded from workgroup memory first, as a
    /// `coop128x128` subgroup does per 16-wide K step: its ceiling before any staging.
    pub coop_wg_loads_tflops: Option<f64>,
}

/// Measures read bandwidth, dependent-dispatch cost and submit+readback round trip.
pub async fn probe(ctx: &GpuContext) -> Result<Probe, EngineError> {
    // Bandwidth: 20 full reads of a buffer as large as one binding allows (≤ 1 GiB).
    let bytes = ctx.max_binding_bytes().min(1 << 30) & !15;
    let src = ctx.storage_buffer("probe_src", bytes);
    let dst = ctx.storage_buffer("probe_dst", READ_THREADS as u64 * 4);
    let n_vec4 = (bytes / 16) as u32;
    let timed = |passes, read| timed_probe(ctx, &src, &dst, n_vec4, passes, read);
    timed(2, true).await?; // warm-up: compile, first touch
    timed(2, false).await?;
    let mut trips = Vec::new();
    for _ in 0..15 {
        trips.push(timed(1, false).await?);
    }
    let round_trip = median(&trips);
    let mut reads = Vec::new();
    for _ in 0..3 {
        reads.push(timed(20, true).await?);
    }
    let read_s = (median(&reads) - round_trip).max(1e-9) / 20.0;
    let mut empties = Vec::new();
    for _ in 0..3 {
        empties.push(timed(500, false).await?);
    }
    let dispatch_s = (median(&empties) - round_trip).max(0.0) / 500.0;
    Ok(Probe {
        read_gb_s: bytes as f64 / read_s / 1e9,
        dispatch_us: dispatch_s * 1e6,
        round_trip_us: round_trip * 1e6,
        grid_sync: probe_grid_syncs(ctx).await?,
        matrix_reads: probe_matrix_reads(ctx, &src, &dst).await?,
        compute: probe_compute(ctx).await?,
    })
}

/// One grid size of [`probe_grid_syncs`]: what ordering two phases costs as two dependent
/// dispatches, and as a grid-wide barrier inside one dispatch.
#[derive(Clone, Debug, Serialize)]
pub struct GridSync {
    /// Workgroups of 256 invocations in the grid.
    pub workgroups: u32,
    /// µs per dependent dispatch of that many (nearly empty) workgroups.
    pub dispatch_us: f64,
    /// µs per grid-wide barrier, or `None` where the grid was not all resident at once (a
    /// workgroup gave up waiting), so a persistent kernel of that size would deadlock.
    pub barrier_us: Option<f64>,
    /// Plain loads of another workgroup's value, after a barrier, that returned an earlier
    /// round's (over the timed dispatches): more than 0 says a persistent kernel must read
    /// what other workgroups wrote with atomic loads.
    pub stale_reads: u32,
    /// Both times are the GPU's (timestamps at the pass's ends). Without timestamp queries
    /// they are wall clock less a submit's round trip, so the dispatches' include the host's
    /// encoding of each.
    pub gpu_timed: bool,
}

/// `probe`'s line: per grid size, a grid-wide barrier's µs against a dependent dispatch's.
pub fn grid_sync_line(sizes: &[GridSync]) -> String {
    let parts: Vec<String> = sizes
        .iter()
        .map(|g| {
            let barrier = match g.barrier_us {
                Some(b) => format!("{b:.2}"),
                None => "not co-resident".into(),
            };
            let stale = match g.stale_reads {
                0 => String::new(),
                n => format!(" ({n} stale reads)"),
            };
            format!(
                "{} wg {barrier} vs {:.2}{stale}",
                g.workgroups, g.dispatch_us
            )
        })
        .collect();
    let clock = match sizes.first() {
        Some(g) if !g.gpu_timed => "wall clock, host encoding included",
        _ => "GPU timestamps",
    };
    format!(
        "grid barrier vs dependent dispatch (µs, {clock}): {}",
        parts.join(", ")
    )
}

/// Grid sizes the barrier probe tries: from a fraction of a large GPU's SMs to more
/// workgroups than the H200 can hold at once (132 SMs × 8 of 256 invocations = 1,056).
const GRID_SIZES: [u32; 5] = [16, Probe::STEP_GRID, 512, 1024, 4096];

/// Barriers per timed dispatch, and dependent dispatches per timed pass.
const GRID_ROUNDS: u32 = 200;
const GRID_DISPATCHES: u32 = 200;

/// The decode step orders its phases by ending a dispatch (a pipeline barrier: the grid
/// drains, caches are flushed, the next grid launches). A persistent kernel would instead
/// have every workgroup wait on a counter. Per grid size: a dependent dispatch's cost (a pass
/// of [`GRID_DISPATCHES`] of them) and a barrier's (a dispatch of [`GRID_ROUNDS`] less the
/// same dispatch with none), medians of 3, on the GPU's clock where it has one.
pub async fn probe_grid_syncs(ctx: &GpuContext) -> Result<Vec<GridSync>, EngineError> {
    let dst = ctx.storage_buffer("probe_grid_dst", 4);
    let sync = ctx.storage_buffer("probe_grid_sync", GRID_SYNC_WORDS * 4);
    let slots = ctx.storage_buffer(
        "probe_grid_slots",
        GRID_SIZES[GRID_SIZES.len() - 1] as u64 * 4,
    );
    let clock = PassClock::new(ctx, &dst).await?;
    let mut out = Vec::new();
    for groups in GRID_SIZES {
        let mut chains = Vec::new();
        for _ in 0..3 {
            let mut rec = StepRecorder::new(ctx);
            for _ in 0..GRID_DISPATCHES {
                probe_empty(&mut rec, &Binding::from(&dst), groups)?;
            }
            chains.push(clock.seconds(rec).await? / GRID_DISPATCHES as f64);
        }
        // A barrier's cost is the dispatch with rounds less the same dispatch without.
        let mut resident = true;
        let mut per_round = Vec::new();
        let mut stale_reads = 0;
        for _ in 0..3 {
            let empty = grid_sync_run(&clock, &sync, &slots, groups, 0).await?;
            let full = grid_sync_run(&clock, &sync, &slots, groups, GRID_ROUNDS).await?;
            resident &= empty.resident && full.resident;
            if !resident {
                break;
            }
            stale_reads += full.stale_reads;
            per_round.push((full.seconds - empty.seconds).max(0.0) / GRID_ROUNDS as f64);
        }
        out.push(GridSync {
            workgroups: groups,
            dispatch_us: median(&chains) * 1e6,
            barrier_us: resident.then(|| median(&per_round) * 1e6),
            stale_reads,
            gpu_timed: clock.gpu,
        });
    }
    Ok(out)
}

/// One (size, grid) of [`probe_matrix_reads`].
#[derive(Clone, Debug, Serialize)]
pub struct MatrixRead {
    /// Bytes the dispatch reads.
    pub bytes: u64,
    /// Workgroups of 256 invocations.
    pub workgroups: u32,
    /// The bytes over the dispatch's time alone in its pass (median of [`MATRIX_READ_REPS`]),
    /// as `--profile` times each kernel of a step.
    pub gb_s: f64,
    /// Timed by GPU timestamps; false: wall clock less a submit's round trip.
    pub gpu_timed: bool,
}

/// The sizes [`probe_matrix_reads`] reads: the Llama-3.1-8B shape's Q4_0 products W_o
/// (4,096 × 4,096), W_down (14,336 × 4,096) and gate + up (2 × 14,336 × 4,096), at 0.5625
/// bytes a weight.
pub const MATRIX_READ_BYTES: [u64; 3] = [9_437_184, 33_030_144, 66_060_288];
/// Grids: the chunk matvec's 256 workgroups on the 8B's 4,096-row products (16 rows each),
/// and the 1,024 of the bandwidth probe's grid.
const MATRIX_READ_GRIDS: [u32; 2] = [256, 1024];
const MATRIX_READ_REPS: usize = 5;

/// What one dispatch reading a decode product's bytes can reach, timed as the profile times
/// a kernel (alone in its pass: launch, ramp and tail included). The profile's GB/s of a
/// matvec is held against this, not only against `read_gb_s` (20 back-to-back 1 GiB reads):
/// the 8B's W_o + W_down read at 1.2–1.3 TB/s of an H100's 3.0 (BENCHMARKS.md session 37).
/// Each dispatch reads the next bytes of the bandwidth probe's `src` (1 GiB where bindings
/// allow), wrapping at its end: a region comes back only after the rest of the buffer, so
/// it is not in L2 (50 MB on an H100; the first form reread one region, and its 33 MB read
/// at 2.7–3.1 TB/s from L2 while 66 MB read at 1.8–2.3). Sizes beyond `src` are skipped.
pub async fn probe_matrix_reads(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
) -> Result<Vec<MatrixRead>, EngineError> {
    let clock = PassClock::new(ctx, dst).await?;
    let align = ctx.device.limits().min_storage_buffer_offset_alignment as u64;
    let mut cursor = 0;
    let mut out = Vec::new();
    for bytes in MATRIX_READ_BYTES.into_iter().filter(|&b| b <= src.size()) {
        for groups in MATRIX_READ_GRIDS {
            let mut times = Vec::new();
            for rep in 0..=MATRIX_READ_REPS {
                if cursor + bytes > src.size() {
                    cursor = 0;
                }
                let region = Binding {
                    buffer: src.clone(),
                    offset: cursor,
                    size: Some(bytes),
                };
                cursor = (cursor + bytes).next_multiple_of(align.max(16));
                let mut rec = StepRecorder::new(ctx);
                let n_vec4 = (bytes / 16) as u32;
                probe_read_grid(&mut rec, &region, &dst.into(), n_vec4, groups)?;
                let seconds = clock.seconds(rec).await?;
                if rep > 0 {
                    times.push(seconds); // the first is a warm-up (the pipeline, first touch)
                }
            }
            out.push(MatrixRead {
                bytes,
                workgroups: groups,
                gb_s: bytes as f64 / median(&times).max(1e-9) / 1e9,
                gpu_timed: clock.gpu,
            });
        }
    }
    Ok(out)
}

/// `probe`'s line: one dispatch's read bandwidth per size and grid.
pub fn matrix_read_line(reads: &[MatrixRead]) -> String {
    let clock = match reads.first() {
        Some(r) if !r.gpu_timed => "wall clock",
        _ => "GPU timestamps",
    };
    let parts: Vec<String> = reads
        .iter()
        .map(|r| {
            format!(
                "{:.1} MB x {} wg {:.0}",
                r.bytes as f64 / 1e6,
                r.workgroups,
                r.gb_s
            )
        })
        .collect();
    format!(
        "one dispatch alone in its pass, GB/s ({clock}): {}",
        parts.join(", ")
    )
}

/// Times a recorded pass: by its timestamps where the device has timestamp queries, else by
/// the wall clock from submit to a 4-byte readback, less the median round trip of one empty
/// dispatch.
struct PassClock<'a> {
    ctx: &'a GpuContext,
    dst: &'a wgpu::Buffer,
    gpu: bool,
    round_trip: f64,
}

impl<'a> PassClock<'a> {
    async fn new(ctx: &'a GpuContext, dst: &'a wgpu::Buffer) -> Result<Self, EngineError> {
        let gpu = ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY);
        let empty = |rec: &mut StepRecorder| probe_empty(rec, &Binding::from(dst), 1);
        timed_passes(ctx, dst, 2, empty).await?; // warm-up: compile, first touch
        let mut trips = Vec::new();
        if !gpu {
            for _ in 0..5 {
                trips.push(timed_passes(ctx, dst, 1, empty).await?);
            }
        }
        Ok(PassClock {
            ctx,
            dst,
            gpu,
            round_trip: if gpu { 0.0 } else { median(&trips) },
        })
    }

    async fn seconds(&self, rec: StepRecorder<'_>) -> Result<f64, EngineError> {
        if self.gpu {
            let spans = rec.submit_timed(Timing::Step).await?;
            return Ok(spans.iter().map(|s| s.ns).sum::<f64>() * 1e-9);
        }
        let clock = Clock::start();
        rec.submit();
        self.ctx.read_buffer_async(self.dst, 0, 4).await?;
        Ok((clock.seconds() - self.round_trip).max(0.0))
    }
}

/// One timed grid-sync dispatch and what its flags say.
struct GridRun {
    seconds: f64,
    /// Every workgroup saw every other arrive.
    resident: bool,
    stale_reads: u32,
}

/// Times one grid-sync dispatch of `groups` workgroups and `rounds` barriers.
async fn grid_sync_run(
    clock: &PassClock<'_>,
    sync: &wgpu::Buffer,
    slots: &wgpu::Buffer,
    groups: u32,
    rounds: u32,
) -> Result<GridRun, EngineError> {
    let ctx = clock.ctx;
    ctx.write_padded(sync, 0, &[0u8; GRID_SYNC_WORDS as usize * 4]);
    ctx.write_padded(slots, 0, &vec![0u8; groups as usize * 4]);
    let mut rec = StepRecorder::new(ctx);
    probe_grid_sync(
        &mut rec,
        &Binding::from(sync),
        &Binding::from(slots),
        groups,
        rounds,
    )?;
    let seconds = clock.seconds(rec).await?;
    let bytes = ctx.read_buffer_async(sync, 0, GRID_SYNC_WORDS * 4).await?;
    let word = |i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("3 words"));
    Ok(GridRun {
        seconds,
        resident: word(1) == 0,
        stale_reads: word(2),
    })
}

impl std::fmt::Display for ComputeProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "f32 FMA {:.3} TFLOP/s", self.fma_tflops)?;
        match (self.coop_tflops, self.coop_wg_loads_tflops) {
            (Some(regs), Some(loads)) => write!(
                f,
                ", cooperative matrices (f16 16x16x16, f32 sums) {regs:.1} TFLOP/s, \
                 {loads:.1} with coop128x128's matrix loads from workgroup memory"
            ),
            // coop_gemm_available: none offered, not 16x16x16 f16 with subgroups of 32, or
            // switched off with COCO_COOPMAT=0.
            _ => write!(
                f,
                ", no cooperative matrices on this device (or COCO_COOPMAT=0)"
            ),
        }
    }
}

/// Dispatches of a compute probe per timed pass, and timed passes (the median is kept).
const COMPUTE_PASSES: u32 = 4;
const COMPUTE_REPS: usize = 3;

/// Measures the f32 FMA rate and, where the device has cooperative matrices, the tensor
/// cores' rate with operands in registers and with them loaded from workgroup memory.
/// Each probe is sized to take ~5 ms a dispatch from a first short run, so a software adapter
/// finishes in seconds and a large GPU isn't timed on launch latency.
pub async fn probe_compute(ctx: &GpuContext) -> Result<ComputeProbe, EngineError> {
    let dst = ctx.storage_buffer("probe_compute_dst", MMA_DST_FLOATS * 4);
    let clock = PassClock::new(ctx, &dst).await?;
    let fma = |rec: &mut StepRecorder, steps| probe_fma(rec, &Binding::from(&dst), steps);
    let fma_tflops = compute_rate(&clock, &fma, fma_flops).await?;
    // The probe is the tensor cores' 16 × 16 blocks (lavapipe's 8 × 8 ones measure a CPU).
    let (coop_tflops, coop_wg_loads_tflops) = if ctx.coop_block == Some(16) {
        let mma =
            |rec: &mut StepRecorder, steps| probe_mma(rec, &Binding::from(&dst), steps, false);
        let loads =
            |rec: &mut StepRecorder, steps| probe_mma(rec, &Binding::from(&dst), steps, true);
        (
            Some(compute_rate(&clock, &mma, mma_flops).await?),
            Some(compute_rate(&clock, &loads, mma_flops).await?),
        )
    } else {
        (None, None)
    };
    Ok(ComputeProbe {
        fma_tflops,
        coop_tflops,
        coop_wg_loads_tflops,
    })
}

/// A probe kernel's recording of one dispatch of `steps`.
type ProbeKernel<'a> =
    dyn Fn(&mut StepRecorder, u32) -> Result<(), crate::kernels::KernelError> + 'a;

/// TFLOP/s of `kernel`, doing `flops(steps)` a dispatch: its steps grown until a dispatch
/// takes ~5 ms, then the median of [`COMPUTE_REPS`] passes of [`COMPUTE_PASSES`] dispatches,
/// on the GPU's clock where it has one ([`PassClock`]). The page's wall clock (a submit and a
/// map in Chromium) varies by milliseconds, which once sized the probe at 64 steps and
/// reported 1,073,741 TFLOP/s (BENCHMARKS.md session 36): a time the clock can't resolve is an
/// error, not a rate.
async fn compute_rate(
    clock: &PassClock<'_>,
    kernel: &ProbeKernel<'_>,
    flops: fn(u32) -> f64,
) -> Result<f64, EngineError> {
    const TARGET_S: f64 = 5e-3;
    let timed = |steps: u32, passes: u32| async move {
        let mut rec = StepRecorder::new(clock.ctx);
        for _ in 0..passes {
            kernel(&mut rec, steps)?;
        }
        Ok::<f64, EngineError>(clock.seconds(rec).await? / passes as f64)
    };
    let mut steps = 16u32;
    let per_dispatch = loop {
        let s = timed(steps, 1).await?;
        if s >= TARGET_S / 8.0 || steps >= 1 << 20 {
            break s;
        }
        steps *= 8;
    };
    let unresolved = || {
        EngineError::Gpu(crate::gpu::GpuError::Dispatch {
            label: "probe".into(),
            why: format!(
                "the compute probe took no time this clock resolves ({}): no rate to report",
                if clock.gpu {
                    "GPU timestamps"
                } else {
                    "wall clock"
                }
            ),
        })
    };
    if per_dispatch <= 0.0 {
        return Err(unresolved());
    }
    let steps = ((steps as f64 * TARGET_S / per_dispatch) as u32).clamp(16, 1 << 22);
    let mut times = Vec::new();
    for _ in 0..COMPUTE_REPS {
        times.push(timed(steps, COMPUTE_PASSES).await?);
    }
    let t = median(&times);
    if t <= 0.0 {
        return Err(unresolved());
    }
    Ok(flops(steps) / t / 1e12)
}

/// One submit of `passes` dispatches recorded by `record`, plus a 4-byte readback of `dst`;
/// returns the wall time.
async fn timed_passes(
    ctx: &GpuContext,
    dst: &wgpu::Buffer,
    passes: u32,
    record: impl Fn(&mut StepRecorder) -> Result<(), crate::kernels::KernelError>,
) -> Result<f64, EngineError> {
    let mut rec = StepRecorder::new(ctx);
    for _ in 0..passes {
        record(&mut rec)?;
    }
    let clock = Clock::start();
    rec.submit();
    ctx.read_buffer_async(dst, 0, 4).await?;
    Ok(clock.seconds())
}

/// One submit of `passes` probe dispatches (reads of `src`, or empty ones) plus a 4-byte
/// readback; returns the wall time.
async fn timed_probe(
    ctx: &GpuContext,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    n_vec4: u32,
    passes: u32,
    read: bool,
) -> Result<f64, EngineError> {
    timed_passes(ctx, dst, passes, |rec| {
        if read {
            probe_read(rec, &Binding::from(src), &Binding::from(dst), n_vec4)
        } else {
            probe_empty(rec, &Binding::from(dst), 1)
        }
    })
    .await
}
