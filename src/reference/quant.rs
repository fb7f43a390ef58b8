//! CPU dequantizers and quantizers for the ggml block types coco reads: the oracle the GPU's
//! in-register dequantization (`shaders/common/dequant.wgsl`) is tested against.
//!
//! Block layouts and dequantization follow ggml's `ggml-common.h` structs and the
//! `dequantize_row_*` functions of `ggml-quants.c` (checked byte for byte against gguf-py's
//! `gguf.quants` by `tests/goldens/quant_*.json`, written by `tools/quant_goldens.py`):
//!
//! | type | elems | bytes | layout |
//! |------|------:|------:|--------|
//! | Q8_0 | 32  | 34  | `d: f16, qs: [i8; 32]`; w = d·q |
//! | Q4_0 | 32  | 18  | `d: f16, qs: [u8; 16]`; elem j < 16 in the low nibble of `qs[j]`, j+16 in the high; w = d·(q − 8) |
//! | Q5_0 | 32  | 22  | `d: f16, qh: u32 (LE), qs: [u8; 16]`; like Q4_0 plus bit 4 = bit j of qh; w = d·(q − 16) |
//! | Q4_1 | 32  | 20  | `d, m: f16, qs: [u8; 16]`; nibbles as Q4_0; w = d·q + m |
//! | Q5_1 | 32  | 24  | `d, m: f16, qh: u32 (LE), qs: [u8; 16]`; q as Q5_0; w = d·q + m |
//! | IQ4_NL | 32 | 18 | `d: f16, qs: [u8; 16]`; nibbles as Q4_0 index [`IQ4_GRID`]; `w = d·grid[q]` |
//! | Q2_K | 256 | 84  | `scales: [u8; 16], qs: [u8; 64], d, dmin: f16`; 16 sub-blocks of 16, scale low nibble, min high; elem e: bits 2((e%128)/32) of qs[32(e/128) + e%32]; w = d·sc·q − dmin·m |
//! | Q3_K | 256 | 110 | `hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12], d: f16`; 2 low bits as Q2_K, bit 2 = bit (e/32) of hmask[e%32], 6-bit scales − 32; w = d·sc·(q − 4) |
//! | IQ4_XS | 256 | 136 | `d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]`; 8 sub-blocks of 32 as IQ4_NL, 6-bit scale − 32 (low nibble of scales_l, 2 bits of scales_h); `w = d·sc·grid[q]` |
//! | Q4_K | 256 | 144 | `d, dmin: f16, scales: [u8; 12], qs: [u8; 128]`; 8 sub-blocks of 32, 6-bit scale/min each; w = d·sc·q − dmin·m |
//! | Q5_K | 256 | 176 | `d, dmin, scales[12], qh: [u8; 32], qs[128]`; like Q4_K, bit 4 of sub-block s elem l = bit s of `qh[l]` |
//! | Q6_K | 256 | 210 | `ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16`; 16 sub-blocks of 16; w = d·sc·(q − 32) |
//!
//! The quantizers exist so tests can make quantized tensors in Rust. Q8_0/Q4_0/Q5_0/Q4_1/Q5_1
//! follow ggml's reference rounding (and so reproduce gguf-py's bytes); the K-quant and IQ4
//! packers are simple min/max fits, valid blocks of lower quality than llama.cpp's searched
//! scales (gguf-py has no quantizer for them to compare with).

use half::f16;

use crate::gguf::GgmlType;

/// Elements per K-quant super-block (ggml's `QK_K`).
pub const QK_K: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    #[error("{0}: not a type coco can (de)quantize")]
    Unsupported(GgmlType),
    #[error("{ty}: {n} elements is not a whole number of {block}-element blocks")]
    PartialBlock {
        ty: GgmlType,
        n: usize,
        block: usize,
    },
    #[error("{ty}: {n} elements need {need} bytes, got {got}")]
    Short {
        ty: GgmlType,
        n: usize,
        need: usize,
        got: usize,
    },
}

/// (elements per block, bytes per block) for the types this module handles.
fn geometry(ty: GgmlType, n: usize) -> Result<(usize, usize), QuantError> {
    if !ty.is_supported() {
        return Err(QuantError::Unsupported(ty));
    }
    let (block, bytes) = ty.block_geometry().ok_or(QuantError::Unsupported(ty))?;
    if !n.is_multiple_of(block) {
        return Err(QuantError::PartialBlock { ty, n, block });
    }
    Ok((block, bytes))
}

/// Bytes `n` elements of `ty` take.
pub fn byte_len(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    let (block, bytes) = geometry(ty, n)?;
    Ok(n / block * bytes)
}

