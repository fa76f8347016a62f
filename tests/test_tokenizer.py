"""Tokenizer parity with llama.cpp on the three real models.

Ground truth is tests/data/reference (produced by llama.cpp): tokenize.jsonl rows, the prompt ids
and generated text of greedy.jsonl, and the chunk counts of perplexity.json.  Metadata is read
with the project's GGUF reader (held to gguf-py's by tests/test_gguf.py).
"""
from __future__ import annotations

import functools
import gc
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest

from conftest import CORPUS, MODEL_KEYS, REFERENCE, f16_perplexity_rows, model_file, read_jsonl
from localllm.gguf import GGUFFile
from localllm.text.tokenizer import StreamDecoder, Tokenizer

TIME_BOUND_S = 2.0


def gguf_metadata(path) -> dict[str, Any]:
    """GGUF key -> value through the project's reader (tests/test_gguf.py holds it equal to gguf-py's)."""
    return dict(GGUFFile(str(path)).metadata)


@functools.cache
def metadata(model_key: str) -> dict[str, Any]:
    return gguf_metadata(model_file(model_key))


@functools.cache
def tokenizer(model_key: str) -> Tokenizer:
    return Tokenizer.from_gguf_metadata(metadata(model_key))


def tokenize_rows(model_key: str) -> list[dict]:
    rows = [r for r in read_jsonl(REFERENCE / "tokenize.jsonl") if r["model"] == model_key]
    assert rows, f"no tokenize.jsonl rows for {model_key}"
    return rows


def greedy_rows(model_key: str) -> list[dict]:
    rows = [r for r in read_jsonl(REFERENCE / "greedy.jsonl") if r["model"] == model_key]
    assert rows, f"no greedy.jsonl rows for {model_key}"
    return rows


def first_difference(got: list[int], want: list[int]) -> int:
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return i
    return min(len(got), len(want))


def describe_mismatch(text: str, flags: str, got: list[int], want: list[int]) -> str:
    i = first_difference(got, want)
    return (f"{text!r} [{flags}]: first difference at {i}: got {got[i:i + 6]} want "
            f"{want[i:i + 6]} (lengths {len(got)} vs {len(want)})")


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_reference_tokenization(model_key):
    """Every tokenize.jsonl row gives exactly llama.cpp's ids."""
    tok = tokenizer(model_key)
    mismatches = []
    rows = tokenize_rows(model_key)
    for row in rows:
        got = tok.encode(row["text"], add_special=row["add_special"],
                         parse_special=row["parse_special"])
        if got != row["ids"]:
            flags = f"add_special={row['add_special']} parse_special={row['parse_special']}"
            mismatches.append(describe_mismatch(row["text"], flags, got, row["ids"]))
    for line in mismatches:
        print(line)
    assert not mismatches, f"{len(mismatches)}/{len(rows)} rows differ:\n" + "\n".join(mismatches)


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_rendered_prompts(model_key):
    """greedy.jsonl prompt_ids are what llama.cpp made of rendered_prompt (specials parsed).

    A prompt whose template already starts with the BOS text gets no second BOS.
    """
    tok = tokenizer(model_key)
    for row in greedy_rows(model_key):
        prompt = row["rendered_prompt"]
        add_special = not (tok.add_bos and prompt.startswith(tok.bos_token))
        got = tok.encode(prompt, add_special=add_special, parse_special=True)
        assert got == row["prompt_ids"], describe_mismatch(prompt, "chat", got, row["prompt_ids"])


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_generated_text_and_end_of_generation(model_key):
    """llama.cpp stopped at the first EOG token, and its text is our decode of the ids."""
    tok = tokenizer(model_key)
    for row in greedy_rows(model_key):
        ids = list(row["greedy_ids"])
        if len(ids) < 48:  # stopped early: the last token ended generation
            assert tok.is_eog(ids[-1]) and ids[-1] in tok.eot_ids, ids[-1]
            ids = ids[:-1]
        assert not any(tok.is_eog(t) for t in ids), f"EOG inside {row['prompt']!r}"
        assert tok.decode(ids, skip_special=True) == row["greedy_text"]


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_round_trip(model_key):
    """decode(encode(x)) == x for the reference texts; BOS renders as text unless skipped."""
    tok = tokenizer(model_key)
    texts = sorted({row["text"] for row in tokenize_rows(model_key)})
    for text in texts:
        assert tok.decode(tok.encode(text, add_special=False)) == text
        with_special = tok.encode(text, add_special=True)
        assert tok.decode(with_special, skip_special=True) == text
        prefix = tok.bos_token if tok.add_bos else ""
        assert tok.decode(with_special) == prefix + text


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_special_token_text(model_key):
    """Control tokens render as their text unless skipped; parse_special finds them again."""
    tok = tokenizer(model_key)
    eos = tok.eos_id
    assert eos in tok.eot_ids
    assert tok.token_to_bytes(eos) == tok.eos_token.encode()
    assert tok.token_to_bytes(eos, special=False) == b""
    assert tok.decode([eos], skip_special=True) == ""
    assert tok.encode(tok.eos_token, add_special=False, parse_special=True) == [eos]
    assert tok.encode(tok.eos_token, add_special=False, parse_special=False) != [eos]


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_stream_decoder_holds_partial_characters(model_key):
    """Emoji/CJK split across tokens come out whole, never as U+FFFD."""
    tok = tokenizer(model_key)
    text = "Emoji: 😀👍🏽 👨\u200d👩\u200d👧\u200d👦 🇫🇷 ✨ 大模型推理优化 𠀀𪚥 тест"
    ids = tok.encode(text, add_special=False)
    partial = [t for t in ids if _is_partial_utf8(tok.token_to_bytes(t))]
    assert partial, "the text should contain tokens that are incomplete UTF-8 on their own"
    stream = StreamDecoder(tok)
    chunks = [stream.feed(t) for t in ids] + [stream.flush()]
    assert "".join(chunks) == text
    assert not any("\ufffd" in c for c in chunks)


