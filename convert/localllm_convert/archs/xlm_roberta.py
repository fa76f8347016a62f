"""XLMRobertaModel / XLMRobertaForSequenceClassification -> GGUF ``bert`` (bge-m3, multilingual-e5,
the bge-reranker family), as llama.cpp's converter writes them.

XLM-RoBERTa is BERT's encoder with three differences the file absorbs:
- positions start at ``pad_token_id + 1`` (RoBERTa numbers a text's tokens from there): the first
  ``pad_token_id + 1`` rows of the position embeddings are dropped, so the runtime's positions
  0, 1, ... read the rows the model was trained with, and the context shrinks by as many;
- one token type (``type_vocab_size`` 1);
- the sequence classifier's head is ``classifier.dense`` (tanh) then ``classifier.out_proj`` on the
  first token, which is BERT's pooler + classifier: ``cls.*`` and ``cls.output.*``.
The vocabulary is SentencePiece Unigram, written as llama.cpp's ``t5`` tokenizer model: pieces,
scores, the precompiled normalization charsmap, and add_bos/add_eos/add_sep so that a pair is
``<s> A </s></s> B </s>``.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any

from ..checkpoint import CheckpointError
from ..vocab import (TokenType, Vocab, VocabError, added_token_entries, json_object_or_empty, load_special_tokens,
                     token_id)
from .base import HParams, PlannedTensor, _int, register
from .bert import BertConverter

__all__ = ["XLMRobertaConverter", "load_unigram_vocab"]

_CLASSIFIER_TENSORS = {
    "classifier.dense.weight": "cls.weight", "classifier.dense.bias": "cls.bias",
    "classifier.out_proj.weight": "cls.output.weight", "classifier.out_proj.bias": "cls.output.bias",
}


@register("XLMRobertaModel", "XLMRobertaForSequenceClassification")
class XLMRobertaConverter(BertConverter):
    prefix = "roberta."
    classifier_tensors = _CLASSIFIER_TENSORS

    @property
    def position_offset(self) -> int:
        """Rows of the position embeddings before a text's first position (pad_token_id + 1)."""
        pad = self.config.get("pad_token_id", 1)
        if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
            raise CheckpointError(f"config.json: pad_token_id must be a non-negative integer, got {pad!r}")
        return pad + 1

    def read_hparams(self) -> HParams:
        hp = super().read_hparams()
        n_pos = _int(self.config, "max_position_embeddings")
        if n_pos <= self.position_offset:
            raise CheckpointError(f"config.json: max_position_embeddings {n_pos} leaves no position after "
                                  f"the first {self.position_offset} (pad_token_id + 1)")
        return dataclasses.replace(hp, n_ctx=n_pos - self.position_offset)

    def map_name(self, hf_name: str) -> str | None:
        name = hf_name[len(self.prefix):] if hf_name.startswith(self.prefix) else hf_name
        if name.startswith("pooler."):   # XLMRobertaModel's pooler: embeddings pool the states
            return None
        return super().map_name(hf_name)

    def expected(self, gguf_name: str) -> tuple[int, ...] | None:
        if gguf_name == "position_embd.weight":   # as stored, before the rows are dropped
            return (self.hp.n_ctx + self.position_offset, self.hp.n_embd)
        return super().expected(gguf_name)

    def finish_plan(self, planned: list[PlannedTensor]) -> list[PlannedTensor]:
        offset = self.position_offset
        out = []
        for p in planned:
            if p.name == "position_embd.weight":
                p = PlannedTensor(p.name, (self.hp.n_ctx, self.hp.n_embd), p.source,
                                  lambda rows: rows[offset:])
            out.append(p)
        return out

    def vocab(self) -> Vocab:
        if self._vocab is None:
            self._vocab = load_unigram_vocab(self.ckpt, self.hp.vocab_size)
        return self._vocab