/// The first `n` elements stored in `bytes` as f32.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>, QuantError> {
    let (block, block_bytes) = geometry(ty, n)?;
    let need = n / block * block_bytes;
    if bytes.len() < need {
        return Err(QuantError::Short {
            ty,
            n,
            need,
            got: bytes.len(),
        });
    }
    let mut out = vec![0f32; n];
    let blocks = bytes[..need].chunks_exact(block_bytes);
    for (b, y) in blocks.zip(out.chunks_exact_mut(block)) {
        match ty {
            GgmlType::F32 => y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            GgmlType::F16 => y[0] = f16_at(b, 0),
            GgmlType::BF16 => {
                y[0] = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16)
            }
            GgmlType::Q8_0 => dequant_q8_0(b, y),
            GgmlType::Q4_0 => dequant_q4_0(b, y),
            GgmlType::Q5_0 => dequant_q5_0(b, y),
            GgmlType::Q4_K => dequant_q4_k(b, y),
            GgmlType::Q5_K => dequant_q5_k(b, y),
            GgmlType::Q6_K => dequant_q6_k(b, y),
            GgmlType::Q4_1 => dequant_qx_1(b, y, false),
            GgmlType::Q5_1 => dequant_qx_1(b, y, true),
            GgmlType::IQ4_NL => dequant_iq4_nl(b, y),
            GgmlType::Q2_K => dequant_q2_k(b, y),
            GgmlType::Q3_K => dequant_q3_k(b, y),
            GgmlType::IQ4_XS => dequant_iq4_xs(b, y),
            other => return Err(QuantError::Unsupported(other)),
        }
    }
    Ok(out)
}

/// `values` packed as `ty` (see the module docs for the rounding each type uses).
pub fn quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>, QuantError> {
    let (block, block_bytes) = geometry(ty, values.len())?;
    let mut out = vec![0u8; values.len() / block * block_bytes];
    for (x, b) in values
        .chunks_exact(block)
        .zip(out.chunks_exact_mut(block_bytes))
    {
        match ty {
            GgmlType::F32 => b.copy_from_slice(&x[0].to_le_bytes()),
            GgmlType::F16 => b.copy_from_slice(&f16::from_f32(x[0]).to_le_bytes()),
            // Round to nearest even on the dropped 16 bits (NaN kept quiet), as ggml's
            // `ggml_compute_fp32_to_bf16` does.
            GgmlType::BF16 => {
                let bits = x[0].to_bits();
                let h = if x[0].is_nan() {
                    (bits >> 16) | 64
                } else {
                    (bits + (0x7fff + ((bits >> 16) & 1))) >> 16
                };
                b.copy_from_slice(&(h as u16).to_le_bytes());
            }
            GgmlType::Q8_0 => quant_q8_0(x, b),
            GgmlType::Q4_0 => quant_qx_0(x, b, 4),
            GgmlType::Q5_0 => quant_qx_0(x, b, 5),
            GgmlType::Q4_K => quant_q45_k(x, b, false),
            GgmlType::Q5_K => quant_q45_k(x, b, true),
            GgmlType::Q6_K => quant_q6_k(x, b),
            GgmlType::Q4_1 => quant_qx_1(x, b, false),
            GgmlType::Q5_1 => quant_qx_1(x, b, true),
            GgmlType::IQ4_NL => quant_iq4_nl(x, b),
            GgmlType::Q2_K => quant_q2_k(x, b),
            GgmlType::Q3_K => quant_q3_k(x, b),
            GgmlType::IQ4_XS => quant_iq4_xs(x, b),
            other => return Err(QuantError::Unsupported(other)),
        }
    }
    Ok(out)
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn put_f16(b: &mut [u8], at: usize, v: f16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// The smallest f16 ≥ `v` (for v ≥ 0): a super-block scale rounded down would push the
/// largest sub-block scale past its 6-bit (or int8) range.
fn f16_at_least(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

// ---- dequantizers (ggml-quants.c `dequantize_row_*`) ----

fn dequant_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for (v, &q) in y.iter_mut().zip(&b[2..34]) {
        *v = d * (q as i8) as f32;
    }
}

fn dequant_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        let q = b[2 + j];
        y[j] = d * ((q & 15) as i32 - 8) as f32;
        y[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
    }
}

fn dequant_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    for j in 0..16 {
        let q = b[6 + j];
        let lo = (q & 15) as u32 | ((qh >> j) & 1) << 4;
        let hi = (q >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * (lo as i32 - 16) as f32;
        y[j + 16] = d * (hi as i32 - 16) as f32;
    }
}

/// Sub-block `j`'s 6-bit (scale, min) from the 12 packed bytes of Q4_K/Q5_K (ggml's
/// `get_scale_min_k4`): sub-blocks 0–3 use the low 6 bits of bytes j and j+4; 4–7 take their
/// low 4 bits from byte j+4 and their top 2 bits from the spare top bits of bytes j−4 and j.
pub fn scale_min_k4(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Inverse of [`scale_min_k4`]; `s` must start zeroed.
fn put_scale_min_k4(j: usize, sc: u8, m: u8, s: &mut [u8]) {
    if j < 4 {
        s[j] |= sc;
        s[j + 4] |= m;
    } else {
        s[j + 4] = (sc & 15) | ((m & 15) << 4);
        s[j - 4] |= (sc >> 4) << 6;
        s[j] |= (m >> 4) << 6;
    }
}

fn dequant_q4_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    for sb in 0..8 {
        let (sc, m) = scale_min_k4(sb, scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        // Sub-blocks 2g and 2g+1 share qs[32g..32g+32]: low nibble, then high nibble.
        let qs = &b[16 + 32 * (sb / 2)..][..32];
        let shift = 4 * (sb % 2);
        for l in 0..32 {
            y[32 * sb + l] = dl * ((qs[l] >> shift) & 15) as f32 - ml;
        }
    }
}

fn dequant_q5_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
    let scales = &b[4..16];
    let qh = &b[16..48];
    for sb in 0..8 {
        let (sc, m) = scale_min_k4(sb, scales);
        let (dl, ml) = (d * sc as f32, dmin * m as f32);
        let qs = &b[48 + 32 * (sb / 2)..][..32];
        let shift = 4 * (sb % 2);
        for l in 0..32 {
            let q = ((qs[l] >> shift) & 15) | (((qh[l] >> sb) & 1) << 4);
            y[32 * sb + l] = dl * q as f32 - ml;
        }
    }
}

/// Where Q6_K element `e` (0..256) lives: (ql byte, ql nibble shift, qh byte, qh shift, scale).
/// Each half h of 128 elements is four rows s of 32: low 4 bits in ql[64h + 32(s&1) + l]
/// (nibble s>>1), top 2 bits in qh[32h + l] at bits 2s, scale index 8h + 2s + l/16.
pub fn q6_k_position(e: usize) -> (usize, usize, usize, usize, usize) {
    let (h, s, l) = (e / 128, (e / 32) % 4, e % 32);
    (
        64 * h + 32 * (s & 1) + l,
        4 * (s >> 1),
        128 + 32 * h + l,
        2 * s,
        8 * h + 2 * s + l / 16,
    )
}

fn dequant_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 208);
    for (e, v) in y.iter_mut().enumerate() {
        let (ql, ql_shift, qh, qh_shift, sc) = q6_k_position(e);
        let q = ((b[ql] >> ql_shift) & 15) | (((b[qh] >> qh_shift) & 3) << 4);
        *v = d * (b[192 + sc] as i8) as f32 * (q as i32 - 32) as f32;
    }
}

