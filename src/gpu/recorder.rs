//! Records one step's dispatches and submits them in ONE compute pass (a long prompt step in
//! a few: [`StepRecorder::submit_every`]).
//!
//! Every kernel takes its scalar parameters from a uniform at `@group(0) @binding(0)` and its
//! tensors from storage bindings 1..n. The recorder packs all parameter blocks into one uniform
//! buffer (each at the device's uniform offset alignment; equal blocks once), creates the bind
//! groups and encodes the pass, giving each dispatch its block's offset as the uniform's
//! dynamic offset. So a bind group depends only on the kernel's layout (shared by every kernel
//! that declares the same bindings) and the buffers it binds: a session makes its bind groups
//! in its first prompt step and first decode step (on the gemma3 fixture over 40 tokens 35;
//! keyed by the block's offset, until session 49, 351, and before session 26 866), and a
//! prompt of another length reuses the last one's (BENCHMARKS.md "session 49").
//!
//! On the H200 an extra compute pass costs ~64 µs against ~3.5 µs for a dependent dispatch
//! inside a pass (DEVICE.md), so a whole decode step lives in one pass.
//!
//! [`StepRecorder::submit_timed`] is the profiling mode: GPU times from timestamp queries.
//! WebGPU only has pass-level `timestamp_writes` (timestamps inside a pass are a native-only
//! wgpu feature), so to time each dispatch it gives every dispatch its own pass, which adds a
//! pass's overhead to each: its sum is larger than the real one-pass step, which
//! [`Timing::Step`] measures for comparison.

use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::cache::FxBuild;
use super::{GpuContext, GpuError, Kernel};

/// A storage binding: a whole buffer, or a byte range of one.
#[derive(Clone, Debug)]
pub struct Binding {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    /// `None` = to the end of the buffer.
    pub size: Option<u64>,
}

impl Binding {
    /// Whether both bind the same bytes of the same buffer.
    pub fn same_range(&self, other: &Binding) -> bool {
        self.buffer == other.buffer && self.offset == other.offset && self.size == other.size
    }

    pub fn range(buffer: &wgpu::Buffer, offset: u64, size: u64) -> Binding {
        Binding {
            buffer: buffer.clone(),
            offset,
            size: Some(size),
        }
    }
}

impl From<&wgpu::Buffer> for Binding {
    fn from(buffer: &wgpu::Buffer) -> Binding {
        Binding {
            buffer: buffer.clone(),
            offset: 0,
            size: None,
        }
    }
}

/// The least a dispatch must move and compute: what the profile divides by its time to give
/// GB/s and TFLOP/s (`coco bench --profile`, the page's chart). Counted where the cost is
/// worth a rate: the products (and the tensor-core tiles' scale pass), attention, the KV-cache
/// write and the FFN megakernel; the element-wise kernels record none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// Bytes read and written at least once: weights, activations in, results out.
    pub bytes: u64,
    /// Floating-point (or integer multiply-add) operations, a multiply-add counting two.
    pub flops: u64,
}

impl std::ops::Add for Work {
    type Output = Work;
    fn add(self, o: Work) -> Work {
        Work {
            bytes: self.bytes + o.bytes,
            flops: self.flops + o.flops,
        }
    }
}

struct Dispatch {
    kernel: Arc<Kernel>,
    work: Option<Work>,
    params_offset: u64,
    params_size: u64,
    /// Its storage bindings in the recorder's `bindings`.
    bindings: Range<usize>,
    workgroups: [u32; 3],
}

/// Collects dispatches for one step (a decode token, a prefill chunk, or a test). Recording
/// allocates only as its arrays grow (see `cache.rs` for why that matters).
pub struct StepRecorder<'a> {
    ctx: &'a GpuContext,
    params: Vec<u8>,
    /// The offset in `params` of each distinct (padded) parameter block, by its FxHash.
    blocks: FxHashMap<u64, u64>,
    /// Every dispatch's storage bindings, one after the other.
    bindings: Vec<Binding>,
    dispatches: Vec<Dispatch>,
    /// With [`StepRecorder::submit_every`]: the queued dispatches are submitted each time
    /// there are this many.
    submit_every: Option<usize>,
    /// Dispatches already submitted by `submit_every`.
    submitted: usize,
}

