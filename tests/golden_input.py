"""The input of the ggml golden-bytes test (test_quants.py), shared with the script that makes
the digests from llama.cpp's own quantizers (tests/data/golden_quants.py): numpy only."""
from __future__ import annotations

import numpy as np


def golden_input() -> np.ndarray:
    """[64, 4096] float32 made with integer arithmetic and exact float ops only, so it is the
    same on every platform and numpy version: a splitmix64 hash, Irwin-Hall sums (near-normal),
    and rows that are heavy-tailed, one-signed, sparse, zero, constant, 2^-100 tiny, 2^100 huge,
    and on a 1/8 grid (rounding ties)."""
    rows, n = 64, 4096
    z = np.arange(rows * n, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    m16 = np.uint64(0xFFFF)
    irwin_hall = sum(((z >> np.uint64(s)) & m16).astype(np.int64) for s in (0, 16, 32, 48)) - 2 * 65535
    x = (irwin_hall.astype(np.float32) * np.float32(2.0 ** -16)).reshape(rows, n)
    exps = ((z >> np.uint64(40)) % np.uint64(13)).astype(np.int32).reshape(rows, n) - 6
    u = ((z & np.uint64(0xFFFFFF)).astype(np.float32) * np.float32(2.0 ** -24)).reshape(rows, n)
    x[32:40] = np.ldexp(x[32:40], exps[32:40])
    x[40:44] = u[40:44] + np.float32(0.5)
    x[44:48] = -(u[44:48] + np.float32(0.5))
    x[48:52] = np.where(u[48:52] < 0.9, np.float32(0), x[48:52])
    x[52] = 0
    x[53] = 0.375
    x[54] = -3
    x[55, ::7] = 1
    x[56:60] = np.ldexp(x[56:60], -100)
    x[60:62] = np.ldexp(x[60:62], 100)
    x[62:64] = np.ldexp(np.trunc(np.ldexp(x[62:64], 2)), -3)
    return x.astype(np.float32)
