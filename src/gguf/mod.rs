//! GGUF: a sans-IO incremental parser, the ggml tensor types and metadata values.
//!
//! Spec: <https://github.com/ggml-org/ggml/blob/master/docs/gguf.md>.

mod metadata;
mod parser;
mod types;
mod writer;

pub use metadata::{Metadata, MetadataError, Value};
pub use parser::{read_header, read_path, Event, GgufError, Header, Parser, TensorInfo};
pub use types::GgmlType;
pub use writer::Writer;
