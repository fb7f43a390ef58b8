//! Writes a random-weight GGUF in the real shape of a published model, for benchmarks
//! (BENCHMARKS.md). Too big to commit or carry, so it is generated where it runs:
//!
//!   cargo run --release --example shape_model -- llama-1b q4_0 out.gguf
//!
//! Shapes: llama-1b (Llama-3.2-1B), qwen-0.5b (Qwen2.5-0.5B), llama-8b (Llama-3.1-8B),
//! gemma-270m (Gemma-3-270M).
//! The vocabulary is synthetic (SentencePiece-style byte tokens + filler pieces): speed does
//! not depend on what the tokens spell.

use coco::gguf::{GgmlType, Value, Writer};
use coco::reference::quant::quantize;

struct Shape {
    arch: &'static str,
    layers: u64,
    dim: u64,
    heads: u64,
    kv_heads: u64,
    ffn: u64,
    vocab: u64,
    tied: bool,
    rope_base: f32,
    /// Gemma 3 keys its head size separately from dim / heads.
    head_dim: Option<u64>,
}

fn shape(name: &str) -> Option<Shape> {
    Some(match name {
        "llama-1b" => Shape {
            arch: "llama",
            layers: 16,
            dim: 2048,
            heads: 32,
            kv_heads: 8,
            ffn: 8192,
            vocab: 128_256,
            tied: true,
            rope_base: 500_000.0,
            head_dim: None,
        },
        "qwen-0.5b" => Shape {
            arch: "qwen2",
            layers: 24,
            dim: 896,
            heads: 14,
            kv_heads: 2,
            ffn: 4864,
            vocab: 151_936,
            tied: true,
            rope_base: 1_000_000.0,
            head_dim: None,
        },
        "llama-8b" => Shape {
            arch: "llama",
            layers: 32,
            dim: 4096,
            heads: 32,
            kv_heads: 8,
            ffn: 14_336,
            vocab: 128_256,
            tied: false,
            rope_base: 500_000.0,
            head_dim: None,
        },
        // Gemma-3-270M: the real file mixes Q5_0/Q4_K/Q6_K matrices with a Q8_0 embedding;
        // here every matrix takes the requested type and the embedding stays Q8_0.
        "gemma-270m" => Shape {
            arch: "gemma3",
            layers: 18,
            dim: 640,
            heads: 4,
            kv_heads: 1,
            ffn: 2048,
            vocab: 262_144,
            tied: true,
            rope_base: 1_000_000.0,
            head_dim: Some(256),
        },
        _ => return None,
    })
}

/// xorshift64*: fast, seeded, good enough for random weights.
struct Rng(u64);
impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

