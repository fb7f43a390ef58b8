//! Malformed and hostile GGUF files: every one must end in a
//! typed error that names the field, never a panic, a hang or a large allocation.
//!
//! * Real fixtures truncated at every byte of their header and at sampled offsets in the data.
//! * Counts and lengths near 2^64, overflowing dims, bad offsets and types, duplicate names.
//! * Thousands of mutated 1 KB files parsed under a counting allocator: no allocation and no
//!   peak above 64 MB.
//!
//! `tests/gguf.rs` covers the happy paths and the first hostile cases; this file extends it, and
//! `malformed_model.rs` holds the architecture checks on tiny models (`Config::from_gguf`).
//! The ignored test `write_fuzz_seed_corpus` regenerates `fuzz/corpus/` (see scripts/fuzz_smoke.sh).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

mod gguf_files;

use coco::capabilities::check;
use coco::gguf::{GgufError, Header, Parser, Value};
use coco::model::Config;
use coco::tokenizer::Tokenizer;
use gguf_files::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// ---------------------------------------------------------------------------------------------
// Counting allocator. Accounting is per thread (only while a thread asks for it), so tests
// running in parallel don't pollute each other's numbers.

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static CURRENT: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn on_alloc(size: usize) {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let now = CURRENT.with(|c| {
                c.set(c.get() + size);
                c.get()
            });
            PEAK.with(|p| p.set(p.get().max(now)));
            LARGEST.with(|l| l.set(l.get().max(size)));
        }
    });
}

