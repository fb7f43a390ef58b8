#!/usr/bin/env python3
"""Oracle goldens from Hugging Face transformers for coco's model tests.

For each fixture GGUF (tools/make_fixtures.py) and for the real Gemma 3 270M,
load the GGUF with transformers (which dequantizes every tensor to float32),
run it on the CPU in float32, and write tests/goldens/model_<name>.json:

  {"fixture", "sha256", "hf": {versions}, "config_overrides", "checks",
   "tokenizer", "greedy_method",
   "prompts": [{"text", "ids",
                "positions": [{"top": [[id, logit] x10], "lse": logsumexp} per prompt token],
                "greedy": [24 ids], "greedy_margins": [top1 - top2 at each step]}]}

"positions"[i] are the logits after feeding ids[0..=i] (teacher forcing).
Greedy is our own argmax loop that recomputes the whole sequence each step
(no KV cache); it is cross-checked against model.generate(do_sample=False).

  python tools/hf_goldens.py                      # all fixtures in tests/goldens/fixtures.json + the real model
  python tools/hf_goldens.py --only llama3-q4_k   # some
  python tools/hf_goldens.py --only gemma-3-270m  # the real model (models/gemma-3-270m-q4_k_m.gguf)

Where HF's GGUF loader does not read something the GGUF carries, the config is
patched and the patch recorded under "config_overrides" (and checked):
  * llama3: HF ignores rope_freqs.weight; rope_parameters is set to rope_type
    "llama3" with the generator's parameters, and HF's inverse frequencies are
    checked against base^(-2i/d) / rope_freqs[i].
  * qwen3: HF's GGUF config map reads no head_dim (key_length) and, without a
    qwen3.vocab_size key, no vocabulary size; both are set from the file.
  * smollm3: HF's GGUF loader has no smollm3 (transformers 5.24 GGUF_CONFIG_MAPPING);
    the model is built as SmolLM3ForCausalLM from a SmolLM3Config holding the file's
    metadata (no_rope_layer_interval left at HF's default 4, llama.cpp's fixed step) and
    gguf-py's dequantization of every tensor, Q/K un-permuted; recorded under
    "config_overrides" as "hf_gguf_loader".
  * granite: likewise no granite in HF's GGUF loader: GraniteForCausalLM from a
    GraniteConfig with the file's metadata, its four multipliers from
    granite.embedding_scale / attention.scale / residual_scale / logit_scale.
  * phi3 (phi4 fixture): HF's GGUF loader reads no phi3.rope.dimension_count; Phi-4-mini's
    partial_rotary_factor is set to it over the head size (96 / 128), and HF's inv_freq is
    checked to have one entry per rotated pair.
  * phi3: HF's GGUF loader reads no LongRoPE (it ignores rope_factors_long/short.weight,
    phi3.rope.scaling.original_context_length and .attn_factor); rope_parameters is set to
    rope_type "longrope" with the file's two factor sets (f32 values), original context and
    attention factor. HF picks the short set for sequences up to the original context, as
    every golden prompt is (coco: a session of at most that many positions); checked: HF's
    inv_freq == base^(-2i/d) / rope_factors_short[i] and attention_scaling == attn_factor.
  * gemma3: HF's default query_pre_attn_scalar is 256; llama.cpp scales queries
    by 1/sqrt(head_dim) (key_length) for all Gemma 3 sizes but 27B, so it is
    set to head_dim.  (For the real 270M, head_dim is 256: no change.)
  * gemma2: HF's GGUF config map reads neither `gemma2.attn_logit_softcapping` nor
    `gemma2.final_logit_softcapping`; both are set from the file.  query_pre_attn_scalar
    (absent from GGUF, HF default 256) is set as llama.cpp takes it: dim / heads for the
    46-layer 27B, else head_dim (the fixture's head_dim is dim / heads: no choice).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

import gguf  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

import make_fixtures  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
TOP_K = 10
N_GREEDY = 24
DIGITS = 5  # logits are rounded to 1e-5

PROMPTS = [
    "The capital of France is Paris, and the capital of Germany is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
]

REAL = {
    "name": "gemma-3-270m",
    "path": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf",
    "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "prompts": [
        "The capital of France is",
        "Water boils at 100 degrees Celsius at sea level, but at the top of Mount Everest it boils at",
        "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    ],
    "greedy_prompt": "The capital of France is",
}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions() -> dict:
    return {p: md.version(p) for p in ("transformers", "torch", "gguf", "numpy", "tokenizers", "sentencepiece")}


# ---------------------------------------------------------------------------
# GGUF metadata


class Meta:
    def __init__(self, path: Path):
        self.reader = gguf.GGUFReader(str(path))
        self.arch = self.get("general.architecture")

    def get(self, key: str, default=None):
        f = self.reader.fields.get(key)
        return default if f is None else f.contents()

    def a(self, key: str, default=None):
        return self.get(f"{self.arch}.{key}", default)

    def tensor(self, name: str):
        for t in self.reader.tensors:
            if t.name == name:
                return t
        return None

    def add_bos(self) -> tuple[bool, str]:
        """Whether BOS is prepended, as llama.cpp decides it."""
        v = self.get("tokenizer.ggml.add_bos_token")
        if v is not None:
            return bool(v), "tokenizer.ggml.add_bos_token"
        model, pre = self.get("tokenizer.ggml.model"), self.get("tokenizer.ggml.pre")
        if model == "llama":
            return True, "no add_bos_token key; llama.cpp's SPM default is true"
        if model == "gpt2" and pre in ("llama3", "llama-v3", "llama-bpe"):
            return True, f"no add_bos_token key; llama.cpp sets add_bos for pre={pre}"
        return False, f"no add_bos_token key; llama.cpp default for model={model} pre={pre} is false"


# ---------------------------------------------------------------------------
# tokenization


class SourceTokenizer:
    """The tokenizer the fixture's vocabulary was taken from (see tools/vocab.py)."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "mistral-spm":
            from sentencepiece import SentencePieceProcessor

            import vocab

            self.sp = SentencePieceProcessor()
            self.sp.LoadFromFile(str(vocab.mistral_model_path()))
            self.source = "sentencepiece: mistral_common/data/tokenizer.model.v1 (add_dummy_prefix as in the model)"
        else:
            from tokenizers import Tokenizer

            import vocab

            p = vocab.npm_models_dir(kind) / "tokenizer.json"
            self.tk = Tokenizer.from_file(str(p))
            self.source = f"tokenizers: {p.relative_to(ROOT)}"

    def encode(self, text: str) -> list[int]:
        if self.kind == "mistral-spm":
            return list(self.sp.EncodeAsIds(text))
        return self.tk.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------
