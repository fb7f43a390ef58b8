//! Malformed and hostile GGUF files: every one must end in a
//! typed error that names the field, never a panic, a hang or a large allocation.
//!
//! * Real fixtures truncated at every byte of their header and at sampled offsets in the data.
//! * Counts and lengths near 2^64, overflowing dims, bad offsets and types, duplicate names.
//! * Architecture checks (`Config::from_gguf`): missing keys, wrong types, shapes that
//!   contradict the metadata.
//! * Thousands of mutated 1 KB files parsed under a counting allocator: no allocation and no
//!   peak above 64 MB.
//!
//! `tests/gguf.rs` covers the happy paths and the first hostile cases; this file extends it.
//! The ignored test `write_fuzz_seed_corpus` regenerates `fuzz/corpus/` (see scripts/fuzz_smoke.sh).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use coco::capabilities::{check, AdapterFacts, Status};
use coco::gguf::{GgmlType, GgufError, Header, Parser, Value, Writer};
use coco::model::Config;
use coco::tokenizer::Tokenizer;
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

/// The error's variant name, so expectations read as one line.
fn kind(e: &GgufError) -> &'static str {
    match e {
        GgufError::BadMagic { .. } => "BadMagic",
        GgufError::Version { .. } => "Version",
        GgufError::TooLarge { .. } => "TooLarge",
        GgufError::Invalid { .. } => "Invalid",
        GgufError::Truncated { .. } => "Truncated",
        GgufError::Io(_) => "Io",
    }
}

/// Parses `bytes` in one push (then again byte by byte: the error must not depend on chunking).
fn parse(bytes: &[u8], expected_len: Option<u64>) -> Result<Header, GgufError> {
    let run = |chunk: usize| {
        let mut p = Parser::new();
        if let Some(len) = expected_len {
            p = p.with_expected_len(len);
        }
        for c in bytes.chunks(chunk.max(1)) {
            p.push(c, &mut |_| {})?;
        }
        p.finish()?;
        Ok(p.header().cloned().expect("a finished parse has a header"))
    };
    let whole = run(bytes.len());
    assert_eq!(
        run(1),
        whole,
        "byte-by-byte parse disagrees with the one-shot parse"
    );
    whole
}

