"""Vocabulary metadata as llama.cpp's ``llama_vocab::impl::load`` interprets it.

Reads the ``tokenizer.*`` GGUF keys into plain Python structures: token strings, scores,
per-token attributes (llama.cpp's ``llama_token_attr`` bits), special ids, add-BOS/EOS flags,
and the end-of-generation set, including llama.cpp's text-based fix-ups (tokens that look like
end-of-turn markers are forced to CONTROL and join the EOG set).
"""
from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .tokenizer_pretok import PreTokenizerSpec, pre_tokenizer_spec

__all__ = ["TokenAttr", "VocabData", "load_vocab"]


class TokenAttr(enum.IntFlag):
    """llama.cpp's per-token attribute bits."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


# GGUF token_type (0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)
_TYPE_TO_ATTR = np.array([0, TokenAttr.NORMAL, TokenAttr.UNKNOWN, TokenAttr.CONTROL,
                          TokenAttr.USER_DEFINED, TokenAttr.UNUSED, TokenAttr.BYTE], np.int64)

_K = "tokenizer.ggml."
# (attribute name, GGUF key); later keys override earlier ones (the deprecated FIM names last).
_SPECIAL_KEYS = (
    ("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
    ("eom", "eom_token_id"), ("unk", "unknown_token_id"), ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"), ("mask", "mask_token_id"),
    ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"),
    ("fim_rep", "fim_rep_token_id"), ("fim_sep", "fim_sep_token_id"),
    ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"),
    ("fim_mid", "middle_token_id"),
)

# Token texts llama.cpp recognises when the GGUF names no such token (first match by id here).
_AUTO_DETECT = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
            "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
            "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# Token texts that end generation whatever the GGUF says (llama.cpp's EOG text list).
_EOG_TEXTS = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
)

# gpt-oss: always rendered, matched as user-defined text.
_FORCED_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")


@dataclass
class VocabData:
    """Everything the tokenizer needs from the metadata, llama.cpp-normalised."""

    model: str                       # "llama" (SPM) or "gpt2" (BPE)
    pre: str
    tokens: list[str]
    token_to_id: dict[str, int]
    scores: list[float]
    attrs: list[int]                 # TokenAttr bits per id
    special: dict[str, int | None]   # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    clean_spaces: bool
    pre_spec: PreTokenizerSpec | None
    merges: list[str] = field(default_factory=list)
    eog_ids: frozenset[int] = frozenset()
    special_cache: list[int] = field(default_factory=list)  # matched longest first


def _scalar(meta: Mapping[str, Any], key: str, default: Any = None) -> Any:
    value = meta.get(key, default)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).decode("utf-8")
    return value


def _as_bool(meta: Mapping[str, Any], key: str, default: bool) -> bool:
    value = _scalar(meta, key)
    if value is None:
        return default
    if not isinstance(value, (bool, int)):
        raise ValueError(f"{key} must be a boolean, got {value!r}")
    return bool(value)


def _token_list(meta: Mapping[str, Any]) -> list[str]:
    raw = meta.get(_K + "tokens")
    if raw is None:
        raise ValueError("GGUF metadata has no tokenizer.ggml.tokens")
    tokens = raw.tolist() if isinstance(raw, np.ndarray) else list(raw)
    if not tokens:
        raise ValueError("tokenizer.ggml.tokens is empty")
    if set(map(type, tokens)) != {str}:
        for i, t in enumerate(tokens):
            if isinstance(t, (bytes, bytearray)):
                tokens[i] = bytes(t).decode("utf-8", "replace")
            elif not isinstance(t, str):
                raise ValueError(f"tokenizer.ggml.tokens[{i}] is not a string: {t!r}")
    if "" in tokens:
        tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]  # as llama.cpp
    return tokens


def _number_array(meta: Mapping[str, Any], key: str, n: int, dtype: type) -> np.ndarray | None:
    raw = meta.get(key)
    if raw is None:
        return None
    try:
        arr = np.asarray(raw, dtype=dtype).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key} must be a numeric array: {exc}") from None
    if arr.size < n:
        raise ValueError(f"{key} has {arr.size} entries for {n} tokens")
    return arr[:n]


def _read_special_ids(meta: Mapping[str, Any], model: str, n: int,
                      spec: PreTokenizerSpec | None) -> dict[str, int | None]:
    special: dict[str, int | None] = {name: None for name, _ in _SPECIAL_KEYS}
    if model == "llama":
        special.update(bos=1, eos=2, unk=0)
    else:
        special.update(bos=None if spec and spec.no_default_bos else 11, eos=11)
    for name, key in _SPECIAL_KEYS:
        if special[name] is not None and special[name] >= n:
            special[name] = None  # a default out of the vocabulary is dropped
        value = _scalar(meta, _K + key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{_K + key} must be an integer, got {value!r}")
        if 0 <= value < n:
            special[name] = value  # an out-of-range id keeps the default, as llama.cpp
    return special


def _auto_detect_specials(special: dict[str, int | None], token_to_id: dict[str, int],
                          attrs: list[int]) -> None:
    """Fill unset EOT/EOM/FIM ids from well-known texts; such tokens become CONTROL."""
    for name, texts in _AUTO_DETECT.items():
        if special[name] is not None:
            continue
        found = sorted(token_to_id[t] for t in texts if t in token_to_id)
        if found:
            special[name] = found[0]
            attrs[found[0]] |= TokenAttr.CONTROL


def _end_of_generation(special: dict[str, int | None], token_to_id: dict[str, int],
                       tokens: list[str], attrs: list[int]) -> frozenset[int]:
    """llama.cpp's special_eog_ids, with its fix-ups for gpt-oss and gemma4-style vocabularies."""
    eog: set[int] = {special[k] for k in ("fim_pad", "fim_rep", "fim_sep")
                     if special[k] is not None}
    for text in _EOG_TEXTS:
        tid = token_to_id.get(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= TokenAttr.CONTROL
    for text in _FORCED_USER_DEFINED:
        tid = token_to_id.get(text)
        if tid is not None:
            attrs[tid] = TokenAttr.USER_DEFINED
    eog.update(special[k] for k in ("eos", "eot", "eom") if special[k] is not None)
    texts = {tokens[t]: t for t in eog}
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(texts["<|end|>"])
        attrs[texts["<|end|>"]] = TokenAttr.USER_DEFINED
    if "<|tool_response>" in texts and "</s>" in texts:
        eog.discard(texts["</s>"])
        attrs[texts["</s>"]] = TokenAttr.NORMAL
    return frozenset(eog)


def _apply_name_fixups(meta: Mapping[str, Any], vd: VocabData) -> None:
    """llama.cpp's per-model LSTRIP/RSTRIP attributes (phi-3, jina-v2, modern-bert)."""
    name = str(_scalar(meta, "general.name", "") or "").lower()
    arch = str(_scalar(meta, "general.architecture", "") or "")
    tid_of = vd.token_to_id.get
    if any(p in vd.pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or \
            arch in ("nomic-bert-moe", "jina-bert-v3"):
        if tid_of("<mask>") is not None:
            vd.attrs[tid_of("<mask>")] |= TokenAttr.LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for tid in vd.special_cache:
            vd.attrs[tid] |= TokenAttr.RSTRIP
        if tid_of("</s>") is not None:
            vd.attrs[tid_of("</s>")] |= TokenAttr.RSTRIP
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            if tid_of(text) is not None:
                vd.attrs[tid_of(text)] &= ~TokenAttr.RSTRIP
    elif "modern-bert" in name and tid_of("[MASK]") is not None:
        vd.attrs[tid_of("[MASK]")] |= TokenAttr.LSTRIP


def load_vocab(meta: Mapping[str, Any]) -> VocabData:
    """Interpret GGUF ``tokenizer.*`` metadata the way llama.cpp's vocabulary loader does."""
    model = _scalar(meta, _K + "model")
    if model not in ("llama", "gpt2"):
        raise ValueError(f"unsupported tokenizer.ggml.model {model!r} (supported: llama, gpt2)")
    pre = _scalar(meta, _K + "pre", "") or ""
    spec = pre_tokenizer_spec(pre) if model == "gpt2" else None
    tokens = _token_list(meta)
    n = len(tokens)
    token_to_id = dict(zip(reversed(tokens), range(n - 1, -1, -1)))  # first id wins
    scores_arr = _number_array(meta, _K + "scores", n, np.float32)
    scores = scores_arr.tolist() if scores_arr is not None else [0.0] * n
    types = _number_array(meta, _K + "token_type", n, np.int64)
    if types is None:
        attrs = [int(TokenAttr.NORMAL)] * n
    else:
        attrs = _TYPE_TO_ATTR[np.where((types >= 0) & (types < 7), types, 0)].tolist()
    special = _read_special_ids(meta, model, n, spec)
    if model == "llama":
        add_bos, add_space_prefix, clean_spaces = True, True, False
    else:
        add_bos, add_space_prefix, clean_spaces = spec.add_bos, False, spec.clean_spaces
    add_space_prefix = _as_bool(meta, _K + "add_space_prefix", add_space_prefix)
    add_bos = _as_bool(meta, _K + "add_bos_token", add_bos)
    add_eos = _as_bool(meta, _K + "add_eos_token", False)
    for flag, name, key in ((add_bos, "bos", "add_bos_token"), (add_eos, "eos", "add_eos_token")):
        if flag and special[name] is None:
            raise ValueError(f"{_K + key} is true, but {name} token id is not set")
    merges: list[str] = []
    if model == "gpt2":
        raw_merges = meta.get(_K + "merges")
        if raw_merges is None:
            raise ValueError("BPE (gpt2) tokenizer metadata has no tokenizer.ggml.merges")
        merges = raw_merges.tolist() if isinstance(raw_merges, np.ndarray) else list(raw_merges)
    _auto_detect_specials(special, token_to_id, attrs)
    eog = _end_of_generation(special, token_to_id, tokens, attrs)
    special_mask = int(TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)
    candidates = np.flatnonzero(np.asarray(attrs, np.int64) & special_mask).tolist()
    cache = sorted(candidates,
                   key=lambda i: (-len(tokens[i].encode("utf-8", "surrogatepass")), i))
    vd = VocabData(model=model, pre=pre, tokens=tokens, token_to_id=token_to_id, scores=scores,
                   attrs=attrs, special=special, add_bos=add_bos, add_eos=add_eos,
                   add_space_prefix=add_space_prefix, clean_spaces=clean_spaces, pre_spec=spec,
                   merges=merges, eog_ids=eog, special_cache=cache)
    _apply_name_fixups(meta, vd)
    return vd
