"""BPE pre-tokenization with llama.cpp's semantics (``unicode_regex_split``).

llama.cpp splits text into words with one or more regexes chosen by ``tokenizer.ggml.pre``.
It does not use a Unicode-aware regex engine: every code point is first *collapsed* to one
byte that names its class (ASCII stays itself; a non-ASCII letter becomes 0xD2, a digit 0xD1,
whitespace 0x0B, ...), ``\\p{L}`` and friends in the pattern are rewritten to match those bytes,
and an ECMAScript regex runs on the collapsed text.  Its hand-written splitters for the GPT-2
and Llama-3 patterns behave exactly like their regexes on that collapsed text, so one engine
covers all of them here: Python's ``re`` (ASCII mode, leftmost-first alternation like
ECMAScript) on a collapsed string.  Indices in the collapsed string are code-point indices of
the original text, so the words are cut from the original.

Code-point classes come from :mod:`unicodedata` (Unicode 14 on Python 3.11); llama.cpp's
tables are Unicode 15, so only characters added since (e.g. CJK extension H) may be split
differently.
"""
from __future__ import annotations

import re
import unicodedata
import warnings
from dataclasses import dataclass

__all__ = [
    "PreTokenizerSpec",
    "pre_tokenizer_spec",
    "supported_pre_tokenizers",
    "split_words",
    "BYTE_TO_UNICODE",
    "UNICODE_TO_BYTE",
    "bytes_to_unicode_text",
]

# Unicode White_Space property: the set llama.cpp's tables mark as whitespace (not 0x1C-0x1F).
_WHITESPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)

# Collapsed byte per general-category class (llama.cpp: k_ucat_cpt); anything else -> 0xD0.
_CATEGORY_CODE = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
_OTHER_CODE = "\xd0"
_SPACE_CODE = "\x0b"

# What a \p{..} class becomes in the collapsed pattern: its code plus the ASCII members.
_CLASS_MEMBERS = {
    "N": "\xd1" + "0-9",
    "L": "\xd2" + "A-Za-z",
    "P": "\xd3" + r"!-#%-*,-/:-;?-@\[-\]_\{\}",
    "M": "\xd4",
    "S": "\xd5" + r"\$\+<->^`\|",
}
_CLASS_NAMES = {
    "N": "N", "L": "L", "P": "P", "M": "M", "S": "S",
    "Lu": "L", "Ll": "L", "Lt": "L", "Lm": "L", "Lo": "L",
}


class _CollapseTable(dict):
    """str.translate table mapping each code point to its collapsed class character."""

    def __missing__(self, cpt: int) -> str:
        if cpt < 128:
            value = chr(cpt)
        elif cpt in _WHITESPACE:
            value = _SPACE_CODE
        else:
            value = _CATEGORY_CODE.get(unicodedata.category(chr(cpt))[0], _OTHER_CODE)
        self[cpt] = value
        return value


class _SpaceTable(dict):
    """str.translate table for patterns without classes: non-ASCII whitespace -> 0x0B."""

    def __missing__(self, cpt: int) -> str:
        value = _SPACE_CODE if cpt >= 128 and cpt in _WHITESPACE else chr(cpt)
        self[cpt] = value
        return value


_COLLAPSE = _CollapseTable()
_SPACES_ONLY = _SpaceTable()


def _uses_classes(pattern: str) -> bool:
    return any("\\p{" + name + "}" in pattern for name in _CLASS_NAMES)


