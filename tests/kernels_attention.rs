//! Attention: prefill tiles, decode, split-K and its combine (`src/kernels/attention.rs`) against its CPU reference in
//! `coco::reference::ops`, on whatever adapter wgpu picks (lavapipe in CI).
//!
//! Seeded inputs, odd sizes; each comparison prints its max error, and a failure prints the
//! first element outside `atol + rtol·|ref|` with both values.

mod common;

use coco::gpu::{Binding, StepRecorder};
use coco::kernels::attention::{self, AttentionShape};
use coco::reference::ops;
use common::{assert_close_f32, ctx, random_uniform, read_f32, upload_f32};

/// Writes a prefill chunk of `pos0` tokens and then the step's `t` tokens through
/// `kv_write`, runs `attention` for the step, and compares cache and output with the CPU.
/// Returns the plan the kernel followed.
fn check_attention(seed: u64, shape: AttentionShape) -> attention::AttentionPlan {
    let AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        ..
    } = shape;
    let (t, heads, kv_heads, hd, pos0) = (
        t as usize,
        heads as usize,
        kv_heads as usize,
        head_dim as usize,
        pos0 as usize,
    );
    let ctx_len = pos0 + t + 3; // some unused rows at the end, which must stay unread
    let row = kv_heads * hd;
    // Amplitude 2 gives peaky and flat softmax rows alike.
    let k_all = random_uniform(seed, (pos0 + t) * row, 2.0);
    let v_all = random_uniform(seed + 1, (pos0 + t) * row, 2.0);
    let q = random_uniform(seed + 2, t * heads * hd, 2.0);

    let k_cache = ctx().storage_buffer("k_cache", (ctx_len * row * 4) as u64);
    let v_cache = ctx().storage_buffer("v_cache", (ctx_len * row * 4) as u64);
    let (kc, vc): (Binding, Binding) = ((&k_cache).into(), (&v_cache).into());
    // Garbage in the unused rows: the mask must keep them out.
    let tail = vec![1e4f32; 3 * row];
    ctx().queue.write_buffer(
        &k_cache,
        ((pos0 + t) * row * 4) as u64,
        bytemuck::cast_slice(&tail),
    );
    ctx().queue.write_buffer(
        &v_cache,
        ((pos0 + t) * row * 4) as u64,
        bytemuck::cast_slice(&tail),
    );

    let mut rec = StepRecorder::new(ctx());
    // The earlier tokens as one prefill chunk, then this step's tokens: rows pos0.. must
    // land after rows 0..pos0 without disturbing them.
    let mut chunks = vec![(pos0, t)];
    if pos0 > 0 {
        chunks.insert(0, (0, pos0));
    }
    let mut keep = Vec::new();
    for (start, len) in chunks {
        let kb = upload_f32("k", &k_all[start * row..(start + len) * row]);
        let vb = upload_f32("v", &v_all[start * row..(start + len) * row]);
        attention::kv_write(
            &mut rec,
            &(&kb).into(),
            &(&vb).into(),
            &kc,
            &vc,
            len as u32,
            kv_heads as u32,
            hd as u32,
            start as u32,
        )
        .unwrap();
        keep.push((kb, vb));
    }
    let qb = upload_f32("q", &q);
    let out = ctx().storage_buffer("out", (t * heads * hd * 4) as u64);
    // Sized as the engine sizes it, for this step's tokens and cache rows; the arrival
    // counters zeroed as a new buffer is, and the records NaN-filled, so a partial the split
    // pass failed to write shows.
    let n_partials = attention::partials_len(heads as u32, hd as u32, t as u32, ctx_len as u32);
    let mut partials = vec![f32::NAN; n_partials.max(1) as usize];
    let counters = (attention::RANGE_COUNTERS as usize).min(partials.len());
    partials[..counters].fill(0.0);
    let partials = upload_f32("partials", &partials);
    let plan = attention::plan(&shape);
    attention::attention(
        &mut rec,
        &(&qb).into(),
        &kc,
        &vc,
        &(&out).into(),
        &(&partials).into(),
        &shape,
    )
    .unwrap();
    rec.submit();

    let filled = (pos0 + t) * row;
    assert_eq!(read_f32(&k_cache, filled), k_all, "k_cache rows 0..pos0+t");
    assert_eq!(read_f32(&v_cache, filled), v_all, "v_cache rows 0..pos0+t");

    let want = ops::attention(&q, &k_all, &v_all, &shape);
    let what = format!(
        "attention t={t} heads={heads}/{kv_heads} hd={hd} pos0={pos0} window={} ({} keys max, \
         {} ranges of {})",
        shape.window,
        pos0 + t,
        plan.splits,
        plan.chunk
    );
    // The tensor-core single pass (attention_coop.wgsl) rounds q, k, v and p to f16 (2^-11
    // relative each) and sums in f32; the f32 kernels stay within 5e-5.
    let coop = plan.splits == 1 && attention::coop_tile(ctx(), head_dim, shape.t).is_some();
    let (atol, rtol) = if coop { (2e-3, 4e-3) } else { (5e-6, 5e-5) };
    let what = format!("{what}{}", if coop { ", tensor cores" } else { "" });
    assert_close_f32(&what, &read_f32(&out, want.len()), &want, atol, rtol);
    plan
}

