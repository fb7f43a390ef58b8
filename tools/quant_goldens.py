#!/usr/bin/env python3
"""Known-answer vectors for coco's CPU (de)quantizers, from gguf-py's ``gguf.quants``.

Writes ``tests/goldens/quant_<type>.json`` for every type coco reads:

  {"type": "Q5_0", "n": 64,
   "input": [...],      # f32 values quantized by gguf-py (absent for the K-quants)
   "bytes": "hex...",   # the packed blocks
   "dequant": [...]}    # gguf.quants.dequantize(bytes)

gguf-py can quantize F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1; ``tests/kernels_matmul.rs``
checks that coco's quantizer reproduces those bytes exactly. It cannot quantize the K-quants
(Q2_K … Q6_K) or IQ4_NL/IQ4_XS, so their blocks are random bytes with tame f16 scales (every
byte pattern is a valid block otherwise), and only the dequantization is compared.

Deterministic (seeded); run ``python tools/quant_goldens.py`` from the repo root.
Needs ``pip install gguf numpy``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

OUT = Path(__file__).resolve().parent.parent / "tests" / "goldens"

# (type, elements); two blocks at least so block strides are exercised.
QUANTIZED = [
    (T.F32, 40),
    (T.F16, 40),
    (T.BF16, 40),
    (T.Q8_0, 96),
    (T.Q4_0, 96),
    (T.Q5_0, 96),
]
# Drawn after RANDOM_BLOCKS, so that adding them left the earlier goldens' bytes unchanged.
QUANTIZED_LATER = [(T.Q4_1, 96), (T.Q5_1, 96)]
# (type, blocks, byte offsets of the f16 scales in each block, bytes and elements per block).
RANDOM_BLOCKS = [
    (T.Q4_K, 2, (0, 2), 144, 256),
    (T.Q5_K, 2, (0, 2), 176, 256),
    (T.Q6_K, 2, (208,), 210, 256),
    (T.Q2_K, 3, (80, 82), 84, 256),
    (T.Q3_K, 3, (108,), 110, 256),
    (T.IQ4_XS, 3, (0,), 136, 256),
    (T.IQ4_NL, 5, (0,), 18, 32),
]


def inputs(rng: np.random.Generator, n: int) -> np.ndarray:
    x = rng.standard_normal(n).astype(np.float32)
    x[5] *= 20.0  # an outlier sets one block's scale
    x[33] = -abs(x[33]) * 30.0  # a negative extreme: Q4_0/Q5_0 map the signed max to level 0
    x[64:96] = 0.0 if n >= 96 else x[64:96]  # an all-zero block (d = 0)
    x[7] = 1e-6  # an f16 subnormal
    x[9] = 1.00390625  # halfway between two bf16 values: round-to-even
    return x


def floats(a: np.ndarray) -> list[float]:
    # float32 → Python float is exact, and json writes the shortest repr that round-trips.
    return [float(v) for v in np.asarray(a, dtype=np.float32).ravel()]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(20261130)
    for ty, n in QUANTIZED:
        quantized(rng, ty, n)
    for ty, blocks, scale_at, block_bytes, block_len in RANDOM_BLOCKS:
        raw = rng.integers(0, 256, size=(blocks, block_bytes), dtype=np.uint8)
        for at in scale_at:
            d = rng.uniform(0.001, 0.05, size=blocks).astype(np.float16)
            raw[:, at : at + 2] = d.view(np.uint8).reshape(blocks, 2)
        doc = {
            "type": ty.name,
            "n": blocks * block_len,
            "bytes": raw.tobytes().hex(),
            "dequant": floats(dequantize(raw.reshape(-1), ty)),
        }
        write(ty.name, doc)
    for ty, n in QUANTIZED_LATER:
        quantized(rng, ty, n)


def quantized(rng: np.random.Generator, ty: T, n: int) -> None:
    """Inputs quantized by gguf-py, its bytes and their dequantization."""
    x = inputs(rng, n)
    packed = quantize(x, ty)
    doc = {
        "type": ty.name,
        "n": n,
        "input": floats(x),
        "bytes": packed.tobytes().hex(),
        "dequant": floats(dequantize(packed, ty)),
    }
    write(ty.name, doc)


def write(name: str, doc: dict) -> None:
    path = OUT / f"quant_{name.lower()}.json"
    path.write_text(json.dumps(doc, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {path.relative_to(OUT.parent.parent)} ({doc['n']} elements)")


if __name__ == "__main__":
    main()