# model loading and checks


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """GGUF llama q/k rows -> HF rows (inverse of make_fixtures.permute_rows)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


HF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
    # phi3's fused tensors (HF Phi3 keeps them fused too)
    "attn_qkv.weight": "self_attn.qkv_proj.weight",
}
# LongRoPE factors live in HF's config (rope_parameters), not among the parameters.
CONFIG_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


def hf_name(meta: Meta, name: str) -> str | None:
    if name in CONFIG_TENSORS:
        return None
    if meta.arch == "phi3" and name.endswith("ffn_up.weight"):
        return f"model.layers.{name.split('.')[1]}.mlp.gate_up_proj.weight"
    if name in HF_NAMES:
        return HF_NAMES[name]
    if name.startswith("blk."):
        _, i, rest = name.split(".", 2)
        if meta.arch in ("gemma2", "gemma3"):
            extra = {
                "attn_norm.weight": "input_layernorm.weight",
                "post_attention_norm.weight": "post_attention_layernorm.weight",
                "ffn_norm.weight": "pre_feedforward_layernorm.weight",
                "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
            }
            if rest in extra:
                return f"model.layers.{i}.{extra[rest]}"
        elif rest == "ffn_norm.weight":
            return f"model.layers.{i}.post_attention_layernorm.weight"
        return f"model.layers.{i}.{HF_NAMES[rest]}"
    return None


def check_weights(meta: Meta, model) -> dict:
    """Every GGUF tensor, dequantized by gguf-py and mapped by hand, equals HF's parameter."""
    sd = model.state_dict()
    nh, nkv = meta.a("attention.head_count"), meta.a("attention.head_count_kv")
    checked, skipped = 0, []
    for t in meta.reader.tensors:
        name = hf_name(meta, t.name)
        if name is None:
            skipped.append(t.name)
            continue
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        permuted = meta.arch in ("llama", "smollm3", "granite")
        if permuted and t.name.endswith("attn_q.weight"):
            w = unpermute_rows(w, nh)
        if permuted and t.name.endswith("attn_k.weight"):
            w = unpermute_rows(w, nkv)
        if meta.arch in ("gemma2", "gemma3") and t.name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        hf = sd[name].detach().numpy()
        if hf.shape != w.shape or not np.array_equal(hf, w):
            raise AssertionError(f"{t.name} -> {name}: HF's tensor differs from the hand-mapped GGUF tensor")
        checked += 1
    if meta.tensor("output.weight") is None:
        if model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr():
            raise AssertionError("no output.weight but HF did not tie lm_head to embed_tokens")
    return {"tensors_equal_to_gguf": checked, "tensors_not_used_by_hf": skipped}


