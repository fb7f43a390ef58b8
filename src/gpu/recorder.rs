//! Records one step's dispatches and submits them in ONE compute pass.
//!
//! Every kernel takes its scalar parameters from a uniform at `@group(0) @binding(0)` and its
//! tensors from storage bindings 1..n. The recorder packs all parameter blocks into one uniform
//! buffer (each at the device's uniform offset alignment), creates the bind groups and encodes
//! the pass. On the H200 an extra compute pass costs ~64 µs against ~3.5 µs for a dependent
//! dispatch inside a pass (DEVICE.md), so a whole decode step lives in one pass.

use std::sync::Arc;

use super::context::BindGroupKey;
use super::{GpuContext, GpuError};

/// A storage binding: a whole buffer, or a byte range of one.
#[derive(Clone, Debug)]
pub struct Binding {
    pub buffer: wgpu::Buffer,
    pub offset: u64,
    /// `None` = to the end of the buffer.
    pub size: Option<u64>,
}

impl Binding {
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

struct Dispatch {
    pipeline: Arc<wgpu::ComputePipeline>,
    label: String,
    params_offset: u64,
    params_size: u64,
    bindings: Vec<Binding>,
    workgroups: [u32; 3],
}

/// Collects dispatches for one step (a decode token, a prefill chunk, or a test).
pub struct StepRecorder<'a> {
    ctx: &'a GpuContext,
    params: Vec<u8>,
    dispatches: Vec<Dispatch>,
}

impl<'a> StepRecorder<'a> {
    pub fn new(ctx: &'a GpuContext) -> StepRecorder<'a> {
        StepRecorder {
            ctx,
            params: Vec::new(),
            dispatches: Vec::new(),
        }
    }

    pub fn ctx(&self) -> &'a GpuContext {
        self.ctx
    }

    /// Queues `pipeline` with its parameter block (`params`, a `#[repr(C)]` Pod matching the
    /// WGSL `Params` struct) and storage `bindings` (binding 1, 2, …).
    pub fn dispatch(
        &mut self,
        label: &str,
        pipeline: &Arc<wgpu::ComputePipeline>,
        params: &[u8],
        bindings: &[Binding],
        workgroups: [u32; 3],
    ) -> Result<(), GpuError> {
        let max = self.ctx.limits.max_compute_workgroups_per_dimension;
        if workgroups.iter().any(|&w| w > max) {
            return Err(GpuError::Dispatch {
                label: label.to_string(),
                why: format!("workgroups {workgroups:?} exceed the per-dimension limit {max}"),
            });
        }
        if workgroups.contains(&0) {
            return Ok(()); // nothing to do (an empty shape); not an error
        }
        let align = self.ctx.limits.min_uniform_buffer_offset_alignment.max(16) as usize;
        let params_offset = self.params.len().div_ceil(align) * align;
        self.params.resize(params_offset, 0);
        self.params.extend_from_slice(params);
        let params_size = (params.len().max(16) as u64 + 15) & !15;
        self.params.resize(params_offset + params_size as usize, 0);
        self.dispatches.push(Dispatch {
            pipeline: pipeline.clone(),
            label: label.to_string(),
            params_offset: params_offset as u64,
            params_size,
            bindings: bindings.to_vec(),
            workgroups,
        });
        Ok(())
    }

    pub fn dispatch_count(&self) -> usize {
        self.dispatches.len()
    }

    /// Labels of the queued dispatches, in order (for profiles and dispatch counts).
    pub fn labels(&self) -> Vec<String> {
        self.dispatches.iter().map(|d| d.label.clone()).collect()
    }

    /// Encodes everything in one compute pass, lets `after` append copies, and submits.
    pub fn submit_with(
        self,
        after: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> wgpu::SubmissionIndex {
        let ctx = self.ctx;
        let _exclusive = ctx.submit_lock.lock().unwrap_or_else(|p| p.into_inner());
        let params = ctx.params_buffer(&self.params);
        let bind_groups: Vec<wgpu::BindGroup> = self
            .dispatches
            .iter()
            .map(|d| {
                let mut entries = vec![wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &params,
                        offset: d.params_offset,
                        size: wgpu::BufferSize::new(d.params_size),
                    }),
                }];
                for (i, b) in d.bindings.iter().enumerate() {
                    entries.push(wgpu::BindGroupEntry {
                        binding: i as u32 + 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &b.buffer,
                            offset: b.offset,
                            size: b.size.and_then(wgpu::BufferSize::new),
                        }),
                    });
                }
                let key = BindGroupKey {
                    pipeline: (*d.pipeline).clone(),
                    params: (d.params_offset, d.params_size),
                    storage: d
                        .bindings
                        .iter()
                        .map(|b| (b.buffer.clone(), b.offset, b.size))
                        .collect(),
                };
                ctx.bind_group(key, &d.label, &entries)
            })
            .collect();
        let mut encoder = ctx.command_encoder("step");
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("step"),
                timestamp_writes: None,
            });
            for (d, bg) in self.dispatches.iter().zip(&bind_groups) {
                pass.set_pipeline(&d.pipeline);
                pass.set_bind_group(0, bg, &[]);
                let [x, y, z] = d.workgroups;
                pass.dispatch_workgroups(x, y, z);
            }
        }
        after(&mut encoder);
        ctx.queue.submit([encoder.finish()])
    }

    pub fn submit(self) -> wgpu::SubmissionIndex {
        self.submit_with(|_| {})
    }
}
