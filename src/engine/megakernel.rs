//! The FFN megakernel switch (`Session::set_megakernel`) and the correctness check that
//! guards it (DESIGN.md "The pipeline": turning it on first runs a check against the normal
//! path and shows the max |Δ|).
//!
//! The check feeds the same deterministic hidden-state rows through both FFN paths on the
//! GPU, for the first and the last layer, and compares what each adds to the residual
//! stream. Both paths compute the same f32 math and differ only in summation order (the
//! megakernel reduces each row's 32 lanes in its own tree; the fused path may use subgroup
//! sums, the unfused one stores x' and h in between), so they agree to roughly
//! `√K · 2⁻²⁴ ≈ 1e-5` relative for K ≤ 16k terms, and the worst case `K · 2⁻²⁴` is 1e-3 at
//! K = 16,384. [`TOLERANCE_REL`] = 1e-3 therefore passes any honest implementation, while a
//! wrong row, block or scale gives errors of order 1.

use std::fmt;

use crate::gpu::StepRecorder;
use crate::model::{self, Step};

use super::{EngineError, Session};

/// Largest accepted |Δ| relative to the RMS of the FFN's contribution in that row (see the
/// module docs for why 1e-3).
pub const TOLERANCE_REL: f32 = 1e-3;

/// Hidden-state rows the check runs (≤ the session's scratch rows). Three: more than one
/// workgroup, and each row with its own magnitude so a wrong per-row norm shows.
const CHECK_ROWS: u32 = 3;

/// The outcome of comparing the megakernel with the normal FFN path.
#[derive(Clone, Debug, PartialEq)]
pub struct MegakernelCheck {
    pub passed: bool,
    /// max |megakernel − normal| over every compared value.
    pub max_abs: f32,
    /// max |Δ| / RMS(normal FFN contribution of that row).
    pub max_rel: f32,
    /// Token rows compared (rows × layers checked).
    pub rows: u32,
    /// Which layers and tolerance, or why the megakernel can't run here.
    pub detail: String,
}

impl fmt::Display for MegakernelCheck {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "megakernel check {}: max |Δ| {:.2e}, max rel {:.2e} over {} rows ({})",
            if self.passed { "passed" } else { "FAILED" },
            self.max_abs,
            self.max_rel,
            self.rows,
            self.detail
        )
    }
}

impl Session {
    /// Turns the FFN megakernel on or off. Turning it on first runs [`Session::check_megakernel`]
    /// and leaves the switch off (returning the failed check) unless it passes. Turning it
    /// off needs no check.
    pub async fn set_megakernel(&mut self, on: bool) -> Result<MegakernelCheck, EngineError> {
        if !on {
            self.megakernel = false;
            return Ok(MegakernelCheck {
                passed: true,
                max_abs: 0.0,
                max_rel: 0.0,
                rows: 0,
                detail: "megakernel off; nothing to check".into(),
            });
        }
        let check = self.check_megakernel().await?;
        self.megakernel = check.passed;
        Ok(check)
    }

    #[cfg(not(target_arch = "wasm32"))]
    pub fn set_megakernel_blocking(&mut self, on: bool) -> Result<MegakernelCheck, EngineError> {
        pollster::block_on(self.set_megakernel(on))
    }

    /// Runs the same rows through the megakernel and the session's pipeline (fused or
    /// unfused) for the first and last layer, and compares the results. Uses the session's
    /// scratch activations (not its KV cache), so call it between steps.
    pub async fn check_megakernel(&self) -> Result<MegakernelCheck, EngineError> {
        let c = &self.model.config;
        if let Err(why) = model::megakernel_support(&self.model, &self.ctx) {
            return Ok(MegakernelCheck {
                passed: false,
                max_abs: f32::NAN,
                max_rel: f32::NAN,
                rows: 0,
                detail: format!("not yet: {why}"),
            });
        }
        let rows = CHECK_ROWS.min(self.scratch.rows);
        let dim = c.dim as usize;
        let mut layers = vec![0, c.n_layers as usize - 1];
        layers.dedup();
        let (mut max_abs, mut max_rel) = (0f32, 0f32);
        for &l in &layers {
            let x0 = check_rows(rows, dim, l);
            let normal = self.run_ffn(l, &x0, false).await?;
            let mega = self.run_ffn(l, &x0, true).await?;
            for r in 0..rows as usize {
                let span = r * dim..(r + 1) * dim;
                // What the FFN added to the row, by the normal path, in f64.
                let added: Vec<f64> = span
                    .clone()
                    .map(|i| normal[i] as f64 - x0[i] as f64)
                    .collect();
                let rms = (added.iter().map(|v| v * v).sum::<f64>() / dim as f64).sqrt();
                for i in span {
                    let d = (mega[i] as f64 - normal[i] as f64).abs();
                    let rel = d / rms.max(f64::MIN_POSITIVE);
                    // NaN anywhere must fail, so compare with `!(x <= max)`-safe folds.
                    max_abs = nan_max(max_abs, d as f32);
                    max_rel = nan_max(max_rel, rel as f32);
                }
            }
        }
        let passed = max_rel <= TOLERANCE_REL; // false for NaN
        let names: Vec<String> = layers.iter().map(|l| l.to_string()).collect();
        Ok(MegakernelCheck {
            passed,
            max_abs,
            max_rel,
            rows: rows * layers.len() as u32,
            detail: format!(
                "layers {} vs the {:?} path; tolerance rel {TOLERANCE_REL:.0e}",
                names.join(", "),
                self.pipeline
            ),
        })
    }

    /// Writes `x0` `[rows, dim]` into the residual stream, records only layer `l`'s FFN half
    /// (megakernel or not), and reads the stream back.
    async fn run_ffn(
        &self,
        l: usize,
        x0: &[f32],
        megakernel: bool,
    ) -> Result<Vec<f32>, EngineError> {
        let s = &self.scratch;
        let rows = (x0.len() / self.model.config.dim as usize) as u32;
        self.ctx
            .queue
            .write_buffer(&s.x, 0, bytemuck::cast_slice(x0));
        let mut rec = StepRecorder::new(&self.ctx);
        // The two sides of the check, each with its own plan (the session's stays as it is).
        let plan = model::Plan::new(&self.model, &self.ctx, self.pipeline, megakernel);
        let step = Step {
            model: &self.model,
            kv: &self.kv,
            s,
            t: rows,
            pos0: 0,
            plan: &plan,
        };
        model::ffn(&mut rec, &step, l)?;
        rec.submit();
        let bytes = self
            .ctx
            .read_buffer_async(&s.x, 0, x0.len() as u64 * 4)
            .await?;
        Ok(bytemuck::cast_slice::<u8, f32>(&bytes[..x0.len() * 4]).to_vec())
    }
}

/// max that lets a NaN through (so a NaN result fails the check).
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

/// Deterministic hidden-state rows `[rows, dim]`: hashed values in [-1, 1), row r scaled by
/// 0.5 · 4^r (0.5, 2, 8), so each row has its own RMS, as real tokens do.
fn check_rows(rows: u32, dim: usize, layer: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows as usize * dim);
    for r in 0..rows as usize {
        let scale = 0.5 * 4f32.powi(r as i32);
        for i in 0..dim {
            // splitmix64 of (layer, row, i): well mixed, no dependency on `rand`.
            let mut z = ((layer as u64) << 40 | (r as u64) << 32 | i as u64)
                .wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let unit = (z >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            out.push(scale * (2.0 * unit - 1.0));
        }
    }
    out
}
