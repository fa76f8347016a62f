"""Tokenizer built from GGUF metadata, token-for-token identical to llama.cpp.

Supports the two vocabulary kinds the project's models use:

* ``llama`` (SentencePiece-style, e.g. Gemma 3): best-score bigram merging with byte fallback,
  see :mod:`localllm.text.spm`;
* ``gpt2`` (byte-level BPE, e.g. SmolLM2, Qwen2.5): llama.cpp's pre-tokenizer regexes
  (:mod:`localllm.text.pretok`) and rank-ordered merges (:mod:`localllm.text.bpe`).

Encoding follows ``llama_tokenize``: special-token texts are cut out first (longest first;
user-defined tokens always, control tokens only with ``parse_special``), the remaining text
fragments are tokenized one by one, and BOS/EOS are added when ``add_special`` and the model
asks for them.  Decoding follows ``llama_detokenize`` / ``llama_token_to_piece``.
"""
from __future__ import annotations

import ctypes
import gc
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Union

from .bpe import BpeMerger
from .pretok import UNICODE_TO_BYTE, bytes_to_unicode_text, split_words
from .spm import SpmEncoder
from .ugm import UgmEncoder
from .wpm import WpmEncoder
from .vocab import TokenAttr, VocabData, load_vocab

__all__ = ["Tokenizer", "StreamDecoder", "TokenAttr"]

_SPACE_ESCAPE = "\u2581"  # SentencePiece's visible space
_SPACE_ESCAPE_UTF8 = _SPACE_ESCAPE.encode("utf-8")
_C_SPACES = " \t\n\v\f\r"  # what C's isspace() accepts (llama.cpp's lstrip/rstrip)
_RENDERED_SPECIAL = TokenAttr.CONTROL | TokenAttr.UNKNOWN
Fragment = Union[int, tuple[int, int]]  # a token id, or a (start, end) range of raw text


