"""BertModel / BertForSequenceClassification -> GGUF ``bert`` (all-MiniLM, bge, e5, BERT
cross-encoders), with llama.cpp's tensor names and keys.

Sentence-transformers checkpoints carry their pooling in ``modules.json`` and
``1_Pooling/config.json``: it becomes ``bert.pooling_type`` (llama.cpp's numbers: 0 none,
1 mean, 2 cls, 3 last, 4 rank). A sequence classifier (cross-encoder reranker) keeps its pooler
(``cls.*``) and classifier (``cls.output.*``) and gets rank pooling. The WordPiece vocabulary is
written as llama.cpp's ``bert`` tokenizer model: a word-initial piece gets a leading U+2581, a
``##`` continuation loses its ``##``, bracketed special tokens stay as they are.
"""
from __future__ import annotations

import re

from ..checkpoint import CheckpointError
from ..vocab import (TokenType, Vocab, VocabError, added_token_entries, json_object_or_empty, load_special_tokens,
                     token_id)
from .base import ArchConverter, HParams, _int, config_number, register, sentence_transformers_pooling

__all__ = ["BertConverter", "load_wordpiece_vocab"]

_LAYER_TENSORS = {
    "attention.self.query.weight": "attn_q.weight", "attention.self.query.bias": "attn_q.bias",
    "attention.self.key.weight": "attn_k.weight", "attention.self.key.bias": "attn_k.bias",
    "attention.self.value.weight": "attn_v.weight", "attention.self.value.bias": "attn_v.bias",
    "attention.output.dense.weight": "attn_output.weight", "attention.output.dense.bias": "attn_output.bias",
    "attention.output.LayerNorm.weight": "attn_output_norm.weight",
    "attention.output.LayerNorm.bias": "attn_output_norm.bias",
    "intermediate.dense.weight": "ffn_up.weight", "intermediate.dense.bias": "ffn_up.bias",
    "output.dense.weight": "ffn_down.weight", "output.dense.bias": "ffn_down.bias",
    "output.LayerNorm.weight": "layer_output_norm.weight", "output.LayerNorm.bias": "layer_output_norm.bias",
}
_MODEL_TENSORS = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
_CLASSIFIER_TENSORS = {
    "pooler.dense.weight": "cls.weight", "pooler.dense.bias": "cls.bias",
    "classifier.weight": "cls.output.weight", "classifier.bias": "cls.output.bias",
}


def write_encoder_metadata(w, hp: HParams, arch: str, config: dict) -> None:
    """The keys every bert-family encoder file carries (bert, nomic-bert)."""
    w.add_block_count(hp.n_layer)
    w.add_context_length(int(hp.n_ctx))
    w.add_embedding_length(hp.n_embd)
    w.add_feed_forward_length(hp.n_ff)
    w.add_head_count(hp.n_head)
    w.add_layer_norm_eps(hp.rms_eps)
    w.add_bool(f"{arch}.attention.causal", False)
    # llama.cpp refuses a bert-family file without it ("bert model needs to define token type count").
    w.add_uint32("tokenizer.ggml.token_type_count", _int(config, "type_vocab_size", 2))


@register("BertModel", "BertForSequenceClassification")
class BertConverter(ArchConverter):
    gguf_arch = "bert"
    prefix = "bert."

    classifier_tensors = _CLASSIFIER_TENSORS

    @property
    def classifier(self) -> bool:
        return self.ckpt.architecture.endswith("ForSequenceClassification")

    def read_hparams(self) -> HParams:
        c = self.config
        if c.get("position_embedding_type", "absolute") != "absolute":
            raise CheckpointError(f"config.json: position_embedding_type {c['position_embedding_type']!r} "
                                  f"is not supported (absolute only)")
        if c.get("hidden_act", "gelu") != "gelu":
            raise CheckpointError(f"config.json: hidden_act {c['hidden_act']!r} is not supported (gelu only)")
        n_head, n_embd = _int(c, "num_attention_heads"), _int(c, "hidden_size")
        return HParams(n_layer=_int(c, "num_hidden_layers"), n_embd=n_embd, n_ff=_int(c, "intermediate_size"),
                       n_head=n_head, n_head_kv=n_head, head_dim=n_embd // n_head,
                       vocab_size=_int(c, "vocab_size"), n_ctx=_int(c, "max_position_embeddings"),
                       rms_eps=config_number(c, "layer_norm_eps", 1e-12))

    def pooling(self) -> str | None:
        if self.classifier:
            return "rank"
        return sentence_transformers_pooling(self.ckpt) or "cls"

    def write_metadata(self, w) -> None:
        a = self.gguf_arch
        write_encoder_metadata(w, self.hp, a, self.config)
        if self.classifier:
            labels = self.config.get("id2label") or {}
            if not isinstance(labels, dict) or not all(isinstance(k, str) and k.isdecimal() for k in labels):
                raise CheckpointError(f"config.json: id2label must map class numbers to names, got {labels!r:.80}")
            w.add_array(f"{a}.classifier.output_labels", [str(labels[k]) for k in sorted(labels, key=int)])

    def map_name(self, hf_name: str) -> str | None:
        name = hf_name[len(self.prefix):] if hf_name.startswith(self.prefix) else hf_name
        if name == "embeddings.position_ids":
            return None
        if name in _MODEL_TENSORS:
            return _MODEL_TENSORS[name]
        if name in self.classifier_tensors:
            return self.classifier_tensors[name] if self.classifier else None
        m = re.match(r"encoder\.layer\.(\d+)\.(.+)$", name)
        if m and int(m.group(1)) < self.hp.n_layer and m.group(2) in _LAYER_TENSORS:
            return f"blk.{m.group(1)}.{_LAYER_TENSORS[m.group(2)]}"
        raise CheckpointError(f"unexpected tensor {hf_name!r} for {self.ckpt.architecture}")

    def expected(self, gguf_name: str) -> tuple[int, ...] | None:
        hp = self.hp
        d, ff = hp.n_embd, hp.n_ff
        model = {"token_embd.weight": (hp.vocab_size, d), "position_embd.weight": (hp.n_ctx, d),
                 "token_embd_norm.weight": (d,), "token_embd_norm.bias": (d,),
                 "cls.weight": (d, d), "cls.bias": (d,)}
        if gguf_name in model:
            return model[gguf_name]
        if not gguf_name.startswith("blk."):
            return None
        suffix = gguf_name.split(".", 2)[2]
        shapes = {"attn_q.weight": (d, d), "attn_k.weight": (d, d), "attn_v.weight": (d, d),
                  "attn_output.weight": (d, d), "ffn_up.weight": (ff, d), "ffn_up.bias": (ff,),
                  "ffn_down.weight": (d, ff)}
        return shapes.get(suffix, (d,))

    def required_names(self) -> list[str]:
        names = [n for n in _MODEL_TENSORS.values() if n != "token_types.weight"]
        if self.classifier:
            names += list(self.classifier_tensors.values())
        for i in range(self.hp.n_layer):
            names += [f"blk.{i}.{s}" for s in _LAYER_TENSORS.values()]
        return names

    def vocab(self) -> Vocab:
        if self._vocab is None:
            self._vocab = load_wordpiece_vocab(self.ckpt, self.hp.vocab_size)
        return self._vocab