/// The 16 levels of IQ4_NL and IQ4_XS, in units of the block's scale (llama.cpp's
/// `kvalues_iq4nl`; gguf-py's `IQ4_NL.kvalues`): denser near zero, where weights cluster.
pub const IQ4_GRID: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Q4_1 (`high_bit` false) and Q5_1: Q4_0/Q5_0's quants with an offset m instead of a
/// centred level.
fn dequant_qx_1(b: &[u8], y: &mut [f32], high_bit: bool) {
    let (d, m) = (f16_at(b, 0), f16_at(b, 2));
    let qh = if high_bit {
        u32::from_le_bytes([b[4], b[5], b[6], b[7]])
    } else {
        0
    };
    let qs = &b[if high_bit { 8 } else { 4 }..][..16];
    for j in 0..16 {
        let lo = (qs[j] & 15) as u32 | ((qh >> j) & 1) << 4;
        let hi = (qs[j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4;
        y[j] = d * lo as f32 + m;
        y[j + 16] = d * hi as f32 + m;
    }
}

fn dequant_iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for j in 0..16 {
        y[j] = d * IQ4_GRID[(b[2 + j] & 15) as usize] as f32;
        y[j + 16] = d * IQ4_GRID[(b[2 + j] >> 4) as usize] as f32;
    }
}

/// Where the 2 low bits of Q2_K/Q3_K element `e` (0..256) live: (qs byte, shift). Each half
/// h of 128 elements is four rows s of 32 sharing qs[32h..32h+32], row s at bits 2s; its
/// 16-element sub-block (the scale's index) is e / 16.
pub fn q2_position(e: usize) -> (usize, usize) {
    (32 * (e / 128) + e % 32, 2 * ((e % 128) / 32))
}

fn dequant_q2_k(b: &[u8], y: &mut [f32]) {
    let (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
    for (e, v) in y.iter_mut().enumerate() {
        let sc = b[e / 16];
        let (dl, ml) = (d * (sc & 15) as f32, dmin * (sc >> 4) as f32);
        let (at, shift) = q2_position(e);
        *v = dl * ((b[16 + at] >> shift) & 3) as f32 - ml;
    }
}

/// Q3_K's 6-bit scale `i` (0..16) from its 12 packed bytes: the low 4 bits are nibble i / 8
/// of byte i % 8, the top 2 bits are bits 2(i / 4) of byte 8 + i % 4.
pub fn q3_k_scale(i: usize, s: &[u8]) -> u8 {
    ((s[i % 8] >> (4 * (i / 8))) & 15) | (((s[8 + i % 4] >> (2 * (i / 4))) & 3) << 4)
}

fn dequant_q3_k(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 108);
    for (e, v) in y.iter_mut().enumerate() {
        let dl = d * (q3_k_scale(e / 16, &b[96..108]) as i32 - 32) as f32;
        let (at, shift) = q2_position(e);
        // The high bit set means no offset (gguf-py: "strangely, the offset is zero when
        // the bitmask is 1"): q = low + 4·high − 4.
        let high = (b[e % 32] >> (e / 32)) & 1;
        let q = ((b[32 + at] >> shift) & 3) as i32 + 4 * high as i32 - 4;
        *v = dl * q as f32;
    }
}

/// IQ4_XS sub-block `ib`'s 6-bit scale (0..64, stored + 32).
pub fn iq4_xs_scale(ib: usize, b: &[u8]) -> u8 {
    let high = u16::from_le_bytes([b[2], b[3]]);
    ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((((high >> (2 * ib)) & 3) as u8) << 4)
}

fn dequant_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_at(b, 0);
    for ib in 0..8 {
        let dl = d * (iq4_xs_scale(ib, b) as i32 - 32) as f32;
        let qs = &b[8 + 16 * ib..][..16];
        for j in 0..16 {
            y[32 * ib + j] = dl * IQ4_GRID[(qs[j] & 15) as usize] as f32;
            y[32 * ib + j + 16] = dl * IQ4_GRID[(qs[j] >> 4) as usize] as f32;
        }
    }
}

