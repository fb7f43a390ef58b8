//! How each weight type's blocks lie in GPU memory: the file's bytes, re-laid out as they
//! stream in so that every kernel reads them with aligned loads (DESIGN.md "Read compressed").
//!
//! GGUF blocks of Q4_0 (18 B), Q5_0 (22 B), Q8_0 (34 B), IQ4_NL (18 B), Q3_K (110 B) and
//! Q6_K (210 B) start 2 bytes off a word boundary every other block, and those of Q4_1 (20 B),
//! Q5_1 (24 B), Q2_K (84 B) and IQ4_XS (136 B) are word- but not 16-byte-aligned, so reading
//! them in place took funnelled unaligned loads (3–4 loads and shifts per 8 weights) or
//! never a 16-byte load. These types are split into *planes*, one after another in each part
//! buffer of a tensor (`nb` = blocks in the part; the first plane and the one after it start
//! 16-byte aligned where their sizes allow, the rest word-aligned, and the shaders read them
//! in units of that alignment):
//!
//! | type | planes, in order | bytes per block (file) |
//! |---|---|---|
//! | Q4_0 | quants 16·nb · scales 2·nb | 18 (18) |
//! | Q4_1 | quants 16·nb · (d, m) 4·nb | 20 (20) |
//! | Q5_0 | quants 16·nb · high bits 4·nb · scales 2·nb | 22 (22) |
//! | Q5_1 | quants 16·nb · high bits 4·nb · (d, m) 4·nb | 24 (24) |
//! | Q8_0 | quants 32·nb · scales 2·nb | 34 (34) |
//! | IQ4_NL | grid indices 16·nb · scales 2·nb | 18 (18) |
//! | Q2_K | body 80·nb (low bits 64, sub-scales 16) · (d, dmin) 4·nb | 84 (84) |
//! | Q3_K | body 96·nb (low bits 64, high bits 32) · sub-scales 12·nb · scales 2·nb | 110 (110) |
//! | Q6_K | body 208·nb (low bits 128, high bits 64, sub-scales 16) · scales 2·nb | 210 (210) |
//! | IQ4_XS | grid indices 128·nb · (d, scales_h, scales_l) 8·nb | 136 (136) |
//!
//! The GPU keeps exactly the file's bits per weight (0% growth; a part buffer is rounded up
//! to 16 bytes). 4-bit quants (and IQ4 grid indices) are also re-ordered within each
//! 32-element block so that one word holds 8 consecutive elements: word j's low nibbles are
//! elements 8j..8j+3, its high nibbles 8j+4..8j+7 (the file keeps elements j and j+16 in one
//! byte). Q6_K's low bits follow the same order per 32-element chunk (16 bytes each); its
//! high 2-bit fields, and Q2_K's and Q3_K's low 2-bit fields, are two words per chunk,
//! element 4g+i in byte i of word g/4 at bits 2(g%4). Q3_K's high bits are one word per
//! chunk, element 4g+i in byte i at bit g. Q5_0's and Q5_1's high bits and every 8-bit quant
//! are already in element order; scales and sub-scales are copied as the file packs them.
//! The shaders' side is `shaders/common/dequant_*.wgsl`.
//!
//! F32, F16, BF16, Q4_K (144 B) and Q5_K (176 B) blocks are 16-byte-aligned and stay in place.

use crate::gguf::GgmlType;

/// How one block of a re-laid type is split.
struct Split {
    /// File bytes per block.
    block_bytes: usize,
    /// Bytes each plane takes per block, in plane order.
    plane_bytes: &'static [usize],
    /// Writes file block number `k` of a piece into its place in each plane (plane i holds
    /// `plane_bytes[i]` bytes per block).
    relay: fn(&[u8], usize, &mut [Vec<u8>]),
}

