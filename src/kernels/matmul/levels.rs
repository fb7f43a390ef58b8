//! x' as int8 levels written once per step by the kernel that produces it, and read by the
//! chunk matvec that consumes it (`LEVELS_IN`) instead of each of its workgroups quantizing
//! all of x' itself: W_down's from the GLU before it (`EMIT_LEVELS` in
//! `shaders/matmul/matvec_chunk.wgsl`; the Llama-8B shape's W_down went from ~960 to 730 µs
//! per decode step, BENCHMARKS.md "session 28"), W_o's from the attention merge
//! (`EMIT_LEVELS` in `shaders/attention.wgsl`, where `kernels::attention::levels_fit`).

use crate::gpu::{Binding, GpuContext, GpuTensor};

use super::super::elementwise::Activation;
use super::super::KernelError;
use super::{
    can_fuse_glu, check_binding, chosen_key, ffn_levels_enabled, o_levels_enabled, Fusion, XLevels,
};

/// Bytes of x' levels per token and 32-element chunk: planes a0, a1, b0, b1 (16 int8 levels
/// each) and (d_a, d_b, Σx'', 0) as f32 (matvec_chunk.wgsl's XChunk).
pub const LEVELS_CHUNK_BYTES: u64 = 80;
/// The context's x' levels scratch: what the GLU writes and W_down reads, and the attention
/// merge writes and W_o reads, one product at a time.
const LEVELS_SCRATCH_BYTES: u64 = 4 << 20;

/// The scratch that [`super::matmul_glu`]'s and the attention's `levels_out` and
/// [`super::MatmulArgs::x_levels`] share (the context's own: each writer's reader runs right
/// after it, before the next writer).
pub fn levels_scratch(ctx: &GpuContext) -> wgpu::Buffer {
    ctx.shared_scratch("matvec x' levels", LEVELS_SCRATCH_BYTES)
}

/// Whether a step of `t` tokens writes W_down's x' as int8 levels in the GLU's epilogue
/// (`EMIT_LEVELS`) and W_down reads them (`LEVELS_IN`), instead of each of W_down's
/// workgroups quantizing all of x' itself: where both are int8 chunk matvecs, the GLU's
/// workgroups hold whole chunks of outputs (64 slots: [`super::CHUNK_WIDE`]'s widest) without split
/// K, and the scratch holds `t` tokens. `COCO_FFN_LEVELS=0` turns it off (the A/B baseline).
pub fn ffn_levels_fit(
    ctx: &GpuContext,
    w_gate: &GpuTensor,
    w_up: &GpuTensor,
    w_down: &GpuTensor,
    norm: bool,
    act: Activation,
    t: u32,
) -> bool {
    let ffn = w_gate.n_rows;
    let fits = ffn_levels_enabled()
        && can_fuse_glu(w_gate, w_up)
        && w_down.row_len == ffn
        && ffn.is_multiple_of(32)
        && t >= 1
        && t as u64 * (ffn / 32) * LEVELS_CHUNK_BYTES <= LEVELS_SCRATCH_BYTES
        && w_gate.parts.iter().all(|p| p.first_row.is_multiple_of(32));
    if !fits {
        return false;
    }
    let glu = chosen_key(
        ctx,
        w_gate.ty,
        t,
        w_gate.row_len,
        2 * ffn,
        false,
        norm,
        Fusion::Glu(act),
        None,
    )
    .with_levels(XLevels::Emit);
    let down = chosen_key(
        ctx,
        w_down.ty,
        t,
        ffn,
        w_down.n_rows,
        false,
        false,
        Fusion::None,
        None,
    )
    .with_levels(XLevels::Read);
    glu.defines().is_ok() && down.defines().is_ok()
}

/// Whether W_o (`wo`) can read its x' as the int8 levels the attention merge writes on a step
/// of `t` tokens: an int8 chunk matvec whose scratch holds `t` tokens (the attention side is
/// `kernels::attention::levels_fit`). `COCO_O_LEVELS=0` turns it off (the A/B baseline).
pub fn o_levels_fit(ctx: &GpuContext, wo: &GpuTensor, t: u32) -> bool {
    let k = wo.row_len;
    o_levels_enabled()
        && t >= 1
        && k.is_multiple_of(32)
        && t as u64 * (k / 32) * LEVELS_CHUNK_BYTES <= LEVELS_SCRATCH_BYTES
        && chosen_key(
            ctx,
            wo.ty,
            t,
            k,
            wo.n_rows,
            false,
            false,
            Fusion::None,
            None,
        )
        .with_levels(XLevels::Read)
        .defines()
        .is_ok()
}

/// Errors unless `levels` holds `t` tokens' levels of K = `k`.
pub(super) fn check_levels(
    kernel: &'static str,
    what: &str,
    levels: &Binding,
    t: u32,
    k: u64,
) -> Result<(), KernelError> {
    let need = t as u64 * (k / 32) * LEVELS_CHUNK_BYTES;
    check_binding(kernel, what, levels, need / 4)
}
