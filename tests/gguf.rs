//! The GGUF parser: every value type, random chunkings (1 byte to whole file) against a
//! one-shot parse, real fixture files, truncation at every header byte, and hostile counts.

use coco::gguf::{Event, GgmlType, GgufError, Header, Parser, Value, Writer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Parses `bytes` in chunks whose sizes `next_size` picks; returns the header and each
/// tensor's reassembled bytes.
fn parse_chunked(
    bytes: &[u8],
    next_size: &mut dyn FnMut() -> usize,
) -> Result<(Header, Vec<Vec<u8>>), GgufError> {
    let mut parser = Parser::new().with_expected_len(bytes.len() as u64);
    let mut data: Vec<Vec<u8>> = Vec::new();
    let mut done = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let n = next_size().clamp(1, bytes.len() - at);
        parser.push(&bytes[at..at + n], &mut |e| match e {
            Event::Header(h) => data = vec![Vec::new(); h.tensors.len()],
            Event::TensorBytes {
                index,
                offset,
                bytes,
            } => {
                assert_eq!(
                    data[index].len() as u64,
                    offset,
                    "tensor {index} bytes out of order"
                );
                data[index].extend_from_slice(bytes);
            }
            Event::TensorDone { index } => done.push(index),
        })?;
        at += n;
    }
    parser.finish()?;
    let header = parser.header().cloned().expect("header after finish");
    assert_eq!(
        done.len(),
        header.tensors.len(),
        "every tensor reports done once"
    );
    Ok((header, data))
}

fn sample_file() -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut w = Writer::new();
    w.kv("general.architecture", Value::String("llama".into()))
        .kv("u8", Value::U8(7))
        .kv("i8", Value::I8(-7))
        .kv("u16", Value::U16(65535))
        .kv("i16", Value::I16(-300))
        .kv("u32", Value::U32(4_000_000_000))
        .kv("i32", Value::I32(-5))
        .kv("f32", Value::F32(1.5))
        .kv("bool", Value::Bool(true))
        .kv("u64", Value::U64(1 << 40))
        .kv("i64", Value::I64(-(1 << 40)))
        .kv("f64", Value::F64(-2.25))
        .kv("unicode", Value::String("héllo ✓ 日本".into()))
        .kv(
            "strings",
            Value::Array(vec![
                Value::String("a".into()),
                Value::String("".into()),
                Value::String("ccc".into()),
            ]),
        )
        .kv(
            "floats",
            Value::Array((0..100).map(|i| Value::F32(i as f32 * 0.5)).collect()),
        )
        .kv(
            "nested",
            Value::Array(vec![
                Value::Array(vec![Value::I32(1), Value::I32(2)]),
                Value::Array(vec![Value::I32(3)]),
            ]),
        );
    let q8 = (0..4 * 34).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>();
    let f32s = (0..6 * 4).map(|i| i as u8).collect::<Vec<_>>();
    let q5 = (0..2 * 22)
        .map(|i| (i * 13 % 256) as u8)
        .collect::<Vec<_>>();
    w.tensor("a.weight", &[64, 2], GgmlType::Q8_0, q8.clone())
        .tensor("b.weight", &[6], GgmlType::F32, f32s.clone())
        .tensor("c.weight", &[32, 2], GgmlType::Q5_0, q5.clone());
    (w.to_bytes(), vec![q8, f32s, q5])
}

#[test]
fn every_value_type_round_trips() {
    let (bytes, tensors) = sample_file();
    let (h, data) = parse_chunked(&bytes, &mut || usize::MAX).unwrap();
    let md = &h.metadata;
    assert_eq!(md.get("u8"), Some(&Value::U8(7)));
    assert_eq!(md.get("i16"), Some(&Value::I16(-300)));
    assert_eq!(md.u32("u32").unwrap(), 4_000_000_000);
    assert_eq!(md.get("i64"), Some(&Value::I64(-(1 << 40))));
    assert_eq!(md.get("f64"), Some(&Value::F64(-2.25)));
    assert_eq!(md.str("unicode").unwrap(), "héllo ✓ 日本");
    assert_eq!(md.str_array("strings").unwrap(), vec!["a", "", "ccc"]);
    assert_eq!(md.f32_array("floats").unwrap()[99], 49.5);
    assert_eq!(md.array("nested").unwrap().len(), 2);
    assert!(md.bool("bool").unwrap());
    assert_eq!(h.tensors.len(), 3);
    assert_eq!(h.tensors[0].dims, vec![64, 2]);
    assert_eq!(h.tensors[2].ty, GgmlType::Q5_0);
    assert_eq!(data, tensors);
    assert_eq!(h.data_start % 32, 0);
}