def _is_partial_utf8(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_stream_decoder_flush_replaces_unfinished_character():
    tok = tokenizer("qwen2.5-coder-0.5b-q4_k_m")
    first = next(t for t in tok.encode("𪚥", add_special=False)
                 if _is_partial_utf8(tok.token_to_bytes(t)))
    stream = StreamDecoder(tok)
    assert stream.feed(first) == ""
    assert stream.flush() == "\ufffd"
    assert stream.flush() == ""


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_corpus_chunks_and_speed(model_key):
    """The perplexity corpus tokenizes in < 2 s (CPU) into llama-perplexity's chunk count."""
    tok = tokenizer(model_key)
    text = CORPUS.read_text(encoding="utf-8")
    wall, cpu = time.perf_counter(), time.process_time()
    ids = tok.encode(text, add_special=True, parse_special=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{model_key}: {len(text)} chars -> {len(ids)} tokens, "
          f"{cpu:.3f} s CPU, {wall:.3f} s wall")
    assert cpu < TIME_BOUND_S
    for res in f16_perplexity_rows():
        if res["model"] == model_key and "chunks" in res:
            assert len(ids) // res["n_ctx"] == res["chunks"]
    assert tok.decode(ids, skip_special=True) == text


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_load_time(model_key):
    """Building the tokenizer from metadata takes < 2 s of CPU (gemma3: 262k tokens)."""
    meta = metadata(model_key)
    wall, cpu = time.perf_counter(), time.process_time()
    tok = Tokenizer.from_gguf_metadata(meta)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"{model_key}: n_vocab {tok.n_vocab}, {cpu:.3f} s CPU, {wall:.3f} s wall")
    assert cpu < TIME_BOUND_S
    assert tok.n_vocab == len(meta["tokenizer.ggml.tokens"])


