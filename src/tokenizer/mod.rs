//! Tokenizers built from GGUF metadata (`tokenizer.ggml.*`, as llama.cpp's converter writes it).
//!
//! Two families:
//! * `llama`: SentencePiece-style BPE over pieces with scores, `▁` for spaces, `<0xNN>` byte
//!   fallback (`spm`). Mistral/Llama 2 and Gemma vocabularies.
//! * `gpt2`: byte-level BPE with ranked merges and a regex pre-tokenizer picked by
//!   `tokenizer.ggml.pre` (`bpe`). Llama 3, Qwen2, GPT-4o (o200k) and SmolLM2 vocabularies.
//!
//! The reference is HF: `tests/goldens/tokenizer_*.json` hold ids from HF `tokenizers` /
//! `transformers` (see `tools/tokenizer_goldens.py`), and `tests/tokenizer.rs` demands identical ids.
//! Where HF and llama.cpp differ we follow HF and say so:
//! * SentencePiece merge order: HF's; Gemma files order merges by token position (HF
//!   `gemma_tokenizer`), and their user-defined whitespace pieces (`"  "`, stored with real spaces)
//!   are looked up as `▁▁` and merged like normal pieces rather than matched whole.
//! * Special-token text is split leftmost-longest (HF's added-vocabulary matcher).
//! * `default` as a byte-level pre-tokenizer is GPT-2's regex (HF's GGUF reader).
//!
//! Special tokens: control (type 3) and unknown (2) tokens are matched in the text only with
//! `parse_special`; user-defined (4) tokens always are, as in both llama.cpp and HF.
//!
//! Decoding drops control, unknown and unused tokens ([`Tokenizer::decode_with_special`] keeps
//! control and unknown ones). A SentencePiece vocabulary that adds a space prefix has one leading
//! space removed from the decoded text: HF's `Strip(left=1)` decoder step, applied after special
//! tokens are skipped (llama.cpp keeps the space when the ids start with BOS). [`StreamDecoder`]
//! yields the same text piecewise, holding back bytes of an incomplete UTF-8 character; for
//! generated text that continues a prompt use [`StreamDecoder::continuing`], which keeps the
//! first token's space.

mod bpe;
mod hash;
mod merge;
mod special;
mod spm;

use crate::gguf::{Metadata, MetadataError};

use bpe::{Bpe, PreTokenizer, SUPPORTED_PRE};
use hash::FxHashMap;
use special::{Piece, SpecialMatcher};
use spm::{MergeOrder, Spm};

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";

/// The byte-level BPE pre-tokenizer `tokenizer.ggml.pre` names (absent: `default`).
fn bpe_pre_tokenizer(md: &Metadata) -> Result<PreTokenizer, TokenizerError> {
    let pre_name = md.opt_str(KEY_PRE)?.unwrap_or("default");
    PreTokenizer::from_name(pre_name)
        .ok_or_else(|| TokenizerError::UnsupportedPre(pre_name.to_string()))
}
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// Token texts that end a turn or a document. llama.cpp (`llama-vocab.cpp`, "special_eog_ids")
/// treats these as end-of-generation whatever the file says, and forces them to control type.
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];

/// Why a tokenizer could not be built; each variant names the metadata key at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("not yet: tokenizer model {0:?} (`tokenizer.ggml.model`); supported: llama (SentencePiece), gpt2 (byte-level BPE)")]
    UnsupportedModel(String),
    #[error("not yet: pre-tokenizer {0:?} (`tokenizer.ggml.pre`); supported: {supported}", supported = SUPPORTED_PRE)]
    UnsupportedPre(String),
    #[error("metadata key `{key}` has {found} entries, but `tokenizer.ggml.tokens` has {tokens}")]
    LengthMismatch {
        key: &'static str,
        found: usize,
        tokens: usize,
    },
    #[error("metadata key `{key}` = {id} is not a token id (vocabulary of {vocab_size})")]
    IdOutOfRange {
        key: &'static str,
        id: u32,
        vocab_size: usize,
    },
    #[error("metadata key `{key}`: {why}")]
    Invalid { key: &'static str, why: String },
    #[error("pre-tokenizer regex failed to compile: {0}")]
    Regex(String),
}

/// `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenType {
    Undefined,
    Normal,
    Unknown,
    Control,
    UserDefined,
    Unused,
    Byte,
}

