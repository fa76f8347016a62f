"""SentencePiece-style (``tokenizer.ggml.model == "llama"``) tokenization as llama.cpp does it.

llama.cpp's ``llm_tokenizer_spm`` does not run SentencePiece: it starts from one symbol per code
point and repeatedly merges the adjacent pair whose concatenation is a vocabulary token with
the highest score (ties: leftmost pair first), until no pair forms a token.  Symbols that are
not tokens at the end fall back to ``<0xNN>`` byte tokens.  Spaces must already be escaped to
U+2581 by the caller.

A pair can only merge into a vocabulary token, so wherever no token contains the two adjacent
characters, no symbol can ever span that boundary: the text is cut there and the pieces are
tokenized independently (and cached), which gives the same result far faster on long text.

The vocabulary table is keyed by UTF-8 ``bytes`` (half the memory of ``str`` keys for a
262k-token vocabulary) and the merge loop works on UTF-8 symbols; UTF-8 encoding commutes
with concatenation, so the merges are the same as on code points.
"""
from __future__ import annotations

import heapq
from array import array

import numpy as np

__all__ = ["SpmEncoder"]

_CACHE_LIMIT = 1 << 16  # pieces kept in the per-encoder cache
_UTF8_CACHE_LIMIT = 1 << 12  # characters kept in _UTF8_OF
_CUT_CHARS = "\u2581"   # candidate cut points: before each escaped space
_CUT_UTF8 = _CUT_CHARS.encode("utf-8")


class _Utf8Of(dict):
    """Code point -> its UTF-8 bytes, filled on first use: a piece's symbols come from here
    twice as fast as from one encode call per character."""

    def __missing__(self, ch: str) -> bytes:
        if len(self) >= _UTF8_CACHE_LIMIT:
            self.clear()  # bounded, whatever mix of scripts comes in
        value = self[ch] = ch.encode("utf-8", "surrogatepass")
        return value


_UTF8_OF = _Utf8Of()


class SpmEncoder:
    """Greedy best-score bigram merging over a scored vocabulary (llama.cpp's SPM session)."""

    def __init__(self, token_ids: dict[bytes, int], scores: np.ndarray) -> None:
        """``token_ids``: UTF-8 text -> id; ``scores``: float32 per id."""
        self._token_ids = token_ids
        # Negated, so the min-heap pops the best score first; float32 as in the GGUF (1 MB for
        # 262k tokens where a list of floats costs 8), read back exactly as Python floats.
        self._neg_scores = array("f", np.negative(scores, dtype=np.float32).tobytes())
        self._byte_ids: list[int | None] | None = None
        self._cache: dict[str, list[int]] = {}
        self._unsafe_cuts: set[str] | None = None

    def token_id(self, text: str) -> int | None:
        """Id of the token whose text is exactly ``text``, else None."""
        return self._token_ids.get(text.encode("utf-8", "surrogatepass"))

    def _byte_token(self, byte: int) -> int:
        """Id of the <0xNN> token (or the one-character token) for a raw byte (byte fallback)."""
        if self._byte_ids is None:
            lookup = self._token_ids.get
            self._byte_ids = [lookup(f"<0x{b:02X}>".encode(),
                                     lookup(bytes((b,))) if b < 128 else None)
                              for b in range(256)]
        tid = self._byte_ids[byte]
        if tid is None:
            raise ValueError(f"vocabulary has no byte token for 0x{byte:02X} "
                             "(needed for a character outside the vocabulary)")
        return tid

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
        for token in self._token_ids:
            pos = token.find(_CUT_UTF8, 1)
            while pos != -1:
                unsafe.add(token[:pos].decode("utf-8", "surrogatepass")[-1])
                pos = token.find(_CUT_UTF8, pos + 1)
        return unsafe

    def _encode_piece(self, text: str) -> list[int]:
        """llama.cpp's merge loop on one piece: symbols are code points, merged right-into-left."""
        n = len(text)
        if n == 0:
            return []
        lookup = self._token_ids.get
        neg_scores = self._neg_scores
        # symbols[i]: UTF-8 of symbol i (b'' once merged away); sizes below are in bytes
        symbols = list(map(_UTF8_OF.__getitem__, text))
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        # heap entries: (-score, left, right, merged size); max score first, then leftmost.
        heap: list[tuple[float, int, int, int]] = []
        for i in range(n - 1):
            pair = symbols[i] + symbols[i + 1]
            tid = lookup(pair)
            if tid is not None:
                heap.append((neg_scores[tid], i, i + 1, len(pair)))
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
            symbols[right] = b""
            after = nxt[right]
            nxt[left] = after
            if after >= 0:
                prev[after] = left
            before = prev[left]
            if before >= 0:
                pair = symbols[before] + merged
                tid = lookup(pair)
                if tid is not None:
                    push(heap, (neg_scores[tid], before, left, len(pair)))
            if after >= 0:
                pair = merged + symbols[after]
                tid = lookup(pair)
                if tid is not None:
                    push(heap, (neg_scores[tid], left, after, len(pair)))
        return self._resegment(symbols, nxt)

    def _resegment(self, symbols: list[bytes], nxt: list[int]) -> list[int]:
        """Final symbols to ids; a symbol that is not a token becomes its UTF-8 byte tokens."""
        lookup = self._token_ids.get
        out: list[int] = []
        i = 0
        while i != -1:
            text = symbols[i]
            tid = lookup(text)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(map(self._byte_token, text))
            i = nxt[i]
        return out