/// Asserts a parse error of variant `want` whose message contains every needle.
#[track_caller]
fn expect_err(r: Result<Header, GgufError>, want: &str, needles: &[&str]) {
    let e = r.expect_err("malformed input parsed");
    let msg = e.to_string();
    assert_eq!(kind(&e), want, "wrong error variant: {msg}");
    for n in needles {
        assert!(msg.contains(n), "`{n}` not in: {msg}");
    }
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
// Architecture checks on tiny, otherwise valid models.

/// A model description that tests can break one piece at a time before writing it.
struct TinyModel {
    kv: Vec<(String, Value)>,
    tensors: Vec<(String, Vec<u64>, GgmlType)>,
}

const DIM: u64 = 8;
const HEADS: u32 = 2;
const KV_HEADS: u32 = 1;
const HEAD_DIM: u64 = 4;
const FFN: u64 = 16;
const VOCAB: u64 = 12;

impl TinyModel {
    /// One layer of `arch` ("llama", "qwen2", "qwen3", "smollm3", "granite", "gemma2", "gemma3"
    /// or "phi3"), all F32. phi3: Q/K/V fused in `attn_qkv`, gate/up in `ffn_up`, LongRoPE
    /// factors (context 64 over 32).
    fn new(arch: &str) -> TinyModel {
        let key = |k: &str| format!("{arch}.{k}");
        let kv = vec![
            (
                "general.architecture".to_string(),
                Value::String(arch.into()),
            ),
            (key("block_count"), Value::U32(1)),
            (key("embedding_length"), Value::U32(DIM as u32)),
            (key("attention.head_count"), Value::U32(HEADS)),
            (key("attention.head_count_kv"), Value::U32(KV_HEADS)),
            (key("feed_forward_length"), Value::U32(FFN as u32)),
            (key("context_length"), Value::U32(64)),
            (key("attention.layer_norm_rms_epsilon"), Value::F32(1e-6)),
        ];
        let (q, kvw) = (HEADS as u64 * HEAD_DIM, KV_HEADS as u64 * HEAD_DIM);
        let mut tensors: Vec<(String, Vec<u64>)> = vec![
            ("token_embd.weight".into(), vec![DIM, VOCAB]),
            ("output_norm.weight".into(), vec![DIM]),
            ("output.weight".into(), vec![DIM, VOCAB]),
            ("blk.0.attn_norm.weight".into(), vec![DIM]),
            ("blk.0.attn_q.weight".into(), vec![DIM, q]),
            ("blk.0.attn_k.weight".into(), vec![DIM, kvw]),
            ("blk.0.attn_v.weight".into(), vec![DIM, kvw]),
            ("blk.0.attn_output.weight".into(), vec![q, DIM]),
            ("blk.0.ffn_norm.weight".into(), vec![DIM]),
            ("blk.0.ffn_gate.weight".into(), vec![DIM, FFN]),
            ("blk.0.ffn_up.weight".into(), vec![DIM, FFN]),
            ("blk.0.ffn_down.weight".into(), vec![FFN, DIM]),
        ];
        if arch == "qwen2" {
            tensors.extend([
                ("blk.0.attn_q.bias".into(), vec![q]),
                ("blk.0.attn_k.bias".into(), vec![kvw]),
                ("blk.0.attn_v.bias".into(), vec![kvw]),
            ]);
        }
        if arch == "qwen3" || arch == "gemma3" {
            tensors.extend([
                ("blk.0.attn_q_norm.weight".into(), vec![HEAD_DIM]),
                ("blk.0.attn_k_norm.weight".into(), vec![HEAD_DIM]),
            ]);
        }
        let mut kv = kv;
        if arch == "granite" {
            // the one granite key llama.cpp requires
            kv.push((key("logit_scale"), Value::F32(8.0)));
        }
        if arch == "gemma2" || arch == "gemma3" {
            tensors.extend([
                ("blk.0.post_attention_norm.weight".into(), vec![DIM]),
                ("blk.0.post_ffw_norm.weight".into(), vec![DIM]),
            ]);
        }
        if arch == "phi3" {
            let fused = ["attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"];
            tensors.retain(|(n, _)| !fused.iter().any(|f| n == &format!("blk.0.{f}.weight")));
            tensors.extend([
                ("blk.0.attn_qkv.weight".into(), vec![DIM, q + 2 * kvw]),
                ("blk.0.ffn_up.weight".into(), vec![DIM, 2 * FFN]),
                ("rope_factors_long.weight".into(), vec![HEAD_DIM / 2]),
                ("rope_factors_short.weight".into(), vec![HEAD_DIM / 2]),
            ]);
            kv.extend([
                (key("rope.dimension_count"), Value::U32(HEAD_DIM as u32)),
                (key("rope.scaling.original_context_length"), Value::U32(32)),
                (key("rope.scaling.attn_factor"), Value::F32(1.1)),
                (key("attention.sliding_window"), Value::U32(2047)),
            ]);
        }
        TinyModel {
            kv,
            tensors: tensors
                .into_iter()
                .map(|(n, d)| (n, d, GgmlType::F32))
                .collect(),
        }
    }

    fn set(mut self, key: &str, value: Value) -> TinyModel {
        self.kv.retain(|(k, _)| k != key);
        self.kv.push((key.to_string(), value));
        self
    }
    fn without_key(mut self, key: &str) -> TinyModel {
        let before = self.kv.len();
        self.kv.retain(|(k, _)| k != key);
        assert!(self.kv.len() < before, "no key {key} to delete");
        self
    }
    fn without_tensor(mut self, name: &str) -> TinyModel {
        let before = self.tensors.len();
        self.tensors.retain(|(n, _, _)| n != name);
        assert!(self.tensors.len() < before, "no tensor {name} to delete");
        self
    }
    fn reshape(mut self, name: &str, dims: &[u64], ty: GgmlType) -> TinyModel {
        let t = self
            .tensors
            .iter_mut()
            .find(|(n, _, _)| n == name)
            .expect("tensor exists");
        t.1 = dims.to_vec();
        t.2 = ty;
        self
    }
    /// The file, with zeroed tensor data of the right size.
    fn bytes(&self) -> Vec<u8> {
        let mut w = Writer::new();
        for (k, v) in &self.kv {
            w.kv(k, v.clone());
        }
        for (name, dims, ty) in &self.tensors {
            let n = ty.bytes_for(dims.iter().product()).expect("whole blocks") as usize;
            w.tensor(name, dims, *ty, vec![0; n]);
        }
        w.to_bytes()
    }
    fn header(&self) -> Header {
        let b = self.bytes();
        parse(&b, Some(b.len() as u64)).expect("tiny model parses")
    }
    fn config_err(&self) -> String {
        match Config::from_gguf(&self.header()) {
            Ok(c) => panic!("malformed model accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }
}

#[test]
fn tiny_models_are_valid() {
    for arch in [
        "llama", "qwen2", "qwen3", "smollm3", "granite", "gemma2", "gemma3", "phi3",
    ] {
        let c = Config::from_gguf(&TinyModel::new(arch).header())
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(
            (c.n_layers, c.dim, c.head_dim, c.vocab_size),
            (1, 8, 4, 12),
            "{arch}"
        );
    }
}

#[test]
fn missing_required_keys_are_named() {
    for arch in [
        "llama", "qwen2", "qwen3", "smollm3", "granite", "gemma2", "gemma3", "phi3",
    ] {
        for key in [
            "general.architecture".to_string(),
            format!("{arch}.block_count"),
            format!("{arch}.embedding_length"),
            format!("{arch}.attention.head_count"),
            format!("{arch}.feed_forward_length"),
            format!("{arch}.attention.layer_norm_rms_epsilon"),
        ] {
            let msg = TinyModel::new(arch).without_key(&key).config_err();
            assert!(
                msg.contains(&format!("missing metadata key `{key}`")),
                "{arch} without {key}: {msg}"
            );
        }
    }
}

#[test]
fn bad_metadata_values_are_refused_by_the_config() {
    let cases: Vec<(TinyModel, &[&str])> = vec![
        (TinyModel::new("mamba"), &["not yet: architecture `mamba`"]),
        (
            TinyModel::new("llama").set("llama.block_count", Value::String("1".into())),
            &["`llama.block_count`", "string"],
        ),
        (
            TinyModel::new("llama").set("llama.block_count", Value::U64(1 << 40)),
            &["`llama.block_count`", "32 bits"],
        ),
        (
            TinyModel::new("llama").set("llama.block_count", Value::I32(-1)),
            &["`llama.block_count`"],
        ),
        (
            TinyModel::new("llama").set("llama.attention.head_count", Value::U32(0)),
            &["llama.attention.head_count = 0 is outside"],
        ),
        (
            TinyModel::new("llama").set("llama.attention.head_count_kv", Value::U32(3)),
            &["head counts 2/3"],
        ),
        (
            TinyModel::new("llama").set("llama.attention.key_length", Value::U32(3)),
            &["head size 3"],
        ),
        (
            TinyModel::new("llama").set("llama.attention.key_length", Value::U32(512)),
            &["head size 512"],
        ),
        (
            TinyModel::new("llama").set("llama.attention.value_length", Value::U32(8)),
            &["value head size 8"],
        ),
        (
            TinyModel::new("llama").set("llama.rope.scaling.type", Value::String("yarn".into())),
            &["RoPE scaling `yarn`"],
        ),
        (
            TinyModel::new("llama").set("llama.rope.freq_base", Value::String("1e4".into())),
            &["`llama.rope.freq_base`"],
        ),
        (
            TinyModel::new("llama")
                .set("llama.attention.layer_norm_rms_epsilon", Value::Bool(true)),
            &["`llama.attention.layer_norm_rms_epsilon`"],
        ),
        // More layers than the file has tensors for.
        (
            TinyModel::new("llama").set("llama.block_count", Value::U32(2)),
            &["blk.1.attn_norm.weight", "missing"],
        ),
    ];
    for (model, needles) in cases {
        let msg = model.config_err();
        for n in needles {
            assert!(msg.contains(n), "`{n}` not in: {msg}");
        }
    }
}

#[test]
fn shapes_that_contradict_the_architecture_are_named() {
    let q = HEADS as u64 * HEAD_DIM;
    let cases: Vec<(TinyModel, &str)> = vec![
        (
            TinyModel::new("llama").reshape("blk.0.attn_q.weight", &[DIM, q + 2], GgmlType::F32),
            "blk.0.attn_q.weight",
        ),
        (
            TinyModel::new("llama").reshape("blk.0.attn_k.weight", &[DIM, q], GgmlType::F32),
            "blk.0.attn_k.weight",
        ),
        (
            TinyModel::new("llama").reshape("blk.0.ffn_down.weight", &[DIM, FFN], GgmlType::F32),
            "blk.0.ffn_down.weight",
        ),
        (
            TinyModel::new("llama").reshape("output.weight", &[DIM, VOCAB + 1], GgmlType::F32),
            "output.weight",
        ),
        (
            TinyModel::new("llama").reshape("output_norm.weight", &[DIM, 1], GgmlType::F32),
            "output_norm.weight",
        ),
        (
            TinyModel::new("llama").without_tensor("token_embd.weight"),
            "token_embd.weight",
        ),
        (
            TinyModel::new("llama").without_tensor("blk.0.ffn_up.weight"),
            "blk.0.ffn_up.weight",
        ),
        (
            TinyModel::new("qwen2").without_tensor("blk.0.attn_k.bias"),
            "blk.0.attn_k.bias",
        ),
        (
            TinyModel::new("qwen2").reshape("blk.0.attn_v.bias", &[q], GgmlType::F32),
            "blk.0.attn_v.bias",
        ),
        (
            TinyModel::new("gemma3").without_tensor("blk.0.attn_q_norm.weight"),
            "blk.0.attn_q_norm.weight",
        ),
        (
            TinyModel::new("qwen3").without_tensor("blk.0.attn_k_norm.weight"),
            "blk.0.attn_k_norm.weight",
        ),
        (
            TinyModel::new("qwen3").reshape("blk.0.attn_q_norm.weight", &[DIM], GgmlType::F32),
            "blk.0.attn_q_norm.weight",
        ),
        (
            TinyModel::new("gemma2").without_tensor("blk.0.post_attention_norm.weight"),
            "blk.0.post_attention_norm.weight",
        ),
        (
            TinyModel::new("gemma3").reshape(
                "blk.0.post_ffw_norm.weight",
                &[HEAD_DIM],
                GgmlType::F32,
            ),
            "blk.0.post_ffw_norm.weight",
        ),
        (
            TinyModel::new("llama").reshape("blk.0.ffn_norm.weight", &[DIM], GgmlType::F16),
            "blk.0.ffn_norm.weight",
        ),
    ];
    for (model, name) in cases {
        let msg = model.config_err();
        assert!(
            msg.contains(&format!("tensor `{name}`")),
            "`{name}` not named in: {msg}"
        );
    }
}

/// Qwen3's key size comes from `qwen3.attention.key_length`, not dim / heads; Q/K/V biases on
/// an architecture without them would be ignored, so they are refused ("not yet").
#[test]
fn qwen3_head_size_and_biases() {
    let c = Config::from_gguf(
        &TinyModel::new("qwen3")
            .set("qwen3.attention.key_length", Value::U32(HEAD_DIM as u32))
            .header(),
    )
    .expect("qwen3 with key_length");
    assert!(c.qk_norm && !c.qkv_bias && c.head_dim == HEAD_DIM as u32);
    let wide = TinyModel::new("qwen3").set("qwen3.attention.key_length", Value::U32(8));
    let msg = wide.config_err();
    assert!(msg.contains("blk.0.attn_q.weight"), "{msg}");
    let (q, kvw) = (HEADS as u64 * HEAD_DIM, KV_HEADS as u64 * HEAD_DIM);
    let mut biased = TinyModel::new("qwen3");
    for (n, d) in [("q", q), ("k", kvw), ("v", kvw)] {
        biased
            .tensors
            .push((format!("blk.0.attn_{n}.bias"), vec![d], GgmlType::F32));
    }
    let err = Config::from_gguf(&biased.header()).expect_err("biases refused");
    assert!(err.is_not_yet(), "{err}");
    assert!(err.to_string().contains("Q/K/V biases on qwen3"), "{err}");
}

/// Gemma 2's keys: the soft-caps (`gemma2.attn_logit_softcapping`,
/// `gemma2.final_logit_softcapping`; defaults 50 and 30 when absent, as HF's and llama.cpp's),
/// the window, the sliding pattern and the query scale. Out-of-range values are broken files;
/// what coco could run but doesn't yet, or can't determine from the file, is "not yet".
#[test]
fn gemma2_keys_are_read_and_bounded() {
    let c = Config::from_gguf(
        &TinyModel::new("gemma2")
            .set("gemma2.attn_logit_softcapping", Value::F32(5.0))
            .set("gemma2.final_logit_softcapping", Value::F32(30.0))
            .set("gemma2.attention.sliding_window", Value::U32(3))
            .header(),
    )
    .expect("gemma2");
    assert_eq!((c.attn_softcap, c.final_softcap), (Some(5.0), Some(30.0)));
    assert_eq!(c.sliding_window, Some(3));
    assert!(c.post_norms && !c.qk_norm && c.embed_scale == (DIM as f32).sqrt());
    assert_eq!(c.rope_base, 10_000.0, "no rope.freq_base key: HF's default");
    assert_eq!(c.rope_base_local, c.rope_base, "one base for every layer");
    assert_eq!(c.attn_scale, (HEAD_DIM as f32).powf(-0.5));
    // Even layers slide, odd ones are global (HF layer_types, llama.cpp's pattern 2).
    let sliding: Vec<bool> = (0..5).map(|l| c.is_sliding_layer(l)).collect();
    assert_eq!(sliding, [true, false, true, false, true]);
    assert_eq!((c.window(0), c.window(1)), (3, 0));
    let defaults = Config::from_gguf(&TinyModel::new("gemma2").header()).expect("defaults");
    assert_eq!(
        (
            defaults.attn_softcap,
            defaults.final_softcap,
            defaults.sliding_window
        ),
        (Some(50.0), Some(30.0), Some(4096))
    );

    let invalid: Vec<(TinyModel, &str)> = vec![
        (
            TinyModel::new("gemma2").set("gemma2.attn_logit_softcapping", Value::F32(-1.0)),
            "gemma2.attn_logit_softcapping = -1 is outside",
        ),
        (
            TinyModel::new("gemma2")
                .set("gemma2.final_logit_softcapping", Value::F32(f32::INFINITY)),
            "gemma2.final_logit_softcapping = inf is outside",
        ),
        (
            TinyModel::new("gemma2").set("gemma2.final_logit_softcapping", Value::F32(0.0)),
            "gemma2.final_logit_softcapping = 0 is outside",
        ),
        (
            TinyModel::new("gemma2")
                .set("gemma2.attn_logit_softcapping", Value::String("50".into())),
            "`gemma2.attn_logit_softcapping`",
        ),
        (
            TinyModel::new("gemma2").set("gemma2.attention.sliding_window", Value::U32(0)),
            "gemma2.attention.sliding_window = 0",
        ),
    ];
    for (model, needle) in invalid {
        let err = Config::from_gguf(&model.header()).expect_err(needle);
        assert!(!err.is_not_yet(), "{err}");
        assert!(err.to_string().contains(needle), "`{needle}` not in: {err}");
    }
    let not_yet: Vec<(TinyModel, &str)> = vec![
        (
            TinyModel::new("gemma2").set("gemma2.attention.sliding_window_pattern", Value::U32(3)),
            "sliding_window_pattern other than 2",
        ),
        (
            TinyModel::new("gemma2").set("gemma2.rope.freq_base_swa", Value::F32(1e6)),
            "sliding-layer RoPE base",
        ),
        // head size 8 ≠ dim / heads 4 on a 1-layer model: HF's query_pre_attn_scalar could be
        // either, and GGUF doesn't carry it.
        (
            TinyModel::new("gemma2").set("gemma2.attention.key_length", Value::U32(8)),
            "gemma2 query scale",
        ),
    ];
    for (model, needle) in not_yet {
        let err = Config::from_gguf(&model.header()).expect_err(needle);
        assert!(err.is_not_yet(), "{err}");
        assert!(err.to_string().contains(needle), "`{needle}` not in: {err}");
    }
    let pattern_two =
        TinyModel::new("gemma2").set("gemma2.attention.sliding_window_pattern", Value::U32(2));
    assert!(Config::from_gguf(&pattern_two.header()).is_ok());
}

/// SmolLM3 skips RoPE on every 4th layer. No GGUF key holds the interval (llama.cpp fixes
/// it at 4), so there is no interval value to get wrong; what a file can say about it is
/// llama.cpp's per-layer `{arch}.attention.rope_pattern`, which must then agree with the layers
/// coco rotates, be as long as the model and hold bools. SmolLM3 options coco does not run
/// (YaRN for long context, attention biases) are refused as "not yet".
#[test]
fn smollm3_nope_layers_and_what_is_refused() {
    let c = Config::from_gguf(&TinyModel::new("smollm3").header()).expect("smollm3");
    assert_eq!(c.rope_style, coco::model::RopeStyle::Normal);
    let rotated: Vec<bool> = (0..8).map(|l| c.uses_rope(l)).collect();
    assert_eq!(rotated, [true, true, true, false, true, true, true, false]);
    // the capability report says which layers go without positions
    let report = check(
        &TinyModel::new("smollm3").header(),
        &lavapipe_like_facts(),
        64,
    );
    assert!(
        report.to_text().contains(
            "smollm3: 1 layers, dim 8, heads 2/1 × 4, ffn 16, vocab 12, no RoPE on every 4th \
             layer (layers 3, 7, …: 0 of 1)"
        ),
        "{}",
        report.to_text()
    );
    let llama = Config::from_gguf(&TinyModel::new("llama").header()).expect("llama");
    assert!(
        (0..8).all(|l| llama.uses_rope(l)),
        "llama rotates every layer"
    );

    let pattern = |arch: &str, p: Vec<Value>| {
        TinyModel::new(arch).set(&format!("{arch}.attention.rope_pattern"), Value::Array(p))
    };
    // agrees with the one layer (layer 0 rotates): accepted
    Config::from_gguf(&pattern("smollm3", vec![Value::Bool(true)]).header())
        .expect("a rope_pattern that agrees");
    let cases: Vec<(TinyModel, bool, &[&str])> = vec![
        (
            pattern("smollm3", vec![Value::Bool(false)]),
            true,
            &["not yet: smollm3.attention.rope_pattern: layer 0 has no RoPE"],
        ),
        (
            pattern("llama", vec![Value::Bool(false)]),
            true,
            &["llama.attention.rope_pattern: layer 0 has no RoPE, but llama runs RoPE on every layer"],
        ),
        (
            pattern("smollm3", vec![Value::Bool(true); 2]),
            false,
            &["smollm3.attention.rope_pattern has 2 entries for 1 layers"],
        ),
        (
            pattern("smollm3", vec![Value::U32(1)]),
            false,
            &["smollm3.attention.rope_pattern", "array of bool"],
        ),
        (
            TinyModel::new("smollm3").set("smollm3.attention.rope_pattern", Value::U32(4)),
            false,
            &["smollm3.attention.rope_pattern", "array"],
        ),
        (
            TinyModel::new("smollm3")
                .set("smollm3.rope.scaling.type", Value::String("yarn".into()))
                .set("smollm3.rope.scaling.factor", Value::F32(2.0)),
            true,
            &["RoPE scaling `yarn`"],
        ),
    ];
    for (model, not_yet, needles) in cases {
        let err = Config::from_gguf(&model.header()).expect_err("refused");
        assert_eq!(err.is_not_yet(), not_yet, "{err}");
        for n in needles {
            assert!(err.to_string().contains(n), "`{n}` not in: {err}");
        }
    }
    let (q, kvw) = (HEADS as u64 * HEAD_DIM, KV_HEADS as u64 * HEAD_DIM);
    let mut biased = TinyModel::new("smollm3");
    for (n, d) in [("q", q), ("k", kvw), ("v", kvw)] {
        biased
            .tensors
            .push((format!("blk.0.attn_{n}.bias"), vec![d], GgmlType::F32));
    }
    let err = Config::from_gguf(&biased.header()).expect_err("biases refused");
    assert!(err.to_string().contains("Q/K/V biases on smollm3"), "{err}");
}

/// Granite's four multipliers: read where present (0 or absent: llama's value, as llama.cpp
/// reads them), bounded (NaN too, by the same range test; a NaN key cannot be written here:
/// the harness compares two parses), `logit_scale` required; RoPE switched off is refused.
#[test]
fn granite_multipliers_are_read_and_bounded() {
    let c = Config::from_gguf(&TinyModel::new("granite").header()).expect("granite");
    assert_eq!(
        (c.embed_scale, c.attn_scale, c.residual_scale, c.logit_scale),
        (1.0, 0.5, 1.0, 8.0),
        "unset multipliers: llama's (attention 1/√head_dim = 1/2)"
    );
    let full = TinyModel::new("granite")
        .set("granite.embedding_scale", Value::F32(12.0))
        .set("granite.attention.scale", Value::F32(0.015625))
        .set("granite.residual_scale", Value::F32(0.22))
        .set("granite.logit_scale", Value::F32(6.0));
    let c = Config::from_gguf(&full.header()).expect("granite with multipliers");
    assert_eq!(
        (c.embed_scale, c.attn_scale, c.residual_scale, c.logit_scale),
        (12.0, 0.015625, 0.22, 6.0)
    );
    assert_eq!(c.rope_style, coco::model::RopeStyle::Normal);
    let report = check(&full.header(), &lavapipe_like_facts(), 64);
    assert!(
        report
            .to_text()
            .contains("multipliers: embedding 12, attention 0.015625, residual 0.22, logits ÷ 6"),
        "{}",
        report.to_text()
    );
    let zero = TinyModel::new("granite").set("granite.residual_scale", Value::F32(0.0));
    assert_eq!(
        Config::from_gguf(&zero.header()).unwrap().residual_scale,
        1.0
    );

    let msg = TinyModel::new("granite")
        .without_key("granite.logit_scale")
        .config_err();
    assert!(
        msg.contains("missing metadata key `granite.logit_scale`"),
        "{msg}"
    );
    for (key, v) in [
        ("granite.residual_scale", Value::F32(-0.22)),
        ("granite.embedding_scale", Value::F32(1e-6)),
        ("granite.attention.scale", Value::F32(1e9)),
        ("granite.logit_scale", Value::F32(f32::INFINITY)),
    ] {
        let err = Config::from_gguf(&TinyModel::new("granite").set(key, v).header())
            .expect_err("refused");
        assert!(!err.is_not_yet(), "{err}");
        assert!(err.to_string().contains(&format!("{key} = ")), "{err}");
        assert!(err.to_string().contains("outside 1e-4..=1e4"), "{err}");
    }
    let msg = TinyModel::new("granite")
        .set("granite.logit_scale", Value::String("8".into()))
        .config_err();
    assert!(msg.contains("`granite.logit_scale`"), "{msg}");
    let err = Config::from_gguf(
        &TinyModel::new("granite")
            .set("granite.rope.scaling.finetuned", Value::Bool(false))
            .header(),
    )
    .expect_err("no RoPE refused");
    assert!(err.is_not_yet(), "{err}");
    assert!(err.to_string().contains("granite without RoPE"), "{err}");
}

/// An adapter with lavapipe's limits, for capability checks that need no GPU.
/// Phi-3's fused tensors, RoPE dimension count and LongRoPE factors: each broken form named.
#[test]
fn phi3_fused_shapes_rope_dims_and_factors() {
    let c = Config::from_gguf(&TinyModel::new("phi3").header()).expect("phi3");
    let lr = c.long_rope.expect("LongRoPE");
    assert_eq!(lr.original_context, 32);
    // HEAD_DIM^-0.5; the attention factor scales RoPE's cos and sin in the RoPE kernels
    assert_eq!((c.attn_scale, c.rope_attn_factor), (0.5, 1.1));
    assert_eq!(c.rope_dims, HEAD_DIM as u32);
    // Phi-4-mini's partial rotation: 2 of 4 dimensions, one LongRoPE factor per rotated pair.
    let partial = TinyModel::new("phi3")
        .set("phi3.rope.dimension_count", Value::U32(2))
        .reshape("rope_factors_long.weight", &[1], GgmlType::F32)
        .reshape("rope_factors_short.weight", &[1], GgmlType::F32);
    let c = Config::from_gguf(&partial.header()).expect("phi3 rotating 2 of 4 dimensions");
    assert_eq!(c.rope_dims, 2);
    assert_eq!(
        c.inv_freq(0, None),
        [1.0, 0.0],
        "the pass-through pair has no frequency"
    );
    let report = check(&partial.header(), &lavapipe_like_facts(), 64).to_text();
    assert!(
        report.contains("RoPE on 2 of 4 dimensions per head"),
        "{report}"
    );
    // Q/K/V may also come separate (llama.cpp's create_tensor_qkv takes either).
    let (q, kvw) = (HEADS as u64 * HEAD_DIM, KV_HEADS as u64 * HEAD_DIM);
    let mut separate = TinyModel::new("phi3").without_tensor("blk.0.attn_qkv.weight");
    for (n, rows) in [("attn_q", q), ("attn_k", kvw), ("attn_v", kvw)] {
        separate
            .tensors
            .push((format!("blk.0.{n}.weight"), vec![DIM, rows], GgmlType::F32));
    }
    Config::from_gguf(&separate.header()).expect("phi3 with separate Q/K/V");

    let cases: Vec<(TinyModel, &[&str])> = vec![
        (
            TinyModel::new("phi3").reshape("blk.0.attn_qkv.weight", &[DIM, q + kvw], GgmlType::F32),
            &[
                "blk.0.attn_qkv.weight",
                "contradicts the metadata",
                "[8, 16]",
            ],
        ),
        (
            TinyModel::new("phi3").reshape("blk.0.ffn_up.weight", &[DIM, FFN], GgmlType::F32),
            &["blk.0.ffn_up.weight", "contradicts the metadata", "[8, 32]"],
        ),
        (
            TinyModel::new("phi3").without_tensor("blk.0.attn_qkv.weight"),
            &["blk.0.attn_q.weight", "missing"],
        ),
        (
            TinyModel::new("phi3").set("phi3.rope.dimension_count", Value::U32(8)),
            &["phi3.rope.dimension_count = 8", "at most the head size 4"],
        ),
        (
            TinyModel::new("phi3").set("phi3.rope.dimension_count", Value::U32(3)),
            &["phi3.rope.dimension_count = 3", "even"],
        ),
        (
            // 2 of 4 dimensions rotated: one factor per rotated pair, not per head pair
            TinyModel::new("phi3").set("phi3.rope.dimension_count", Value::U32(2)),
            &[
                "rope_factors_long.weight",
                "contradicts the metadata",
                "[1]",
            ],
        ),
        (
            TinyModel::new("phi3").reshape("rope_factors_long.weight", &[HEAD_DIM], GgmlType::F32),
            &[
                "rope_factors_long.weight",
                "contradicts the metadata",
                "[2]",
            ],
        ),
        (
            TinyModel::new("phi3").reshape("rope_factors_short.weight", &[1], GgmlType::F32),
            &[
                "rope_factors_short.weight",
                "contradicts the metadata",
                "[2]",
            ],
        ),
        (
            TinyModel::new("phi3").without_tensor("rope_factors_short.weight"),
            &["needs both rope_factors_long.weight and rope_factors_short.weight"],
        ),
        (
            TinyModel::new("phi3").set("phi3.rope.scaling.original_context_length", Value::U32(65)),
            &["phi3.rope.scaling.original_context_length = 65 is outside 1..=64"],
        ),
        (
            TinyModel::new("phi3").set("phi3.rope.scaling.attn_factor", Value::F32(9.0)),
            &["phi3.rope.scaling.attn_factor = 9 is outside"],
        ),
        (
            // every dimension rotated: fine
            TinyModel::new("llama").set("llama.rope.dimension_count", Value::U32(HEAD_DIM as u32)),
            &[],
        ),
    ];
    for (model, needles) in cases {
        if needles.is_empty() {
            Config::from_gguf(&model.header()).expect("valid");
            continue;
        }
        let err = model.config_err();
        for n in needles {
            assert!(err.contains(n), "{err:?} lacks {n:?}");
        }
    }
    // LongRoPE factors on an architecture that would ignore them: not yet.
    let mut llama = TinyModel::new("llama");
    llama.tensors.push((
        "rope_factors_long.weight".into(),
        vec![HEAD_DIM / 2],
        GgmlType::F32,
    ));
    let err = Config::from_gguf(&llama.header()).unwrap_err();
    assert!(err.is_not_yet(), "{err}");
    assert!(
        err.to_string().contains("LongRoPE factors on llama"),
        "{err}"
    );
}

fn lavapipe_like_facts() -> AdapterFacts {
    AdapterFacts {
        description: "malformed.rs".into(),
        max_binding_bytes: 128 << 20,
        max_buffer_bytes: 256 << 20,
        max_invocations_per_workgroup: 256,
        shader_f16: false,
        subgroups: false,
        storage_offset_alignment: 256,
    }
}

/// A broken file is not a GPU limitation: the capability report marks broken metadata
/// "invalid model file" (and the page and the loader say so), and keeps "not yet" for valid
/// files asking for what coco can't run. A head size that isn't a multiple of 4 is one of
/// those, refused up front rather than at the first forward (the attention kernels read
/// heads as vec4).
#[test]
fn broken_files_are_invalid_and_unsupported_ones_not_yet() {
    let facts = lavapipe_like_facts();
    let broken = [
        TinyModel::new("llama").set("llama.attention.head_count", Value::U32(0)),
        TinyModel::new("llama").set("llama.block_count", Value::String("1".into())),
        TinyModel::new("llama").without_tensor("blk.0.ffn_up.weight"),
        TinyModel::new("llama").set("llama.attention.head_count_kv", Value::U32(3)),
    ];
    for model in &broken {
        let report = check(&model.header(), &facts, 64);
        let why = report.invalid().expect("a broken file is reported invalid");
        assert!(why.contains("invalid model file"), "{why}");
        assert!(
            !why.contains("not yet"),
            "a broken file called a limitation: {why}"
        );
        assert!(!report.is_ok());
    }
    let unsupported = [
        (TinyModel::new("mamba"), "architecture `mamba`"),
        (
            TinyModel::new("llama")
                .set("llama.attention.key_length", Value::U32(6))
                .set("llama.attention.value_length", Value::U32(6)),
            "head size 6 (supported: multiples of 4",
        ),
        // Mistral NeMo: llama with the Tekken byte-level BPE vocabulary, whose split coco lacks
        (
            TinyModel::new("llama")
                .set("tokenizer.ggml.model", Value::String("gpt2".into()))
                .set("tokenizer.ggml.pre", Value::String("tekken".into())),
            "pre-tokenizer \"tekken\"",
        ),
    ];
    for (model, needle) in &unsupported {
        let report = check(&model.header(), &facts, 64);
        assert_eq!(
            report.invalid(),
            None,
            "{needle}: a valid file called broken"
        );
        assert!(!report.is_ok());
        let text = report.blockers();
        assert!(text.contains("not yet") && text.contains(needle), "{text}");
    }
}

/// Every type the kernels read passes the weight-types row; any other (IQ2/IQ3/IQ1, the
/// ternary TQ types, MXFP4, the Q8_1/Q8_K activation types) is refused up front, by name, with
/// the list of what is supported.
#[test]
fn weight_types_row_names_what_it_refuses() {
    let facts = lavapipe_like_facts();
    let row = |ty: GgmlType| {
        let (block, _) = ty.block_geometry().expect("a sized type");
        // One tensor of the type, whole blocks; the rest of the model stays F32.
        let model = TinyModel::new("llama").reshape("output.weight", &[block as u64, VOCAB], ty);
        let report = check(&model.header(), &facts, 64);
        report
            .rows
            .into_iter()
            .find(|r| r.name == "weight types")
            .expect("a weight types row")
    };
    for ty in GgmlType::SUPPORTED {
        let r = row(ty);
        assert_eq!(r.status, Status::Ok, "{ty}: {}", r.detail);
    }
    let supported = "supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, \
                     Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS";
    for (ty, name) in [
        (GgmlType::Other(16), "IQ2_XXS"),
        (GgmlType::Other(18), "IQ3_XXS"),
        (GgmlType::Other(21), "IQ3_S"),
        (GgmlType::Other(29), "IQ1_M"),
        (GgmlType::Other(34), "TQ1_0"),
        (GgmlType::Other(35), "TQ2_0"),
        (GgmlType::Other(39), "MXFP4"),
        (GgmlType::Q8_1, "Q8_1"),
        (GgmlType::Q8_K, "Q8_K"),
    ] {
        let r = row(ty);
        assert_eq!(r.status, Status::NotYet, "{name}: {}", r.detail);
        assert!(
            r.detail.contains(&format!("not yet: {name} (1 tensors"))
                && r.detail.contains(supported),
            "{name}: {}",
            r.detail
        );
    }
}

/// Head counts whose product with the head size passes 2^32: must be an error, not an
/// arithmetic overflow (a panic in debug builds, a wrong width in release).
#[test]
fn huge_head_counts_are_an_error() {
    let model = TinyModel::new("llama")
        .set("llama.attention.head_count", Value::U32(1 << 24))
        .set("llama.attention.head_count_kv", Value::U32(1 << 24))
        .set("llama.attention.key_length", Value::U32(256))
        .set("llama.attention.value_length", Value::U32(256));
    let msg = model.config_err();
    assert!(
        msg.contains("llama.attention.head_count = 16777216 is outside"),
        "{msg}"
    );
}

/// (2^30 + 2) heads of size 4 wrap, in u32, to a width of 8: exactly the tiny model's attn_q.
/// Accepting it would hand the engine a billion heads over an 8-wide buffer.
#[test]
fn head_width_that_wraps_32_bits_is_an_error() {
    let model = TinyModel::new("llama")
        .set("llama.attention.head_count", Value::U32((1 << 30) + 2))
        .set("llama.attention.head_count_kv", Value::U32(1))
        .set("llama.attention.key_length", Value::U32(HEAD_DIM as u32))
        .set("llama.attention.value_length", Value::U32(HEAD_DIM as u32));
    let msg = model.config_err();
    assert!(
        msg.contains("llama.attention.head_count = 1073741826 is outside"),
        "{msg}"
    );
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
