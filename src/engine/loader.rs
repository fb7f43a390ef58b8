//! Streams a GGUF file into GPU buffers: bytes in any chunking (file reads or a `fetch()`
//! stream) → `gguf::Parser` → each tensor written to its buffers as its bytes arrive.
//! The whole file is never held in memory: at most one staging piece per tensor.

use std::collections::HashMap;
use std::sync::Arc;

use crate::capabilities::{self, Report};
use crate::chat::ChatTemplate;
use crate::gguf::{Event, GgmlType, GgufError, Header, Parser};
use crate::gpu::{GpuContext, GpuTensor};
use crate::model::{Config, ConfigError, Weights};
use crate::tokenizer::{Tokenizer, TokenizerError};

use super::Model;

/// Bytes buffered per tensor before a `write_buffer`; bounds the CPU memory of a load.
const STAGING_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("not yet on this GPU: {0}")]
    NotSupported(String),
    /// The file is broken (the capability report's "invalid" rows): not a GPU limitation.
    #[error("{0}")]
    Invalid(String),
    #[error("load incomplete: {0}")]
    Incomplete(String),
    #[error("while uploading the weights: {0}")]
    Gpu(#[from] crate::gpu::GpuError),
}

/// Progress of a streaming load.
#[derive(Clone, Debug, Default)]
pub struct LoadProgress {
    pub bytes_in: u64,
    /// Known once the header is parsed: the end of the last tensor.
    pub bytes_total: Option<u64>,
    pub tensors_done: usize,
    pub tensors_total: usize,
}

struct Staging {
    index: usize,
    /// Tensor byte offset where `bytes` starts (a multiple of the tensor's write unit).
    offset: u64,
    bytes: Vec<u8>,
}

/// A load in progress. Push chunks, then `finish`.
pub struct Loader {
    ctx: Arc<GpuContext>,
    parser: Parser,
    context: u32,
    /// Set once the header is parsed and the capability check passed.
    config: Option<Config>,
    tokenizer: Option<Tokenizer>,
    report: Option<Report>,
    tensors: Vec<Option<GpuTensor>>,
    staging: Option<Staging>,
    rope_freqs: Option<(usize, Vec<u8>)>,
    tensors_done: usize,
    error: Option<LoadError>,
}

impl Loader {
    /// `context`: KV-cache positions the session will use (checked against the limits).
    pub fn new(ctx: &Arc<GpuContext>, context: u32, expected_len: Option<u64>) -> Loader {
        let parser = match expected_len {
            Some(len) => Parser::new().with_expected_len(len),
            None => Parser::new(),
        };
        Loader {
            ctx: ctx.clone(),
            parser,
            context,
            config: None,
            tokenizer: None,
            report: None,
            tensors: Vec::new(),
            staging: None,
            rope_freqs: None,
            tensors_done: 0,
            error: None,
        }
    }

    pub fn header(&self) -> Option<&Header> {
        self.parser.header()
    }

    pub fn report(&self) -> Option<&Report> {
        self.report.as_ref()
    }

    pub fn progress(&self) -> LoadProgress {
        LoadProgress {
            bytes_in: self.parser.bytes_seen(),
            bytes_total: self.parser.header().map(|h| h.data_end()),
            tensors_done: self.tensors_done,
            tensors_total: self.tensors.len(),
        }
    }

    pub fn push(&mut self, chunk: &[u8]) -> Result<(), LoadError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let mut parser = std::mem::take(&mut self.parser);
        let result = parser.push(chunk, &mut |event| {
            if self.error.is_none() {
                if let Err(e) = self.on_event(event) {
                    self.error = Some(e);
                }
            }
        });
        self.parser = parser;
        result?;
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn on_event(&mut self, event: Event<'_>) -> Result<(), LoadError> {
        match event {
            Event::Header(header) => self.on_header(header),
            Event::TensorBytes {
                index,
                offset,
                bytes,
            } => {
                if let Some((i, buf)) = &mut self.rope_freqs {
                    if *i == index {
                        buf.extend_from_slice(bytes);
                    }
                }
                self.stage(index, offset, bytes);
                Ok(())
            }
            Event::TensorDone { index } => {
                self.flush_staging(true);
                let _ = index;
                self.tensors_done += 1;
                Ok(())
            }
        }
    }

