//! Fuzz target: encode arbitrary text and decode arbitrary id sequences with coco's tokenizers.
//!
//! Tokenizers are built once at init: two small vocabularies constructed here (so the target
//! runs without fixtures) and, when `bash scripts/fixtures.sh` has made them, the real
//! vocabularies in `tests/fixtures/vocab-{mistral-spm,llama3,qwen2}.gguf`.
//!
//! Input layout: byte 0 = flags (bits 0-2 tokenizer, 3 `add_special`, 4 `parse_special`,
//! 5-6 mode, 7 fold ids into the vocabulary range), the rest is text (lossy UTF-8) or ids
//! (u32 little-endian; unfolded ids are mostly far out of range). Properties checked besides
//! "no panic": encoded ids are in range, the stream decoder's pieces concatenate to `decode`,
//! and plain text round-trips through byte-level BPE vocabularies.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use coco::gguf::{Metadata, Value};
use coco::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

struct Vocab {
    name: String,
    tok: Tokenizer,
    /// Byte-level BPE: every text round-trips exactly (SentencePiece rewrites `▁` and spaces).
    lossless: bool,
}

static VOCABS: OnceLock<Vec<Vocab>> = OnceLock::new();

fn strings<S: AsRef<str>>(xs: &[S]) -> Value {
    Value::Array(
        xs.iter()
            .map(|s| Value::String(s.as_ref().to_string()))
            .collect(),
    )
}

fn metadata(entries: Vec<(&str, Value)>) -> Metadata {
    let mut m = Metadata::default();
    for (k, v) in entries {
        m.entries.insert(k.to_string(), v);
    }
    m
}

/// A SentencePiece vocabulary: specials, all 256 byte pieces, a few merges' worth of pieces,
/// and a user-defined token (matched even without `parse_special`).
fn small_spm() -> Metadata {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3];
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    types.extend(std::iter::repeat_n(6, 256));
    let normal = [
        "▁", "a", "b", "c", "▁a", "ab", "▁ab", "bc", "▁▁", "é", "▁é", "<", ">", "<|", "|>",
    ];
    tokens.extend(normal.iter().map(|s| s.to_string()));
    types.extend(std::iter::repeat_n(1, normal.len()));
    tokens.extend([
        "<tag>".to_string(),
        "<end_of_turn>".to_string(),
        "<unused0>".to_string(),
    ]);
    types.extend([4, 3, 5]);
    let scores: Vec<Value> = (0..tokens.len()).map(|i| Value::F32(-(i as f32))).collect();
    metadata(vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        ("tokenizer.ggml.scores", Value::Array(scores)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
    ])
}

/// GPT-2's printable spelling of a byte (printable Latin-1 stays, the rest moves to U+0100..).
fn byte_level_spelling() -> Vec<char> {
    let printable = |b: u32| {
        (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b)
    };
    let mut moved = 0;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                moved += 1;
                0xFF + moved
            };
            char::from_u32(c).unwrap_or('?')
        })
        .collect()
}

/// A byte-level BPE vocabulary with a handful of merges and control/user-defined tokens.
fn small_bpe(pre: &str) -> Metadata {
    let mut tokens: Vec<String> = byte_level_spelling()
        .into_iter()
        .map(String::from)
        .collect();
    let merges = [
        "Ġ t",
        "h e",
        "Ġt he",
        "i n",
        "Ġ a",
        "Ġa n",
        "Ġan d",
        "Ġ Ġ",
        "ĠĠ ĠĠ",
        "1 2",
        "Ã ©",
    ];
    for m in merges {
        tokens.push(m.replace(' ', ""));
    }
    let mut types = vec![1i32; tokens.len()];
    for (t, ty) in [
        ("<|endoftext|>", 3),
        ("<|im_start|>", 3),
        ("<tool>", 4),
        ("<|reserved|>", 5),
    ] {
        tokens.push(t.into());
        types.push(ty);
    }
    metadata(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(pre.into())),
        ("tokenizer.ggml.tokens", strings(&tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strings(&merges)),
        (
            "tokenizer.ggml.eos_token_id",
            Value::U32(tokens.len() as u32 - 4),
        ),
    ])
}

