"""RoPE scaling and the Qwen3 architecture: the runtime applies what the converter writes — Llama 3's frequency
factors (rope_freqs.weight), linear interpolation, YaRN and Phi-3's LongRoPE (long or short
factors by the context, as llama.cpp chooses them) — and refuses what it does not implement,
never running such a file as if unscaled.

The models: small random-weight checkpoints built by transformers with each scaling, converted
to F32 by ``localllm convert``; the reference is transformers' fp32 forward on the same tokens,
run past the checkpoint's original context so that the scaling shapes every later position. A
negative control (the same weights without the scaling) shows each comparison can fail.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import transformers  # noqa: F401  (the test extra; a missing one fails collection)

import gguf  # noqa: E402

from localllm import LLM, _core  # noqa: E402
from localllm_convert import convert  # noqa: E402
from test_weights import tiny_tensors, write_model  # noqa: E402
from tiny_checkpoints import N_TOKENS, ORIG_CTX, TOL, VARIANTS, build, hf_logits, row_rel_err  # noqa: E402

@pytest.mark.parametrize("name", list(VARIANTS))
def test_scaled_rope_matches_transformers_past_the_original_context(name, tmp_path):
    family, rope = VARIANTS[name]
    src = build(family, rope, tmp_path / "scaled")
    out = tmp_path / f"{name}-f32.gguf"
    convert(src, out, type="f32", progress=False)
    ids = [int(i) for i in np.random.default_rng(1).integers(100, 40000, N_TOKENS)]
    ours = LLM(str(out), n_ctx=N_TOKENS + 1, seed=0).logits(ids)
    ref = hf_logits(src, ids)
    err = row_rel_err(ours, ref)
    top1 = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    unscaled = hf_logits(build(family, None, tmp_path / "plain"), ids)
    control = row_rel_err(unscaled, ref)[ORIG_CTX:]
    print(f"{name}: max rel err {err.max():.2e} (median {np.median(err):.2e}), top-1 {top1:.3f}; "
          f"unscaled rope differs by median {np.median(control):.2e}")
    assert err.max() <= TOL
    assert top1 >= 0.99
    assert np.median(control) > 30 * TOL     # the test would catch a file run as if unscaled


def test_longrope_short_factors_within_the_original_context(tmp_path):
    """A context no longer than the original one runs LongRoPE's short factors (llama.cpp picks
    them by n_ctx, transformers by the sequence's length: the same choice here); the long
    factors would be far off."""
    family, rope = VARIANTS["longrope-phi3"]
    src = build(family, rope, tmp_path / "scaled")
    out = tmp_path / "longrope-f32.gguf"
    convert(src, out, type="f32", progress=False)
    ids = [int(i) for i in np.random.default_rng(2).integers(100, 40000, ORIG_CTX - 8)]
    ref = hf_logits(src, ids)
    short = LLM(str(out), n_ctx=ORIG_CTX, seed=0).logits(ids)
    long = LLM(str(out), n_ctx=ORIG_CTX + 1, seed=0).logits(ids)
    err, wrong = row_rel_err(short, ref), row_rel_err(long, ref)
    print(f"short factors: max rel err {err.max():.2e}; long factors: median {np.median(wrong):.2e}")
    assert err.max() <= TOL
    assert np.median(wrong[8:]) > 10 * TOL


def _with(tmp_path: Path, configure, extra: dict[str, np.ndarray] | None = None) -> Path:
    tensors = tiny_tensors(np.random.default_rng(0)) | (extra or {})
    return write_model(tmp_path / "m.gguf", tensors, configure=configure)


@pytest.mark.parametrize("key,value,message", [
    ("llama.rope.scaling.yarn_log_multiplier", 0.1, "rope.scaling.yarn_log_multiplier"),
    ("llama.rope.scaling.yarn_beta_fast", 16.0, "rope.scaling.yarn_beta_fast"),
    ("llama.rope.dimension_sections", None, "rope.dimension_sections"),
    ("llama.rope.scaling.type", "longrope", "RoPE scaling type 'longrope'"),
    ("llama.rope.scaling.type", "dynamic", "RoPE scaling type 'dynamic'"),
    ("llama.rope.scaling.factor", -2.0, "must be a positive number"),
])
def test_rope_behaviour_not_implemented_is_refused(tmp_path, key, value, message):
    def configure(w):
        if isinstance(value, str):
            w.add_string(key, value)
        elif value is None:
            w.add_array(key, [16, 8, 0, 0])
        else:
            w.add_float32(key, value)
    with pytest.raises(ValueError, match=message):
        _core.Model(str(_with(tmp_path, configure)), 1, 4, 16)


@pytest.mark.parametrize("factors,message", [
    (np.ones(4, np.float32), r"must be F32 of shape \[8\]"),
    (np.ones((2, 8), np.float32), r"must be F32 of shape \[8\]"),
    (np.array([1, 1, 1, 0, 1, 1, 1, 1], np.float32), "must be positive"),
    (np.full(8, np.nan, np.float32), "must be positive"),
])
def test_bad_frequency_factors_are_refused(tmp_path, factors, message):
    with pytest.raises(ValueError, match=message):
        _core.Model(str(_with(tmp_path, None, {"rope_freqs.weight": factors})), 1, 4, 16)


def test_every_rope_key_the_converter_writes_is_read(tmp_path):
    """The converter's rope metadata for each variant loads (a key the runtime does not read would
    be refused), and frequency factors or scaling change the logits of the same weights."""
    logits = {}
    ids = list(range(100, 100 + 96))
    for name in ("llama3", "linear", "yarn-llama"):
        family, rope = VARIANTS[name]
        src = build(family, rope, tmp_path / name)
        out = tmp_path / f"{name}.gguf"
        convert(src, out, type="f32", progress=False)
        keys = {f.name for f in gguf.GGUFReader(str(out)).fields.values() if ".rope." in f.name}
        print(name, sorted(keys))
        logits[name] = LLM(str(out), n_ctx=128, seed=0).logits(ids)
    assert len({round(float(v[-1].sum()), 3) for v in logits.values()}) == 3


def test_converter_refuses_yarn_parameters_it_cannot_write(tmp_path):
    from localllm_convert.checkpoint import CheckpointError
    src = build("llama", VARIANTS["yarn-llama"][1], tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    cfg["rope_parameters"] = {**cfg["rope_parameters"], "beta_fast": 16.0}
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="beta_fast"):
        convert(src, tmp_path / "out.gguf", type="f32", progress=False)
