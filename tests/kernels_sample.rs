//! The GPU sampler (`kernels::sample`, shaders/sample.wgsl) against the CPU one
//! (`reference::sample`) on fixed logits: the same token for the same (seed, position), over
//! vocabularies up to Gemma 3's 262,144, every filter, penalties, heavy ties (the tie
//! buffer and its overflow path), NaN and ±inf. A mismatch is accepted only where the draw
//! or the top-p cut falls within float rounding of a boundary (the two sum exponentials in
//! different orders), checked in f64 here. Also: a chi-square test of the GPU draw against
//! softmax(logits), top-k = 1 and min-p = 1 against greedy, and top-p's exact set.
//!
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test kernels_sample`

mod common;

use coco::gpu::{Binding, StepRecorder};
use coco::kernels::sample::{sample, SampleBuffers, CAND_PAIRS, COUNT_WORDS};
use coco::reference::sample::{order_key, sample_derived};
use coco::sampler::{argmax, uniform, SamplerConfig, MAX_RECENT};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use common::ctx;

/// The sampler's buffers and an output ring of `slots` ids.
struct Gpu {
    counts: wgpu::Buffer,
    cands: wgpu::Buffer,
    recent: wgpu::Buffer,
    ids: wgpu::Buffer,
    ring: wgpu::Buffer,
    slots: u32,
}

impl Gpu {
    fn new(slots: u32) -> Gpu {
        let c = ctx();
        Gpu {
            counts: c.storage_buffer("counts", COUNT_WORDS * 4),
            cands: c.storage_buffer("cands", 2 * CAND_PAIRS * 4),
            recent: c.storage_buffer("recent", MAX_RECENT as u64 * 4),
            ids: c.storage_buffer("ids", 4),
            ring: c.storage_buffer("ring", slots as u64 * 4),
            slots,
        }
    }

    /// Draws at `positions` (one submit, at most `slots`), each from a fresh copy of
    /// `logits`, with the ring holding `history`'s tail (so the penalty sees `history`
    /// whatever the position: the test's positions are only RNG counters).
    fn draw(
        &self,
        logits: &[f32],
        cfg: &SamplerConfig,
        history: &[u32],
        positions: &[u32],
    ) -> Vec<u32> {
        assert!(positions.len() as u32 <= self.slots);
        let c = ctx();
        let d = cfg.derived();
        let mut out = Vec::new();
        // With a penalty, each draw penalizes the logits in place and writes its id into the
        // ring: one submit per draw, logits and ring written fresh each time.
        let per_submit = if d.recent > 0 {
            1
        } else {
            positions.len().max(1)
        };
        let buf = c.storage_buffer("logits", logits.len() as u64 * 4);
        for batch in positions.chunks(per_submit) {
            c.queue.write_buffer(&buf, 0, bytemuck::cast_slice(logits));
            let mut rec = StepRecorder::new(c);
            let (counts, cands, recent) = (
                Binding::from(&self.counts),
                Binding::from(&self.cands),
                Binding::from(&self.recent),
            );
            let state = SampleBuffers {
                counts: &counts,
                cands: &cands,
                recent: &recent,
            };
            for (slot, &position) in batch.iter().enumerate() {
                let window = history.len().min(d.recent as usize);
                let mut ring = vec![0u32; MAX_RECENT as usize];
                for (i, &id) in history[history.len() - window..].iter().enumerate() {
                    let p = position as usize - window + i;
                    ring[p % MAX_RECENT as usize] = id;
                }
                c.queue
                    .write_buffer(&self.recent, 0, bytemuck::cast_slice(&ring));
                let mut d = d;
                d.recent = window as u32;
                sample(
                    &mut rec,
                    &Binding::from(&buf),
                    logits.len() as u32,
                    &d,
                    position,
                    &state,
                    &Binding::from(&self.ids),
                    &Binding::from(&self.ring),
                    slot as u32,
                )
                .expect("sample");
            }
            rec.submit();
            let bytes = c
                .read_buffer(&self.ring, 0, batch.len() as u64 * 4)
                .expect("read ring");
            out.extend_from_slice(bytemuck::cast_slice::<u8, u32>(&bytes[..batch.len() * 4]));
        }
        // The counts are zero again after every draw (the next step relies on it).
        let counts = c
            .read_buffer(&self.counts, 0, COUNT_WORDS * 4)
            .expect("read counts");
        assert!(counts.iter().all(|&b| b == 0), "counts not reset");
        out
    }
}

/// The penalized logits and the chain's two float-sensitive decisions in f64: how close
/// (relative to the mass involved) the top-p goal and the draw's target fall to a candidate
/// boundary. A GPU/CPU disagreement is a rounding difference only when this is tiny.
fn margin(logits: &[f32], history: &[u32], cfg: &SamplerConfig, position: u32) -> f64 {
    let d = cfg.derived();
    let mut l = logits.to_vec();
    let window = &history[history.len() - history.len().min(d.recent as usize)..];
    for (i, &id) in window.iter().enumerate() {
        if (id as usize) < l.len() && !window[..i].contains(&id) {
            let v = &mut l[id as usize];
            *v = if *v > 0.0 {
                *v * d.inv_penalty
            } else {
                *v * d.penalty
            };
        }
    }
    let mut order: Vec<(u32, u32)> = l
        .iter()
        .enumerate()
        .map(|(i, v)| (order_key(v.to_bits()), i as u32))
        .filter(|&(k, _)| (0x0080_0000..0xff80_0000).contains(&k))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    order.truncate(d.candidates as usize);
    if order.is_empty() {
        return f64::INFINITY;
    }
    let lv: Vec<f64> = order.iter().map(|&(_, id)| l[id as usize] as f64).collect();
    let gap = |prefix: &[f64], goal: f64| {
        let total = *prefix.last().unwrap();
        prefix
            .iter()
            .map(|s| (s - goal).abs() / total)
            .fold(f64::INFINITY, f64::min)
    };
    let prefix = |w: Vec<f64>| {
        w.iter()
            .scan(0.0, |acc, x| {
                *acc += x;
                Some(*acc)
            })
            .collect::<Vec<f64>>()
    };
    let mut closest = f64::INFINITY;
    let mut keep = lv.len();
    if let Some(top_p) = d.top_p {
        let s = prefix(lv.iter().map(|x| (x - lv[0]).exp()).collect());
        closest = closest.min(gap(&s, top_p as f64 * s.last().unwrap()));
        keep = s
            .iter()
            .position(|&x| x >= top_p as f64 * s.last().unwrap())
            .unwrap()
            + 1;
    }
    if let Some(m) = d.min_p_log {
        let floor = lv[0] + m as f64;
        closest = closest.min(
            lv.iter()
                .map(|x| (x - floor).abs())
                .fold(f64::INFINITY, f64::min),
        );
        keep = keep
            .min(lv.iter().take_while(|&&x| x >= floor).count())
            .max(1);
    }
    let s = prefix(
        lv[..keep]
            .iter()
            .map(|x| ((x - lv[0]) * d.inv_temperature as f64).exp())
            .collect(),
    );
    let goal = uniform(d.seed, position) as f64 * s.last().unwrap();
    closest.min(gap(&s, goal))
}

/// GPU draws at `positions` against the CPU sampler; returns how many differed (each one
/// checked to be a rounding-boundary case).
fn check(
    name: &str,
    gpu: &Gpu,
    logits: &[f32],
    history: &[u32],
    cfg: &SamplerConfig,
    positions: &[u32],
) -> usize {
    let got = gpu.draw(logits, cfg, history, positions);
    let d = cfg.derived();
    let window = &history[history.len() - history.len().min(d.recent as usize)..];
    let mut differ = 0;
    for (&position, &g) in positions.iter().zip(&got) {
        let want = sample_derived(logits, window, &d, position);
        if g != want {
            let m = margin(logits, history, cfg, position);
            assert!(
                m < 1e-5,
                "{name}, position {position}: GPU drew {g} (logit {:?}), CPU {want} (logit {:?}); \
                 nearest boundary {m:e} of the mass away, far beyond rounding. {cfg:?}",
                logits.get(g as usize),
                logits.get(want as usize),
            );
            differ += 1;
        }
    }
    differ
}

fn normal_logits(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    // A sum of uniforms: roughly normal, like real logits, with a spread tail.
    (0..n)
        .map(|_| (0..4).map(|_| rng.gen_range(-1.0f32..1.0)).sum::<f32>() * scale)
        .collect()
}

#[test]
fn gpu_sampler_draws_what_the_cpu_sampler_draws() {
    let gpu = Gpu::new(64);
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let filters = |top_k, top_p, min_p, temperature| SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty: 1.0,
        seed: 1234,
        ..Default::default()
    };
    let configs = [
        ("defaults", SamplerConfig::default()),
        ("top-k 0, top-p 0.9", filters(0, 0.9, 0.0, 1.0)),
        ("all off, hot", filters(0, 1.0, 0.0, 2.0)),
        ("top-k 1000, cold", filters(1000, 1.0, 0.0, 0.3)),
        ("top-k 1024, min-p 0.01", filters(1024, 1.0, 0.01, 1.0)),
        ("top-k 3", filters(3, 1.0, 0.0, 1.0)),
        (
            "penalty 1.5 over 300",
            SamplerConfig {
                repeat_penalty: 1.5,
                repeat_last_n: 300,
                top_k: 0,
                min_p: 0.0,
                ..Default::default()
            },
        ),
    ];
    let mut differ = 0;
    let mut draws = 0;
    for n in [262_144usize, 128_256, 1000, 7] {
        let logits = normal_logits(&mut rng, n, 3.0);
        // History with repeats and an id outside the vocabulary (ignored).
        let mut history: Vec<u32> = (0..600).map(|_| rng.gen_range(0..n as u32)).collect();
        history[590] = history[580];
        history[599] = n as u32 + 5;
        for (name, cfg) in &configs {
            let positions: Vec<u32> = if cfg.derived().recent > 0 {
                vec![600, 601, 602]
            } else {
                (600..632).collect()
            };
            draws += positions.len();
            differ += check(
                &format!("n={n} {name}"),
                &gpu,
                &logits,
                &history,
                cfg,
                &positions,
            );
        }
    }
    eprintln!("{differ} of {draws} draws differed, each at a rounding boundary");
    assert!(differ * 100 <= draws, "{differ} of {draws} draws differ");
}

#[test]
fn ties_nan_and_infinities() {
    let gpu = Gpu::new(64);
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 500,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        ..Default::default()
    };
    let positions: Vec<u32> = (0..24).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut cases: Vec<(&str, Vec<f32>)> = vec![
        // Every logit equal: 262,144 ties at the cut, far beyond the tie slots, so FINISH
        // scans for the lowest ids itself.
        ("flat 262144", vec![0.5; 262_144]),
        // Eight values: the cut falls among thousands of ties spread over every workgroup.
        ("8 values", (0..100_000).map(|i| (i % 8) as f32).collect()),
        // A handful of ties at the cut: they fit the tie slots.
        (
            "few ties",
            (0..50_000)
                .map(|_| rng.gen_range(0..2000) as f32 * 0.01)
                .collect(),
        ),
    ];
    let mut v = normal_logits(&mut rng, 70_000, 2.0);
    for i in (0..70_000).step_by(7) {
        v[i] = f32::NAN;
    }
    v[3] = f32::INFINITY;
    v[5] = f32::NEG_INFINITY;
    v[11] = -f32::NAN;
    cases.push(("NaN and ±inf", v));
    cases.push(("all NaN", vec![f32::NAN; 3000]));
    let mut one = vec![f32::NEG_INFINITY; 5000];
    one[4321] = -7.0;
    cases.push(("one finite", one));
    for (name, logits) in &cases {
        let differ = check(name, &gpu, logits, &[], &cfg, &positions);
        assert_eq!(
            differ, 0,
            "{name}: equal logits leave no rounding to differ on"
        );
    }
    let flat = gpu.draw(&cases[0].1, &cfg, &[], &positions);
    assert!(
        flat.iter().all(|&id| id < 500),
        "flat logits: top-k 500 keeps ids 0..500: {flat:?}"
    );
    assert_eq!(
        gpu.draw(&cases[4].1, &cfg, &[], &[0]),
        vec![0],
        "nothing finite: id 0"
    );
    assert_eq!(gpu.draw(&cases[5].1, &cfg, &[], &[9]), vec![4321]);
}

#[test]
fn top_k_one_and_min_p_one_are_greedy_and_top_p_keeps_the_smallest_set() {
    let gpu = Gpu::new(64);
    let mut rng = ChaCha8Rng::seed_from_u64(8);
    let logits = normal_logits(&mut rng, 128_256, 3.0);
    let best = argmax(&logits);
    let positions: Vec<u32> = (0..64).collect();
    for cfg in [
        SamplerConfig {
            top_k: 1,
            temperature: 1.5,
            repeat_penalty: 1.0,
            ..Default::default()
        },
        SamplerConfig {
            top_k: 0,
            top_p: 1.0,
            min_p: 1.0,
            temperature: 1.5,
            repeat_penalty: 1.0,
            ..Default::default()
        },
    ] {
        let got = gpu.draw(&logits, &cfg, &[], &positions);
        assert!(
            got.iter().all(|&id| id == best),
            "{cfg:?}: {got:?}, argmax {best}"
        );
    }
    // p ∝ 8, 4, 2, 1, 1: top-p 0.75 keeps exactly {0, 1}; 0.76 adds 2.
    let logits: Vec<f32> = [8.0f32, 4.0, 2.0, 1.0, 1.0]
        .iter()
        .map(|p| p.ln())
        .collect();
    let positions: Vec<u32> = (0..256).collect();
    for (top_p, want) in [(0.75, vec![0, 1]), (0.76, vec![0, 1, 2]), (0.5, vec![0])] {
        let cfg = SamplerConfig {
            top_p,
            top_k: 0,
            min_p: 0.0,
            temperature: 1.0,
            repeat_penalty: 1.0,
            ..Default::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for chunk in positions.chunks(64) {
            seen.extend(gpu.draw(&logits, &cfg, &[], chunk));
        }
        assert_eq!(
            seen.into_iter().collect::<Vec<u32>>(),
            want,
            "top-p {top_p}"
        );
    }
}

/// Chi-square of 16,384 GPU draws (temperature 1, every filter off) over 40 tokens against
/// softmax(logits). The bound is the 1e-6 tail of χ²(39) (≈ 92.6), so a correct sampler
/// fails it once in a million runs; the test also shows it rejects a draw that is off by a
/// few percent: the same counts against softmax(logits / 1.1).
#[test]
fn gpu_draws_follow_softmax() {
    const DRAWS: u32 = 16_384;
    const BOUND: f64 = 92.6;
    let gpu = Gpu::new(1024);
    let logits: Vec<f32> = (0..40)
        .map(|i| ((i * 17 % 40) as f32 - 20.0) * 0.12)
        .collect();
    let cfg = SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        repeat_penalty: 1.0,
        seed: 99,
        ..Default::default()
    };
    let mut counts = [0u64; 40];
    let positions: Vec<u32> = (0..DRAWS).collect();
    for chunk in positions.chunks(1024) {
        for id in gpu.draw(&logits, &cfg, &[], chunk) {
            counts[id as usize] += 1;
        }
    }
    let chi2 = |temperature: f64| {
        let w: Vec<f64> = logits
            .iter()
            .map(|&l| (l as f64 / temperature).exp())
            .collect();
        let total: f64 = w.iter().sum();
        w.iter()
            .zip(&counts)
            .map(|(wi, &c)| {
                let expected = DRAWS as f64 * wi / total;
                (c as f64 - expected).powi(2) / expected
            })
            .sum::<f64>()
    };
    let right = chi2(1.0);
    let wrong = chi2(1.1);
    eprintln!(
        "χ² = {right:.1} against softmax(l), {wrong:.1} against softmax(l / 1.1); bound {BOUND}"
    );
    assert!(
        right < BOUND,
        "the GPU draw does not follow softmax: χ² = {right:.1}"
    );
    assert!(
        wrong > BOUND,
        "the test can't tell temperature 1.1 from 1: χ² = {wrong:.1}"
    );
}