impl TokenType {
    fn from_gguf(v: i64) -> TokenType {
        match v {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

enum Model {
    // Boxed: both carry 256-entry byte tables; the Tokenizer itself stays small.
    Spm(Box<Spm>),
    Bpe(Box<Bpe>),
}

/// A tokenizer read from GGUF metadata. Pure computation: builds for wasm32 as well.
pub struct Tokenizer {
    model: Model,
    /// Token text as stored in the file, by id.
    texts: Vec<String>,
    types: Vec<TokenType>,
    /// Text → id for the model's lookups (later ids win on duplicate texts, as in HF and llama.cpp).
    lookup: FxHashMap<String, u32>,
    /// SentencePiece only: whether a piece may take part in merges, and its score.
    mergeable: Vec<bool>,
    scores: Vec<f32>,
    specials: SpecialMatcher,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    add_eos: bool,
    eos_ids: Vec<u32>,
    kind: String,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("kind", &self.kind)
            .field("vocab_size", &self.texts.len())
            .field("bos", &self.bos)
            .field("eos_ids", &self.eos_ids)
            .finish_non_exhaustive()
    }
}

/// An optional token id, checked against the vocabulary.
fn opt_id(md: &Metadata, key: &'static str, n: usize) -> Result<Option<u32>, TokenizerError> {
    match md.opt_u32(key)? {
        Some(id) if id as usize >= n => Err(TokenizerError::IdOutOfRange {
            key,
            id,
            vocab_size: n,
        }),
        other => Ok(other),
    }
}

impl Tokenizer {
    /// The tokenizer model and, for byte-level BPE, the pre-tokenizer, refused as "not yet"
    /// when coco has no implementation: the cheap part of [`Tokenizer::from_gguf`]'s checks,
    /// which the capability report runs before the weights (e.g. Mistral NeMo's `tekken`
    /// pre-tokenizer). Returns the model name.
    pub fn check_kind(md: &Metadata) -> Result<&str, TokenizerError> {
        let model_name = md.str(KEY_MODEL)?;
        if model_name != "llama" && model_name != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model_name.to_string()));
        }
        if model_name == "gpt2" {
            bpe_pre_tokenizer(md)?;
        }
        Ok(model_name)
    }

    pub fn from_gguf(md: &Metadata) -> Result<Tokenizer, TokenizerError> {
        let model_name = Self::check_kind(md)?;
        let tokens = md.str_array(KEY_TOKENS)?;
        let n = tokens.len();
        if n == 0 || n > u32::MAX as usize {
            return Err(TokenizerError::Invalid {
                key: KEY_TOKENS,
                why: format!("{n} tokens"),
            });
        }
        let mut types = if md.contains(KEY_TYPES) {
            let raw = md.i64_array(KEY_TYPES)?;
            if raw.len() != n {
                return Err(TokenizerError::LengthMismatch {
                    key: KEY_TYPES,
                    found: raw.len(),
                    tokens: n,
                });
            }
            raw.into_iter().map(TokenType::from_gguf).collect()
        } else {
            vec![TokenType::Normal; n]
        };
        // As llama.cpp does: end-of-turn texts are control tokens even where the file says otherwise.
        for (i, t) in tokens.iter().enumerate() {
            if END_OF_GENERATION_TEXTS.contains(t) {
                types[i] = TokenType::Control;
            }
        }

        let bos_key = opt_id(md, KEY_BOS, n)?;
        let eos_key = opt_id(md, KEY_EOS, n)?;
        let add_bos_key = md.opt_bool(KEY_ADD_BOS)?;
        let add_eos = md.opt_bool(KEY_ADD_EOS)?.unwrap_or(false);

        let mut lookup: FxHashMap<String, u32> = hash::map_with_capacity(n);
        let mut mergeable = Vec::new();
        let mut scores = Vec::new();
        let specials;
        let (model, kind, bos, eos, add_bos);
        if model_name == "llama" {
            let arch = md.opt_str("general.architecture")?.unwrap_or("");
            // HF transformers' GGUF reader (`GGUF_SENTENCEPIECE_BUILDERS`) treats exactly these as Gemma.
            let gemma = matches!(arch, "gemma" | "gemma2" | "gemma3");
            scores = if md.contains(KEY_SCORES) {
                let s = md.f32_array(KEY_SCORES)?;
                if s.len() != n {
                    return Err(TokenizerError::LengthMismatch {
                        key: KEY_SCORES,
                        found: s.len(),
                        tokens: n,
                    });
                }
                s
            } else {
                vec![0.0; n]
            };
            mergeable = vec![false; n];
            let mut special_entries = Vec::new();
            for (i, &t) in tokens.iter().enumerate() {
                let ty = types[i];
                // Gemma stores its whitespace-run pieces with real spaces (the converter "pre-normalizes"
                // user-defined tokens); HF spells them back as `▁`s and merges them like normal pieces.
                let respelled =
                    gemma && ty == TokenType::UserDefined && t.contains(' ') && t.trim().is_empty();
                if respelled {
                    lookup.insert(spm::SPACE.to_string().repeat(t.chars().count()), i as u32);
                } else {
                    lookup.insert(t.to_string(), i as u32);
                }
                // Undefined types (0) are read as normal, as when the file has no type array.
                mergeable[i] = matches!(ty, TokenType::Normal | TokenType::Undefined) || respelled;
                match ty {
                    TokenType::Control | TokenType::Unknown => {
                        special_entries.push((t, i as u32, true))
                    }
                    TokenType::UserDefined if !respelled => {
                        special_entries.push((t, i as u32, false))
                    }
                    _ => {}
                }
            }
            specials = SpecialMatcher::new(special_entries);
            let mut byte_ids = [None; 256];
            for (b, slot) in byte_ids.iter_mut().enumerate() {
                *slot = lookup.get(&format!("<0x{b:02X}>")).copied();
            }
            // llama.cpp's SentencePiece defaults: unk 0, bos 1, eos 2, add BOS, add a space prefix.
            let default_id = |id: u32| if (id as usize) < n { Some(id) } else { None };
            let unk = opt_id(md, KEY_UNK, n)?.or(default_id(0));
            let add_space_prefix = md.opt_bool(KEY_ADD_SPACE_PREFIX)?.unwrap_or(true);
            let order = if gemma {
                MergeOrder::Position
            } else {
                MergeOrder::Score
            };
            model = Model::Spm(Box::new(Spm {
                add_space_prefix,
                order,
                byte_ids,
                unk,
            }));
            kind = "llama (SentencePiece)".to_string();
            bos = bos_key.or(default_id(1));
            eos = eos_key.or(default_id(2));
            add_bos = add_bos_key.unwrap_or(true);
        } else {
            let pre = bpe_pre_tokenizer(md)?;
            let pre_name = md.opt_str(KEY_PRE)?.unwrap_or("default");
            let merges = md.str_array(KEY_MERGES)?;
            let mut special_entries = Vec::new();
            for (i, &t) in tokens.iter().enumerate() {
                lookup.insert(t.to_string(), i as u32);
                match types[i] {
                    TokenType::Control | TokenType::Unknown => {
                        special_entries.push((t, i as u32, true))
                    }
                    TokenType::UserDefined => special_entries.push((t, i as u32, false)),
                    _ => {}
                }
            }
            specials = SpecialMatcher::new(special_entries);
            // Llama 3's tokenizer.json skips merges for whole-token words (HF `ignore_merges`),
            // smaug-bpe's too (llama.cpp does not set it for that name; HF, the oracle, reads it
            // from the tokenizer.json those files come from). llama.cpp adds BOS by default for
            // llama-bpe only; a smaug-bpe file says add_bos_token = false anyway.
            let llama3 = pre == PreTokenizer::Llama3;
            let llama_bpe = llama3 && pre_name != "smaug-bpe";
            model = Model::Bpe(Box::new(Bpe::new(pre, llama3, &merges, &lookup)?));
            kind = format!("gpt2 (byte-level BPE, pre={pre_name})");
            bos = bos_key;
            eos = eos_key;
            add_bos = add_bos_key.unwrap_or(llama_bpe);
        }

        let mut eos_ids: Vec<u32> = Vec::new();
        let mut extra: Vec<u32> = [opt_id(md, KEY_EOT, n)?, opt_id(md, KEY_EOM, n)?]
            .into_iter()
            .flatten()
            .collect();
        extra.extend(
            tokens
                .iter()
                .enumerate()
                .filter(|(_, t)| END_OF_GENERATION_TEXTS.contains(t))
                .map(|(i, _)| i as u32),
        );
        extra.sort_unstable();
        eos_ids.extend(eos);
        for id in extra {
            if !eos_ids.contains(&id) {
                eos_ids.push(id);
            }
        }

        Ok(Tokenizer {
            model,
            texts: tokens.iter().map(|t| t.to_string()).collect(),
            types,
            lookup,
            mergeable,
            scores,
            specials,
            bos,
            eos,
            add_bos,
            add_eos,
            eos_ids,
            kind,
        })
    }

    /// Text → ids. `add_special`: add BOS/EOS as the metadata says. `parse_special`: text of
    /// control tokens (`<|eot_id|>`, `<start_of_turn>`, …) becomes that token; otherwise it is
    /// tokenized as plain text. User-defined tokens are matched either way.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        for piece in self.specials.split(text, parse_special) {
            match piece {
                Piece::Token(id) => out.push(id),
                Piece::Text(t) => match &self.model {
                    Model::Spm(spm) => {
                        spm.encode(t, &self.lookup, &self.mergeable, &self.scores, &mut out)
                    }
                    Model::Bpe(bpe) => bpe.encode(t, &self.lookup, &mut out),
                },
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// Ids → text. Control, unknown and unused tokens produce nothing; invalid UTF-8 (only
    /// possible from byte tokens) becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        self.decode_impl(ids, false)
    }

    /// As [`Tokenizer::decode`], but control and unknown tokens appear as their text
    /// (`<end_of_turn>`, `<|eot_id|>`): for showing a prompt exactly as the model sees it.
    pub fn decode_with_special(&self, ids: &[u32]) -> String {
        self.decode_impl(ids, true)
    }

    fn decode_impl(&self, ids: &[u32], render_special: bool) -> String {
        let mut bytes = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            self.token_bytes(id, render_special, &mut bytes);
        }
        let skip = usize::from(self.strips_leading_space() && bytes.first() == Some(&b' '));
        String::from_utf8_lossy(&bytes[skip..]).into_owned()
    }

    /// A decoder for ids arriving one at a time; its pieces concatenate to [`Tokenizer::decode`].
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder {
            tok: self,
            pending: Vec::new(),
            strip_space: self.strips_leading_space(),
        }
    }

    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// Ids that end generation: EOS, EOT/EOM when the file names them, and end-of-turn control
    /// tokens found by text (`<end_of_turn>`, `<|eot_id|>`, `<|im_end|>`, …). EOS comes first.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The token's text as stored in the file (byte-level spelling for gpt2 vocabularies).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// `"llama (SentencePiece)"` or `"gpt2 (byte-level BPE, pre=<pre>)"`.
    pub fn kind(&self) -> &str {
        &self.kind
    }

    fn strips_leading_space(&self) -> bool {
        matches!(&self.model, Model::Spm(spm) if spm.add_space_prefix)
    }

    /// Append the bytes token `id` decodes to.
    fn token_bytes(&self, id: u32, render_special: bool, out: &mut Vec<u8>) {
        let (Some(text), Some(&ty)) = (self.texts.get(id as usize), self.types.get(id as usize))
        else {
            return;
        };
        match ty {
            TokenType::Control | TokenType::Unknown if render_special => {
                out.extend_from_slice(text.as_bytes())
            }
            TokenType::Control | TokenType::Unknown | TokenType::Unused => {}
            TokenType::Byte => match spm::byte_piece_value(text) {
                Some(b) => out.push(b),
                None => out.extend_from_slice(text.as_bytes()),
            },
            TokenType::UserDefined | TokenType::Normal | TokenType::Undefined => {
                match &self.model {
                    Model::Spm(_) => spm::piece_bytes(text, out),
                    // User-defined tokens are stored as plain text, not in the byte alphabet.
                    Model::Bpe(_) if ty == TokenType::UserDefined => {
                        out.extend_from_slice(text.as_bytes())
                    }
                    Model::Bpe(bpe) => bpe.token_bytes(text, out),
                }
            }
        }
    }
}

