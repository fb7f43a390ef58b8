//! CPU references for `kernels::matmul` and `kernels::get_rows`, in f64 so the GPU's f32 sums
//! are compared against something more exact than themselves.

/// y[T, N] = x[T, K] · w[N, K]ᵀ, accumulated in f64.
pub fn matmul(w: &[f32], x: &[f32], n: usize, k: usize, t: usize) -> Vec<f32> {
    assert_eq!(w.len(), n * k, "w is [N, K]");
    assert_eq!(x.len(), t * k, "x is [T, K]");
    let mut y = vec![0f32; t * n];
    for (xr, yr) in x.chunks_exact(k).zip(y.chunks_exact_mut(n)) {
        for (wr, out) in w.chunks_exact(k).zip(yr.iter_mut()) {
            *out = wr
                .iter()
                .zip(xr)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum::<f64>() as f32;
        }
    }
    y
}

/// Σ_k |w[n, k] · x[t, k]| for each output, [T, N]: the natural scale of the rounding error
/// of an f32 dot product (tests use it as the absolute part of their tolerance).
pub fn matmul_abs(w: &[f32], x: &[f32], n: usize, k: usize, t: usize) -> Vec<f32> {
    let wa: Vec<f32> = w.iter().map(|v| v.abs()).collect();
    let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    matmul(&wa, &xa, n, k, t)
}

/// The tensor-core tiles' x' staging (`shaders/matmul/token_scale.wgsl` with X16) for `t`
/// tokens of `x` `[t, k]`, times `norm`'s weight `[k]` when given (its eps second): each
/// token's power-of-two scale 2^-e, the fewest whole e ≥ 0 bringing its largest |x'| to ≤ 2^15;
/// its row x'·2^-e rounded to f16 (to nearest, ties to even); and the factor its sums are
/// multiplied by, 2^e, times rsqrt(mean(x²) + eps) when normed. Returns (factors `[t]`,
/// rows `[t, k]`).
pub fn stage_x_f16(
    x: &[f32],
    norm: Option<(&[f32], f32)>,
    t: usize,
    k: usize,
) -> (Vec<f32>, Vec<half::f16>) {
    assert_eq!(x.len(), t * k, "x is [T, K]");
    let mut factors = Vec::with_capacity(t);
    let mut rows = Vec::with_capacity(t * k);
    for xr in x.chunks_exact(k) {
        let staged: Vec<f32> = match norm {
            Some((w, _)) => xr.iter().zip(w).map(|(a, b)| a * b).collect(),
            None => xr.to_vec(),
        };
        let largest = staged.iter().fold(0f32, |m, v| m.max(v.abs()));
        let e = (largest.log2().ceil() - 15.0).max(0.0);
        let scale = (-e).exp2();
        rows.extend(staged.iter().map(|v| half::f16::from_f32(v * scale)));
        let norm_factor = norm.map_or(1.0, |(_, eps)| {
            let mean = xr.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / k as f64;
            1.0 / (mean + eps as f64).sqrt()
        });
        factors.push((norm_factor / scale as f64) as f32);
    }
    (factors, rows)
}

/// `out[T, dim] = scale · table[ids[t], :]` for a `[rows, dim]` table. An id past the table
/// gives a zero row, as the GPU kernel writes.
pub fn get_rows(table: &[f32], dim: usize, ids: &[u32], scale: f32) -> Vec<f32> {
    let rows = table.len() / dim.max(1);
    let mut out = vec![0f32; ids.len() * dim];
    for (&id, o) in ids.iter().zip(out.chunks_exact_mut(dim)) {
        if (id as usize) < rows {
            for (v, &w) in o.iter_mut().zip(&table[id as usize * dim..][..dim]) {
                *v = scale * w;
            }
        }
    }
    out
}
