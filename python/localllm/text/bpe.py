"""Byte-level BPE merging (``tokenizer.ggml.model == "gpt2"``), on the C++ table of
``csrc/text/bpe.cpp``.

Words come pre-split by :mod:`localllm.text.pretok` and already spelled byte-level; each is
merged on its own by lowest merge rank first, leftmost on ties, which is llama.cpp's
``llm_tokenizer_bpe_session`` rule.  Merges are read as llama.cpp reads them: a merge line is
split at its first space after the first character, and a repeated pair keeps its first rank.

The table was first built on the `tokenizers` library (same results on every reference row and
the GPL corpus); its constructor and the Python around it took ~0.55 s for a 151k-merge
vocabulary, more than llama.cpp's whole model load, where the C++ table takes 0.08 s.
"""
from __future__ import annotations

from .. import _core

__all__ = ["BpeMerger"]


# tokens: the vocabulary texts by id (the first id wins if repeated); merges:
# tokenizer.ggml.merges as stored ("left right"); ignore_merges: a word that is a token is
# emitted whole (llama.cpp, llama3). encode_words(words) -> concatenated ids of the byte-level
# words, each merged on its own; token_id(text) -> id or None.
BpeMerger = _core.BpeMerges
