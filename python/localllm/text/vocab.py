"""Vocabulary metadata as llama.cpp's ``llama_vocab::impl::load`` interprets it.

Reads the ``tokenizer.*`` GGUF keys into token texts, per-token attributes (llama.cpp's
``llama_token_attr`` bits), special ids, add-BOS/EOS flags and the end-of-generation set,
including llama.cpp's text-based fix-ups (tokens that look like end-of-turn markers are forced
to CONTROL and join the EOG set), and builds the encoder (SPM or BPE) that owns text -> id.

Memory: the vocabulary outlives the metadata dict, so it is held in few objects.  A Python str
costs 50-90 bytes besides its text and an int 32, so the only per-token objects are the SPM
lookup table's: texts are UTF-8 (shared with that table, or packed into one buffer for BPE,
whose table lives in Rust), attributes and scores are typed arrays.  Short-lived per-token
objects are kept few as well: CPython hands a 1 MiB arena of small objects back to the OS only
once all of it is free, so one small object that stays (a dict, an IntFlag combination), made
while short-lived ones fill the arenas, keeps a whole arena resident.
"""
from __future__ import annotations

import enum
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import numpy as np

from .bpe import BpeMerger
from .pretok import PreTokenizerSpec, pre_tokenizer_spec
from .spm import SpmEncoder
from .ugm import UgmEncoder
from .wpm import WpmEncoder

__all__ = ["PackedTexts", "TokenAttr", "VocabData", "load_vocab"]


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


# The bits as plain ints for the build's edits: an IntFlag result (attr | TokenAttr.CONTROL)
# creates and keeps a pseudo-member object per new combination (see the module docstring).
_NORMAL, _CONTROL = int(TokenAttr.NORMAL), int(TokenAttr.CONTROL)
_USER_DEFINED, _LSTRIP, _RSTRIP = (int(TokenAttr.USER_DEFINED), int(TokenAttr.LSTRIP),
                                   int(TokenAttr.RSTRIP))
_SPECIAL_MASK = int(TokenAttr.CONTROL | TokenAttr.USER_DEFINED | TokenAttr.UNKNOWN)

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


class PackedTexts(Sequence[bytes]):
    """Token texts as one UTF-8 buffer plus start offsets: 2 objects, not one per token."""

    __slots__ = ("_blob", "_starts")

    def __init__(self, texts: Sequence[str]) -> None:
        # No list of per-token bytes on the way (see the module docstring).
        joined = "".join(texts)
        self._blob = joined.encode("utf-8", "surrogatepass")
        if len(self._blob) > 0xFFFFFFFF:
            raise ValueError("token texts exceed 4 GiB")
        # Each token's UTF-8 start from its code points' UTF-8 widths, in numpy rather than one
        # encode per token (0.2 s for 151k tokens).
        code_points = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), np.uint32)
        widths = 1 + (code_points >= 0x80) + (code_points >= 0x800) + (code_points >= 0x10000)
        utf8_offset = np.concatenate(([0], np.cumsum(widths, dtype=np.int64)))
        cp_ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)))
        starts = utf8_offset[np.concatenate(([0], cp_ends))]
        # array, not numpy: its items are plain ints, which slice bytes faster than numpy's
        self._starts = array("I", starts.astype(np.uint32).tobytes())

    def __len__(self) -> int:
        return len(self._starts) - 1

    def __getitem__(self, i: int) -> bytes:  # type: ignore[override]
        """UTF-8 text of token ``i`` (0 <= i < len; ids are range-checked by the caller)."""
        return self._blob[self._starts[i]:self._starts[i + 1]]


Encoder = Union[SpmEncoder, BpeMerger, WpmEncoder, UgmEncoder]


@dataclass
class VocabData:
    """Everything the tokenizer needs from the metadata, llama.cpp-normalised."""

    model: str                       # "llama" (SPM), "gpt2" (BPE), "bert" (WordPiece) or "t5" (Unigram)
    pre: str
    tokens: Sequence[bytes]          # UTF-8 text per id (surrogatepass for lone surrogates)
    attrs: array                     # TokenAttr bits per id ('H': all bits fit in 10)
    special: dict[str, int | None]   # bos, eos, eot, eom, unk, sep, pad, mask, fim_*
    add_bos: bool
    add_eos: bool
    add_sep: bool                    # a pair is BOS A EOS SEP B EOS, not BOS A EOS B EOS
    add_space_prefix: bool
    clean_spaces: bool
    pre_spec: PreTokenizerSpec | None
    encoder: Encoder                 # owns text -> id (SPM table or the C++ BPE table)
    eog_ids: frozenset[int] = frozenset()
    special_cache: list[int] = field(default_factory=list)  # matched longest first

    def token_id(self, text: str) -> int | None:
        """Id of the token whose text is exactly ``text`` (the first id if repeated)."""
        return self.encoder.token_id(text)


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
    if isinstance(raw, np.ndarray):
        tokens = raw.tolist()
    else:  # the caller's list itself, only read (fixed up below in a copy)
        tokens = raw if isinstance(raw, list) else list(raw)
    if not tokens:
        raise ValueError("tokenizer.ggml.tokens is empty")
    if set(map(type, tokens)) != {str}:
        tokens = list(tokens)
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
    elif model == "bert":   # llama.cpp's WPM: [CLS] text [SEP]
        special.update(bos=101, eos=102, unk=100, sep=102, pad=0, mask=103)
        cls = _scalar(meta, _K + "cls_token_id")
        if isinstance(cls, int) and not isinstance(cls, bool) and 0 <= cls < n:
            special["bos"] = cls
        sep = _scalar(meta, _K + "seperator_token_id")
        if isinstance(sep, int) and not isinstance(sep, bool) and 0 <= sep < n:
            special["eos"] = sep
    elif model == "t5":     # llama.cpp's UGM defaults (T5); XLM-R files name theirs
        special.update(bos=None, eos=1, unk=2, pad=0)
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


