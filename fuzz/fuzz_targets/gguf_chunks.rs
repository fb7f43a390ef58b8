//! Fuzz target: a GGUF file pushed through `coco::gguf::Parser` in fuzzer-chosen chunks.
//!
//! Input layout: byte 0 picks the largest chunk size (low 4 bits, from `MAX_CHUNK`) and whether
//! the parser is told the input length (bit 4); byte 1 seeds the chunk-size sequence; the rest
//! is the file. Beyond "no panic, no hang, no huge allocation" (libFuzzer's limits, see
//! scripts/fuzz_smoke.sh) the target checks that chunking changes nothing: the chunked parse
//! must give exactly the one-shot parse's header, tensor bytes and error. A header that parses
//! is then taken down the loader's own path: capability check, `Config`, `Tokenizer`.

#![no_main]

use coco::capabilities::{check, AdapterFacts};
use coco::gguf::{Event, GgufError, Header, Parser, Value};
use coco::model::Config;
use coco::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

/// Largest chunk per run; 1-byte chunks hit every resume point of the header state machine.
const MAX_CHUNK: [usize; 16] = [
    1,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    13,
    16,
    31,
    64,
    255,
    1024,
    4096,
    usize::MAX,
];

/// What one parse produced, compared between chunkings.
#[derive(Debug)]
struct Trace {
    header: Option<Header>,
    /// Reassembled bytes per tensor.
    tensors: Vec<Vec<u8>>,
    /// Order in which tensors reported done.
    done: Vec<usize>,
    result: Result<(), GgufError>,
}

/// Value equality with floats compared by bits: a NaN read from the file must read the same
/// whatever the chunking, but `NaN != NaN` under `PartialEq`.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.to_bits() == y.to_bits(),
        (Value::F64(x), Value::F64(y)) => x.to_bits() == y.to_bits(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        _ => a == b,
    }
}

fn same_header(a: &Header, b: &Header) -> bool {
    let (ma, mb) = (&a.metadata.entries, &b.metadata.entries);
    a.version == b.version
        && a.tensors == b.tensors
        && a.alignment == b.alignment
        && a.data_start == b.data_start
        && ma.len() == mb.len()
        && ma
            .iter()
            .zip(mb)
            .all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
}

fn same_trace(a: &Trace, b: &Trace) -> bool {
    let headers = match (&a.header, &b.header) {
        (Some(x), Some(y)) => same_header(x, y),
        (None, None) => true,
        _ => false,
    };
    headers && a.tensors == b.tensors && a.done == b.done && a.result == b.result
}

/// Pushes `file` in chunks whose sizes `next` picks, checking the event contract as it goes.
fn parse(file: &[u8], expected_len: bool, next: &mut dyn FnMut() -> usize) -> Trace {
    let mut parser = Parser::new();
    if expected_len {
        parser = parser.with_expected_len(file.len() as u64);
    }
    let mut header: Option<Header> = None;
    let mut tensors: Vec<Vec<u8>> = Vec::new();
    let mut done: Vec<usize> = Vec::new();
    let mut on_event = |e: Event<'_>| match e {
        Event::Header(h) => {
            assert!(header.is_none(), "header reported twice");
            tensors = vec![Vec::new(); h.tensors.len()];
            header = Some(h.clone());
        }
        Event::TensorBytes {
            index,
            offset,
            bytes,
        } => {
            let h = header.as_ref().expect("tensor bytes before the header");
            let t = &h.tensors[index];
            assert_eq!(
                tensors[index].len() as u64,
                offset,
                "tensor `{}` bytes out of order",
                t.name
            );
            assert!(
                !done.contains(&index),
                "bytes for `{}` after it was done",
                t.name
            );
            tensors[index].extend_from_slice(bytes);
            assert!(
                tensors[index].len() as u64 <= t.n_bytes,
                "tensor `{}` overfilled",
                t.name
            );
        }
        Event::TensorDone { index } => {
            let h = header.as_ref().expect("tensor done before the header");
            assert_eq!(
                tensors[index].len() as u64,
                h.tensors[index].n_bytes,
                "`{}` done early",
                h.tensors[index].name
            );
            assert!(!done.contains(&index), "tensor {index} done twice");
            done.push(index);
        }
    };
    let mut at = 0;
    let mut result = Ok(());
    while at < file.len() {
        let n = next().clamp(1, file.len() - at);
        result = parser.push(&file[at..at + n], &mut on_event);
        if result.is_err() {
            break;
        }
        at += n;
    }
    if result.is_ok() {
        result = parser.finish();
        if result.is_ok() {
            assert!(
                parser.is_complete(),
                "finish() succeeded on an incomplete parse"
            );
        }
    }
    Trace {
        header,
        tensors,
        done,
        result,
    }
}

/// The loader's checks on a parsed header; each must return an error, never panic.
fn use_header(h: &Header) {
    let facts = AdapterFacts {
        description: "fuzz".into(),
        max_binding_bytes: 128 << 20,
        max_buffer_bytes: 256 << 20,
        max_invocations_per_workgroup: 256,
        shader_f16: false,
        subgroups: false,
        storage_offset_alignment: 256,
    };
    let _ = check(h, &facts, 4096);
    let _ = Config::from_gguf(h);
    if let Ok(tok) = Tokenizer::from_gguf(&h.metadata) {
        let ids = tok.encode("Hello, wörld! <s> <|eot_id|> 123", true, true);
        let _ = tok.decode(&ids);
    }
}

fuzz_target!(|data: &[u8]| {
    let (mode, seed, file) = match data {
        [mode, seed, file @ ..] => (*mode, *seed, file),
        _ => return,
    };
    let max = MAX_CHUNK[(mode & 15) as usize];
    let expected_len = mode & 16 != 0;
    let one_shot = parse(file, expected_len, &mut || usize::MAX);
    // xorshift32: a cheap, seedable chunk-size sequence.
    let mut state = u32::from(seed).wrapping_mul(0x9E37_79B9) | 1;
    let chunked = parse(file, expected_len, &mut || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        if max == usize::MAX {
            usize::MAX
        } else {
            1 + state as usize % max
        }
    });
    assert!(
        same_trace(&chunked, &one_shot),
        "chunking (max {max}, seed {seed}) changed the parse:\n{chunked:?}\nvs one-shot\n{one_shot:?}"
    );
    if let Some(h) = &one_shot.header {
        use_header(h);
    }
});
