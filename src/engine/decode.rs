//! The GPU-resident decode loop, for every sampler setting.
//!
//! Each step draws a token on the GPU from the logits row the forward left — greedy with
//! `kernels::argmax`, anything else with the sampling chain of `kernels::sample` — into
//! `scratch.ids[0]`, the slot the next step's embedding lookup reads, and into the ring
//! `scratch.generated`. So the token never leaves the GPU between steps. The first draw reads
//! the prompt's last logits row, which the prefill left on the GPU (no logits readback at
//! all). The sampler's random numbers are a function of (seed, position), so the tokens don't
//! depend on how the steps are batched.
//!
//! K steps are recorded into ONE compute pass (the `StepRecorder` packs every dispatch's
//! parameters, so step i simply carries `pos0 + i`) and one submit, whose command buffer ends
//! with a 4·K-byte copy of the ring to a mapped buffer. K starts at 1 (the first token is
//! back after one draw) and doubles up to [`MAX_STEPS`], capped by the tokens still wanted,
//! the context left, and [`BATCH_BUDGET_SECONDS`] over the measured time per token, so a slow
//! GPU still streams text steadily (SwiftShader: ~2.5 s per Gemma token, so K stays 1).
//!
//! While the host waits for batch B, batch B + 1 is already recorded and queued behind it
//! (its first token is B's last draw, on the GPU), so the host's recording and the readback
//! round trip overlap GPU work. That depth is `GpuContext::batches_in_flight` (1..=3;
//! `COCO_IN_FLIGHT`, a link's `in_flight`): a third batch queued made no difference natively
//! and lost in Chromium on the H200 (tg128 725 against 821 tok/s; BENCHMARKS.md "session
//! 26"), where a token takes the GPU step plus ~14 µs per dispatch of browser overhead.
//! After B's ids come back the host walks them exactly as the
//! one-token CPU loop in `Session::generate` would — stop tokens, `on_token` returning false,
//! `max_new`, a full context — and stops there. What ran past the stop is discarded: `pos`
//! and `cached_tokens` only count the steps the CPU loop would have run, and the KV rows the
//! speculative steps wrote lie past `pos`, where the next prefill or step overwrites them.
//! The cost of a stop is at most the batches in flight of wasted GPU work, queued ahead of
//! the next call; a Stop button is answered within one batch.
//!
//! Host cost per dispatch, K = 16, caches warm (examples/step_timing.rs on this repo's 2-core
//! machine, lavapipe, the Gemma-3-270M file): recording 0.6 µs, encoding (parameter upload,
//! bind groups, the pass) 1.1 µs, freeing 0.3 µs; then the submit. The H200 spent ~8 µs per
//! dispatch in all (BENCHMARKS.md "session 33"), hidden behind the batch in flight wherever
//! the GPU step is the longer.

use std::collections::VecDeque;

use crate::gpu::{Binding, StepRecorder};
use crate::kernels::argmax::argmax;
use crate::kernels::sample::{sample, SampleBuffers};
use crate::model::{self, MAX_BATCHES_IN_FLIGHT, MAX_STEPS};
use crate::sampler::{Derived, SamplerConfig, MAX_RECENT};

use super::{EngineError, Session, StopReason};
use crate::model::{rows_of, LogitsFor};

/// The most GPU time one batch should take, so tokens reach the screen at least this often:
/// K ≤ this / the measured seconds per token (`Session::batch_budget_seconds`'s default).
pub const BATCH_BUDGET_SECONDS: f64 = 0.05;

/// A submitted batch whose ids are not yet read.
struct InFlight {
    k: u32,
    index: wgpu::SubmissionIndex,
    /// Its slot's readback buffer, whose mapping was requested right after the submit.
    buffer: wgpu::Buffer,
    /// The mapping's outcome; `None` once `read_batch` has taken it.
    mapped: Option<futures_channel::oneshot::Receiver<Result<(), wgpu::BufferAsyncError>>>,
}

impl Drop for InFlight {
    /// A batch left unread (the loop stopped, or failed) still has its mapping pending or
    /// done: unmapping cancels or releases it, so the buffer can take the next batch's copy.
    fn drop(&mut self) {
        if self.mapped.is_some() {
            self.buffer.unmap();
        }
    }
}

/// How the GPU loop ended.
pub(crate) struct GpuRun {
    pub stop: StopReason,
    /// Seconds from the call until the first id was back (None if it emitted nothing).
    pub first_id_seconds: Option<f64>,
}