fn random_tensor(seed: u64, n: usize, scale: f32, ty: GgmlType) -> Vec<u8> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let values: Vec<f32> = (0..n).map(|_| rng.next_f32() * scale).collect();
    quantize(ty, &values).expect("quantize")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: shape_model <llama-1b|qwen-0.5b|llama-8b> <q4_0|q8_0|…> <out.gguf>");
        std::process::exit(2);
    }
    let s = shape(&args[1]).unwrap_or_else(|| panic!("unknown shape {}", args[1]));
    let ty = GgmlType::SUPPORTED
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(&args[2]))
        .unwrap_or_else(|| panic!("unknown type {}", args[2]));
    let hd = s.head_dim.unwrap_or(s.dim / s.heads);
    let gemma = s.arch == "gemma3";
    let mut w = Writer::new();
    let a = s.arch;
    w.kv("general.architecture", Value::String(a.into()))
        .kv(&format!("{a}.block_count"), Value::U32(s.layers as u32))
        .kv(&format!("{a}.embedding_length"), Value::U32(s.dim as u32))
        .kv(
            &format!("{a}.attention.head_count"),
            Value::U32(s.heads as u32),
        )
        .kv(
            &format!("{a}.attention.head_count_kv"),
            Value::U32(s.kv_heads as u32),
        )
        .kv(
            &format!("{a}.feed_forward_length"),
            Value::U32(s.ffn as u32),
        )
        .kv(&format!("{a}.context_length"), Value::U32(8192))
        .kv(&format!("{a}.rope.freq_base"), Value::F32(s.rope_base))
        .kv(
            &format!("{a}.attention.layer_norm_rms_epsilon"),
            Value::F32(1e-5),
        );
    if gemma {
        w.kv(&format!("{a}.attention.key_length"), Value::U32(hd as u32))
            .kv(
                &format!("{a}.attention.value_length"),
                Value::U32(hd as u32),
            )
            .kv(&format!("{a}.attention.sliding_window"), Value::U32(512));
    }
    // Synthetic SentencePiece vocabulary: <unk> <s> </s>, 256 byte tokens, filler pieces.
    let mut tokens = vec![
        Value::String("<unk>".into()),
        Value::String("<s>".into()),
        Value::String("</s>".into()),
    ];
    let mut types = vec![Value::I32(2), Value::I32(3), Value::I32(3)];
    for b in 0..256 {
        tokens.push(Value::String(format!("<0x{b:02X}>")));
        types.push(Value::I32(6));
    }
    while (tokens.len() as u64) < s.vocab {
        tokens.push(Value::String(format!("▁t{}", tokens.len())));
        types.push(Value::I32(1));
    }
    let scores = (0..s.vocab).map(|i| Value::F32(-(i as f32))).collect();
    w.kv("tokenizer.ggml.model", Value::String("llama".into()))
        .kv("tokenizer.ggml.tokens", Value::Array(tokens))
        .kv("tokenizer.ggml.scores", Value::Array(scores))
        .kv("tokenizer.ggml.token_type", Value::Array(types))
        .kv("tokenizer.ggml.bos_token_id", Value::U32(1))
        .kv("tokenizer.ggml.eos_token_id", Value::U32(2));

    // Tensors, quantized in parallel (8B parameters single-threaded would take minutes).
    let mut specs: Vec<(String, Vec<u64>, GgmlType, f32)> = Vec::new();
    let mat = |k: u64| 1.0 / (k as f32).sqrt();
    let embd_ty = if gemma { GgmlType::Q8_0 } else { ty };
    specs.push((
        "token_embd.weight".into(),
        vec![s.dim, s.vocab],
        embd_ty,
        1.0,
    ));
    if !s.tied {
        specs.push(("output.weight".into(), vec![s.dim, s.vocab], ty, mat(s.dim)));
    }
    specs.push(("output_norm.weight".into(), vec![s.dim], GgmlType::F32, 1.0));
    for l in 0..s.layers {
        let b = |n: &str| format!("blk.{l}.{n}");
        specs.push((b("attn_norm.weight"), vec![s.dim], GgmlType::F32, 1.0));
        specs.push((
            b("attn_q.weight"),
            vec![s.dim, s.heads * hd],
            ty,
            mat(s.dim),
        ));
        specs.push((
            b("attn_k.weight"),
            vec![s.dim, s.kv_heads * hd],
            ty,
            mat(s.dim),
        ));
        specs.push((
            b("attn_v.weight"),
            vec![s.dim, s.kv_heads * hd],
            ty,
            mat(s.dim),
        ));
        if s.arch == "qwen2" {
            specs.push((b("attn_q.bias"), vec![s.heads * hd], GgmlType::F32, 0.1));
            specs.push((b("attn_k.bias"), vec![s.kv_heads * hd], GgmlType::F32, 0.1));
            specs.push((b("attn_v.bias"), vec![s.kv_heads * hd], GgmlType::F32, 0.1));
        }
        if gemma {
            specs.push((b("attn_q_norm.weight"), vec![hd], GgmlType::F32, 1.0));
            specs.push((b("attn_k_norm.weight"), vec![hd], GgmlType::F32, 1.0));
            specs.push((
                b("post_attention_norm.weight"),
                vec![s.dim],
                GgmlType::F32,
                1.0,
            ));
            specs.push((b("post_ffw_norm.weight"), vec![s.dim], GgmlType::F32, 1.0));
        }
        specs.push((
            b("attn_output.weight"),
            vec![s.heads * hd, s.dim],
            ty,
            mat(s.dim),
        ));
        specs.push((b("ffn_norm.weight"), vec![s.dim], GgmlType::F32, 1.0));
        specs.push((b("ffn_gate.weight"), vec![s.dim, s.ffn], ty, mat(s.dim)));
        specs.push((b("ffn_up.weight"), vec![s.dim, s.ffn], ty, mat(s.dim)));
        specs.push((b("ffn_down.weight"), vec![s.ffn, s.dim], ty, mat(s.ffn)));
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(4);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut data: Vec<Vec<u8>> = vec![Vec::new(); specs.len()];
    let slots: Vec<std::sync::Mutex<Vec<u8>>> = (0..specs.len())
        .map(|_| std::sync::Mutex::new(Vec::new()))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((_, dims, ty, scale)) = specs.get(i) else {
                    break;
                };
                let n: u64 = dims.iter().product();
                let bytes = if *ty == GgmlType::F32 {
                    // Norm weights near 1, biases small.
                    let mut rng = Rng(i as u64 + 7);
                    (0..n)
                        .flat_map(|_| (1.0 + 0.1 * rng.next_f32() * scale).to_le_bytes())
                        .collect()
                } else {
                    random_tensor(i as u64 + 1, n as usize, *scale, *ty)
                };
                *slots[i].lock().expect("slot") = bytes;
            });
        }
    });
    for (i, slot) in slots.into_iter().enumerate() {
        data[i] = slot.into_inner().expect("slot");
    }
    for ((name, dims, ty, _), bytes) in specs.iter().zip(data) {
        w.tensor(name, dims, *ty, bytes);
    }
    std::fs::write(&args[3], w.to_bytes()).expect("write");
    eprintln!("wrote {} ({} shape, {})", args[3], args[1], ty);
}
