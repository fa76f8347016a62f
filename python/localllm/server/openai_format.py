"""OpenAI response shapes: whole answers and stream chunks for completions and chat
completions, built from engine outputs. One `Completion` per HTTP request accumulates every
choice (prompt i's choice j has index i * n + j)."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from ..engine import RequestOutput
from ..structured.tools import ToolCallStream, ToolSetup, calls_finish_reason
from ..text.tokenizer import Tokenizer

__all__ = ["Completion"]


@dataclass
class _Choice:
    text: list[str] = field(default_factory=list)
    n_tokens: int = 0
    logprobs: list[dict] = field(default_factory=list)   # engine entries: {"token", "logprob", "top"}
    finish_reason: Optional[str] = None
    text_len: int = 0                                     # characters emitted so far (text_offset)
    started: bool = False                                 # chat: the role chunk was sent
    tool_stream: Optional[ToolCallStream] = None          # chat with tools: holds back call markup


class Completion:
    """Answer of one request. kind: "chat" or "text"; wants_logprobs: the request asked for them."""

    def __init__(self, kind: str, model_id: str, tokenizer: Tokenizer, n_choices: int, prompt_tokens: int,
                 wants_logprobs: bool, include_usage: bool = False, tools: Optional[ToolSetup] = None):
        self.kind = kind
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model_id = model_id
        self.tokenizer = tokenizer
        self.choices = [_Choice() for _ in range(n_choices)]
        self.prompt_tokens = prompt_tokens
        self.wants_logprobs = wants_logprobs
        self.include_usage = include_usage
        self.tools = tools              # parse tool calls out of each choice (chat with tools)
        for c in self.choices:
            c.tool_stream = ToolCallStream(tools) if tools is not None else None

    # ---- pieces ----
    def _token(self, token: int) -> tuple[str, bytes]:
        raw = self.tokenizer.token_to_bytes(token)
        return raw.decode("utf-8", "replace"), raw

    def _chat_logprobs(self, entries: list[dict]) -> dict:
        content = []
        for e in entries:
            text, raw = self._token(e["token"])
            top = []
            for tid, lp in e["top"]:
                t, b = self._token(tid)
                top.append({"token": t, "logprob": lp, "bytes": list(b)})
            content.append({"token": text, "logprob": e["logprob"], "bytes": list(raw), "top_logprobs": top})
        return {"content": content}

    def _text_logprobs(self, entries: list[dict], offset: int) -> dict:
        tokens, lps, tops, offsets = [], [], [], []
        for e in entries:
            text, _ = self._token(e["token"])
            tokens.append(text)
            lps.append(e["logprob"])
            tops.append({self._token(tid)[0]: lp for tid, lp in e["top"]})
            offsets.append(offset)
            offset += len(text)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}

    def _logprobs(self, entries: list[dict], offset: int) -> Optional[dict]:
        if not self.wants_logprobs:
            return None
        return self._chat_logprobs(entries) if self.kind == "chat" else self._text_logprobs(entries, offset)

    def usage(self) -> dict:
        completion = sum(c.n_tokens for c in self.choices)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    # ---- whole answer ----
    def add(self, index: int, out: RequestOutput) -> None:
        c = self.choices[index]
        c.text.append(out.text)
        c.n_tokens += len(out.token_ids)
        c.logprobs += out.logprobs
        if out.finished:
            c.finish_reason = out.finish_reason

    def response(self) -> dict:
        choices = []
        for i, c in enumerate(self.choices):
            text = "".join(c.text)
            choice: dict[str, Any] = {"index": i}
            finish_reason = c.finish_reason
            if self.kind == "chat":
                choice["message"] = {"role": "assistant", "content": text}
                calls = []
                if self.tools is not None:
                    content, calls = self.tools.parse(text)
                if calls:
                    choice["message"] = {"role": "assistant", "content": content or None,
                                         "tool_calls": [call.openai() for call in calls]}
                    finish_reason = calls_finish_reason(calls, finish_reason)
            else:
                choice["text"] = text
            choice["logprobs"] = self._logprobs(c.logprobs, 0)
            choice["finish_reason"] = finish_reason
            choices.append(choice)
        return {"id": self.id, "object": "chat.completion" if self.kind == "chat" else "text_completion",
                "created": self.created, "model": self.model_id, "choices": choices, "usage": self.usage()}

    # ---- stream ----
    def _chunk(self, choices: list[dict]) -> dict:
        chunk = {"id": self.id, "object": "chat.completion.chunk" if self.kind == "chat" else "text_completion",
                 "created": self.created, "model": self.model_id, "choices": choices}
        if self.include_usage:
            chunk["usage"] = None
        return chunk

    def chunks(self, index: int, out: RequestOutput) -> list[dict]:
        """The stream chunks one output makes (none when it carries nothing to say)."""
        c = self.choices[index]
        c.n_tokens += len(out.token_ids)
        lp = self._logprobs(out.logprobs, c.text_len) if out.logprobs else None
        c.text_len += len(out.text)
        chunks = []
        if self.kind == "chat":
            if not c.started:
                c.started = True
                chunks.append(self._chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]))
            text, finish_reason = out.text, out.finish_reason
            if c.tool_stream is not None:
                text = c.tool_stream.feed(text)
            if text or lp:
                chunks.append(self._chunk([{"index": index, "delta": {"content": text}, "logprobs": lp,
                                            "finish_reason": None}]))
            if out.finished:
                if c.tool_stream is not None:
                    chunks += self._tool_chunks(index, c.tool_stream)
                    finish_reason = calls_finish_reason(c.tool_stream.calls, finish_reason)
                chunks.append(self._chunk([{"index": index, "delta": {}, "logprobs": None,
                                            "finish_reason": finish_reason}]))
        elif out.text or lp or out.finished:
            chunks.append(self._chunk([{"index": index, "text": out.text, "logprobs": lp,
                                        "finish_reason": out.finish_reason if out.finished else None}]))
        if out.finished:
            c.finish_reason = out.finish_reason
        return chunks

    def _tool_chunks(self, index: int, stream: ToolCallStream) -> list[dict]:
        """The end of a choice with tools: held-back content, then each call as OpenAI's deltas
        keyed by its index (id, type and name first, then the arguments)."""
        content, calls = stream.finish()
        chunks = []
        if content:
            chunks.append(self._chunk([{"index": index, "delta": {"content": content}, "logprobs": None,
                                        "finish_reason": None}]))
        for i, call in enumerate(calls):
            head = {"index": i, "id": call.id, "type": "function", "function": {"name": call.name, "arguments": ""}}
            for delta in (head, {"index": i, "function": {"arguments": call.arguments}}):
                chunks.append(self._chunk([{"index": index, "delta": {"tool_calls": [delta]}, "logprobs": None,
                                            "finish_reason": None}]))
        return chunks

    def usage_chunk(self) -> dict:
        """The extra last chunk of `stream_options.include_usage`: no choices, the usage."""
        chunk = self._chunk([])
        chunk["usage"] = self.usage()
        return chunk
