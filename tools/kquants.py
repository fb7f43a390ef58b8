#!/usr/bin/env python3
"""Vectorized numpy packers for the ggml K-quant block formats Q4_K, Q5_K, Q6_K.

gguf-py can decode these types (``gguf.quants.dequantize``) but cannot encode
them, so the fixture generator uses this module.  The packers are simple and
deterministic (no search, unlike llama.cpp's ``make_qkx`` quantizers): every
sub-block range is covered without clipping, then each value is rounded to
the nearest level.  Quality is a little below llama.cpp's, which does not
matter for random-weight test fixtures.

Block layouts (QK_K = 256 weights per super-block), as in ggml-common.h:

  block_q4_K (144 B): d f16 | dmin f16 | scales[12] | qs[128]
      8 sub-blocks of 32; w = d*sc[j]*q - dmin*m[j], q in 0..15,
      sc/m are 6-bit, packed in scales[12] (see _pack_scale_min).
      qs[32*g + l]: low nibble = sub-block 2g element l,
                    high nibble = sub-block 2g+1 element l.
  block_q5_K (176 B): d f16 | dmin f16 | scales[12] | qh[32] | qs[128]
      like Q4_K with q in 0..31; bit j of qh[l] is bit 4 of sub-block j elem l.
  block_q6_K (210 B): ql[128] | qh[64] | scales[16] (int8) | d f16
      16 sub-blocks of 16; w = d*scales[j]*(q - 32), q in 0..63.
      Element e = 128*h + 32*s + l (h in 0..1, s in 0..3, l in 0..31):
        low 4 bits in ql[64*h + 32*(s & 1) + l], nibble (s >> 1),
        high 2 bits in qh[32*h + l], bits 2*s..2*s+1.

Usage:
  python tools/kquants.py --selftest     round-trip check through gguf-py
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

QK_K = 256
BLOCK_BYTES = {"Q4_K": 144, "Q5_K": 176, "Q6_K": 210}


def _f16_at_least(x: np.ndarray) -> np.ndarray:
    """Round float32 values to float16, rounding up where nearest-rounding went down.

    The super-block scale must not shrink when stored as f16, or the largest
    sub-block scale would no longer fit in its integer range.
    """
    h = x.astype(np.float16)
    low = h.astype(np.float32) < x
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    return h


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros(np.broadcast(a, b).shape, dtype=np.float32)
    np.divide(a, b, out=out, where=b != 0)
    return out


def _blocks(w: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    w = np.asarray(w, dtype=np.float32)
    if w.shape[-1] % QK_K != 0:
        raise ValueError(f"row length {w.shape[-1]} is not a multiple of {QK_K}")
    if not np.all(np.isfinite(w)):
        raise ValueError("non-finite weights")
    return w.reshape(-1, QK_K), w.shape


def _asymmetric(x: np.ndarray, levels: int):
    """Shared Q4_K/Q5_K math. x: (n, 8, 32). Returns d, dmin (f16), sc, m (uint8 0..63), q (uint8)."""
    lo = np.minimum(x.min(axis=-1), 0.0)  # (n, 8); the offset only ever subtracts
    hi = x.max(axis=-1)
    # Sub-block minimums: m[j] * dmin >= -lo[j] (rounded up so nothing falls below).
    dmin = _f16_at_least(-lo.min(axis=-1) / 63.0)  # (n,)
    dminf = dmin.astype(np.float32)[:, None]
    m = np.clip(np.ceil(_safe_div(-lo, dminf) - 1e-6), 0, 63)
    off = dminf * m  # actual offsets, >= -lo
    # Sub-block scales must span [-off, hi].
    need = np.maximum(hi + off, 0.0) / levels
    d = _f16_at_least(need.max(axis=-1) / 63.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.ceil(_safe_div(need, df) - 1e-6), 0, 63)
    step = (df * sc)[..., None]
    q = np.rint(_safe_div(x + off[..., None], step))
    q = np.clip(q, 0, levels).astype(np.uint8)
    return d, dmin, sc.astype(np.uint8), m.astype(np.uint8), q


def _pack_scale_min(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Pack 8 six-bit scales and 8 six-bit mins per block into 12 bytes (n, 12)."""
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 15) | ((m[:, 4:8] & 15) << 4)
    return out


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """q: (n, 8, 32) values 0..15 -> qs (n, 128)."""
    n = q.shape[0]
    pairs = q.reshape(n, 4, 2, 32)
    return (pairs[:, :, 0, :] | (pairs[:, :, 1, :] << 4)).reshape(n, 128)