fn shape(
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    pos0: u32,
    window: u32,
) -> AttentionShape {
    AttentionShape {
        t,
        heads,
        kv_heads,
        head_dim,
        pos0,
        window,
        scale: 1.0 / (head_dim as f32).sqrt(),
        softcap: 0.0,
    }
}

#[test]
fn attention_prefill_matches_reference() {
    check_attention(100, shape(1, 4, 2, 64, 0, 0));
    check_attention(110, shape(3, 4, 1, 96, 0, 0));
    check_attention(120, shape(17, 6, 6, 100, 0, 0));
    check_attention(130, shape(17, 4, 2, 256, 0, 5));
    check_attention(140, shape(3, 4, 1, 32, 0, 5));
}

#[test]
fn attention_tiled_prefill_matches_reference() {
    // t · heads above 512, so the single-pass tiled kernel runs: several query tiles (16, 8
    // and 4 tokens for head_dim 64, 128 and 256; 8 for 100), partial last tiles, windows
    // that cut across tiles and key blocks, and a step that starts deep in the cache. Head
    // sizes 32 and 96 (phi3's) take the tensor-core kernel's other tiles where it runs (32:
    // 64 × 32 on lavapipe 26; 96: 64 × 32 on a 48 KiB GPU, the f32 tiles on lavapipe).
    for (seed, s) in [
        (150, shape(33, 32, 8, 64, 0, 20)),
        (160, shape(70, 8, 2, 128, 0, 0)),
        (170, shape(130, 4, 1, 256, 10, 50)),
        (180, shape(100, 6, 3, 100, 37, 0)),
        (190, shape(520, 2, 1, 64, 5, 0)),
        (195, shape(90, 8, 2, 32, 3, 0)),
        (198, shape(75, 8, 4, 96, 20, 40)),
    ] {
        let plan = check_attention(seed, s);
        assert_eq!(plan.splits, 1, "{s:?}");
    }
}

/// Which single-pass variant the tests above ran: with `COCO_ATTN_BLOCKED=1` (scripts/test.sh's
/// second kernel pass) head_dim 64 computes its scores in 2 × 2 blocks, and head_dim 128 too
/// where the device holds its 16 × 32 tile (27 KiB: lavapipe's 32 KiB do); without it, the
/// 16 KiB tiles as ever.
#[test]
fn attention_tiled_variant_follows_the_switch() {
    let ctx = ctx();
    let wg_bytes = ctx.limits.max_compute_workgroup_storage_size;
    for (hd, tile) in [(64, (16, 32)), (128, (16, 32)), (256, (8, 16))] {
        let (bq, bk) = tile;
        let bytes = 16 * (bq + bk) * (hd / 4 + 1) + 4 * bq * (bk + 1);
        let c = attention::tiled_choice(ctx, hd);
        if !ctx.attention_blocked {
            assert_eq!(c.label, format!("attention_tiled_hd{hd}"));
            assert_eq!((c.bq, c.bk), attention::tiled_tile(hd));
            assert!(!c.blocked);
            continue;
        }
        let large = bytes <= wg_bytes;
        if large {
            assert_eq!((c.bq, c.bk), tile, "head_dim {hd} on {wg_bytes} bytes");
        }
        assert_eq!(c.blocked, c.bq * c.bk == 512, "{}", c.label);
        assert_eq!(c.blocked, hd == 64 || (hd == 128 && large), "{}", c.label);
        println!(
            "head_dim {hd}: {} ({wg_bytes} bytes of workgroup memory)",
            c.label
        );
    }
}

#[test]
fn attention_decode_after_prefill_matches_reference() {
    // Decode one token after a prefill, a 3-token chunk across a window boundary, and a
    // query seeing ~600 keys (several 128-key blocks of the online softmax).
    check_attention(200, shape(1, 4, 2, 64, 16, 0));
    check_attention(210, shape(3, 4, 2, 96, 9, 5));
    check_attention(220, shape(1, 4, 1, 128, 599, 0));
    check_attention(230, shape(17, 6, 6, 64, 583, 0));
    check_attention(240, shape(3, 4, 2, 256, 600, 5));
}

#[test]
fn attention_gemma_scale_and_long_window() {
    // gemma3-like: head_dim 256, scale from query_pre_attn_scalar, a window longer than
    // one 128-key block that still cuts the context.
    let mut s = shape(5, 4, 1, 256, 300, 200);
    s.scale = 1.0 / 256f32.sqrt();
    check_attention(300, s);
}