fn split_of(ty: GgmlType) -> Option<Split> {
    Some(match ty {
        GgmlType::Q4_0 => Split {
            block_bytes: 18,
            plane_bytes: &[16, 2],
            relay: |b, k, p| {
                order_nibbles(&b[2..18], &mut p[0][16 * k..16 * k + 16]);
                p[1][2 * k..2 * k + 2].copy_from_slice(&b[0..2]);
            },
        },
        GgmlType::Q5_0 => Split {
            block_bytes: 22,
            plane_bytes: &[16, 4, 2],
            relay: |b, k, p| {
                order_nibbles(&b[6..22], &mut p[0][16 * k..16 * k + 16]);
                p[1][4 * k..4 * k + 4].copy_from_slice(&b[2..6]);
                p[2][2 * k..2 * k + 2].copy_from_slice(&b[0..2]);
            },
        },
        GgmlType::Q8_0 => Split {
            block_bytes: 34,
            plane_bytes: &[32, 2],
            relay: |b, k, p| {
                p[0][32 * k..32 * k + 32].copy_from_slice(&b[2..34]);
                p[1][2 * k..2 * k + 2].copy_from_slice(&b[0..2]);
            },
        },
        GgmlType::Q4_1 => Split {
            block_bytes: 20,
            plane_bytes: &[16, 4],
            relay: |b, k, p| {
                order_nibbles(&b[4..20], &mut p[0][16 * k..16 * k + 16]);
                p[1][4 * k..4 * k + 4].copy_from_slice(&b[0..4]);
            },
        },
        GgmlType::Q5_1 => Split {
            block_bytes: 24,
            plane_bytes: &[16, 4, 4],
            relay: |b, k, p| {
                order_nibbles(&b[8..24], &mut p[0][16 * k..16 * k + 16]);
                p[1][4 * k..4 * k + 4].copy_from_slice(&b[4..8]);
                p[2][4 * k..4 * k + 4].copy_from_slice(&b[0..4]);
            },
        },
        GgmlType::IQ4_NL => Split {
            block_bytes: 18,
            plane_bytes: &[16, 2],
            relay: |b, k, p| {
                order_nibbles(&b[2..18], &mut p[0][16 * k..16 * k + 16]);
                p[1][2 * k..2 * k + 2].copy_from_slice(&b[0..2]);
            },
        },
        GgmlType::Q2_K => Split {
            block_bytes: 84,
            plane_bytes: &[80, 4],
            relay: |b, k, p| {
                let body = &mut p[0][80 * k..80 * k + 80];
                relay_2bit_k(&b[16..80], &mut body[0..64]);
                body[64..80].copy_from_slice(&b[0..16]);
                p[1][4 * k..4 * k + 4].copy_from_slice(&b[80..84]);
            },
        },
        GgmlType::Q3_K => Split {
            block_bytes: 110,
            plane_bytes: &[96, 12, 2],
            relay: |b, k, p| {
                let body = &mut p[0][96 * k..96 * k + 96];
                relay_2bit_k(&b[32..96], &mut body[0..64]);
                relay_q3_k_high(&b[0..32], &mut body[64..96]);
                p[1][12 * k..12 * k + 12].copy_from_slice(&b[96..108]);
                p[2][2 * k..2 * k + 2].copy_from_slice(&b[108..110]);
            },
        },
        GgmlType::IQ4_XS => Split {
            block_bytes: 136,
            plane_bytes: &[128, 8],
            relay: |b, k, p| {
                for ib in 0..8 {
                    let at = 128 * k + 16 * ib;
                    order_nibbles(&b[8 + 16 * ib..24 + 16 * ib], &mut p[0][at..at + 16]);
                }
                p[1][8 * k..8 * k + 8].copy_from_slice(&b[0..8]);
            },
        },
        GgmlType::Q6_K => Split {
            block_bytes: 210,
            plane_bytes: &[208, 2],
            relay: |b, k, p| {
                relay_q6_k(b, &mut p[0][208 * k..208 * k + 208]);
                p[1][2 * k..2 * k + 2].copy_from_slice(&b[208..210]);
            },
        },
        _ => return None,
    })
}

/// The file's 16 quant bytes of a 32-element 4-bit block (element e < 16: low nibble of byte
/// e, e ≥ 16: high nibble of byte e − 16) in element order: element 8j + 4h + i in byte
/// 4j + i, nibble h.
fn order_nibbles(file: &[u8], out: &mut [u8]) {
    let element = |e: usize| (file[e % 16] >> (4 * (e / 16))) & 15;
    for (byte, o) in out.iter_mut().enumerate() {
        let (j, i) = (byte / 4, byte % 4);
        *o = element(8 * j + i) | (element(8 * j + 4 + i) << 4);
    }
}

