//! `shaders/argmax.wgsl`: greedy sampling on the GPU. The winning id of a `[n]` logits row
//! goes into `ids[0]` (which the next decode step's embedding lookup reads, so the token never
//! leaves the GPU) and into `generated[slot]` (the ring the host reads back once per K steps).
//! Same answer as [`crate::sampler::argmax`] bit for bit, NaN and ties included (see the
//! shader's header).
//!
//! Two dispatches: `argmax_partial` (up to [`MAX_GROUPS`] workgroups, each reducing a chunk to
//! a (key, index) pair) and `argmax_finish` (one workgroup over those pairs). Both use
//! workgroup memory only, so the browser runs the same code.

use bytemuck::{Pod, Zeroable};

use super::elementwise::check_len;
use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};

/// Workgroups of the partial stage at most: one per partial, and the finish stage's 256
/// invocations reduce them in one tree.
pub const MAX_GROUPS: u32 = 256;
/// Logits per invocation in the partial stage before another workgroup is added: 262,144
/// logits (Gemma 3) use all 256 groups, 4 logits per invocation.
const PER_INVOCATION: u32 = 4;
const WG: u32 = 256;

/// u32 words of the partials buffer: a (key, index) pair per partial-stage workgroup.
pub const PARTIALS_WORDS: u64 = 2 * MAX_GROUPS as u64;

/// The two stages of argmax.wgsl.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ArgmaxStage {
    /// Many workgroups, each reducing a chunk of the row.
    Partial,
    /// One workgroup reducing the partials and writing the id (different bindings: a define).
    Finish,
}

impl ArgmaxStage {
    /// `argmax_partial` / `argmax_finish`.
    pub fn label(self) -> &'static str {
        match self {
            ArgmaxStage::Partial => "argmax_partial",
            ArgmaxStage::Finish => "argmax_finish",
        }
    }
    fn defines(self) -> &'static [&'static str] {
        match self {
            ArgmaxStage::Partial => &[],
            ArgmaxStage::Finish => &["FINISH"],
        }
    }
}

/// Mirrors `Params` in argmax.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    chunk: u32,
    groups: u32,
    slot: u32,
}

/// Partial-stage workgroups and the logits each reduces, for a row of `n`.
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
    for stage in [ArgmaxStage::Partial, ArgmaxStage::Finish] {
        let label = stage.label();
        let pipeline = rec
            .ctx()
            .pipeline(label, || preprocess("argmax.wgsl", stage.defines()));
        let (bindings, workgroups) = match stage {
            ArgmaxStage::Partial => (vec![logits.clone(), partials.clone()], groups),
            ArgmaxStage::Finish => (
                vec![
                    partials.clone(),
                    logits.clone(),
                    ids.clone(),
                    generated.clone(),
                ],
                1,
            ),
        };
        rec.dispatch(
            label,
            &pipeline,
            bytemuck::bytes_of(&params),
            &bindings,
            [workgroups, 1, 1],
        )?;
    }
    Ok(())
}
