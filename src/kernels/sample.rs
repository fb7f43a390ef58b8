//! `shaders/sample.wgsl`: the sampling chain on the GPU (penalty → top-k → top-p → min-p →
//! temperature → draw), for a `[n]` logits row, the same function as
//! [`crate::reference::sample`] (see its header for the definition and the shader's for
//! the stages). The drawn id goes where `kernels::argmax` puts the greedy one: `ids[0]` for
//! the next step's embedding lookup and `generated[slot]` for the readback ring; it also
//! goes into the penalty's ring of recent ids at `position`.
//!
//! Dispatches per draw: three histogram levels (the first also applies the repetition
//! penalty when one is set) and the compaction (up to [`MAX_GROUPS`] workgroups each), and
//! the finish (1 workgroup): 5, against greedy's 2. The histograms are counts in global memory that
//! the finish zeroes, so the buffers must start zeroed (`GpuContext::storage_buffer` does).

use bytemuck::{Pod, Zeroable};

use super::elementwise::check_len;
use super::KernelError;
use crate::gpu::{preprocess, Binding, StepRecorder};
use crate::sampler::{Derived, MAX_CANDIDATES, MAX_RECENT};

/// Workgroups of the histogram and compaction stages at most.
pub const MAX_GROUPS: u32 = 256;
/// Logits per invocation before another workgroup is added. On a GPU, 4 (262,144 logits:
/// 256 workgroups, enough loads in flight to fill the chip). On a CPU adapter (lavapipe,
/// SwiftShader) every workgroup pays the scans that find the cut and each barrier switches
/// all its invocations' fibers, so fewer, longer workgroups win: measured on lavapipe at
/// 262,144 logits, one draw took 74 ms with 256 workgroups, 10.6 with 64, 7.3 with 32 and
/// 6.7 with 16 (argmax: 3.9–8 ms); 32 keeps both cores busy at a 32,000 vocabulary.
const PER_INVOCATION_GPU: u32 = 4;
const PER_INVOCATION_CPU: u32 = 32;
const WG: u32 = 256;

/// u32 words of the `counts` buffer: three histogram levels (2,048 + 2,048 + 1,024 bins),
/// four counters and the published cut (sample.wgsl's `COUNT_WORDS`).
pub const COUNT_WORDS: u64 = 5132;
/// (key, id) pairs of the `cands` buffer: the keys above the cut, then the offered ties.
pub const CAND_PAIRS: u64 = 2 * MAX_CANDIDATES as u64;

/// The stages of sample.wgsl, one define each (their bindings differ).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum SampleStage {
    Histogram,
    /// Level 0 of the histogram with the repetition penalty applied first.
    PenalizeHistogram,
    Compact,
    Finish,
}

impl SampleStage {
    /// `sample_histogram`, `sample_histogram_penalize`, `sample_compact`, `sample_finish`;
    /// with `_serial` for the CPU adapters' serial scans (SERIAL_SCAN).
    pub fn label(self, serial: bool) -> &'static str {
        match (self, serial) {
            (SampleStage::Histogram, false) => "sample_histogram",
            (SampleStage::PenalizeHistogram, false) => "sample_histogram_penalize",
            (SampleStage::PenalizeHistogram, true) => "sample_histogram_penalize_serial",
            (SampleStage::Histogram, true) => "sample_histogram_serial",
            (SampleStage::Compact, false) => "sample_compact",
            (SampleStage::Compact, true) => "sample_compact_serial",
            (SampleStage::Finish, false) => "sample_finish",
            (SampleStage::Finish, true) => "sample_finish_serial",
        }
    }
    fn defines(self) -> &'static [&'static str] {
        match self {
            SampleStage::Histogram => &["HISTOGRAM"],
            SampleStage::PenalizeHistogram => &["HISTOGRAM", "PENALIZE"],
            SampleStage::Compact => &["COMPACT"],
            SampleStage::Finish => &["FINISH"],
        }
    }
}

/// Mirrors `Params` in sample.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    n: u32,
    chunk: u32,
    groups: u32,
    level: u32,
    candidates: u32,
    top_p: f32,
    top_p_on: u32,
    min_p_log: f32,
    min_p_on: u32,
    inv_temperature: f32,
    penalty: f32,
    inv_penalty: f32,
    recent: u32,
    position: u32,
    seed_lo: u32,
    seed_hi: u32,
    slot: u32,
    pad: [u32; 3],
}

/// The sampler's own GPU state, allocated once per session.
pub struct SampleBuffers<'a> {
    /// `[COUNT_WORDS]` u32, zero between draws.
    pub counts: &'a Binding,
    /// `[CAND_PAIRS]` (key, id).
    pub cands: &'a Binding,
    /// `[MAX_RECENT]` u32: the id at position `p` lives in slot `p % MAX_RECENT`.
    pub recent: &'a Binding,
}