/// A Q6_K super-block's first 208 bytes (ql 128, qh 64, scales 16) in chunk order: for each
/// 32-element chunk c, 16 bytes of low nibbles at 16c (element order, as `order_nibbles`),
/// then at 128 + 8c two words of high 2-bit fields (element 4g + i: byte i of word g / 4,
/// bits 2(g % 4)), then the 16 sub-scales unchanged at 192.
fn relay_q6_k(file: &[u8], out: &mut [u8]) {
    let (ql, qh) = (&file[0..128], &file[128..192]);
    // ggml: half h = e / 128 of the super-block, l = e % 32, s = (e % 128) / 32; the low 4
    // bits are nibble s / 2 of ql[64h + 32(s % 2) + l], the top 2 bits are bits 2s.. of
    // qh[32h + l].
    let low = |e: usize| {
        let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
        (ql[64 * h + 32 * (s % 2) + l] >> (4 * (s / 2))) & 15
    };
    let high = |e: usize| {
        let (h, s, l) = (e / 128, (e % 128) / 32, e % 32);
        (qh[32 * h + l] >> (2 * s)) & 3
    };
    for c in 0..8 {
        let base = 32 * c;
        for byte in 0..16 {
            let (j, i) = (byte / 4, byte % 4);
            out[16 * c + byte] = low(base + 8 * j + i) | (low(base + 8 * j + 4 + i) << 4);
        }
        for byte in 0..8 {
            let (w, i) = (byte / 4, byte % 4);
            let mut v = 0;
            for g4 in 0..4 {
                v |= high(base + 4 * (4 * w + g4) + i) << (2 * g4);
            }
            out[128 + 8 * c + byte] = v;
        }
    }
    out[192..208].copy_from_slice(&file[192..208]);
}

/// The element-order position of field 4g + i (g < 8, i < 4) of a 32-element chunk's
/// 2-bit fields: (byte, shift) in the chunk's 8 bytes, as `relay_q6_k`'s high bits.
fn two_bit_slot(e: usize) -> (usize, usize) {
    let (g, i) = (e / 4, e % 4);
    (4 * (g / 4) + i, 2 * (g % 4))
}

/// The 64 qs bytes of a Q2_K/Q3_K super-block (element e: bits 2((e % 128) / 32) of
/// qs[32(e / 128) + e % 32], as ggml's `dequantize_row_q2_K`) as 8 bytes per 32-element
/// chunk in [`two_bit_slot`] order.
fn relay_2bit_k(qs: &[u8], out: &mut [u8]) {
    out.fill(0);
    for e in 0..256 {
        let v = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        let (byte, shift) = two_bit_slot(e % 32);
        out[8 * (e / 32) + byte] |= v << shift;
    }
}

/// Q3_K's 32 hmask bytes (bit 2 of element e: bit e / 32 of hmask[e % 32]) as one word per
/// 32-element chunk, element 4g + i at bit g of byte i.
fn relay_q3_k_high(hmask: &[u8], out: &mut [u8]) {
    out.fill(0);
    for e in 0..256 {
        let v = (hmask[e % 32] >> (e / 32)) & 1;
        let l = e % 32;
        out[4 * (e / 32) + l % 4] |= v << (l / 4);
    }
}

/// File bytes re-laid out per call of [`relay_blocks`] at most (whole write units): bounds
/// the copy a streaming load holds beside its staging buffer (the page's wasm heap).
pub const RELAY_PIECE_BYTES: usize = 256 << 10;

/// Bytes that a streamed write of a tensor of type `ty` must come in multiples of (the last
/// piece of a part may be shorter): two blocks for re-laid types, so that every 2-byte
/// scale plane write starts on a word, and 4 bytes otherwise.
pub fn write_unit(ty: GgmlType) -> usize {
    split_of(ty).map_or(4, |s| 2 * s.block_bytes)
}

/// Whether `ty` is stored re-laid out (planes) rather than in place.
pub fn is_relaid(ty: GgmlType) -> bool {
    split_of(ty).is_some()
}

/// One contiguous GPU write: `bytes` at byte `offset` of a part buffer.
pub struct PlaneWrite {
    pub offset: u64,
    pub bytes: Vec<u8>,
}

