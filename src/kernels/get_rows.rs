//! `shaders/get_rows.wgsl`: `out[T, dim] = scale · dequant(table[ids[t], :])`, the embedding
//! lookup, dequantizing the table's rows (any supported type, `gpu::layout`) and handling tables split
//! into parts (one dispatch per part; each writes the tokens whose id falls in its rows).

use crate::gguf::GgmlType;
use crate::gpu::{preprocess, Binding, GpuTensor, StepRecorder};

use super::matmul::{check_binding, check_weight, fold, weight_define};
use super::KernelError;

/// Invocations per workgroup; one invocation per (token, 32-element chunk).
const WG: u32 = 64;

/// One compiled variant of `get_rows.wgsl`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct GetRowsKey {
    /// The table's GGUF type: selects the dequantizer.
    pub ty: GgmlType,
}

impl GetRowsKey {
    /// `get_rows_q8_0`, …
    pub fn label(&self) -> String {
        format!("get_rows_{}", self.ty.name().to_lowercase())
    }
}

/// Must match `Params` in get_rows.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    dim: u32,
    t: u32,
    row0: u32,
    rows: u32,
    n_rows: u32,
    zero_missing: u32,
    scale: f32,
    _pad: u32,
}

/// Records `out[t, :] = scale · table[ids[t], :]` for t < T. An id ≥ the table's rows yields a
/// zero row (ids are not visible to the host, so this is the GPU's answer to a bad id).
pub fn get_rows(
    rec: &mut StepRecorder,
    table: &GpuTensor, // [rows, dim] (gpu::layout)
    ids: &Binding,     // [T] u32
    out: &Binding,     // [T, dim] f32
    t: u32,
    scale: f32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "get_rows";
    check_weight(KERNEL, table, rec.ctx().max_binding_bytes())?;
    if t == 0 {
        return Ok(());
    }
    let dim = table.row_len;
    check_binding(KERNEL, "ids [T]", ids, t as u64)?;
    check_binding(KERNEL, "out [T, dim]", out, t as u64 * dim)?;
    let invocations = t as u64 * (dim / 32);
    let groups = invocations.div_ceil(WG as u64);
    let ctx = rec.ctx();
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    if groups > max as u64 * max as u64 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{t} tokens × {dim} is too large for one dispatch"),
        });
    }
    let [gx, gy] = fold(groups as u32, max);
    let key = GetRowsKey { ty: table.ty };
    let ty = weight_define(key.ty)?;
    let label = key.label();
    let pipeline = ctx.pipeline(&label, || preprocess("get_rows.wgsl", &[ty]));
    for (i, part) in table.parts.iter().enumerate() {
        let params = Params {
            dim: dim as u32,
            t,
            row0: part.first_row as u32,
            rows: part.n_rows as u32,
            n_rows: table.n_rows as u32,
            zero_missing: (i == 0) as u32,
            scale,
            _pad: 0,
        };
        let bindings = [Binding::from(&part.buffer), ids.clone(), out.clone()];
        rec.dispatch(
            &pipeline,
            bytemuck::bytes_of(&params),
            &bindings,
            [gx, gy, 1],
        )?;
    }
    Ok(())
}