// ---- quantizers ----

/// ggml's `quantize_row_q4_1_ref` / `_q5_1_ref`: d = (max − min) / levels, m = min,
/// q = trunc((x − min)/d + 0.5) clamped to the top level.
fn quant_qx_1(x: &[f32], b: &mut [u8], high_bit: bool) {
    let top = if high_bit { 31u32 } else { 15 };
    let max = x.iter().fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    let min = x.iter().fold(f32::INFINITY, |a, &v| a.min(v));
    let d = (max - min) / top as f32;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(b, 0, f16::from_f32(d));
    put_f16(b, 2, f16::from_f32(min));
    let q: Vec<u32> = x
        .iter()
        .map(|v| (((v - min) * id + 0.5) as u32).min(top))
        .collect();
    let qs_at = if high_bit { 8 } else { 4 };
    for j in 0..16 {
        b[qs_at + j] = ((q[j] & 15) | ((q[j + 16] & 15) << 4)) as u8;
    }
    if high_bit {
        let qh = q
            .iter()
            .enumerate()
            .fold(0u32, |h, (j, &v)| h | ((v >> 4) & 1) << j);
        b[4..8].copy_from_slice(&qh.to_le_bytes());
    }
}

/// The grid index whose level times `unit` is nearest `v`.
fn nearest_iq4(v: f32, unit: f32) -> u8 {
    let mut best = (f32::INFINITY, 0u8);
    for (q, &g) in IQ4_GRID.iter().enumerate() {
        let err = (unit * g as f32 - v).abs();
        if err < best.0 {
            best = (err, q as u8);
        }
    }
    best.1
}

/// The signed value of largest magnitude in `x` (IQ4 maps it to the grid's −127 end).
fn signed_extreme(x: &[f32]) -> f32 {
    x.iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m })
}

/// IQ4_NL: d = extreme / −127, each value to its nearest grid level.
fn quant_iq4_nl(x: &[f32], b: &mut [u8]) {
    let d = f16::from_f32(signed_extreme(x) / -127.0);
    put_f16(b, 0, d);
    for j in 0..16 {
        let (lo, hi) = (
            nearest_iq4(x[j], d.to_f32()),
            nearest_iq4(x[j + 16], d.to_f32()),
        );
        b[2 + j] = lo | (hi << 4);
    }
}

/// IQ4_XS: each 32-element sub-block's own IQ4_NL scale, as a multiple −32..31 of d rounded
/// away from zero (so its extreme stays on the grid), then nearest grid levels.
fn quant_iq4_xs(x: &[f32], b: &mut [u8]) {
    let local: Vec<f32> = x
        .chunks_exact(32)
        .map(|s| signed_extreme(s) / -127.0)
        .collect();
    let d = f16_at_least(local.iter().fold(0f32, |a, v| a.max(v.abs())) / 31.0);
    let df = d.to_f32();
    put_f16(b, 0, d);
    let mut high = 0u16;
    for (ib, &s) in local.iter().enumerate() {
        let ls = if df > 0.0 {
            ((s.abs() / df).ceil().min(31.0) * s.signum()) as i32
        } else {
            0
        };
        let stored = (ls + 32) as u8;
        b[4 + ib / 2] |= (stored & 15) << (4 * (ib % 2));
        high |= ((stored >> 4) as u16) << (2 * ib);
        let unit = df * ls as f32;
        for j in 0..16 {
            let lo = nearest_iq4(x[32 * ib + j], unit);
            let hi = nearest_iq4(x[32 * ib + j + 16], unit);
            b[8 + 16 * ib + j] = lo | (hi << 4);
        }
    }
    b[2..4].copy_from_slice(&high.to_le_bytes());
}

