//! GPU time of one draw, stage by stage: greedy (`kernels::argmax`) against the sampling
//! chain (`kernels::sample`) with the default settings, on random logits of a vocabulary
//! (cargo run --release --example sampler_timing -- [vocab, default 262144]). Uses timestamp
//! queries (one pass per dispatch, so each stage carries a pass's overhead) and, for the
//! real one-pass cost, the wall time of 50 draws in one submit.

use coco::gpu::{Binding, GpuContext, StepRecorder, Timing};
use coco::kernels::argmax::{argmax, PARTIALS_WORDS};
use coco::kernels::sample::{sample, SampleBuffers, CAND_PAIRS, COUNT_WORDS};
use coco::sampler::{SamplerConfig, MAX_RECENT};
use std::time::Instant;

fn main() {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(262_144);
    let ctx = GpuContext::new_blocking().expect("gpu");
    println!("adapter: {}; vocabulary {n}", ctx.describe());
    // Roughly normal logits (a sum of 4 hashes), like a model's.
    let logits: Vec<f32> = (0..n)
        .map(|i| {
            (0..4)
                .map(|j| coco::sampler::uniform(j, i) - 0.5)
                .sum::<f32>()
                * 6.0
        })
        .collect();
    let buf = ctx.storage_buffer_init("logits", bytemuck::cast_slice(&logits));
    let logits_b = Binding::from(&buf);
    let partials = Binding::from(&ctx.storage_buffer("partials", PARTIALS_WORDS * 4));
    let counts = Binding::from(&ctx.storage_buffer("counts", COUNT_WORDS * 4));
    let cands = Binding::from(&ctx.storage_buffer("cands", 2 * CAND_PAIRS * 4));
    let recent = Binding::from(&ctx.storage_buffer("recent", MAX_RECENT as u64 * 4));
    let ids = Binding::from(&ctx.storage_buffer("ids", 4));
    let ring = Binding::from(&ctx.storage_buffer("ring", 64 * 4));
    let state = SampleBuffers {
        counts: &counts,
        cands: &cands,
        recent: &recent,
    };
    let settings = SamplerConfig::default().derived();
    let record = |greedy: bool, draws: u32| {
        let mut rec = StepRecorder::new(&ctx);
        for d in 0..draws {
            if greedy {
                argmax(&mut rec, &logits_b, n, &partials, &ids, &ring, d % 64).unwrap();
            } else {
                // Positions past the penalty window, so the penalty runs every draw.
                sample(
                    &mut rec,
                    &logits_b,
                    n,
                    &settings,
                    100 + d,
                    &state,
                    &ids,
                    &ring,
                    d % 64,
                )
                .unwrap();
            }
        }
        rec
    };
    for (name, greedy) in [("greedy (argmax)", true), ("default sampler", false)] {
        // Warm-up, then 50 draws in one pass.
        record(greedy, 2).submit();
        ctx.read_buffer(&ring.buffer, 0, 4).unwrap();
        let t0 = Instant::now();
        record(greedy, 50).submit();
        ctx.read_buffer(&ring.buffer, 0, 4).unwrap();
        let per_draw = t0.elapsed().as_secs_f64() * 1e6 / 50.0;
        println!("{name}: {per_draw:.1} µs per draw in one pass (wall, 50 draws)");
        if ctx.features.contains(wgpu::Features::TIMESTAMP_QUERY) {
            let mut totals: Vec<(String, f64)> = Vec::new();
            for _ in 0..5 {
                let spans = pollster::block_on(record(greedy, 1).submit_timed(Timing::PerDispatch))
                    .unwrap();
                for s in spans {
                    match totals.iter_mut().find(|(l, _)| *l == s.label) {
                        Some(t) => t.1 += s.ns / 5e3,
                        None => totals.push((s.label, s.ns / 5e3)),
                    }
                }
            }
            for (label, us) in totals {
                println!("  {label}: {us:.1} µs (own pass)");
            }
        }
    }
}