def _unigram_parts(tok_json: dict[str, Any]) -> tuple[list[Any], int, bytes | None, bool]:
    """(vocab [[piece, score]...], unk_id, precompiled charsmap, add_space_prefix) of tokenizer.json."""
    model = json_object_or_empty(tok_json.get("model"))
    pieces = model.get("vocab")
    if model.get("type") != "Unigram" or not isinstance(pieces, list) or not all(
            isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float))
            and not isinstance(p[1], bool) for p in pieces):
        raise VocabError("tokenizer.json does not hold a Unigram model with a vocab of [piece, score] pairs "
                         "(XLM-RoBERTa's SentencePiece tokenizer)")
    charsmap = None
    normalizer = json_object_or_empty(tok_json.get("normalizer"))
    for norm in _steps(normalizer, "normalizers"):
        if norm.get("type") == "Precompiled" and isinstance(norm.get("precompiled_charsmap"), str):
            try:
                charsmap = base64.b64decode(norm["precompiled_charsmap"], validate=True) or None
            except binascii.Error as e:
                raise VocabError(f"tokenizer.json: precompiled_charsmap is not base64: {e}") from None
    add_prefix = True
    for p in _steps(json_object_or_empty(tok_json.get("pre_tokenizer")), "pretokenizers"):
        if p.get("type") == "Metaspace":
            add_prefix = p.get("prepend_scheme", "always") != "never" and p.get("add_prefix_space", True) is not False
    unk = model.get("unk_id")
    return pieces, (3 if unk is None else token_id(unk, "unk", "tokenizer.json")), charsmap, add_prefix


def _steps(part: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """A normalizer's or pre-tokenizer's steps: those of a Sequence, else the part itself."""
    steps = part.get(key)
    return [s for s in steps if isinstance(s, dict)] if isinstance(steps, list) else [part]


def load_unigram_vocab(ckpt, vocab_size: int) -> Vocab:
    """tokenizer.json's Unigram vocabulary as llama.cpp writes it (tokenizer model ``t5``)."""
    tok_json = ckpt.json_object("tokenizer.json")
    if not tok_json:
        raise VocabError(f"{ckpt.dir} has no tokenizer.json (an XLM-RoBERTa checkpoint's SentencePiece "
                         f"vocabulary is read from it)")
    pieces, unk_id, charsmap, add_prefix = _unigram_parts(tok_json)
    if len(pieces) > vocab_size:
        raise VocabError(f"the vocabulary has {len(pieces)} tokens, config.json's vocab_size is {vocab_size}")
    tokens = [f"[PAD{i}]" for i in range(vocab_size)]
    scores = [-10000.0] * vocab_size
    types = [int(TokenType.UNUSED)] * vocab_size
    special = {a["content"] for _, a in added_token_entries(tok_json.get("added_tokens"), "tokenizer.json")
               if a.get("special")}
    for i, (piece, score) in enumerate(pieces):
        tokens[i], scores[i] = piece, float(score)
        types[i] = int(TokenType.UNKNOWN if i == unk_id else TokenType.CONTROL if piece in special
                       else TokenType.NORMAL)
    vocab = Vocab(model="t5", pre="default", tokens=tokens, types=types, scores=scores,
                  add_space_prefix=add_prefix, precompiled_charsmap=charsmap,
                  remove_extra_whitespaces=True)   # XLM-R's tokenizers split on whitespace runs
    load_special_tokens(ckpt, vocab)
    index = {t: i for i, t in enumerate(tokens)}
    for typ, text in (("bos", "<s>"), ("cls", "<s>"), ("eos", "</s>"), ("sep", "</s>"), ("pad", "<pad>"),
                      ("mask", "<mask>")):
        if text in index:
            vocab.special_ids.setdefault(typ, index[text])
    vocab.special_ids.setdefault("unk", unk_id)
    # XLM-R's template, <s> A </s> and <s> A </s></s> B </s>, as gguf-py reads RobertaProcessing.
    vocab.add_special.update(bos=True, eos=True, sep=True)
    return vocab