impl<'a> StepRecorder<'a> {
    pub fn new(ctx: &'a GpuContext) -> StepRecorder<'a> {
        StepRecorder {
            ctx,
            params: Vec::new(),
            blocks: FxHashMap::default(),
            bindings: Vec::new(),
            dispatches: Vec::new(),
            submit_every: None,
            submitted: 0,
        }
    }

    /// Submits the queued dispatches each time `n` are queued (the rest at
    /// [`StepRecorder::submit`]), so the GPU starts on a long step's first kernels while the
    /// host still records and encodes the later ones instead of idling through all of it (a
    /// prefill step: ~225 dispatches at ~4 µs of host time each on an H100's host;
    /// `COCO_SUBMIT_EVERY`, off until timed). Each submit is a pass of its own. For steps that
    /// are only submitted: [`StepRecorder::labels`], [`StepRecorder::work`] and
    /// [`StepRecorder::submit_timed`] see only the dispatches not yet submitted.
    pub fn submit_every(&mut self, n: usize) {
        self.submit_every = Some(n.max(1));
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// Queues `kernel` with its parameter block (`params`, a `#[repr(C)]` Pod matching the
    /// WGSL `Params` struct) and storage `bindings` (binding 1, 2, …).
    pub fn dispatch(
        &mut self,
        kernel: &Arc<Kernel>,
        params: &[u8],
        bindings: &[Binding],
        workgroups: [u32; 3],
    ) -> Result<(), GpuError> {
        self.dispatch_counted(kernel, params, bindings, workgroups, None)
    }

    /// [`StepRecorder::dispatch`], with the [`Work`] the dispatch does for the profile.
    pub fn dispatch_counted(
        &mut self,
        kernel: &Arc<Kernel>,
        params: &[u8],
        bindings: &[Binding],
        workgroups: [u32; 3],
        work: Option<Work>,
    ) -> Result<(), GpuError> {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(GpuError::Dispatch {
                label: kernel.label.clone(),
                why: format!("workgroups {workgroups:?} exceed the per-dimension limit {max}"),
            });
        }
        if workgroups.contains(&0) {
            return Ok(()); // nothing to do (an empty shape); not an error
        }
        let params_size = (params.len().max(16) as u64 + 15) & !15;
        let params_offset = self.params_block(params, params_size as usize);
        let first = self.bindings.len();
        self.bindings.extend_from_slice(bindings);
        self.dispatches.push(Dispatch {
            kernel: kernel.clone(),
            work,
            params_offset,
            params_size,
            bindings: first..self.bindings.len(),
            workgroups,
        });
        if self
            .submit_every
            .is_some_and(|n| self.dispatches.len() >= n)
        {
            self.submit_queued();
        }
        Ok(())
    }

    /// Submits the queued dispatches in a pass of their own and empties the recorder.
    fn submit_queued(&mut self) {
        self.encode_and_submit(|_| {});
        self.submitted += self.dispatches.len();
        self.params.clear();
        self.blocks.clear();
        self.bindings.clear();
        self.dispatches.clear();
    }

    /// The offset in `params` of the block `params` zero-padded to `size` bytes: an equal
    /// block's, or a new one's at the device's uniform offset alignment.
    fn params_block(&mut self, params: &[u8], size: usize) -> u64 {
        let hash = FxBuild::default().hash_one(params);
        if let Some(&offset) = self.blocks.get(&hash) {
            let equal = self
                .params
                .get(offset as usize..offset as usize + size)
                .is_some_and(|block| {
                    let (head, padding) = block.split_at(params.len());
                    head == params && padding.iter().all(|&b| b == 0)
                });
            if equal {
                return offset;
            }
        }
        let align = self.ctx.limits.min_uniform_buffer_offset_alignment.max(16) as usize;
        let offset = self.params.len().div_ceil(align) * align;
        self.params.resize(offset, 0);
        self.params.extend_from_slice(params);
        self.params.resize(offset + size, 0);
        // Where two blocks share a hash the newer is the one found (a later equal block of
        // the other is packed again: harmless).
        self.blocks.insert(hash, offset as u64);
        offset as u64
    }

    /// Dispatches recorded: queued, and already submitted by [`StepRecorder::submit_every`].
    pub fn dispatch_count(&self) -> usize {
        self.submitted + self.dispatches.len()
    }

    /// Labels of the queued dispatches, in order (for profiles and dispatch counts).
    pub fn labels(&self) -> Vec<String> {
        self.dispatches
            .iter()
            .map(|d| d.kernel.label.clone())
            .collect()
    }

    /// The [`Work`] each queued dispatch counted, in order (`None` where it counts none).
    pub fn work(&self) -> Vec<Option<Work>> {
        self.dispatches.iter().map(|d| d.work).collect()
    }

    /// The bind group of every dispatch, with the parameter blocks in `params`.
    fn bind_groups(&self, params: &wgpu::Buffer) -> Vec<wgpu::BindGroup> {
        self.ctx.bind_groups(
            params,
            self.dispatches
                .iter()
                .map(|d| (&d.kernel, d.params_size, &self.bindings[d.bindings.clone()])),
        )
    }

    /// Encodes everything in one compute pass, lets `after` append copies, and submits.
    pub fn submit_with(
        self,
        after: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> wgpu::SubmissionIndex {
        self.encode_and_submit(after)
    }

    /// The queued dispatches' pass and `after`'s commands, submitted under `submit_lock`.
    fn encode_and_submit(
        &self,
        after: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> wgpu::SubmissionIndex {
        let ctx = self.ctx;
        let _exclusive = ctx.submit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let commands = self.encode(after);
        ctx.queue.submit([commands])
    }

    pub fn submit(self) -> wgpu::SubmissionIndex {
        self.submit_with(|_| {})
    }

    /// Everything [`StepRecorder::submit`] does on the host except the submit: the parameter
    /// upload, the bind groups and the pass. For measuring the host's cost per dispatch
    /// (examples/step_timing.rs) where a submit would run the work on the same CPU (lavapipe
    /// executes inside `vkQueueSubmit`). Drop the commands unsubmitted: the parameter blocks
    /// they bind are only valid until the next step's are written.
    pub fn encode_unsubmitted(&self) -> wgpu::CommandBuffer {
        let _exclusive = self
            .ctx
            .submit_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.encode(|_| {})
    }

    /// The one-pass command buffer (the caller holds `submit_lock`: the parameter blocks go to
    /// the context's one params buffer, written for the next submit).
    fn encode(&self, after: impl FnOnce(&mut wgpu::CommandEncoder)) -> wgpu::CommandBuffer {
        let ctx = self.ctx;
        let params = ctx.params_buffer(&self.params);
        let bind_groups = self.bind_groups(&params);
        let mut encoder = ctx.command_encoder("step");
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("step"),
                timestamp_writes: None,
            });
            for (d, bg) in self.dispatches.iter().zip(&bind_groups) {
                pass.set_pipeline(&d.kernel.pipeline);
                pass.set_bind_group(0, bg, &[d.params_offset as u32]);
                let [x, y, z] = d.workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
        }
        after(&mut encoder);
        encoder.finish()
    }

    /// Submits the step with timestamp queries and returns the GPU time of each timed span,
    /// in order: one span `"step"` for [`Timing::Step`], or one per dispatch (named by its
    /// pipeline label) for [`Timing::PerDispatch`]. Errors on an adapter without
    /// `TIMESTAMP_QUERY`.
    pub async fn submit_timed(self, timing: Timing) -> Result<Vec<SpanTime>, GpuError> {
        let ctx = self.ctx;
        if !ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(GpuError::Dispatch {
                label: "timestamps".into(),
                why: "not yet on this adapter: no timestamp-query".into(),
            });
        }
        let n = self.dispatches.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let spans: Vec<(&str, std::ops::Range<usize>)> = match timing {
            Timing::Step => vec![("step", 0..n)],
            Timing::PerDispatch => self
                .dispatches
                .iter()
                .enumerate()
                .map(|(i, d)| (d.kernel.label.as_str(), i..i + 1))
                .collect(),
        };
        // A span's work: its dispatches' sum, or none if any of them counts none.
        let work = |range: &std::ops::Range<usize>| -> Option<Work> {
            self.dispatches[range.clone()]
                .iter()
                .try_fold(Work::default(), |sum, d| Some(sum + d.work?))
        };
        // Two queries (begin, end) per span; a query set holds at most QUERY_SET_MAX_QUERIES,
        // so long steps use several, each resolved at its own aligned offset.
        let per_set = (wgpu::QUERY_SET_MAX_QUERIES / 2) as usize;
        let sets: Vec<(wgpu::QuerySet, u32)> = spans
            .chunks(per_set)
            .map(|c| {
                let count = 2 * c.len() as u32;
                let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("timestamps"),
                    ty: wgpu::QueryType::Timestamp,
                    count,
                });
                (set, count)
            })
            .collect();
        let set_bytes = (2 * per_set) as u64 * wgpu::QUERY_SIZE as u64; // a multiple of 256
        let resolved = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: (sets.len() as u64 - 1) * set_bytes
                + sets.last().map_or(0, |s| s.1) as u64 * wgpu::QUERY_SIZE as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        {
            let _exclusive = ctx.submit_lock.lock().unwrap_or_else(|p| p.into_inner());
            let params = ctx.params_buffer(&self.params);
            let bind_groups = self.bind_groups(&params);
            let mut encoder = ctx.command_encoder("timed step");
            for (i, (label, range)) in spans.iter().enumerate() {
                let (set, _) = &sets[i / per_set];
                let q = 2 * (i % per_set) as u32;
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(label),
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: set,
                        beginning_of_pass_write_index: Some(q),
                        end_of_pass_write_index: Some(q + 1),
                    }),
                });
                for (d, bg) in self.dispatches[range.clone()]
                    .iter()
                    .zip(&bind_groups[range.clone()])
                {
                    pass.set_pipeline(&d.kernel.pipeline);
                    pass.set_bind_group(0, bg, &[d.params_offset as u32]);
                    let [x, y, z] = d.workgroups;
                    pass.dispatch_workgroups(x, y, z);
                }
            }
            for (k, (set, count)) in sets.iter().enumerate() {
                encoder.resolve_query_set(set, 0..*count, &resolved, k as u64 * set_bytes);
            }
            ctx.queue.submit([encoder.finish()]);
        }
        let bytes = ctx.read_buffer_async(&resolved, 0, resolved.size()).await?;
        let ticks: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        // Ticks to ns (1.0 on WebGPU; the adapter's period natively).
        let period = ctx.queue.get_timestamp_period() as f64;
        Ok(spans
            .iter()
            .enumerate()
            .map(|(i, (label, range))| {
                let q = (i / per_set) * 2 * per_set + 2 * (i % per_set);
                SpanTime {
                    label: label.to_string(),
                    ns: ticks[q + 1].saturating_sub(ticks[q]) as f64 * period,
                    work: work(range),
                    workgroups: self.dispatches[range.clone()]
                        .iter()
                        .map(|d| d.workgroups.iter().map(|&n| n as u64).product::<u64>())
                        .sum(),
                }
            })
            .collect())
    }
}

/// What [`StepRecorder::submit_timed`] times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    /// The step as it really runs, in one pass, with a timestamp at each end.
    Step,
    /// Each dispatch in its own pass with its own timestamps (a profile; see the module docs).
    PerDispatch,
}

/// The GPU time of one timed span of a step.
#[derive(Clone, Debug, PartialEq)]
pub struct SpanTime {
    /// The dispatch's pipeline label (which names its kernel variant), or `"step"`.
    pub label: String,
    pub ns: f64,
    /// What the span's dispatches counted ([`Work`]); `None` if any of them counts none.
    pub work: Option<Work>,
    /// Workgroups the span's dispatches launch (a grid smaller than the GPU's cores leaves
    /// some idle).
    pub workgroups: u64,
}
