//! RoPE and the fused RoPE + KV-cache write (`src/kernels/rope.rs`) against its CPU reference in
//! `coco::reference::ops`, on whatever adapter wgpu picks (lavapipe in CI).
//!
//! Seeded inputs, odd sizes; each comparison prints its max error, and a failure prints the
//! first element outside `atol + rtol·|ref|` with both values.

mod common;

use coco::gpu::{Binding, StepRecorder};
use coco::kernels::rope::{self, RopeLayout, Rotary};
use coco::reference::ops;
use common::{assert_close_f32, ctx, random_uniform, read_f32, upload_f32};

/// HF's default frequencies over the rotated dimensions: `1 / base^(2i / dims)`, computed in
/// f32 like `LlamaRotaryEmbedding` (`torch.arange(0, dim, 2).float() / dim` then `base ** …`),
/// and 0 for the pass-through pairs, as `Config::inv_freq` lays them out (`[head_dim / 2]`).
fn inv_freq(head_dim: usize, dims: usize, base: f32) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            if i < dims / 2 {
                1.0 / base.powf((2 * i) as f32 / dims as f32)
            } else {
                0.0
            }
        })
        .collect()
}

/// Each layout rotating the whole head, and rotating three quarters of it (Phi-4-mini's 96 of
/// 128) with cos and sin scaled by a LongRoPE attention factor (Phi-4-mini's ~1.19).
fn rotaries(head_dim: usize) -> Vec<Rotary> {
    [RopeLayout::Normal, RopeLayout::Neox]
        .into_iter()
        .flat_map(|layout| {
            [
                Rotary::full(layout, head_dim as u32),
                Rotary {
                    layout,
                    dims: (head_dim * 3 / 4) as u32 & !1,
                    scale: 1.19,
                },
            ]
        })
        .collect()
}

#[test]
fn rope_matches_reference() {
    // (t, heads, head_dim, pos0): prefill from 0, decode deep into the context, a chunk at
    // positions past 8k where the angle reduction works hardest.
    let cases = [
        (1, 4, 64, 0),
        (3, 4, 96, 0),
        (17, 6, 256, 0),
        (1, 2, 128, 3000),
        (17, 4, 96, 601),
        (3, 2, 64, 8190),
    ];
    for (seed, &(t, heads, hd, pos0)) in cases.iter().enumerate() {
        for rotary in rotaries(hd) {
            let x = random_uniform(50 + seed as u64, t * heads * hd, 2.0);
            let f = inv_freq(hd, rotary.dims as usize, 10_000.0);
            let mut want = x.clone();
            ops::rope(&mut want, &f, t, heads, hd, pos0, rotary);
            let (xb, fb) = (upload_f32("x", &x), upload_f32("inv_freq", &f));
            let mut rec = StepRecorder::new(ctx());
            rope::rope(
                &mut rec,
                &(&xb).into(),
                &(&fb).into(),
                t as u32,
                heads as u32,
                hd as u32,
                pos0 as u32,
                rotary,
            )
            .unwrap();
            rec.submit();
            let what = format!("rope {rotary:?} t={t} heads={heads} hd={hd} pos0={pos0}");
            assert_close_f32(&what, &read_f32(&xb, x.len()), &want, 2e-6, 1e-5);
        }
    }
}

/// LongRoPE (Phi-3): the frequencies divided by a short (1–3) or long (1–60) factor set, as
/// `Config::inv_freq` folds `rope_factors_short/long.weight` in, at Phi-3's head size 96 and
/// at positions up to Phi-3.5's 128k context, where the long set's slow frequencies matter.
#[test]
fn rope_with_longrope_factors_matches_reference() {
    let hd = 96;
    let short: Vec<f32> = (0..hd / 2).map(|i| 1.0 + 2.0 * i as f32 / 47.0).collect();
    let long: Vec<f32> = (0..hd / 2)
        .map(|i| 1.0 + 59.0 * (i as f32 / 47.0).powi(2))
        .collect();
    for (seed, (factors, pos0)) in [(&short, 0), (&short, 4000), (&long, 4100), (&long, 131_000)]
        .into_iter()
        .enumerate()
    {
        let (t, heads) = (5, 4);
        let f: Vec<f32> = inv_freq(hd, hd, 10_000.0)
            .iter()
            .zip(factors)
            .map(|(f, d)| f / d)
            .collect();
        let x = random_uniform(90 + seed as u64, t * heads * hd, 2.0);
        let mut want = x.clone();
        ops::rope(
            &mut want,
            &f,
            t,
            heads,
            hd,
            pos0,
            Rotary::full(RopeLayout::Neox, hd as u32),
        );
        let (xb, fb) = (upload_f32("x", &x), upload_f32("inv_freq", &f));
        let mut rec = StepRecorder::new(ctx());
        rope::rope(
            &mut rec,
            &(&xb).into(),
            &(&fb).into(),
            t as u32,
            heads as u32,
            hd as u32,
            pos0 as u32,
            Rotary::full(RopeLayout::Neox, hd as u32),
        )
        .unwrap();
        rec.submit();
        let what = format!("rope longrope factors {:.0}.. pos0={pos0}", factors[47]);
        assert_close_f32(&what, &read_f32(&xb, x.len()), &want, 2e-6, 1e-5);
    }
}