/// Streaming detokenizer: [`StreamDecoder::push`] returns only complete UTF-8 text, holding back
/// the bytes of a character split across tokens until the rest arrives.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
    /// Drop one leading space from the first text (as [`Tokenizer::decode`] does).
    strip_space: bool,
}

impl<'a> StreamDecoder<'a> {
    /// For ids that continue a prompt (generated text): keep the first token's leading space,
    /// which `decode` of a whole sequence would strip.
    pub fn continuing(mut self) -> Self {
        self.strip_space = false;
        self
    }

    /// Add one id; returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.tok.token_bytes(id, false, &mut self.pending);
        if self.strip_space && !self.pending.is_empty() {
            if self.pending[0] == b' ' {
                self.pending.remove(0);
            }
            self.strip_space = false;
        }
        self.take_complete()
    }

    /// Everything still held back, invalid or incomplete bytes as U+FFFD.
    pub fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut used = 0usize;
        loop {
            match std::str::from_utf8(&self.pending[used..]) {
                Ok(s) => {
                    out.push_str(s);
                    used = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // The prefix up to `valid_up_to` is valid UTF-8 by definition.
                    out.push_str(&String::from_utf8_lossy(&self.pending[used..used + valid]));
                    used += valid;
                    match e.error_len() {
                        // An incomplete character at the end: wait for more bytes.
                        None => break,
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            used += bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..used);
        out
    }
}

#[cfg(test)]
mod tests;