    /// Header complete: refuse what can't run (before any weight bytes are used), then
    /// allocate every tensor's buffers.
    fn on_header(&mut self, header: &Header) -> Result<(), LoadError> {
        let report = capabilities::check(header, &self.ctx.adapter_facts(), self.context);
        if let Some(why) = report.invalid() {
            self.report = Some(report);
            return Err(LoadError::Invalid(why));
        }
        if !report.is_ok() {
            let blockers = report.blockers();
            self.report = Some(report);
            return Err(LoadError::NotSupported(blockers));
        }
        let config = Config::from_gguf(header)?;
        let tokenizer = Tokenizer::from_gguf(&header.metadata)?;
        let max_part = self.ctx.max_binding_bytes();
        self.tensors = header
            .tensors
            .iter()
            .map(|t| {
                Some(GpuTensor::allocate(
                    &self.ctx,
                    &t.name,
                    t.ty,
                    t.row_len(),
                    t.n_rows(),
                    max_part,
                ))
            })
            .collect();
        if config.rope_freq_factors {
            if let Some(i) = header
                .tensors
                .iter()
                .position(|t| t.name == "rope_freqs.weight")
            {
                self.rope_freqs = Some((i, Vec::new()));
            }
        }
        self.config = Some(config);
        self.tokenizer = Some(tokenizer);
        self.report = Some(report);
        Ok(())
    }

    /// Buffers tensor bytes so every write is whole units (see `flush_staging`) and large.
    fn stage(&mut self, index: usize, offset: u64, bytes: &[u8]) {
        if self.staging.as_ref().is_some_and(|s| s.index != index) {
            self.flush_staging(true);
        }
        let staging = self.staging.get_or_insert_with(|| Staging {
            index,
            offset,
            bytes: Vec::new(),
        });
        debug_assert_eq!(staging.offset + staging.bytes.len() as u64, offset);
        staging.bytes.extend_from_slice(bytes);
        if staging.bytes.len() >= STAGING_BYTES {
            self.flush_staging(false);
        }
    }

    /// Writes the staged bytes; keeps a tail shorter than the tensor's write unit (4 bytes,
    /// or two blocks of a re-laid type: `gpu::layout`) unless `all` (end of tensor).
    fn flush_staging(&mut self, all: bool) {
        let Some(mut staging) = self.staging.take() else {
            return;
        };
        let tensor = self.tensors.get(staging.index).and_then(|t| t.as_ref());
        let unit = tensor.map_or(4, |t| t.write_unit());
        let len = staging.bytes.len();
        let n = if all { len } else { len - len % unit };
        if let Some(tensor) = tensor {
            tensor.write_at(&self.ctx, staging.offset, &staging.bytes[..n]);
        }
        if !all {
            staging.bytes.drain(..n);
            staging.offset += n as u64;
            self.staging = Some(staging);
        }
    }

    /// Ends the stream: every tensor must be complete. Returns the model and the capability
    /// report its header passed.
    pub fn finish(mut self) -> Result<(Model, Report), LoadError> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.parser.finish()?;
        self.flush_staging(true);
        self.ctx.check_health()?;
        let header = self
            .parser
            .header()
            .ok_or_else(|| LoadError::Incomplete("no header".into()))?;
        let config = self
            .config
            .take()
            .ok_or_else(|| LoadError::Incomplete("no config".into()))?;
        let tokenizer = self
            .tokenizer
            .take()
            .ok_or_else(|| LoadError::Incomplete("no tokenizer".into()))?;
        let mut by_name = HashMap::new();
        for (info, tensor) in header.tensors.iter().zip(self.tensors.iter_mut()) {
            if let Some(t) = tensor.take() {
                by_name.insert(info.name.clone(), t);
            }
        }
        let rope_freq_factors = self.rope_freqs.take().map(|(_, bytes)| {
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        });
        let weights = Weights::from_tensors(&config, by_name, rope_freq_factors)?;
        let chat_template = ChatTemplate::from_gguf(&header.metadata, &tokenizer).transpose();
        let weight_bytes = header.total_tensor_bytes();
        let type_summary = summarize_types(header);
        let report = self
            .report
            .take()
            .ok_or_else(|| LoadError::Incomplete("no capability report".into()))?;
        let model = Model {
            config,
            tokenizer,
            weights,
            weight_bytes,
            type_summary,
            chat_template,
        };
        Ok((model, report))
    }
}

/// "Q4_K×27 Q5_0×81 …": how many tensors of each type.
pub fn summarize_types(header: &Header) -> String {
    let mut counts: std::collections::BTreeMap<GgmlType, usize> = Default::default();
    for t in &header.tensors {
        *counts.entry(t.ty).or_default() += 1;
    }
    counts
        .iter()
        .map(|(t, n)| format!("{t}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Loads a model file natively, reading it in chunks through the same streaming path.
#[cfg(not(target_arch = "wasm32"))]
pub fn load_path(
    ctx: &Arc<GpuContext>,
    path: &std::path::Path,
    context: u32,
) -> Result<Model, LoadError> {
    let mut file = crate::gguf::FileChunks::open(path, 4 << 20)?;
    let mut loader = Loader::new(ctx, context, Some(file.len));
    while let Some(chunk) = file.next_chunk()? {
        loader.push(chunk)?;
    }
    Ok(loader.finish()?.0)
}