/// Q2_K: Q4_K's fit on 16-element sub-blocks, 4 levels and 4-bit scales and mins.
fn quant_q2_k(x: &[f32], b: &mut [u8]) {
    let lo: Vec<f32> = x
        .chunks_exact(16)
        .map(|s| s.iter().fold(0f32, |a, &v| a.min(v)))
        .collect();
    let hi: Vec<f32> = x
        .chunks_exact(16)
        .map(|s| s.iter().fold(0f32, |a, &v| a.max(v)))
        .collect();
    let dmin = f16_at_least(lo.iter().fold(0f32, |a, &v| a.max(-v)) / 15.0);
    let dminf = dmin.to_f32();
    let m: Vec<f32> = lo
        .iter()
        .map(|&l| {
            if dminf > 0.0 {
                (-l / dminf).ceil().min(15.0)
            } else {
                0.0
            }
        })
        .collect();
    let need: Vec<f32> = (0..16).map(|i| (hi[i] + dminf * m[i]) / 3.0).collect();
    let d = f16_at_least(need.iter().fold(0f32, |a, &v| a.max(v)) / 15.0);
    let df = d.to_f32();
    put_f16(b, 80, d);
    put_f16(b, 82, dmin);
    for i in 0..16 {
        let sc = if df > 0.0 {
            (need[i] / df).ceil().min(15.0)
        } else {
            0.0
        };
        b[i] = sc as u8 | ((m[i] as u8) << 4);
        let (step, off) = (df * sc, dminf * m[i]);
        for (e, &v) in x.iter().enumerate().skip(16 * i).take(16) {
            let q = if step > 0.0 {
                ((v + off) / step).round().clamp(0.0, 3.0) as u8
            } else {
                0
            };
            let (at, shift) = q2_position(e);
            b[16 + at] |= q << shift;
        }
    }
}

/// Q3_K: symmetric per 16-element sub-block, levels −4..3 with step |x|max / 3, the step a
/// multiple 0..31 of d rounded up.
fn quant_q3_k(x: &[f32], b: &mut [u8]) {
    let step: Vec<f32> = x
        .chunks_exact(16)
        .map(|s| s.iter().fold(0f32, |a, v| a.max(v.abs())) / 3.0)
        .collect();
    let d = f16_at_least(step.iter().fold(0f32, |a, &v| a.max(v)) / 31.0);
    let df = d.to_f32();
    put_f16(b, 108, d);
    for (i, s) in step.iter().enumerate() {
        let sc = if df > 0.0 {
            (s / df).ceil().min(31.0) as u8
        } else {
            0
        };
        let stored = sc + 32;
        b[96 + i % 8] |= (stored & 15) << (4 * (i / 8));
        b[96 + 8 + i % 4] |= (stored >> 4) << (2 * (i / 4));
        let unit = df * sc as f32;
        for (e, &v) in x.iter().enumerate().skip(16 * i).take(16) {
            let q = if unit > 0.0 {
                (v / unit).round().clamp(-4.0, 3.0) as i32
            } else {
                0
            };
            let u = (q + 4) as u8;
            let (at, shift) = q2_position(e);
            b[32 + at] |= (u & 3) << shift;
            b[e % 32] |= (u >> 2) << (e / 32);
        }
    }
}

/// ggml's `quantize_row_q8_0_ref`: d = max|x| / 127, q = round(x / d) half away from zero.
fn quant_q8_0(x: &[f32], b: &mut [u8]) {
    let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(b, 0, f16::from_f32(d));
    for (o, v) in b[2..34].iter_mut().zip(x) {
        *o = ((v * id).round() as i8) as u8;
    }
}

/// ggml's `quantize_row_q4_0_ref` / `_q5_0_ref`: the signed value of largest magnitude maps
/// to level 0 (d = max / −8 or −16), then q = trunc(x/d + 8.5) clamped to the top level.
fn quant_qx_0(x: &[f32], b: &mut [u8], bits: u32) {
    let half = (1u32 << (bits - 1)) as f32;
    let top = (1u32 << bits) - 1;
    let max = x
        .iter()
        .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
    let d = max / -half;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    put_f16(b, 0, f16::from_f32(d));
    let q: Vec<u32> = x
        .iter()
        .map(|v| ((v * id + half + 0.5) as u32).min(top))
        .collect();
    let qs_at = if bits == 5 { 6 } else { 2 };
    for j in 0..16 {
        b[qs_at + j] = ((q[j] & 15) | ((q[j + 16] & 15) << 4)) as u8;
    }
    if bits == 5 {
        let qh = q
            .iter()
            .enumerate()
            .fold(0u32, |h, (j, &v)| h | ((v >> 4) & 1) << j);
        b[2..6].copy_from_slice(&qh.to_le_bytes());
    }
}

