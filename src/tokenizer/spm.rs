//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`): spaces become `▁`, characters merge
//! pairwise by piece priority, and what no piece covers falls back to `<0xNN>` byte tokens.
//!
//! Normalization of one stretch of text between special tokens (HF `tokenizers`, as built by
//! transformers' `SpmConverter.build_tokenizer_from_spm_proto(legacy=True)` for Llama/Mistral):
//! every space becomes `▁` and, when `add_space_prefix`, one `▁` is put in front of *every*
//! stretch, also one that already starts with a space (HF doubles a leading `▁` before its
//! Metaspace step, so `" Hi"` → `▁▁Hi`, as SentencePiece and llama.cpp do).
//!
//! Merge priority, i.e. which adjacent pair merges first (see [`MergeOrder`]):
//! * `Score` (SentencePiece, and HF's rebuild of it): the merged piece's score, higher first; ties
//!   by the merged piece's id, then the shorter left part.
//! * `Position` (Gemma; HF transformers' `gemma_tokenizer` GGUF reader): the merged piece's id,
//!   lower first, then the longer left part. Gemma's stored scores put its user-defined whitespace
//!   pieces at -1000, while HF (which reproduces the reference tokenizer) orders merges by position.
//!
//! Only normal pieces (and, for Gemma, the whitespace pieces described in `mod.rs`) are merge
//! results, as in SentencePiece itself: control, byte and unused pieces are never formed from text.

use super::hash::FxHashMap;
use super::merge::{merge_word, Merge, Symbol};

/// `▁` (U+2581), SentencePiece's visible space.
pub(crate) const SPACE: char = '\u{2581}';

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MergeOrder {
    Score,
    Position,
}

pub(crate) struct Spm {
    pub add_space_prefix: bool,
    pub order: MergeOrder,
    /// `<0xNN>` token id per byte value, for byte fallback.
    pub byte_ids: [Option<u32>; 256],
    pub unk: Option<u32>,
}

/// Map f32 to u32 so that ascending u32 order is descending score order (total order, like
/// `f32::total_cmp` reversed).
fn descending_score_key(score: f32) -> u32 {
    let bits = score.to_bits();
    let ascending = if bits & 0x8000_0000 != 0 {
        !bits
    } else {
        bits | 0x8000_0000
    };
    !ascending
}

impl Spm {
    /// Tokenize one stretch of plain text, appending ids to `out`.
    /// `lookup`: piece text → id (any type); `mergeable(id)`: whether a piece may be a merge
    /// result or part; `scores`: per-id score.
    pub(crate) fn encode(
        &self,
        text: &str,
        lookup: &FxHashMap<String, u32>,
        mergeable: &[bool],
        scores: &[f32],
        out: &mut Vec<u32>,
    ) {
        if text.is_empty() {
            return;
        }
        let mut s = String::with_capacity(text.len() + 3);
        if self.add_space_prefix {
            s.push(SPACE);
        }
        for c in text.chars() {
            s.push(if c == ' ' { SPACE } else { c });
        }

        let symbols: Vec<Symbol> = s
            .char_indices()
            .map(|(i, c)| {
                let end = i + c.len_utf8();
                Symbol::new(i, end, lookup.get(&s[i..end]).copied())
            })
            .collect();
        let can_merge = |id: Option<u32>| {
            id.is_some_and(|id| mergeable.get(id as usize).copied().unwrap_or(false))
        };
        let merged = merge_word(symbols, |l, r| {
            if !can_merge(l.id) || !can_merge(r.id) {
                return None;
            }
            let id = *lookup.get(&s[l.start as usize..r.end as usize])?;
            if !can_merge(Some(id)) {
                return None;
            }
            let left_len = (l.end - l.start) as i64;
            let key = match self.order {
                MergeOrder::Score => (
                    descending_score_key(scores.get(id as usize).copied().unwrap_or(0.0)),
                    id,
                    left_len,
                ),
                MergeOrder::Position => (id, 0, -left_len),
            };
            Some(Merge { key, id })
        });

        let mut last_was_unk = false;
        for sym in merged {
            if let Some(id) = sym.id {
                out.push(id);
                last_was_unk = false;
                continue;
            }
            let piece = &s[sym.start as usize..sym.end as usize];
            let bytes: Option<Vec<u32>> =
                piece.bytes().map(|b| self.byte_ids[b as usize]).collect();
            match (bytes, self.unk) {
                (Some(ids), _) => {
                    out.extend(ids);
                    last_was_unk = false;
                }
                // No byte tokens: one <unk>, fused with a preceding one (HF `fuse_unk`).
                (None, Some(unk)) => {
                    if !last_was_unk {
                        out.push(unk);
                    }
                    last_was_unk = true;
                }
                (None, None) => {}
            }
        }
    }
}

/// The text a SentencePiece piece decodes to: `▁` back to a space.
pub(crate) fn piece_bytes(text: &str, out: &mut Vec<u8>) {
    for c in text.chars() {
        if c == SPACE {
            out.push(b' ');
        } else {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
}

/// The byte of a `<0xNN>` piece.
pub(crate) fn byte_piece_value(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_key_orders_descending() {
        let xs = [
            f32::INFINITY,
            3.0,
            0.5,
            0.0,
            -0.0,
            -1.0,
            -1e9,
            f32::NEG_INFINITY,
        ];
        let keys: Vec<u32> = xs.iter().map(|&x| descending_score_key(x)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }

    #[test]
    fn byte_pieces() {
        assert_eq!(byte_piece_value("<0x0A>"), Some(10));
        assert_eq!(byte_piece_value("<0xFF>"), Some(255));
        assert_eq!(byte_piece_value("<0x1>"), None);
        assert_eq!(byte_piece_value("0x41"), None);
    }
}
