//! Elementwise kernels (`shaders/elementwise.wgsl`): the gated activation of the FFN and the
//! residual add. Also the small host-side helpers the kernels of this family share: the
//! binding-length check and the workgroup grid for more than 65,535 workgroups.

use bytemuck::{Pod, Zeroable};

use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

/// The activation applied to the gate in [`glu`].
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Activation {
    /// `x·σ(x)`: llama's and qwen2's `silu`.
    Silu,
    /// `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`: gemma3's `gelu_pytorch_tanh`.
    GeluTanh,
}

/// Invocations per workgroup in elementwise.wgsl.
const WG: u32 = 256;

/// Mirrors `Params` in elementwise.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    _pad: [u32; 3],
}

/// `out[i] = act(gate[i]) · up[i]` for `n` elements.
///
/// - `gate`: `[T, ffn]` f32 (n = T·ffn)
/// - `up`: `[T, ffn]` f32
/// - `out`: `[T, ffn]` f32; may not alias `gate` or `up` (one writable binding per buffer)
pub fn glu(
    rec: &mut StepRecorder,
    gate: &Binding,
    up: &Binding,
    out: &Binding,
    n: u32,
    act: Activation,
) -> Result<(), KernelError> {
    const KERNEL: &str = "elementwise_glu";
    check_len(KERNEL, "gate", gate, n as u64)?;
    check_len(KERNEL, "up", up, n as u64)?;
    check_len(KERNEL, "out", out, n as u64)?;
    let (label, define) = match act {
        Activation::Silu => ("elementwise_glu_silu", "SILU"),
        Activation::GeluTanh => ("elementwise_glu_gelu_tanh", "GELU_TANH"),
    };
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("elementwise.wgsl", &["GLU", define]));
    let params = Params { n, _pad: [0; 3] };
    let bindings = [gate.clone(), up.clone(), out.clone()];
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        grid(n.div_ceil(WG)),
    )?;
    Ok(())
}

/// `a[i] += b[i]` for `n` elements, in place (the residual stream).
///
/// - `a`: `[T, dim]` f32, read and written
/// - `b`: `[T, dim]` f32, a different buffer from `a`
pub fn add(rec: &mut StepRecorder, a: &Binding, b: &Binding, n: u32) -> Result<(), KernelError> {
    const KERNEL: &str = "elementwise_add";
    check_len(KERNEL, "a", a, n as u64)?;
    check_len(KERNEL, "b", b, n as u64)?;
    let label = "elementwise_add";
    let pipeline = rec
        .ctx()
        .pipeline(label, || preprocess("elementwise.wgsl", &["ADD"]));
    let params = Params { n, _pad: [0; 3] };
    let bindings = [a.clone(), b.clone()];
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        grid(n.div_ceil(WG)),
    )?;
    Ok(())
}

/// Bytes a binding covers: its explicit size, or the rest of its buffer.
fn binding_bytes(b: &Binding) -> u64 {
    b.size
        .unwrap_or_else(|| b.buffer.size().saturating_sub(b.offset))
}

/// Fails unless `binding` holds at least `elems` f32 values and they are addressable with
/// the shaders' u32 indices.
pub(crate) fn check_len(
    kernel: &'static str,
    name: &str,
    binding: &Binding,
    elems: u64,
) -> Result<(), KernelError> {
    if elems > u32::MAX as u64 {
        return Err(KernelError::Shape {
            kernel,
            why: format!("`{name}` needs {elems} elements, beyond u32 indexing"),
        });
    }
    let have = binding_bytes(binding);
    if have < elems * 4 {
        return Err(KernelError::Shape {
            kernel,
            why: format!(
                "`{name}` binding holds {have} bytes, needs {elems} f32 = {} bytes",
                elems * 4
            ),
        });
    }
    Ok(())
}

/// A grid of `groups` workgroups that respects the 65,535-per-dimension limit: x is filled
/// first and the rest spills into y. Shaders rebuild the flat index as
/// `wid.y * num_workgroups.x + wid.x` and drop the overshoot of the last y row.
pub(crate) fn grid(groups: u32) -> [u32; 3] {
    const MAX: u32 = 65_535;
    if groups <= MAX {
        [groups, 1, 1]
    } else {
        [MAX, groups.div_ceil(MAX), 1]
    }
}
