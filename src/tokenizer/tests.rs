//! Unit tests on small hand-built vocabularies (the real ones are tested in `tests/tokenizer.rs`).

use super::*;
use crate::gguf::Value;

fn strings(xs: &[&str]) -> Value {
    Value::Array(xs.iter().map(|s| Value::String(s.to_string())).collect())
}

fn md(entries: Vec<(&str, Value)>) -> Metadata {
    let mut m = Metadata::default();
    for (k, v) in entries {
        m.entries.insert(k.to_string(), v);
    }
    m
}

/// A SentencePiece vocabulary: 3 specials, 256 byte pieces, then normal pieces with descending
/// scores in list order, and one user-defined token.
fn spm_metadata(extra: Vec<(&str, Value)>) -> Metadata {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut types = vec![2i32, 3, 3];
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    types.extend(std::iter::repeat_n(6, 256));
    let normal = ["▁", "a", "b", "c", "▁a", "ab", "▁ab", "bc", "▁▁", "<", ">"];
    tokens.extend(normal.iter().map(|s| s.to_string()));
    types.extend(std::iter::repeat_n(1, normal.len()));
    tokens.push("<tag>".into());
    types.push(4);
    let n = tokens.len();
    let scores: Vec<Value> = (0..n)
        .map(|i| Value::F32(if i < 259 { 0.0 } else { -(i as f32) }))
        .collect();
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut e = vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", strings(&refs)),
        ("tokenizer.ggml.scores", Value::Array(scores)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
    ];
    e.extend(extra);
    md(e)
}

fn id(t: &Tokenizer, text: &str) -> u32 {
    t.lookup[text]
}

#[test]
fn spm_merges_prefix_and_byte_fallback() {
    let t = Tokenizer::from_gguf(&spm_metadata(vec![])).expect("builds");
    assert_eq!(t.kind(), "llama (SentencePiece)");
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_ids(), &[2]);
    // "ab c" → ▁ab ▁ c ; BOS added by default.
    assert_eq!(
        t.encode("ab c", true, false),
        vec![1, id(&t, "▁ab"), id(&t, "▁"), id(&t, "c")]
    );
    // A leading space gets its own ▁ in front; ▁a outranks ▁▁.
    assert_eq!(
        t.encode(" a", false, false),
        vec![id(&t, "▁"), id(&t, "▁a")]
    );
    assert_eq!(
        t.encode("  ", false, false),
        vec![id(&t, "▁▁"), id(&t, "▁")]
    );
    // é is no piece: its two UTF-8 bytes.
    assert_eq!(
        t.encode("é", false, false),
        vec![id(&t, "▁"), 3 + 0xC3, 3 + 0xA9]
    );
    assert_eq!(t.decode(&t.encode("é ab", true, false)), "é ab");
    assert_eq!(t.encode("", true, false), vec![1]);
}

#[test]
fn spm_special_tokens() {
    let t = Tokenizer::from_gguf(&spm_metadata(vec![])).expect("builds");
    let tag = id(&t, "<tag>");
    // Control text only with parse_special; each stretch of text gets its own ▁ prefix.
    assert_eq!(
        t.encode("a</s>a", false, true),
        vec![id(&t, "▁a"), 2, id(&t, "▁a")]
    );
    let plain = t.encode("a</s>", false, false);
    assert!(!plain.contains(&2), "{plain:?}");
    // User-defined always.
    assert_eq!(t.encode("a<tag>", false, false), vec![id(&t, "▁a"), tag]);
    // Control tokens decode to nothing; user-defined to their text.
    assert_eq!(t.decode(&[1, id(&t, "▁a"), 2, tag]), "a<tag>");
    assert_eq!(
        t.decode_with_special(&[1, id(&t, "▁a"), 2, tag]),
        "<s> a</s><tag>"
    );
}

#[test]
fn spm_without_space_prefix_keeps_spaces() {
    let t = Tokenizer::from_gguf(&spm_metadata(vec![(
        "tokenizer.ggml.add_space_prefix",
        Value::Bool(false),
    )]))
    .expect("builds");
    assert_eq!(t.encode("ab", false, false), vec![id(&t, "ab")]);
    assert_eq!(t.decode(&[id(&t, "▁a")]), " a");
}

#[test]
fn stream_decoder_holds_split_characters() {
    let t = Tokenizer::from_gguf(&spm_metadata(vec![])).expect("builds");
    let ids = t.encode("a€b", false, false); // € = E2 82 AC, three byte tokens
    let mut d = t.stream_decoder();
    let pieces: Vec<String> = ids.iter().map(|&i| d.push(i)).collect();
    assert_eq!(pieces.concat() + &d.flush(), "a€b");
    assert!(
        pieces.iter().any(|p| p.is_empty()),
        "a partial character was held back: {pieces:?}"
    );
    // Invalid bytes become U+FFFD; an incomplete tail is flushed as U+FFFD.
    let mut d = t.stream_decoder();
    assert_eq!(d.push(3 + 0xFF), "\u{FFFD}");
    assert_eq!(d.push(3 + 0xE2), "");
    assert_eq!(d.flush(), "\u{FFFD}");
    // The first token's space is stripped unless continuing a prompt.
    let a = id(&t, "▁a");
    assert_eq!(t.stream_decoder().push(a), "a");
    assert_eq!(t.stream_decoder().continuing().push(a), " a");
}