TokenLookup = Callable[[str], Union[int, None]]


def _auto_detect_specials(special: dict[str, int | None], find: TokenLookup,
                          attrs: array) -> None:
    """Fill unset EOT/EOM/FIM ids from well-known texts; such tokens become CONTROL."""
    for name, texts in _AUTO_DETECT.items():
        if special[name] is not None:
            continue
        found = sorted(tid for tid in map(find, texts) if tid is not None)
        if found:
            special[name] = found[0]
            attrs[found[0]] |= _CONTROL


def _end_of_generation(special: dict[str, int | None], find: TokenLookup,
                       tokens: Sequence[bytes], attrs: array) -> frozenset[int]:
    """llama.cpp's special_eog_ids, with its fix-ups for gpt-oss and gemma4-style vocabularies."""
    eog: set[int] = {special[k] for k in ("fim_pad", "fim_rep", "fim_sep")
                     if special[k] is not None}
    for text in _EOG_TEXTS:
        tid = find(text)
        if tid is not None:
            eog.add(tid)
            attrs[tid] |= _CONTROL
    for text in _FORCED_USER_DEFINED:
        tid = find(text)
        if tid is not None:
            attrs[tid] = _USER_DEFINED
    eog.update(special[k] for k in ("eos", "eot", "eom") if special[k] is not None)
    texts = {tokens[t].decode("utf-8", "surrogatepass"): t for t in eog}
    has_call = "<|call|>" in texts or "<|calls|>" in texts
    if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
        eog.discard(texts["<|end|>"])
        attrs[texts["<|end|>"]] = _USER_DEFINED
    if "<|tool_response>" in texts and "</s>" in texts:
        eog.discard(texts["</s>"])
        attrs[texts["</s>"]] = _NORMAL
    return frozenset(eog)


def _apply_name_fixups(meta: Mapping[str, Any], vd: VocabData) -> None:
    """llama.cpp's per-model LSTRIP/RSTRIP attributes (phi-3, jina-v2, modern-bert)."""
    name = str(_scalar(meta, "general.name", "") or "").lower()
    arch = str(_scalar(meta, "general.architecture", "") or "")
    tid_of = vd.token_id
    if any(p in vd.pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or \
            arch in ("nomic-bert-moe", "jina-bert-v3"):
        if tid_of("<mask>") is not None:
            vd.attrs[tid_of("<mask>")] |= _LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for tid in vd.special_cache:
            vd.attrs[tid] |= _RSTRIP
        if tid_of("</s>") is not None:
            vd.attrs[tid_of("</s>")] |= _RSTRIP
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            if tid_of(text) is not None:
                vd.attrs[tid_of(text)] &= ~_RSTRIP
    elif "modern-bert" in name and tid_of("[MASK]") is not None:
        vd.attrs[tid_of("[MASK]")] |= _LSTRIP


def _texts_and_encoder(meta: Mapping[str, Any], model: str, tokens: list[str], spec: PreTokenizerSpec | None,
                       attrs: array, add_space_prefix: bool) -> tuple[Sequence[bytes], Encoder]:
    """Token texts as UTF-8, and the encoder holding the text -> id table (first id wins)."""
    n = len(tokens)
    if model == "llama":
        # The SPM merge loop looks up every candidate pair: a dict keyed by the UTF-8 texts
        # (bytes cost half a str), which id -> text shares.
        utf8 = [t.encode("utf-8", "surrogatepass") for t in tokens]
        token_ids = dict(zip(reversed(utf8), range(n - 1, -1, -1)))
        scores = _number_array(meta, _K + "scores", n, np.float32)
        return utf8, SpmEncoder(token_ids, np.zeros(n, np.float32) if scores is None else scores)
    if model == "bert":
        token_ids = dict(zip(reversed(tokens), range(n - 1, -1, -1)))
        unk = _scalar(meta, _K + "unknown_token_id", 100)
        return ([t.encode("utf-8", "surrogatepass") for t in tokens],
                WpmEncoder(token_ids, unk if isinstance(unk, int) and 0 <= unk < n else None,
                           _as_bool(meta, _K + "normalizer.lowercase", True)))
    if model == "t5":
        return [t.encode("utf-8", "surrogatepass") for t in tokens], _ugm_encoder(meta, tokens, attrs, add_space_prefix)
    merges = meta.get(_K + "merges")
    if merges is None:
        raise ValueError("BPE (gpt2) tokenizer metadata has no tokenizer.ggml.merges")
    merges = merges.tolist() if isinstance(merges, np.ndarray) else list(merges)
    # The text -> id table lives in the C++ merger only.
    return PackedTexts(tokens), BpeMerger(tokens, merges, spec.ignore_merges)


def _ugm_encoder(meta: Mapping[str, Any], tokens: list[str], attrs: array, add_space_prefix: bool) -> UgmEncoder:
    n = len(tokens)
    scores = _number_array(meta, _K + "scores", n, np.float32)
    if scores is None:
        raise ValueError("Unigram (t5) tokenizer metadata has no tokenizer.ggml.scores")
    unk = _scalar(meta, _K + "unknown_token_id", 2)
    if isinstance(unk, bool) or not isinstance(unk, int) or not 0 <= unk < n:
        raise ValueError(f"tokenizer.ggml.unknown_token_id {unk!r} is not a token of the {n}")
    charsmap = meta.get(_K + "precompiled_charsmap")
    if charsmap is not None:
        try:
            charsmap = np.asarray(charsmap).astype(np.uint8, casting="unsafe").tobytes()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"tokenizer.ggml.precompiled_charsmap must be a byte array: {exc}") from None
    normal = ((np.frombuffer(attrs, np.uint16) & _NORMAL) != 0).tolist()
    return UgmEncoder(tokens, scores, normal, unk, charsmap, add_space_prefix)