#[test]
fn rope_kv_write_matches_rope_then_kv_write() {
    // (t, heads, kv_heads, head_dim, pos0): GQA decode deep in the context, a prefill chunk,
    // MQA, equal head counts, and Gemma-3-270M's heads (4/1 × 256: the Q/K-norm form's
    // widest row). Each with and without the folded per-head Q/K norm.
    let cases = [
        (1, 8, 2, 64, 600),
        (17, 4, 2, 96, 0),
        (3, 6, 1, 128, 8190),
        (5, 3, 3, 64, 7),
        (3, 4, 1, 256, 300),
    ];
    let with_norm = [false, true];
    for (seed, &(t, heads, kv_heads, hd, pos0)) in cases.iter().enumerate() {
        for (rotary, qk_norm) in rotaries(hd)
            .into_iter()
            .flat_map(|r| with_norm.map(|n| (r, n)))
        {
            let seed = 70 + 4 * seed as u64;
            let q = random_uniform(seed, t * heads * hd, 2.0);
            let k = random_uniform(seed + 1, t * kv_heads * hd, 2.0);
            let v = random_uniform(seed + 2, t * kv_heads * hd, 2.0);
            let f = inv_freq(hd, rotary.dims as usize, 10_000.0);
            // Rows 0..pos0 hold earlier tokens and must stay as they were.
            let rows = pos0 + t;
            let old = random_uniform(seed + 3, rows * kv_heads * hd, 1.0);
            // gemma3's per-head norms (weights around 1, as GGUF's (1 + w)), before RoPE.
            let (qn, kn) = (
                random_uniform(seed + 5, hd, 0.5),
                random_uniform(seed + 6, hd, 0.5),
            );
            let (qn, kn): (Vec<f32>, Vec<f32>) = (
                qn.iter().map(|w| 1.0 + w).collect(),
                kn.iter().map(|w| 1.0 + w).collect(),
            );
            const EPS: f32 = 1e-6;
            let (mut want_q, mut want_k) = if qk_norm {
                (
                    ops::rms_norm(&q, &qn, t * heads, hd, EPS),
                    ops::rms_norm(&k, &kn, t * kv_heads, hd, EPS),
                )
            } else {
                (q.clone(), k.clone())
            };
            ops::rope(&mut want_q, &f, t, heads, hd, pos0, rotary);
            ops::rope(&mut want_k, &f, t, kv_heads, hd, pos0, rotary);
            let split = pos0 * kv_heads * hd;
            let want_kc = [&old[..split], &want_k[..]].concat();
            let want_vc = [&old[..split], &v[..]].concat();
            let (qb, kb, vb, fb) = (
                upload_f32("q", &q),
                upload_f32("k", &k),
                upload_f32("v", &v),
                upload_f32("f", &f),
            );
            let (kc, vc) = (upload_f32("k_cache", &old), upload_f32("v_cache", &old));
            let (qnb, knb) = (upload_f32("q_norm", &qn), upload_f32("k_norm", &kn));
            let (qnb, knb): (Binding, Binding) = ((&qnb).into(), (&knb).into());
            let norm = qk_norm.then_some(rope::QkNorm {
                q: &qnb,
                k: &knb,
                eps: EPS,
            });
            let mut rec = StepRecorder::new(ctx());
            let shape = rope::RopeKvShape {
                t: t as u32,
                heads: heads as u32,
                kv_heads: kv_heads as u32,
                head_dim: hd as u32,
                pos0: pos0 as u32,
                rotary,
            };
            rope::rope_kv_write(
                &mut rec,
                &(&qb).into(),
                &(&kb).into(),
                &(&vb).into(),
                &(&kc).into(),
                &(&vc).into(),
                &(&fb).into(),
                &shape,
                norm,
            )
            .unwrap();
            rec.submit();
            let what = format!(
                "rope_kv_write {rotary:?} t={t} heads={heads}/{kv_heads} hd={hd} pos0={pos0} \
                 qk_norm={qk_norm}"
            );
            assert_close_f32(
                &format!("{what} q"),
                &read_f32(&qb, q.len()),
                &want_q,
                2e-6,
                1e-5,
            );
            assert_close_f32(
                &format!("{what} k_cache"),
                &read_f32(&kc, old.len()),
                &want_kc,
                2e-6,
                1e-5,
            );
            assert_eq!(
                read_f32(&vc, old.len()),
                want_vc,
                "{what} v_cache: an exact copy"
            );
            assert_eq!(
                read_f32(&kb, k.len()),
                k,
                "{what}: k itself is left unrotated"
            );
        }
    }
}

#[test]
fn rope_rejects_odd_head_dim_and_bad_rotations() {
    let x = ctx().storage_buffer("x", 4 * 32);
    let f = ctx().storage_buffer("f", 4 * 8);
    let run = |head_dim: u32, rotary: Rotary| {
        let mut rec = StepRecorder::new(ctx());
        rope::rope(
            &mut rec,
            &(&x).into(),
            &(&f).into(),
            2,
            1,
            head_dim,
            0,
            rotary,
        )
    };
    let neox = |dims, scale| Rotary {
        layout: RopeLayout::Neox,
        dims,
        scale,
    };
    assert!(run(15, Rotary::full(RopeLayout::Neox, 15)).is_err());
    assert!(run(16, neox(16, 1.0)).is_ok());
    assert!(run(16, neox(12, 1.19)).is_ok());
    for (dims, scale) in [(0, 1.0), (11, 1.0), (18, 1.0), (12, 0.0), (12, f32::NAN)] {
        assert!(
            run(16, neox(dims, scale)).is_err(),
            "{dims} rotated dimensions, scale {scale}"
        );
    }
}
