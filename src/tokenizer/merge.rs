//! The BPE merge loop shared by the SentencePiece and byte-level tokenizers.
//!
//! Symbols form a doubly linked list over one word. Every adjacent pair that may merge is pushed on
//! a min-heap keyed by (priority, position of the left symbol); the best pair is merged, stale
//! entries are skipped when popped, and the new neighbours are pushed. That is O(n log n) per word,
//! the algorithm of both SentencePiece's `bpe_model.cc` and HF `tokenizers`' `Word::merge_all`,
//! which pick the same pair when they agree on the priority: the lowest key, leftmost on ties.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One symbol of a word being merged: a byte range of the word and its token id, if any.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Symbol {
    pub start: u32,
    pub end: u32,
    /// `None` for text that is no token (merges never involve it).
    pub id: Option<u32>,
    prev: u32,
    next: u32,
}

const NONE: u32 = u32::MAX;

impl Symbol {
    pub(crate) fn new(start: usize, end: usize, id: Option<u32>) -> Self {
        Symbol {
            start: start as u32,
            end: end as u32,
            id,
            prev: NONE,
            next: NONE,
        }
    }
}

/// What a candidate pair merges into, and how urgently: lower `key` merges first.
pub(crate) struct Merge {
    pub key: (u32, u32, i64),
    pub id: u32,
}

/// Merge `symbols` (in text order) in place until no pair merges; returns the survivors in order.
/// `pair(left, right)` says whether two adjacent symbols merge.
pub(crate) fn merge_word(
    mut symbols: Vec<Symbol>,
    mut pair: impl FnMut(&Symbol, &Symbol) -> Option<Merge>,
) -> Vec<Symbol> {
    let n = symbols.len();
    if n < 2 {
        return symbols;
    }
    for (i, s) in symbols.iter_mut().enumerate() {
        s.prev = if i == 0 { NONE } else { (i - 1) as u32 };
        s.next = if i + 1 == n { NONE } else { (i + 1) as u32 };
    }
    // Heap entries: (key, left start, left index, right end, merged id). The right end tells a
    // stale entry apart: once either symbol has changed, the pair no longer spans the same bytes.
    type Entry = Reverse<((u32, u32, i64), u32, u32, u32, u32)>;
    let mut heap: BinaryHeap<Entry> = BinaryHeap::with_capacity(n);
    let push = |heap: &mut BinaryHeap<Entry>,
                symbols: &[Symbol],
                l: usize,
                pair: &mut dyn FnMut(&Symbol, &Symbol) -> Option<Merge>| {
        let r = symbols[l].next;
        if r == NONE {
            return;
        }
        let (ls, rs) = (&symbols[l], &symbols[r as usize]);
        if let Some(m) = pair(ls, rs) {
            heap.push(Reverse((m.key, ls.start, l as u32, rs.end, m.id)));
        }
    };
    for l in 0..n - 1 {
        push(&mut heap, &symbols, l, &mut pair);
    }
    let mut alive = vec![true; n];
    while let Some(Reverse((_, start, l, end, id))) = heap.pop() {
        let l = l as usize;
        if !alive[l] || symbols[l].start != start {
            continue;
        }
        let r = symbols[l].next;
        if r == NONE || symbols[r as usize].end != end {
            continue;
        }
        let r = r as usize;
        // Merge r into l.
        let after = symbols[r].next;
        symbols[l].end = symbols[r].end;
        symbols[l].id = Some(id);
        symbols[l].next = after;
        if after != NONE {
            symbols[after as usize].prev = l as u32;
        }
        alive[r] = false;
        let prev = symbols[l].prev;
        if prev != NONE {
            push(&mut heap, &symbols, prev as usize, &mut pair);
        }
        push(&mut heap, &symbols, l, &mut pair);
    }
    let mut out = Vec::with_capacity(n);
    let mut at = 0u32;
    while at != NONE {
        out.push(symbols[at as usize]);
        at = symbols[at as usize].next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "aaaa" with merges a+a (rank 0) and aa+aa (rank 1): leftmost first gives [aa, aa] → [aaaa].
    #[test]
    fn merges_leftmost_then_next_rank() {
        let text = "aaaaa";
        let syms: Vec<Symbol> = (0..text.len())
            .map(|i| Symbol::new(i, i + 1, Some(0)))
            .collect();
        let out = merge_word(syms, |l, r| {
            let len = (r.end - l.start) as usize;
            let (ll, rl) = ((l.end - l.start) as usize, (r.end - r.start) as usize);
            match (ll, rl) {
                (1, 1) => Some(Merge {
                    key: (0, 0, 0),
                    id: 2,
                }),
                (2, 2) => Some(Merge {
                    key: (1, 0, 0),
                    id: 4,
                }),
                _ => {
                    let _ = len;
                    None
                }
            }
        });
        let spans: Vec<(u32, u32)> = out.iter().map(|s| (s.start, s.end)).collect();
        assert_eq!(spans, vec![(0, 4), (4, 5)]);
    }
}
