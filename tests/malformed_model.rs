//! Architecture checks on tiny, otherwise valid models (`Config::from_gguf` and the capability
//! check): missing keys, wrong types, values out of range and shapes that contradict the
//! metadata must each be an error that names the key or tensor, and an unsupported but
//! well-formed file a "not yet". Split from `malformed.rs`, which covers the parser.

mod gguf_files;

use coco::capabilities::{check, Status};
use coco::gguf::{GgmlType, Value};
use coco::model::Config;
use gguf_files::*;

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