impl Session {
    /// The decode loop after a prefill that left the prompt's last logits in row
    /// `first_row` of `scratch.logits` (not read back). Pushes the emitted tokens onto
    /// `out`; `pos`, `cached_tokens` and `stats.generated_tokens` end exactly where the
    /// one-token CPU loop leaves them. `stop_ids` are the end-of-generation ids (not passed
    /// on).
    pub(crate) async fn decode_on_gpu(
        &mut self,
        sampler: &SamplerConfig,
        first_row: u32,
        max_new: u32,
        stop_ids: &[u32],
        on_token: &mut dyn FnMut(u32) -> bool,
        out: &mut Vec<u32>,
    ) -> Result<GpuRun, EngineError> {
        let clock = crate::util::Clock::start();
        self.stats.sampler_on_gpu = true;
        let draw = (!sampler.is_greedy()).then(|| sampler.derived());
        if let Some(d) = &draw {
            self.write_recent(d.recent);
        }
        let context = self.kv.context;
        let pos0 = self.pos;
        // Id j needs the forward of id j - 1 at pos0 + j - 1 < context.
        let producible = max_new.min(context.saturating_sub(pos0) + 1);
        let mut ready: VecDeque<u32> = VecDeque::new();
        let mut in_flight: VecDeque<InFlight> = VecDeque::new();
        let mut submitted = 0;
        let mut read = 0u32;
        let mut k_next = 1;
        let depth = self.ctx.batches_in_flight.clamp(1, MAX_BATCHES_IN_FLIGHT) as usize;
        let mut slot = 0;
        let mut first_id_seconds = None;
        // (seconds, ids read) at the first read: the batches after it time the steps.
        let mut since_first: Option<(f64, u32)> = None;
        let mut stop = StopReason::MaxTokens;
        for step in 0..max_new {
            if ready.is_empty() {
                // Keep `depth` batches queued, so the GPU has work while the host reads one
                // and records the next.
                while in_flight.len() < depth && submitted < producible {
                    // Until a batch of forwards has been timed, at most 2 steps; a zero
                    // budget means one step per submit.
                    let budget = match since_first {
                        _ if self.batch_budget_seconds <= 0.0 => 1,
                        Some((t, n)) if read > n => {
                            let per_token = (clock.seconds() - t) / (read - n) as f64;
                            (self.batch_budget_seconds / per_token.max(1e-9)).min(1e6) as u32
                        }
                        _ => 2,
                    };
                    let k = k_next
                        .min(budget.clamp(1, MAX_STEPS))
                        .min(producible - submitted);
                    let first = pos0 + submitted;
                    in_flight.push_back(self.submit_batch(
                        draw.as_ref(),
                        first_row,
                        first,
                        submitted == 0,
                        k,
                        slot,
                    )?);
                    submitted += k;
                    slot = (slot + 1) % depth;
                    k_next = (k_next * 2).min(MAX_STEPS);
                }
                let batch = in_flight
                    .pop_front()
                    .expect("a batch is in flight while ids are still producible");
                read += batch.k;
                let waiting = crate::util::Clock::start();
                ready.extend(self.read_batch(batch).await?);
                self.stats.wait_seconds += waiting.seconds();
                first_id_seconds.get_or_insert(clock.seconds());
                since_first.get_or_insert((clock.seconds(), read));
            }
            let id = ready.pop_front().expect("ready holds the next id");
            if stop_ids.contains(&id) {
                stop = StopReason::Eos;
                break;
            }
            out.push(id);
            if !on_token(id) {
                stop = StopReason::Stopped;
                break;
            }
            if step + 1 == max_new {
                break;
            }
            if self.pos >= context {
                stop = StopReason::ContextFull;
                break;
            }
            // The forward of `id` at self.pos ran in the batch that drew the next id.
            self.pos += 1;
            self.cached_tokens.push(id);
            self.stats.generated_tokens += 1;
        }
        Ok(GpuRun {
            stop,
            first_id_seconds,
        })
    }

    /// The ring of recent ids the penalty reads, from `cached_tokens` (the whole sequence
    /// so far): the last `recent` of them, each in slot `position % MAX_RECENT`. The GPU
    /// writes the ids it draws itself.
    fn write_recent(&self, recent: u32) {
        if recent == 0 {
            return;
        }
        let history = &self.cached_tokens;
        let mut ring = vec![0u32; MAX_RECENT as usize];
        let start = history.len().saturating_sub(recent as usize);
        for (position, &id) in history.iter().enumerate().skip(start) {
            ring[position % MAX_RECENT as usize] = id;
        }
        self.ctx
            .queue
            .write_buffer(&self.scratch.recent, 0, bytemuck::cast_slice(&ring));
    }

