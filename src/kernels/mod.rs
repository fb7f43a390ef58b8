//! One Rust file per shader family: a variant key → defines + label, shape checks on the
//! host, bindings, and the dispatch. Only this module names bindings.
//!
//! Conventions for every kernel:
//! - `@group(0) @binding(0) var<uniform> p: Params;` then storage bindings 1..n in the order
//!   the Rust function lists them;
//! - activations are f32, row-major `[T, dim]` (T = tokens in the step);
//! - pipelines come from `GpuContext::pipeline(label, ..)` with a label naming the variant.

pub mod argmax;
pub mod attention;
pub mod elementwise;
pub mod get_rows;
pub mod matmul;
pub mod megakernel;
pub mod norm;
pub mod probe;
pub mod qkv_rope;
pub mod rope;
pub mod sample;

/// A host-side shape/argument check failed before anything was dispatched.
#[derive(Debug, thiserror::Error)]
pub enum KernelError {
    #[error("{kernel}: {why}")]
    Shape { kernel: &'static str, why: String },
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
}