def load_by_hand(meta: Meta):
    """SmolLM3ForCausalLM / GraniteForCausalLM from the GGUF by hand: HF's GGUF loader knows
    neither architecture."""
    import transformers as tf

    if meta.tensor("rope_freqs.weight") is not None or meta.a("rope.scaling.type") is not None:
        raise SystemExit(f"{meta.arch} with RoPE scaling: not built here")
    rows = int(meta.tensor("token_embd.weight").shape[1])
    extra = {}
    if meta.arch == "granite":
        extra = dict(
            embedding_multiplier=float(meta.a("embedding_scale")),
            attention_multiplier=float(meta.a("attention.scale")),
            residual_multiplier=float(meta.a("residual_scale")),
            logits_scaling=float(meta.a("logit_scale")),
        )
    config_class, model_class = {
        "smollm3": (tf.SmolLM3Config, tf.SmolLM3ForCausalLM),
        "granite": (tf.GraniteConfig, tf.GraniteForCausalLM),
    }[meta.arch]
    config = config_class(
        vocab_size=rows,
        hidden_size=int(meta.a("embedding_length")),
        intermediate_size=int(meta.a("feed_forward_length")),
        num_hidden_layers=int(meta.a("block_count")),
        num_attention_heads=int(meta.a("attention.head_count")),
        num_key_value_heads=int(meta.a("attention.head_count_kv")),
        max_position_embeddings=int(meta.a("context_length")),
        rms_norm_eps=float(meta.a("attention.layer_norm_rms_epsilon")),
        rope_parameters={"rope_type": "default", "rope_theta": float(meta.a("rope.freq_base"))},
        tie_word_embeddings=meta.tensor("output.weight") is None,
        bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_token_id=meta.get("tokenizer.ggml.eos_token_id"),
        pad_token_id=meta.get("tokenizer.ggml.padding_token_id"),
        **extra,
    )
    torch.manual_seed(0)
    model = model_class(config).to(torch.float32)
    sd = model.state_dict()
    nh, nkv = config.num_attention_heads, config.num_key_value_heads
    with torch.no_grad():
        for t in meta.reader.tensors:
            w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            if t.name.endswith("attn_q.weight"):
                w = unpermute_rows(w, nh)
            if t.name.endswith("attn_k.weight"):
                w = unpermute_rows(w, nkv)
            sd[hf_name(meta, t.name)].copy_(torch.from_numpy(np.ascontiguousarray(w)))
    model.eval()
    why = f"HF cannot load a {meta.arch} GGUF"
    if meta.arch == "smollm3":
        why += (f"; no_rope_layer_interval stays at SmolLM3Config's default {config.no_rope_layer_interval} "
                "(no GGUF key; llama.cpp fixes n_no_rope_layer_step = 4)")
    else:
        why += f"; multipliers from the file: {extra}"
    overrides = {"hf_gguf_loader": {
        "from": f"transformers' GGUF loader (no {meta.arch} in GGUF_CONFIG_MAPPING)",
        "to": f"{model_class.__name__}({config_class.__name__}(file's metadata)) + gguf-py-dequantized tensors, "
              "Q/K un-permuted",
        "why": why,
    }}
    return model, overrides