#[test]
fn random_chunkings_agree_with_one_shot() {
    let (bytes, _) = sample_file();
    let one_shot = parse_chunked(&bytes, &mut || usize::MAX).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for round in 0..200 {
        let max = [1usize, 2, 3, 7, 64, 1000][round % 6];
        let got = parse_chunked(&bytes, &mut || rng.gen_range(1..=max)).unwrap();
        assert_eq!(got, one_shot, "chunking round {round} (max chunk {max})");
    }
}

#[test]
fn fixture_files_parse_in_random_chunks() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/fixtures exists (run scripts/fixtures.sh)")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no fixture GGUFs: run scripts/fixtures.sh"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    for path in files.iter().take(6) {
        let bytes = std::fs::read(path).unwrap();
        let one_shot = parse_chunked(&bytes, &mut || usize::MAX).unwrap();
        let got = parse_chunked(&bytes, &mut || rng.gen_range(1..=70_000)).unwrap();
        assert!(got == one_shot, "{} differs when chunked", path.display());
        assert_eq!(coco::gguf::read_header(path).unwrap(), one_shot.0);
    }
}

#[test]
fn truncation_anywhere_is_a_clean_error() {
    let (bytes, _) = sample_file();
    let (h, _) = parse_chunked(&bytes, &mut || usize::MAX).unwrap();
    let (header_len, data_end) = (h.data_start as usize, h.data_end() as usize);
    // Every byte of the header, inside the data, and the last data byte (the padding after
    // the last tensor is optional, so cutting there is fine).
    for cut in (0..header_len).chain([header_len + 5, data_end - 1]) {
        let err =
            parse_chunked(&bytes[..cut], &mut || 13).expect_err(&format!("cut at {cut} parsed"));
        match err {
            GgufError::Truncated { .. } => {}
            // The expected length check fires first when the cut lands after the infos.
            GgufError::Invalid { ref why, .. } if why.contains("past the end") => {}
            other => panic!("cut at {cut}: unexpected error {other}"),
        }
    }
}

fn header_bytes(tensor_count: u64, kv_count: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&tensor_count.to_le_bytes());
    b.extend_from_slice(&kv_count.to_le_bytes());
    b
}

fn parse_all(bytes: &[u8]) -> Result<(), GgufError> {
    let mut p = Parser::new();
    p.push(bytes, &mut |_| {})?;
    p.finish()
}

#[test]
fn hostile_counts_and_lengths_are_refused_without_allocating() {
    // Counts near 2^64.
    assert!(matches!(
        parse_all(&header_bytes(u64::MAX, 0)),
        Err(GgufError::TooLarge { .. })
    ));
    assert!(matches!(
        parse_all(&header_bytes(0, u64::MAX - 1)),
        Err(GgufError::TooLarge { .. })
    ));
    // A string length near 2^64 in a key.
    let mut b = header_bytes(0, 1);
    b.extend_from_slice(&(u64::MAX - 3).to_le_bytes());
    let e = parse_all(&b).unwrap_err();
    assert!(
        matches!(e, GgufError::TooLarge { ref field, .. } if field.contains("metadata[0].key")),
        "{e}"
    );
    // An array length near 2^64.
    let mut b = header_bytes(0, 1);
    b.extend_from_slice(&3u64.to_le_bytes());
    b.extend_from_slice(b"arr");
    b.extend_from_slice(&9u32.to_le_bytes());
    b.extend_from_slice(&4u32.to_le_bytes());
    b.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    let e = parse_all(&b).unwrap_err();
    assert!(
        matches!(e, GgufError::TooLarge { ref field, .. } if field.contains("arr")),
        "{e}"
    );
    // Unknown value type.
    let mut b = header_bytes(0, 1);
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(b"k");
    b.extend_from_slice(&77u32.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    let e = parse_all(&b).unwrap_err();
    assert!(
        e.to_string().contains("unknown metadata value type 77"),
        "{e}"
    );
    // Bad magic and version.
    assert!(matches!(
        parse_all(b"GGML\x03\0\0\0"),
        Err(GgufError::BadMagic { .. })
    ));
    let mut b = header_bytes(0, 0);
    b[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        parse_all(&b),
        Err(GgufError::Version { version: 1, .. })
    ));
    b[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(
        parse_all(&b),
        Err(GgufError::Version {
            big_endian: true,
            ..
        })
    ));
}