    /// Records `k` steps drawing the ids at positions `first..first + k` in one pass: step i
    /// runs the forward of the previous id (in `ids[0]`) at position `first + i - 1`, except
    /// when `from_prefill` and i = 0, whose draw reads the prefill's logits row `first_row`.
    /// Each draw writes the next id into `ids[0]` and ring entry `slot · MAX_STEPS + i`. Then
    /// copies the ring slot to its readback buffer, and submits.
    fn submit_batch(
        &mut self,
        draw: Option<&Derived>,
        first_row: u32,
        first: u32,
        from_prefill: bool,
        k: u32,
        slot: usize,
    ) -> Result<InFlight, EngineError> {
        self.refresh_plan();
        let clock = crate::util::Clock::start();
        let readback = self.readback(slot);
        let c = &self.model.config;
        let s = &self.scratch;
        let mut rec = StepRecorder::new(&self.ctx);
        let argmax_partials = Binding::from(&s.argmax_partials);
        let ids = Binding::range(&s.ids, 0, 4);
        let ring = Binding::from(&s.generated);
        let (counts, cands, recent) = (
            Binding::from(&s.sample_counts),
            Binding::from(&s.sample_cands),
            Binding::from(&s.recent),
        );
        let state = SampleBuffers {
            counts: &counts,
            cands: &cands,
            recent: &recent,
        };
        let base = slot as u32 * MAX_STEPS;
        let mut step_dispatches = None;
        for i in 0..k {
            let before = rec.dispatch_count();
            let forwards = !(from_prefill && i == 0);
            let row = if !forwards {
                first_row
            } else {
                model::forward(
                    &mut rec,
                    &self.model,
                    &self.kv,
                    s,
                    1,
                    first + i - 1,
                    LogitsFor::LastToken,
                    &self.plan,
                )?;
                0
            };
            let logits = rows_of(&s.logits, row, 1, c.vocab_size);
            match draw {
                None => argmax(
                    &mut rec,
                    &logits,
                    c.vocab_size,
                    &argmax_partials,
                    &ids,
                    &ring,
                    base + i,
                )?,
                Some(d) => sample(
                    &mut rec,
                    &logits,
                    c.vocab_size,
                    d,
                    first + i,
                    &state,
                    &ids,
                    &ring,
                    base + i,
                )?,
            }
            if forwards {
                step_dispatches = Some((rec.dispatch_count() - before) as u32);
            }
        }
        if let Some(n) = step_dispatches {
            self.stats.dispatches_per_token = n;
        }
        let encoding = crate::util::Clock::start();
        let index = rec.submit_with(|encoder| {
            encoder.copy_buffer_to_buffer(
                &self.scratch.generated,
                base as u64 * 4,
                &readback,
                0,
                k as u64 * 4,
            );
        });
        // Ask for the mapping now, before the next batch is submitted: the browser (Dawn)
        // resolves a mapAsync only once all work submitted before the call is done, so a
        // request made after batch B + 1's submit waited for B + 1 as well, and the GPU idled
        // while the host recorded the next batch (H200, Chromium: 2.2 ms per Gemma-3-270M
        // token = the 0.9 ms of recording plus the 1.3 ms step).
        let (sender, receiver) = futures_channel::oneshot::channel();
        readback
            .slice(..k as u64 * 4)
            .map_async(wgpu::MapMode::Read, move |result| {
                let _ = sender.send(result);
            });
        self.stats.steps_per_submit = self.stats.steps_per_submit.max(k);
        self.stats.encode_seconds += encoding.seconds();
        self.stats.record_seconds += clock.seconds();
        Ok(InFlight {
            k,
            index,
            buffer: readback,
            mapped: Some(receiver),
        })
    }

    /// Waits for `batch` and returns its `k` ids.
    async fn read_batch(&mut self, mut batch: InFlight) -> Result<Vec<u32>, EngineError> {
        let receiver = batch.mapped.take().expect("a batch is read once");
        let slice = batch.buffer.slice(..batch.k as u64 * 4);
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
                submission_index: Some(batch.index.clone()),
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
        batch.buffer.unmap();
        ctx.check_health()?;
        Ok(ids)
    }

    /// Readback buffer `slot` (`[MAX_STEPS]` u32), made on first use.
    fn readback(&mut self, slot: usize) -> wgpu::Buffer {
        let ctx = &self.ctx;
        // One per slot and session, made once, so a steady decode loop creates no buffers.
        self.readback[slot]
            .get_or_insert_with(|| ctx.readback_buffer("generated_readback", MAX_STEPS as u64 * 4))
            .clone()
    }
}