def load(path: Path, meta: Meta, fam: dict | None):
    if meta.arch in ("smollm3", "granite"):
        return load_by_hand(meta)
    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    overrides = {}
    if meta.arch == "gemma3":
        hd = int(meta.a("attention.key_length"))
        if config.query_pre_attn_scalar != hd:
            overrides["query_pre_attn_scalar"] = {
                "from": config.query_pre_attn_scalar, "to": hd,
                "why": "llama.cpp scales queries by 1/sqrt(key_length) for Gemma 3 (all sizes but 27B); "
                       "HF's default (256) comes from the 270M/1B config.json, absent from GGUF",
            }
            config.query_pre_attn_scalar = hd
    if meta.arch == "gemma2":
        hd = int(meta.a("attention.key_length"))
        dim, nh, nl = int(meta.a("embedding_length")), int(meta.a("attention.head_count")), int(meta.a("block_count"))
        scalar = dim // nh if nl == 46 else hd
        fixes = [
            ("query_pre_attn_scalar", scalar,
             "absent from GGUF; llama.cpp scales Gemma 2 queries by 1/sqrt(dim / heads) for the 46-layer 27B, "
             "else 1/sqrt(key_length); HF's default 256 is the 2B/9B config.json's"),
            ("attn_logit_softcapping", float(meta.a("attn_logit_softcapping")),
             "gemma2.attn_logit_softcapping is not in HF's GGUF config map"),
            ("final_logit_softcapping", float(meta.a("final_logit_softcapping")),
             "gemma2.final_logit_softcapping is not in HF's GGUF config map"),
        ]
        for attr, want, why in fixes:
            if getattr(config, attr) != want:
                overrides[attr] = {"from": getattr(config, attr), "to": want, "why": why}
                setattr(config, attr, want)
    if meta.arch == "qwen3":
        # HF's GGUF config map for qwen3 (transformers 5.24 GGUF_CONFIG_MAPPING) reads neither
        # `qwen3.attention.key_length` nor, when the key is absent (llama.cpp's converter writes
        # none), a vocabulary size: take both from the file, as llama.cpp does.
        hd = int(meta.a("attention.key_length"))
        rows = int(meta.tensor("token_embd.weight").shape[1])
        for attr, want, why in [
            ("head_dim", hd, "qwen3.attention.key_length is not in HF's GGUF config map"),
            ("vocab_size", rows, "no qwen3.vocab_size key; the vocabulary is token_embd.weight's rows"),
        ]:
            if getattr(config, attr) != want:
                overrides[attr] = {"from": getattr(config, attr), "to": want, "why": why}
                setattr(config, attr, want)
    if meta.arch == "phi3":
        # Phi3Config's defaults (vocab 32064, pad 32000) are the real Phi-3 vocabulary's; the
        # file says what this one is: token_embd's rows, and no padding token id.
        rows = int(meta.tensor("token_embd.weight").shape[1])
        pad = meta.get("tokenizer.ggml.padding_token_id")
        for attr, want, why in [
            ("vocab_size", rows, "no phi3.vocab_size key; the vocabulary is token_embd.weight's rows"),
            ("pad_token_id", pad, "tokenizer.ggml.padding_token_id (absent: none); Phi3Config's default is 32000"),
        ]:
            if getattr(config, attr) != want:
                overrides[attr] = {"from": getattr(config, attr), "to": want, "why": why}
                setattr(config, attr, want)
    if meta.tensor("rope_factors_long.weight") is not None:
        f32 = lambda n: [float(x) for x in np.asarray(meta.tensor(n).data, dtype=np.float32)]  # noqa: E731
        new = {
            "rope_type": "longrope",
            "rope_theta": float(meta.a("rope.freq_base")),
            "original_max_position_embeddings": int(meta.a("rope.scaling.original_context_length")),
            "attention_factor": float(np.float32(meta.a("rope.scaling.attn_factor"))),
            "short_factor": f32("rope_factors_short.weight"),
            "long_factor": f32("rope_factors_long.weight"),
        }
        overrides["rope_parameters"] = {
            "from": dict(config.rope_parameters),
            "to": {k: v for k, v in new.items() if k not in ("short_factor", "long_factor")},
            "short_factor/long_factor": "rope_factors_short.weight / rope_factors_long.weight as float32",
            "why": "HF's GGUF loader ignores LongRoPE's factor tensors, original context and attention factor",
        }
        # Phi-4-mini rotates part of each head: HF's GGUF config map reads no
        # phi3.rope.dimension_count, and HF 5.x keeps the fraction in rope_parameters.
        head = int(meta.a("embedding_length")) // int(meta.a("attention.head_count"))
        rotated = int(meta.a("rope.dimension_count") or head)
        if rotated != head:
            new["partial_rotary_factor"] = rotated / head
            overrides["partial_rotary_factor"] = {
                "from": 1.0, "to": rotated / head,
                "why": "phi3.rope.dimension_count / head size, not in HF's GGUF config map"}
        config.rope_parameters = new
        # Phi3Config also keeps the original context at the top level (default 4096) and
        # copies it into rope_parameters when it standardizes them: set both.
        orig = new["original_max_position_embeddings"]
        overrides["original_max_position_embeddings"] = {
            "from": config.original_max_position_embeddings, "to": orig,
            "why": "phi3.rope.scaling.original_context_length, not in HF's GGUF config map"}
        config.original_max_position_embeddings = orig
    rope_freqs = meta.tensor("rope_freqs.weight")
    if rope_freqs is not None:
        if not fam or not fam.get("llama3_rope"):
            raise SystemExit(f"{path.name} has rope_freqs.weight but no known llama3 rope parameters")
        p = dict(fam["llama3_rope"])
        new = {"rope_type": "llama3", "rope_theta": float(meta.a("rope.freq_base")), **p}
        overrides["rope_parameters"] = {
            "from": dict(config.rope_parameters), "to": new,
            "why": "HF's GGUF loader ignores rope_freqs.weight (llama.cpp's form of Llama-3 RoPE scaling)",
        }
        config.rope_parameters = new
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, config=config, dtype=torch.float32
    )
    model.eval()
    return model, overrides


def rope_inv_freq(model, layer_type: str | None = None) -> torch.Tensor:
    r = model.model.rotary_emb
    return getattr(r, f"{layer_type}_inv_freq") if layer_type else r.inv_freq


