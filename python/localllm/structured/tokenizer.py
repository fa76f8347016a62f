"""The llguidance tokenizer of a model, built once from its GGUF vocabulary.

llguidance computes token masks over the bytes each token stands for, so it needs every token's
bytes (as the detokenizer writes them), which tokens are special (they never match grammar
text: llguidance marks them with a leading 0xFF byte, as its llama.cpp binding does), the
end-of-generation tokens (allowed where the grammar may end), and a tokenize function (used for
the few grammar features that need one, e.g. forced text).
"""
from __future__ import annotations

import threading
import weakref

import llguidance

from ..text.tokenizer import Tokenizer
from ..text.vocab import TokenAttr

__all__ = ["grammar_tokenizer", "special_marker_texts", "SPECIAL_PREFIX"]

SPECIAL_PREFIX = b"\xff"   # llguidance's mark of a special token's text

_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_BUILD_LOCK = threading.Lock()


class _VocabView:
    """What llguidance's TokenizerWrapper reads from a tokenizer object."""

    def __init__(self, tokenizer: Tokenizer, n_vocab: int) -> None:
        self._tokenizer = tokenizer
        eog = sorted(tokenizer.eot_ids)
        eos = tokenizer.eos_id
        self.eos_token_id = eos if eos is not None else (eog[0] if eog else 0)
        self.bos_token_id = tokenizer.bos_id
        self.tokens: list[bytes] = []
        self.special_token_ids: list[int] = []
        for t in range(n_vocab):
            self.tokens.append(self._token_bytes(t))
            if self.tokens[-1].startswith(SPECIAL_PREFIX):
                self.special_token_ids.append(t)

    def _token_bytes(self, t: int) -> bytes:
        tok = self._tokenizer
        if t >= tok.n_vocab:                     # output rows past the vocabulary: never text
            return b""
        text = tok.token_to_bytes(t)
        return SPECIAL_PREFIX + text if self._is_special(tok.token_attr(t), text) else text

    @staticmethod
    def _is_special(attr: TokenAttr, text: bytes) -> bool:
        """Control tokens, and user-defined ones written like them (<tool_call>), as llguidance's
        llama.cpp binding decides."""
        return bool(attr & TokenAttr.CONTROL or (attr & TokenAttr.USER_DEFINED and text.startswith(b"<")
                                                 and text.endswith(b">")))

    def __call__(self, text) -> list[int]:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", "replace")
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


def grammar_tokenizer(tokenizer: Tokenizer, n_vocab: int) -> llguidance.LLTokenizer:
    """The LLTokenizer of a model whose logits have n_vocab rows (at least the tokenizer's
    vocabulary); built on first use and kept as long as the tokenizer lives."""
    with _BUILD_LOCK:
        cached = _BUILT.get(tokenizer)
        if cached is not None and cached.vocab_size == n_vocab:
            return cached
        view = _VocabView(tokenizer, n_vocab)
        built = llguidance.LLTokenizer(llguidance.TokenizerWrapper(view), n_vocab=n_vocab,
                                       eos_token=sorted(tokenizer.eot_ids) or view.eos_token_id)
        _BUILT[tokenizer] = built
        return built


_TOOL_MARKERS = ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>")


def special_marker_texts(tokenizer: Tokenizer) -> frozenset:
    """The tool-call markers that are one special token in this vocabulary (a grammar names
    them as tokens: free text can then never spell them)."""
    out = set()
    for text in _TOOL_MARKERS:
        t = tokenizer.token_id(text)
        if t is not None and _VocabView._is_special(tokenizer.token_attr(t), text.encode()):
            out.add(text)
    return frozenset(out)
