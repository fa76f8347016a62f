"""Sampling parameters, the native sampler factory, and stop-string matching.

The sampler itself is C++ (``localllm._core.Sampler``); it follows llama.cpp's default chain:
logit bias -> repeat / frequency / presence penalties -> top-k -> top-p -> min-p ->
temperature -> seeded categorical draw (``temperature <= 0``: greedy argmax).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from . import _core
from .structured.grammar import GrammarSpec

__all__ = ["SamplingParams", "StopMatcher", "make_sampler"]

_UINT64_LIMIT = 2**64


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class SamplingParams:
    """Per-request generation settings (defaults are llama.cpp's).

    ``top_k=0``, ``top_p=1``, ``min_p=0`` and ``repeat_penalty=1`` disable those steps;
    ``penalty_last_n=-1`` penalizes every accepted token, ``0`` none. ``logit_bias`` maps token
    ids to values added to their logits (``-inf`` bans a token). ``seed=None`` draws a random
    seed. ``stop`` lists strings that end generation (not included in the output).
    ``logprobs=None`` reports none; ``0`` the chosen token's; ``n`` also the ``n`` most likely.
    ``ignore_eos`` keeps generating past end-of-generation tokens (as vLLM's option: benchmarks
    and tests that need exactly ``max_tokens``). ``constraint`` (a `GrammarSpec` from
    `localllm.structured.compile_constraint`) restricts every drawn token to those the grammar
    allows; generation stops when the grammar is complete.
    """

    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    penalty_last_n: int = 64
    logit_bias: dict[int, float] = field(default_factory=dict)
    seed: int | None = None
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    logprobs: int | None = None
    ignore_eos: bool = False
    constraint: Optional[GrammarSpec] = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):  # OpenAI accepts a single string
            self.stop = [self.stop]

    def validate(self, n_vocab: int | None = None) -> None:
        """Raise ValueError naming the first invalid field (token ids checked when n_vocab is given)."""
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                     "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value):
                raise ValueError(f"sampling parameter {name} must be a finite number, got {value!r}")
        for name in ("top_k", "penalty_last_n", "max_tokens"):
            if not _is_int(getattr(self, name)):
                raise ValueError(f"sampling parameter {name} must be an int, got {getattr(self, name)!r}")
        if self.top_k < 0:
            raise ValueError(f"sampling parameter top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"sampling parameter top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"sampling parameter min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0.0:
            raise ValueError(f"sampling parameter repeat_penalty must be > 0, got {self.repeat_penalty}")
        if self.penalty_last_n < -1:
            raise ValueError(f"sampling parameter penalty_last_n must be >= -1, got {self.penalty_last_n}")
        if self.max_tokens < 1:
            raise ValueError(f"sampling parameter max_tokens must be >= 1, got {self.max_tokens}")
        self._validate_logit_bias(n_vocab)
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < _UINT64_LIMIT):
            raise ValueError(f"sampling parameter seed must be None or an int in [0, 2**64), got {self.seed!r}")
        if not isinstance(self.stop, list) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"sampling parameter stop must be a list of non-empty strings, got {self.stop!r}")
        if self.logprobs is not None:
            if not _is_int(self.logprobs) or self.logprobs < 0:
                raise ValueError(f"sampling parameter logprobs must be None or an int >= 0, got {self.logprobs!r}")
            if n_vocab is not None and self.logprobs > n_vocab:
                raise ValueError(f"sampling parameter logprobs must be <= n_vocab={n_vocab}, got {self.logprobs}")
        if self.constraint is not None and not isinstance(self.constraint, GrammarSpec):
            raise ValueError(f"sampling parameter constraint must be None or a GrammarSpec "
                             f"(localllm.structured.compile_constraint), got {type(self.constraint).__name__}")

    def _validate_logit_bias(self, n_vocab: int | None) -> None:
        if not isinstance(self.logit_bias, Mapping):
            raise ValueError(f"sampling parameter logit_bias must be a dict {{token: bias}}, got {self.logit_bias!r}")
        for token, bias in self.logit_bias.items():
            if not _is_int(token) or token < 0 or (n_vocab is not None and token >= n_vocab):
                limit = f"[0, {n_vocab})" if n_vocab is not None else ">= 0"
                raise ValueError(f"sampling parameter logit_bias: token {token!r} must be an int in {limit}")
            if not _is_number(bias) or math.isnan(bias) or bias == math.inf:
                raise ValueError(f"sampling parameter logit_bias: bias of token {token} must be a number "
                                 f"or -inf, got {bias!r}")


def make_sampler(params: SamplingParams, n_vocab: int) -> _core.Sampler:
    """Validate params and build the native sampler for a vocabulary of n_vocab tokens."""
    params.validate(n_vocab)
    return _core.Sampler(
        n_vocab=n_vocab,
        temperature=float(params.temperature),
        top_k=params.top_k,
        top_p=float(params.top_p),
        min_p=float(params.min_p),
        repeat_penalty=float(params.repeat_penalty),
        presence_penalty=float(params.presence_penalty),
        frequency_penalty=float(params.frequency_penalty),
        penalty_last_n=params.penalty_last_n,
        logit_bias={int(t): float(b) for t, b in params.logit_bias.items()},
        seed=params.seed,
        n_logprobs=-1 if params.logprobs is None else params.logprobs,
    )


class StopMatcher:
    """Streams generated text while cutting it at the first stop string.

    ``feed(piece)`` returns ``(text_to_emit, stopped)``. Text that might be the start of a stop
    string is held back until the following pieces decide it; when a stop string completes,
    everything before it is emitted, the stop string itself is not, and ``stopped`` is True
    (further feeds emit nothing). ``flush()`` returns the held-back text at the end of generation.

    Matching is incremental (an Aho-Corasick automaton over the stop strings): each new
    character costs O(1) amortized whatever the number of stop strings, so a request with many
    of them does not slow the engine's step for everyone. Of several matches the one starting
    first wins (ties: the stop listed first), as ``min(text.find(s))`` over the list would.
    """

    def __init__(self, stop_strings: Sequence[str]) -> None:
        if isinstance(stop_strings, str):
            stop_strings = [stop_strings]
        stops = list(stop_strings)
        for s in stops:
            if not isinstance(s, str) or not s:
                raise ValueError(f"stop strings must be non-empty str, got {s!r}")
        self._stops = stops
        self._automaton = _StopAutomaton(stops) if stops else None
        self._state = 0           # automaton node: the held text is its string
        self._held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended generation

    def feed(self, piece: str) -> tuple[str, bool]:
        """Add the next piece of generated text; return (text safe to emit now, stopped)."""
        if self.stopped:
            return "", True
        if self._automaton is None:
            return piece, False
        text = self._held + piece
        state, match = self._automaton.scan(self._state, piece, len(self._held))
        if match is not None:
            cut, index = match
            self._held, self._state = "", 0
            self.stopped = True
            self.matched = self._stops[index]
            return text[:cut], True
        self._state = state
        keep = self._automaton.depth[state]     # the longest suffix that may begin a stop string
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], False

    def flush(self) -> str:
        """Return the text still held back (generation ended without completing a stop string)."""
        held, self._held = self._held, ""
        self._state = 0
        return "" if self.stopped else held


class _StopAutomaton:
    """Aho-Corasick automaton of a list of stop strings. Node 0 is the root; a node is a prefix
    of some stop string. ``depth``: its length; ``fail``: the node of its longest proper suffix
    that is also a prefix; ``out``: (length, list index) of the longest stop string ending there
    (length 0: none)."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.goto: list[dict[str, int]] = [{}]
        self.depth = [0]
        self.out: list[tuple[int, int]] = [(0, 0)]
        self.longest = max(len(s) for s in stops)
        for index, stop in enumerate(stops):
            node = 0
            for ch in stop:
                nxt = self.goto[node].get(ch)
                if nxt is None:
                    nxt = len(self.goto)
                    self.goto[node][ch] = nxt
                    self.goto.append({})
                    self.depth.append(self.depth[node] + 1)
                    self.out.append((0, 0))
                node = nxt
            if self.out[node][0] == 0:          # a repeated stop string keeps its first index
                self.out[node] = (len(stop), index)
        self.fail = [0] * len(self.goto)
        queue = list(self.goto[0].values())
        for node in queue:                      # breadth first: a node's fail link is shallower
            for ch, child in self.goto[node].items():
                f = self.fail[node]
                while f and ch not in self.goto[f]:
                    f = self.fail[f]
                target = self.goto[f].get(ch, 0)
                self.fail[child] = target if target != child else 0
                if self.out[child][0] == 0:
                    self.out[child] = self.out[self.fail[child]]
                queue.append(child)

    def scan(self, state: int, piece: str, offset: int) -> tuple[int, tuple[int, int] | None]:
        """Feed piece from node `state` (whose string ends at text position `offset`); returns
        the new node and the earliest match as (start in text, stop index), or None."""
        goto, fail, out = self.goto, self.fail, self.out
        best: tuple[int, int] | None = None
        for j, ch in enumerate(piece, offset + 1):
            # No later match can start before one found: stop once every start is past it.
            if best is not None and j - self.longest > best[0]:
                break
            while state and ch not in goto[state]:
                state = fail[state]
            state = goto[state].get(ch, 0)
            length, index = out[state]
            if length and (best is None or (j - length, index) < best):
                best = (j - length, index)
        return state, best
