//! Plain-Rust CPU implementations of every kernel and a whole f32 forward pass: the oracle
//! the GPU is tested against (itself tested against Hugging Face goldens).

pub mod forward;
pub mod matmul;
pub mod ops;
pub mod quant;
pub mod sample;