#[test]
fn attention_softcap_matches_reference_on_every_path() {
    // Gemma 2's attention soft-cap, cap·tanh(s / cap), on each path the plan picks: a decode
    // step that splits its keys, a decode step of at most 16 keys (single pass), and a
    // prefill (single pass, several query tiles), with and without a sliding window.
    // Amplitude-2 inputs over head_dim 64 give scaled scores of a few units, so a cap of 1.5
    // bends most of them; the uncapped result must then differ, or the cap was not applied.
    let cases = [
        (4000, shape(1, 4, 2, 64, 300, 0), true),
        (4010, shape(3, 4, 1, 64, 200, 40), true),
        (4020, shape(1, 8, 4, 256, 9, 0), false),
        (4030, shape(40, 16, 8, 64, 0, 0), false),
        (4040, shape(33, 32, 8, 64, 0, 20), false),
        (4050, shape(9, 4, 1, 256, 0, 4), false),
    ];
    for (seed, mut s, splits) in cases {
        s.softcap = 1.5;
        let plan = check_attention(seed, s);
        assert_eq!(plan.splits > 1, splits, "{s:?}: {plan:?}");
        // The cap matters at these scales: the reference without it is far off.
        let (t, heads, kv, hd) = (
            s.t as usize,
            s.heads as usize,
            s.kv_heads as usize,
            s.head_dim as usize,
        );
        let rows = (s.pos0 as usize + t) * kv * hd;
        let k = random_uniform(seed, rows, 2.0);
        let v = random_uniform(seed + 1, rows, 2.0);
        let q = random_uniform(seed + 2, t * heads * hd, 2.0);
        let capped = ops::attention(&q, &k, &v, &s);
        let plain = ops::attention(&q, &k, &v, &AttentionShape { softcap: 0.0, ..s });
        let diff = capped
            .iter()
            .zip(&plain)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(
            diff > 0.05,
            "{s:?}: the soft-cap moves the output by only {diff}"
        );
    }
}

#[test]
fn attention_split_matches_reference() {
    // Flash-decoding shapes: Llama-3.2-1B (32/8 × 64), Gemma-3-270M (4/1 × 256) and
    // Qwen2-0.5B (14/2 × 64); decode (t = 1) and a 2-token step; from one key to several
    // thousand; no window, a window inside one block, and one spanning ranges.
    let mut seed = 1000;
    for (heads, kv_heads, hd) in [(32, 8, 64), (4, 1, 256), (14, 2, 64)] {
        for t in [1, 2] {
            for keys in [1, 100, 700, 3000] {
                for window in [0, 5, 512] {
                    let keys: u32 = keys.max(t);
                    let s = shape(t, heads, kv_heads, hd, keys - t, window);
                    let plan = check_attention(seed, s);
                    seed += 10;
                    // More than one 16-key block of visible keys always splits at these
                    // head counts.
                    let visible = if window == 0 { keys } else { keys.min(window) };
                    assert_eq!(plan.splits > 1, visible > 16, "{s:?}: {plan:?}");
                }
            }
        }
    }
}

#[test]
fn attention_split_edge_ranges() {
    // Two tokens at 128 and 129 keys: five 32-key ranges (past 128 keys, head_dim 64 takes
    // two blocks at least), the first token's last one empty.
    let plan = check_attention(2000, shape(2, 4, 1, 64, 127, 0));
    assert_eq!((plan.splits, plan.chunk), (5, 32));
    // 65 keys: four one-block ranges (short contexts) and a one-key range. head_dim / 4 = 25
    // does not divide the 128 invocations (5 value groups, 3 idle invocations) nor the 8
    // score lanes.
    let plan = check_attention(2010, shape(1, 4, 2, 100, 64, 0));
    assert_eq!((plan.splits, plan.chunk), (5, 16));
    // One-block ranges: head_dim 256 (a block is 32 KiB of K and V), the first token's last
    // range empty.
    let plan = check_attention(2005, shape(2, 4, 1, 256, 127, 0));
    assert_eq!((plan.splits, plan.chunk), (9, 16));
    // Enough tokens for the single pass: t · heads above 512.
    let plan = check_attention(2020, shape(17, 32, 8, 64, 600, 0));
    assert_eq!(plan.splits, 1);
    // Just under it, a 64-token step still splits (`coco logits` steps 64 tokens; with
    // Gemma-3-270M's 4 heads that is this shape).
    let plan = check_attention(2030, shape(64, 4, 1, 256, 300, 0));
    assert!(plan.splits > 1, "{plan:?}");
}

