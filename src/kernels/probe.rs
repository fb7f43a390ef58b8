//! Micro-kernels (`shaders/probe.wgsl`) that measure the adapter for the benchmark's floor:
//! read bandwidth and the cost of one dependent dispatch.

use bytemuck::{Pod, Zeroable};

use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n_vec4: u32,
    threads: u32,
    _pad: [u32; 2],
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
    let label = "probe_read";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["READ"]));
    let params = Params {
        n_vec4,
        threads: READ_THREADS,
        _pad: [0; 2],
    };
    let groups = READ_THREADS / 256;
    rec.dispatch(
        label,
        &pipeline,
        bytemuck::bytes_of(&params),
        &[src.clone(), dst.clone()],
        [groups.min(65_535), groups.div_ceil(65_535), 1],
    )?;
    Ok(())
}

/// A dispatch that does (almost) nothing; `dst` is `[1]` f32.
pub fn probe_empty(rec: &mut StepRecorder, dst: &Binding) -> Result<(), KernelError> {
    let label = "probe_empty";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("probe.wgsl", &["EMPTY"]));
    let params = Params {
        n_vec4: 0,
        threads: 1,
        _pad: [0; 2],
    };
    rec.dispatch(
        label,
        &pipeline,
        bytemuck::bytes_of(&params),
        std::slice::from_ref(dst),
        [1, 1, 1],
    )?;
    Ok(())
}
