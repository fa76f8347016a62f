"""SmolLM2-135M Q4_1's teacher-forced logits from the aarch64 build, run under qemu-aarch64 by
tests/aarch64_check.sh, against the x86 build's logits for the same tokens (which that script
writes first by running this file as a program with the x86 interpreter:
`python tests/test_aarch64_logits.py OUT.npy`).

The two builds run different kernels (aarch64: Neon / dotprod dot products in the scalar
reference's per-block order; x86: the block-sequential AVX2 / AVX-512 kernels), so their logits
are not bit-identical; they are held to the bound test_fidelity.py holds every ISA level to
against llama.cpp: mean KL over the positions at most KL_MAX, and a changed top-1 token only where
the x86 build's own top two are within TOP1_FLIP_GAP. A few tokens only: qemu is slow.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from conftest import model_file
from test_fidelity import KL_MAX, TOP1_FLIP_GAP, _kl_full

MODEL = "smollm2-135m-q4_1"
TEXT = "The quick brown fox jumps over the lazy dog, and then it runs into the forest."
N_TOKENS = 16
X86_LOGITS = os.environ.get("LOCALLLM_X86_LOGITS")


def teacher_forced_logits() -> np.ndarray:
    from localllm import LLM
    llm = LLM(str(model_file(MODEL)), n_threads=2, n_ctx=64)
    ids = llm.tokenize(TEXT)[:N_TOKENS]
    assert len(ids) == N_TOKENS
    return np.asarray(llm.logits(ids), dtype=np.float32)


@pytest.mark.skipif(not X86_LOGITS, reason="needs the x86 build's logits (LOCALLLM_X86_LOGITS; tests/aarch64_check.sh)")
def test_logits_match_the_x86_build() -> None:
    from localllm import _core
    ref = np.load(X86_LOGITS)
    ours = teacher_forced_logits()
    assert ours.shape == ref.shape and np.isfinite(ours).all()
    kl = np.array([_kl_full(ref[i], ours[i]) for i in range(len(ref))])
    flips = np.nonzero(ours.argmax(axis=1) != ref.argmax(axis=1))[0]
    for pos in flips:
        gap = float(ref[pos].max() - ref[pos, ours[pos].argmax()])
        assert gap <= TOP1_FLIP_GAP, f"position {pos}: our top-1 trails the x86 build's by {gap:.3f}"
    print(f"{_core.isa_name(_core.best_isa())}: max |logit diff| {np.abs(ours - ref).max():.4g}, "
          f"mean KL {kl.mean():.3g}, top-1 changed at {len(flips)}/{len(ref)} positions")
    assert kl.mean() <= KL_MAX


if __name__ == "__main__":
    np.save(sys.argv[1], teacher_forced_logits())