# Python-heap MB a built tokenizer may keep (tracemalloc; the C++ BPE table is not counted).
# Texts are UTF-8 (packed into one buffer for BPE), attributes and scores typed arrays; only
# Gemma's SPM lookup table has objects per token (bytes keys, int ids: ~28 MB of the 33).
KEPT_MB = {"smollm2-135m-q4_1": 2, "gemma3-270m-q4_k_m": 36, "qwen2.5-coder-0.5b-q4_k_m": 6}


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_python_memory_kept(model_key):
    """No per-token Python objects beyond the SPM table: a str per token (~80 B), a float
    score list or a Python copy of the BPE vocabulary would break the bound."""
    meta = metadata(model_key)
    gc.collect()
    tracemalloc.start()
    try:
        tok = Tokenizer.from_gguf_metadata(meta)
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    print(f"{model_key}: n_vocab {tok.n_vocab}, {kept / 2**20:.1f} MB of Python objects kept")
    assert kept < KEPT_MB[model_key] * 2**20


@pytest.mark.parametrize("model_key", MODEL_KEYS)
def test_token_text_and_id_round_trip(model_key):
    """token_id inverts token_text (texts are held as UTF-8); other texts give None."""
    tok = tokenizer(model_key)
    for tid in range(0, tok.n_vocab, 97):
        assert tok.token_id(tok.token_text(tid)) == tid
    assert tok.token_id("no such token") is None
    assert tok.token_id("\udc80") is None  # a lone surrogate is no (UTF-8) token text


def test_bpe_merges_rules():
    """llama.cpp's BPE rule on a toy vocabulary: lowest rank first, leftmost on ties, merged
    symbols merge again, characters that are no token are dropped (byte-level vocabularies have
    a token for every byte, so this never happens on real text), ignore_merges emits a
    token word whole, a repeated merge keeps its first rank, an unusable one is skipped."""
    from localllm import _core
    tokens = ["a", "b", "c", "ab", "bc", "abc", "aa", "aaa", "é", "éa"]
    merges = ["b c", "a b", "a bc", "ab c", "a a", "aa a", "b c", "x y", "é a", "nospace"]
    bpe = _core.BpeMerges(tokens, merges, False)
    assert bpe.n_merges == 6 + 1                       # "b c" once, "x y" and "nospace" skipped
    ids = {t: i for i, t in enumerate(tokens)}
    assert bpe.encode_words(["abc"]) == [ids["abc"]]   # b+c (rank 0) first, then a+bc
    assert bpe.encode_words(["aaaa"]) == [ids["aa"], ids["aa"]]   # leftmost a+a first, twice
    assert bpe.encode_words(["aaa"]) == [ids["aaa"]]
    assert bpe.encode_words(["axc", "éa", "zz"]) == [ids["a"], ids["c"], ids["éa"]]
    assert bpe.encode_words(["axb"]) == [ids["ab"]]   # as `tokenizers`: dropped, then adjacent
    # 100k symbols in one word: no quadratic scan (the last a + a pair meets "aa a")
    assert bpe.encode_words(["a" * 100_001]) == [ids["aa"]] * 49_999 + [ids["aaa"]]
    assert _core.BpeMerges(tokens, merges, True).encode_words(["ab", "abab"]) == \
        [ids["ab"], ids["ab"], ids["ab"]]
    assert bpe.token_id("bc") == ids["bc"] and bpe.token_id("q") is None


@pytest.mark.parametrize("model_key", ["smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m"])
def test_bpe_merges_match_the_tokenizers_library(model_key):
    """The C++ merges against an independent BPE (Hugging Face `tokenizers`) on the same
    vocabulary: corpus words and random strings of the vocabulary's characters."""
    from tokenizers import Tokenizer as HfTokenizer
    from tokenizers import models
    from localllm import _core
    meta = metadata(model_key)
    tokens, lines = list(meta["tokenizer.ggml.tokens"]), list(meta["tokenizer.ggml.merges"])
    vocab = dict(zip(reversed(tokens), range(len(tokens) - 1, -1, -1)))
    pairs = [tuple(line.split(" ", 1)) for line in dict.fromkeys(lines)]
    hf = HfTokenizer(models.BPE(vocab=vocab, merges=pairs))
    ours = _core.BpeMerges(tokens, lines, False)
    rng = np.random.default_rng(0)
    chars = [t for t in tokens if len(t) == 1]
    from localllm.text.pretok import bytes_to_unicode_text, split_words
    spec = tokenizer(model_key)._v.pre_spec
    corpus_words = [bytes_to_unicode_text(w)
                    for w in split_words(CORPUS.read_text(encoding="utf-8")[:20000], spec.regexes)]
    random_words = ["".join(rng.choice(chars, rng.integers(1, 40))) for _ in range(3000)]
    for words in (corpus_words, random_words):
        want = hf.encode(words, is_pretokenized=True, add_special_tokens=False).ids
        assert ours.encode_words(words) == want


