"""Byte-level BPE vocabularies (tokenizer.json, model type BPE) and ``tokenizer.ggml.pre``.

The pre-tokenizer name is found as llama.cpp's converter finds it: encode a fixed check text with
the checkpoint's own tokenizer (the ``tokenizers`` library on tokenizer.json) and look the SHA-256
of the ids up in a table of known tokenizers. A tokenizer not in the table is recognised by the
shape of its ``pre_tokenizer`` when that is one of the common ones.
"""
from __future__ import annotations

import json
import logging
from hashlib import sha256
from pathlib import Path
from typing import Any

from .vocab import TokenType, Vocab, VocabError, added_token_entries, looks_special, token_id

__all__ = ["load_bpe_vocab", "detect_pre_tokenizer", "CHECK_TEXT", "KNOWN_PRE_HASHES"]

log = logging.getLogger("localllm_convert")

# The check text of llama.cpp's convert_hf_to_gguf_update.py (covers whitespace runs, emoji with
# ZWJ and variation selector, digit runs, Khmer, CJK, Cyrillic, quotes and contractions).
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫\ufe0f (multiple emojis "
    "concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 "
    "កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? "
    "'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
)

# sha256(str(ids of CHECK_TEXT)) -> tokenizer.ggml.pre, as llama.cpp's table has them.
KNOWN_PRE_HASHES: dict[str, str] = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
    "35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34": "starcoder",
    "8aeee3860c56296a157a1fe2fad249ec40aa59b1bb5709f4ade11c4e6fe652ed": "falcon",
    "9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e": "falcon3",
    "b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166": "mpt",
    "a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e": "dbrx",
    "049ecf7629871e3041641907f3de7c733e4dbfdc736f57d882ba0b0845599754": "deepseek-llm",
    "347715f544604f9118bb75ed199f68779f423cabb20db6de6f31b908d04d7821": "deepseek-coder",
    "32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3": "stablelm2",
    "6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff": "refact",
    "9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8": "command-r",
    "63b97e4253352e6f357cc59ea5b583e3a680eaeaf2632188c2b952de2588485e": "tekken",
}