def _f16_bytes(h: np.ndarray) -> np.ndarray:
    return h.astype("<f2").reshape(-1, 1).view(np.uint8)


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """float array (..., k*256) -> uint8 array (..., k*144) of block_q4_K."""
    blocks, shape = _blocks(w)
    d, dmin, sc, m, q = _asymmetric(blocks.reshape(-1, 8, 32), 15)
    out = np.concatenate([_f16_bytes(d), _f16_bytes(dmin), _pack_scale_min(sc, m), _pack_nibbles(q)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["Q4_K"])


def quantize_q5_k(w: np.ndarray) -> np.ndarray:
    """float array (..., k*256) -> uint8 array (..., k*176) of block_q5_K."""
    blocks, shape = _blocks(w)
    d, dmin, sc, m, q = _asymmetric(blocks.reshape(-1, 8, 32), 31)
    high = (q >> 4).astype(np.uint8)  # (n, 8, 32)
    qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
    for j in range(8):
        qh |= high[:, j, :] << j
    out = np.concatenate(
        [_f16_bytes(d), _f16_bytes(dmin), _pack_scale_min(sc, m), qh, _pack_nibbles(q & 15)], axis=1
    )
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["Q5_K"])


def quantize_q6_k(w: np.ndarray) -> np.ndarray:
    """float array (..., k*256) -> uint8 array (..., k*210) of block_q6_K."""
    blocks, shape = _blocks(w)
    n = blocks.shape[0]
    x = blocks.reshape(n, 16, 16)
    # Symmetric: levels -31..31 of the -32..31 range, so +amax and -amax both fit.
    need = np.abs(x).max(axis=-1) / 31.0  # (n, 16)
    d = _f16_at_least(need.max(axis=-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.ceil(_safe_div(need, df) - 1e-6), 0, 127)
    step = (df * sc)[..., None]
    q = np.clip(np.rint(_safe_div(x, step)), -32, 31).astype(np.int16) + 32
    q = q.astype(np.uint8).reshape(n, 2, 4, 32)  # [h, s, l]
    lo = q & 15
    ql = np.concatenate([lo[:, :, 0, :] | (lo[:, :, 2, :] << 4), lo[:, :, 1, :] | (lo[:, :, 3, :] << 4)], axis=2)
    ql = ql.reshape(n, 128)  # per half h: bytes 0..31 hold s=0|s=2, bytes 32..63 hold s=1|s=3
    hi = q >> 4
    qh = (hi[:, :, 0, :] | (hi[:, :, 1, :] << 2) | (hi[:, :, 2, :] << 4) | (hi[:, :, 3, :] << 6)).reshape(n, 64)
    scales = sc.astype(np.int8).view(np.uint8)
    out = np.concatenate([ql, qh, scales, _f16_bytes(d)], axis=1)
    return out.reshape(*shape[:-1], shape[-1] // QK_K * BLOCK_BYTES["Q6_K"])


QUANTIZERS = {"Q4_K": quantize_q4_k, "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k}


def quantize(w: np.ndarray, type_name: str) -> np.ndarray:
    return QUANTIZERS[type_name](w)


# ---------------------------------------------------------------------------
# scalar decoders, written from the block layouts with ggml's loop structure
# (one block at a time); the self-test checks them against gguf-py's decoder.


def _h(b: bytes) -> float:
    return float(np.frombuffer(b, dtype="<f2")[0])


def _scale_min_k4(j: int, s: bytes) -> tuple[int, int]:
    if j < 4:
        return s[j] & 63, s[j + 4] & 63
    return (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)


def decode_block_scalar(block: bytes, type_name: str) -> list[float]:
    y: list[float] = []
    if type_name in ("Q4_K", "Q5_K"):
        d, dmin, sc = _h(block[0:2]), _h(block[2:4]), block[4:16]
        qh = block[16:48] if type_name == "Q5_K" else None
        qs = block[48:176] if type_name == "Q5_K" else block[16:144]
        for j in range(4):  # 64 weights per step: two sub-blocks share 32 bytes of qs
            s1, m1 = _scale_min_k4(2 * j, sc)
            s2, m2 = _scale_min_k4(2 * j + 1, sc)
            q = qs[32 * j: 32 * j + 32]
            for half, (s_, m_) in enumerate(((s1, m1), (s2, m2))):
                for l in range(32):
                    v = (q[l] >> (4 * half)) & 15
                    if qh is not None and (qh[l] >> (2 * j + half)) & 1:
                        v += 16
                    y.append(d * s_ * v - dmin * m_)
        return y
    if type_name == "Q6_K":
        ql, qh, sc, d = block[0:128], block[128:192], np.frombuffer(block[192:208], np.int8), _h(block[208:210])
        for n in range(2):
            out = [0.0] * 128
            for l in range(32):
                a, b, h = ql[64 * n + l], ql[64 * n + l + 32], qh[32 * n + l]
                qv = ((a & 15) | ((h & 3) << 4), (b & 15) | (((h >> 2) & 3) << 4),
                      (a >> 4) | (((h >> 4) & 3) << 4), (b >> 4) | (((h >> 6) & 3) << 4))
                for k in range(4):
                    out[l + 32 * k] = d * int(sc[8 * n + l // 16 + 2 * k]) * (qv[k] - 32)
            y += out
        return y
    raise ValueError(type_name)


# ---------------------------------------------------------------------------
# self-test


def _selftest() -> int:
    import gguf
    from gguf.quants import dequantize

    gtype = {
        "Q4_K": gguf.GGMLQuantizationType.Q4_K,
        "Q5_K": gguf.GGMLQuantizationType.Q5_K,
        "Q6_K": gguf.GGMLQuantizationType.Q6_K,
    }
    # Bound on |error| relative to the block's value range (max - min), with slack
    # for the 6-bit/8-bit sub-block scale rounding (scales only round up).
    max_rel_err = {"Q4_K": 0.5 / 15 * 1.7, "Q5_K": 0.5 / 31 * 1.7, "Q6_K": 0.5 / 31 * 2.0 * 1.1}
    rmse_bound = {"Q4_K": 0.12, "Q5_K": 0.06, "Q6_K": 0.03}  # relative to rms of a N(0,1) matrix

    rng = np.random.default_rng(1234)
    cases = {
        "normal": rng.standard_normal((64, 512)).astype(np.float32),
        "outliers": (rng.standard_normal((16, 256)) * np.where(rng.random((16, 256)) < 0.01, 50, 1)).astype(
            np.float32
        ),
        "positive": (rng.random((8, 256)) + 0.5).astype(np.float32),
        "negative": -(rng.random((8, 256)) + 0.5).astype(np.float32),
        "zeros": np.zeros((2, 256), dtype=np.float32),
        "constant": np.full((2, 256), 0.375, dtype=np.float32),
        "tiny": (rng.standard_normal((4, 256)) * 1e-3).astype(np.float32),
        "sparse": np.where(rng.random((8, 256)) < 0.05, rng.standard_normal((8, 256)), 0).astype(np.float32),
        "mixed_scale": (rng.standard_normal((8, 256)) * np.repeat(10.0 ** rng.uniform(-2, 1, (8, 16)), 16, 1)).astype(
            np.float32
        ),
    }
    ok = True
    for name, fn in QUANTIZERS.items():
        for cname, w in cases.items():
            packed = fn(w)
            assert packed.dtype == np.uint8 and packed.shape == (w.shape[0], w.shape[1] // QK_K * BLOCK_BYTES[name])
            back = dequantize(packed, gtype[name])
            assert back.shape == w.shape, (back.shape, w.shape)
            blocks = w.reshape(-1, QK_K)
            err = np.abs(back.reshape(-1, QK_K) - blocks)
            if name == "Q6_K":
                span = 2 * np.abs(blocks.reshape(-1, 16, 16)).max(axis=-1)
                span = np.repeat(span, 16, axis=1)
            else:
                sub = blocks.reshape(-1, 8, 32)
                span = sub.max(-1) - np.minimum(sub.min(-1), 0)
                # scale rounding is relative to the super-block's largest sub-block scale
                span = np.maximum(span, (span.max(-1, keepdims=True)) / 63 * 15)
                span = np.repeat(span, 32, axis=1)
            worst = float((err - max_rel_err[name] * span).max())
            good = worst <= 1e-6 * max(1.0, float(np.abs(w).max()))
            line = f"{name} {cname:12s} max|err|={err.max():.3e}"
            if cname == "normal":
                rel = float(np.sqrt(np.mean((back - w) ** 2)) / np.sqrt(np.mean(w**2)))
                good = good and rel < rmse_bound[name]
                line += f" rel_rmse={rel:.4f}"
            if cname in ("zeros",):
                good = good and not err.any()
            print(("ok   " if good else "FAIL ") + line)
            ok &= good
        # independent scalar decoder on a few blocks
        packed = fn(cases["outliers"][:2])
        bb = BLOCK_BYTES[name]
        ref = dequantize(packed, gtype[name]).reshape(-1)
        flat = packed.reshape(-1).tobytes()
        mine = [v for i in range(len(flat) // bb) for v in decode_block_scalar(flat[i * bb:(i + 1) * bb], name)]
        same = np.allclose(np.array(mine, dtype=np.float32), ref, rtol=1e-6, atol=1e-6)
        print(("ok   " if same else "FAIL ") + f"{name} scalar decoder agrees with gguf-py on {len(flat) // bb} blocks")
        ok &= same
        # determinism
        w = cases["normal"]
        assert np.array_equal(fn(w), fn(w.copy()))
    # speed: a Llama-3 sized embedding (128256 x 256)
    big = np.random.default_rng(5).standard_normal((128256, 256), dtype=np.float32)
    for name, fn in QUANTIZERS.items():
        t = time.perf_counter()
        packed = fn(big)
        dt = time.perf_counter() - t
        back = dequantize(packed[:1024], gtype[name])
        rel = float(np.sqrt(np.mean((back - big[:1024]) ** 2)))
        print(f"ok   {name} 128256x256 packed in {dt:.2f} s, rel_rmse(first 1024 rows)={rel:.4f}")
        ok &= rel < rmse_bound[name]
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