def test_unusable_and_repeated_merges_are_skipped():
    """A merge naming text outside the vocabulary, or repeating an earlier one, changes nothing."""
    meta = metadata("smollm2-135m-q4_1")
    merges = list(meta["tokenizer.ggml.merges"])
    odd = {**meta, "tokenizer.ggml.merges": merges[:100] + ["zzqq xxyy", merges[5]] + merges[100:]}
    text = CORPUS.read_text(encoding="utf-8")[:3000]
    assert Tokenizer.from_gguf_metadata(odd).encode(text) == \
        tokenizer("smollm2-135m-q4_1").encode(text)


def test_numpy_arrays_accepted():
    """Metadata arrays may be numpy arrays (scores, types) instead of lists."""
    meta = dict(metadata("gemma3-270m-q4_k_m"))
    meta["tokenizer.ggml.scores"] = np.asarray(meta["tokenizer.ggml.scores"], np.float32)
    meta["tokenizer.ggml.token_type"] = np.asarray(meta["tokenizer.ggml.token_type"], np.int32)
    tok = Tokenizer.from_gguf_metadata(meta)
    text = "The quick brown fox 大模型"
    assert tok.encode(text) == tokenizer("gemma3-270m-q4_k_m").encode(text)


def test_model_facts():
    gemma = tokenizer("gemma3-270m-q4_k_m")
    assert gemma.add_bos and not gemma.add_eos and gemma.bos_token == "<bos>"
    assert gemma.token_id("<end_of_turn>") in gemma.eot_ids
    for key in ("smollm2-135m-q4_1", "qwen2.5-coder-0.5b-q4_k_m"):
        tok = tokenizer(key)
        assert not tok.add_bos and not tok.add_eos
        assert tok.token_id("<|im_end|>") in tok.eot_ids
        assert tok.token_id("<|im_start|>") not in tok.eot_ids
    assert tokenizer("qwen2.5-coder-0.5b-q4_k_m").chat_template


def test_spm_piece_cutting_is_exact():
    """Gemma's SPM cuts text where no token can span; merging whole fragments agrees."""
    tok = tokenizer("gemma3-270m-q4_k_m")
    text = CORPUS.read_text(encoding="utf-8")[:12000] + " a  >▁b ▁▁c"
    spm = tok._spm
    for start, end in (f for f in tok._partition(text, False) if not isinstance(f, int)):
        piece = text[start:end].replace(" ", "\u2581")
        assert spm.encode(piece) == spm._encode_piece(piece), piece


def test_bad_input():
    meta = metadata("smollm2-135m-q4_1")
    with pytest.raises(ValueError, match="tokenizer.ggml.model"):
        Tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.model": "rwkv"})
    with pytest.raises(ValueError, match="tokenizer.ggml.scores"):      # a Unigram vocabulary needs them
        Tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.model": "t5"})
    with pytest.raises(ValueError, match="pre-tokenizer"):
        Tokenizer.from_gguf_metadata({**meta, "tokenizer.ggml.pre": "no-such-pre"})
    no_tokens = {k: v for k, v in meta.items() if k != "tokenizer.ggml.tokens"}
    with pytest.raises(ValueError, match="tokenizer.ggml.tokens"):
        Tokenizer.from_gguf_metadata(no_tokens)
    no_merges = {k: v for k, v in meta.items() if k != "tokenizer.ggml.merges"}
    with pytest.raises(ValueError, match="merges"):
        Tokenizer.from_gguf_metadata(no_merges)
    with pytest.raises(TypeError):
        Tokenizer.from_gguf_metadata(["not", "a", "mapping"])
    tok = tokenizer("smollm2-135m-q4_1")
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match="out of range"):
        tok.decode([tok.n_vocab])
    with pytest.raises(ValueError, match="out of range"):
        tok.token_to_bytes(-1)


