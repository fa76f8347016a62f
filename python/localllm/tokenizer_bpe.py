"""Byte-level BPE merging (``tokenizer.ggml.model == "gpt2"``) on the `tokenizers` library.

Words come pre-split by :mod:`localllm.tokenizer_pretok` and already spelled byte-level; the
Rust BPE model then merges each word by lowest merge rank first, leftmost on ties, which is
llama.cpp's ``llm_tokenizer_bpe_session`` rule.  Merges are given as llama.cpp reads them: a
merge line is split at its first space after the first character, and a repeated pair keeps
its first rank.

The text -> id table lives only in the Rust model: a Python dict of it would cost ~10 MB more
for a 151k-token vocabulary.
"""
from __future__ import annotations

import operator
from collections.abc import Iterable
from itertools import repeat

from tokenizers import Tokenizer as _HfTokenizer
from tokenizers import models as _hf_models

__all__ = ["BpeMerger", "parse_merges"]


def parse_merges(merges: Iterable[str], vocabulary: Iterable[str] = ()) -> list[tuple[str, str]]:
    """(left, right) pairs in rank order; the first occurrence of a repeated pair wins.

    A side that is a ``vocabulary`` text is that str object itself, not a new copy: the list of
    a 151k-merge vocabulary then holds ~20 MB less while it exists.
    """
    lines = _unique_lines(merges)
    shared = dict(zip(vocabulary, vocabulary)).get
    sides = _split_simple_lines(lines)
    if sides is not None:
        shared_sides = iter(list(map(shared, sides, sides)))
        return list(zip(shared_sides, shared_sides))
    pairs: list[tuple[str, str]] = []
    for line in lines:
        cut = line.find(" ", 1)  # llama.cpp: the first space after the first character
        if cut > 0 and cut + 1 < len(line):
            left, right = line[:cut], line[cut + 1:]
            pairs.append((shared(left, left), shared(right, right)))
    return pairs


def _split_simple_lines(lines: list[str]) -> list[str] | None:
    """[left0, right0, left1, ...] when every line is "left right" with exactly one space, no
    newline and non-empty sides (byte-level vocabularies spell a space "Ġ"), split in C rather
    than line by line (0.05 s instead of 0.2 s for 151k merges); None otherwise."""
    joined = "\n".join(lines)
    if (joined.count(" ") != len(lines) or joined.count("\n") != len(lines) - 1
            or not all(map(operator.contains, lines, repeat(" ")))
            or joined.startswith(" ") or joined.endswith(" ") or "\n " in joined or " \n" in joined):
        return None
    return joined.replace(" ", "\n").split("\n")


def _unique_lines(merges: Iterable[str]) -> list[str]:
    lines = list(dict.fromkeys(merges))  # same line twice = same pair; keep the first rank
    if set(map(type, lines)) - {str}:
        raise ValueError("tokenizer.ggml.merges must hold only strings")
    return lines


class BpeMerger:
    """Merges pre-split byte-level words into token ids."""

    def __init__(self, token_to_id: dict[str, int], merge_lines: Iterable[str],
                 ignore_merges: bool) -> None:
        """``token_to_id``: text -> id (the first id if repeated); ``merge_lines``:
        tokenizer.ggml.merges as stored ("left right"); ``ignore_merges``: a word that is a
        token is emitted whole (llama.cpp, llama3)."""
        merges = parse_merges(merge_lines, token_to_id)
        try:
            model = _hf_models.BPE(vocab=token_to_id, merges=merges, ignore_merges=ignore_merges)
        except Exception:  # a merge naming text outside the vocabulary: keep the usable ones
            usable = [(a, b) for a, b in merges
                      if a in token_to_id and b in token_to_id and a + b in token_to_id]
            model = _hf_models.BPE(vocab=token_to_id, merges=usable, ignore_merges=ignore_merges)
        self._hf = _HfTokenizer(model)

    def token_id(self, text: str) -> int | None:
        """Id of the token whose text is exactly ``text``, else None."""
        try:
            return self._hf.token_to_id(text)
        except UnicodeEncodeError:  # lone surrogates: never a key of the Rust (UTF-8) table
            return None

    def encode_words(self, words: list[str]) -> list[int]:
        """Concatenated ids of the byte-level ``words`` (each merged on its own)."""
        if not words:
            return []
        return self._hf.encode(words, is_pretokenized=True, add_special_tokens=False).ids
