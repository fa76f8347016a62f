"""SentencePiece-style (``tokenizer.ggml.model == "llama"``) tokenization as llama.cpp does it.

llama.cpp's ``llm_tokenizer_spm`` does not run SentencePiece: it starts from one symbol per code
point and repeatedly merges the adjacent pair whose concatenation is a vocabulary token with
the highest score (ties: leftmost pair first), until no pair forms a token.  Symbols that are
not tokens at the end fall back to ``<0xNN>`` byte tokens.  Spaces must already be escaped to
U+2581 by the caller.

A pair can only merge into a vocabulary token, so wherever no token contains the two adjacent
characters, no symbol can ever span that boundary: the text is cut there and the pieces are
tokenized independently (and cached), which gives the same result far faster on long text.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

__all__ = ["SpmEncoder"]

_CACHE_LIMIT = 1 << 16  # pieces kept in the per-encoder cache
_CUT_CHARS = "\u2581"   # candidate cut points: before each escaped space


class SpmEncoder:
    """Greedy best-score bigram merging over a scored vocabulary (llama.cpp's SPM session)."""

    def __init__(self, token_to_id: dict[str, int], scores: Sequence[float],
                 byte_token: Callable[[int], int]) -> None:
        """``byte_token(b)`` gives the id standing for raw byte ``b`` (raises if none)."""
        self._token_to_id = token_to_id
        self._scores = scores
        self._byte_token = byte_token
        self._cache: dict[str, list[int]] = {}
        self._unsafe_cuts: set[str] | None = None

    def encode(self, text: str) -> list[int]:
        """Token ids for ``text`` (spaces already escaped as U+2581)."""
        out: list[int] = []
        cache = self._cache
        for piece in self._independent_pieces(text):
            ids = cache.get(piece)
            if ids is None:
                ids = self._encode_piece(piece)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[piece] = ids
            out.extend(ids)
        return out

    def _independent_pieces(self, text: str) -> list[str]:
        """Cut ``text`` before each U+2581 that no vocabulary token can straddle."""
        if self._unsafe_cuts is None:
            self._unsafe_cuts = self._find_unsafe_cuts()
        unsafe = self._unsafe_cuts
        pieces: list[str] = []
        start = 0
        pos = text.find(_CUT_CHARS, 1)
        while pos != -1:
            if text[pos - 1] not in unsafe:
                pieces.append(text[start:pos])
                start = pos
            pos = text.find(_CUT_CHARS, pos + 1)
        pieces.append(text[start:])
        return pieces

    def _find_unsafe_cuts(self) -> set[str]:
        """Characters c such that some token contains c followed by U+2581."""
        unsafe: set[str] = set()
        for token in self._token_to_id:
            pos = token.find(_CUT_CHARS, 1)
            while pos != -1:
                unsafe.add(token[pos - 1])
                pos = token.find(_CUT_CHARS, pos + 1)
        return unsafe

    def _encode_piece(self, text: str) -> list[int]:
        """llama.cpp's merge loop on one piece: symbols are code points, merged right-into-left."""
        n = len(text)
        if n == 0:
            return []
        lookup = self._token_to_id.get
        scores = self._scores
        symbols = list(text)          # symbols[i]: current text of symbol i ('' once merged away)
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        # heap entries: (-score, left, right, merged length); max score first, then leftmost.
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            tid = lookup(symbols[i] + symbols[i + 1])
            if tid is not None:
                heap.append((-scores[tid], i, i + 1, 2))
        heapq.heapify(heap)
        push = heapq.heappush
        pop = heapq.heappop
        while heap:
            _, left, right, size = pop(heap)
            left_text = symbols[left]
            right_text = symbols[right]
            if not left_text or not right_text or len(left_text) + len(right_text) != size:
                continue  # stale: one side was merged since this pair was queued
            merged = left_text + right_text
            symbols[left] = merged
            symbols[right] = ""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            before = prev[left]
            if before >= 0:
                pair = symbols[before] + merged
                tid = lookup(pair)
                if tid is not None:
                    push(heap, (-scores[tid], before, left, len(pair)))
            if after >= 0:
                pair = merged + symbols[after]
                tid = lookup(pair)
                if tid is not None:
                    push(heap, (-scores[tid], left, after, len(pair)))
        return self._resegment(symbols, nxt)

    def _resegment(self, symbols: list[str], nxt: list[int]) -> list[int]:
        """Final symbols to ids; a symbol that is not a token becomes its UTF-8 byte tokens."""
        lookup = self._token_to_id.get
        out: list[int] = []
        i = 0
        while i != -1:
            text = symbols[i]
            tid = lookup(text)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self._byte_token(b) for b in text.encode("utf-8", "surrogatepass"))
            i = nxt[i]
        return out
