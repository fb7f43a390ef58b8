//! A sans-IO, incremental GGUF parser.
//!
//! Feed it chunks of any size with [`Parser::push`]; it calls back with the [`Header`] (all
//! metadata and tensor infos) once they are complete, then with each tensor's bytes as they
//! arrive. The same parser serves a file read in chunks and a browser `fetch()` stream.
//!
//! Hostile input: every count and length read from the file is bounded before use, nothing
//! is allocated from an unvalidated count (vectors grow as bytes actually arrive), and each
//! error names the field and its byte offset.

use std::collections::HashSet;

use super::metadata::{Metadata, Value};
use super::types::GgmlType;

const MAGIC: &[u8; 4] = b"GGUF";
/// Bounds on what a file may declare. Real models stay far below them: Gemma 3 has 15 tensors
/// per layer and a 262,144-entry vocabulary array.
pub const MAX_TENSORS: u64 = 1 << 16;
pub const MAX_KV: u64 = 1 << 16;
pub const MAX_STRING_LEN: u64 = 1 << 24;
pub const MAX_ARRAY_LEN: u64 = 1 << 22;
pub const MAX_ARRAY_DEPTH: usize = 4;
pub const MAX_DIMS: u32 = 4;
/// Whole header (metadata + tensor infos) as it sits in the file.
pub const MAX_HEADER_BYTES: u64 = 256 << 20;
/// Tensor data offsets and sizes (1 TiB: far past any model a GPU can hold).
pub const MAX_DATA_BYTES: u64 = 1 << 40;
pub const MAX_ALIGNMENT: u64 = 1 << 16;
const DEFAULT_ALIGNMENT: u64 = 32;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GgufError {
    #[error("not a GGUF file: magic {found:?} at offset 0 (expected \"GGUF\")")]
    BadMagic { found: [u8; 4] },
    #[error("unsupported GGUF version {version} at offset 4 (supported: 2, 3{})", if *big_endian { "; this looks like a big-endian file, which coco does not read" } else { "" })]
    Version { version: u32, big_endian: bool },
    #[error("{field} at offset {offset}: {value} exceeds the limit {limit}")]
    TooLarge {
        field: String,
        offset: u64,
        value: u64,
        limit: u64,
    },
    #[error("{field} at offset {offset}: {why}")]
    Invalid {
        field: String,
        offset: u64,
        why: String,
    },
    #[error(
        "truncated file: {field} at offset {offset} needs {needed} more bytes, the input ended"
    )]
    Truncated {
        field: String,
        offset: u64,
        needed: u64,
    },
    #[error("read error: {0}")]
    Io(String),
}

/// One tensor's description. `dims` are in GGUF/ggml order: `dims[0]` is the row length
/// (contiguous), the rest count rows.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the data relative to the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }
    /// Elements per row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }
    /// Number of rows (product of `dims[1..]`).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
    pub fn row_bytes(&self) -> u64 {
        if self.n_rows() == 0 {
            return 0;
        }
        self.n_bytes / self.n_rows()
    }
}

/// Everything before the tensor data.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute file offset where tensor data starts.
    pub data_start: u64,
}

impl Header {
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
    /// Absolute file offset just past the last tensor's data: the smallest valid file size.
    pub fn data_end(&self) -> u64 {
        self.data_start
            + self
                .tensors
                .iter()
                .map(|t| t.offset + t.n_bytes)
                .max()
                .unwrap_or(0)
    }
    pub fn total_tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.n_bytes).sum()
    }
}

/// What the parser reports while consuming input.
#[derive(Debug)]
pub enum Event<'a> {
    /// Metadata and tensor infos are complete; data follows.
    Header(&'a Header),
    /// `bytes` belong to tensor `index` (into `Header::tensors`) at `offset` within it.
    TensorBytes {
        index: usize,
        offset: u64,
        bytes: &'a [u8],
    },
    /// Tensor `index` has received all its bytes.
    TensorDone { index: usize },
}

/// A metadata array being filled element by element (arrays can be nested).
struct ArrayFrame {
    elem_type: u32,
    remaining: u64,
    items: Vec<Value>,
}