def arch_checks(meta: Meta, model) -> dict:
    c = model.config
    out: dict = {"model_class": type(model).__name__}
    hd = int(meta.a("attention.key_length") or meta.a("embedding_length") // meta.a("attention.head_count"))
    out["tied_embeddings"] = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    if meta.arch == "gemma3":
        scal = {float(l.self_attn.scaling) for l in model.model.layers}
        assert scal == {hd ** -0.5}, scal
        out["query_scale"] = hd ** -0.5
        out["layer_types"] = list(c.layer_types)
        out["sliding_window"] = c.sliding_window
        assert c.sliding_window == meta.a("attention.sliding_window")
        thetas = {k: v["rope_theta"] for k, v in c.rope_parameters.items()}
        out["rope_theta"] = thetas
        assert thetas["full_attention"] == meta.a("rope.freq_base")
        for lt, theta in thetas.items():
            want = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
            np.testing.assert_allclose(rope_inv_freq(model, lt).numpy(), want, rtol=1e-6)
        out["embed_scale"] = float(model.model.embed_tokens.embed_scale)
        assert abs(out["embed_scale"] - math.sqrt(meta.a("embedding_length"))) < 1e-4
        out["hidden_activation"] = c.hidden_activation
        out["final_logit_softcapping"] = c.final_logit_softcapping
        out["attn_logit_softcapping"] = c.attn_logit_softcapping
    elif meta.arch == "gemma2":
        scal = {float(l.self_attn.scaling) for l in model.model.layers}
        assert scal == {hd ** -0.5}, scal
        out["query_scale"] = hd ** -0.5
        out["layer_types"] = list(c.layer_types)
        assert c.layer_types == ["sliding_attention" if i % 2 == 0 else "full_attention"
                                 for i in range(c.num_hidden_layers)], c.layer_types
        out["sliding_window"] = c.sliding_window
        assert c.sliding_window == meta.a("attention.sliding_window")
        base = float(meta.a("rope.freq_base", 10000.0))
        out["rope_theta"] = c.rope_parameters["rope_theta"]
        assert out["rope_theta"] == base, (out["rope_theta"], base)
        want = 1.0 / (base ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        np.testing.assert_allclose(rope_inv_freq(model).numpy(), want, rtol=1e-6)
        out["embed_scale"] = float(math.sqrt(c.hidden_size))
        out["hidden_activation"] = c.hidden_activation
        out["attn_implementation"] = c._attn_implementation
        out["final_logit_softcapping"] = c.final_logit_softcapping
        out["attn_logit_softcapping"] = c.attn_logit_softcapping
        assert c.final_logit_softcapping == meta.a("final_logit_softcapping")
        assert c.attn_logit_softcapping == meta.a("attn_logit_softcapping")
        assert {l.self_attn.attn_logit_softcapping for l in model.model.layers} == {c.attn_logit_softcapping}
        attn = model.model.layers[0].self_attn
        assert not hasattr(attn, "q_norm"), "Gemma 2 has no per-head Q/K norms"
    else:
        base = float(meta.a("rope.freq_base"))
        inv = rope_inv_freq(model).numpy().astype(np.float64)
        # the rotated dimensions: the head, or fewer (Phi-4-mini's partial rotation)
        rd = int(meta.a("rope.dimension_count") or hd)
        want = 1.0 / (base ** (np.arange(0, rd, 2, dtype=np.float64) / rd))
        if rd != hd:
            out["rotated_dimensions"] = rd
            out["partial_rotary_factor"] = c.rope_parameters["partial_rotary_factor"]
        rf = meta.tensor("rope_freqs.weight")
        if rf is not None:
            want = want / np.asarray(rf.data, dtype=np.float64)
            out["rope_freqs"] = "inv_freq == base^(-2i/d) / rope_freqs.weight[i] (checked)"
        short = meta.tensor("rope_factors_short.weight")
        if short is not None:
            want = want / np.asarray(short.data, dtype=np.float64)
            out["rope_factors"] = ("inv_freq == base^(-2i/d) / rope_factors_short.weight[i] (checked): the short "
                                   "set, which HF uses for sequences up to original_max_position_embeddings")
            scaling = float(model.model.rotary_emb.attention_scaling)
            assert abs(scaling - float(meta.a("rope.scaling.attn_factor"))) < 1e-6, scaling
            out["rope_attention_scaling"] = scaling
            out["original_max_position_embeddings"] = c.rope_parameters["original_max_position_embeddings"]
            out["sliding_window"] = getattr(c, "sliding_window", None)
        np.testing.assert_allclose(inv, want, rtol=1e-6)
        out["rope_theta"] = base
        out["query_scale"] = float(model.model.layers[0].self_attn.scaling)
        want_scale = float(meta.a("attention.scale")) if meta.arch == "granite" else hd ** -0.5
        assert abs(out["query_scale"] - want_scale) < 1e-7
        out["hidden_act"] = c.hidden_act
        if meta.arch == "qwen2":
            assert model.model.layers[0].self_attn.q_proj.bias is not None
        if meta.arch == "qwen3":
            attn = model.model.layers[0].self_attn
            assert attn.q_proj.bias is None and attn.head_dim == hd
            out["head_dim"] = attn.head_dim
            out["qk_norm"] = f"{type(attn.q_norm).__name__} over head_dim {attn.q_norm.weight.numel()}, eps {attn.q_norm.variance_epsilon}"
            assert attn.q_norm.weight.numel() == hd and attn.k_norm.weight.numel() == hd
        if meta.arch == "smollm3":
            use_rope = [int(l.self_attn.use_rope) for l in model.model.layers]
            assert use_rope == [int((i + 1) % 4 != 0) for i in range(len(use_rope))], use_rope
            assert 0 in use_rope, "no NoPE layer: the fixture would not show the feature"
            out["no_rope_layers"] = use_rope
            out["layer_types"] = list(c.layer_types)
            assert set(c.layer_types) == {"full_attention"}
    if meta.arch == "granite":
        out["embedding_multiplier"] = float(model.model.embedding_multiplier)
        out["residual_multiplier"] = float(model.model.layers[0].residual_multiplier)
        out["logits_scaling"] = float(c.logits_scaling)
        assert out["embedding_multiplier"] == np.float32(meta.a("embedding_scale"))
        assert out["residual_multiplier"] == np.float32(meta.a("residual_scale"))
        assert out["logits_scaling"] == np.float32(meta.a("logit_scale"))
    out["rms_norm_eps"] = c.rms_norm_eps
    return out


# ---------------------------------------------------------------------------
# oracle runs


@torch.no_grad()
def logits_of(model, ids: list[int]) -> torch.Tensor:
    return model(torch.tensor([ids])).logits[0].float()


def positions(logits: torch.Tensor) -> list[dict]:
    lse = torch.logsumexp(logits.double(), dim=-1)
    top = torch.topk(logits, TOP_K, dim=-1)
    return [
        {"top": [[int(i), round(float(v), DIGITS)] for i, v in zip(top.indices[p], top.values[p])],
         "lse": round(float(lse[p]), DIGITS)}
        for p in range(logits.shape[0])
    ]


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    seq, margins = list(ids), []
    for _ in range(n):
        last = logits_of(model, seq)[-1]
        v, i = torch.topk(last, 2)
        margins.append(round(float(v[0] - v[1]), DIGITS))
        seq.append(int(i[0]))
    return seq[len(ids):], margins


@torch.no_grad()
def generate_ids(model, ids: list[int], n: int) -> list[int]:
    # EOS must neither stop generation nor be suppressed (min_new_tokens would mask it):
    # the argmax loop treats it as an ordinary token.
    saved = model.generation_config.eos_token_id, model.config.eos_token_id
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    try:
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=False, max_new_tokens=n, pad_token_id=0)
    finally:
        model.generation_config.eos_token_id, model.config.eos_token_id = saved
    return out[0, len(ids):].tolist()


@torch.no_grad()
def sensitivity(meta: Meta, model, fam: dict | None, ids: list[int]) -> dict:
    """How much the patched details move the logits (so a test can tell them apart)."""
    base = logits_of(model, ids)
    out = {}
    if meta.tensor("rope_freqs.weight") is not None:
        r = model.model.rotary_emb
        saved = r.inv_freq.clone()
        hd = saved.numel() * 2
        theta = float(meta.a("rope.freq_base"))
        r.inv_freq.copy_(1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float) / hd)))
        out["max_abs_logit_change_without_llama3_rope_scaling"] = float((logits_of(model, ids) - base).abs().max())
        r.inv_freq.copy_(saved)
    if meta.arch == "qwen3":
        # Without the per-head Q/K norms (what a qwen2-style forward would run).
        layers = model.model.layers
        saved = [(l.self_attn.q_norm, l.self_attn.k_norm) for l in layers]
        for l in layers:
            l.self_attn.q_norm, l.self_attn.k_norm = torch.nn.Identity(), torch.nn.Identity()
        out["max_abs_logit_change_without_qk_norm"] = float((logits_of(model, ids) - base).abs().max())
        for l, (qn, kn) in zip(layers, saved):
            l.self_attn.q_norm, l.self_attn.k_norm = qn, kn
    if meta.arch == "granite":
        # Each multiplier left out (llama's value instead), one at a time.
        m, layers = model.model, model.model.layers
        hd = layers[0].self_attn.head_dim
        for what, get, put, plain in [
            ("embedding_multiplier", lambda: m.embedding_multiplier,
             lambda v: setattr(m, "embedding_multiplier", v), 1.0),
            ("attention_multiplier", lambda: layers[0].self_attn.scaling,
             lambda v: [setattr(l.self_attn, "scaling", v) for l in layers], hd ** -0.5),
            ("residual_multiplier", lambda: layers[0].residual_multiplier,
             lambda v: [setattr(l, "residual_multiplier", v) for l in layers], 1.0),
            ("logits_scaling", lambda: model.config.logits_scaling,
             lambda v: setattr(model.config, "logits_scaling", v), 1.0),
        ]:
            saved = get()
            put(plain)
            out[f"max_abs_logit_change_without_{what}"] = float((logits_of(model, ids) - base).abs().max())
            put(saved)
        assert float((logits_of(model, ids) - base).abs().max()) == 0.0
    if meta.arch == "smollm3":
        # RoPE on the NoPE layers too (what a plain llama forward would run).
        layers = model.model.layers
        saved = [l.self_attn.use_rope for l in layers]
        for l in layers:
            l.self_attn.use_rope = 1
        out["max_abs_logit_change_with_rope_on_nope_layers"] = float((logits_of(model, ids) - base).abs().max())
        for l, u in zip(layers, saved):
            l.self_attn.use_rope = u
    if meta.tensor("rope_factors_long.weight") is not None:
        # The long factor set in place of the short one, and no attention factor: what a forward
        # that took the wrong set, or dropped the factor, would give.
        r = model.model.rotary_emb
        saved_inv, saved_scaling = r.inv_freq.clone(), r.attention_scaling
        long = torch.tensor(np.asarray(meta.tensor("rope_factors_long.weight").data), dtype=torch.float32)
        short = torch.tensor(np.asarray(meta.tensor("rope_factors_short.weight").data), dtype=torch.float32)
        r.inv_freq.copy_(saved_inv * short / long)
        r.original_inv_freq = r.inv_freq.clone()
        out["max_abs_logit_change_with_long_factors"] = float((logits_of(model, ids) - base).abs().max())
        r.inv_freq.copy_(saved_inv)
        r.original_inv_freq = saved_inv.clone()
        r.attention_scaling = 1.0
        out["max_abs_logit_change_without_attention_factor"] = float((logits_of(model, ids) - base).abs().max())
        r.attention_scaling = saved_scaling
        assert float((logits_of(model, ids) - base).abs().max()) == 0.0
    if meta.arch == "gemma2":
        # Without each soft-cap, without the sliding window, and with HF's default query scale.
        layers = model.model.layers
        cap = model.config.attn_logit_softcapping
        for l in layers:
            l.self_attn.attn_logit_softcapping = None
        out["max_abs_logit_change_without_attn_softcap"] = float((logits_of(model, ids) - base).abs().max())
        for l in layers:
            l.self_attn.attn_logit_softcapping = cap
        cap = model.config.final_logit_softcapping
        model.config.final_logit_softcapping = None
        out["max_abs_logit_change_without_final_softcap"] = float((logits_of(model, ids) - base).abs().max())
        model.config.final_logit_softcapping = cap
        saved = [l.self_attn.scaling for l in layers]
        for l in layers:
            l.self_attn.scaling = 256 ** -0.5
        out["max_abs_logit_change_with_hf_default_query_scale"] = float((logits_of(model, ids) - base).abs().max())
        for l, sc in zip(layers, saved):
            l.self_attn.scaling = sc
        sw = model.config.sliding_window
        model.config.sliding_window = 10 ** 6
        d = (logits_of(model, ids) - base).abs().max(dim=-1).values
        model.config.sliding_window = sw
        out["sliding_window_effect"] = {
            "max_abs_logit_change_without_window_first_positions": float(d[:sw].max()),
            "max_abs_logit_change_without_window_later_positions": float(d[sw:].max()) if len(ids) > sw else None,
        }
        assert logits_of(model, ids).equal(base), "the patches were not undone"
    if meta.arch == "gemma3":
        layers = model.model.layers
        saved = [l.self_attn.scaling for l in layers]
        for l in layers:
            l.self_attn.scaling = 256 ** -0.5
        if saved[0] != 256 ** -0.5:
            out["max_abs_logit_change_with_hf_default_query_scale"] = float((logits_of(model, ids) - base).abs().max())
        for l, s in zip(layers, saved):
            l.self_attn.scaling = s
        sw = model.config.sliding_window
        model.config.sliding_window = 10 ** 6
        d = (logits_of(model, ids) - base).abs().max(dim=-1).values
        model.config.sliding_window = sw
        out["sliding_window_effect"] = {
            "max_abs_logit_change_without_window_first_positions": float(d[:sw].max()),
            "max_abs_logit_change_without_window_later_positions": float(d[sw:].max()) if len(ids) > sw else None,
        }
    return out


