"""Unigram (``tokenizer.ggml.model == "t5"``): SentencePiece Unigram vocabularies as XLM-RoBERTa
(bge-reranker, bge-m3, multilingual-e5) and T5 use them, built on the ``tokenizers`` library.

The GGUF holds the pieces, their log-probabilities (``tokenizer.ggml.scores``) and SentencePiece's
compiled normalization rules (``tokenizer.ggml.precompiled_charsmap``: NFKC and the like, as one
table). They become a ``tokenizers.Tokenizer`` the way transformers builds XLM-R's fast tokenizer:
a Unigram model over the pieces (Viterbi over the scores), the Precompiled normalizer, then
whitespace splitting and U+2581 prefixed to every word (when ``tokenizer.ggml.add_space_prefix``). Special tokens and the pair
template are the generic tokenizer's business (text/tokenizer.py, embed.py), so this encoder sees
only the plain text between special tokens.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["UgmEncoder"]

_SPACE_ESCAPE = "\u2581"


class UgmEncoder:
    """Text -> ids over one Unigram vocabulary."""

    def __init__(self, tokens: Sequence[str], scores: np.ndarray, normal: Sequence[bool], unk_id: int,
                 charsmap: bytes | None, add_space_prefix: bool) -> None:
        from tokenizers import Tokenizer, normalizers, pre_tokenizers
        from tokenizers.models import Unigram

        self._token_ids = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))
        pieces = _lattice_pieces(tokens, normal)
        model = Unigram(list(zip(pieces, (float(s) for s in scores))), unk_id=unk_id, byte_fallback=False)
        self._tok = Tokenizer(model)
        if charsmap:
            self._tok.normalizer = normalizers.Precompiled(charsmap)
        metaspace = pre_tokenizers.Metaspace(replacement=_SPACE_ESCAPE,
                                             prepend_scheme="always" if add_space_prefix else "never")
        # Whitespace runs always split words, whatever tokenizer.ggml.remove_extra_whitespaces says:
        # Hugging Face's Unigram tokenizers (XLM-R, T5) all collapse them, and llama.cpp's converter
        # fills that key from tokenizer_config's clean_up_tokenization_spaces, a decoding option.
        self._tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), metaspace])

    def token_id(self, text: str) -> int | None:
        return self._token_ids.get(text)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def _lattice_pieces(tokens: Sequence[str], normal: Sequence[bool]) -> list[str]:
    """The Unigram model's piece per id: the token's text for a normal token (the first of
    repeated texts), else a text no input can match (it holds a space, which pre-tokenizing
    removes). Only normal pieces make up plain text, as in llama.cpp's UGM matcher: <s>, </s>,
    <unk> and unused entries come from special-token parsing, never from the lattice; and the
    model needs one id per text."""
    seen: set[str] = set()
    out = []
    for i, (t, is_normal) in enumerate(zip(tokens, normal)):
        if not is_normal or t in seen:
            t = f" unmatched {i}"
        seen.add(t)
        out.append(t)
    return out
