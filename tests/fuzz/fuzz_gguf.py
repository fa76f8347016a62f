"""Fuzz the GGUF reader and model loading: bytes -> GGUFFile (metadata, every tensor's view) ->
_core.Model -> one forward of a few tokens. Expected: GGUFError / ValueError (and OSError for an
unmappable file); anything else is a finding."""
from __future__ import annotations

import struct

import atheris

import harness

with atheris.instrument_imports(include=harness.INSTRUMENTED):
    import numpy as np
    from localllm import _core
    from localllm.gguf import GGUFFile


def gguf_string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gguf_string(key.encode()) + struct.pack("<I", vtype) + payload


def tiny_llama() -> bytes:
    """A whole llama model small enough to load per input: 1 layer, 32 wide, 8 tokens, F32."""
    d, ff, vocab, heads = 32, 64, 8, 2
    u32 = lambda k, v: kv(k, 4, struct.pack("<I", v))
    f32 = lambda k, v: kv(k, 6, struct.pack("<f", v))
    kvs = [kv("general.architecture", 8, gguf_string(b"llama")), u32("llama.block_count", 1),
           u32("llama.embedding_length", d), u32("llama.feed_forward_length", ff),
           u32("llama.attention.head_count", heads), u32("llama.attention.head_count_kv", 1),
           u32("llama.context_length", 64), u32("llama.rope.dimension_count", d // heads),
           f32("llama.attention.layer_norm_rms_epsilon", 1e-5), f32("llama.rope.freq_base", 10000.0)]
    hd = d // heads
    shapes = {"token_embd.weight": (d, vocab), "output_norm.weight": (d,), "blk.0.attn_norm.weight": (d,),
              "blk.0.attn_q.weight": (d, d), "blk.0.attn_k.weight": (d, hd), "blk.0.attn_v.weight": (d, hd),
              "blk.0.attn_output.weight": (d, d), "blk.0.ffn_norm.weight": (d,),
              "blk.0.ffn_gate.weight": (d, ff), "blk.0.ffn_up.weight": (d, ff), "blk.0.ffn_down.weight": (ff, d)}
    infos, data, offset = b"", b"", 0
    rng = np.random.default_rng(0)
    for name, shape in shapes.items():
        infos += gguf_string(name.encode()) + struct.pack("<I", len(shape))
        infos += b"".join(struct.pack("<Q", n) for n in shape) + struct.pack("<IQ", 0, offset)
        blob = (rng.standard_normal(int(np.prod(shape))) * 0.1).astype(np.float32).tobytes()
        blob += b"\0" * (-len(blob) % 32)
        data += blob
        offset += len(blob)
    head = b"GGUF" + struct.pack("<IQQ", 3, len(shapes), len(kvs)) + b"".join(kvs) + infos
    return head + b"\0" * (-len(head) % 32) + data


def seeds():
    model = tiny_llama()
    yield model
    yield model[:2048]                       # truncated in the tensor infos
    yield b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + kv("k", 9, struct.pack("<IQ", 8, 2) + gguf_string(b"a") + gguf_string(b"b"))
    yield b"GGUF" + struct.pack("<IQQ", 2, 0, 0)


PATH = harness.scratch_file("gguf")
TOKENS = np.array([1, 2, 3], np.int32)


def test_one_input(data: bytes) -> None:
    with open(PATH, "wb") as f:
        f.write(data)
    try:
        g = GGUFFile(PATH)
        harness.feedback("opened", len(g.keys()), len(g.tensors))
        for key, value in g.metadata.items():
            harness.feedback("key", key, type(value).__name__)
        for t in g.tensors:
            g.tensor_data(t.name).sum()
            harness.feedback("tensor", t.name, t.type_name, t.n_dims)
        model = _core.Model(PATH, 1, 4)
        harness.feedback("loaded")
        n = model.hparams["n_vocab"]
        model.forward(TOKENS % n, np.arange(3, dtype=np.int32), np.zeros(3, np.int32),
                      np.array([[1]], np.int32), np.array([2], np.int32))
        harness.feedback("forward")
    except (ValueError, OSError) as e:
        harness.feedback(type(e).__name__, str(e).replace(PATH, "")[:160])


if __name__ == "__main__":
    harness.run("gguf", seeds, test_one_input)
