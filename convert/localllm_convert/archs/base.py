"""What every architecture module provides, and the registry of HF class name -> converter.

An architecture converter turns a :class:`~localllm_convert.checkpoint.Checkpoint` into
(1) the ``{arch}.*`` metadata, (2) the vocabulary and (3) a list of :class:`PlannedTensor`: the
GGUF name, the checkpoint tensor it comes from, its output shape and the transformation
(llama's Q/K row permutation, Gemma's norm +1, ...). Shapes are checked against config.json
before anything is written.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

import gguf
import numpy as np

from ..checkpoint import Checkpoint, CheckpointError, TensorRef
from ..vocab import MAX_TOKEN_ID, Vocab, load_vocab

__all__ = ["PlannedTensor", "ArchConverter", "register", "REGISTRY", "converter_for",
           "supported_architectures", "HParams", "sentence_transformers_pooling"]

Transform = Callable[[np.ndarray], np.ndarray]   # float32 in, float32 out (same shape)


@dataclass
class PlannedTensor:
    """One tensor of the output file."""
    name: str                        # GGUF tensor name
    shape: tuple[int, ...]           # numpy order (rows last)
    source: TensorRef | None         # checkpoint tensor (None: computed by `make`)
    transform: Transform | None = None
    make: Callable[[], np.ndarray] | None = None   # for generated tensors (rope_freqs)

    def load(self) -> np.ndarray:
        """The tensor as float32 in memory, transformed."""
        from ..arrays import to_float32
        if self.source is None:
            assert self.make is not None
            return np.ascontiguousarray(self.make(), dtype=np.float32)
        data = to_float32(self.source.read(), self.source.dtype)
        if self.transform is not None:
            data = self.transform(data)
        if tuple(data.shape) != self.shape:
            data = data.reshape(self.shape)
        return np.ascontiguousarray(data, dtype=np.float32)


@dataclass(frozen=True)
class HParams:
    """The hyper-parameters every decoder-only model here has."""
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    vocab_size: int
    n_ctx: int | None
    rms_eps: float


REGISTRY: dict[str, type[ArchConverter]] = {}

def sentence_transformers_pooling(ckpt) -> str | None:
    """The pooling a sentence-transformers checkpoint declares (None when it declares none)."""
    modules = ckpt.json("modules.json")
    if not isinstance(modules, list):
        return None
    for module in modules:
        if isinstance(module, dict) and str(module.get("type", "")).endswith("models.Pooling"):
            config = ckpt.json(f"{module.get('path', '')}/config.json") or {}
            if config.get("pooling_mode_cls_token"):
                return "cls"
            if config.get("pooling_mode_mean_tokens"):
                return "mean"
            if config.get("pooling_mode_lasttoken"):
                return "last"
            raise CheckpointError(f"{module.get('path')}/config.json: a pooling mode other than cls, mean "
                                  f"or last token is not supported: {config}")
    return None



def register(*hf_names: str):
    """Class decorator: the converter for these HF ``architectures`` names."""
    def wrap(cls):
        for name in hf_names:
            REGISTRY[name] = cls
        return cls
    return wrap


def _json_object(value: Any, key: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise CheckpointError(f"config.json: {key} must be a JSON object, got {value!r:.80}")
    return dict(value)


def rope_number(rope: dict[str, Any], key: str, kind: str) -> float:
    """A positive number the rope scaling of type ``kind`` needs (CheckpointError when absent or
    not one)."""
    where = f"config.json rope scaling of type {kind!r}"
    if rope.get(key) is None:
        raise CheckpointError(f"{where}: needs a positive number {key!r}")
    number = config_number(rope, key, where=where)
    if number <= 0:
        raise CheckpointError(f"{where}: {key} must be positive, got {rope[key]!r:.80}")
    return number


# YaRN parameters llama.cpp's GGUF has no key for (its llama and qwen2 graphs use the defaults).
_YARN_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": None, "mscale": None,
                  "mscale_all_dim": None, "truncate": True}


def write_yarn(w, rope: dict[str, Any]) -> None:
    """The YaRN keys (type, factor, original context); a checkpoint whose YaRN parameters differ
    from the defaults the runtime applies is refused rather than converted into a file that would
    run differently."""
    for key, default in _YARN_DEFAULTS.items():
        if rope.get(key) is not None and rope[key] != default:
            raise CheckpointError(f"config.json: YaRN parameter {key}={rope[key]!r:.40} is not supported "
                                  f"(GGUF stores none; the runtime uses {default!r})")
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rope_number(rope, "factor", "yarn")))
    w.add_rope_scaling_orig_ctx_len(int(rope_number(rope, "original_max_position_embeddings", "yarn")))


def supported_architectures() -> list[str]:
    return sorted(REGISTRY)


def converter_for(checkpoint: Checkpoint) -> ArchConverter:
    """The converter for a checkpoint's architecture (ValueError naming the supported ones)."""
    arch = checkpoint.architecture
    if arch not in REGISTRY:
        raise CheckpointError(f"unsupported architecture {arch!r}; supported: "
                              f"{', '.join(supported_architectures())}")
    return REGISTRY[arch](checkpoint)


