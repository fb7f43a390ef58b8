//! `shaders/argmax.wgsl`: greedy sampling on the GPU. The winning id of a `[n]` logits row
//! goes into `ids[0]` (which the next decode step's embedding lookup reads, so the token never
//! leaves the GPU) and into `generated[slot]` (the ring the host reads back once per K steps).
//! Same answer as [`crate::sampler::argmax`] bit for bit, NaN and ties included (see the
//! shader's header).
//!
//! One dispatch: up to [`MAX_GROUPS`] workgroups each reduce a chunk to a (key, index) pair,
//! and the last of them to finish reduces the pairs (an arrival counter in the partials
//! buffer). Workgroup memory only, so the browser runs the same code.

use bytemuck::{Pod, Zeroable};

use super::elementwise::check_len;
use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

/// Workgroups at most: one per (key, index) pair, and the last workgroup's 256 invocations
/// reduce the pairs in one tree.
pub const MAX_GROUPS: u32 = 256;
/// Logits per invocation before another workgroup is added: 262,144
/// logits (Gemma 3) use all 256 groups, 4 logits per invocation.
const PER_INVOCATION: u32 = 4;
const WG: u32 = 256;

/// u32 words of the partials buffer: the arrival counter, then a (key, index) pair per
/// workgroup.
pub const PARTIALS_WORDS: u64 = 1 + 2 * MAX_GROUPS as u64;

/// The kernel's label (profiles and dispatch lists).
pub const LABEL: &str = "argmax";

/// Mirrors `Params` in argmax.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    chunk: u32,
    groups: u32,
    slot: u32,
}

/// Workgroups and the logits each reduces, for a row of `n`.
pub fn split(n: u32) -> (u32, u32) {
    let groups = n.div_ceil(WG * PER_INVOCATION).clamp(1, MAX_GROUPS);
    (groups, n.div_ceil(groups).max(1))
}

/// Records `id = argmax(logits)`; writes `ids[0] = id` and `generated[slot] = id`.
///
/// - `logits`: `[n]` f32
/// - `partials`: `[PARTIALS_WORDS]` u32 scratch
/// - `ids`: `[≥ 1]` u32, the next step's token
/// - `generated`: `[> slot]` u32
pub fn argmax(
    rec: &mut StepRecorder,
    logits: &Binding,
    n: u32,
    partials: &Binding,
    ids: &Binding,
    generated: &Binding,
    slot: u32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "argmax";
    if n == 0 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: "an empty logits row has no argmax".into(),
        });
    }
    check_len(KERNEL, "logits", logits, n as u64)?;
    check_len(KERNEL, "partials", partials, PARTIALS_WORDS)?;
    check_len(KERNEL, "ids", ids, 1)?;
    check_len(KERNEL, "generated", generated, slot as u64 + 1)?;
    let (groups, chunk) = split(n);
    let params = Params {
        n,
        chunk,
        groups,
        slot,
    };
    let pipeline = rec.ctx().pipeline(LABEL, || preprocess("argmax.wgsl", &[]));
    rec.dispatch(
        &pipeline,
        bytemuck::bytes_of(&params),
        &[
            logits.clone(),
            partials.clone(),
            ids.clone(),
            generated.clone(),
        ],
        [groups, 1, 1],
    )?;
    Ok(())
}
