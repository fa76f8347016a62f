"""WordPiece's basic tokenizing (localllm.text.wpm.basic_words) against Hugging Face tokenizers'
BertNormalizer + BertPreTokenizer (the Rust BERT tokenizer's first stages): random ASCII text over
all 128 code points, control characters and punctuation included (the ASCII fast path), and text
with accents, CJK and Unicode spaces (the per-character path), cased and lower-cased."""
from __future__ import annotations

import random

import pytest
from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from localllm.text.wpm import basic_words

ASCII = [chr(i) for i in range(128)]
DENSE = list("ab Z9.,-'\t\n\r\x00\x01\x0b\x0c\x1c\x1f\x7f")       # separators and controls, often
UNICODE = list("aé Ü東京\u3000\u00a0ñ.,¿!\u200b\x00") + ASCII[32:40]


def reference(text: str, lowercase: bool) -> list[str]:
    normalized = BertNormalizer(lowercase=lowercase, strip_accents=lowercase).normalize_str(text)
    return [w for w, _ in BertPreTokenizer().pre_tokenize_str(normalized)]


@pytest.mark.parametrize("alphabet", [ASCII, DENSE, UNICODE], ids=["ascii", "ascii-dense", "unicode"])
@pytest.mark.parametrize("lowercase", [True, False])
def test_basic_words_match_hf(alphabet, lowercase):
    rng = random.Random(len(alphabet) * 2 + lowercase)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert basic_words(text, lowercase) == reference(text, lowercase), repr(text)
