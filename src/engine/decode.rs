//! The GPU-resident greedy decode loop (issue 5, point 2).
//!
//! Each decode step records the forward pass of one token and `kernels::argmax`, which writes
//! the winning id into `scratch.ids[0]` — the slot the next step's embedding lookup reads —
//! and into the ring `scratch.generated`. K steps are recorded into ONE compute pass (the
//! `StepRecorder` packs every dispatch's parameters, so step i simply carries `pos0 + i`) and
//! one submit, whose command buffer ends with a 4·K-byte copy of the ring to a mapped buffer.
//! K is 1 for the first batch, then doubles up to [`MAX_STEPS`], capped by the steps still
//! wanted and the context left.
//!
//! While the host waits for batch B, batch B + 1 is already recorded and queued behind it
//! (its first token is B's last argmax, on the GPU), so the host's recording and the readback
//! round trip overlap GPU work. After B's ids come back the host walks them exactly as the
//! one-token CPU loop in `Session::generate` would — stop tokens, `on_token` returning false,
//! `max_new`, a full context — and stops there. What ran past the stop is discarded: `pos`
//! and `cached_tokens` only count the steps the CPU loop would have run, and the KV rows the
//! speculative steps wrote lie past `pos`, where the next prefill or step overwrites them.
//! The cost of a stop is at most two batches of wasted GPU work, queued ahead of the next call.
//!
//! Expected gain per token (H200, Llama-3.2-1B shape Q4_0 at position 512: 2.18 ms GPU,
//! 3.49 ms wall on the CPU-sampling path): no 513 KB (Gemma 3: 1 MB) logits copy and map, no
//! CPU argmax over 128,256 (262,144) floats, no submit → wait round trip (~110 µs, now paid
//! once per K tokens and hidden behind the next batch), and the host records step N + 1 while
//! the GPU runs step N. The argmax adds 2 dependent dispatches (~7 µs). With recording hidden,
//! the wall time per token should approach the GPU time (~2.2 ms) plus argmax, unless
//! recording itself (`Stats::record_seconds` / tokens) exceeds the GPU time per step.
//! Measured on lavapipe natively (2 shared cores, lavapipe's own threads competing), bind
//! groups cached, K = 16: `model::forward` recording ~0.5 µs per dispatch, and bind groups +
//! pass encoding + submit ~2 µs per dispatch, so ~2.5 µs per dispatch in all (K = 1: 5–10 µs,
//! the per-submit overhead spread over fewer dispatches). A 148-dispatch step (Llama-3.2-1B
//! shape, argmax included) therefore takes ~0.4 ms of host time: below the 2.2 ms GPU step,
//! and hidden behind the batch in flight, so the GPU, not recording, should bound the H200.

use std::collections::VecDeque;

use crate::gpu::{Binding, StepRecorder};
use crate::kernels::argmax::argmax;
use crate::model;

use super::{rows_of, EngineError, LogitsFor, Session, StopReason};

/// Largest K (decode steps per submit). 16 keeps the waste after a stop small while the
/// round trip (~110 µs on the H200) is already < 5% of 16 steps.
pub const MAX_STEPS: u32 = 16;

/// A submitted batch whose ids are not yet read.
struct InFlight {
    k: u32,
    /// Which half of the ring (and which readback buffer) it uses.
    half: usize,
    index: wgpu::SubmissionIndex,
}

impl Session {
    /// Whether `generate` may decode on the GPU with this sampler: greedy (`temperature <= 0`,
    /// which `Sampler::sample` turns into the plain argmax) with the repetition penalty off
    /// (`Sampler` ignores it when greedy, but a penalty set means the caller asked for it;
    /// the CPU path keeps that request visible), and the session's `gpu_decode` switch on.
    pub fn can_decode_on_gpu(&self, sampler: &crate::sampler::Sampler) -> bool {
        let c = &sampler.config;
        self.gpu_decode && c.temperature <= 0.0 && c.repeat_penalty == 1.0
    }

