#!/usr/bin/env python3
"""Vectorized numpy packers for Q2_K, Q3_K, IQ4_NL and IQ4_XS, which gguf-py decodes
(``gguf.quants.dequantize``) but cannot encode. ``kquants.py`` holds Q4_K/Q5_K/Q6_K.

Like ``kquants.py`` the packers are simple and deterministic (no search, unlike llama.cpp's
quantizers): scales are rounded so that nothing is clipped, then each value goes to its
nearest level. They mirror coco's Rust test packers in ``src/reference/quant.rs``. Block
layouts (ggml-common.h):

  block_q2_K (84 B): scales[16] | qs[64] | d f16 | dmin f16
      16 sub-blocks of 16; w = d*(sc & 15)*q - dmin*(sc >> 4), q in 0..3; element
      e = 128*h + 32*s + l has q at bits 2*s of qs[32*h + l].
  block_q3_K (110 B): hmask[32] | qs[64] | scales[12] | d f16
      16 sub-blocks of 16; w = d*(sc - 32)*(q - 4), q in 0..7: low 2 bits as Q2_K, bit 2 at
      bit (4*h + s) of hmask[l]; 6-bit sc: low 4 bits nibble i//8 of byte i%8, top 2 bits
      bits 2*(i//4) of byte 8 + i%4.
  block_iq4_nl (18 B, 32 weights): d f16 | qs[16]; w = d*GRID[q], q in low nibble of qs[j]
      for element j, high nibble for j + 16.
  block_iq4_xs (136 B): d f16 | scales_h u16 | scales_l[4] | qs[128]
      8 sub-blocks of 32 as IQ4_NL; w = d*(ls - 32)*GRID[q], ls low 4 bits nibble ib%2 of
      scales_l[ib//2], top 2 bits bits 2*ib of scales_h.

Usage:
  python tools/more_quants.py --selftest     round-trip check through gguf-py
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from kquants import QK_K, _f16_at_least, _f16_bytes, _safe_div

BLOCK_BYTES = {"Q2_K": 84, "Q3_K": 110, "IQ4_NL": 18, "IQ4_XS": 136}
BLOCK_LEN = {"Q2_K": QK_K, "Q3_K": QK_K, "IQ4_NL": 32, "IQ4_XS": QK_K}
# llama.cpp's kvalues_iq4nl (gguf-py's IQ4_NL.kvalues).
GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)
_MIDPOINTS = (GRID[:-1] + GRID[1:]) / 2


def _blocks(w: np.ndarray, n: int) -> tuple[np.ndarray, tuple[int, ...]]:
    w = np.asarray(w, dtype=np.float32)
    if w.shape[-1] % n != 0:
        raise ValueError(f"row length {w.shape[-1]} is not a multiple of {n}")
    if not np.all(np.isfinite(w)):
        raise ValueError("non-finite weights")
    return w.reshape(-1, n), w.shape


def _two_bit_fields(u: np.ndarray) -> np.ndarray:
    """u: (n, 256) values 0..3 -> the 64 qs bytes of Q2_K/Q3_K (element 128h + 32s + l at
    bits 2s of qs[32h + l])."""
    u = u.reshape(-1, 2, 4, 32).astype(np.uint8)
    qs = u[:, :, 0] | (u[:, :, 1] << 2) | (u[:, :, 2] << 4) | (u[:, :, 3] << 6)
    return qs.reshape(-1, 64)


def _nearest_grid(t: np.ndarray) -> np.ndarray:
    """Index of the grid level nearest each value of t (in units of the block scale)."""
    return np.searchsorted(_MIDPOINTS, t).astype(np.uint8)


def _signed_extreme(x: np.ndarray) -> np.ndarray:
    i = np.abs(x).argmax(axis=-1)
    return np.take_along_axis(x, i[..., None], axis=-1)[..., 0]


def quantize_q2_k(w: np.ndarray) -> np.ndarray:
    blocks, shape = _blocks(w, QK_K)
    x = blocks.reshape(-1, 16, 16)
    lo = np.minimum(x.min(axis=-1), 0.0)
    hi = x.max(axis=-1)
    dmin = _f16_at_least(-lo.min(axis=-1) / 15.0)
    dminf = dmin.astype(np.float32)[:, None]
    m = np.clip(np.ceil(_safe_div(-lo, dminf) - 1e-6), 0, 15)
    off = dminf * m
    need = np.maximum(hi + off, 0.0) / 3.0
    d = _f16_at_least(need.max(axis=-1) / 15.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.ceil(_safe_div(need, df) - 1e-6), 0, 15)
    q = np.clip(np.rint(_safe_div(x + off[..., None], (df * sc)[..., None])), 0, 3)
    scales = (sc.astype(np.uint8) | (m.astype(np.uint8) << 4)).astype(np.uint8)
    out = np.concatenate([scales, _two_bit_fields(q.reshape(-1, QK_K)), _f16_bytes(d), _f16_bytes(dmin)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["Q2_K"])


def quantize_q3_k(w: np.ndarray) -> np.ndarray:
    blocks, shape = _blocks(w, QK_K)
    x = blocks.reshape(-1, 16, 16)
    need = np.abs(x).max(axis=-1) / 3.0  # levels -4..3; +-|x|max lands on +-3
    d = _f16_at_least(need.max(axis=-1) / 31.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.ceil(_safe_div(need, df) - 1e-6), 0, 31)
    q = np.clip(np.rint(_safe_div(x, (df * sc)[..., None])), -4, 3).astype(np.int16) + 4
    u = q.reshape(-1, QK_K).astype(np.uint8)
    high = (u >> 2).reshape(-1, 8, 32)  # chunk 4h + s, element l
    hmask = np.zeros((u.shape[0], 32), dtype=np.uint8)
    for c in range(8):
        hmask |= high[:, c, :] << c
    st = (sc + 32).astype(np.uint8)  # (n, 16)
    scales = np.empty((u.shape[0], 12), dtype=np.uint8)
    scales[:, 0:8] = (st[:, 0:8] & 15) | ((st[:, 8:16] & 15) << 4)
    scales[:, 8:12] = 0
    for k in range(4):
        scales[:, 8:12] |= ((st[:, 4 * k : 4 * k + 4] >> 4) & 3) << (2 * k)
    out = np.concatenate([hmask, _two_bit_fields(u & 3), scales, _f16_bytes(d)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["Q3_K"])


def _pack_iq4(q: np.ndarray) -> np.ndarray:
    """q: (n, k, 32) grid indices -> (n, 16k) bytes (element j low nibble, j + 16 high)."""
    pairs = q.reshape(q.shape[0], q.shape[1], 2, 16)
    return (pairs[:, :, 0] | (pairs[:, :, 1] << 4)).reshape(q.shape[0], -1).astype(np.uint8)


def quantize_iq4_nl(w: np.ndarray) -> np.ndarray:
    blocks, shape = _blocks(w, 32)
    d = (_signed_extreme(blocks) / -127.0).astype(np.float16)
    q = _nearest_grid(_safe_div(blocks, d.astype(np.float32)[:, None]))
    out = np.concatenate([_f16_bytes(d), _pack_iq4(q[:, None, :])], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // 32 * BLOCK_BYTES["IQ4_NL"])


def quantize_iq4_xs(w: np.ndarray) -> np.ndarray:
    blocks, shape = _blocks(w, QK_K)
    x = blocks.reshape(-1, 8, 32)
    local = _signed_extreme(x) / -127.0  # (n, 8)
    d = _f16_at_least(np.abs(local).max(axis=-1) / 31.0)
    df = d.astype(np.float32)[:, None]
    # Rounded away from zero, so each sub-block's extreme stays on the grid.
    ls = np.clip(np.ceil(_safe_div(np.abs(local), df) - 1e-6), 0, 31) * np.sign(local)
    unit = (df * ls)[..., None]
    q = _nearest_grid(_safe_div(x, unit))
    st = (ls + 32).astype(np.uint16)
    scales_l = ((st[:, 0::2] & 15) | ((st[:, 1::2] & 15) << 4)).astype(np.uint8)
    scales_h = np.zeros(st.shape[0], dtype=np.uint16)
    for ib in range(8):
        scales_h |= ((st[:, ib] >> 4) & 3) << (2 * ib)
    sh = scales_h.astype("<u2").reshape(-1, 1).view(np.uint8)
    out = np.concatenate([_f16_bytes(d), sh, scales_l, _pack_iq4(q)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["IQ4_XS"])


QUANTIZERS = {"Q2_K": quantize_q2_k, "Q3_K": quantize_q3_k, "IQ4_NL": quantize_iq4_nl, "IQ4_XS": quantize_iq4_xs}


def quantize(w: np.ndarray, type_name: str) -> np.ndarray:
    return QUANTIZERS[type_name](w)


def _selftest() -> int:
    import gguf
    from gguf.quants import dequantize

    # |error| bounds as a fraction of each super-block's (or IQ4_NL block's) |x|max, the
    # same reasoning as src/reference/quant.rs's round-trip test.
    bound = {"Q2_K": 1 / 1.4, "Q3_K": 1 / 3.5, "IQ4_NL": 1 / 8.5, "IQ4_XS": 1 / 8.5}
    rmse_bound = {"Q2_K": 0.45, "Q3_K": 0.25, "IQ4_NL": 0.12, "IQ4_XS": 0.15}
    rng = np.random.default_rng(4321)
    cases = {
        "normal": rng.standard_normal((64, 512)).astype(np.float32),
        "outliers": (rng.standard_normal((16, 256)) * np.where(rng.random((16, 256)) < 0.01, 50, 1)).astype(np.float32),
        "positive": (rng.random((8, 256)) + 0.5).astype(np.float32),
        "negative": -(rng.random((8, 256)) + 0.5).astype(np.float32),
        "zeros": np.zeros((2, 256), dtype=np.float32),
        "tiny": (rng.standard_normal((4, 256)) * 1e-3).astype(np.float32),
    }
    ok = True
    for name, fn in QUANTIZERS.items():
        ty = gguf.GGMLQuantizationType[name]
        n = BLOCK_LEN[name]
        for cname, w in cases.items():
            packed = fn(w)
            assert packed.shape == (w.shape[0], w.shape[1] // n * BLOCK_BYTES[name]), packed.shape
            back = dequantize(packed, ty)
            span = np.repeat(np.abs(w.reshape(-1, max(n, 32))).max(-1), max(n, 32))
            err = np.abs(back.reshape(-1) - w.reshape(-1))
            good = bool((err <= bound[name] * span + 1e-7).all())
            line = f"{name:6s} {cname:9s} max|err|={err.max():.3e}"
            if cname == "normal":
                rel = float(np.sqrt(np.mean((back - w) ** 2)) / np.sqrt(np.mean(w**2)))
                good = good and rel < rmse_bound[name]
                line += f" rel_rmse={rel:.4f}"
            if cname == "zeros":
                good = good and not err.any()
            print(("ok   " if good else "FAIL ") + line)
            ok &= good
        assert np.array_equal(fn(cases["normal"]), fn(cases["normal"].copy()))
    print("selftest:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--selftest", action="store_true", help="round-trip through gguf.quants.dequantize")
    args = ap.parse_args(argv)
    if args.selftest:
        return _selftest()
    ap.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