#[test]
fn attention_split_decode_shapes() {
    // The shapes the H200 decode profile measured, at query positions around the 16-key
    // block and 32/64-key chunk boundaries: Gemma-3-270M (4/1 heads × 256, local layers with
    // a window, here 8, and global ones without) and Llama-3.2-1B (32/8 × 64). t = 3 puts
    // the step's earlier tokens one and two keys short of the plan's last range.
    let mut seed = 3000;
    let mut split = 0;
    for (heads, kv_heads, hd, windows) in [(4, 1, 256, [8, 0]), (32, 8, 64, [0, 8])] {
        for pos in [15, 16, 17, 63, 64, 65, 511, 512, 1000] {
            for t in [1, 3] {
                for window in windows {
                    let mut s = shape(t, heads, kv_heads, hd, pos, window);
                    if hd == 256 {
                        s.scale = 1.0 / 256f32.sqrt(); // query_pre_attn_scalar = 256
                    }
                    let plan = check_attention(seed, s);
                    seed += 10;
                    split += (plan.splits > 1) as u32;
                    // A range is one 16-key block up to 128 keys, beyond that at least
                    // 16 KiB of K and V in whole blocks: one of head_dim 256, two of 64.
                    // Past one range, these shapes split.
                    let visible = if window == 0 {
                        pos + t
                    } else {
                        window.min(pos + t)
                    };
                    let least = if visible <= 128 {
                        16
                    } else {
                        (16 * 1024 / (8 * hd)).next_multiple_of(16)
                    };
                    assert_eq!(plan.splits > 1, visible > least, "{s:?}: {plan:?}");
                    if plan.splits > 1 {
                        assert_eq!(plan.chunk % 16, 0, "{s:?}: {plan:?}");
                        // The last token's keys are all covered, by non-empty ranges.
                        assert!(plan.splits * plan.chunk >= visible, "{s:?}: {plan:?}");
                        assert!((plan.splits - 1) * plan.chunk < visible, "{s:?}: {plan:?}");
                    }
                }
            }
        }
    }
    // Window 8 never splits (8 keys).
    assert!(
        split >= 29,
        "only {split} of the shapes took the split path"
    );
    // The decode plans the per-layer predictions in attention.rs assume (513 keys).
    let p = attention::plan(&shape(1, 4, 1, 256, 512, 0));
    assert_eq!((p.splits, p.chunk), (33, 16));
    let p = attention::plan(&shape(1, 32, 8, 64, 512, 0));
    assert_eq!((p.splits, p.chunk), (11, 48));
    // Qwen2.5-0.5B: 14 heads of 64, ranges of two blocks (the 16 KiB floor), not one.
    let p = attention::plan(&shape(1, 14, 2, 64, 512, 0));
    assert_eq!((p.splits, p.chunk), (17, 32));
}

#[test]
fn attention_partials_len_covers_every_plan() {
    // The engine allocates partials_len once, for its largest step and its context; every
    // (t, pos0, window) it can run must fit, and no plan may pass the combine's 1024 ranges.
    for (heads, hd) in [(32, 64), (4, 256), (14, 64), (1, 8)] {
        for context in [1, 16, 17, 33, 64, 65, 129, 700, 4096, 32768] {
            let max_t = 64;
            let have = attention::partials_len(heads, hd, max_t, context);
            for t in 1..=max_t.min(context) {
                let step = if context > 1000 { 37 } else { 1 };
                for keys in (t..=context).step_by(step).chain([context]) {
                    for window in [0, 8, 512] {
                        let s = shape(t, heads, heads, hd, keys - t, window);
                        let p = attention::plan(&s);
                        let need = if p.splits > 1 {
                            (t * heads * p.splits * (hd + 4)) as u64
                        } else {
                            0
                        };
                        assert!(need <= have, "{s:?} {p:?}: needs {need}, have {have}");
                        assert!(p.splits <= 1024, "{s:?} {p:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn attention_rejects_bad_shapes() {
    let b = ctx().storage_buffer("b", 4 * 4096);
    let b: Binding = (&b).into();
    let mut rec = StepRecorder::new(ctx());
    assert!(
        attention::attention(&mut rec, &b, &b, &b, &b, &b, &shape(1, 4, 3, 8, 0, 0)).is_err(),
        "heads % kv_heads"
    );
    assert!(
        attention::attention(&mut rec, &b, &b, &b, &b, &b, &shape(1, 1, 1, 512, 0, 0)).is_err(),
        "head_dim > 256"
    );
    assert!(
        attention::attention(&mut rec, &b, &b, &b, &b, &b, &shape(1, 2, 1, 6, 0, 0)).is_err(),
        "head_dim not a multiple of 4"
    );
    assert!(
        attention::attention(&mut rec, &b, &b, &b, &b, &b, &shape(1, 4, 4, 64, 100, 0)).is_err(),
        "cache too short"
    );
    assert_eq!(rec.dispatch_count(), 0);
}