/// Q4_K (`high_bit` false, levels 0..15) or Q5_K (levels 0..31): each 32-element sub-block
/// covers [min(x, 0), max(x)] with offset dmin·m ≥ −min and step d·sc, m and sc rounded up
/// so nothing is clipped, then every value is rounded to its nearest level.
fn quant_q45_k(x: &[f32], b: &mut [u8], high_bit: bool) {
    let levels = if high_bit { 31.0 } else { 15.0 };
    let mut lo = [0f32; 8];
    let mut hi = [0f32; 8];
    for sb in 0..8 {
        let sub = &x[32 * sb..32 * sb + 32];
        lo[sb] = sub.iter().fold(0f32, |a, &v| a.min(v));
        hi[sb] = sub.iter().fold(0f32, |a, &v| a.max(v));
    }
    let dmin = f16_at_least(lo.iter().fold(0f32, |a, &v| a.max(-v)) / 63.0);
    let dminf = dmin.to_f32();
    let m: Vec<f32> = lo
        .iter()
        .map(|&l| {
            if dminf > 0.0 {
                (-l / dminf).ceil().min(63.0)
            } else {
                0.0
            }
        })
        .collect();
    let need: Vec<f32> = (0..8).map(|sb| (hi[sb] + dminf * m[sb]) / levels).collect();
    let d = f16_at_least(need.iter().fold(0f32, |a, &v| a.max(v)) / 63.0);
    let df = d.to_f32();
    put_f16(b, 0, d);
    put_f16(b, 2, dmin);
    let qs_at = if high_bit { 48 } else { 16 };
    for sb in 0..8 {
        let sc = if df > 0.0 {
            (need[sb] / df).ceil().min(63.0)
        } else {
            0.0
        };
        put_scale_min_k4(sb, sc as u8, m[sb] as u8, &mut b[4..16]);
        let (step, off) = (df * sc, dminf * m[sb]);
        for l in 0..32 {
            let q = if step > 0.0 {
                ((x[32 * sb + l] + off) / step).round().clamp(0.0, levels) as u8
            } else {
                0
            };
            b[qs_at + 32 * (sb / 2) + l] |= (q & 15) << (4 * (sb % 2));
            if high_bit {
                b[16 + l] |= (q >> 4) << sb;
            }
        }
    }
}

/// Q6_K: symmetric per 16-element sub-block, step = max|x| / 31 as int8 multiples of d.
fn quant_q6_k(x: &[f32], b: &mut [u8]) {
    let step: Vec<f32> = x
        .chunks_exact(16)
        .map(|s| s.iter().fold(0f32, |a, v| a.max(v.abs())) / 31.0)
        .collect();
    let d = f16_at_least(step.iter().fold(0f32, |a, &v| a.max(v)) / 127.0);
    let df = d.to_f32();
    put_f16(b, 208, d);
    for (j, s) in step.iter().enumerate() {
        let sc = if df > 0.0 {
            (s / df).ceil().min(127.0)
        } else {
            0.0
        };
        b[192 + j] = sc as i8 as u8;
    }
    for (e, v) in x.iter().enumerate() {
        let (ql, ql_shift, qh, qh_shift, sc) = q6_k_position(e);
        let unit = df * (b[192 + sc] as i8) as f32;
        let q = if unit > 0.0 {
            ((v / unit).round().clamp(-32.0, 31.0) + 32.0) as u8
        } else {
            32
        };
        b[ql] |= (q & 15) << ql_shift;
        b[qh] |= (q >> 4) << qh_shift;
    }
}

/// How a product stages x' before it multiplies: the x'' its tests' oracle multiplies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XLevels {
    /// x' itself (f32; the f16 operands' rounding is in those tests' tolerance instead).
    Exact,
    /// The int8 chunk matvec (`INT8` in shaders/matmul/matvec_chunk.wgsl) and the subgroup-
    /// matrix GEMM: per 32-element chunk two int8 levels a and b with x'' = d_a·a + d_b·b,
    /// d_a = max|x'| / 127, d_b = d_a / 254, a = round(x'/d_a), b = round((x' − d_a·a)/d_b).
    /// Each element is within max|x'| / 64,516 of x'.
    Int8Pair,
    /// The dot-product GEMM (`DOT4_TILES`): one level, x'' = d_a·a, each element within
    /// max|x'| / 254 of x' (llama.cpp's q8_1 activations).
    Int8,
}

