//! Lossless widening of a quantized tensor into a wider block type, block by block.
//!
//! Why: llama.cpp's Q4_K_M Gemma-3-270M keeps W_v at Q8_0 on half its layers and W_q / W_k
//! at Q5_0, so Q/K/V can't share one matvec there and a decode step pays a dispatch more on
//! those layers. Every Q5_0 weight d·(q − 16) is also a Q8_0 weight with the same d and the
//! int8 level q − 16, so Q/K can be stored as Q8_0 at load time and the three products run as
//! one: the GPU holds exactly the values of the file, at more bits per weight for those
//! tensors (`model::widenings` decides where that trade is worth it).
//!
//! The pairs, all with the same scale (and min) per 32-weight block, so each is exact:
//!   Q4_0 → Q5_0  q5 = q4 + 8       (q4 − 8 = q5 − 16)
//!   Q4_0 → Q8_0  q8 = q4 − 8
//!   Q5_0 → Q8_0  q8 = q5 − 16
//!   Q4_1 → Q5_1  q5 = q4           (d·q + m in both)

use super::GgmlType;

const BLOCK: usize = 32;

/// Whether [`widen_blocks`] converts `from` into `to` exactly.
pub fn is_lossless_widening(from: GgmlType, to: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        (from, to),
        (Q4_0, Q5_0) | (Q4_0, Q8_0) | (Q5_0, Q8_0) | (Q4_1, Q5_1)
    )
}

/// The 32 levels of a Q4_0/Q4_1 (`qh` = None) or Q5_0/Q5_1 block's quants, unsigned: the
/// low nibbles of `qs` are elements 0..16, the high nibbles 16..32, and bit j of `qh` is
/// element j's fifth bit.
fn levels(qs: &[u8], qh: Option<u32>) -> [u8; BLOCK] {
    let mut q = [0u8; BLOCK];
    for j in 0..BLOCK / 2 {
        q[j] = qs[j] & 0x0f;
        q[j + 16] = qs[j] >> 4;
    }
    if let Some(qh) = qh {
        for (j, v) in q.iter_mut().enumerate() {
            *v |= (((qh >> j) & 1) as u8) << 4;
        }
    }
    q
}

/// Packs 32 unsigned 5-bit levels as Q5_x's `qh` and `qs`.
fn pack5(q: &[u8; BLOCK], out: &mut Vec<u8>) {
    let qh = q
        .iter()
        .enumerate()
        .fold(0u32, |h, (j, &v)| h | (((v >> 4) as u32 & 1) << j));
    out.extend_from_slice(&qh.to_le_bytes());
    for j in 0..BLOCK / 2 {
        out.push((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
    }
}

/// Converts whole `from` blocks into `to` blocks (a trailing partial block is dropped: only
/// a truncated stream has one, and its load fails). Panics unless
/// [`is_lossless_widening`]`(from, to)`.
pub fn widen_blocks(from: GgmlType, to: GgmlType, bytes: &[u8]) -> Vec<u8> {
    use GgmlType::*;
    assert!(
        is_lossless_widening(from, to),
        "{from} -> {to} is not a lossless widening"
    );
    let (_, from_bytes) = from.block_geometry().expect("quantized type");
    let (_, to_bytes) = to.block_geometry().expect("quantized type");
    let mut out = Vec::with_capacity(bytes.len() / from_bytes * to_bytes);
    for b in bytes.chunks_exact(from_bytes) {
        match (from, to) {
            (Q4_0, Q5_0) => {
                out.extend_from_slice(&b[..2]);
                let mut q = levels(&b[2..18], None);
                q.iter_mut().for_each(|v| *v += 8);
                pack5(&q, &mut out);
            }
            (Q4_1, Q5_1) => {
                out.extend_from_slice(&b[..4]);
                pack5(&levels(&b[4..20], None), &mut out);
            }
            (Q4_0, Q8_0) | (Q5_0, Q8_0) => {
                out.extend_from_slice(&b[..2]);
                let (q, zero) = if from == Q4_0 {
                    (levels(&b[2..18], None), 8)
                } else {
                    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
                    (levels(&b[6..22], Some(qh)), 16)
                };
                out.extend(q.iter().map(|&v| (v as i8 - zero) as u8));
            }
            _ => unreachable!("checked by is_lossless_widening"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::quant::{dequantize, quantize};

    /// Values spread over every level, including each block's extremes.
    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 % 263) as f32 - 131.0) * 0.013 * (1.0 + (i / 32) as f32 * 0.1))
            .collect()
    }

    #[test]
    fn every_widening_keeps_every_value_exactly() {
        use GgmlType::*;
        let n = 32 * 9;
        for (from, to) in [(Q4_0, Q5_0), (Q4_0, Q8_0), (Q5_0, Q8_0), (Q4_1, Q5_1)] {
            let bytes = quantize(from, &values(n)).unwrap();
            let wide = widen_blocks(from, to, &bytes);
            assert_eq!(wide.len(), n / 32 * to.block_geometry().unwrap().1);
            let a = dequantize(from, &bytes, n).unwrap();
            let b = dequantize(to, &wide, n).unwrap();
            assert_eq!(a, b, "{from} -> {to}");
        }
    }

    #[test]
    fn only_exact_pairs_are_widenings() {
        use GgmlType::*;
        assert!(!is_lossless_widening(Q8_0, Q5_0));
        assert!(!is_lossless_widening(Q4_1, Q8_0)); // affine blocks have no Q8_0 form
        assert!(!is_lossless_widening(Q4_K, Q6_K));
        assert!(!is_lossless_widening(Q5_0, Q5_0));
    }

    #[test]
    fn a_partial_trailing_block_is_dropped() {
        let bytes = quantize(GgmlType::Q5_0, &values(64)).unwrap();
        let wide = widen_blocks(GgmlType::Q5_0, GgmlType::Q8_0, &bytes[..22 + 5]);
        assert_eq!(wide.len(), 34);
    }
}
