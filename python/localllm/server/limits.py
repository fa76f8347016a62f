"""Bounds on everything a request controls, checked on the event loop before any expensive work
(tokenizing, templating, the engine): what a client sends must not cost the server, or the
other clients, more than a bounded amount.

| limit | default | why |
| --- | --- | --- |
| body bytes | 8 MiB | read before parsing; 413 beyond (Content-Length or counted while reading) |
| prompt characters | 16 x the context | a context's worth of text, generously (English runs ~4 characters a token); checked before tokenizing |
| stop strings | 16, of 256 characters each | matched against every generated token (OpenAI allows 4) |
| logit_bias entries | 300 | applied to every sampled token |
| choices (n x prompts) | --parallel + --max-queue | more can never be admitted: 400, not a 429 to retry forever |
| logprobs / top_logprobs | 20 | (protocol.MAX_LOGPROBS) |
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import APIError, bad_request

__all__ = ["RequestLimits", "PROMPT_CHARS_PER_TOKEN"]

PROMPT_CHARS_PER_TOKEN = 16       # the default prompt bound: this many characters per context token


@dataclass
class RequestLimits:
    """What one request may ask for (see the module's table). max_prompt_chars None: 16 x n_ctx."""
    max_body_bytes: int = 8 * 2**20
    max_prompt_chars: Optional[int] = None
    max_stop: int = 16
    max_stop_chars: int = 256
    max_logit_bias: int = 300

    def prompt_chars(self, n_ctx: int) -> int:
        return self.max_prompt_chars if self.max_prompt_chars is not None else PROMPT_CHARS_PER_TOKEN * n_ctx

    def check_sampling(self, body: Any) -> None:
        """stop and logit_bias of a completion or chat body."""
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if len(stops) > self.max_stop:
            raise bad_request(f"stop: {len(stops)} stop strings, at most {self.max_stop} are allowed "
                              f"(--max-stop)", param="stop")
        for i, s in enumerate(stops):
            if len(s) > self.max_stop_chars:
                raise bad_request(f"stop[{i}]: {len(s)} characters, at most {self.max_stop_chars} are allowed "
                                  f"(--max-stop-chars)", param="stop")
        if body.logit_bias and len(body.logit_bias) > self.max_logit_bias:
            raise bad_request(f"logit_bias: {len(body.logit_bias)} entries, at most {self.max_logit_bias} are "
                              f"allowed (--max-logit-bias)", param="logit_bias")

    def check_choices(self, n: int, n_prompts: int, parallel: int, max_queue: int) -> None:
        """400 for more choices than the server can ever hold at once (running + waiting)."""
        capacity = parallel + max_queue
        if n * n_prompts > capacity:
            what = f"n={n} x {n_prompts} prompts = {n * n_prompts}" if n_prompts > 1 else f"n={n}"
            raise bad_request(f"n: {what} choices, more than this server can ever hold ({capacity}: --parallel "
                              f"{parallel} + --max-queue {max_queue})", param="n")

    def check_prompts(self, prompts: list[Union[str, list[int]]], n_ctx: int) -> None:
        """Completion prompts: text within the character bound, token lists within the context."""
        limit = self.prompt_chars(n_ctx)
        chars = sum(len(p) for p in prompts if isinstance(p, str))
        if chars > limit:
            raise _too_long("prompt", f"{chars} characters", limit, n_ctx)
        for p in prompts:
            if not isinstance(p, str) and len(p) >= n_ctx:
                raise bad_request(f"prompt: {len(p)} token ids, the context holds {n_ctx} (a prompt must leave "
                                  f"room for one token)", param="prompt", code="context_length_exceeded")

    def check_messages(self, messages: list[dict[str, Any]], n_ctx: int) -> None:
        """Chat messages: their text (content and any other fields) within the character bound."""
        limit = self.prompt_chars(n_ctx)
        chars = 0
        for m in messages:
            for value in m.values():
                chars += len(value) if isinstance(value, str) else len(json.dumps(value, default=str))
            if chars > limit:
                raise _too_long("messages", f"over {limit} characters", limit, n_ctx)

    def check_text(self, text: str, param: str, n_ctx: int) -> None:
        limit = self.prompt_chars(n_ctx)
        if len(text) > limit:
            raise _too_long(param, f"{len(text)} characters", limit, n_ctx)


def _too_long(param: str, size: str, limit: int, n_ctx: int) -> APIError:
    return bad_request(f"{param}: {size}, at most {limit} are allowed before tokenizing (--max-prompt-chars; "
                       f"the context is {n_ctx} tokens)", param=param, code="context_length_exceeded")