enum Stage {
    Preamble,
    KvKey,
    KvType {
        key: String,
    },
    KvValue {
        key: String,
        value_type: u32,
    },
    KvArray {
        key: String,
        stack: Vec<ArrayFrame>,
    },
    TensorInfos,
    /// Every tensor info read: `finish_header` checks them and moves on to `Data` (a failed
    /// check leaves the parser here, so it never routes bytes without a header).
    InfosRead,
    Data,
}

/// The incremental parser. See the module docs.
pub struct Parser {
    stage: Stage,
    /// Unconsumed input; `buf[start..]` begins at absolute offset `buf_offset`.
    buf: Vec<u8>,
    start: usize,
    buf_offset: u64,
    /// Don't retry parsing until `buf` reaches this absolute offset (avoids O(n²) on tiny chunks).
    need_until: u64,
    version: u32,
    tensor_count: u64,
    kv_count: u64,
    kv_done: u64,
    metadata: Metadata,
    metadata_bytes: u64,
    tensors: Vec<TensorInfo>,
    names: HashSet<String>,
    header: Option<Header>,
    /// Data phase: tensor indices sorted by offset, the next one to feed, bytes received.
    order: Vec<usize>,
    cursor: usize,
    received: Vec<u64>,
    /// Absolute offset of the next byte the data phase will see.
    pos: u64,
    expected_len: Option<u64>,
    total_in: u64,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

/// A bounded reader over the buffered bytes. `None` means "not enough bytes yet".
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }
    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok()?;
        let end = self.pos.checked_add(n)?;
        let out = self.bytes.get(self.pos..end)?;
        self.pos = end;
        Some(out)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
}

/// Result of one atomic parse step.
enum Step<T> {
    Done(T),
    /// Needs the buffer to reach this many bytes past the cursor's start.
    NeedMore(u64),
}

fn invalid(field: impl Into<String>, offset: u64, why: impl Into<String>) -> GgufError {
    GgufError::Invalid {
        field: field.into(),
        offset,
        why: why.into(),
    }
}

fn too_large(field: impl Into<String>, offset: u64, value: u64, limit: u64) -> GgufError {
    GgufError::TooLarge {
        field: field.into(),
        offset,
        value,
        limit,
    }
}

/// Reads a GGUF string (u64 length + UTF-8 bytes), bounded by `MAX_STRING_LEN`.
fn read_string(c: &mut Cursor<'_>, field: &dyn Fn() -> String) -> Result<Step<String>, GgufError> {
    let at = c.offset();
    let start = c.pos;
    let Some(len) = c.u64() else {
        return Ok(Step::NeedMore(8));
    };
    if len > MAX_STRING_LEN {
        return Err(too_large(
            format!("{} (string length)", field()),
            at,
            len,
            MAX_STRING_LEN,
        ));
    }
    let Some(bytes) = c.take(len) else {
        return Ok(Step::NeedMore((c.pos - start) as u64 + len));
    };
    match std::str::from_utf8(bytes) {
        Ok(s) => Ok(Step::Done(s.to_string())),
        Err(e) => Err(invalid(
            field(),
            at,
            format!("string is not valid UTF-8 ({e})"),
        )),
    }
}

/// Metadata value type ids (GGUF spec `gguf_metadata_value_type`).
const T_ARRAY: u32 = 9;
const T_STRING: u32 = 8;