/// x'' of `x` (`x.len()` a multiple of 32) as `levels` stages it, in f32 arithmetic as the
/// shaders do it, so that the kernel's product is W·x'' up to f32 summation; and each
/// element's slack: how far a GPU's x'' may stray from ours. That is one step of the last
/// level (d_b, or d_a with one level) where one of the element's roundings sits within a
/// rounding error of a tie, else 0. WGSL lets a GPU divide to 2.5 ulp (127/max, max/127), so
/// its d_a and 1/d_a may differ from ours in the last bits; b = round((x' − d_a·a)/d_b) then
/// moves by up to 127·2^-22 ≈ 0.01 of a level (d_a·a's error over d_b), and a by far less.
/// Near a tie that flips a level, and x'' moves by one step (with two levels a flip of a is
/// absorbed by b, which then lands within d_b/2 of x' again). Tests add Σ|w|·slack to a
/// product's tolerance, so a flip is allowed only where it can happen (a few percent of the
/// elements), not everywhere.
pub fn int8_stage(x: &[f32], levels: XLevels) -> (Vec<f32>, Vec<f32>) {
    /// Distance from a tie (in levels) within which a rounding may go either way: b's, a
    /// little over the 0.01 level its inputs' division error can move it; a's, far less.
    const B_NEAR_TIE: f32 = 0.02;
    const A_NEAR_TIE: f32 = 1e-3;
    let near_tie = |v: f32, within: f32| (v - v.floor() - 0.5).abs() < within;
    assert!(
        x.len().is_multiple_of(32),
        "int8 levels take whole 32-element chunks"
    );
    let mut out = Vec::with_capacity(x.len());
    let mut slack = Vec::with_capacity(x.len());
    for chunk in x.chunks(32) {
        let max = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
        let da = max / 127.0;
        let db = da / 254.0;
        let inv_a = if max > 0.0 { 127.0 / max } else { 0.0 };
        let inv_b = 254.0 * inv_a;
        for &v in chunk {
            let a_levels = v * inv_a;
            let a = a_levels.round_ties_even();
            if levels == XLevels::Int8 {
                out.push(da * a);
                slack.push(if near_tie(a_levels, A_NEAR_TIE) {
                    da
                } else {
                    0.0
                });
                continue;
            }
            let rest = a.mul_add(-da, v);
            let b_levels = rest * inv_b;
            let b = b_levels.round_ties_even().clamp(-127.0, 127.0);
            out.push(da * a + db * b);
            let flips = near_tie(a_levels, A_NEAR_TIE) || near_tie(b_levels, B_NEAR_TIE);
            slack.push(if flips { db } else { 0.0 });
        }
    }
    (out, slack)
}

/// x' as a matvec sees it: its values and each one's slack (how far a GPU's may stray from
/// them beyond f32 summation, [`int8_stage`]; zeros for [`XLevels::Exact`]).
pub struct SeenX {
    pub values: Vec<f32>,
    pub slack: Vec<f32>,
}