def hf_tokenizer_ids(path: Path, texts: list[str]) -> tuple[list[list[int]] | None, str]:
    try:
        tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as e:  # noqa: BLE001
        return None, f"HF tokenizer failed to load: {type(e).__name__}: {e}"
    return [tok(t, add_special_tokens=False).input_ids for t in texts], type(tok).__name__


def run_one(name: str, path: Path, sha: str, fam: dict | None, prompts: list[str], greedy_for: list[str],
            hf_tok_cache: dict) -> dict:
    t0 = time.perf_counter()
    meta = Meta(path)
    model, overrides = load(path, meta, fam)
    t_load = time.perf_counter() - t0
    checks = {"architecture": arch_checks(meta, model), "weights": check_weights(meta, model)}

    add_bos, bos_why = meta.add_bos()
    bos = meta.get("tokenizer.ggml.bos_token_id")
    tok_info: dict = {"add_bos": add_bos, "add_bos_reason": bos_why, "bos_id": bos}
    vocab_kind = fam["vocab"] if fam else None
    if vocab_kind:
        src = SourceTokenizer(vocab_kind)
        raw = [src.encode(t) for t in prompts]
        tok_info["source"] = src.source
        key = (vocab_kind, meta.arch)
        if key not in hf_tok_cache:
            hf_tok_cache[key] = hf_tokenizer_ids(path, prompts)
        hf_ids, hf_cls = hf_tok_cache[key]
        tok_info["hf_gguf_tokenizer"] = hf_cls
        tok_info["hf_gguf_tokenizer_agrees"] = None if hf_ids is None else hf_ids == raw
        if hf_ids is not None and hf_ids != raw:
            tok_info["hf_gguf_tokenizer_ids"] = hf_ids
    else:
        hf_ids, hf_cls = hf_tokenizer_ids(path, prompts)
        if hf_ids is None:
            raise SystemExit(hf_cls)
        raw = hf_ids
        tok_info["source"] = f"HF AutoTokenizer from the GGUF ({hf_cls}), add_special_tokens=False, BOS added per metadata"
    all_ids = [([bos] if add_bos else []) + r for r in raw]

    out_prompts = []
    sens = None
    for text, ids in zip(prompts, all_ids):
        entry: dict = {"text": text, "ids": ids, "positions": positions(logits_of(model, ids))}
        if text in greedy_for:
            g, m = greedy(model, ids, N_GREEDY)
            gen = generate_ids(model, ids, N_GREEDY)
            entry["greedy"] = g
            entry["greedy_margins"] = m
            entry["generate_agrees"] = gen == g
        out_prompts.append(entry)
        if sens is None:
            sens = sensitivity(meta, model, fam, ids)
    checks["sensitivity"] = sens
    dt = time.perf_counter() - t0
    golden = {
        "fixture": name,
        "file": str(path.relative_to(ROOT)),
        "sha256": sha,
        "hf": {**versions(), "dtype": "float32", "device": "cpu"},
        "config_overrides": overrides,
        "checks": checks,
        "tokenizer": tok_info,
        "greedy_method": f"argmax loop, {N_GREEDY} steps, whole sequence recomputed each step (no KV cache), "
                         "EOS treated as an ordinary token (no stop); generate_agrees: HF generate(do_sample=False, "
                         "EOS stop disabled, KV cache) gave the same ids (false only after a near-tie margin)",
        "logit_rounding": f"{DIGITS} decimals",
        "prompts": out_prompts,
    }
    print(f"{name}: load {t_load:.1f} s, total {dt:.1f} s", flush=True)
    return golden


