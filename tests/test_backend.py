"""The backend seam on the CPU: each layer's KV blocks and the scratch are allocated through
its backend, copy-on-write goes through the backend, and a failed allocation is an error
naming what did not fit."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import model_file
from localllm import _core

BS = 16


@pytest.fixture(scope="module")
def model() -> _core.Model:
    return _core.Model(str(model_file("smollm2-135m-q4_1")), 2, 8, BS)


def forward(m, tokens, start, table, rows=None):
    n = len(tokens)
    rows = [n - 1] if rows is None else rows
    return m.forward(np.asarray(tokens, np.int32), np.arange(start, start + n, dtype=np.int32),
                     np.zeros(n, np.int32), np.asarray([table], np.int32), np.asarray(rows, np.int32))


def test_every_layer_and_the_output_head_on_the_cpu(model):
    hp = model.hparams
    assert model.layer_devices == ["CPU"] * hp["n_layer"] and model.output_device == "CPU"
    kv_per_layer = 2 * 8 * BS * hp["n_head_kv"] * hp["head_dim"] * 2          # K and V, F16
    assert model.kv_bytes == model.allocated["CPU"]["kv"] == hp["n_layer"] * kv_per_layer


def test_copy_on_write_block_reads_the_same(model):
    """A block copied with copy_block (each layer's copy on its backend) attends exactly as the
    original: the next token's logits through either table are bit-identical."""
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 1000, BS + 3).tolist()
    forward(model, prompt, 0, [1, 2])
    model.copy_block(1, 5)
    model.copy_block(2, 6)
    a = forward(model, [42], BS + 3, [1, 2])
    b = forward(model, [42], BS + 3, [5, 6])
    assert np.array_equal(a, b)
    c = forward(model, [42], BS + 3, [5, 3])      # block 3 was never written: different K/V
    assert not np.array_equal(a, c)


def test_scratch_that_cannot_be_allocated_is_a_named_error(model):
    with pytest.raises(RuntimeError, match=r"CPU out of memory: activations \(scratch\) needs \d+ bytes"):
        model.reserve(1 << 40)
    # the model still runs afterwards, with the scratch it had
    assert np.isfinite(forward(model, [1, 2, 3], 0, [1])).all()