# Scripts mixed on purpose; no '~' (llama.cpp's collapsed \p{S} lacks it) and no non-ASCII
# whitespace (llama.cpp maps it to \v before its own, non-Unicode regex engine).
_SPLIT_SAMPLES = (
    "Hello world! It's 2024; we'll see 12345 items.\n\n  Indented   text\twith tabs\r\nend  ",
    "café naïve Straße 123abc ABC's don't I'M YOU'LL",
    "def f(x):\n    return x**2 + 1_000\n",
    "大模型推理 优化123 テキスト Привет, мир! مرحبا ١٢٣",
    "...!!!???---___===+++ $100 50% #tag @u <b>|^`",
)
# These use [^a-z] lookaheads that llama.cpp's collapsed text only honours for ASCII letters.
_ASCII_ONLY_PRE = {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2", "tekken"}


def _unicode_regex_split(regex_module, text: str, patterns) -> list[str]:
    bounds = [(0, len(text))]
    for pattern in patterns:
        compiled = regex_module.compile(pattern)
        refined = []
        for start, end in bounds:
            prev = start
            for m in compiled.finditer(text, start, end):
                if m.start() > prev:
                    refined.append((prev, m.start()))
                if m.end() > m.start():
                    refined.append(m.span())
                prev = m.end()
            if prev < end:
                refined.append((prev, end))
        bounds = refined
    return [text[s:e] for s, e in bounds]


def test_pre_tokenizer_regexes_match_a_unicode_regex_engine():
    """Every known pre-tokenizer splits ordinary text like a real \\p{..} regex engine."""
    regex_module = pytest.importorskip("regex")
    from localllm.text.pretok import (pre_tokenizer_spec, split_words,
                                           supported_pre_tokenizers)

    names = supported_pre_tokenizers()
    assert {"default", "gpt-2", "llama-bpe", "qwen2", "smollm"} <= set(names)
    for name in names:
        spec = pre_tokenizer_spec(name)
        for text in _SPLIT_SAMPLES:
            if name in _ASCII_ONLY_PRE and not text.isascii():
                continue
            want = _unicode_regex_split(regex_module, text, spec.regexes)
            assert split_words(text, spec.regexes) == want, (name, text)


def test_clean_up_spaces_rules():
    """llama_detokenize's clean-up for BPE vocabularies that ask for it (gpt-2, llama3...)."""
    from localllm.text.tokenizer import _clean_up_spaces

    assert _clean_up_spaces(b"Hi , you ! Ok ? Yes .") == b"Hi, you! Ok? Yes."
    assert _clean_up_spaces(b"x ' y") == b"x'y"
    assert _clean_up_spaces(b"it 's we 're they 've I 'm") == b"it's we're they've I'm"
    assert _clean_up_spaces(b"don 't we 'd you 'll") == b"don 't we 'd you 'll"
    assert _clean_up_spaces(b"") == b""


def test_phi3_special_tokens_strip_following_spaces():
    """llama.cpp gives phi-3 special tokens RSTRIP: spaces after them are dropped."""
    meta = metadata("smollm2-135m-q4_1")
    plain = Tokenizer.from_gguf_metadata(meta)
    phi3 = Tokenizer.from_gguf_metadata({**meta, "general.name": "Phi-3-mini"})
    start = plain.token_id("<|im_start|>")
    text = "<|im_start|>  user"
    assert phi3.encode(text, add_special=False, parse_special=True) == \
        [start] + plain.encode("user", add_special=False)
    assert plain.encode(text, add_special=False, parse_special=True) == \
        [start] + plain.encode("  user", add_special=False)
