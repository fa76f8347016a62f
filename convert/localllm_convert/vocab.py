"""The tokenizer part of a GGUF file: tokens, types, scores/merges, special tokens, chat template.

``load_vocab`` reads a checkpoint's tokenizer files the way llama.cpp's converter does
(tokenizer.model for SentencePiece, tokenizer.json for byte-level BPE; tokenizer_config.json,
tokenizer.json's added tokens and post-processor, config.json and generation_config.json for the
special tokens) and ``Vocab.write`` adds the ``tokenizer.*`` keys to a GGUFWriter.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TokenType", "Vocab", "VocabError", "looks_special", "load_special_tokens",
           "load_vocab", "SPECIAL_TOKEN_TYPES"]

SPECIAL_TOKEN_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")


class VocabError(ValueError):
    """The tokenizer files are missing or cannot be converted."""


class TokenType(enum.IntEnum):
    """tokenizer.ggml.token_type values (SentencePiece's piece types)."""
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


def looks_special(token: str) -> bool:
    """Added tokens that some checkpoints forget to mark special (llama.cpp's list)."""
    return token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") \
        or (token.startswith("<|") and token.endswith("|>")) \
        or (token.startswith("<｜") and token.endswith("｜>")) \
        or (token.startswith("<unused") and token.endswith(">"))


@dataclass
class Vocab:
    model: str                                   # tokenizer.ggml.model: "gpt2", "llama", "bert", "t5"
    pre: str                                     # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None            # SentencePiece only
    merges: list[str] | None = None              # BPE only
    special_ids: dict[str, int] = field(default_factory=dict)
    add_special: dict[str, bool] = field(default_factory=dict)
    chat_template: str | None = None
    add_space_prefix: bool | None = None
    lowercase: bool | None = None                # WordPiece (bert): tokenizer.ggml.normalizer.lowercase
    precompiled_charsmap: bytes | None = None    # Unigram (t5): SentencePiece's normalization rules
    remove_extra_whitespaces: bool | None = None  # Unigram (t5): split on whitespace runs

    def write(self, writer) -> None:
        """Add the tokenizer.* keys to a gguf.GGUFWriter."""
        from gguf import GGUFValueType as VT

        def add_array(key: str, values: list, sub_type) -> None:
            # with the element type given, gguf-py skips checking the type of every element
            writer.add_key_value(key, values, VT.ARRAY, sub_type=sub_type)

        writer.add_tokenizer_model(self.model)
        writer.add_tokenizer_pre(self.pre)
        add_array("tokenizer.ggml.tokens", self.tokens, VT.STRING)
        if self.scores is not None:
            add_array("tokenizer.ggml.scores", [float(s) for s in self.scores], VT.FLOAT32)
        add_array("tokenizer.ggml.token_type", [int(t) for t in self.types], VT.INT32)
        if self.merges:
            add_array("tokenizer.ggml.merges", self.merges, VT.STRING)
        for typ, tid in self.special_ids.items():
            # gguf-py's handlers know the key names (unk -> unknown_token_id, pad -> padding_...)
            add = getattr(writer, f"add_{typ}_token_id", None)
            if add is not None:
                add(tid)
            else:   # a key this gguf-py has no helper for (cls_token_id)
                writer.add_uint32(f"tokenizer.ggml.{typ}_token_id", tid)
        for typ, value in self.add_special.items():
            writer.add_bool(f"tokenizer.ggml.add_{typ}_token", value)
        if self.lowercase is not None:
            writer.add_bool("tokenizer.ggml.normalizer.lowercase", self.lowercase)
        if self.add_space_prefix is not None:
            writer.add_add_space_prefix(self.add_space_prefix)
        if self.remove_extra_whitespaces is not None:
            writer.add_remove_extra_whitespaces(self.remove_extra_whitespaces)
        if self.precompiled_charsmap:
            writer.add_precompiled_charsmap(self.precompiled_charsmap)
        if self.chat_template:
            writer.add_chat_template(self.chat_template)


def _token_content(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


# More ids than any vocabulary has (the largest are ~262k): an id beyond it is a broken file,
# refused before a list of that many placeholder tokens is built.
MAX_TOKEN_ID = 1 << 24


def token_id(value: Any, token: Any, filename: str) -> int:
    """A token's id as a file gives it, checked (VocabError naming the file and the token)."""
    if isinstance(value, str) and value.isdecimal():     # ids as JSON object keys
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TOKEN_ID:
        raise VocabError(f"{filename}: token {token!r:.40} has id {value!r:.40}; ids are integers in "
                         f"[0, {MAX_TOKEN_ID})")
    return value


def json_object_or_empty(value: Any) -> dict[str, Any]:
    """An optional part of tokenizer.json (normalizer, pre_tokenizer, ...): {} unless an object."""
    return value if isinstance(value, dict) else {}


def added_token_entries(entries: Any, filename: str) -> list[tuple[int, dict[str, Any]]]:
    """(id, entry) for each added token: tokenizer.json's ``added_tokens`` list or
    tokenizer_config.json's ``added_tokens_decoder`` map (ids as keys). VocabError naming the
    file for an entry without an integer id or a string content."""
    if entries is None:
        return []
    if isinstance(entries, dict):
        pairs = list(entries.items())
    elif isinstance(entries, list):
        pairs = [(e.get("id") if isinstance(e, dict) else None, e) for e in entries]
    else:
        raise VocabError(f"{filename}: added tokens must be a list or an object, got {entries!r:.60}")
    out = []
    for tid, entry in pairs:
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise VocabError(f"{filename}: added token {entry!r:.60} needs an 'id' and a string 'content'")
        out.append((token_id(tid, entry["content"], filename), entry))
    return out


def _special_token_id(piece: Any) -> Any:
    """The id of a TemplateProcessing piece that is a special token (None otherwise)."""
    special = piece.get("SpecialToken") if isinstance(piece, dict) else None
    return special.get("id") if isinstance(special, dict) else None


def _template_flags(post_processor: Any, names: dict[str, str | None]) -> dict[str, bool]:
    """add_bos/add_eos/add_sep as a TemplateProcessing post-processor implies them."""
    flags: dict[str, bool] = {}
    if not isinstance(post_processor, dict):
        return flags
    processors = post_processor.get("processors", [post_processor])
    for proc in processors if isinstance(processors, list) else []:
        if not isinstance(proc, dict):
            continue
        if proc.get("type") == "RobertaProcessing":
            flags.update(bos=True, eos=True, sep=True)
        if proc.get("type") != "TemplateProcessing":
            continue
        single = proc.get("single") if isinstance(proc.get("single"), list) else []
        first = _special_token_id(single[0]) if len(single) > 1 else None
        last = _special_token_id(single[-1]) if len(single) > 1 else None
        if first:
            flags["bos"] = first in (names["bos"], names["cls"])
        if last:
            flags["eos"] = last == names["eos"]
        pair = proc.get("pair") if isinstance(proc.get("pair"), list) else []
        inner = pair[(1 if first else 0):(len(pair) - 1 if last else len(pair))]
        middle = [_special_token_id(p) for p in inner[1:-1]]
        if middle:
            flags["sep"] = any(isinstance(m, str) and m in (names["sep"], names["eos"]) for m in middle) \
                and not last
    return flags


def load_special_tokens(checkpoint, vocab: Vocab) -> None:
    """Fill in special token ids, add_*_token flags and the chat template (as gguf-py does).

    Ids come from tokenizer_config.json's ``<type>_token`` strings looked up among the added
    tokens, else from config.json / generation_config.json ``<type>_token_id``. ``add_bos`` is
    always written: tokenizer_config's flag, else what the post-processor does, else False.
    """
    tok_json = checkpoint.json_object("tokenizer.json")
    tok_config = checkpoint.json_object("tokenizer_config.json")
    content_to_id = {e["content"]: i for i, e in added_token_entries(tok_json.get("added_tokens"), "tokenizer.json")}
    content_to_id.update({e["content"]: i for i, e in added_token_entries(
        tok_config.get("added_tokens_decoder"), "tokenizer_config.json")})
    names = {typ: _token_content(tok_config.get(f"{typ}_token")) for typ in SPECIAL_TOKEN_TYPES}
    n_vocab = len(vocab.tokens)

    def set_id(typ: str, tid: Any) -> None:
        if isinstance(tid, list):
            tid = tid[0] if tid else None
        if isinstance(tid, int) and 0 <= tid < n_vocab and typ not in vocab.special_ids:
            vocab.special_ids[typ] = tid

    for typ in SPECIAL_TOKEN_TYPES:
        if names[typ] is not None:
            set_id(typ, content_to_id.get(names[typ]))
    for source in (checkpoint.config, checkpoint.json_object("generation_config.json")):
        for typ in SPECIAL_TOKEN_TYPES:
            set_id(typ, source.get(f"{typ}_token_id"))

    vocab.add_special.update(_template_flags(tok_json.get("post_processor"), names))
    for typ in SPECIAL_TOKEN_TYPES:
        if isinstance(tok_config.get(f"add_{typ}_token"), bool):
            vocab.add_special[typ] = tok_config[f"add_{typ}_token"]
    vocab.add_special.setdefault("bos", False)

    template = tok_config.get("chat_template")
    if template is None and checkpoint.file("chat_template.jinja"):
        template = checkpoint.file("chat_template.jinja").read_text(encoding="utf-8")
    if template is None and checkpoint.file("chat_template.json"):
        template = checkpoint.json_object("chat_template.json").get("chat_template")
    if isinstance(template, list):   # named templates: keep the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    vocab.chat_template = template if isinstance(template, str) else None


def load_vocab(checkpoint, vocab_size: int | None, prefer_spm: bool = True) -> Vocab:
    """The checkpoint's vocabulary: tokenizer.model (SentencePiece) when present and preferred,
    else tokenizer.json (byte-level BPE)."""
    from .vocab_bpe import load_bpe_vocab
    from .vocab_spm import load_spm_vocab
    spm_path = checkpoint.file("tokenizer.model")
    tok_json = checkpoint.json("tokenizer.json")
    if spm_path is not None and (prefer_spm or tok_json is None):
        vocab = load_spm_vocab(spm_path, checkpoint, vocab_size)
    elif tok_json is not None:
        vocab = load_bpe_vocab(tok_json, vocab_size, checkpoint.file("tokenizer.json"))
    else:
        raise VocabError(f"{checkpoint.dir} has no tokenizer (tokenizer.json or tokenizer.model)")
    load_special_tokens(checkpoint, vocab)
    return vocab
