//! GGUF: a sans-IO incremental parser, the ggml tensor types and metadata values.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

mod metadata;
mod parser;
mod types;
mod writer;

pub use metadata::{Metadata, MetadataError, Value};
#[cfg(not(target_arch = "wasm32"))]
pub use parser::{read_header, read_path};
pub use parser::{Event, GgufError, Header, Parser, TensorInfo};
pub use types::GgmlType;
pub use writer::Writer;
