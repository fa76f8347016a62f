"""WordPiece (``tokenizer.ggml.model == "bert"``): BERT's basic tokenizer, then greedy
longest-match-first pieces, as Hugging Face's BertTokenizer (lower-casing) and llama.cpp's WPM
tokenizer do.

The vocabulary is stored as llama.cpp's converter writes it: a piece that starts a word carries
a leading U+2581, a continuation (``##x`` in the original vocabulary) is stored bare.
Basic tokenizing: control characters dropped, whitespace split, lower-cased and accents stripped
(NFD, combining marks removed) unless the vocabulary is cased (``tokenizer.ggml.normalizer.lowercase``
false, as llama.cpp's converter writes it), punctuation and CJK ideographs split off as words of
their own.
A word longer than 100 characters, or one that cannot be covered by pieces, becomes [UNK].
"""
from __future__ import annotations

import re
import unicodedata

__all__ = ["WpmEncoder"]

_WORD_START = "\u2581"
_MAX_WORD_CHARS = 100
# ASCII text's basic tokenizing in two C-level passes: its control characters (category Cc, less
# tab, newline, return) dropped, then runs of letters and digits and each punctuation mark (ASCII
# has no other category P, no accents and no CJK). One short text: a tenth of the loop's CPU.
_ASCII_CONTROLS = dict.fromkeys([*range(0, 9), 11, 12, *range(14, 32), 127])
_ASCII_WORDS = re.compile(r"[^\s!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def basic_words(text: str, lowercase: bool = True) -> list[str]:
    """BertTokenizer's basic tokenizer (lower-casing and stripping accents when `lowercase`)."""
    if text.isascii():
        text = text.translate(_ASCII_CONTROLS)
        return _ASCII_WORDS.findall(text.lower() if lowercase else text)
    chars = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch) in ("Cc", "Cf") and ch not in "\t\n\r"):
            continue
        if ch in " \t\n\r" or unicodedata.category(ch) == "Zs":
            chars.append(" ")
        elif _is_cjk(cp):
            chars.append(f" {ch} ")
        else:
            chars.append(ch)
    words: list[str] = []
    for word in "".join(chars).split():
        if lowercase:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
        current = ""
        for ch in word:
            if _is_punctuation(ch):
                if current:
                    words.append(current)
                words.append(ch)
                current = ""
            else:
                current += ch
        if current:
            words.append(current)
    return words


class WpmEncoder:
    """Text -> ids over one WordPiece vocabulary."""

    def __init__(self, token_ids: dict[str, int], unk_id: int | None, lowercase: bool = True) -> None:
        self._token_ids = token_ids
        self._unk = unk_id
        self._lowercase = lowercase
        self._longest = max((len(t) for t in token_ids), default=1)
        self._cache: dict[str, list[int]] = {}

    def token_id(self, text: str) -> int | None:
        return self._token_ids.get(text)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for word in basic_words(text, self._lowercase):
            ids = self._cache.get(word)
            if ids is None:
                ids = self._word(word)
                if len(self._cache) < 100_000:
                    self._cache[word] = ids
            out.extend(ids)
        return out

    def _word(self, word: str) -> list[int]:
        unk = [] if self._unk is None else [self._unk]
        if len(word) > _MAX_WORD_CHARS:
            return unk
        ids: list[int] = []
        start, text = 0, _WORD_START + word
        first = True
        while start < len(text):
            end = min(len(text), start + self._longest)
            found = None
            while end > start + (1 if first else 0):
                found = self._token_ids.get(text[start:end])
                if found is not None:
                    break
                end -= 1
            if found is None:
                return unk
            ids.append(found)
            start, first = end, False
        return ids