fn build_vocabs() -> Vec<Vocab> {
    let mut out = Vec::new();
    let mut add = |name: &str, md: &Metadata, lossless: bool| match Tokenizer::from_gguf(md) {
        Ok(tok) => out.push(Vocab {
            name: name.to_string(),
            tok,
            lossless,
        }),
        Err(e) => panic!("fuzz vocabulary {name} does not build: {e}"),
    };
    add("small-spm", &small_spm(), false);
    add("small-bpe-gpt2", &small_bpe("default"), true);
    add("small-bpe-llama3", &small_bpe("llama-bpe"), true);
    // COCO_FUZZ_FIXTURES: where the vocabularies are when the binary runs outside this checkout.
    let fixtures = std::env::var_os("COCO_FUZZ_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures"));
    for (kind, lossless) in [("mistral-spm", false), ("llama3", true), ("qwen2", true)] {
        let path = fixtures.join(format!("vocab-{kind}.gguf"));
        match coco::gguf::read_header(&path) {
            Ok(h) => add(kind, &h.metadata, lossless),
            Err(e) => eprintln!(
                "tokenizer fuzz: skipping {} ({e}); run scripts/fixtures.sh",
                path.display()
            ),
        }
    }
    eprintln!(
        "tokenizer fuzz: vocabularies {:?}",
        out.iter().map(|v| v.name.as_str()).collect::<Vec<_>>()
    );
    out
}

/// Decodes `ids` whole and through the stream decoder; the two must agree.
fn decode_both(v: &Vocab, ids: &[u32]) -> String {
    let whole = v.tok.decode(ids);
    let mut stream = v.tok.stream_decoder();
    let mut pieces = String::new();
    for &id in ids {
        pieces.push_str(&stream.push(id));
    }
    pieces.push_str(&stream.flush());
    assert_eq!(
        pieces, whole,
        "{}: stream decoder disagrees with decode for {ids:?}",
        v.name
    );
    let _ = v.tok.decode_with_special(ids);
    whole
}

fuzz_target!(
    init: {
        VOCABS.get_or_init(build_vocabs);
    },
    |data: &[u8]| {
        let Some((&flags, rest)) = data.split_first() else { return };
        let vocabs = VOCABS.get_or_init(build_vocabs);
        let v = &vocabs[(flags & 7) as usize % vocabs.len()];
        let (add_special, parse_special) = (flags & 8 != 0, flags & 16 != 0);
        let n = v.tok.vocab_size() as u32;
        match (flags >> 5) & 3 {
            // Encode text; decode what came out.
            0 | 1 => {
                let text = String::from_utf8_lossy(rest);
                let ids = v.tok.encode(&text, add_special, parse_special);
                if let Some(bad) = ids.iter().find(|&&id| id >= n) {
                    panic!("{}: encode produced id {bad} outside the vocabulary of {n}", v.name);
                }
                let back = decode_both(v, &ids);
                if v.lossless && !add_special && !parse_special {
                    assert_eq!(back, text, "{}: byte-level BPE round trip", v.name);
                }
            }
            // Decode arbitrary ids, whole, streamed, and streamed as a continuation.
            mode => {
                let fold = flags & 128 != 0;
                let ids: Vec<u32> = rest
                    .chunks(4)
                    .map(|c| {
                        let mut b = [0u8; 4];
                        b[..c.len()].copy_from_slice(c);
                        let id = u32::from_le_bytes(b);
                        if fold { id % (n + 8) } else { id }
                    })
                    .collect();
                decode_both(v, &ids);
                if mode == 3 {
                    let mut stream = v.tok.stream_decoder().continuing();
                    for &id in &ids {
                        let _ = stream.push(id);
                    }
                    let _ = stream.flush();
                }
            }
        }
    }
);