fn on_free(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            // Memory from before tracking started may be freed during it.
            CURRENT.with(|c| c.set(c.get().saturating_sub(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        on_alloc(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        on_free(layout.size());
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        on_free(layout.size());
        on_alloc(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes this thread allocated while running `f`: (peak live, largest single allocation).
fn measure<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    CURRENT.with(|c| c.set(0));
    PEAK.with(|p| p.set(0));
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    let r = f();
    TRACKING.with(|t| t.set(false));
    (r, PEAK.with(Cell::get), LARGEST.with(Cell::get))
}

const ALLOC_LIMIT: usize = 64 << 20;

// ---------------------------------------------------------------------------------------------
// Helpers.

fn fixture(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/fixtures.sh`",
        path.display()
    );
    path
}

/// GGUF metadata value type ids (spec `gguf_metadata_value_type`).
const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;

/// Hand-assembled GGUF bytes, for layouts the `Writer` refuses to produce.
struct Raw(Vec<u8>);

impl Raw {
    fn gguf(tensor_count: u64, kv_count: u64) -> Raw {
        Raw(b"GGUF".to_vec()).u32(3).u64(tensor_count).u64(kv_count)
    }
    fn u32(mut self, v: u32) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Raw {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Raw {
        self.0.extend_from_slice(b);
        self
    }
    fn str(self, s: &str) -> Raw {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }
    /// Key and value type; the value follows.
    fn kv(self, key: &str, ty: u32) -> Raw {
        self.str(key).u32(ty)
    }
    fn tensor(self, name: &str, dims: &[u64], ty: u32, offset: u64) -> Raw {
        let mut r = self.str(name).u32(dims.len() as u32);
        for &d in dims {
            r = r.u64(d);
        }
        r.u32(ty).u64(offset)
    }
    /// Pads to the default 32-byte alignment, then `data` zero bytes of tensor data.
    fn data(mut self, data: usize) -> Raw {
        self.0.resize(self.0.len().div_ceil(32) * 32 + data, 0);
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Truncation of real files.

/// Feeds one parser byte by byte through the header, checking `finish()` at every prefix, then
/// checks sampled cuts in the data. One parser and 1-byte pushes keep this O(file): the parser
/// retries a field only once enough bytes for it have arrived, and `finish()` before the header
/// is O(1).
fn truncate_everywhere(name: &str) {
    let path = fixture(name);
    let bytes = std::fs::read(&path).expect("read fixture");
    let reference = coco::gguf::read_header(&path).expect("fixture parses");
    let len = bytes.len() as u64;

    let mut p = Parser::new().with_expected_len(len);
    let mut cut = 0usize;
    while p.header().is_none() {
        match p.finish() {
            Err(GgufError::Truncated {
                field,
                offset,
                needed,
            }) => {
                assert_eq!(
                    offset, cut as u64,
                    "{name}: cut at {cut} reports offset {offset} ({field})"
                );
                assert!(
                    needed >= 1 && !field.is_empty(),
                    "{name}: cut at {cut}: needed {needed}, field {field:?}"
                );
            }
            other => panic!("{name}: cut at {cut}: expected Truncated, got {other:?}"),
        }
        assert!(cut < bytes.len(), "{name}: the header never completed");
        p.push(&bytes[cut..cut + 1], &mut |_| {})
            .unwrap_or_else(|e| panic!("{name}: byte {cut}: {e}"));
        cut += 1;
    }
    let header = p.header().expect("header").clone();
    assert_eq!(
        header, reference,
        "{name}: byte-by-byte header differs from read_header"
    );
    eprintln!("{name}: header (metadata + tensor infos) is {cut} bytes, every prefix checked");

    if header.tensors.is_empty() {
        // Nothing follows the header (the padding after it is optional).
        p.finish()
            .unwrap_or_else(|e| panic!("{name}: complete header, no tensors: {e}"));
        return;
    }
    // Data: tensor boundaries (±1) and random offsets, in increasing order on the same parser.
    let (data_start, data_end) = (header.data_start, header.data_end());
    let mut cuts: Vec<u64> = vec![cut as u64, data_start, data_end - 1, data_end, len];
    for t in &header.tensors {
        let start = data_start + t.offset;
        cuts.extend([start, start + 1, start + t.n_bytes - 1, start + t.n_bytes]);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(len);
    cuts.extend((0..200).map(|_| rng.gen_range(cut as u64..=len)));
    cuts.retain(|&c| c >= cut as u64 && c <= len);
    cuts.sort_unstable();
    cuts.dedup();
    let mut at = cut as u64;
    for &c in &cuts {
        p.push(&bytes[at as usize..c as usize], &mut |_| {})
            .expect("data push");
        at = c;
        match p.finish() {
            Ok(()) => assert!(
                c >= data_end,
                "{name}: cut at {c} < data end {data_end} finished"
            ),
            Err(GgufError::Truncated {
                field,
                offset,
                needed,
            }) => {
                assert!(
                    c < data_end,
                    "{name}: cut at {c} is complete but reports {field}"
                );
                assert!(
                    field.starts_with("tensor `") && field.ends_with("` data"),
                    "{name}: field {field}"
                );
                assert!(
                    offset >= data_start && needed >= 1,
                    "{name}: cut {c}: offset {offset}, needed {needed}"
                );
                assert!(
                    offset + needed <= data_end,
                    "{name}: cut {c}: {field} ends past the data"
                );
            }
            Err(e) => panic!("{name}: cut at {c}: expected Truncated, got {e}"),
        }
    }

    // A truncated file on disk: its (shorter) length is known, so the parser refuses the
    // header as soon as it sees a tensor ending past it, naming that tensor.
    for c in [data_start, data_end - 1]
        .into_iter()
        .filter(|&c| c < data_end)
    {
        let mut p = Parser::new().with_expected_len(c);
        let e = p
            .push(&bytes[..cut], &mut |_| {})
            .and_then(|_| p.finish())
            .expect_err("file cut in the data parsed");
        let msg = e.to_string();
        assert!(
            matches!(e, GgufError::Invalid { .. }) && msg.contains("past the end"),
            "{name}: {msg}"
        );
        assert!(
            msg.contains(&format!("{c}-byte file")) && msg.contains("tensor `"),
            "{name}: {msg}"
        );
    }
}

#[test]
fn truncated_llama_spm_q8_0() {
    truncate_everywhere("llama-spm-q8_0.gguf");
}

#[test]
fn truncated_qwen2_q4_k() {
    truncate_everywhere("qwen2-q4_k.gguf");
}

#[test]
fn truncated_gemma3_q8_0() {
    truncate_everywhere("gemma3-q8_0.gguf");
}

#[test]
fn truncated_vocab_llama3() {
    truncate_everywhere("vocab-llama3.gguf");
}

// ---------------------------------------------------------------------------------------------
// Hostile counts, lengths, offsets and types.

#[test]
fn counts_at_and_past_the_limits() {
    // 65,536 tensors (the limit) is accepted as a count; the file then ends early.
    expect_err(
        parse(&Raw::gguf(1 << 16, 0).0, None),
        "Truncated",
        &["tensor info 0 of 65536"],
    );
    expect_err(
        parse(&Raw::gguf((1 << 16) + 1, 0).0, None),
        "TooLarge",
        &["header.tensor_count", "65537"],
    );
    expect_err(
        parse(&Raw::gguf(0, 1 << 63).0, None),
        "TooLarge",
        &["header.metadata_kv_count"],
    );
    expect_err(
        parse(&Raw::gguf(u64::MAX, u64::MAX).0, None),
        "TooLarge",
        &["header.tensor_count"],
    );
    // Fewer entries than declared.
    let r = Raw::gguf(0, 3).kv("a", T_U8).bytes(&[1]);
    expect_err(parse(&r.0, None), "Truncated", &["metadata entry 1 of 3"]);
}

#[test]
fn lengths_near_two_to_the_64() {
    // A string value (not a key) whose length is u64::MAX.
    let r = Raw::gguf(0, 1)
        .kv("general.name", T_STRING)
        .u64(u64::MAX)
        .bytes(b"abc");
    expect_err(
        parse(&r.0, None),
        "TooLarge",
        &[
            "metadata `general.name` (string length)",
            "18446744073709551615",
        ],
    );
    // Just over the string limit (16 MiB), and at it: accepted, then the input ends.
    let r = Raw::gguf(0, 1).kv("s", T_STRING).u64((1 << 24) + 1);
    expect_err(
        parse(&r.0, None),
        "TooLarge",
        &["metadata `s` (string length)"],
    );
    let r = Raw::gguf(0, 1).kv("s", T_STRING).u64(1 << 24).bytes(b"x");
    expect_err(parse(&r.0, None), "Truncated", &["metadata entry 0 of 1"]);
    // A tensor name of length 2^63.
    let r = Raw::gguf(1, 0).u64(1 << 63).bytes(b"name");
    expect_err(
        parse(&r.0, None),
        "TooLarge",
        &["tensor[0].name (string length)"],
    );
    // Array lengths: at the limit (2^22) accepted, one past refused, an inner array near 2^64.
    let r = Raw::gguf(0, 1)
        .kv("a", T_ARRAY)
        .u32(T_U8)
        .u64(1 << 22)
        .bytes(&[0; 100]);
    expect_err(parse(&r.0, None), "Truncated", &["metadata entry 0 of 1"]);
    let r = Raw::gguf(0, 1)
        .kv("a", T_ARRAY)
        .u32(T_U8)
        .u64((1 << 22) + 1);
    expect_err(
        parse(&r.0, None),
        "TooLarge",
        &["metadata `a` (array length)"],
    );
    let r = Raw::gguf(0, 1)
        .kv("nest", T_ARRAY)
        .u32(T_ARRAY)
        .u64(2)
        .u32(T_U32)
        .u64(u64::MAX - 1);
    expect_err(
        parse(&r.0, None),
        "TooLarge",
        &["metadata `nest` (array length)"],
    );
    // An array of strings, each claiming 16 MiB.
    let mut r = Raw::gguf(0, 1)
        .kv("tokenizer.ggml.tokens", T_ARRAY)
        .u32(T_STRING)
        .u64(1 << 22);
    for _ in 0..4 {
        r = r.u64(1 << 24);
    }
    expect_err(parse(&r.0, None), "Truncated", &["metadata entry 0 of 1"]);
}

#[test]
fn bad_metadata_values_name_the_key() {
    let cases: Vec<(Raw, &str, &[&str])> = vec![
        // Nesting deeper than 4 arrays.
        (
            (0..5).fold(Raw::gguf(0, 1).kv("deep", T_ARRAY), |r, _| {
                r.u32(T_ARRAY).u64(1)
            }),
            "TooLarge",
            &["metadata `deep` (array nesting)"],
        ),
        (
            Raw::gguf(0, 1).kv("a", T_ARRAY).u32(13).u64(1),
            "Invalid",
            &["metadata `a`", "unknown array element type 13"],
        ),
        (
            Raw::gguf(0, 1).kv("v", u32::MAX).u64(0),
            "Invalid",
            &["metadata `v`", "unknown metadata value type 4294967295"],
        ),
        (
            Raw::gguf(0, 1).kv("flag", T_BOOL).bytes(&[2]),
            "Invalid",
            &["metadata `flag`", "neither 0 nor 1"],
        ),
        (
            Raw::gguf(0, 1)
                .kv("bools", T_ARRAY)
                .u32(T_BOOL)
                .u64(3)
                .bytes(&[1, 0, 7]),
            "Invalid",
            &["metadata `bools`[2]", "neither 0 nor 1"],
        ),
        (
            Raw::gguf(0, 1)
                .u64(2)
                .bytes(&[0xC3, 0x28])
                .u32(T_U8)
                .bytes(&[0]),
            "Invalid",
            &["metadata[0].key", "UTF-8"],
        ),
        (
            Raw::gguf(0, 1)
                .kv("words", T_ARRAY)
                .u32(T_STRING)
                .u64(2)
                .str("ok")
                .u64(1)
                .bytes(&[0xFF]),
            "Invalid",
            &["metadata `words`[1]", "UTF-8"],
        ),
        (
            Raw::gguf(1, 0).u64(1).bytes(&[0x80]),
            "Invalid",
            &["tensor[0].name", "UTF-8"],
        ),
        (
            Raw::gguf(0, 2)
                .kv("k", T_U8)
                .bytes(&[1])
                .kv("k", T_STRING)
                .str("x"),
            "Invalid",
            &["metadata[1].key", "duplicate key `k`"],
        ),
    ];
    for (raw, want, needles) in cases {
        expect_err(parse(&raw.0, None), want, needles);
    }
}

#[test]
fn bad_tensor_infos_name_the_tensor() {
    const F32: u32 = 0;
    let one =
        |dims: &[u64], ty: u32, offset: u64| Raw::gguf(1, 0).tensor("t", dims, ty, offset).data(64);
    let cases: Vec<(Raw, &str, &[&str])> = vec![
        // Element count exactly 2^64 (wraps to 0 in unchecked arithmetic).
        (
            one(&[1 << 32, 1 << 32], F32, 0),
            "TooLarge",
            &["tensor `t`.dims (element count)"],
        ),
        (
            one(&[u64::MAX], F32, 0),
            "TooLarge",
            &["tensor `t`.dims (element count)"],
        ),
        // 2^40 elements pass the element bound, but 4 bytes each do not fit the data bound.
        (
            one(&[1 << 39, 2], F32, 0),
            "TooLarge",
            &["tensor `t`.data size"],
        ),
        (
            one(&[4], F32, u64::MAX - 31),
            "TooLarge",
            &["tensor `t`.offset"],
        ),
        (
            one(&[4], F32, (1 << 40) + 32),
            "TooLarge",
            &["tensor `t`.offset"],
        ),
        (
            one(&[4], u32::MAX, 0),
            "Invalid",
            &["tensor `t`.type", "unknown tensor type id 4294967295"],
        ),
        (
            one(&[4], 31, 0),
            "Invalid",
            &["tensor `t`.type", "unknown tensor type id 31"],
        ),
        (
            Raw::gguf(1, 0).str("t").u32(0).data(64),
            "Invalid",
            &["tensor `t`.n_dims", "0 dimensions"],
        ),
        (
            Raw::gguf(1, 0).str("t").u32(u32::MAX).data(64),
            "Invalid",
            &["tensor `t`.n_dims"],
        ),
        // Q4_K rows must be whole 256-element blocks.
        (
            one(&[128, 2], 12, 0),
            "Invalid",
            &["tensor `t`.dims[0]", "Q4_K block size 256"],
        ),
        // Overlap in the middle (not just the same start), reported on the later tensor.
        (
            Raw::gguf(2, 0)
                .tensor("a", &[16], F32, 0)
                .tensor("b", &[8], F32, 32)
                .data(128),
            "Invalid",
            &["tensor `b`.offset", "overlaps tensor `a`"],
        ),
        (
            Raw::gguf(2, 0)
                .tensor("w", &[8], F32, 0)
                .tensor("w", &[8], F32, 32)
                .data(128),
            "Invalid",
            &["tensor[1].name", "duplicate tensor name `w`"],
        ),
    ];
    for (raw, want, needles) in cases {
        expect_err(parse(&raw.0, None), want, needles);
    }
}

/// Found by the gguf_chunks fuzz target: a tensor info cut short used to give a different
/// error (or a different `needed`) depending on how the bytes were chunked, because the parser
/// asked for more than the next field before checking what it had.
#[test]
fn chunking_never_changes_the_error() {
    // Cut after a zero dim: the zero is visible, so it must be reported, not "truncated".
    let r = Raw::gguf(1, 0).str("t").u32(2).u64(32).u64(0);
    expect_err(
        parse(&r.0, None),
        "Invalid",
        &["tensor `t`.dims[1]", "dimension is 0"],
    );
    // Cut 4 bytes into the offset: 4 more bytes are needed, not 8.
    let r = Raw::gguf(1, 0).str("t").u32(1).u64(8).u32(0).u32(0);
    expect_err(
        parse(&r.0, None),
        "Truncated",
        &["tensor info 0 of 1", "needs 4 more bytes"],
    );
    // The fuzzer's input (fuzz/artifacts/gguf_chunks/crash-85141e45…, control bytes removed).
    let crash = Raw::gguf(2, 1)
        .kv("general.alignment", T_U32)
        .u32(64)
        .str("a")
        .u32(1)
        .u64(8)
        .u32(0)
        .u32(0);
    expect_err(
        parse(&crash.0, None),
        "Truncated",
        &["tensor info 0 of 2", "needs 4 more bytes"],
    );
}

#[test]
fn data_offsets_past_the_end_and_misaligned() {
    const F32: u32 = 0;
    // Past the end with the length unknown (a stream without Content-Length): Truncated.
    let r = Raw::gguf(1, 0).tensor("far", &[8], F32, 4096).data(64);
    expect_err(parse(&r.0, None), "Truncated", &["tensor `far` data"]);
    // With the length known: refused at the header.
    let len = r.0.len() as u64;
    expect_err(
        parse(&r.0, Some(len)),
        "Invalid",
        &["tensor `far` data", "past the end"],
    );
    // One byte short of the last tensor.
    let r = Raw::gguf(1, 0).tensor("t", &[8], F32, 0).data(31);
    expect_err(
        parse(&r.0, None),
        "Truncated",
        &["tensor `t` data", "needs 1 more bytes"],
    );
    // general.alignment: 64 makes offset 32 misaligned; bad values name the key.
    let aligned = |align: Raw| align.tensor("t", &[8], F32, 32).data(256);
    let r = aligned(Raw::gguf(1, 1).kv("general.alignment", T_U32).u32(64));
    expect_err(
        parse(&r.0, None),
        "Invalid",
        &["tensor `t`.offset", "not a multiple of the alignment 64"],
    );
    for bad in [0u32, 48, 1 << 17] {
        let r = aligned(Raw::gguf(1, 1).kv("general.alignment", T_U32).u32(bad));
        expect_err(
            parse(&r.0, None),
            "Invalid",
            &["metadata `general.alignment`", "power of two"],
        );
    }
    let r = aligned(Raw::gguf(1, 1).kv("general.alignment", T_STRING).str("32"));
    expect_err(
        parse(&r.0, None),
        "Invalid",
        &["metadata `general.alignment`"],
    );
    // Holes between tensors are allowed (the spec only requires alignment).
    let r = Raw::gguf(2, 0)
        .tensor("a", &[8], F32, 0)
        .tensor("b", &[8], F32, 96)
        .data(128);
    let h = parse(&r.0, Some(r.0.len() as u64)).expect("tensors with a gap parse");
    assert_eq!(h.data_end(), h.data_start + 128);
}

// ---------------------------------------------------------------------------------------------
// Allocation bounds.

/// Valid starting points: tiny whole models (2-4 KB, with and without a small vocabulary), so
/// mutants reach the config and tokenizer, and the first 1 KB of fixture headers.
fn seed_files() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        TinyModel::new("llama").bytes(),
        TinyModel::new("qwen2").bytes(),
        TinyModel::new("gemma3")
            .set("gemma3.attention.sliding_window", Value::U32(4))
            .bytes(),
        tokenizer_model("gpt2"),
        tokenizer_model("llama"),
    ];
    for name in [
        "vocab-llama3.gguf",
        "vocab-mistral-spm.gguf",
        "llama-spm-q8_0.gguf",
        "qwen2-q4_k.gguf",
        "gemma3-q8_0.gguf",
    ] {
        let mut b = std::fs::read(fixture(name)).expect("read fixture");
        b.truncate(1024);
        seeds.push(b);
    }
    seeds
}

/// A tiny llama model carrying a small tokenizer of the given family.
fn tokenizer_model(family: &str) -> Vec<u8> {
    let tokens: Vec<Value> = [
        "<unk>",
        "<s>",
        "</s>",
        "a",
        "b",
        "ab",
        "Ġ",
        "Ġa",
        "<|eot_id|>",
    ]
    .iter()
    .map(|s| Value::String(s.to_string()))
    .chain((0..32u8).map(|b| Value::String(format!("<0x{b:02X}>"))))
    .collect();
    let n = tokens.len();
    let types = (0..n)
        .map(|i| {
            Value::I32(if i < 3 || i == 8 {
                3
            } else if i > 8 {
                6
            } else {
                1
            })
        })
        .collect();
    let mut m = TinyModel::new("llama")
        .set("tokenizer.ggml.model", Value::String(family.into()))
        .set("tokenizer.ggml.pre", Value::String("llama-bpe".into()))
        .set("tokenizer.ggml.tokens", Value::Array(tokens))
        .set("tokenizer.ggml.token_type", Value::Array(types))
        .set(
            "tokenizer.ggml.scores",
            Value::Array((0..n).map(|i| Value::F32(-(i as f32))).collect()),
        )
        .set(
            "tokenizer.ggml.merges",
            Value::Array(vec![
                Value::String("a b".into()),
                Value::String("Ġ a".into()),
            ]),
        )
        .set("tokenizer.ggml.bos_token_id", Value::U32(1))
        .set("tokenizer.ggml.eos_token_id", Value::U32(2));
    m.tensors.truncate(3);
    m.bytes()
}

/// Values that break length and count fields.
const INTERESTING: [u64; 18] = [
    0,
    1,
    8,
    9,
    255,
    4096,
    (1 << 22) - 1,
    (1 << 22) + 1,
    1 << 24,
    (1 << 24) + 1,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    (1 << 40) + 32,
    1 << 63,
    u64::MAX - 7,
    u64::MAX - 1,
    u64::MAX,
];

fn mutate(rng: &mut ChaCha8Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    let limit = b.len();
    for _ in 0..rng.gen_range(1..=4) {
        let at = rng.gen_range(0..b.len());
        match rng.gen_range(0..8) {
            0 => b[at] = rng.gen(),
            1 | 2 => {
                let v = INTERESTING[rng.gen_range(0..INTERESTING.len())].to_le_bytes();
                let n = if rng.gen() { 8 } else { 4 };
                let end = (at + n).min(b.len());
                b[at..end].copy_from_slice(&v[..end - at]);
            }
            3 => b.truncate(at.max(24)),
            4 => {
                // Repeat a slice: duplicated keys, entries and tensor infos.
                let end = rng.gen_range(at..=b.len().min(at + 64));
                let copy = b[at..end].to_vec();
                let to = rng.gen_range(0..=b.len());
                b.splice(to..to, copy);
                b.truncate(limit);
            }
            _ => {
                // Flip a few bits of one byte: small changes to counts and lengths.
                b[at] ^= 1 << rng.gen_range(0..8);
            }
        }
    }
    b
}

/// Everything the loader does with an untrusted header before any weight arrives. Returns
/// whether the config and the tokenizer were accepted.
fn use_header(h: &Header) -> (bool, bool) {
    let facts = lavapipe_like_facts();
    let _ = check(h, &facts, 2048);
    let config = Config::from_gguf(h).is_ok();
    let tokenizer = Tokenizer::from_gguf(&h.metadata).map(|tok| {
        let ids = tok.encode("hostile ab <|eot_id|>", true, true);
        tok.decode(&ids)
    });
    (config, tokenizer.is_ok())
}

#[test]
fn hostile_small_files_never_allocate_much() {
    let seeds = seed_files();
    let mut rng = ChaCha8Rng::seed_from_u64(64);
    let (mut worst_peak, mut worst_single) = (0, 0);
    // Mutants that got to: a header, a full parse, an accepted config, a built tokenizer.
    let mut reached = [0usize; 4];
    for i in 0..6000 {
        let file = mutate(&mut rng, &seeds[i % seeds.len()]);
        let chunk = [1, 7, 64, 1024][i % 4];
        let expected = (i % 3 == 0).then_some(file.len() as u64);
        let (outcome, peak, single) = measure(|| {
            let mut p = Parser::new();
            if let Some(len) = expected {
                p = p.with_expected_len(len);
            }
            let mut result = Ok(());
            for c in file.chunks(chunk) {
                result = p.push(c, &mut |_| {});
                if result.is_err() {
                    break;
                }
            }
            let used = p.header().map(use_header);
            let parsed = result.and_then(|_| p.finish()).is_ok();
            [
                used.is_some(),
                parsed,
                used.is_some_and(|u| u.0),
                used.is_some_and(|u| u.1),
            ]
        });
        for (n, hit) in reached.iter_mut().zip(outcome) {
            *n += usize::from(hit);
        }
        assert!(
            single <= ALLOC_LIMIT,
            "file {i}: one allocation of {single} bytes"
        );
        assert!(peak <= ALLOC_LIMIT, "file {i}: peak {peak} bytes");
        worst_peak = worst_peak.max(peak);
        worst_single = worst_single.max(single);
    }
    let [headers, parsed, configs, tokenizers] = reached;
    eprintln!(
        "6000 mutated files: {headers} headers, {parsed} full parses, {configs} configs, {tokenizers} tokenizers; \
         peak {worst_peak} B, largest allocation {worst_single} B"
    );
    assert!(
        configs > 100 && tokenizers > 100,
        "mutants should reach the config and tokenizer: {reached:?}"
    );
}

#[test]
fn declared_sizes_are_not_preallocated() {
    // Each declares far more than it holds; the parser may only allocate for bytes that arrive.
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("65,536 tensors", Raw::gguf(1 << 16, 0).data(1000).0),
        (
            "65,536 metadata entries",
            Raw::gguf(0, 1 << 16).data(1000).0,
        ),
        (
            "4M-element u32 array",
            Raw::gguf(0, 1)
                .kv("a", T_ARRAY)
                .u32(T_U32)
                .u64(1 << 22)
                .data(1000)
                .0,
        ),
        ("4M 16 MiB strings", {
            let mut r = Raw::gguf(0, 1).kv("a", T_ARRAY).u32(T_STRING).u64(1 << 22);
            for _ in 0..100 {
                r = r.u64(0);
            }
            r.u64(1 << 24).data(200).0
        }),
        (
            "nested 4M arrays",
            Raw::gguf(0, 1)
                .kv("n", T_ARRAY)
                .u32(T_ARRAY)
                .u64(1 << 22)
                .u32(T_ARRAY)
                .u64(1 << 22)
                .data(1000)
                .0,
        ),
        ("a 16 MiB key", Raw::gguf(0, 1).u64(1 << 24).data(1000).0),
        (
            "a 2^40-byte tensor",
            Raw::gguf(1, 0).tensor("big", &[1 << 38], 0, 0).data(1000).0,
        ),
    ];
    for (what, file) in files {
        let (r, peak, single) = measure(|| {
            let mut p = Parser::new();
            p.push(&file, &mut |_| {}).and_then(|_| p.finish())
        });
        assert!(r.is_err(), "{what}: parsed");
        assert!(
            peak <= 1 << 20 && single <= 1 << 20,
            "{what}: peak {peak} B, largest allocation {single} B"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzz seed corpus.

/// Regenerates `fuzz/corpus/*` (committed; kept small): `cargo test --release --test malformed
/// -- --ignored write_fuzz_seed_corpus`. gguf_chunks inputs start with two control bytes
/// (chunking mode, seed); tokenizer inputs with one flags byte (see the targets' docs).
#[test]
#[ignore = "writes fuzz/corpus; run by hand after changing the seeds"]
fn write_fuzz_seed_corpus() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        std::fs::write(dir.join(name), bytes).expect("write seed");
    };
    let mut gguf: Vec<(String, Vec<u8>)> = vec![
        ("tiny-llama".into(), TinyModel::new("llama").bytes()),
        ("tiny-qwen2".into(), TinyModel::new("qwen2").bytes()),
        ("tiny-gemma3".into(), TinyModel::new("gemma3").bytes()),
        ("tiny-llama-bpe-vocab".into(), tokenizer_model("gpt2")),
        ("tiny-llama-spm-vocab".into(), tokenizer_model("llama")),
        (
            "nested-arrays".into(),
            Raw::gguf(0, 1)
                .kv("n", T_ARRAY)
                .u32(T_ARRAY)
                .u64(2)
                .u32(T_U32)
                .u64(1)
                .u32(7)
                .u32(T_U8)
                .u64(2)
                .bytes(&[1, 2])
                .0,
        ),
        (
            "two-tensors-gap".into(),
            Raw::gguf(2, 1)
                .kv("general.alignment", T_U32)
                .u32(64)
                .tensor("a", &[8], 0, 0)
                .tensor("b", &[32], 8, 64)
                .data(128)
                .0,
        ),
    ];
    for name in [
        "vocab-mistral-spm",
        "vocab-llama3",
        "vocab-qwen2",
        "llama-spm-q8_0",
        "qwen2-q4_k",
        "gemma3-q8_0",
    ] {
        let mut b = std::fs::read(fixture(&format!("{name}.gguf"))).expect("read fixture");
        b.truncate(4096);
        gguf.push((format!("{name}-head4k"), b));
    }
    for (name, bytes) in &gguf {
        // 1-byte chunks with the length unknown, and random chunks up to 64 with it known.
        write(
            "gguf_chunks",
            &format!("{name}-bytewise"),
            &[[0u8, 0].as_slice(), bytes].concat(),
        );
        write(
            "gguf_chunks",
            &format!("{name}-chunks64"),
            &[[0x1bu8, 7].as_slice(), bytes].concat(),
        );
    }
    let texts = [
        "Hello world",
        "   leading spaces and trailing  ",
        "日本語のテキスト 🦀 emoji ñ é",
        "<|eot_id|><s></s><start_of_turn>user\n<end_of_turn><|im_start|><tag><tool>",
        "def f(x):\n\treturn x**2  # comment\n",
        "'s 'll 've 're 12345 3.14159 ",
        "ab abc ▁a ▁▁ <0x41> Ġthe",
    ];
    for (i, t) in texts.iter().enumerate() {
        // Vocabularies 0..8, specials off/on, encode mode.
        let flags = (i as u8 % 6) | if i % 2 == 1 { 0x18 } else { 0 };
        write(
            "tokenizer",
            &format!("text-{i}"),
            &[[flags].as_slice(), t.as_bytes()].concat(),
        );
    }
    let ids: Vec<u8> = [1u32, 2, 3, 300, 1000, 128_000, 128_009, u32::MAX, 32_000, 0]
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    for (i, flags) in [0x40u8, 0x61, 0xC2, 0xE3, 0xC4].iter().enumerate() {
        write(
            "tokenizer",
            &format!("ids-{i}"),
            &[[*flags].as_slice(), &ids].concat(),
        );
    }
}