fn tensor_file(tensors: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
    let mut b = header_bytes(tensors.len() as u64, 0);
    for (name, dims, ty, offset) in tensors {
        b.extend_from_slice(&(name.len() as u64).to_le_bytes());
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&(dims.len() as u32).to_le_bytes());
        for d in *dims {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
    }
    b.resize(b.len().div_ceil(32) * 32 + 256, 0);
    b
}

#[test]
fn bad_tensor_infos_name_the_field() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            tensor_file(&[("t", &[1 << 32, 1 << 32, 1 << 32], 0, 0)]),
            "tensor `t`.dims",
        ),
        (tensor_file(&[("t", &[32, 0], 0, 0)]), "dims[1]"),
        (
            tensor_file(&[("t", &[30], 8, 0)]),
            "not a multiple of the Q8_0 block size",
        ),
        (
            tensor_file(&[("t", &[4], 0, 3)]),
            "not a multiple of the alignment",
        ),
        (
            tensor_file(&[("t", &[4], 0, 0), ("u", &[32], 0, 0)]),
            "overlaps",
        ),
        (
            tensor_file(&[("t", &[4], 0, 0), ("t", &[4], 0, 32)]),
            "duplicate tensor name",
        ),
        (
            tensor_file(&[("t", &[4], 99, 0)]),
            "unknown tensor type id 99",
        ),
        (tensor_file(&[("t", &[4, 1, 1, 1, 1], 0, 0)]), "n_dims"),
        (tensor_file(&[("t", &[4], 0, 1 << 20)]), "past the end"),
    ];
    for (bytes, expect) in cases {
        let mut p = Parser::new().with_expected_len(bytes.len() as u64);
        let err = p
            .push(&bytes, &mut |_| {})
            .and_then(|_| p.finish())
            .unwrap_err();
        assert!(
            err.to_string().contains(expect),
            "expected `{expect}` in: {err}"
        );
    }
}

#[test]
fn duplicate_keys_are_refused() {
    let mut w = Writer::new();
    w.kv("a", Value::U32(1)).kv("a", Value::U32(2));
    let e = parse_all(&w.to_bytes()).unwrap_err();
    assert!(e.to_string().contains("duplicate key `a`"), "{e}");
}

#[test]
fn one_kilobyte_of_garbage_never_panics() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (valid, _) = sample_file();
    for _ in 0..3000 {
        let mut b = valid[..valid.len().min(1024)].to_vec();
        for _ in 0..rng.gen_range(1..8) {
            let i = rng.gen_range(0..b.len());
            b[i] = rng.gen();
        }
        let _ = parse_all(&b);
    }
}

/// The capability check's "largest tensor" row: a tensor over one binding is fine (it is
/// bound in ranges of whole rows); a single row over it is "not yet", named, with sizes.
#[test]
fn capability_check_refuses_only_rows_wider_than_a_binding() {
    use coco::capabilities::{check, AdapterFacts, Status};
    // "wide": 2 rows of 1,024 f32 (4 KiB each); "tall": 256 rows of 64 f32 (64 KiB in all).
    let bytes = tensor_file(&[("wide", &[1024, 2], 0, 0), ("tall", &[64, 256], 0, 8192)]);
    let mut parser = Parser::new();
    let mut header = None;
    let _ = parser.push(&bytes, &mut |e| {
        if let Event::Header(h) = e {
            header = Some(h.clone());
        }
    });
    let header = header.expect("the header parses");
    let row_for = |max_binding_bytes: u64| {
        let facts = AdapterFacts {
            description: "gguf.rs".into(),
            max_binding_bytes,
            max_buffer_bytes: 1 << 30,
            max_invocations_per_workgroup: 256,
            shader_f16: false,
            subgroups: false,
            storage_offset_alignment: 256,
        };
        check(&header, &facts, 64)
            .rows
            .into_iter()
            .find(|r| r.name == "largest tensor")
            .expect("a largest-tensor row")
    };
    let refused = row_for(2048);
    assert_eq!(refused.status, Status::NotYet, "{}", refused.detail);
    assert!(
        refused.detail.contains("`wide`") && refused.detail.contains("can't be split"),
        "names the widest row: {}",
        refused.detail
    );
    let split = row_for(8192);
    assert_eq!(split.status, Status::Ok, "{}", split.detail);
    assert!(
        split.detail.contains("`tall`") && split.detail.contains("bound in row ranges"),
        "{}",
        split.detail
    );
}
