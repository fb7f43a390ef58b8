//! Everything that talks to the wgpu device: adapter and device setup, the kernel and
//! bind-group caches, buffer creation and readback, and the one-compute-pass-per-step
//! recorder.
//!
//! Boundary: only this module calls `create_*` on the device.

mod cache;
mod context;
mod features;
pub mod layout;
mod recorder;
mod shader;
mod weights;

pub use cache::Kernel;
pub use context::{
    shader_checks_name, GpuContext, GpuError, ResourceCounts, COOP_GEMM_WORKGROUP_BYTES,
    MATRIX_I8_WORKGROUP_BYTES,
};
pub use features::{
    packed_4x8_dot, AttentionMerge, BrowserGrant, DeviceOptions, GemmChoice, SubgroupChoice,
    SubgroupDecision, WideTile,
};
pub use recorder::{Binding, SpanTime, StepRecorder, Timing, Work};
#[cfg(test)]
pub(crate) use shader::{compile_to_spirv, used_bindings};
pub use shader::{declared_bindings, preprocess, preprocess_with, shader_source};
pub use weights::{GpuTensor, TensorPart};