fn scalar_size(value_type: u32) -> Option<u64> {
    match value_type {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// Reads one non-array value of `value_type`.
fn read_scalar_or_string(
    c: &mut Cursor<'_>,
    value_type: u32,
    field: &dyn Fn() -> String,
) -> Result<Step<Value>, GgufError> {
    let at = c.offset();
    if value_type == T_STRING {
        return Ok(match read_string(c, field)? {
            Step::Done(s) => Step::Done(Value::String(s)),
            Step::NeedMore(n) => Step::NeedMore(n),
        });
    }
    let Some(size) = scalar_size(value_type) else {
        return Err(invalid(
            field(),
            at,
            format!("unknown metadata value type {value_type}"),
        ));
    };
    let Some(b) = c.take(size) else {
        return Ok(Step::NeedMore(size));
    };
    let value = match value_type {
        0 => Value::U8(b[0]),
        1 => Value::I8(b[0] as i8),
        2 => Value::U16(u16::from_le_bytes([b[0], b[1]])),
        3 => Value::I16(i16::from_le_bytes([b[0], b[1]])),
        4 => Value::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        5 => Value::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        6 => Value::F32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        7 => match b[0] {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            other => {
                return Err(invalid(
                    field(),
                    at,
                    format!("bool byte {other} is neither 0 nor 1"),
                ))
            }
        },
        10 => Value::U64(u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        11 => Value::I64(i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
        _ => Value::F64(f64::from_le_bytes(b.try_into().unwrap_or([0; 8]))),
    };
    Ok(Step::Done(value))
}

impl Parser {
    pub fn new() -> Parser {
        Parser {
            stage: Stage::Preamble,
            buf: Vec::new(),
            start: 0,
            buf_offset: 0,
            need_until: 0,
            version: 0,
            tensor_count: 0,
            kv_count: 0,
            kv_done: 0,
            metadata: Metadata::default(),
            metadata_bytes: 0,
            tensors: Vec::new(),
            names: HashSet::new(),
            header: None,
            order: Vec::new(),
            cursor: 0,
            received: Vec::new(),
            pos: 0,
            expected_len: None,
            total_in: 0,
        }
    }

    /// Tells the parser the total input length (e.g. from Content-Length or file size), so
    /// tensors that would lie past the end are rejected as soon as the header is parsed.
    pub fn with_expected_len(mut self, len: u64) -> Parser {
        self.expected_len = Some(len);
        self
    }

    /// The parsed header, when the parser is done with.
    pub fn into_header(self) -> Option<Header> {
        self.header
    }

    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// Total bytes pushed so far.
    pub fn bytes_seen(&self) -> u64 {
        self.total_in
    }

    /// True once every tensor has received all its bytes.
    pub fn is_complete(&self) -> bool {
        self.header.as_ref().is_some_and(|h| {
            h.tensors
                .iter()
                .zip(&self.received)
                .all(|(t, r)| *r == t.n_bytes)
        })
    }

    /// Consumes `chunk`, calling `on_event` for the header and each piece of tensor data.
    pub fn push(
        &mut self,
        chunk: &[u8],
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), GgufError> {
        self.total_in += chunk.len() as u64;
        if matches!(self.stage, Stage::Data) {
            self.feed_data(chunk, on_event);
            return Ok(());
        }
        self.buf.extend_from_slice(chunk);
        let available = self.buf_offset + (self.buf.len() - self.start) as u64;
        if available < self.need_until {
            return Ok(());
        }
        self.parse_header(on_event)?;
        if matches!(self.stage, Stage::Data) {
            let rest = std::mem::take(&mut self.buf);
            let start = self.start;
            self.start = 0;
            self.feed_data(&rest[start..], on_event);
        } else if self.start > 1 << 16 && self.start * 2 > self.buf.len() {
            // Compact so buffered header bytes stay proportional to what is still unparsed.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        Ok(())
    }

    /// Ends the input: errors if the header or any tensor is incomplete.
    pub fn finish(&self) -> Result<(), GgufError> {
        let seen = self.bytes_seen();
        let Some(header) = &self.header else {
            let field = match &self.stage {
                Stage::Preamble => "header (magic, version, counts)".to_string(),
                Stage::KvKey
                | Stage::KvType { .. }
                | Stage::KvValue { .. }
                | Stage::KvArray { .. } => {
                    format!("metadata entry {} of {}", self.kv_done, self.kv_count)
                }
                _ => format!(
                    "tensor info {} of {}",
                    self.tensors.len(),
                    self.tensor_count
                ),
            };
            return Err(GgufError::Truncated {
                field,
                offset: seen,
                needed: self.need_until.saturating_sub(seen).max(1),
            });
        };
        for (index, t) in header.tensors.iter().enumerate() {
            let got = self.received[index];
            if got < t.n_bytes {
                return Err(GgufError::Truncated {
                    field: format!("tensor `{}` data", t.name),
                    offset: header.data_start + t.offset + got,
                    needed: t.n_bytes - got,
                });
            }
        }
        Ok(())
    }

    fn parse_header(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<(), GgufError> {
        // The buffer is moved out while the state machine (which mutates `self`) reads it.
        let buf = std::mem::take(&mut self.buf);
        let result = self.parse_header_from(&buf, on_event);
        self.buf = buf;
        result
    }

    fn parse_header_from(
        &mut self,
        buf: &[u8],
        on_event: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), GgufError> {
        loop {
            let bytes = &buf[self.start..];
            let mut c = Cursor {
                bytes,
                pos: 0,
                base: self.buf_offset,
            };
            let step = self.step(&mut c)?;
            match step {
                Step::NeedMore(n) => {
                    self.need_until = self.buf_offset + n;
                    return Ok(());
                }
                Step::Done(finished) => {
                    let consumed = c.pos;
                    self.start += consumed;
                    self.buf_offset += consumed as u64;
                    if self.buf_offset > MAX_HEADER_BYTES {
                        return Err(too_large(
                            "header size",
                            self.buf_offset,
                            self.buf_offset,
                            MAX_HEADER_BYTES,
                        ));
                    }
                    if finished {
                        self.finish_header(on_event)?;
                        return Ok(());
                    }
                }
            }
        }
    }

    /// One atomic step of the header state machine. `Done(true)` when the tensor infos are
    /// complete. On `NeedMore` nothing is consumed.
    fn step(&mut self, c: &mut Cursor<'_>) -> Result<Step<bool>, GgufError> {
        match std::mem::replace(&mut self.stage, Stage::Preamble) {
            Stage::Preamble => {
                let Some(magic) = c.take(4) else {
                    return Ok(Step::NeedMore(4));
                };
                if magic != MAGIC {
                    return Err(GgufError::BadMagic {
                        found: [magic[0], magic[1], magic[2], magic[3]],
                    });
                }
                let Some(version) = c.u32() else {
                    return Ok(Step::NeedMore(8));
                };
                if version != 2 && version != 3 {
                    let swapped = version.swap_bytes();
                    return Err(GgufError::Version {
                        version,
                        big_endian: swapped == 2 || swapped == 3,
                    });
                }
                let (Some(tensor_count), Some(kv_count)) = (c.u64(), c.u64()) else {
                    return Ok(Step::NeedMore(24));
                };
                if tensor_count > MAX_TENSORS {
                    return Err(too_large(
                        "header.tensor_count",
                        8,
                        tensor_count,
                        MAX_TENSORS,
                    ));
                }
                if kv_count > MAX_KV {
                    return Err(too_large("header.metadata_kv_count", 16, kv_count, MAX_KV));
                }
                self.version = version;
                self.tensor_count = tensor_count;
                self.kv_count = kv_count;
                self.stage = if kv_count > 0 {
                    Stage::KvKey
                } else {
                    Stage::TensorInfos
                };
            }
            Stage::KvKey => {
                let index = self.kv_done;
                let at = c.offset();
                let key = match read_string(c, &|| format!("metadata[{index}].key"))? {
                    Step::Done(k) => k,
                    Step::NeedMore(n) => {
                        self.stage = Stage::KvKey;
                        return Ok(Step::NeedMore(n));
                    }
                };
                if self.metadata.contains(&key) {
                    return Err(invalid(
                        format!("metadata[{index}].key"),
                        at,
                        format!("duplicate key `{key}`"),
                    ));
                }
                self.stage = Stage::KvType { key };
            }
            Stage::KvType { key } => {
                let Some(value_type) = c.u32() else {
                    self.stage = Stage::KvType { key };
                    return Ok(Step::NeedMore(4));
                };
                self.stage = Stage::KvValue { key, value_type };
            }
            Stage::KvValue { key, value_type } => {
                let at = c.offset();
                if value_type == T_ARRAY {
                    let (Some(elem_type), Some(len)) = (c.u32(), c.u64()) else {
                        self.stage = Stage::KvValue { key, value_type };
                        return Ok(Step::NeedMore(12));
                    };
                    let frame = new_array_frame(&key, at, elem_type, len)?;
                    self.stage = Stage::KvArray {
                        key,
                        stack: vec![frame],
                    };
                } else {
                    let field = || format!("metadata `{key}`");
                    match read_scalar_or_string(c, value_type, &field)? {
                        Step::Done(v) => self.insert_kv(key, v, at)?,
                        Step::NeedMore(n) => {
                            self.stage = Stage::KvValue { key, value_type };
                            return Ok(Step::NeedMore(n));
                        }
                    }
                }
            }
            Stage::KvArray { key, mut stack } => {
                let at = c.offset();
                return match self.array_step(c, &key, &mut stack, at)? {
                    Some(Step::NeedMore(n)) => {
                        self.stage = Stage::KvArray { key, stack };
                        Ok(Step::NeedMore(n))
                    }
                    Some(Step::Done(value)) => {
                        self.insert_kv(key, value, at)?;
                        Ok(Step::Done(false))
                    }
                    None => {
                        self.stage = Stage::KvArray { key, stack };
                        Ok(Step::Done(false))
                    }
                };
            }
            Stage::TensorInfos => {
                if self.tensors.len() as u64 == self.tensor_count {
                    self.stage = Stage::InfosRead;
                    return Ok(Step::Done(true));
                }
                match self.read_tensor_info(c)? {
                    Step::Done(info) => {
                        self.tensors.push(info);
                        self.stage = Stage::TensorInfos;
                    }
                    Step::NeedMore(n) => {
                        self.stage = Stage::TensorInfos;
                        return Ok(Step::NeedMore(n));
                    }
                }
            }
            stage @ (Stage::InfosRead | Stage::Data) => {
                self.stage = stage;
                return Ok(Step::Done(true));
            }
        }
        Ok(Step::Done(false))
    }

    /// Parses one element of the innermost array. Returns the finished top-level array, or
    /// `None` when more elements remain.
    fn array_step(
        &mut self,
        c: &mut Cursor<'_>,
        key: &str,
        stack: &mut Vec<ArrayFrame>,
        at: u64,
    ) -> Result<Option<Step<Value>>, GgufError> {
        let depth = stack.len();
        let Some(top) = stack.last_mut() else {
            return Err(invalid(
                format!("metadata `{key}`"),
                at,
                "empty array stack",
            ));
        };
        if top.remaining == 0 {
            let Some(done) = stack.pop() else {
                return Ok(None);
            };
            let value = Value::Array(done.items);
            match stack.last_mut() {
                Some(parent) => {
                    parent.items.push(value);
                    parent.remaining -= 1;
                    return Ok(None);
                }
                None => return Ok(Some(Step::Done(value))),
            }
        }
        if top.elem_type == T_ARRAY {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(too_large(
                    format!("metadata `{key}` (array nesting)"),
                    at,
                    depth as u64 + 1,
                    MAX_ARRAY_DEPTH as u64,
                ));
            }
            let (Some(elem_type), Some(len)) = (c.u32(), c.u64()) else {
                return Ok(Some(Step::NeedMore(12)));
            };
            let frame = new_array_frame(key, at, elem_type, len)?;
            stack.push(frame);
            return Ok(None);
        }
        let index = top.items.len();
        let field = || format!("metadata `{key}`[{index}]");
        match read_scalar_or_string(c, top.elem_type, &field)? {
            Step::Done(v) => {
                self.account_metadata(&v, at)?;
                top.items.push(v);
                top.remaining -= 1;
                Ok(None)
            }
            Step::NeedMore(n) => Ok(Some(Step::NeedMore(n))),
        }
    }

    /// Decoded metadata is bounded as a whole, so a file can't inflate tiny elements into
    /// gigabytes of `Value`s.
    fn account_metadata(&mut self, v: &Value, at: u64) -> Result<(), GgufError> {
        let size = std::mem::size_of::<Value>() as u64 + v.as_str().map_or(0, |s| s.len() as u64);
        self.metadata_bytes += size;
        if self.metadata_bytes > MAX_HEADER_BYTES {
            return Err(too_large(
                "decoded metadata size",
                at,
                self.metadata_bytes,
                MAX_HEADER_BYTES,
            ));
        }
        Ok(())
    }

    fn insert_kv(&mut self, key: String, value: Value, at: u64) -> Result<(), GgufError> {
        if !matches!(value, Value::Array(_)) {
            self.account_metadata(&value, at)?;
        }
        self.metadata.entries.insert(key, value);
        self.kv_done += 1;
        self.stage = if self.kv_done < self.kv_count {
            Stage::KvKey
        } else {
            Stage::TensorInfos
        };
        Ok(())
    }

    fn read_tensor_info(&mut self, c: &mut Cursor<'_>) -> Result<Step<TensorInfo>, GgufError> {
        let index = self.tensors.len();
        let at = c.offset();
        let name = match read_string(c, &|| format!("tensor[{index}].name"))? {
            Step::Done(n) => n,
            Step::NeedMore(n) => return Ok(Step::NeedMore(n)),
        };
        if self.names.contains(&name) {
            return Err(invalid(
                format!("tensor[{index}].name"),
                at,
                format!("duplicate tensor name `{name}`"),
            ));
        }
        let field = |what: &str| format!("tensor `{name}`.{what}");
        let dims_at = c.offset();
        let Some(n_dims) = c.u32() else {
            return Ok(Step::NeedMore(c.pos as u64 + 4));
        };
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(invalid(
                field("n_dims"),
                dims_at,
                format!("{n_dims} dimensions (allowed: 1..={MAX_DIMS})"),
            ));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        let mut n_elements: u64 = 1;
        for d in 0..n_dims {
            let dim_at = c.offset();
            // Ask only for this dim: asking for the whole rest of the info would defer the
            // checks below, so a truncated file's error would depend on the chunking.
            let Some(dim) = c.u64() else {
                return Ok(Step::NeedMore(c.pos as u64 + 8));
            };
            if dim == 0 {
                return Err(invalid(
                    field(&format!("dims[{d}]")),
                    dim_at,
                    "dimension is 0",
                ));
            }
            n_elements = n_elements
                .checked_mul(dim)
                .filter(|n| *n <= MAX_DATA_BYTES)
                .ok_or_else(|| {
                    too_large(field("dims (element count)"), dim_at, dim, MAX_DATA_BYTES)
                })?;
            dims.push(dim);
        }
        let type_at = c.offset();
        // `c.pos` before the pair: `u32()` may succeed and advance while `u64()` fails.
        let pair_end = c.pos as u64 + 12;
        let (Some(type_id), Some(offset)) = (c.u32(), c.u64()) else {
            return Ok(Step::NeedMore(pair_end));
        };
        let ty = GgmlType::from_id(type_id);
        let Some((block_len, _)) = ty.block_geometry() else {
            return Err(invalid(
                field("type"),
                type_at,
                format!("unknown tensor type id {type_id}"),
            ));
        };
        if dims[0] % block_len as u64 != 0 {
            return Err(invalid(
                field("dims[0]"),
                dims_at + 4,
                format!(
                    "row length {} is not a multiple of the {ty} block size {block_len}",
                    dims[0]
                ),
            ));
        }
        let n_bytes = ty
            .bytes_for(n_elements)
            .filter(|b| *b <= MAX_DATA_BYTES)
            .ok_or_else(|| too_large(field("data size"), dims_at, n_elements, MAX_DATA_BYTES))?;
        if offset > MAX_DATA_BYTES {
            return Err(too_large(
                field("offset"),
                type_at + 4,
                offset,
                MAX_DATA_BYTES,
            ));
        }
        self.names.insert(name.clone());
        Ok(Step::Done(TensorInfo {
            name,
            dims,
            ty,
            offset,
            n_bytes,
        }))
    }

    /// Validates the layout and emits the header.
    fn finish_header(&mut self, on_event: &mut dyn FnMut(Event<'_>)) -> Result<(), GgufError> {
        let alignment = match self.metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(v) => match v.as_u64() {
                Some(a) if a > 0 && a.is_power_of_two() && a <= MAX_ALIGNMENT => a,
                _ => {
                    return Err(invalid(
                        "metadata `general.alignment`",
                        0,
                        format!("{v:?} is not a power of two in 1..={MAX_ALIGNMENT}"),
                    ))
                }
            },
        };
        let infos_end = self.buf_offset;
        let data_start = infos_end.div_ceil(alignment) * alignment;
        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by_key(|&i| self.tensors[i].offset);
        let mut prev_end = 0u64;
        let mut prev_name = "";
        for &i in &order {
            let t = &self.tensors[i];
            if !t.offset.is_multiple_of(alignment) {
                return Err(invalid(
                    format!("tensor `{}`.offset", t.name),
                    data_start + t.offset,
                    format!(
                        "{} is not a multiple of the alignment {alignment}",
                        t.offset
                    ),
                ));
            }
            if t.offset < prev_end {
                return Err(invalid(
                    format!("tensor `{}`.offset", t.name),
                    data_start + t.offset,
                    format!(
                        "data [{}, {}) overlaps tensor `{prev_name}` ending at {prev_end}",
                        t.offset,
                        t.offset + t.n_bytes
                    ),
                ));
            }
            prev_end = t.offset + t.n_bytes;
            prev_name = &t.name;
        }
        let header = Header {
            version: self.version,
            metadata: std::mem::take(&mut self.metadata),
            tensors: std::mem::take(&mut self.tensors),
            alignment,
            data_start,
        };
        if let Some(len) = self.expected_len {
            let end = header.data_end();
            if end > len {
                let last = order
                    .last()
                    .map(|&i| header.tensors[i].name.clone())
                    .unwrap_or_default();
                return Err(invalid(
                    format!("tensor `{last}` data"),
                    end,
                    format!("tensor data ends at byte {end}, past the end of the {len}-byte file"),
                ));
            }
        }
        self.received = vec![0; header.tensors.len()];
        self.order = order;
        self.pos = infos_end;
        on_event(Event::Header(&header));
        self.header = Some(header);
        self.stage = Stage::Data;
        Ok(())
    }

    /// Routes data-phase bytes (starting at absolute offset `self.pos`) to their tensors.
    fn feed_data(&mut self, mut chunk: &[u8], on_event: &mut dyn FnMut(Event<'_>)) {
        let Some(header) = &self.header else { return };
        while !chunk.is_empty() {
            let Some(&index) = self.order.get(self.cursor) else {
                // Past the last tensor: trailing bytes are ignored.
                self.pos += chunk.len() as u64;
                return;
            };
            let t = &header.tensors[index];
            let t_start = header.data_start + t.offset;
            let t_end = t_start + t.n_bytes;
            if self.pos < t_start {
                // Padding before this tensor.
                let skip = (t_start - self.pos).min(chunk.len() as u64) as usize;
                chunk = &chunk[skip..];
                self.pos += skip as u64;
                continue;
            }
            let take = (t_end - self.pos).min(chunk.len() as u64) as usize;
            if take > 0 {
                on_event(Event::TensorBytes {
                    index,
                    offset: self.pos - t_start,
                    bytes: &chunk[..take],
                });
                self.received[index] += take as u64;
                chunk = &chunk[take..];
                self.pos += take as u64;
            }
            if self.pos == t_end {
                on_event(Event::TensorDone { index });
                self.cursor += 1;
            }
        }
        // Zero-byte tensors at the current position complete immediately.
        while let Some(&index) = self.order.get(self.cursor) {
            let t = &header.tensors[index];
            if t.n_bytes == 0 && header.data_start + t.offset <= self.pos {
                on_event(Event::TensorDone { index });
                self.cursor += 1;
            } else {
                break;
            }
        }
    }
}

fn new_array_frame(key: &str, at: u64, elem_type: u32, len: u64) -> Result<ArrayFrame, GgufError> {
    if len > MAX_ARRAY_LEN {
        return Err(too_large(
            format!("metadata `{key}` (array length)"),
            at + 4,
            len,
            MAX_ARRAY_LEN,
        ));
    }
    if elem_type != T_ARRAY && elem_type != T_STRING && scalar_size(elem_type).is_none() {
        return Err(invalid(
            format!("metadata `{key}`"),
            at,
            format!("unknown array element type {elem_type}"),
        ));
    }
    // Capacity is capped: the count is only trusted as elements actually arrive.
    Ok(ArrayFrame {
        elem_type,
        remaining: len,
        items: Vec::with_capacity(len.min(4096) as usize),
    })
}