/// The writes that place file bytes `bytes` — whole blocks starting at block `first_block`
/// of a part holding `part_blocks` blocks — into that part's planes. `None` for in-place
/// types (write the bytes as they are).
pub fn relay_blocks(
    ty: GgmlType,
    part_blocks: u64,
    first_block: u64,
    bytes: &[u8],
) -> Option<Vec<PlaneWrite>> {
    let split = split_of(ty)?;
    debug_assert_eq!(bytes.len() % split.block_bytes, 0);
    let n = bytes.len() / split.block_bytes;
    let mut planes: Vec<Vec<u8>> = split.plane_bytes.iter().map(|&b| vec![0; b * n]).collect();
    for (k, block) in bytes.chunks_exact(split.block_bytes).enumerate() {
        (split.relay)(block, k, &mut planes);
    }
    let mut plane_start = 0u64;
    let mut writes = Vec::with_capacity(planes.len());
    for (plane, &b) in planes.into_iter().zip(split.plane_bytes) {
        writes.push(PlaneWrite {
            offset: plane_start + first_block * b as u64,
            bytes: plane,
        });
        plane_start += part_blocks * b as u64;
    }
    Some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_land_in_element_order() {
        let file: Vec<u8> = (0..16u8).map(|i| i | ((15 - i) << 4)).collect();
        let mut out = [0u8; 16];
        order_nibbles(&file, &mut out);
        let element = |e: usize| if e < 16 { e as u8 } else { 31 - e as u8 };
        for j in 0..4 {
            for i in 0..4 {
                let b = out[4 * j + i];
                assert_eq!(b & 15, element(8 * j + i));
                assert_eq!(b >> 4, element(8 * j + 4 + i));
            }
        }
    }

    /// 0% growth: every re-laid type's planes add up to its file block, and the planes the
    /// shaders read in 16-byte units (the first) hold whole units per block.
    #[test]
    fn planes_keep_the_file_bytes() {
        for ty in GgmlType::SUPPORTED {
            let Some(split) = split_of(ty) else { continue };
            assert_eq!(
                split.plane_bytes.iter().sum::<usize>(),
                split.block_bytes,
                "{ty}"
            );
            assert_eq!(ty.block_geometry().unwrap().1, split.block_bytes, "{ty}");
            assert_eq!(split.plane_bytes[0] % 16, 0, "{ty}");
            assert!(split.plane_bytes.iter().all(|b| b % 2 == 0), "{ty}");
        }
    }

    /// One field set at a time lands where the shaders look for it: Q2_K/Q3_K element e's low
    /// bits at bits 2(g % 4) of byte i of word g / 4 of chunk e / 32 (e % 32 = 4g + i), Q3_K's
    /// top bit at bit g of byte i of its chunk's word.
    #[test]
    fn two_bit_and_top_bit_fields_land_in_chunk_order() {
        for e in 0..256 {
            let (g, i) = ((e % 32) / 4, e % 4);
            let mut qs = [0u8; 64];
            qs[32 * (e / 128) + e % 32] = 3 << (2 * ((e % 128) / 32));
            let mut out = [0u8; 64];
            relay_2bit_k(&qs, &mut out);
            let mut want = [0u8; 64];
            want[8 * (e / 32) + 4 * (g / 4) + i] = 3 << (2 * (g % 4));
            assert_eq!(out, want, "low bits of element {e}");

            let mut hmask = [0u8; 32];
            hmask[e % 32] = 1 << (e / 32);
            let mut out = [0u8; 32];
            relay_q3_k_high(&hmask, &mut out);
            let mut want = [0u8; 32];
            want[4 * (e / 32) + i] = 1 << g;
            assert_eq!(out, want, "top bit of element {e}");
        }
    }

    #[test]
    fn planes_follow_one_another_per_part() {
        // Two Q4_0 blocks starting at block 4 of a part of 10: quants at 16·4, scales after
        // the part's whole quant plane (16·10) at 2·4.
        let mut bytes = vec![0u8; 36];
        bytes[0] = 0x11;
        bytes[18] = 0x22;
        let w = relay_blocks(GgmlType::Q4_0, 10, 4, &bytes).unwrap();
        assert_eq!((w[0].offset, w[0].bytes.len()), (64, 32));
        assert_eq!(
            (w[1].offset, &w[1].bytes[..]),
            (168, &[0x11, 0, 0x22, 0][..])
        );
        assert!(relay_blocks(GgmlType::Q4_K, 10, 0, &[0; 144]).is_none());
    }
}
