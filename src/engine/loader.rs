//! Streams a GGUF file into GPU buffers: bytes in any chunking (file reads or a `fetch()`
//! stream) → `gguf::Parser` → each tensor written to its buffers as its bytes arrive.
//! The whole file is never held in memory: at most one staging piece per tensor.
//!
//! A file tensor usually becomes one GPU tensor. Phi-3's fused tensors (Q/K/V stacked in
//! `attn_qkv`, gate/up in `ffn_up`) become one GPU tensor per row range instead
//! (`model::fused_pieces`): a row range is a byte range of the stream, so each staged piece
//! of bytes is written into the GPU tensors it overlaps, at the offset within each.

use std::collections::HashMap;
use std::sync::Arc;

use crate::capabilities::{self, Report};
use crate::chat::ChatTemplate;
use crate::gguf::{Event, GgmlType, GgufError, Header, Parser};
use crate::gpu::{GpuContext, GpuTensor};
use crate::model::{
    fused_pieces, widenings, Config, ConfigError, RopeFactors, Weights, ROPE_FACTOR_TENSORS,
};
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

/// One GPU tensor filled from a byte range of a file tensor (the whole of it, or one row
/// range of a fused tensor).
struct Piece {
    /// Where the piece starts in the file tensor's bytes.
    first_byte: u64,
    tensor: GpuTensor,
}

impl Piece {
    fn end_byte(&self) -> u64 {
        self.first_byte + self.tensor.file_bytes()
    }
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
    /// Per file tensor, the GPU tensors its bytes go to, in byte order.
    tensors: Vec<Vec<Piece>>,
    staging: Option<Staging>,
    /// CPU copies of the RoPE factor tensors (`ROPE_FACTOR_TENSORS`): file index, name, bytes.
    rope_factors: Vec<(usize, String, Vec<u8>)>,
    /// Staged bytes per write ([`STAGING_BYTES`]; tests shrink it to cross piece boundaries).
    staging_bytes: usize,
    /// Whether Q/K/V of mixed types are widened to one (`model::widenings`); tests turn it
    /// off to compare.
    widen: bool,
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
            rope_factors: Vec::new(),
            staging_bytes: STAGING_BYTES,
            widen: true,
            tensors_done: 0,
            error: None,
        }
    }

    /// Writes every `bytes` staged bytes instead of 4 MiB: tests use an odd size so that
    /// writes end mid-block and mid-piece (`flush_staging`'s tails), which the small
    /// fixtures' tensors never reach at 4 MiB.
    pub fn with_staging_bytes(mut self, bytes: usize) -> Loader {
        self.staging_bytes = bytes.max(1);
        self
    }

    /// Keeps every tensor at the file's type (the A/B of `model::widenings`).
    pub fn without_widening(mut self) -> Loader {
        self.widen = false;
        self
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
                for (i, _, buf) in &mut self.rope_factors {
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
        let widened: HashMap<String, GgmlType> = match self.widen {
            true => widenings(&config, header, max_part).into_iter().collect(),
            false => HashMap::new(),
        };
        self.tensors = header
            .tensors
            .iter()
            .map(|t| {
                let pieces = fused_pieces(&config, &t.name)
                    .unwrap_or_else(|| vec![(t.name.clone(), t.n_rows())]);
                let mut first_byte = 0;
                pieces
                    .into_iter()
                    .map(|(name, rows)| {
                        let ty = widened.get(&name).copied().unwrap_or(t.ty);
                        let mut tensor =
                            GpuTensor::allocate(&self.ctx, &name, ty, t.row_len(), rows, max_part);
                        if ty != t.ty {
                            tensor = tensor.widened_from(t.ty);
                        }
                        let piece = Piece { first_byte, tensor };
                        first_byte = piece.end_byte();
                        piece
                    })
                    .collect()
            })
            .collect();
        self.rope_factors = header
            .tensors
            .iter()
            .enumerate()
            .filter(|(_, t)| ROPE_FACTOR_TENSORS.contains(&t.name.as_str()))
            .map(|(i, t)| (i, t.name.clone(), Vec::new()))
            .collect();
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
        if staging.bytes.len() >= self.staging_bytes {
            self.flush_staging(false);
        }
    }

    /// Writes the staged bytes into the pieces they overlap; keeps a tail shorter than the
    /// write unit (4 bytes, or two blocks of a re-laid type: `gpu::layout`) of the piece it
    /// falls in, counted from that piece's start, unless `all` (end of tensor). A piece's own
    /// end may take a short tail (`GpuTensor::write_at`).
    fn flush_staging(&mut self, all: bool) {
        let Some(mut staging) = self.staging.take() else {
            return;
        };
        let pieces = self
            .tensors
            .get(staging.index)
            .map_or(&[][..], |p| p.as_slice());
        let len = staging.bytes.len();
        let end = staging.offset + len as u64;
        let tail = pieces
            .iter()
            .find(|p| p.first_byte < end && end < p.end_byte())
            .map_or(0, |p| {
                ((end - p.first_byte) % p.tensor.write_unit() as u64) as usize
            });
        let n = if all { len } else { len - tail };
        let (from, to) = (staging.offset, staging.offset + n as u64);
        for p in pieces {
            let (lo, hi) = (from.max(p.first_byte), to.min(p.end_byte()));
            if lo < hi {
                let bytes = &staging.bytes[(lo - from) as usize..(hi - from) as usize];
                p.tensor.write_at(&self.ctx, lo - p.first_byte, bytes);
            }
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
        let by_name: HashMap<String, GpuTensor> = std::mem::take(&mut self.tensors)
            .into_iter()
            .flatten()
            .map(|p| (p.tensor.name.clone(), p.tensor))
            .collect();
        // What the GPU holds: the file's tensor bytes, plus what widening added.
        let weight_bytes = by_name.values().map(GpuTensor::total_bytes).sum();
        let rope_factors = RopeFactors::from_named(
            std::mem::take(&mut self.rope_factors)
                .into_iter()
                .map(|(_, name, bytes)| {
                    let values = bytes
                        .chunks_exact(4)
                        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .collect();
                    (name, values)
                })
                .collect(),
        );
        let weights = Weights::from_tensors(&config, by_name, rope_factors)?;
        let chat_template = ChatTemplate::from_gguf(&header.metadata, &tokenizer).transpose();
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
