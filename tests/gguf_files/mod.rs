//! GGUF files for the hostile-input tests (`malformed.rs`, `malformed_model.rs`): the one-shot
//! and byte-by-byte parse whose errors they compare, and `TinyModel`, a one-layer model of any
//! supported architecture that a test breaks one piece at a time. Each test binary uses a
//! subset, hence the allow.
#![allow(dead_code)]

use coco::capabilities::AdapterFacts;
use coco::gguf::{GgmlType, GgufError, Header, Parser, Value, Writer};
use coco::model::Config;

/// The error's variant name, so expectations read as one line.
pub fn kind(e: &GgufError) -> &'static str {
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
pub fn parse(bytes: &[u8], expected_len: Option<u64>) -> Result<Header, GgufError> {
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
pub fn expect_err(r: Result<Header, GgufError>, want: &str, needles: &[&str]) {
    let e = r.expect_err("malformed input parsed");
    let msg = e.to_string();
    assert_eq!(kind(&e), want, "wrong error variant: {msg}");
    for n in needles {
        assert!(msg.contains(n), "`{n}` not in: {msg}");
    }
}

// ---------------------------------------------------------------------------------------------

/// A model description that tests can break one piece at a time before writing it.
pub struct TinyModel {
    pub kv: Vec<(String, Value)>,
    pub tensors: Vec<(String, Vec<u64>, GgmlType)>,
}

pub const DIM: u64 = 8;
pub const HEADS: u32 = 2;
pub const KV_HEADS: u32 = 1;
pub const HEAD_DIM: u64 = 4;
pub const FFN: u64 = 16;
pub const VOCAB: u64 = 12;

impl TinyModel {
    /// One layer of `arch` ("llama", "qwen2", "qwen3", "smollm3", "granite", "gemma2", "gemma3"
    /// or "phi3"), all F32. phi3: Q/K/V fused in `attn_qkv`, gate/up in `ffn_up`, LongRoPE
    /// factors (context 64 over 32).
    pub fn new(arch: &str) -> TinyModel {
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

    pub fn set(mut self, key: &str, value: Value) -> TinyModel {
        self.kv.retain(|(k, _)| k != key);
        self.kv.push((key.to_string(), value));
        self
    }
    pub fn without_key(mut self, key: &str) -> TinyModel {
        let before = self.kv.len();
        self.kv.retain(|(k, _)| k != key);
        assert!(self.kv.len() < before, "no key {key} to delete");
        self
    }
    pub fn without_tensor(mut self, name: &str) -> TinyModel {
        let before = self.tensors.len();
        self.tensors.retain(|(n, _, _)| n != name);
        assert!(self.tensors.len() < before, "no tensor {name} to delete");
        self
    }
    pub fn reshape(mut self, name: &str, dims: &[u64], ty: GgmlType) -> TinyModel {
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
    pub fn bytes(&self) -> Vec<u8> {
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
    pub fn header(&self) -> Header {
        let b = self.bytes();
        parse(&b, Some(b.len() as u64)).expect("tiny model parses")
    }
    pub fn config_err(&self) -> String {
        match Config::from_gguf(&self.header()) {
            Ok(c) => panic!("malformed model accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }
}

/// An adapter like CI's lavapipe, without f16 or subgroups: what the capability check sees in
/// these tests.
pub fn lavapipe_like_facts() -> AdapterFacts {
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