/// x' as a product reading `[rows, n]` x sees it: RMSNorm'd with `norm_w` (when given,
/// `ops::rms_norm`'s arithmetic) and, for the int8 forms (`levels`), staged as
/// [`int8_stage`] of x ⊙ norm_w, the norm's scalar applied after the product as the kernel
/// does. The oracle of every test of the fused products.
pub fn x_seen(
    x: &[f32],
    norm_w: Option<&[f32]>,
    rows: usize,
    n: usize,
    eps: f32,
    levels: XLevels,
) -> SeenX {
    let exact = |values: Vec<f32>| SeenX {
        slack: vec![0.0; values.len()],
        values,
    };
    let Some(nw) = norm_w else {
        if levels == XLevels::Exact {
            return exact(x.to_vec());
        }
        let (values, slack) = int8_stage(x, levels);
        return SeenX { values, slack };
    };
    if levels == XLevels::Exact {
        return exact(super::ops::rms_norm(x, nw, rows, n, eps));
    }
    let mut seen = SeenX {
        values: Vec::with_capacity(x.len()),
        slack: Vec::with_capacity(x.len()),
    };
    for row in x.chunks(n) {
        let mean_sq = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
        let inv = 1.0 / (mean_sq + eps as f64).sqrt();
        let scaled: Vec<f32> = row.iter().zip(nw).map(|(&v, &w)| v * w).collect();
        let (staged, slack) = int8_stage(&scaled, levels);
        let unnorm = |v: f32| (v as f64 * inv) as f32;
        seen.values.extend(staged.into_iter().map(unnorm));
        seen.slack.extend(slack.into_iter().map(unnorm));
    }
    seen
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic spread of values with outliers, no RNG crate needed in the lib.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let u = (s as f32 / u32::MAX as f32) * 2.0 - 1.0;
                if i % 97 == 3 {
                    u * 8.0
                } else {
                    u
                }
            })
            .collect()
    }

    #[test]
    fn round_trip_error_is_bounded_by_the_step() {
        for ty in GgmlType::SUPPORTED {
            let x = values(4 * QK_K, ty.id());
            let bytes = quantize(ty, &x).unwrap();
            assert_eq!(bytes.len(), byte_len(ty, x.len()).unwrap());
            let y = dequantize(ty, &bytes, x.len()).unwrap();
            let (block, _) = ty.block_geometry().unwrap();
            // `range / levels` is one step of an ideal grid over the block's range; the packers
            // land within half a step of theirs, whose step is a little larger (scales are
            // rounded up to their integer grids), so one ideal step bounds the error.
            let levels = match ty {
                GgmlType::Q8_0 => 127.0,
                GgmlType::Q4_0 | GgmlType::Q4_K => 7.5,
                GgmlType::Q5_0 | GgmlType::Q5_K => 15.5,
                GgmlType::Q6_K => 31.0,
                GgmlType::Q4_1 => 7.5,
                GgmlType::Q5_1 => 15.5,
                // Q2_K: 4 levels over [min, max], a range up to 2·|x|max: half a step is
                // |x|max / 3, plus the rounded-up scales.
                GgmlType::Q2_K => 1.4,
                // Q3_K: steps of |x|max / 3 per sub-block; half a step is |x|max / 6.
                GgmlType::Q3_K => 3.5,
                // The IQ4 grid's widest gap is 24 of its 127 units, and a value on the far
                // side of the extreme is up to 14 units off: |x|max·14/127 < |x|max/8.5.
                GgmlType::IQ4_NL | GgmlType::IQ4_XS => 8.5,
                _ => 0.0,
            };
            for (i, (a, b)) in x.iter().zip(&y).enumerate() {
                let blk = &x[i / block.max(32) * block.max(32)..][..block.max(32).min(x.len())];
                let range = blk.iter().fold(0f32, |m, v| m.max(v.abs()));
                let tol = match ty {
                    GgmlType::F32 => 0.0,
                    GgmlType::F16 => a.abs() / 1024.0,
                    GgmlType::BF16 => a.abs() / 128.0,
                    _ => range / levels,
                };
                assert!(
                    (a - b).abs() <= tol,
                    "{ty} [{i}]: {a} → {b}, |err| {} > {tol}",
                    (a - b).abs()
                );
            }
        }
    }

    /// Each element of x'' is within its form's documented bound of x' (two levels: max|x'| /
    /// 64,516 of its chunk; one: max|x'| / 254), and the slack is at most one last-level step.
    #[test]
    fn int8_staging_stays_within_its_bound() {
        let x = values(4096, 7);
        for (levels, per_max) in [(XLevels::Int8Pair, 64_516.0), (XLevels::Int8, 254.0)] {
            let (staged, slack) = int8_stage(&x, levels);
            for ((chunk, got), slack) in x.chunks(32).zip(staged.chunks(32)).zip(slack.chunks(32)) {
                let max = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
                let step = if levels == XLevels::Int8 {
                    max / 127.0
                } else {
                    max / 127.0 / 254.0
                };
                for ((&v, &g), &s) in chunk.iter().zip(got).zip(slack) {
                    // (a little over the bound for f32's own rounding of the levels' products)
                    assert!(
                        (v - g).abs() <= max / per_max * 1.001 + 1e-7,
                        "{levels:?}: {v} -> {g}"
                    );
                    assert!(
                        s == 0.0 || (s - step).abs() <= step * 1e-6,
                        "{levels:?}: slack {s}"
                    );
                }
            }
        }
    }

    #[test]
    fn zero_blocks_stay_zero() {
        for ty in GgmlType::SUPPORTED {
            let bytes = quantize(ty, &[0.0; QK_K]).unwrap();
            assert!(
                dequantize(ty, &bytes, QK_K)
                    .unwrap()
                    .iter()
                    .all(|v| *v == 0.0),
                "{ty}"
            );
        }
    }

    #[test]
    fn scale_min_packing_round_trips() {
        let mut s = [0u8; 12];
        let pairs: Vec<(u8, u8)> = (0..8)
            .map(|j| ((j * 9 + 5) as u8 % 64, (63 - j * 7) as u8))
            .collect();
        for (j, &(sc, m)) in pairs.iter().enumerate() {
            put_scale_min_k4(j, sc, m, &mut s);
        }
        for (j, &p) in pairs.iter().enumerate() {
            assert_eq!(scale_min_k4(j, &s), p, "sub-block {j}");
        }
    }

    #[test]
    fn rejects_bad_lengths() {
        assert!(matches!(
            dequantize(GgmlType::Q4_K, &[0; 144], 100),
            Err(QuantError::PartialBlock { .. })
        ));
        assert!(matches!(
            dequantize(GgmlType::Q4_K, &[0; 100], 256),
            Err(QuantError::Short { .. })
        ));
        assert!(matches!(
            quantize(GgmlType::Other(16), &[0.0; 256]),
            Err(QuantError::Unsupported(_))
        ));
    }
}
