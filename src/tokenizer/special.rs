//! Splitting text on special-token text (control, unknown and user-defined tokens) before the
//! model-specific tokenizer sees it.
//!
//! HF `tokenizers` matches added tokens with a leftmost-longest automaton on the raw text (our
//! GGUF-derived added tokens are all `normalized=False`), and each stretch of text between matches
//! is then normalized and tokenized on its own. A byte trie gives the same leftmost-longest answer.
//! llama.cpp instead splits on every occurrence of each token, longest token first; the two only
//! differ when special texts overlap, which no vocabulary we know of has.

/// One piece of the input: plain text, or a token matched whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Token(u32),
}

#[derive(Default)]
struct Node {
    /// Sorted by byte, for binary search.
    children: Vec<(u8, u32)>,
    /// Token ending here, and whether it is matched only when `parse_special` is set
    /// (control/unknown) rather than always (user-defined).
    token: Option<(u32, bool)>,
}

/// A byte trie over the texts of the tokens that are matched whole.
pub(crate) struct SpecialMatcher {
    nodes: Vec<Node>,
}

impl SpecialMatcher {
    /// `entries`: (text, id, only_when_parse_special). Empty texts are skipped; for duplicate texts
    /// the first id wins, as the first occurrence does in HF's added vocabulary.
    pub(crate) fn new<'s>(entries: impl IntoIterator<Item = (&'s str, u32, bool)>) -> Self {
        let mut nodes = vec![Node::default()];
        for (text, id, special) in entries {
            if text.is_empty() {
                continue;
            }
            let mut at = 0usize;
            for &b in text.as_bytes() {
                at = match nodes[at].children.binary_search_by_key(&b, |&(c, _)| c) {
                    Ok(i) => nodes[at].children[i].1 as usize,
                    Err(i) => {
                        let next = nodes.len();
                        nodes.push(Node::default());
                        nodes[at].children.insert(i, (b, next as u32));
                        next
                    }
                };
            }
            if nodes[at].token.is_none() {
                nodes[at].token = Some((id, special));
            }
        }
        SpecialMatcher { nodes }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.nodes[0].children.is_empty()
    }

    /// The longest enabled token whose text starts `bytes`: (id, length in bytes).
    fn longest_at(&self, bytes: &[u8], parse_special: bool) -> Option<(u32, usize)> {
        let mut at = 0usize;
        let mut best = None;
        for (i, &b) in bytes.iter().enumerate() {
            let node = &self.nodes[at];
            match node.children.binary_search_by_key(&b, |&(c, _)| c) {
                Ok(k) => at = node.children[k].1 as usize,
                Err(_) => break,
            }
            if let Some((id, special)) = self.nodes[at].token {
                if parse_special || !special {
                    best = Some((id, i + 1));
                }
            }
        }
        best
    }

    /// Split `text` into plain-text stretches and whole tokens, leftmost-longest.
    pub(crate) fn split<'a>(&self, text: &'a str, parse_special: bool) -> Vec<Piece<'a>> {
        let mut out = Vec::new();
        if self.is_empty() {
            if !text.is_empty() {
                out.push(Piece::Text(text));
            }
            return out;
        }
        let bytes = text.as_bytes();
        let (mut start, mut i) = (0usize, 0usize);
        while i < bytes.len() {
            // Token texts are valid UTF-8, so a match can only begin on a char boundary.
            if let Some((id, len)) = self.longest_at(&bytes[i..], parse_special) {
                if start < i {
                    out.push(Piece::Text(&text[start..i]));
                }
                out.push(Piece::Token(id));
                i += len;
                start = i;
            } else {
                i += 1;
            }
        }
        if start < bytes.len() {
            out.push(Piece::Text(&text[start..]));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftmost_longest_and_parse_special_gate() {
        let m = SpecialMatcher::new([("<a>", 1, true), ("<a><b>", 2, true), ("<u>", 3, false)]);
        assert_eq!(
            m.split("x<a><b>y<a>", true),
            vec![
                Piece::Text("x"),
                Piece::Token(2),
                Piece::Text("y"),
                Piece::Token(1)
            ]
        );
        assert_eq!(
            m.split("x<a><u>", false),
            vec![Piece::Text("x<a>"), Piece::Token(3)]
        );
        assert_eq!(m.split("", true), vec![]);
        assert_eq!(
            m.split("é<u>é", false),
            vec![Piece::Text("é"), Piece::Token(3), Piece::Text("é")]
        );
    }
}
