//! Splits one decode step's wall time into recording, submit and GPU wait, to see where
//! per-token time goes on an adapter (cargo run --release --example step_timing -- M.gguf).

use coco::engine::{load_path, LogitsFor, Session};
use coco::gpu::{GpuContext, StepRecorder};
use std::time::Instant;

fn main() {
    let path = std::env::args().nth(1).expect("model path");
    let ctx = std::sync::Arc::new(GpuContext::new_blocking().expect("gpu"));
    let model =
        std::sync::Arc::new(load_path(&ctx, std::path::Path::new(&path), 256).expect("load"));
    let mut s = Session::new(&ctx, &model, 256, LogitsFor::LastToken);
    s.forward_blocking(&[1, 2, 3, 4]).expect("prefill");
    let plan = s.plan().clone();
    for step in 0..5 {
        ctx.queue
            .write_buffer(&s.scratch.ids, 0, bytemuck::cast_slice(&[5u32]));
        let t0 = Instant::now();
        let mut rec = StepRecorder::new(&ctx);
        coco::model::forward(
            &mut rec,
            &model,
            &s.kv,
            &s.scratch,
            1,
            s.pos,
            LogitsFor::LastToken,
            &plan,
        )
        .expect("record");
        let n = rec.dispatch_count();
        let t1 = Instant::now();
        rec.submit();
        let t2 = Instant::now();
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .expect("poll");
        let t3 = Instant::now();
        let _ = ctx
            .read_f32(&s.scratch.logits, 0, model.config.vocab_size as u64)
            .expect("read");
        let t4 = Instant::now();
        println!(
            "step {step}: {n} dispatches | record {:.0} µs | submit (bind groups + encode) {:.0} µs | gpu wait {:.0} µs | logits readback {:.0} µs",
            (t1 - t0).as_secs_f64() * 1e6,
            (t2 - t1).as_secs_f64() * 1e6,
            (t3 - t2).as_secs_f64() * 1e6,
            (t4 - t3).as_secs_f64() * 1e6
        );
    }
}