def _token_attrs(meta: Mapping[str, Any], n: int) -> array:
    """TokenAttr bits per id from tokenizer.ggml.token_type (all NORMAL when absent)."""
    types = _number_array(meta, _K + "token_type", n, np.int64)
    if types is None:
        return array("H", [_NORMAL]) * n
    bits = _TYPE_TO_ATTR[np.where((types >= 0) & (types < 7), types, 0)]
    return array("H", bits.astype(np.uint16).tobytes())


def load_vocab(meta: Mapping[str, Any]) -> VocabData:
    """Interpret GGUF ``tokenizer.*`` metadata the way llama.cpp's vocabulary loader does."""
    model = _scalar(meta, _K + "model")
    if model not in ("llama", "gpt2", "bert", "t5"):
        raise ValueError(f"unsupported tokenizer.ggml.model {model!r} (supported: llama, gpt2, bert, t5)")
    pre = _scalar(meta, _K + "pre", "") or ""
    spec = pre_tokenizer_spec(pre) if model == "gpt2" else None
    tokens = _token_list(meta)
    n = len(tokens)
    special = _read_special_ids(meta, model, n, spec)
    if model == "llama":
        add_bos, add_space_prefix, clean_spaces = True, True, False
    elif model == "t5":
        add_bos, add_space_prefix, clean_spaces = False, True, False
    elif model == "bert":
        add_bos, add_space_prefix, clean_spaces = True, False, True
    else:
        add_bos, add_space_prefix, clean_spaces = spec.add_bos, False, spec.clean_spaces
    add_space_prefix = _as_bool(meta, _K + "add_space_prefix", add_space_prefix)
    add_bos = _as_bool(meta, _K + "add_bos_token", add_bos)
    add_eos = _as_bool(meta, _K + "add_eos_token", model in ("bert", "t5"))
    add_sep = _as_bool(meta, _K + "add_sep_token", False)
    for flag, name, key in ((add_bos, "bos", "add_bos_token"), (add_eos, "eos", "add_eos_token"),
                            (add_sep, "sep", "add_sep_token")):
        if flag and special[name] is None:
            raise ValueError(f"{_K + key} is true, but {name} token id is not set")
    attrs = _token_attrs(meta, n)
    texts, encoder = _texts_and_encoder(meta, model, tokens, spec, attrs, add_space_prefix)
    _auto_detect_specials(special, encoder.token_id, attrs)
    eog = _end_of_generation(special, encoder.token_id, texts, attrs)
    candidates = np.flatnonzero(np.frombuffer(attrs, np.uint16) & _SPECIAL_MASK).tolist()
    cache = sorted(candidates, key=lambda i: (-len(texts[i]), i))
    vd = VocabData(model=model, pre=pre, tokens=texts, attrs=attrs, special=special,
                   add_bos=add_bos, add_eos=add_eos, add_sep=add_sep, add_space_prefix=add_space_prefix,
                   clean_spaces=clean_spaces, pre_spec=spec, encoder=encoder, eog_ids=eog,
                   special_cache=cache)
    _apply_name_fixups(meta, vd)
    return vd
