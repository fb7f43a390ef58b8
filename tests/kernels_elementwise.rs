//! The elementwise kernels: GLU activations and the residual add (`src/kernels/elementwise.rs`) against its CPU reference in
//! `coco::reference::ops`, on whatever adapter wgpu picks (lavapipe in CI).
//!
//! Seeded inputs, odd sizes; each comparison prints its max error, and a failure prints the
//! first element outside `atol + rtol·|ref|` with both values.

mod common;

use coco::gpu::StepRecorder;
use coco::kernels::elementwise::{self, Activation};
use coco::reference::ops;
use common::{assert_close_f32, ctx, random_uniform, read_f32, upload_f32};

#[test]
fn glu_matches_reference() {
    for (seed, &n) in [1usize, 3 * 96, 17 * 100].iter().enumerate() {
        for act in [Activation::Silu, Activation::GeluTanh] {
            // Wide gate range: saturated tails on both sides must stay finite and exact.
            let mut gate = random_uniform(400 + seed as u64, n, 12.0);
            if n > 4 {
                gate[..4].copy_from_slice(&[-100.0, 100.0, -1e-4, 60.0]);
            }
            let up = random_uniform(410 + seed as u64, n, 2.0);
            let want = ops::glu(&gate, &up, act);
            let (gb, ub) = (upload_f32("gate", &gate), upload_f32("up", &up));
            let out = ctx().storage_buffer("out", (n * 4) as u64);
            let mut rec = StepRecorder::new(ctx());
            elementwise::glu(
                &mut rec,
                &(&gb).into(),
                &(&ub).into(),
                &(&out).into(),
                n as u32,
                act,
            )
            .unwrap();
            rec.submit();
            assert_close_f32(
                &format!("glu {act:?} n={n}"),
                &read_f32(&out, n),
                &want,
                1e-6,
                1e-5,
            );
        }
    }
}

#[test]
fn add_matches_reference() {
    for (seed, &n) in [1usize, 17 * 96, 3 * 100].iter().enumerate() {
        let a = random_uniform(500 + seed as u64, n, 4.0);
        let b = random_uniform(510 + seed as u64, n, 4.0);
        let mut want = a.clone();
        ops::add(&mut want, &b);
        let (ab, bb) = (upload_f32("a", &a), upload_f32("b", &b));
        let mut rec = StepRecorder::new(ctx());
        elementwise::add(&mut rec, &(&ab).into(), &(&bb).into(), n as u32).unwrap();
        rec.submit();
        assert_close_f32(&format!("add n={n}"), &read_f32(&ab, n), &want, 0.0, 0.0);
    }
}

/// The grid-barrier probe (`coco probe`'s `grid_sync`) counts every workgroup in at every
/// round: one workgroup always finishes all its rounds (and reads its own values back
/// fresh); a larger grid either finishes them all without a stale read or raises the flag
/// (never hangs, never counts an arrival twice).
#[test]
fn grid_sync_probe_counts_every_round() {
    use coco::kernels::probe::{probe_grid_sync, GRID_SYNC_WORDS};
    for (groups, rounds) in [(1u32, 7u32), (6, 5), (64, 3)] {
        let sync = ctx().storage_buffer_init("sync", &[0u8; GRID_SYNC_WORDS as usize * 4]);
        let slots = ctx().storage_buffer("slots", groups as u64 * 4);
        let mut rec = StepRecorder::new(ctx());
        probe_grid_sync(&mut rec, &(&sync).into(), &(&slots).into(), groups, rounds).unwrap();
        rec.submit();
        let words = ctx().read_buffer(&sync, 0, GRID_SYNC_WORDS * 4).unwrap();
        let arrivals = u32::from_le_bytes(words[0..4].try_into().unwrap());
        let gave_up = u32::from_le_bytes(words[4..8].try_into().unwrap());
        let stale = u32::from_le_bytes(words[8..12].try_into().unwrap());
        println!(
            "grid sync {groups} workgroups × {rounds} rounds: {arrivals} arrivals, \
             gave up {gave_up}, {stale} stale reads"
        );
        if groups == 1 || gave_up == 0 {
            assert_eq!(
                (arrivals, gave_up, stale),
                (groups * rounds, 0, 0),
                "{groups} × {rounds}"
            );
        } else {
            // A workgroup that gave up in the last round may still see the others arrive.
            assert!(
                arrivals <= groups * rounds,
                "{groups} × {rounds}: {arrivals}"
            );
        }
    }
}
