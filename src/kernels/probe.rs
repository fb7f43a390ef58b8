//! Micro-kernels (`shaders/probe.wgsl`) that measure the adapter for the benchmark's floor:
//! read bandwidth and the cost of one dependent dispatch; and the ceilings the kernels are
//! held against: f32 FMAs (the portable GEMM's) and, natively, the tensor cores through wgpu's
//! cooperative matrices (the tensor-core GEMM's).

use bytemuck::{Pod, Zeroable};

use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    /// Elements of `src` as vec4 (READ); steps per invocation (FMA, MMA).
    n_vec4: u32,
    threads: u32,
    /// FMA's operands (and MMA's operand scale), from the host so they can't be folded.
    mul: f32,
    add: f32,
}

/// Invocations of the read kernel: enough to fill a large GPU, each streaming a slice.
pub const READ_THREADS: u32 = 256 * 1024;

/// Reads all of `src` (`[n_vec4]` `vec4<f32>`) once, writing per-invocation sums to `dst`
/// (`[READ_THREADS]` f32).
pub fn probe_read(
    rec: &mut StepRecorder,
    src: &Binding,
    dst: &Binding,
    n_vec4: u32,
) -> Result<(), KernelError> {
    probe_read_grid(rec, src, dst, n_vec4, READ_THREADS / 256)
}

/// [`probe_read`] over the first `n_vec4` vec4s of `src` with `groups` workgroups of 256
/// (at most `READ_THREADS / 256`): each invocation sums every `256 · groups`-th vec4.
pub fn probe_read_grid(
    rec: &mut StepRecorder,
    src: &Binding,
    dst: &Binding,
    n_vec4: u32,
    groups: u32,
) -> Result<(), KernelError> {
    let label = "probe_read";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["READ"]));
    let groups = groups.clamp(1, READ_THREADS / 256);
    let params = Params {
        n_vec4,
        threads: groups * 256,
        mul: 0.0,
        add: 0.0,
    };
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &[src.clone(), dst.clone()],
        [groups.min(65_535), groups.div_ceil(65_535), 1],
    )?;
    Ok(())
}

/// A dispatch of `groups` workgroups that does (almost) nothing; `dst` is `[1]` f32.
pub fn probe_empty(rec: &mut StepRecorder, dst: &Binding, groups: u32) -> Result<(), KernelError> {
    let label = "probe_empty";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["EMPTY"]));
    let params = Params {
        n_vec4: 0,
        threads: 1,
        mul: 0.0,
        add: 0.0,
    };
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        std::slice::from_ref(dst),
        [groups, 1, 1],
    )?;
    Ok(())
}

/// Words of the grid-sync probe's `sync` buffer: the arrival counter, the gave-up flag and
/// the count of stale reads.
pub const GRID_SYNC_WORDS: u64 = 3;

/// One dispatch of `groups` workgroups that pass `rounds` grid-wide barriers (an atomic
/// arrival counter each spins on; `GRID_SYNC` in probe.wgsl), each round handing a value to
/// the others through `slots` (`[groups]` u32, plain stores and loads). `sync` holds
/// [`GRID_SYNC_WORDS`] u32 and must be zero before the dispatch; afterwards word 1 is 1 if a
/// workgroup gave up waiting (the grid did not all run at once) and word 2 counts reads of
/// another workgroup's value that returned an earlier round's.
pub fn probe_grid_sync(
    rec: &mut StepRecorder,
    sync: &Binding,
    slots: &Binding,
    groups: u32,
    rounds: u32,
) -> Result<(), KernelError> {
    let label = "probe_grid_sync";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["GRID_SYNC"]));
    let params = Params {
        n_vec4: rounds,
        threads: groups,
        mul: 0.0,
        add: 0.0,
    };
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &[sync.clone(), slots.clone()],
        [groups, 1, 1],
    )?;
    Ok(())
}

/// Workgroups of the FMA and MMA probes: enough to fill a large GPU several times over.
pub const COMPUTE_GROUPS: u32 = 1024;

/// Floats the MMA probe writes (`dst`): 16 sets of 8 subgroups × 8 accumulators of 16 × 16.
pub const MMA_DST_FLOATS: u64 = 16 * 8 * 8 * 256;

/// Operations one FMA probe dispatch of `steps` does: per invocation 8 chains of vec4 FMAs.
pub fn fma_flops(steps: u32) -> f64 {
    COMPUTE_GROUPS as f64 * 256.0 * steps as f64 * 8.0 * 4.0 * 2.0
}

/// Operations one MMA probe dispatch of `steps` does: per subgroup (8 of 32 invocations) 8
/// products of 16 × 16 × 16 per step.
pub fn mma_flops(steps: u32) -> f64 {
    COMPUTE_GROUPS as f64 * 8.0 * steps as f64 * 8.0 * 2.0 * 4096.0
}

/// `steps` of 8 independent vec4 f32 FMA chains per invocation; `dst` is `[4096]` f32.
pub fn probe_fma(rec: &mut StepRecorder, dst: &Binding, steps: u32) -> Result<(), KernelError> {
    let label = "probe_fma";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["FMA"]));
    dispatch_compute(rec, &pipeline, dst, steps, (0.999, 0.001))
}

/// `steps` of 8 cooperative-matrix products per subgroup (16 × 16 × 16, f16 operands, f32
/// sums), with `wg_loads` each step's 6 operand blocks loaded from workgroup memory first;
/// `dst` holds [`MMA_DST_FLOATS`] f32. Needs the tensor-core GEMM's device features
/// with 16 × 16 blocks on subgroups of 32 (`GpuContext::coop_block`: the tensor cores').
pub fn probe_mma(
    rec: &mut StepRecorder,
    dst: &Binding,
    steps: u32,
    wg_loads: bool,
) -> Result<(), KernelError> {
    if rec.ctx().coop_block != Some(16) {
        return Err(KernelError::Shape {
            kernel: "probe_mma",
            why: "not yet on this device: no 16x16x16 f16 -> f32 cooperative matrices on subgroups of 32".into(),
        });
    }
    let label = if wg_loads {
        "probe_mma_wg_loads"
    } else {
        "probe_mma"
    };
    let pipeline = rec.ctx().pipeline(label, || {
        let defines: &[&str] = if wg_loads {
            &["MMA", "WG_LOADS"]
        } else {
            &["MMA"]
        };
        mma_source(defines)
    });
    dispatch_compute(rec, &pipeline, dst, steps, (1.0 / 64.0, 0.0))
}

/// One dispatch of a compute probe: [`COMPUTE_GROUPS`] workgroups of `steps` each, with its
/// operands (`mul`, `add`) from the host so the compiler can't fold its arithmetic.
fn dispatch_compute(
    rec: &mut StepRecorder,
    pipeline: &std::sync::Arc<crate::gpu::Kernel>,
    dst: &Binding,
    steps: u32,
    (mul, add): (f32, f32),
) -> Result<(), KernelError> {
    let params = Params {
        n_vec4: steps,
        threads: COMPUTE_GROUPS * 256,
        mul,
        add,
    };
    rec.dispatch(
        pipeline,
        bytemuck::bytes_of(&params),
        std::slice::from_ref(dst),
        [COMPUTE_GROUPS, 1, 1],
    )?;
    Ok(())
}

/// The MMA probe's source with `defines`, after the directives its types need.
pub(crate) fn mma_source(defines: &[&str]) -> String {
    "enable f16;\nenable wgpu_cooperative_matrix;\n".to_string()
        + &preprocess("probe.wgsl", defines)
}