/// A byte-level vocabulary: the 256 byte chars, then merged tokens.
fn bpe_metadata(pre: &str, merges: &[&str], extra_tokens: &[(&str, i32)]) -> Metadata {
    let table = bpe::byte_to_char_table();
    let mut tokens: Vec<String> = table.iter().map(|c| c.to_string()).collect();
    let mut types = vec![1i32; 256];
    for m in merges {
        let joined = m.replacen(' ', "", 1);
        if !tokens.contains(&joined) {
            tokens.push(joined);
            types.push(1);
        }
    }
    for (t, ty) in extra_tokens {
        tokens.push(t.to_string());
        types.push(*ty);
    }
    let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
    md(vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String(pre.into())),
        ("tokenizer.ggml.tokens", strings(&refs)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(types.into_iter().map(Value::I32).collect()),
        ),
        ("tokenizer.ggml.merges", strings(merges)),
    ])
}

#[test]
fn bpe_merges_by_rank() {
    let merges = ["Ġ t", "h e", "t h", "Ġt he", "Ġ Ġ"];
    let m = bpe_metadata("qwen2", &merges, &[("<|im_end|>", 3), ("<think>", 4)]);
    let t = Tokenizer::from_gguf(&m).expect("builds");
    assert_eq!(t.kind(), "gpt2 (byte-level BPE, pre=qwen2)");
    // " the": Ġ+t (rank 0) first, then h+e (rank 1), then Ġt+he (rank 3). "th" (rank 2) never forms.
    assert_eq!(t.encode(" the", true, false), vec![id(&t, "Ġthe")]);
    assert_eq!(
        t.encode("the", false, false),
        vec![b't' as u32, id(&t, "he")]
    );
    let im_end = id(&t, "<|im_end|>");
    assert_eq!(
        t.encode("x<|im_end|>", false, true),
        vec![b'x' as u32, im_end]
    );
    assert!(!t.encode("x<|im_end|>", false, false).contains(&im_end));
    assert_eq!(t.eos_ids(), &[im_end]);
    let think = id(&t, "<think>");
    assert_eq!(t.encode("<think>", false, false), vec![think]);
    assert_eq!(
        t.decode(&t.encode("é <think> 日本<|im_end|>", false, true)),
        "é <think> 日本"
    );
}

#[test]
fn bpe_llama3_defaults_and_ignore_merges() {
    // "Ġthe" is a token but unreachable by merges: ignore_merges emits it whole.
    let mut m = bpe_metadata(
        "llama-bpe",
        &["h e"],
        &[("Ġthe", 1), ("<|begin_of_text|>", 3)],
    );
    m.entries
        .insert("tokenizer.ggml.bos_token_id".into(), Value::U32(258));
    let t = Tokenizer::from_gguf(&m).expect("builds");
    assert_eq!(t.encode(" the", true, false), vec![258, id(&t, "Ġthe")]);
    assert_eq!(t.decode(&[258, id(&t, "Ġthe")]), " the");
}

/// o200k's tokenizer.json has no `ignore_merges` and no BOS post-processor: a word that is a token
/// but unreachable by merges is still merged byte by byte, and BOS is added only when asked.
#[test]
fn bpe_gpt4o_merges_whole_tokens_and_adds_no_bos() {
    let mut m = bpe_metadata("gpt-4o", &["h e"], &[("Ġthe", 1), ("<|endoftext|>", 3)]);
    m.entries
        .insert("tokenizer.ggml.bos_token_id".into(), Value::U32(258));
    let t = Tokenizer::from_gguf(&m).expect("builds");
    assert_eq!(t.kind(), "gpt2 (byte-level BPE, pre=gpt-4o)");
    let the = vec![id(&t, "Ġ"), b't' as u32, id(&t, "he")];
    assert_eq!(t.encode(" the", true, false), the);
    m.entries
        .insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(true));
    let t = Tokenizer::from_gguf(&m).expect("builds");
    assert_eq!(t.encode(" the", true, false)[0], 258);
    // llama.cpp's other names for this split are not taken on trust (see `PreTokenizer::from_name`).
    m.entries
        .insert("tokenizer.ggml.pre".into(), Value::String("llama4".into()));
    assert!(Tokenizer::from_gguf(&m).is_err());
}

#[test]
fn errors_name_the_key() {
    let mut m = bpe_metadata("falcon", &[], &[]);
    let e = Tokenizer::from_gguf(&m).expect_err("unknown pre");
    assert!(
        e.to_string().contains("not yet: pre-tokenizer \"falcon\""),
        "{e}"
    );
    assert!(e.to_string().contains("llama-bpe"), "{e}");

    m.entries
        .insert("tokenizer.ggml.pre".into(), Value::String("gpt-2".into()));
    m.entries
        .insert("tokenizer.ggml.eos_token_id".into(), Value::U32(100_000));
    let e = Tokenizer::from_gguf(&m).expect_err("bad id");
    assert!(e.to_string().contains("tokenizer.ggml.eos_token_id"), "{e}");

    m.entries.remove("tokenizer.ggml.eos_token_id");
    m.entries.insert(
        "tokenizer.ggml.token_type".into(),
        Value::Array(vec![Value::I32(1)]),
    );
    let e = Tokenizer::from_gguf(&m).expect_err("short types");
    assert!(e.to_string().contains("tokenizer.ggml.token_type"), "{e}");

    m.entries.remove("tokenizer.ggml.merges");
    m.entries.remove("tokenizer.ggml.token_type");
    let e = Tokenizer::from_gguf(&m).expect_err("no merges");
    assert!(e.to_string().contains("tokenizer.ggml.merges"), "{e}");

    m.entries
        .insert("tokenizer.ggml.model".into(), Value::String("t5".into()));
    let e = Tokenizer::from_gguf(&m).expect_err("t5");
    assert!(
        e.to_string().contains("not yet: tokenizer model \"t5\""),
        "{e}"
    );

    m.entries.remove("tokenizer.ggml.model");
    let e = Tokenizer::from_gguf(&m).expect_err("no model key");
    assert!(e.to_string().contains("tokenizer.ggml.model"), "{e}");
}
