//! coco: LLM inference from GGUF files on the GPU, through wgpu (native) and WebGPU (browser).
//!
//! Data flow: bytes → [`gguf::Parser`] → [`model::Config`] → [`capabilities`] →
//! GPU weights → [`tokenizer::Tokenizer`] → [`engine::Session`] → text.

pub mod gguf;
pub mod tokenizer;
pub mod gpu;
pub mod kernels;
pub mod reference;
pub mod model;
pub mod sampler;
pub mod bench;
pub mod capabilities;
pub mod engine;
mod util;