# Upper bounds on config.json's integers, so a corrupt file is refused before the converter
# lists that many layer names or placeholder tokens: GGUF stores them as uint32; the largest
# published models have ~128 layers and ~262k tokens.
_INT_LIMITS = {"num_hidden_layers": 4096, "vocab_size": MAX_TOKEN_ID}
_UINT32_MAX = (1 << 32) - 1


def _int(config: dict[str, Any], key: str, default: Any = None) -> int:
    value = config.get(key, default)
    limit = _INT_LIMITS.get(key, _UINT32_MAX)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= limit:
        raise CheckpointError(f"config.json: {key} must be a positive integer up to {limit}, got {value!r:.40}")
    return value


def config_number(config: dict[str, Any], key: str, default: float | None = None,
                  where: str = "config.json") -> float:
    """A finite real number from a JSON object (``default`` when absent or null), or a
    CheckpointError naming the key: ``float()`` on a list, a string or 1e400 would raise
    something a user should not see."""
    value = config.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"{where}: {key} must be a number, got {value!r:.80}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise CheckpointError(f"{where}: {key} must be a finite number, got {value!r:.80}")
    return number


def _optional_int(config: dict[str, Any], key: str) -> int | None:
    return None if config.get(key) is None else _int(config, key)


class ArchConverter:
    """Base class: llama-style decoder layers with HF's usual tensor names."""

    gguf_arch: str = ""
    # HF tensor name suffix inside a layer -> GGUF suffix
    layer_tensors: dict[str, str] = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    optional_layer_tensors: tuple[str, ...] = ()
    prefix = "model."
    ignored = re.compile(r"(^|\.)rotary_emb\.inv_freq$")

    def __init__(self, checkpoint: Checkpoint):
        self.ckpt = checkpoint
        self.config: dict[str, Any] = self.text_config(checkpoint.config)
        self.hp = self.read_hparams()
        self._vocab: Vocab | None = None

    @staticmethod
    def text_config(config: dict[str, Any]) -> dict[str, Any]:
        return config

    # ---- hyper-parameters ----
    def read_hparams(self) -> HParams:
        c = self.config
        n_head = _int(c, "num_attention_heads")
        n_embd = _int(c, "hidden_size")
        head_dim = c.get("head_dim") or n_embd // n_head      # checked by _int below
        return HParams(
            n_layer=_int(c, "num_hidden_layers"), n_embd=n_embd,
            n_ff=_int(c, "intermediate_size"), n_head=n_head,
            n_head_kv=_int(c, "num_key_value_heads", n_head), head_dim=_int({"head_dim": head_dim}, "head_dim"),
            vocab_size=_int(c, "vocab_size"), n_ctx=_optional_int(c, "max_position_embeddings"),
            rms_eps=config_number(c, "rms_norm_eps", 1e-6))

    def rope_parameters(self) -> dict[str, Any]:
        """rope_theta and scaling, from ``rope_parameters`` (transformers 5) or the old keys."""
        params = _json_object(self.config.get("rope_parameters") or {}, "rope_parameters")
        if "full_attention" in params:       # per-layer-type parameters (gemma3)
            params = _json_object(params["full_attention"], "rope_parameters.full_attention")
        if "rope_theta" not in params and "rope_theta" in self.config:
            params["rope_theta"] = self.config["rope_theta"]
        scaling = self.config.get("rope_scaling")
        if isinstance(scaling, dict):
            params.update(scaling)
            params.setdefault("rope_type", scaling.get("type"))
        return params

    def write_metadata(self, w) -> None:
        """The {arch}.* keys common to the llama family (TextModel.set_gguf_parameters)."""
        hp = self.hp
        w.add_block_count(hp.n_layer)
        if hp.n_ctx is not None:
            w.add_context_length(int(hp.n_ctx))
        w.add_embedding_length(hp.n_embd)
        w.add_feed_forward_length(hp.n_ff)
        w.add_head_count(hp.n_head)
        w.add_head_count_kv(hp.n_head_kv)
        rope = self.rope_parameters()
        if rope.get("rope_theta") is not None:
            w.add_rope_freq_base(config_number(rope, "rope_theta"))
        w.add_layer_norm_rms_eps(hp.rms_eps)
        if self.config.get("head_dim") is not None:
            w.add_key_length(hp.head_dim)
            w.add_value_length(hp.head_dim)

    # ---- vocabulary ----
    def vocab(self) -> Vocab:
        if self._vocab is None:
            self._vocab = load_vocab(self.ckpt, self.hp.vocab_size)
        return self._vocab

    # ---- tensors ----
    def expected_shape(self, gguf_suffix: str) -> tuple[int, ...] | None:
        """Expected checkpoint shape (numpy order) of a per-layer tensor, from config.json."""
        hp = self.hp
        q, kv = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
        return {
            "attn_norm.weight": (hp.n_embd,), "ffn_norm.weight": (hp.n_embd,),
            "attn_q.weight": (q, hp.n_embd), "attn_k.weight": (kv, hp.n_embd),
            "attn_v.weight": (kv, hp.n_embd), "attn_output.weight": (hp.n_embd, q),
            "attn_q.bias": (q,), "attn_k.bias": (kv,), "attn_v.bias": (kv,),
            "ffn_gate.weight": (hp.n_ff, hp.n_embd), "ffn_up.weight": (hp.n_ff, hp.n_embd),
            "ffn_down.weight": (hp.n_embd, hp.n_ff),
            "attn_q_norm.weight": (hp.head_dim,), "attn_k_norm.weight": (hp.head_dim,),
            "post_attention_norm.weight": (hp.n_embd,), "post_ffw_norm.weight": (hp.n_embd,),
        }.get(gguf_suffix)

    def transform_for(self, gguf_name: str) -> Transform | None:
        """Per-architecture data transformation of a tensor (none by default)."""
        return None

    def tied_embeddings(self) -> bool:
        return bool(self.config.get("tie_word_embeddings", False)) or \
            "lm_head.weight" not in self.ckpt.tensors

    def map_name(self, hf_name: str) -> str | None:
        """GGUF name of a checkpoint tensor; None to skip it; CheckpointError when unknown."""
        if self.ignored.search(hf_name):
            return None
        name = hf_name[len(self.prefix):] if hf_name.startswith(self.prefix) else hf_name
        if name == "embed_tokens.weight":
            return "token_embd.weight"
        if name == "norm.weight":
            return "output_norm.weight"
        if hf_name == "lm_head.weight":
            return None if self.config.get("tie_word_embeddings", False) else "output.weight"
        m = re.match(r"layers\.(\d+)\.(.+)$", name)
        if m and int(m.group(1)) < self.hp.n_layer:
            suffix = m.group(2)
            if suffix in self.layer_tensors:
                return f"blk.{m.group(1)}.{self.layer_tensors[suffix]}"
        raise CheckpointError(f"unexpected tensor {hf_name!r} for {self.ckpt.architecture} "
                              f"(config.json: {self.hp.n_layer} layers)")

    def expected(self, gguf_name: str) -> tuple[int, ...] | None:
        hp = self.hp
        if gguf_name in ("token_embd.weight", "output.weight"):
            return (hp.vocab_size, hp.n_embd)
        if gguf_name == "output_norm.weight":
            return (hp.n_embd,)
        return self.expected_shape(gguf_name.split(".", 2)[2])

    def plan(self) -> list[PlannedTensor]:
        """Every output tensor, checked against config.json (names, shapes, completeness)."""
        planned: list[PlannedTensor] = []
        for hf_name, ref in self.ckpt.tensors.items():
            try:
                name = self.map_name(hf_name)
            except CheckpointError:
                if self._zero_bias_of_packed_layer(hf_name):
                    continue
                raise
            if name is None:
                continue
            want = self.expected(name)
            if want is not None and tuple(ref.shape) != want:
                raise CheckpointError(f"shape mismatch: {hf_name} is {list(ref.shape)} but "
                                      f"config.json implies {list(want)}")
            planned.append(PlannedTensor(name, tuple(ref.shape), ref, self.transform_for(name)))
        self.check_complete({p.name for p in planned})
        planned += self.extra_tensors()
        return self.finish_plan(planned)

    def _zero_bias_of_packed_layer(self, hf_name: str) -> bool:
        """An all-zero bias of a GPTQ layer the architecture has no bias for: GPTQ-for-LLaMa
        and early AutoGPTQ saved one for every quantized layer; it changes nothing."""
        from ..packed import PackedWeightRef
        weight = self.ckpt.tensors.get(hf_name[:-len("bias")] + "weight")
        return hf_name.endswith(".bias") and isinstance(weight, PackedWeightRef) and \
            not np.any(self.ckpt.tensors[hf_name].read())

    def required_names(self) -> list[str]:
        names = ["token_embd.weight", "output_norm.weight"]
        if not self.tied_embeddings():
            names.append("output.weight")
        for i in range(self.hp.n_layer):
            names += [f"blk.{i}.{s}" for s in self.layer_tensors.values()
                      if s not in self.optional_layer_tensors]
        return names

    def check_complete(self, present: set[str]) -> None:
        missing = [n for n in self.required_names() if n not in present]
        if missing:
            raise CheckpointError(f"the checkpoint lacks {len(missing)} tensor(s) the config "
                                  f"implies, e.g. {', '.join(missing[:4])}")

    def pooling(self) -> str | None:
        """How an embedding model pools its hidden states (None: not an embedding model):
        what a sentence-transformers checkpoint declares."""
        return sentence_transformers_pooling(self.ckpt)

    def write_pooling(self, w) -> None:
        """{arch}.pooling_type, as llama.cpp's converter writes it, for embedding models."""
        from localllm.embed import POOLING_TYPES   # llama.cpp's numbers, the runtime's one table
        pooling = self.pooling()
        if pooling is not None:
            w.add_uint32(f"{self.gguf_arch}.pooling_type", POOLING_TYPES[pooling])

    def extra_tensors(self) -> list[PlannedTensor]:
        """Tensors computed from the config (none by default)."""
        return []

    def finish_plan(self, planned: list[PlannedTensor]) -> list[PlannedTensor]:
        return planned
