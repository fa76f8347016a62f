"""Fuzz the tokenizers of the three real models: arbitrary bytes decoded as UTF-8 (invalid bytes
as lone surrogates replaced) -> encode with and without special-token parsing -> decode, and a
streaming decode of the same ids, plus arbitrary ids -> detokenize.

Properties: no exception at all for valid text; decode(encode(text)) == text without special
parsing wherever the vocabulary covers each character of the text (SmolLM2's has no token for
some control bytes such as 0x06, which it then drops exactly as llama.cpp's BPE does; Gemma's
SPM has byte fallback for all, Qwen's byte-level BPE all 256 bytes); the stream decoder's chunks
join to decode(ids), and for arbitrary ids whose bytes are valid UTF-8 they join to that text with
nothing replaced (ids that spell invalid UTF-8 rightly give U+FFFD); ids outside the vocabulary
raise ValueError."""
from __future__ import annotations


import atheris

import harness

with atheris.instrument_imports(include=harness.INSTRUMENTED):
    from localllm import hub
    from localllm.gguf import GGUFFile
    from localllm.text.tokenizer import StreamDecoder, Tokenizer

MODELS = ["smollm2-135m-q4_1", "gemma3-270m-q4_k_m", "qwen2.5-coder-0.5b-q4_k_m"]
TOKENIZERS = [Tokenizer.from_gguf_metadata(GGUFFile(str(hub.pull(k, quiet=True))).metadata) for k in MODELS]


def seeds():
    yield b"Hello, world! 123"
    yield "Emoji: \U0001F600\U0001F44D\U0001F3FD caf\u00e9 \u5927\u6a21\u578b \u0442\u0435\u0441\u0442".encode()
    yield b"<|im_start|>user\nHi<|im_end|>\n<start_of_turn>model\n<bos></s>"
    yield b"  \t\n\r\n   leading and trailing spaces   \x00\x01\x7f"
    yield bytes(range(256))


_COVERED: dict[tuple[int, str], bool] = {}


def covered(tok: Tokenizer, text: str) -> bool:
    """Every character of text survives encode/decode on its own in this vocabulary."""
    for c in set(text):
        key = (id(tok), c)
        if key not in _COVERED:
            _COVERED[key] = tok.decode(tok.encode(c, add_special=False)) == c
        if not _COVERED[key]:
            return False
    return True


def check(tok: Tokenizer, text: str, ids_raw: bytes) -> None:
    promised = covered(tok, text)
    for parse_special in (False, True):
        ids = tok.encode(text, add_special=parse_special, parse_special=parse_special)
        assert all(0 <= i < tok.n_vocab for i in ids)
        decoded = tok.decode(ids, skip_special=parse_special)
        if promised and not parse_special:
            assert decoded == text, (text, ids, decoded)
        stream = StreamDecoder(tok)
        chunks = [stream.feed(i) for i in ids] + [stream.flush()]
        assert "".join(chunks) == tok.decode(ids), (text, ids)
        harness.feedback(tok.model, parse_special, len(ids) > 0, len(text) > 0)
    # Arbitrary ids: in-vocabulary ones detokenize; out-of-vocabulary ones are a ValueError.
    arbitrary = [int.from_bytes(ids_raw[i:i + 3], "little") for i in range(0, len(ids_raw) - 2, 3)]
    try:
        tok.decode(arbitrary)
        stream = StreamDecoder(tok, skip_special=True)
        chunks = [stream.feed(i) for i in arbitrary] + [stream.flush()]
        assert all(0 <= i < tok.n_vocab for i in arbitrary)
        try:   # ids whose bytes are valid UTF-8: whole characters only, nothing replaced
            whole = tok.decode_bytes(arbitrary, skip_special=True).decode("utf-8")
        except UnicodeDecodeError:
            harness.feedback(tok.model, "invalid utf-8 ids")
        else:
            assert "".join(chunks) == whole and not any("\ufffd" in c for c in chunks if "\ufffd" not in whole)
    except ValueError:
        assert any(not 0 <= i < tok.n_vocab for i in arbitrary)
        harness.feedback(tok.model, "bad id")


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    which = fdp.ConsumeIntInRange(0, len(TOKENIZERS) - 1)
    ids_raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 96))
    text = fdp.ConsumeBytes(fdp.remaining_bytes()).decode("utf-8", "replace")
    check(TOKENIZERS[which], text, ids_raw)


if __name__ == "__main__":
    harness.run("tokenizer", seeds, test_one_input)
