"""SentencePiece vocabularies (tokenizer.model) without the sentencepiece package.

tokenizer.model is a protobuf ``ModelProto``; only three fields matter here: ``pieces`` (1),
each with ``piece`` (1, string), ``score`` (2, float) and ``type`` (3, enum), and the
``normalizer_spec`` (3) flag ``add_dummy_prefix`` (3). The protobuf wire format is decoded
directly (varints, 32/64-bit fixed fields and length-delimited fields).
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterator

from .vocab import TokenType, Vocab, VocabError, added_token_entries, looks_special

__all__ = ["SentencePieceModel", "parse_sentencepiece", "load_spm_vocab"]

_WIRE_VARINT, _WIRE_I64, _WIRE_LEN, _WIRE_I32 = 0, 1, 2, 5
_F32 = struct.Struct("<f")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise VocabError("tokenizer.model is truncated (inside a varint)")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise VocabError("tokenizer.model has a malformed varint")


def _fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of one protobuf message."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _WIRE_I64:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == _WIRE_I32:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == _WIRE_LEN:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise VocabError(f"tokenizer.model: unsupported protobuf wire type {wire}")
        if pos > len(buf):
            raise VocabError("tokenizer.model is truncated")
        yield number, wire, value


class SentencePieceModel:
    """The pieces and normalizer flags of a tokenizer.model."""

    def __init__(self, pieces: list[tuple[str, float, int]], add_dummy_prefix: bool):
        self.pieces = pieces                    # (piece, score, SentencePiece type)
        self.add_dummy_prefix = add_dummy_prefix


def _parse_piece(msg: bytes) -> tuple[str, float, int]:
    """One SentencePiece message: (piece, score, type)."""
    # Fast path for the usual encoding: piece (short), then score, then maybe type.
    size = len(msg)
    if size > 1 and msg[0] == 0x0A and msg[1] < 0x80:
        pos = 2 + msg[1]
        piece, score, kind = msg[2:pos], 0.0, int(TokenType.NORMAL)
        if pos + 5 <= size and msg[pos] == 0x15:
            score = _F32.unpack_from(msg, pos + 1)[0]
            pos += 5
        if pos + 2 <= size and msg[pos] == 0x18 and msg[pos + 1] < 0x80:
            kind = msg[pos + 1]
            pos += 2
        if pos == size:
            return piece.decode("utf-8"), score, kind
    piece, score, kind = "", 0.0, int(TokenType.NORMAL)
    for n, w, v in _fields(msg):
        if n == 1 and w == _WIRE_LEN:
            piece = v.decode("utf-8")
        elif n == 2 and w == _WIRE_I32:
            score = struct.unpack("<f", v)[0]
        elif n == 3 and w == _WIRE_VARINT:
            kind = v
    return piece, score, kind


def parse_sentencepiece(data: bytes) -> SentencePieceModel:
    """Decode a serialized sentencepiece ModelProto.

    The top-level loop reads the (hundreds of thousands of) piece fields inline, with the
    common one-byte length varint decoded directly; the rest goes through :func:`_fields`.
    """
    pieces: list[tuple[str, float, int]] = []
    add_dummy_prefix = True        # the proto default
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire != _WIRE_LEN:       # no scalar top-level field matters here: skip it
            pos = _skip(data, pos, wire)
            continue
        n = data[pos] if pos < end else 0
        if n < 0x80:
            pos += 1
        else:
            n, pos = _varint(data, pos)
        value = data[pos:pos + n]
        pos += n
        if pos > end:
            raise VocabError("tokenizer.model is truncated")
        if number == 1:
            pieces.append(_parse_piece(value))
        elif number == 3:
            for fn, fw, fv in _fields(value):
                if fn == 3 and fw == _WIRE_VARINT:
                    add_dummy_prefix = bool(fv)
    if not pieces:
        raise VocabError("tokenizer.model has no pieces (not a SentencePiece model?)")
    return SentencePieceModel(pieces, add_dummy_prefix)


def _skip(buf: bytes, pos: int, wire: int) -> int:
    if wire == _WIRE_VARINT:
        return _varint(buf, pos)[1]
    if wire in (_WIRE_I64, _WIRE_I32):
        return pos + (8 if wire == _WIRE_I64 else 4)
    raise VocabError(f"tokenizer.model: unsupported protobuf wire type {wire}")


def _piece_type(kind: int) -> TokenType:
    """GGUF type of a SentencePiece piece type. User-defined pieces (always-atomic symbols in
    SentencePiece) stay USER_DEFINED, with their spaces pre-normalised like added tokens."""
    try:
        return TokenType(kind)
    except ValueError:
        raise VocabError(f"tokenizer.model has a piece of unknown type {kind}") from None


def load_spm_vocab(path: Path, checkpoint, vocab_size: int | None) -> Vocab:
    """Tokens, scores and types as llama.cpp writes them for a SentencePiece model.

    Ids past the pieces up to ``vocab_size`` are ``[PAD<id>]`` UNUSED; added tokens
    (added_tokens.json, tokenizer_config.json's added_tokens_decoder, else tokenizer.json's
    added_tokens) override the pieces: special ones become CONTROL, others USER_DEFINED, with
    score -1000.
    """
    spm = parse_sentencepiece(Path(path).read_bytes())
    n = vocab_size or len(spm.pieces)
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [int(TokenType.UNUSED)] * n
    for i, (piece, score, kind) in enumerate(spm.pieces[:n]):
        ttype = _piece_type(kind)
        if ttype == TokenType.USER_DEFINED:
            piece = piece.replace("\u2581", " ")
        tokens[i], scores[i], types[i] = piece, score, int(ttype)

    def override(token_id: int, content: str, special: bool) -> None:
        if not 0 <= token_id < n:
            return
        if special or looks_special(content):
            types[token_id] = int(TokenType.CONTROL)
        else:
            content = content.replace("\u2581", " ")
            types[token_id] = int(TokenType.USER_DEFINED)
        tokens[token_id], scores[token_id] = content, -1000.0

    for content, token_id in checkpoint.json_object("added_tokens.json").items():
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            raise VocabError(f"added_tokens.json: {content!r:.40} needs an integer id, got {token_id!r:.40}")
        if 0 <= token_id < n:
            tokens[token_id], scores[token_id] = content, -1000.0
            types[token_id] = int(TokenType.USER_DEFINED)
    decoder = checkpoint.json_object("tokenizer_config.json").get("added_tokens_decoder")
    if decoder:
        entries = added_token_entries(decoder, "tokenizer_config.json")
    else:
        entries = added_token_entries(checkpoint.json_object("tokenizer.json").get("added_tokens"), "tokenizer.json")
    for token_id, entry in entries:
        override(token_id, entry["content"], bool(entry.get("special")))
    return Vocab(model="llama", pre="default", tokens=tokens, types=types, scores=scores,
                 add_space_prefix=None if spm.add_dummy_prefix else False)
