"""Text in and out: GGUF vocabularies, the BPE and SentencePiece tokenizers, chat templates.

- `tokenizer`: `Tokenizer` (encode / decode as llama.cpp does) and `StreamDecoder`;
- `vocab`, `pretok`, `bpe`, `spm`: the vocabulary, pre-tokenizer, BPE merges, SPM encoder;
- `chat`: the GGUF's chat template rendered in jinja2's sandbox.
"""
from .chat import ChatTemplateError, render_chat
from .tokenizer import StreamDecoder, Tokenizer

__all__ = ["ChatTemplateError", "StreamDecoder", "Tokenizer", "render_chat"]