    /// The greedy loop after the prefill: `first` is the argmax of the prefill's last logits.
    /// Pushes the emitted tokens onto `out` and returns why it stopped; `pos`,
    /// `cached_tokens` and `stats.generated_tokens` end exactly where the one-token loop
    /// leaves them. `stop_ids` are the end-of-generation ids (not passed on).
    pub(crate) async fn greedy_on_gpu(
        &mut self,
        first: u32,
        max_new: u32,
        stop_ids: &[u32],
        on_token: &mut dyn FnMut(u32) -> bool,
        out: &mut Vec<u32>,
    ) -> Result<StopReason, EngineError> {
        self.stats.gpu_greedy = true;
        let context = self.kv.context;
        let mut next = first;
        // Ids the GPU computed that the loop hasn't consumed yet, in order.
        let mut ready: VecDeque<u32> = VecDeque::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        // The position the next batch starts at: self.pos + steps already submitted.
        let mut planned = self.pos;
        let mut k_next = 1;
        let mut half = 0;
        for step in 0..max_new {
            let id = next;
            if stop_ids.contains(&id) {
                return Ok(StopReason::Eos);
            }
            out.push(id);
            if !on_token(id) {
                return Ok(StopReason::Stopped);
            }
            if step + 1 == max_new {
                return Ok(StopReason::MaxTokens);
            }
            if self.pos >= context {
                return Ok(StopReason::ContextFull);
            }
            // The forward of `id` at self.pos: already computed, or submit and wait.
            if ready.is_empty() {
                // Forwards the one-token loop would still run from here, if nothing stops it.
                let wanted = (max_new - 1 - step).min(context - self.pos);
                if in_flight.is_empty() {
                    // Nothing queued: start from `id`, written where the embedding reads it.
                    debug_assert_eq!(planned, self.pos);
                    self.ctx
                        .queue
                        .write_buffer(&self.scratch.ids, 0, bytemuck::bytes_of(&id));
                    let k = k_next.min(wanted);
                    in_flight.push_back(self.submit_greedy(planned, k, half)?);
                    planned += k;
                    half ^= 1;
                    k_next = (k_next * 2).min(MAX_STEPS);
                }
                // One more batch queued behind the one we wait for, continuing from its last
                // id on the GPU, so the GPU has work while the host reads and records.
                let covered = planned - self.pos;
                if in_flight.len() < 2 && wanted > covered {
                    let k = k_next.min(wanted - covered);
                    in_flight.push_back(self.submit_greedy(planned, k, half)?);
                    planned += k;
                    half ^= 1;
                    k_next = (k_next * 2).min(MAX_STEPS);
                }
                let batch = in_flight
                    .pop_front()
                    .expect("a batch was just submitted or was in flight");
                ready.extend(self.read_greedy(batch).await?);
            }
            self.pos += 1;
            self.cached_tokens.push(id);
            self.stats.generated_tokens += 1;
            next = ready.pop_front().expect("ready holds the next id");
        }
        Ok(StopReason::MaxTokens)
    }

    /// Records `k` decode steps at positions `pos0..pos0 + k` (step 0 reads `ids[0]`; each
    /// step's argmax writes the next one there and into ring slot `half · MAX_STEPS + i`) in
    /// one pass, copies the ring half to its readback buffer, and submits.
    fn submit_greedy(&mut self, pos0: u32, k: u32, half: usize) -> Result<InFlight, EngineError> {
        let clock = crate::util::Clock::start();
        let readback = self.readback(half);
        let c = &self.model.config;
        let s = &self.scratch;
        let mut rec = StepRecorder::new(&self.ctx);
        let logits = rows_of(&s.logits, 0, 1, c.vocab_size);
        let partials = Binding::from(&s.argmax_partials);
        let ids = Binding::range(&s.ids, 0, 4);
        let ring = Binding::from(&s.generated);
        let base = half as u32 * MAX_STEPS;
        for i in 0..k {
            model::forward(
                &mut rec,
                &self.model,
                &self.kv,
                s,
                1,
                pos0 + i,
                LogitsFor::LastToken,
                self.pipeline,
                self.megakernel,
            )?;
            argmax(
                &mut rec,
                &logits,
                c.vocab_size,
                &partials,
                &ids,
                &ring,
                base + i,
            )?;
        }
        self.stats.dispatches_per_token = (rec.dispatch_count() as u32).div_ceil(k.max(1));
        let index = rec.submit_with(|encoder| {
            encoder.copy_buffer_to_buffer(
                &self.scratch.generated,
                base as u64 * 4,
                &readback,
                0,
                k as u64 * 4,
            );
        });
        self.stats.steps_per_submit = self.stats.steps_per_submit.max(k);
        self.stats.record_seconds += clock.seconds();
        Ok(InFlight { k, half, index })
    }

    /// Waits for `batch` and returns its `k` ids.
    async fn read_greedy(&mut self, batch: InFlight) -> Result<Vec<u32>, EngineError> {
        let buffer = self.readback(batch.half);
        let slice = buffer.slice(..batch.k as u64 * 4);
        let (sender, receiver) = futures_channel::oneshot::channel();
        slice.map_async(wgpu::MapMode::Read, move |result| {
            let _ = sender.send(result);
        });
        let ctx = &self.ctx;
        let failed = |why: String| {
            ctx.check_health()
                .err()
                .unwrap_or(crate::gpu::GpuError::Readback(why))
        };
        // Natively, wait for this submission only: the next batch stays queued behind it.
        #[cfg(not(target_arch = "wasm32"))]
        ctx.device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(batch.index),
                timeout: None,
            })
            .map_err(|e| failed(e.to_string()))?;
        #[cfg(target_arch = "wasm32")]
        let _ = batch.index;
        receiver
            .await
            .map_err(|_| failed("map callback dropped".into()))?
            .map_err(|e| failed(e.to_string()))?;
        let ids = {
            let view = slice
                .get_mapped_range()
                .map_err(|e| crate::gpu::GpuError::Readback(e.to_string()))?;
            bytemuck::cast_slice::<u8, u32>(&view).to_vec()
        };
        buffer.unmap();
        ctx.check_health()?;
        Ok(ids)
    }

    /// Readback buffer `half` (`[MAX_STEPS]` u32), made on first use.
    fn readback(&mut self, half: usize) -> wgpu::Buffer {
        let ctx = &self.ctx;
        self.readback[half]
            .get_or_insert_with(|| {
                // Straight from the device: GpuContext has no public MAP_READ constructor.
                // Two per session, made once, so a steady decode loop creates no buffers.
                ctx.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("generated_readback"),
                    size: MAX_STEPS as u64 * 4,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            })
            .clone()
    }
}