def _collapse_pattern(pattern: str) -> str:
    """Rewrite \\p{X} like llama.cpp does (inside [] only the members, outside a new [])."""
    out: list[str] = []
    inside = False
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "[" and (i == 0 or pattern[i - 1] != "\\"):
            inside = True
            out.append(ch)
        elif inside and ch == "]" and pattern[i - 1] != "\\":
            inside = False
            out.append(ch)
        elif pattern.startswith("\\p{", i):
            close = pattern.find("}", i + 3)
            name = pattern[i + 3:close] if close != -1 else ""
            if name in _CLASS_NAMES:
                members = _CLASS_MEMBERS[_CLASS_NAMES[name]]
                out.append(members if inside else "[" + members + "]")
                i = close + 1
                continue
            out.append(ch)
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _ecmascript_to_python(pattern: str) -> str:
    """ECMAScript '$' is end of input only; Python's also matches before a final newline."""
    out: list[str] = []
    inside = False
    escaped = False
    for ch in pattern:
        if escaped:
            out.append(ch)
            escaped = False
            continue
        if ch == "\\":
            escaped = True
        elif ch == "[":
            inside = True
        elif ch == "]":
            inside = False
        elif ch == "$" and not inside:
            out.append(r"\Z")
            continue
        out.append(ch)
    return "".join(out)


@dataclass(frozen=True)
class _CompiledRegex:
    regex: re.Pattern
    collapsed: bool  # match against the collapsed text, else against the space-mapped text


def _compile(pattern: str) -> _CompiledRegex:
    collapsed = _uses_classes(pattern)
    if collapsed:
        if any(ord(c) >= 128 for c in pattern):
            raise ValueError(f"pre-tokenizer regex mixes classes and non-ASCII: {pattern!r}")
        pattern = _collapse_pattern(pattern)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "possible nested set" on '[' in []
        regex = re.compile(_ecmascript_to_python(pattern), re.ASCII)
    return _CompiledRegex(regex, collapsed)