def compact_dump(golden: dict) -> str:
    head = {k: v for k, v in golden.items() if k != "prompts"}
    lines = ["{"]
    for k, v in head.items():
        lines.append(f" {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))},")
    lines.append(' "prompts": [')
    for pi, p in enumerate(golden["prompts"]):
        lines.append("  {")
        keys = [k for k in p if k != "positions"]
        for k in keys:
            lines.append(f"   {json.dumps(k)}: {json.dumps(p[k], separators=(',', ':'))},")
        lines.append('   "positions": [')
        for i, pos in enumerate(p["positions"]):
            comma = "," if i + 1 < len(p["positions"]) else ""
            lines.append("    " + json.dumps(pos, separators=(",", ":")) + comma)
        lines.append("   ]")
        lines.append("  }" + ("," if pi + 1 < len(golden["prompts"]) else ""))
    lines.append(" ]")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == json.loads(json.dumps(golden))
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", default=str(ROOT / "tests" / "fixtures"))
    ap.add_argument("--only", nargs="+", metavar="NAME")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    manifest = json.loads((GOLDENS / "fixtures.json").read_text())
    fams = manifest["generator"]["families"]
    names = list(manifest["fixtures"]) + [REAL["name"]]
    wanted = [n.removesuffix(".gguf") for n in args.only] if args.only else names
    for n in wanted:
        if n not in names:
            raise SystemExit(f"unknown: {n}")

    hf_tok_cache: dict = {}
    t_all = time.perf_counter()
    for n in wanted:
        if n == REAL["name"]:
            path, want, fam = REAL["path"], REAL["sha256"], None
            prompts, greedy_for = REAL["prompts"], [REAL["greedy_prompt"]]
        else:
            e = manifest["fixtures"][n]
            path, want, fam = Path(args.fixtures) / f"{n}.gguf", e["sha256"], fams[e["family"]]
            prompts, greedy_for = PROMPTS, PROMPTS
        if not path.exists():
            raise SystemExit(f"{path} missing: run tools/make_fixtures.py (or setup for the real model)")
        got = sha256_file(path)
        if got != want:
            raise SystemExit(f"{path}: sha256 {got} != {want}")
        golden = run_one(n, path, want, fam, prompts, greedy_for, hf_tok_cache)
        out = GOLDENS / f"model_{n}.json"
        out.write_text(compact_dump(golden))
        size = out.stat().st_size
        print(f"  wrote {out.relative_to(ROOT)} ({size} bytes)", flush=True)
        if size > 60_000:
            print(f"  warning: {out.name} is over 60 KB", file=sys.stderr)
    print(f"total {time.perf_counter() - t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
