//! Weight tensors on the GPU, stored at the file's bits per weight (never dequantized): the
//! raw blocks, or for some types the same bytes re-laid out into aligned planes (`layout`).
//!
//! A tensor larger than the device's storage-binding limit is split by rows into parts, each
//! its own buffer (Gemma's 178 MB `token_embd` exceeds lavapipe's and default WebGPU's 128 MiB).

use crate::gguf::GgmlType;

use super::{layout, GpuContext};

/// A contiguous run of rows of one tensor, in one buffer.
#[derive(Clone, Debug)]
pub struct TensorPart {
    pub buffer: wgpu::Buffer,
    pub first_row: u64,
    pub n_rows: u64,
}

/// A 2-D (or 1-D) weight: `n_rows` rows of `row_len` elements of type `ty`, each part in
/// the layout `super::layout` gives the type.
#[derive(Clone, Debug)]
pub struct GpuTensor {
    pub name: String,
    /// The type the GPU holds and the kernels read.
    pub ty: GgmlType,
    /// The file's type: `ty`, unless the loader widened the tensor ([`GpuTensor::widened_from`]).
    pub file_ty: GgmlType,
    /// Elements per row (GGUF `dims[0]`; the matmul's K).
    pub row_len: u64,
    /// Rows (product of the other dims; the matmul's N).
    pub n_rows: u64,
    pub row_bytes: u64,
    pub parts: Vec<TensorPart>,
}

impl GpuTensor {
    /// Rows per part so that each part's buffer (its bytes rounded up to 16) fits
    /// `max_part_bytes`. A multiple of 4 rows, so part boundaries stay 4-byte aligned for
    /// `write_buffer` whatever the row size.
    pub fn rows_per_part(row_bytes: u64, n_rows: u64, max_part_bytes: u64) -> u64 {
        let fit = ((max_part_bytes & !15) / row_bytes.max(1)).max(1);
        if fit >= n_rows {
            n_rows
        } else {
            (fit & !3).max(4).min(n_rows)
        }
    }

    /// Allocates the (zeroed) part buffers for a tensor of this shape.
    pub fn allocate(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        row_len: u64,
        n_rows: u64,
        max_part_bytes: u64,
    ) -> GpuTensor {
        let row_bytes = ty.bytes_for(row_len).unwrap_or(0);
        let per_part = Self::rows_per_part(row_bytes, n_rows, max_part_bytes);
        let mut parts = Vec::new();
        let mut first_row = 0;
        while first_row < n_rows {
            let rows = per_part.min(n_rows - first_row);
            let label = if parts.is_empty() {
                name.to_string()
            } else {
                format!("{name}#{}", parts.len())
            };
            parts.push(TensorPart {
                // Rounded up to 16 bytes: the shaders bind weights as array<vec4<u32>>.
                buffer: ctx.storage_buffer(&label, (rows * row_bytes).div_ceil(16) * 16),
                first_row,
                n_rows: rows,
            });
            first_row += rows;
        }
        GpuTensor {
            name: name.to_string(),
            ty,
            file_ty: ty,
            row_len,
            n_rows,
            row_bytes,
            parts,
        }
    }

    /// Uploads a whole tensor from memory (tests, small tensors). Streaming loads use
    /// [`GpuTensor::write_at`] instead.
    pub fn from_bytes(
        ctx: &GpuContext,
        name: &str,
        ty: GgmlType,
        row_len: u64,
        n_rows: u64,
        bytes: &[u8],
        max_part_bytes: u64,
    ) -> GpuTensor {
        let t = Self::allocate(ctx, name, ty, row_len, n_rows, max_part_bytes);
        t.write_at(ctx, 0, bytes);
        t
    }

    /// Marks a tensor allocated as `ty` as filled from the file's `file_ty` blocks, which
    /// [`GpuTensor::write_at`] converts exactly (`gguf::widen_blocks`). Panics unless that is a
    /// lossless widening.
    pub fn widened_from(mut self, file_ty: GgmlType) -> GpuTensor {
        assert!(
            crate::gguf::is_lossless_widening(file_ty, self.ty),
            "{file_ty} -> {} is not a lossless widening",
            self.ty
        );
        self.file_ty = file_ty;
        self
    }

    pub fn is_widened(&self) -> bool {
        self.file_ty != self.ty
    }

    /// Writes the file's `bytes` at byte `offset` of the tensor's file bytes, splitting across
    /// parts and re-laying them out for the type (`layout::relay_blocks`), after widening
    /// them where the tensor was widened. `offset` and each piece's length must be multiples
    /// of [`GpuTensor::write_unit`] except at a part's or the tensor's end; a short tail is
    /// zero-padded (callers stream in such pieces, see `engine::loader`).
    pub fn write_at(&self, ctx: &GpuContext, offset: u64, bytes: &[u8]) {
        if self.is_widened() {
            let block = |ty: GgmlType| ty.block_geometry().expect("quantized").1 as u64;
            let (from, to) = (block(self.file_ty), block(self.ty));
            let wide = crate::gguf::widen_blocks(self.file_ty, self.ty, bytes);
            self.write_gpu_bytes(ctx, offset / from * to, &wide);
        } else {
            self.write_gpu_bytes(ctx, offset, bytes);
        }
    }

    /// [`GpuTensor::write_at`] for bytes already of type `ty`, at a byte offset of them.
    fn write_gpu_bytes(&self, ctx: &GpuContext, offset: u64, bytes: &[u8]) {
        let mut offset = offset;
        let mut bytes = bytes;
        let block_bytes = self.ty.block_geometry().map_or(4, |(_, b)| b as u64);
        for part in &self.parts {
            let start = part.first_row * self.row_bytes;
            let end = start + part.n_rows * self.row_bytes;
            if bytes.is_empty() {
                break;
            }
            if offset >= end {
                continue;
            }
            let n = ((end - offset) as usize).min(bytes.len());
            if layout::is_relaid(self.ty) {
                let part_blocks = part.n_rows * self.row_bytes / block_bytes;
                let unit = layout::write_unit(self.ty);
                let piece = layout::RELAY_PIECE_BYTES / unit * unit;
                let mut at = offset - start;
                for chunk in bytes[..n].chunks(piece) {
                    let first_block = at / block_bytes;
                    let writes = layout::relay_blocks(self.ty, part_blocks, first_block, chunk);
                    for w in writes.into_iter().flatten() {
                        ctx.write_padded(&part.buffer, w.offset, &w.bytes);
                    }
                    at += chunk.len() as u64;
                }
            } else {
                ctx.write_padded(&part.buffer, offset - start, &bytes[..n]);
            }
            bytes = &bytes[n..];
            offset += n as u64;
        }
    }

    /// See [`GpuTensor::write_at`]; in file bytes. A widened tensor takes two file blocks,
    /// which widen to two of its blocks: a multiple of `ty`'s own unit.
    pub fn write_unit(&self) -> usize {
        match self.file_ty.block_geometry() {
            Some((_, block)) if self.is_widened() => 2 * block,
            _ => layout::write_unit(self.ty),
        }
    }

    /// The binding of a single-part tensor (norm weights, biases: small f32 vectors).
    pub fn vector(&self) -> super::Binding {
        super::Binding::from(&self.parts[0].buffer)
    }

    /// Bytes on the GPU.
    pub fn total_bytes(&self) -> u64 {
        self.row_bytes * self.n_rows
    }

    /// Bytes in the file: [`GpuTensor::total_bytes`] unless widened.
    pub fn file_bytes(&self) -> u64 {
        self.file_ty.bytes_for(self.row_len).unwrap_or(0) * self.n_rows
    }
}
