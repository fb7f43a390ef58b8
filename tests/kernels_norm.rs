//! RMSNorm (`src/kernels/norm.rs`) against its CPU reference in
//! `coco::reference::ops`, on whatever adapter wgpu picks (lavapipe in CI).
//!
//! Seeded inputs, odd sizes; each comparison prints its max error, and a failure prints the
//! first element outside `atol + rtol·|ref|` with both values.

mod common;

use coco::gpu::StepRecorder;
use coco::kernels::norm;
use coco::reference::ops;
use common::{assert_close_f32, ctx, random_uniform, read_f32, upload_f32};

#[test]
fn rms_norm_matches_reference() {
    // (rows, n): a decode row, model-norm rows, gemma3 head-norm rows, a long row.
    for (seed, &(rows, n)) in [
        (1, 96),
        (3, 100),
        (17, 256),
        (3 * 4, 256),
        (2, 1000),
        (1, 1),
    ]
    .iter()
    .enumerate()
    {
        let seed = seed as u64;
        let x = random_uniform(10 + seed, rows * n, 3.0);
        let w = random_uniform(20 + seed, n, 2.0);
        let eps = 1e-6;
        let want = ops::rms_norm(&x, &w, rows, n, eps);
        let (xb, wb) = (upload_f32("x", &x), upload_f32("w", &w));

        let y = ctx().storage_buffer("y", (rows * n * 4) as u64);
        let mut rec = StepRecorder::new(ctx());
        norm::rms_norm(
            &mut rec,
            &(&xb).into(),
            &(&wb).into(),
            &(&y).into(),
            rows as u32,
            n as u32,
            eps,
        )
        .unwrap();
        rec.submit();
        assert_close_f32(
            &format!("rms_norm {rows}x{n}"),
            &read_f32(&y, rows * n),
            &want,
            1e-5,
            1e-5,
        );

        let mut rec = StepRecorder::new(ctx());
        norm::rms_norm_in_place(
            &mut rec,
            &(&xb).into(),
            &(&wb).into(),
            rows as u32,
            n as u32,
            eps,
        )
        .unwrap();
        rec.submit();
        assert_close_f32(
            &format!("rms_norm_in_place {rows}x{n}"),
            &read_f32(&xb, rows * n),
            &want,
            1e-5,
            1e-5,
        );

        // h += norm(x)·w, with x re-uploaded (the in-place run overwrote it).
        let xb = upload_f32("x", &x);
        let h0 = random_uniform(30 + seed, rows * n, 1.0);
        let hb = upload_f32("h", &h0);
        let mut rec = StepRecorder::new(ctx());
        norm::rms_norm_add(
            &mut rec,
            &(&xb).into(),
            &(&wb).into(),
            &(&hb).into(),
            rows as u32,
            n as u32,
            eps,
        )
        .unwrap();
        rec.submit();
        let mut want_h = h0.clone();
        ops::add(&mut want_h, &want);
        assert_close_f32(
            &format!("rms_norm_add {rows}x{n}"),
            &read_f32(&hb, rows * n),
            &want_h,
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn rms_norm_spills_rows_past_the_dispatch_limit() {
    // 65,537 rows need a second row of workgroups; the last rows must still be normalized.
    let (rows, n) = (65_537usize, 3usize);
    let x = random_uniform(40, rows * n, 3.0);
    let w = random_uniform(41, n, 2.0);
    let want = ops::rms_norm(&x, &w, rows, n, 1e-5);
    let (xb, wb) = (upload_f32("x", &x), upload_f32("w", &w));
    let mut rec = StepRecorder::new(ctx());
    norm::rms_norm_in_place(
        &mut rec,
        &(&xb).into(),
        &(&wb).into(),
        rows as u32,
        n as u32,
        1e-5,
    )
    .unwrap();
    rec.submit();
    assert_close_f32(
        "rms_norm 65537x3",
        &read_f32(&xb, rows * n),
        &want,
        1e-5,
        1e-5,
    );
}

#[test]
fn rms_norm_rejects_short_bindings() {
    let x = ctx().storage_buffer("x", 4 * 10);
    let w = ctx().storage_buffer("w", 4 * 5);
    let mut rec = StepRecorder::new(ctx());
    let err =
        norm::rms_norm_in_place(&mut rec, &(&x).into(), &(&w).into(), 3, 5, 1e-6).unwrap_err();
    assert!(err.to_string().contains("`x`"), "{err}");
    assert_eq!(rec.dispatch_count(), 0);
}