/// Workgroups of the wide stages and the logits each reads, for a row of `n` on a CPU
/// adapter (`cpu`) or a GPU.
pub fn split(n: u32, cpu: bool) -> (u32, u32) {
    let per = if cpu {
        PER_INVOCATION_CPU
    } else {
        PER_INVOCATION_GPU
    };
    let groups = n.div_ceil(WG * per).clamp(1, MAX_GROUPS);
    (groups, n.div_ceil(groups).max(1))
}

/// Records the draw of the token at `position` from `logits` (penalized in place when a
/// penalty is set); writes `ids[0]`, `generated[slot]` and the recent-ids ring.
///
/// - `logits`: `[n]` f32, the model's last-position row
/// - `ids`: `[≥ 1]` u32; `generated`: `[> slot]` u32
#[allow(clippy::too_many_arguments)]
pub fn sample(
    rec: &mut StepRecorder,
    logits: &Binding,
    n: u32,
    settings: &Derived,
    position: u32,
    state: &SampleBuffers,
    ids: &Binding,
    generated: &Binding,
    slot: u32,
) -> Result<(), KernelError> {
    const KERNEL: &str = "sample";
    let shape = |why: String| KernelError::Shape {
        kernel: KERNEL,
        why,
    };
    if n == 0 {
        return Err(shape("an empty logits row has nothing to draw".into()));
    }
    if settings.candidates == 0 || settings.candidates > MAX_CANDIDATES {
        return Err(shape(format!(
            "{} candidates: 1..={MAX_CANDIDATES} are supported",
            settings.candidates
        )));
    }
    let recent = settings.recent.min(position);
    if recent > MAX_RECENT {
        return Err(shape(format!(
            "the penalty looks back over {recent} ids; the ring holds {MAX_RECENT}"
        )));
    }
    check_len(KERNEL, "logits", logits, n as u64)?;
    check_len(KERNEL, "counts", state.counts, COUNT_WORDS)?;
    check_len(KERNEL, "cands", state.cands, 2 * CAND_PAIRS)?;
    check_len(KERNEL, "recent", state.recent, MAX_RECENT as u64)?;
    check_len(KERNEL, "ids", ids, 1)?;
    check_len(KERNEL, "generated", generated, slot as u64 + 1)?;
    let cpu = rec.ctx().info.device_type == wgpu::DeviceType::Cpu;
    let (groups, chunk) = split(n, cpu);
    let mut params = Params {
        n,
        chunk,
        groups,
        level: 0,
        candidates: settings.candidates,
        top_p: settings.top_p.unwrap_or(1.0),
        top_p_on: settings.top_p.is_some() as u32,
        min_p_log: settings.min_p_log.unwrap_or(0.0),
        min_p_on: settings.min_p_log.is_some() as u32,
        inv_temperature: settings.inv_temperature,
        penalty: settings.penalty,
        inv_penalty: settings.inv_penalty,
        recent,
        position,
        seed_lo: settings.seed as u32,
        seed_hi: (settings.seed >> 32) as u32,
        slot,
        pad: [0; 3],
    };
    let mut stage = |stage: SampleStage,
                     params: &Params,
                     bindings: &[Binding],
                     workgroups: u32|
     -> Result<(), KernelError> {
        let label = stage.label(cpu);
        let pipeline = rec.ctx().pipeline(label, || {
            let mut defines = stage.defines().to_vec();
            if cpu {
                defines.push("SERIAL_SCAN");
            }
            preprocess("sample.wgsl", &defines)
        });
        rec.dispatch(
            &pipeline,
            bytemuck::bytes_of(params),
            bindings,
            [workgroups, 1, 1],
        )?;
        Ok(())
    };
    let wide = [logits.clone(), state.counts.clone()];
    if recent > 0 {
        let bindings = [logits.clone(), state.counts.clone(), state.recent.clone()];
        stage(SampleStage::PenalizeHistogram, &params, &bindings, groups)?;
    } else {
        stage(SampleStage::Histogram, &params, &wide, groups)?;
    }
    for level in 1..3 {
        params.level = level;
        stage(SampleStage::Histogram, &params, &wide, groups)?;
    }
    let bindings = [logits.clone(), state.counts.clone(), state.cands.clone()];
    stage(SampleStage::Compact, &params, &bindings, groups)?;
    let bindings = [
        logits.clone(),
        state.counts.clone(),
        state.cands.clone(),
        state.recent.clone(),
        ids.clone(),
        generated.clone(),
    ];
    stage(SampleStage::Finish, &params, &bindings, 1)
}
