"""The per-layer weight list: every tensor's type and shape is checked against its role, and
block_count must agree with the layers present (hostile files), on small files
written with the gguf package."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import gguf
import numpy as np
import pytest

from localllm import _core

# A tiny llama: 2 layers, n_embd 64, 4 heads of 16 (2 kv heads), n_ff 128, vocab 64.
D, H, HKV, HD, F, V, LAYERS = 64, 4, 2, 16, 128, 64, 2


def tiny_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """numpy arrays in numpy order (rows, row length): ggml's [ne0, ne1] reversed."""
    t = {"token_embd.weight": rng.standard_normal((V, D)), "output_norm.weight": np.ones(D)}
    for il in range(LAYERS):
        p = f"blk.{il}."
        t |= {p + "attn_norm.weight": np.ones(D), p + "ffn_norm.weight": np.ones(D),
              p + "attn_q.weight": rng.standard_normal((H * HD, D)) * 0.1,
              p + "attn_k.weight": rng.standard_normal((HKV * HD, D)) * 0.1,
              p + "attn_v.weight": rng.standard_normal((HKV * HD, D)) * 0.1,
              p + "attn_output.weight": rng.standard_normal((D, H * HD)) * 0.1,
              p + "ffn_gate.weight": rng.standard_normal((F, D)) * 0.1,
              p + "ffn_up.weight": rng.standard_normal((F, D)) * 0.1,
              p + "ffn_down.weight": rng.standard_normal((D, F)) * 0.1}
    return {k: v.astype(np.float32) for k, v in t.items()}


def write_model(path: Path, tensors: dict[str, np.ndarray], block_count: int = LAYERS,
                raw: dict[str, tuple[np.ndarray, list[int], gguf.GGMLQuantizationType]] | None = None,
                configure: Callable[[gguf.GGUFWriter], None] | None = None) -> Path:
    """A llama GGUF of these tensors; ``configure(writer)`` may add keys."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(block_count)
    w.add_embedding_length(D)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-5)
    if configure:
        configure(w)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    for name, (data, shape, qtype) in (raw or {}).items():   # bytes, their shape, ggml type
        w.add_tensor(name, data, raw_shape=shape, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def load(path: Path) -> _core.Model:
    return _core.Model(str(path), 1, 4, 16)


@pytest.fixture
def tensors() -> dict[str, np.ndarray]:
    return tiny_tensors(np.random.default_rng(0))


def test_tiny_model_loads_and_runs(tmp_path, tensors):
    m = load(write_model(tmp_path / "ok.gguf", tensors))
    bt = np.array([[1, 2]], np.int32)
    logits = m.forward(np.array([1, 2, 3], np.int32), np.arange(3, dtype=np.int32),
                       np.zeros(3, np.int32), bt, np.array([2], np.int32))
    assert logits.shape == (1, V) and np.isfinite(logits).all()


def test_norm_stored_2d_is_refused_with_its_real_shape(tmp_path, tensors):
    tensors["blk.1.ffn_norm.weight"] = np.ones((1, D), np.float32)   # ggml [D, 1], 2-D
    with pytest.raises(ValueError, match=r"'blk\.1\.ffn_norm\.weight' has shape \[64, 1\], expected \[64\] "
                                         r"\(a 1-D vector\)"):
        load(write_model(tmp_path / "norm2d.gguf", tensors))


def test_norm_not_f32_is_refused(tmp_path, tensors):
    tensors["blk.0.attn_norm.weight"] = np.ones(D, np.float16)
    with pytest.raises(ValueError, match=r"vector tensor 'blk\.0\.attn_norm\.weight' must be F32, is F16"):
        load(write_model(tmp_path / "norm16.gguf", tensors))


def test_3d_matrix_prints_its_real_shape(tmp_path, tensors):
    tensors["blk.0.attn_q.weight"] = np.zeros((2, H * HD, D), np.float32)   # ggml [64, 64, 2]
    with pytest.raises(ValueError, match=r"'blk\.0\.attn_q\.weight' has shape \[64, 64, 2\], "
                                         r"expected \[64, 64\] \(a 2-D matrix\)"):
        load(write_model(tmp_path / "q3d.gguf", tensors))


def test_matrix_of_wrong_shape(tmp_path, tensors):
    tensors["blk.1.ffn_down.weight"] = np.zeros((D, F // 2), np.float32)
    with pytest.raises(ValueError, match=r"'blk\.1\.ffn_down\.weight' has shape \[64, 64\], expected \[128, 64\]"):
        load(write_model(tmp_path / "down.gguf", tensors))


def test_row_length_not_a_multiple_of_the_block_size(tmp_path, tensors):
    """Q8_0 token rows of 48 elements (blocks hold 32): written with 64, then the header's ne0
    patched, since gguf-py refuses to write such a tensor."""
    del tensors["token_embd.weight"]
    q8 = gguf.quants.quantize(np.zeros((V, D), np.float32), gguf.GGMLQuantizationType.Q8_0)
    path = write_model(tmp_path / "q8rows.gguf", tensors,
                       raw={"token_embd.weight": (q8, list(q8.shape), gguf.GGMLQuantizationType.Q8_0)})
    raw = path.read_bytes()
    name = b"token_embd.weight"
    info = raw.index(len(name).to_bytes(8, "little") + name) + 8 + len(name)
    assert raw[info:info + 4] == (2).to_bytes(4, "little")             # n_dims
    assert raw[info + 4:info + 12] == D.to_bytes(8, "little")          # ne0
    path.write_bytes(raw[:info + 4] + (48).to_bytes(8, "little") + raw[info + 12:])
    with pytest.raises(ValueError, match=r"not a multiple of the Q8_0 block size 32"):
        load(path)


def test_layers_beyond_block_count_are_refused(tmp_path, tensors):
    with pytest.raises(ValueError, match=r"tensor 'blk\.1\.[a-z_.]+' belongs to layer 1, but the "
                                         r"metadata's block_count is 1"):
        load(write_model(tmp_path / "bc.gguf", tensors, block_count=1))


def test_missing_required_tensor(tmp_path, tensors):
    del tensors["blk.1.attn_v.weight"]
    with pytest.raises(ValueError, match=r"lacks tensor 'blk\.1\.attn_v\.weight'"):
        load(write_model(tmp_path / "nov.gguf", tensors))


def test_footprint_checks_the_same_list(tmp_path, tensors):
    """The planner reads the weights through the same list: a bad file fails there too."""
    tensors["output_norm.weight"] = np.ones((2, D), np.float32)
    with pytest.raises(ValueError, match=r"'output_norm\.weight' has shape \[64, 2\]"):
        _core.Footprint(str(write_model(tmp_path / "on.gguf", tensors)))