# --- llama.cpp's pre-tokenizer regexes (src/llama-vocab.cpp, llm_tokenizer_bpe) -------------
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
# llama.cpp's hand-written GPT-2 splitter also takes a lone whitespace run ("\s+").
_GPT2_SPLITTER = _GPT2 + r"|\s+"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+"
           r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_BAILINGMOE = (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
_FALCON_WORDS = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
_DEEPSEEK3_WORDS = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+"
                    r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*"
                    r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+" + _CONTRACTIONS + "?"
          r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*" + _CONTRACTIONS + "?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+"
           r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*"
           r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizerSpec:
    """What a ``tokenizer.ggml.pre`` name selects in llama.cpp for a BPE vocabulary."""

    regexes: tuple[str, ...]
    clean_spaces: bool = True   # llama_detokenize's " ?"/" 's" clean-up
    ignore_merges: bool = False  # a word that is itself a token is taken whole
    add_bos: bool = False        # default before tokenizer.ggml.add_bos_token overrides it
    no_default_bos: bool = False  # the default BOS id (11) is dropped (chatglm)


_DEFAULT = PreTokenizerSpec((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"))
_SPECS: dict[str, PreTokenizerSpec] = {"default": _DEFAULT}


def _register(names: str, spec: PreTokenizerSpec) -> None:
    for name in names.split():
        _SPECS[name] = spec


_register("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano",
          PreTokenizerSpec((_LLAMA3,), ignore_merges=True, add_bos=True))
_register("dbrx smaug-bpe", PreTokenizerSpec((_LLAMA3,)))
_register("deepseek-coder", PreTokenizerSpec(
    ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
     r"\p{N}"), clean_spaces=False))
_register("deepseek-v3 hunyuan-dense joyai-llm hy_v4", PreTokenizerSpec(
    (r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", _DEEPSEEK3_WORDS),
    clean_spaces=False))
_register("falcon", PreTokenizerSpec(
    (r"[\p{P}\$\+<=>\^~\|`]+", _FALCON_WORDS, "[0-9][0-9][0-9]")))
_register("starcoder refact codeshell exaone minerva-7b mellum2",
          PreTokenizerSpec((r"\p{N}", _GPT2)))
_register("smollm command-r", PreTokenizerSpec((r"\p{N}", _GPT2), clean_spaces=False))
_register("gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert"
          " jina-v1-en jina-v2-code roberta-bpe mpt olmo jais exaone4",
          PreTokenizerSpec((_GPT2,)))
_register("trillion granite-docling", PreTokenizerSpec((_GPT2,), clean_spaces=False))
_register("qwen2 deepseek-r1-qwen kormo f2llmv2 hunyuan solar-open grok-2",
          PreTokenizerSpec((_QWEN2,), clean_spaces=False))
_register("stablelm2 megrez", PreTokenizerSpec((_QWEN2,)))
_register("qwen35", PreTokenizerSpec((_QWEN35,), clean_spaces=False))
_register("poro-chat", PreTokenizerSpec((_BLOOM,), clean_spaces=False))
_register("bloom gpt3-finnish", PreTokenizerSpec((_BLOOM,)))
_register("viking", PreTokenizerSpec((_BLOOM, r"\p{N}"), clean_spaces=False))
_register("glm4 chatglm-bpe", PreTokenizerSpec((_LLAMA3,), no_default_bos=True))
_register("tekken", PreTokenizerSpec((_TEKKEN,), clean_spaces=False, ignore_merges=True,
                                     add_bos=True))
_register("gpt-4o llama4 kanana2 talkie minimax-m2",
          PreTokenizerSpec((_GPT4O,), clean_spaces=False))
_register("seed-coder", PreTokenizerSpec((_SEED_CODER,), clean_spaces=False))
_register("bailingmoe bailingmoe2 llada-moe", PreTokenizerSpec((_BAILINGMOE,), clean_spaces=False))

_COMPILED: dict[str, _CompiledRegex] = {}


def pre_tokenizer_spec(pre: str | None) -> PreTokenizerSpec:
    """The spec for a ``tokenizer.ggml.pre`` value (missing -> 'default', as llama.cpp)."""
    if not pre:
        return _DEFAULT
    try:
        return _SPECS[pre]
    except KeyError:
        raise ValueError(f"unsupported BPE pre-tokenizer type: {pre!r}") from None


def supported_pre_tokenizers() -> list[str]:
    """The ``tokenizer.ggml.pre`` names this module knows, sorted."""
    return sorted(_SPECS)


def _compiled(pattern: str) -> _CompiledRegex:
    compiled = _COMPILED.get(pattern)
    if compiled is None:
        # llama.cpp's GPT-2 splitter is hand-written and behaves as the pattern plus "\s+".
        compiled = _compile(_GPT2_SPLITTER if pattern == _GPT2 else pattern)
        _COMPILED[pattern] = compiled
    return compiled


def split_words(text: str, regexes: tuple[str, ...]) -> list[str]:
    """Split ``text`` into words as llama.cpp's unicode_regex_split does (before byte mapping).

    Each regex refines the pieces left by the previous one: inside a piece, every match is a
    piece and so is every gap between matches.
    """
    if not text:
        return []
    compiled = [_compiled(p) for p in regexes]
    collapsed = text.translate(_COLLAPSE) if any(c.collapsed for c in compiled) else ""
    spaced = text.translate(_SPACES_ONLY) if not all(c.collapsed for c in compiled) else ""
    bounds = [(0, len(text))]
    for rx in compiled:
        subject = collapsed if rx.collapsed else spaced
        finditer = rx.regex.finditer
        refined: list[tuple[int, int]] = []
        for start, end in bounds:
            prev = start
            for match in finditer(subject, start, end):
                m_start, m_end = match.span()
                if m_start > prev:
                    refined.append((prev, m_start))
                if m_end > m_start:
                    refined.append((m_start, m_end))
                prev = m_end
            if prev < end:
                refined.append((prev, end))
        bounds = refined
    return [text[s:e] for s, e in bounds]


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2 byte-level map: printable Latin-1 bytes map to themselves, the rest to 256+n."""
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


BYTE_TO_UNICODE: dict[int, str] = _byte_to_unicode()
UNICODE_TO_BYTE: dict[str, int] = {ch: b for b, ch in BYTE_TO_UNICODE.items()}
# Latin-1 decoding turns each byte into the code point of the same value; translate maps it.
_LATIN1_TO_BYTE_LEVEL = {b: ch for b, ch in BYTE_TO_UNICODE.items()}


def bytes_to_unicode_text(word: str) -> str:
    """The byte-level (GPT-2) spelling of a word: one printable character per UTF-8 byte."""
    return word.encode("utf-8", "surrogatepass").decode("latin-1").translate(_LATIN1_TO_BYTE_LEVEL)
