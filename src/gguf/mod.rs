//! GGUF: a sans-IO incremental parser, the ggml tensor types and metadata values.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

#[cfg(not(target_arch = "wasm32"))]
mod file;
mod metadata;
mod parser;
mod types;
mod widen;
mod writer;

#[cfg(not(target_arch = "wasm32"))]
pub use file::{read_header, read_path, FileChunks};
pub use metadata::{Metadata, MetadataError, Value};
pub use parser::{Event, GgufError, Header, Parser, TensorInfo};
pub use types::GgmlType;
pub use widen::{is_lossless_widening, widen_blocks};
pub use writer::Writer;
