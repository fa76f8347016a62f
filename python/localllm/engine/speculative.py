"""Speculative decoding: proposers that guess a sequence's next tokens for the engine to verify.

A proposer sets ``seq.draft`` (up to a limit per sequence) before a step; the engine feeds the
sequence's last token plus the draft in one forward, gets logits for every one of those rows,
and keeps the drafted tokens its own sampling agrees with (`Engine._on_draft_logits`): greedy
accepts while the target's argmax equals the draft; sampling applies the rejection rule of
Leviathan et al. / Chen et al. (`_core.Sampler.verify`). The rejected tokens' K/V is dropped by
truncating the block table (`Scheduler.accept_draft`).

Both proposers here are deterministic (a draft is a function of the tokens so far), so the
proposal distribution q is a point mass on each drafted token: the rejection rule then accepts
token d with probability p(d) and on rejection resamples from p with d removed.

- `NgramProposer` (prompt lookup, no second model): the longest n-gram (``ngram_max`` down to
  ``ngram_min`` tokens) ending the sequence that occurred earlier in its prompt or output; the
  draft is what followed its most recent earlier occurrence.
- `DraftModelProposer`: a smaller model with the same vocabulary, greedy, on its own paged KV
  cache with its own prefix cache (a prompt seen before is not prefilled by the draft again);
  drafting stops when its top probability falls under ``p_min``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence as Seq

import numpy as np

from .kv_blocks import NULL_BLOCK, BlockKey, BlockPool, BlockTable, OutOfBlocks, prefix_keys, reusable_blocks
from .scheduler import Sequence

__all__ = ["SpecConfig", "NgramProposer", "DraftModelProposer", "check_same_vocab", "SPEC_MODES"]

SPEC_MODES = ("ngram", "draft")


@dataclass
class SpecConfig:
    """How to speculate (llama.cpp's option names where they exist).

    mode: "ngram" (prompt lookup) or "draft" (a draft model, `draft_model` its GGUF path).
    draft_max: most tokens drafted per step (llama.cpp's --draft-max, default 16).
    draft_min: a shorter draft is not verified at all (--draft-min, default 0).
    draft_p_min: the draft model stops drafting when its top probability is below this
        (--draft-p-min, default 0.75).
    ngram_min / ngram_max: sizes of the n-grams n-gram lookup matches (longest first).
    """
    mode: str = "ngram"
    draft_model: Optional[str] = None
    draft_max: int = 16
    draft_min: int = 0
    draft_p_min: float = 0.75
    ngram_min: int = 2
    ngram_max: int = 4

    def validate(self) -> None:
        if self.mode not in SPEC_MODES:
            raise ValueError(f"speculative mode must be one of {', '.join(SPEC_MODES)}, got {self.mode!r}")
        if self.mode == "draft" and not self.draft_model:
            raise ValueError("speculative mode 'draft' needs a draft model (--draft-model FILE)")
        if self.mode == "ngram" and self.draft_model:
            raise ValueError("a draft model was given with speculative mode 'ngram'")
        if not (isinstance(self.draft_max, int) and self.draft_max >= 1):
            raise ValueError(f"draft_max must be an int >= 1, got {self.draft_max!r}")
        if not (isinstance(self.draft_min, int) and 0 <= self.draft_min <= self.draft_max):
            raise ValueError(f"draft_min must be an int in [0, draft_max={self.draft_max}], got {self.draft_min!r}")
        if not 0.0 <= self.draft_p_min <= 1.0:
            raise ValueError(f"draft_p_min must be in [0, 1], got {self.draft_p_min!r}")
        if not (isinstance(self.ngram_min, int) and isinstance(self.ngram_max, int)
                and 1 <= self.ngram_min <= self.ngram_max):
            raise ValueError(f"n-gram sizes must satisfy 1 <= ngram_min <= ngram_max, got "
                             f"{self.ngram_min!r}, {self.ngram_max!r}")


# ---- n-gram lookup ----
@dataclass
class _NgramIndex:
    """For each n: n-gram -> the latest start p with tokens[p:p+n] followed by a token; and
    the sequence's adaptive draft length."""
    last: dict[int, dict[tuple, int]]
    indexed: dict[int, int]          # start positions indexed so far, per n
    cap: int = 0                     # most tokens the next draft may have
    pending: tuple[int, list[int]] | None = None   # (sequence length, draft) of the last draft


class NgramProposer:
    """Prompt lookup decoding: propose what followed the last earlier occurrence of the
    sequence's final n-gram. Its index grows with the sequence (tokens are never removed).

    Each sequence's draft length adapts to what its last draft earned: after a draft the
    target accepted whole, the cap doubles (up to draft_max); after one it cut short at a
    accepted tokens, the cap halves, but not below a + 1. Text with nothing to copy soon
    verifies 1-token drafts (2 rows, about the cost of one) instead of draft_max + 1 rows a
    step, and a run of copying grows back to draft_max in a few steps. Which tokens are
    emitted does not change: only what is verified."""

    def __init__(self, config: SpecConfig):
        self.draft_max, self.draft_min = config.draft_max, config.draft_min
        self.sizes = list(range(config.ngram_max, config.ngram_min - 1, -1))

    def prefill(self, chunks: Seq[tuple[Sequence, int]]) -> None:
        """Nothing to do: the n-gram index is built from the sequence's tokens as it drafts."""

    def propose(self, seqs: Seq[Sequence], limits: Seq[int]) -> None:
        for seq, limit in zip(seqs, limits):
            draft = self.lookup(seq, min(limit, self._cap(seq)))
            seq.draft = draft if len(draft) >= max(1, self.draft_min) else []
            seq.spec_state.pending = (len(seq.tokens), list(seq.draft)) if seq.draft else None

    def _cap(self, seq: Sequence) -> int:
        """The sequence's draft cap, updated from how much of its last draft was accepted (the
        tokens appended since are the target's: the accepted prefix, then its own token)."""
        index = self._index(seq)
        if index.cap == 0:
            index.cap = self.draft_max
        if index.pending is not None:
            start, draft = index.pending
            after = seq.tokens[start:start + len(draft)]
            accepted = next((i for i, (a, b) in enumerate(zip(after, draft)) if a != b), len(after))
            full = accepted == len(draft)
            index.cap = min(self.draft_max, 2 * index.cap) if full else max(accepted + 1, index.cap // 2)
            index.pending = None
        return index.cap

    def _index(self, seq: Sequence) -> _NgramIndex:
        if not (isinstance(seq.spec_state, _NgramIndex) and list(seq.spec_state.last) == self.sizes):
            seq.spec_state = _NgramIndex({n: {} for n in self.sizes}, {n: 0 for n in self.sizes})
        return seq.spec_state

    def lookup(self, seq: Sequence, k: int) -> list[int]:
        index = self._index(seq)
        tokens, length = seq.tokens, len(seq.tokens)
        for n in self.sizes:
            table = index.last[n]
            for p in range(index.indexed[n], length - n):   # n-grams with a token after them
                table[tuple(tokens[p:p + n])] = p
            index.indexed[n] = max(index.indexed[n], length - n)
        if k <= 0:
            return []
        for n in self.sizes:
            if length <= n:
                continue
            p = index.last[n].get(tuple(tokens[length - n:]))
            if p is not None:
                return list(tokens[p + n:p + n + k])
        return []

    def release(self, seq: Sequence) -> None:
        seq.spec_state = None


# ---- draft model ----
def check_same_vocab(target_meta: dict, draft_meta: dict, target_name: str, draft_name: str) -> None:
    """Raise ValueError unless every draft token id means the same token text in the target."""
    t_tokens = target_meta.get("tokenizer.ggml.tokens") or []
    d_tokens = draft_meta.get("tokenizer.ggml.tokens") or []
    t_model, d_model = target_meta.get("tokenizer.ggml.model"), draft_meta.get("tokenizer.ggml.model")
    if t_model != d_model:
        raise ValueError(f"draft model {draft_name} has a {d_model!r} tokenizer, the target "
                         f"{target_name} a {t_model!r} one: they do not share a vocabulary")
    if len(d_tokens) > len(t_tokens):
        raise ValueError(f"draft model {draft_name} has {len(d_tokens)} tokens, more than the "
                         f"target {target_name} ({len(t_tokens)}): incompatible vocabularies")
    for i, (a, b) in enumerate(zip(d_tokens, t_tokens)):
        if a != b:
            raise ValueError(f"draft model {draft_name} and target {target_name} differ at token id "
                             f"{i} ({a!r} vs {b!r}): incompatible vocabularies")


@dataclass
class _DraftSeq:
    """One sequence in the draft model's cache: fed[i] has K/V at position i."""
    table: BlockTable
    fed: list[int] = field(default_factory=list)
    confirmed: int = 0                # fed[:confirmed] is known to equal the sequence's tokens
    keys: list[BlockKey] = field(default_factory=list)   # prefix keys of fed's full blocks


class DraftModelProposer:
    """Greedy drafts from a small model sharing the target's vocabulary, batched over the
    sequences that speculate: one forward catches each up on its new tokens (the prompt, then
    the tokens accepted since), then one forward per drafted position.

    The draft's cache is a prefix cache like the target's (`kv_blocks`): full blocks of
    confirmed tokens are registered under the same chained keys, and a new sequence starts from
    the longest cached prefix of its tokens, so a repeated system prompt or a chat's earlier
    turns cost the draft nothing again. Drafted tokens are never registered: their block is
    registered once the target has accepted every token in it."""

    def __init__(self, model, config: SpecConfig, max_batch_tokens: int):
        self.model = model
        self.draft_max, self.draft_min, self.p_min = config.draft_max, config.draft_min, config.draft_p_min
        self.max_batch_tokens = max_batch_tokens
        self.pool = BlockPool(model.kv_blocks, model.kv_block_size)
        self.n_vocab = model.hparams["n_vocab"]

    def release(self, seq: Sequence) -> None:
        st: Optional[_DraftSeq] = seq.spec_state
        if st is not None:
            st.table.free()
        seq.spec_state = None

    def _state(self, seq: Sequence) -> _DraftSeq:
        """The sequence's draft state, cut back to the tokens it still shares with it."""
        st: Optional[_DraftSeq] = seq.spec_state
        if st is None:
            st = seq.spec_state = self._start(seq)
        n = st.confirmed
        while n < len(st.fed) and n < len(seq.tokens) and st.fed[n] == seq.tokens[n]:
            n += 1
        del st.fed[n:]
        st.table.truncate(n)
        self._confirm(st, n)
        return st

    def _start(self, seq: Sequence) -> _DraftSeq:
        """A new draft state holding the longest cached prefix of the sequence's tokens (not the
        last token's block: its logits are what the first draft starts from)."""
        bs = self.pool.block_size
        eligible = reusable_blocks(len(seq.tokens), bs)
        keys = prefix_keys(seq.tokens[:eligible * bs], bs)
        table = BlockTable(self.pool)
        hits = table.match_prefix(keys, seq.tokens, eligible)
        self.pool.record_lookup(eligible, hits)
        n = hits * bs
        return _DraftSeq(table, list(seq.tokens[:n]), n, keys[:hits])

    def _confirm(self, st: _DraftSeq, n: int) -> None:
        """fed[:n] equals the sequence's tokens: register the full blocks they fill. n never
        decreases (confirmed tokens stay), so the keys only grow; they are extended, and fed
        sliced, only when a block has been completed, not every step."""
        bs = self.pool.block_size
        st.confirmed = n
        if len(st.keys) < n // bs:
            prefix_keys(st.fed[:n // bs * bs], bs, st.keys)
            st.table.register_full_blocks(st.keys, st.fed, n)

    def prefill(self, chunks: Seq[tuple[Sequence, int]]) -> None:
        """Feed the draft model each sequence's tokens up to `end` (the end of the prompt chunk
        the target has just processed), in the same engine step: the draft's share of a prompt
        is paid before the first token, with the prompt, not by the first decode step. Prompt
        tokens the target took from its prefix cache are fed here too."""
        items = []
        for seq, end in chunks:
            st = self._state(seq)
            if len(st.fed) < end:
                items.append((seq, seq.tokens[len(st.fed):end]))
        if items:
            self._feed(items)
            for seq, _ in items:
                st = seq.spec_state
                if st is not None:
                    self._confirm(st, len(st.fed))

    def propose(self, seqs: Seq[Sequence], limits: Seq[int]) -> None:
        need = max(1, self.draft_min)
        work = [(seq, min(limit, self.draft_max)) for seq, limit in zip(seqs, limits)]
        work = [(seq, k) for seq, k in work if k >= need]
        for seq, _ in work:
            seq.draft = []
        # Catch up: feed every token the draft model has not seen; logits of each last one.
        pending = []
        for seq, k in work:
            st = self._state(seq)
            pending.append((seq, k, seq.tokens[len(st.fed):]))
        rows = self._feed([(seq, toks) for seq, _, toks in pending])
        active = [(seq, k) for seq, k, _ in pending if seq in rows]
        while active:
            nxt = []
            for seq, k in active:
                tok = self._pick(rows[seq])
                if tok is None:
                    continue
                seq.draft.append(tok)
                if len(seq.draft) < k:
                    nxt.append((seq, k))
            if not nxt:
                break
            rows = self._feed([(seq, [seq.draft[-1]]) for seq, _ in nxt])
            active = [(seq, k) for seq, k in nxt if seq in rows]
        for seq, _ in work:
            st = seq.spec_state
            if st is not None:      # it fed exactly the sequence's tokens, then the draft
                self._confirm(st, min(len(st.fed), len(seq.tokens)))
            if len(seq.draft) < need:
                seq.draft = []

    def _pick(self, logits: np.ndarray) -> Optional[int]:
        """The draft's greedy token, or None when its probability is below p_min."""
        tok = int(np.argmax(logits))
        if self.p_min > 0.0:
            top = 1.0 / float(np.exp(logits - logits[tok], dtype=np.float64).sum())
            if top < self.p_min:
                return None
        return tok

    def _feed(self, items: list[tuple[Sequence, list[int]]]) -> dict[Sequence, np.ndarray]:
        """Feed each sequence's tokens to the draft model, max_batch_tokens per forward; the
        logits row of each sequence's last token. A sequence the draft pool cannot hold is
        dropped from speculation for this step (its draft cache released)."""
        out: dict[Sequence, np.ndarray] = {}
        queue = [(seq, list(toks)) for seq, toks in items if toks]
        while queue:
            batch, budget, rest = [], self.max_batch_tokens, []
            for seq, toks in queue:
                if budget == 0:
                    rest.append((seq, toks))
                    continue
                st: _DraftSeq = seq.spec_state
                n = min(len(toks), budget)
                try:   # a block shared through the prefix cache is copied before it is written
                    st.table.prepare_write(len(st.fed), len(st.fed) + n, self.model.copy_block)
                except OutOfBlocks:
                    self.release(seq)
                    continue
                batch.append((seq, toks[:n], n == len(toks)))
                if n < len(toks):
                    rest.append((seq, toks[n:]))
                budget -= n
            queue = rest
            if batch:
                out.update(self._forward(batch))
        return out

    def _forward(self, batch: list[tuple[Sequence, list[int], bool]]) -> dict[Sequence, np.ndarray]:
        lens = [len(toks) for _, toks, _ in batch]
        tokens = np.fromiter((t for _, toks, _ in batch for t in toks), np.int32, sum(lens))
        positions = np.concatenate([np.arange(len(s.spec_state.fed), len(s.spec_state.fed) + n, dtype=np.int32)
                                    for (s, _, _), n in zip(batch, lens)])
        seq_of_token = np.repeat(np.arange(len(batch), dtype=np.int32), lens)
        width = max(len(s.spec_state.table.blocks) for s, _, _ in batch)
        tables = np.full((len(batch), width), NULL_BLOCK, np.int32)
        for i, (s, _, _) in enumerate(batch):
            tables[i, :len(s.spec_state.table.blocks)] = s.spec_state.table.blocks
        ends = np.cumsum(lens) - 1
        wanted = [i for i, (_, _, last) in enumerate(batch) if last]
        logits = self.model.forward(tokens, positions, seq_of_token, tables,
                                    np.asarray([ends[i] for i in wanted], np.int32))
        for s, toks, _ in batch:
            s.spec_state.fed.extend(toks)
        return {batch[i][0]: logits[j] for j, i in enumerate(wanted)}
