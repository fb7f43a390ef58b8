//! The host's cost of decode steps, per dispatch, on any adapter: K greedy steps recorded as
//! the decode loop records a batch (`model::forward` + the argmax draw into one
//! `StepRecorder`), then split into
//! - record: the kernels' host side (shape checks, pipeline and parameter lookups, bindings),
//! - encode: all of a submit but the submit itself (parameter upload, bind groups, the pass),
//!   where lavapipe would run the work inside the submit, on the same CPU.
//!
//! The GPU's side is `coco bench` (record, encode and wait per token on the real loop) and
//! `coco bench --profile`.
//!
//!   cargo run --release --example step_timing -- M.gguf [K = 16] [batches = 200]
//!
//! Medians over the batches (the first 10 warm the caches: pipelines, bind groups).
//!
//! With `--prompt T` it times one prompt step of T tokens instead, twice: in a warm session
//! (a chat's later turn: every bind group cached) and in a fresh one each time (a first
//! prompt: the session's buffers are new, so every bind group is created during the encode).
//!
//!   cargo run --release --example step_timing -- M.gguf --prompt 32 [reps = 50]

use coco::engine::{load_path, LogitsFor, Session};
use coco::gpu::{Binding, GpuContext, StepRecorder};
use coco::model::rows_of;
use std::sync::Arc;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: step_timing M.gguf [K] [batches]");
    let first = args.next();
    if first.as_deref() == Some("--prompt") {
        let t: u32 = args.next().map_or(32, |a| a.parse().expect("T"));
        let reps: usize = args.next().map_or(50, |a| a.parse().expect("reps"));
        return prompt_step(&path, t, reps);
    }
    let k: u32 = first.map_or(16, |a| a.parse().expect("K"));
    let batches: usize = args.next().map_or(200, |a| a.parse().expect("batches"));
    let ctx = Arc::new(GpuContext::new_blocking().expect("gpu"));
    let model = Arc::new(load_path(&ctx, std::path::Path::new(&path), 256).expect("load"));
    let mut s = Session::new(&ctx, &model, 256, LogitsFor::LastToken);
    s.forward_blocking(&[1, 2, 3, 4]).expect("prefill");
    let plan = s.plan().clone();
    let vocab = model.config.vocab_size;
    let partials = Binding::from(&s.scratch.argmax_partials);
    let ids = Binding::range(&s.scratch.ids, 0, 4);
    let ring = Binding::from(&s.scratch.generated);
    let record = |rec: &mut StepRecorder| {
        for i in 0..k {
            coco::model::forward(
                rec,
                &model,
                &s.kv,
                &s.scratch,
                1,
                s.pos + i,
                LogitsFor::LastToken,
                &plan,
            )
            .expect("record");
            let logits = rows_of(&s.scratch.logits, 0, 1, vocab);
            coco::kernels::argmax::argmax(rec, &logits, vocab, &partials, &ids, &ring, i)
                .expect("argmax");
        }
    };
    let (mut recording, mut encoding) = (Vec::new(), Vec::new());
    let (mut dropping_commands, mut dropping_recorder) = (Vec::new(), Vec::new());
    let mut dispatches = 0;
    for batch in 0..batches + 10 {
        let t0 = Instant::now();
        let mut rec = StepRecorder::new(&ctx);
        record(&mut rec);
        dispatches = rec.dispatch_count();
        let t1 = Instant::now();
        let commands = rec.encode_unsubmitted();
        let t2 = Instant::now();
        drop(commands);
        let t3 = Instant::now();
        drop(rec);
        let t4 = Instant::now();
        if batch >= 10 {
            let per_dispatch =
                |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e6 / dispatches as f64;
            recording.push(per_dispatch(t0, t1));
            encoding.push(per_dispatch(t1, t2));
            dropping_commands.push(per_dispatch(t2, t3));
            dropping_recorder.push(per_dispatch(t3, t4));
        }
    }
    let (record, encode) = (median(recording), median(encoding));
    let (free_commands, free_recorder) = (median(dropping_commands), median(dropping_recorder));
    println!(
        "{}: K = {k}, {dispatches} dispatches per batch ({} per step), {batches} batches",
        ctx.describe(),
        dispatches / k as usize
    );
    println!(
        "host µs per dispatch (median): record {record:.2} | encode {encode:.2} | free the \
         commands {free_commands:.2} | free the recording {free_recorder:.2} | sum {:.2}",
        record + encode + free_commands + free_recorder
    );
}

/// One `t`-token prompt step's host cost, in a warm session and in fresh ones (see the module
/// docs): ms for the step, medians over `reps`.
fn prompt_step(path: &str, t: u32, reps: usize) {
    let ctx = Arc::new(GpuContext::new_blocking().expect("gpu"));
    let model = Arc::new(load_path(&ctx, std::path::Path::new(path), t + 8).expect("load"));
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    // (session creation, record, encode, bind groups created, dispatches) per rep.
    let time = |s: &mut Session| {
        let before = ctx.cached_bind_groups();
        let t0 = Instant::now();
        let mut rec = StepRecorder::new(&ctx);
        let plan = s.plan().clone();
        coco::model::forward(
            &mut rec,
            &model,
            &s.kv,
            &s.scratch,
            t,
            0,
            LogitsFor::LastToken,
            &plan,
        )
        .expect("record");
        let t1 = Instant::now();
        drop(rec.encode_unsubmitted());
        let t2 = Instant::now();
        let created = ctx.cached_bind_groups().saturating_sub(before);
        (ms(t0, t1), ms(t1, t2), created, rec.dispatch_count())
    };
    let new_session = || Session::new(&ctx, &model, t + 8, LogitsFor::LastToken);
    let mut warm = new_session();
    time(&mut warm);
    let mut rows = Vec::new();
    for name in ["warm", "fresh"] {
        let (mut setup, mut record, mut encode) = (Vec::new(), Vec::new(), Vec::new());
        let (mut created, mut dispatches) = (0, 0);
        for _ in 0..reps {
            let t0 = Instant::now();
            let mut fresh = (name == "fresh").then(new_session);
            let t1 = Instant::now();
            let (r, e, c, d) = time(fresh.as_mut().unwrap_or(&mut warm));
            setup.push(ms(t0, t1));
            record.push(r);
            encode.push(e);
            (created, dispatches) = (c, d);
            drop(fresh); // and with it its bind groups (`Session`'s drop)
        }
        let (r, e) = (median(record), median(encode));
        rows.push(format!(
            "{name}: session {:.3} ms | record {r:.3} ms | encode {e:.3} ms ({created} bind groups \
             created) | {:.2} µs per dispatch over {dispatches}",
            median(setup),
            (r + e) * 1e3 / dispatches as f64
        ));
    }
    println!("{}: a {t}-token prompt step, {reps} reps", ctx.describe());
    for row in rows {
        println!("{row}");
    }
}
