//! RMSNorm over the last dimension (`shaders/norm.wgsl`), one workgroup per row.
//!
//! Three variants share the shader: `y = norm(x)·w`, the in-place `x = norm(x)·w` (gemma3's
//! per-head Q/K norms run on the projection output itself), and `y += norm(x)·w` (gemma3's
//! post-norms add straight into the residual stream, saving an `add` dispatch).

use bytemuck::{Pod, Zeroable};

use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

use super::elementwise::{check_len, grid};

/// What the kernel does with `norm(x)·w`; each is its own binding layout.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum NormStore {
    /// Written to a separate `y`.
    Out,
    /// Written back over `x`.
    InPlace,
    /// Added into `y` (a residual stream).
    AddInto,
}

impl NormStore {
    fn define(self) -> &'static str {
        match self {
            NormStore::Out => "STORE_Y",
            NormStore::InPlace => "IN_PLACE",
            NormStore::AddInto => "ADD_TO_Y",
        }
    }

    fn label(self) -> &'static str {
        match self {
            NormStore::Out => "norm_rms",
            NormStore::InPlace => "norm_rms_in_place",
            NormStore::AddInto => "norm_rms_add",
        }
    }
}

/// Mirrors `Params` in norm.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    rows: u32,
    n: u32,
    eps: f32,
    _pad: u32,
}

/// `y[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w` for `rows` rows of length `n`.
///
/// - `x`: `[rows, n]` f32
/// - `w`: `[n]` f32
/// - `y`: `[rows, n]` f32, must not alias `x` (use [`rms_norm_in_place`])
pub fn rms_norm(
    rec: &mut StepRecorder,
    x: &Binding,
    w: &Binding,
    y: &Binding,
    rows: u32,
    n: u32,
    eps: f32,
) -> Result<(), KernelError> {
    dispatch(
        rec,
        NormStore::Out,
        &[x.clone(), w.clone(), y.clone()],
        rows,
        n,
        eps,
    )
}

/// `x[r, :] = x[r, :] / sqrt(mean(x[r, :]²) + eps) · w`, in place.
///
/// - `x`: `[rows, n]` f32, read and written
/// - `w`: `[n]` f32
pub fn rms_norm_in_place(
    rec: &mut StepRecorder,
    x: &Binding,
    w: &Binding,
    rows: u32,
    n: u32,
    eps: f32,
) -> Result<(), KernelError> {
    dispatch(
        rec,
        NormStore::InPlace,
        &[x.clone(), w.clone()],
        rows,
        n,
        eps,
    )
}

/// `h[r, :] += x[r, :] / sqrt(mean(x[r, :]²) + eps) · w`: a norm feeding the residual stream
/// (gemma3's `post_attention_layernorm` and `post_feedforward_layernorm`).
///
/// - `x`: `[rows, n]` f32
/// - `w`: `[n]` f32
/// - `h`: `[rows, n]` f32, read and written, must not alias `x`
pub fn rms_norm_add(
    rec: &mut StepRecorder,
    x: &Binding,
    w: &Binding,
    h: &Binding,
    rows: u32,
    n: u32,
    eps: f32,
) -> Result<(), KernelError> {
    dispatch(
        rec,
        NormStore::AddInto,
        &[x.clone(), w.clone(), h.clone()],
        rows,
        n,
        eps,
    )
}

fn dispatch(
    rec: &mut StepRecorder,
    store: NormStore,
    bindings: &[Binding],
    rows: u32,
    n: u32,
    eps: f32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "norm";
    if n == 0 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: "row length n is 0".into(),
        });
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("eps {eps} is not a finite value >= 0"),
        });
    }
    let elems = rows as u64 * n as u64;
    check_len(KERNEL, "x", &bindings[0], elems)?;
    check_len(KERNEL, "w", &bindings[1], n as u64)?;
    if let Some(out) = bindings.get(2) {
        let name = if store == NormStore::AddInto {
            "h"
        } else {
            "y"
        };
        check_len(KERNEL, name, out, elems)?;
    }
    let label = store.label();
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("norm.wgsl", &[store.define()]));
    let params = Params {
        rows,
        n,
        eps,
        _pad: 0,
    };
    rec.dispatch(&pipeline, bytemuck::bytes_of(&params), bindings, grid(rows))?;
    Ok(())
}