class Tokenizer:
    """llama.cpp-compatible tokenizer for one GGUF vocabulary.

    Build it with :meth:`from_gguf_metadata`.  Token ids are plain ``int``.
    """

    def __init__(self, vocab: VocabData) -> None:
        """Use :meth:`from_gguf_metadata`; ``vocab`` is the interpreted metadata."""
        self._v = vocab
        self._tokens = vocab.tokens
        self._attrs = vocab.attrs
        self._piece_cache: dict[int, bytes] = {}
        self._candidates: dict[bool, list[tuple[int, str, int]]] = {}
        self._spm: SpmEncoder | None = None
        self._bpe: BpeMerger | None = None
        self._text_encoder: WpmEncoder | UgmEncoder | None = None   # fragment text -> ids
        if isinstance(vocab.encoder, SpmEncoder):
            self._spm = vocab.encoder
        elif isinstance(vocab.encoder, (WpmEncoder, UgmEncoder)):
            self._text_encoder = vocab.encoder
        else:
            self._bpe = vocab.encoder
        self.chat_template: str | None = None

    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        """Build from GGUF metadata (key -> value; arrays as lists or numpy arrays)."""
        if not isinstance(meta, Mapping):
            raise TypeError(f"meta must be a mapping of GGUF keys, got {type(meta).__name__}")
        # Python's cyclic GC would run over and over on the hundreds of thousands of strings,
        # bytes and lists made here, none of which forms a cycle.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            tok = cls(load_vocab(meta))
        finally:
            if gc_was_enabled:
                gc.enable()
        _return_free_heap_pages()
        template = meta.get("tokenizer.chat_template")
        if isinstance(template, (bytes, bytearray)):
            template = bytes(template).decode("utf-8")
        tok.chat_template = template if isinstance(template, str) else None
        return tok

    # --- vocabulary facts ------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        """Number of tokens in the vocabulary."""
        return len(self._tokens)

    @property
    def model(self) -> str:
        """``"llama"`` (SentencePiece-style), ``"gpt2"`` (byte-level BPE), ``"bert"`` (WordPiece)
        or ``"t5"`` (Unigram)."""
        return self._v.model

    @property
    def bos_id(self) -> int | None:
        """Beginning-of-sequence id (None if the vocabulary has none)."""
        return self._v.special["bos"]

    @property
    def eos_id(self) -> int | None:
        """End-of-sequence id (None if the vocabulary has none)."""
        return self._v.special["eos"]

    @property
    def eot_id(self) -> int | None:
        """End-of-turn id, from metadata or recognised by its text like llama.cpp."""
        return self._v.special["eot"]

    @property
    def unk_id(self) -> int | None:
        """Unknown-token id, if any."""
        return self._v.special["unk"]

    @property
    def pad_id(self) -> int | None:
        """Padding id, if any."""
        return self._v.special["pad"]

    @property
    def eot_ids(self) -> frozenset[int]:
        """Ids that end generation (llama.cpp's EOG set: eos, eot, eom, <|im_end|>, ...)."""
        return self._v.eog_ids

    @property
    def add_bos(self) -> bool:
        """Whether encode(add_special=True) prepends BOS."""
        return self._v.add_bos

    @property
    def add_eos(self) -> bool:
        """Whether encode(add_special=True) appends EOS."""
        return self._v.add_eos

    @property
    def sep_id(self) -> int | None:
        """Separator id (None if the vocabulary has none)."""
        return self._v.special["sep"]

    @property
    def add_sep(self) -> bool:
        """Whether a text pair gets SEP after the first text's EOS (XLM-R: <s> A </s></s> B </s>)."""
        return self._v.add_sep

    @property
    def bos_token(self) -> str:
        """Text of the BOS token ('' if none), e.g. for chat templates."""
        return self._text(self.bos_id) if self.bos_id is not None else ""

    @property
    def eos_token(self) -> str:
        """Text of the EOS token ('' if none), e.g. for chat templates."""
        return self._text(self.eos_id) if self.eos_id is not None else ""

    def is_eog(self, token_id: int) -> bool:
        """True if ``token_id`` ends generation."""
        return token_id in self._v.eog_ids

    def token_text(self, token_id: int) -> str:
        """The raw vocabulary string of a token (byte-level / U+2581 spelling as stored)."""
        return self._text(self._check_id(token_id))

    def _text(self, token_id: int) -> str:
        return self._tokens[token_id].decode("utf-8", "surrogatepass")

    def token_attr(self, token_id: int) -> TokenAttr:
        """llama.cpp's attribute bits for a token (after its text-based fix-ups)."""
        return TokenAttr(self._attrs[self._check_id(token_id)])

    def token_id(self, text: str) -> int | None:
        """Id of the token whose vocabulary string is exactly ``text``, else None."""
        return self._v.token_id(text)

    # --- encoding --------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids for ``text`` exactly as llama.cpp's ``llama_tokenize``.

        ``add_special``: add BOS/EOS where the model's metadata says so.
        ``parse_special``: also turn control-token texts (``<|im_start|>``, ``<bos>``) into
        those tokens; user-defined tokens are always matched.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be str, got {type(text).__name__}")
        v = self._v
        out: list[int] = []
        if add_special and v.add_bos:
            out.append(v.special["bos"])
        fragments = self._partition(text, parse_special) if text else []
        if self._spm is not None:
            self._encode_spm(text, fragments, out)
        elif self._text_encoder is not None:
            for frag in fragments:
                out.extend([frag] if isinstance(frag, int) else self._text_encoder.encode(text[frag[0]:frag[1]]))
        else:
            for frag in fragments:
                if isinstance(frag, int):
                    out.append(frag)
                else:
                    words = split_words(text[frag[0]:frag[1]], v.pre_spec.regexes)
                    out.extend(self._bpe.encode_words([bytes_to_unicode_text(w) for w in words]))
        if add_special and v.add_eos:
            out.append(v.special["eos"])
        return out

    def _encode_spm(self, text: str, fragments: list[Fragment], out: list[int]) -> None:
        """SPM fragments; a space is prefixed to text that starts or follows a special token."""
        prev_special = True
        for frag in fragments:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            piece = text[frag[0]:frag[1]]
            if self._v.add_space_prefix and prev_special:
                piece = " " + piece
            out.extend(self._spm.encode(piece.replace(" ", _SPACE_ESCAPE)))
            prev_special = False

    def _partition(self, text: str, parse_special: bool) -> list[Fragment]:
        """llama.cpp's tokenizer_st_partition: cut special-token texts out, longest first."""
        fragments: list[Fragment] = [(0, len(text))]
        for tid, token, attr in self._special_candidates(parse_special):
            if token not in text:
                continue
            refined: list[Fragment] = []
            for frag in fragments:
                if isinstance(frag, int):
                    refined.append(frag)
                else:
                    self._split_fragment(text, frag, tid, token, attr, refined)
            fragments = refined
        return fragments

    def _special_candidates(self, parse_special: bool) -> list[tuple[int, str, int]]:
        """(id, text, attr) of the tokens _partition looks for, longest text first."""
        cached = self._candidates.get(parse_special)
        if cached is None:
            skip = 0 if parse_special else int(_RENDERED_SPECIAL)
            cached = [(tid, self._text(tid), self._attrs[tid])
                      for tid in self._v.special_cache if not self._attrs[tid] & skip]
            self._candidates[parse_special] = cached
        return cached

    @staticmethod
    def _split_fragment(text: str, frag: tuple[int, int], tid: int, token: str, attr: int,
                        out: list[Fragment]) -> None:
        """Cut every occurrence of ``token`` out of one raw fragment (with lstrip/rstrip)."""
        start, end = frag
        while True:
            match = text.find(token, start, end)
            if match < 0:
                out.append((start, end))
                return
            left_end = match
            if attr & TokenAttr.LSTRIP:
                while left_end > start and text[left_end - 1] in _C_SPACES:
                    left_end -= 1
            if left_end > start:
                out.append((start, left_end))
            out.append(tid)
            start = match + len(token)
            if attr & TokenAttr.RSTRIP:
                while start < end and text[start] in _C_SPACES:
                    start += 1
            if start >= end:
                return

    # --- decoding --------------------------------------------------------------------------
    def _check_id(self, token_id: int) -> int:
        if not isinstance(token_id, int) or isinstance(token_id, bool):
            try:
                token_id = int(token_id)  # numpy integers
            except (TypeError, ValueError):
                raise TypeError(f"token id must be an int, got {token_id!r}") from None
        if not 0 <= token_id < len(self._tokens):
            raise ValueError(f"token id {token_id} out of range [0, {len(self._tokens)})")
        return token_id

    def token_to_bytes(self, token_id: int, special: bool = True) -> bytes:
        """The raw bytes a token stands for (llama_token_to_piece).

        Control/unknown tokens give their text when ``special`` (the default), else b"";
        user-defined tokens always give their text; unused tokens give b"".
        """
        token_id = self._check_id(token_id)
        if not special and self._attrs[token_id] & _RENDERED_SPECIAL:
            return b""
        piece = self._piece_cache.get(token_id)
        if piece is None:
            piece = self._piece(token_id)
            self._piece_cache[token_id] = piece
        return piece

    def _piece(self, token_id: int) -> bytes:
        """llama_token_to_piece(special=True) for one token, uncached."""
        attr = self._attrs[token_id]
        utf8 = self._tokens[token_id]
        if attr & (_RENDERED_SPECIAL | TokenAttr.USER_DEFINED):
            return utf8
        if attr & TokenAttr.NORMAL:
            if self._v.model in ("llama", "bert", "t5"):
                return utf8.replace(_SPACE_ESCAPE_UTF8, b" ")
            return _byte_level_decode(utf8.decode("utf-8", "surrogatepass"))
        if attr & TokenAttr.BYTE:
            return bytes([int(self._text(token_id)[3:5], 16)])
        return b""  # unused / undefined tokens render as nothing

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        """Raw bytes of ``ids`` as llama_detokenize(remove_special=unparse_special=...)."""
        ids = [self._check_id(t) for t in ids]
        v = self._v
        remove_space = v.add_space_prefix
        if skip_special and v.add_bos and ids and ids[0] == v.special["bos"]:
            remove_space = False
            ids = ids[1:]
        if skip_special and v.add_eos and ids and ids[-1] == v.special["eos"]:
            ids = ids[:-1]
        pieces = [self.token_to_bytes(t, special=not skip_special) for t in ids]
        if remove_space and pieces and pieces[0].startswith(b" "):
            pieces[0] = pieces[0][1:]
        data = b"".join(pieces)
        return _clean_up_spaces(data) if v.clean_spaces else data

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text of ``ids``; control tokens render as their text unless ``skip_special``.

        Invalid UTF-8 (a multi-byte character cut by the id list) becomes U+FFFD.
        """
        return self.decode_bytes(ids, skip_special).decode("utf-8", "replace")


def _return_free_heap_pages() -> None:
    """Give the pages of freed malloc chunks back to the OS (glibc's malloc_trim; else no-op).

    Building the vocabulary allocates and frees tens of MB of short-lived chunks (the BPE
    model's build tables, Python list and dict buffers) in between long-lived ones; glibc keeps
    such holes resident, and only trims the top of its heaps by itself.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # a libc other than glibc (musl has no malloc_trim)
        pass


_TO_LATIN1 = {ord(ch): byte for ch, byte in UNICODE_TO_BYTE.items()}   # str.translate tables
_DROP_KNOWN = dict.fromkeys(_TO_LATIN1)


def _byte_level_decode(text: str) -> bytes:
    """GPT-2 byte-level spelling back to bytes; unknown characters as llama.cpp marks them."""
    if not text.translate(_DROP_KNOWN):     # every character is a byte's spelling: two C passes
        return text.translate(_TO_LATIN1).encode("latin-1")
    out = bytearray()
    for ch in text:
        byte = UNICODE_TO_BYTE.get(ch)
        if byte is not None:
            out.append(byte)
        else:
            utf8 = ch.encode("utf-8", "surrogatepass").hex().encode()
            out += b"[UNK_BYTE_0x" + utf8 + text.encode("utf-8", "surrogatepass") + b"]"
    return bytes(out)


def _clean_up_spaces(data: bytes) -> bytes:
    """llama_detokenize's clean_spaces passes, in place on a copy (same quirks)."""
    text = bytearray(data)
    # pass 1: " ?", " !", " .", " ," lose the space
    total = 1 if text else 0
    for i in range(1, len(text)):
        x = text[i]
        if text[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        text[total] = x
        total += 1
    del text[total:]
    # pass 2: " ' " loses both spaces
    total, i, n = (1 if text else 0), 1, len(text)
    while i < n:
        x = text[i]
        if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            total -= 1
            i += 1
            text[i] = 0
        text[total] = x
        total += 1
        i += 1
    del text[total:]
    # pass 3: " 's", " 'm", " 're", " 've" lose the space
    total, n = (1 if text else 0), len(text)
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = text[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < n and bytes((x1, text[i + 2])) in (b"re", b"ve"):
                total -= 1
        text[total] = x
        total += 1
    del text[total:]
    return bytes(text)


class StreamDecoder:
    """Incremental detokenizer: returns only complete UTF-8 text, holding back a partial
    multi-byte character until the tokens that complete it arrive."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        """``skip_special``: control tokens produce no text (else they render as text)."""
        self._tok = tokenizer
        self._special = not skip_special
        self._pending = b""

    def feed(self, token_id: int) -> str:
        """Add one token; return the text that is now complete (possibly '')."""
        data = self._pending + self._tok.token_to_bytes(token_id, special=self._special)
        cut = _complete_prefix_len(data)
        self._pending = data[cut:]
        return data[:cut].decode("utf-8", "replace")

    def flush(self) -> str:
        """Whatever is still held back, with U+FFFD for an unfinished character."""
        data, self._pending = self._pending, b""
        return data.decode("utf-8", "replace")


def _complete_prefix_len(data: bytes) -> int:
    """Length of ``data`` without a trailing, still-incomplete UTF-8 sequence."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        byte = data[n - back]
        if byte & 0xC0 == 0x80:
            continue  # continuation byte: keep looking for the lead byte
        if byte >= 0xF0:
            need = 4
        elif byte >= 0xE0:
            need = 3
        elif byte >= 0xC0:
            need = 2
        else:
            return n  # ASCII: nothing pending
        return n - back if back < need else n
    return n
