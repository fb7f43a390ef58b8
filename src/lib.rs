//! coco: LLM inference from GGUF files on the GPU, through wgpu (native) and WebGPU (browser).
//!
//! Data flow: bytes → [`gguf::Parser`] → [`model::Config`] → [`capabilities`] →
//! GPU weights → [`tokenizer::Tokenizer`] → [`engine::Session`] → text.

pub mod bench;
pub mod capabilities;
pub mod chat;
pub mod engine;
pub mod gguf;
pub mod gpu;
pub mod kernels;
pub mod model;
pub mod reference;
pub mod sampler;
pub mod tokenizer;
mod util;
/// The page's boundary: its serde types build everywhere (a native test checks `www/API.md`
/// against them); the wasm-bindgen API itself only for wasm32.
pub mod web;