# The split regexes of the common pre-tokenizers (tokenizer.json "Split" patterns).
_LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                 "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
_QWEN2_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def _structural_pre(pre_tokenizer: dict | None) -> str | None:
    """Recognise a pre-tokenizer by its structure (for tokenizers not in the hash table)."""
    if not pre_tokenizer:
        return None
    steps = pre_tokenizer.get("pretokenizers") if pre_tokenizer.get("type") == "Sequence" \
        else [pre_tokenizer]
    kinds = [s.get("type") for s in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") \
            and steps[1].get("use_regex", True):
        return "smollm"     # SmolLM / StarCoder style: digits split one by one, then GPT-2
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        pattern = (steps[0].get("pattern") or {}).get("Regex")
        return {_LLAMA3_SPLIT: "llama-bpe", _QWEN2_SPLIT: "qwen2"}.get(pattern)
    return None


def detect_pre_tokenizer(tokenizer_json: dict[str, Any], path: Path | None = None) -> str:
    """``tokenizer.ggml.pre`` for a byte-level BPE tokenizer.json (ValueError when unknown).

    ``path``: the file ``tokenizer_json`` was read from (loading it directly is faster)."""
    from tokenizers import Tokenizer
    try:
        tokenizer = Tokenizer.from_file(str(path)) if path is not None \
            else Tokenizer.from_str(json.dumps(tokenizer_json))
        ids = tokenizer.encode(CHECK_TEXT).ids
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: B036 -- the library's own exception types, and a Rust panic
        # in it (pyo3's PanicException, a BaseException: a template naming a special token it
        # does not define) is the same malformed file to the user
        raise VocabError(f"tokenizer.json cannot be loaded by the tokenizers library: {e}") from None
    digest = sha256(str(ids).encode()).hexdigest()
    if digest in KNOWN_PRE_HASHES:
        return KNOWN_PRE_HASHES[digest]
    pre = _structural_pre(tokenizer_json.get("pre_tokenizer"))
    if pre is None:
        raise VocabError(
            f"unrecognised BPE pre-tokenizer (check hash {digest}, pre_tokenizer "
            f"{json.dumps(tokenizer_json.get('pre_tokenizer'))[:200]}); known: "
            f"{', '.join(sorted(set(KNOWN_PRE_HASHES.values())))}")
    log.warning("tokenizer not in the pre-tokenizer table; by its structure it is %r", pre)
    return pre


def _merges(model: dict[str, Any]) -> list[str]:
    merges = model.get("merges") or []
    out = []
    for m in merges:
        if isinstance(m, str):
            out.append(m)
        elif isinstance(m, list) and len(m) == 2 and all(isinstance(part, str) for part in m):
            # the list form may hold spaces inside a part: GGUF merges are space-separated, so
            # a space is written as U+0120 ('Ġ'), the byte-level spelling of ' '
            out.append(" ".join(part.replace(" ", "\u0120") for part in m))
        else:
            raise VocabError(f"tokenizer.json: unknown merges format {m!r}")
    return out


def _checked_tokens(tokenizer_json: Any) -> tuple[dict[str, Any], dict[int, str], dict[int, dict]]:
    """The BPE model, its tokens by id and the added tokens by id, each checked for its JSON type
    (fuzz_convert.py found an added token without an id ending in a KeyError traceback)."""
    if not isinstance(tokenizer_json, dict):
        raise VocabError("tokenizer.json must be a JSON object")
    model = tokenizer_json.get("model") or {}
    if not isinstance(model, dict) or model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise VocabError("tokenizer.json does not hold a BPE model with a vocab")
    by_id = {token_id(i, tok, "tokenizer.json"): tok for tok, i in model["vocab"].items()}
    added_tokens = tokenizer_json.get("added_tokens") or []
    if not isinstance(added_tokens, list):
        raise VocabError("tokenizer.json: added_tokens must be a list")
    added = dict(added_token_entries(added_tokens, "tokenizer.json"))
    for i, a in added.items():
        by_id[i] = a["content"]
    if not by_id:
        raise VocabError("tokenizer.json has no tokens")
    return model, by_id, added


def load_bpe_vocab(tokenizer_json: dict[str, Any], vocab_size: int | None,
                   path: Path | None = None) -> Vocab:
    """Tokens, types and merges of a byte-level BPE tokenizer.json.

    Ids missing from the tokenizer up to ``vocab_size`` (the embedding rows) become
    ``[PAD<id>]`` UNUSED tokens, as llama.cpp writes them.
    """
    model, by_id, added = _checked_tokens(tokenizer_json)
    n = max(by_id) + 1
    if vocab_size is not None:
        if n > vocab_size:
            raise VocabError(f"the tokenizer has ids up to {n - 1} but the model's vocab_size "
                             f"is {vocab_size}")
        n = vocab_size
    tokens: list[str] = []
    types: list[int] = []
    for i in range(n):
        if i not in by_id or by_id[i] == f"[PAD{i}]":
            # (a checkpoint rebuilt from a GGUF file carries llama.cpp's placeholders)
            tokens.append(f"[PAD{i}]")
            types.append(TokenType.UNUSED)
        elif i in added:
            token = by_id[i]
            if added[i].get("special") or looks_special(token):
                types.append(TokenType.CONTROL)
            else:
                token = token.replace("\u2581", " ")   # user-defined spaces pre-normalised
                types.append(TokenType.USER_DEFINED)
            tokens.append(token)
        else:
            tokens.append(by_id[i])
            types.append(TokenType.NORMAL)
    return Vocab(model="gpt2", pre=detect_pre_tokenizer(tokenizer_json, path), tokens=tokens,
                 types=types, merges=_merges(model))