def _phantom(token: str) -> str:
    """llama.cpp's bert token text: U+2581 marks a word start, ## continuations lose the ##."""
    if token.startswith("[") and token.endswith("]"):
        return token
    if token.startswith("##"):
        return token[2:]
    return "\u2581" + token


def load_wordpiece_vocab(ckpt, vocab_size: int) -> Vocab:
    """tokenizer.json's WordPiece vocabulary (or vocab.txt), lower-casing checkpoints only."""
    tok_json = ckpt.json_object("tokenizer.json")
    model = json_object_or_empty(tok_json.get("model"))
    if model.get("type") == "WordPiece":
        if not isinstance(model.get("vocab"), dict) or not model["vocab"]:
            raise VocabError("tokenizer.json: a WordPiece model needs a non-empty vocab object")
        by_id = {token_id(i, t, "tokenizer.json"): t for t, i in model["vocab"].items()}
        tokens = [by_id.get(i, f"[PAD{i}]") for i in range(max(by_id) + 1)]
    elif ckpt.file("vocab.txt") is not None:
        tokens = ckpt.file("vocab.txt").read_text(encoding="utf-8").splitlines()
    else:
        raise VocabError(f"{ckpt.dir} has no WordPiece vocabulary (tokenizer.json or vocab.txt)")
    normalizer = json_object_or_empty(tok_json.get("normalizer"))
    tok_config = ckpt.json_object("tokenizer_config.json")
    lowercase = not (normalizer.get("lowercase") is False or tok_config.get("do_lower_case") is False)
    if normalizer.get("strip_accents") not in (None, lowercase):
        raise VocabError(f"strip_accents={normalizer['strip_accents']} with lowercase={lowercase} is not supported "
                         f"(accents are stripped exactly when lower-casing)")
    if len(tokens) > vocab_size:
        raise VocabError(f"the vocabulary has {len(tokens)} tokens, config.json's vocab_size is {vocab_size}")
    tokens += [f"[PAD{i}]" for i in range(len(tokens), vocab_size)]
    special = {a["content"] for _, a in added_token_entries(tok_json.get("added_tokens"), "tokenizer.json")
               if a.get("special")}
    special |= {t for t in ("[CLS]", "[SEP]", "[UNK]", "[PAD]", "[MASK]") if t in tokens}
    types = [TokenType.CONTROL if t in special else TokenType.NORMAL for t in tokens]
    vocab = Vocab(model="bert", pre="default", tokens=[_phantom(t) for t in tokens], types=[int(t) for t in types])
    load_special_tokens(ckpt, vocab)
    index = {t: i for i, t in enumerate(tokens)}
    for typ, text in (("cls", "[CLS]"), ("sep", "[SEP]"), ("unk", "[UNK]"), ("pad", "[PAD]"), ("mask", "[MASK]")):
        if text in index:
            vocab.special_ids.setdefault(typ, index[text])
    if "cls" in vocab.special_ids:   # llama.cpp's bert vocabulary begins a text with its BOS, [CLS]
        vocab.special_ids["bos"] = vocab.special_ids["cls"]
    vocab.add_special = {}
    vocab.lowercase = lowercase
    return vocab
