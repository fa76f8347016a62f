"""The one place a request (prompt text, token ids or chat messages, plus sampling options)
becomes an engine request: prompt tokens and validated `SamplingParams`, with the default seed.
`LLM.generate`/`stream`/`chat`, the CLI and the server all build their requests here, so they
tokenize, template, validate and seed a request the same way.
"""
from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..text.chat import render_chat
from ..sampling import SamplingParams
from ..structured.grammar import compile_constraint
from ..structured.tokenizer import special_marker_texts
from ..structured.tools import ToolSetup
from ..text.tokenizer import Tokenizer, TokenAttr

__all__ = ["EngineRequest", "RequestBuilder", "Prompt"]

Prompt = Union[str, Sequence[int]]
_SEED_LIMIT = 2**64
_CONSTRAINT_OPTIONS = ("json_schema", "grammar", "response_format", "regex")


@dataclass
class EngineRequest:
    """What the engine runs: the prompt's token ids and the sampling settings of each of its `n`
    continuations (choice i samples with seed + i, so each choice is reproducible on its own)."""
    prompt_ids: list[int]
    params: SamplingParams
    n: int = 1
    tools: Optional[ToolSetup] = None     # chat with tools: parse calls out of the output

    def choice_params(self, index: int) -> SamplingParams:
        """The settings of continuation `index` (0 <= index < n)."""
        if index == 0:
            return self.params
        return replace(self.params, seed=(self.params.seed + index) % _SEED_LIMIT,
                       stop=list(self.params.stop), logit_bias=dict(self.params.logit_bias))


class RequestBuilder:
    """Turns prompts or messages and sampling options into `EngineRequest`s for one model.

    Args:
        tokenizer: the model's tokenizer.
        chat_template: the GGUF's chat template (None: ChatML).
        n_ctx: longest sequence a request may reach; a prompt must leave room for one token,
            and max_tokens is capped at what remains of the context.
        default_seed: seed used when a request gives none (None: a fresh random seed each time).
        chat_parse_special: read control-token texts (``<|im_start|>``) written inside chat
            messages as those tokens. Off by default: only the template's own markup becomes
            control tokens, so a message cannot forge a turn of another role.
    """

    def __init__(self, tokenizer: Tokenizer, chat_template: Optional[str], n_ctx: int,
                 default_seed: Optional[int] = None, chat_parse_special: bool = False):
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.n_ctx = n_ctx
        self.n_vocab = tokenizer.n_vocab
        self.default_seed = default_seed
        self.chat_parse_special = chat_parse_special
        self._control_pattern: Optional[re.Pattern] = None

    # ---- prompts ----
    def prompt_ids(self, prompt: Any) -> list[int]:
        """Token ids of a prompt: text is tokenized (BOS added as the model asks, special tokens
        parsed); a sequence of ints is used as it is. Anything else is a TypeError."""
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special=True, parse_special=True)
        else:
            ids = self.token_ids(prompt)
        return self._check_length(ids)

    def token_ids(self, prompt: Any, what: str = "prompt") -> list[int]:
        """A list of token ids checked to be ints in [0, n_vocab) (no bools, floats or bytes)."""
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise TypeError(f"{what} must be a str or a list of token ids (ints), got "
                            f"{type(prompt).__name__}: decode bytes to str first")
        if isinstance(prompt, np.ndarray):
            if prompt.ndim != 1 or not np.issubdtype(prompt.dtype, np.integer):
                raise TypeError(f"{what} as an array must be 1-D of an integer dtype, got "
                                f"{prompt.ndim}-D {prompt.dtype}")
            prompt = prompt.tolist()
        if not isinstance(prompt, (list, tuple)):
            raise TypeError(f"{what} must be a str or a list of token ids (ints), got {type(prompt).__name__}")
        for i, t in enumerate(prompt):
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"{what} token ids must be ints, got {type(t).__name__} {t!r} at index {i}")
        ids = [int(t) for t in prompt]
        bad = [t for t in ids if not 0 <= t < self.n_vocab]
        if bad:
            raise ValueError(f"token ids out of range [0, {self.n_vocab}): {bad[:5]}")
        return ids

    def chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True,
                    tools: Optional[list[dict]] = None) -> str:
        """The conversation rendered with the model's chat template (sandboxed); tools (OpenAI's
        array) reach the template as its `tools` variable."""
        tok = self.tokenizer
        return render_chat(messages, self.chat_template, bos_token=tok.bos_token or "",
                           eos_token=tok.eos_token or "", add_generation_prompt=add_generation_prompt, tools=tools)

    def chat_tokens(self, messages: Sequence[dict], tools: Optional[list[dict]] = None) -> list[int]:
        """Token ids of a rendered conversation; no second BOS when the template writes one.
        Control-token texts inside the messages stay text (see chat_parse_special)."""
        literals: dict[str, str] = {}
        if not self.chat_parse_special:
            messages = self._mark_control_texts(messages, literals)
        text = self.chat_prompt(messages, tools=tools)
        bos = self.tokenizer.bos_token
        add_bos = not (bos and text.startswith(bos))
        if not literals:            # nothing to keep literal: exactly the template's text, parsed
            return self.tokenizer.encode(text, add_special=add_bos, parse_special=True)
        return self._encode_with_literals(text, literals, add_bos)

    def _control_texts(self) -> re.Pattern:
        """A pattern matching any control token's text, longest first."""
        if self._control_pattern is None:
            tok = self.tokenizer
            texts = {tok.token_text(t) for t in range(self.n_vocab) if tok.token_attr(t) & TokenAttr.CONTROL}
            texts.discard("")
            alternatives = sorted(texts, key=len, reverse=True)
            self._control_pattern = re.compile("|".join(map(re.escape, alternatives)) if alternatives else "(?!)")
        return self._control_pattern

    def _mark_control_texts(self, messages: Sequence[dict], literals: dict[str, str]) -> list[dict]:
        """The messages with every control-token text in their string fields (but the role)
        replaced by a marker no client can guess; literals maps markers back to the text."""
        pattern, nonce = self._control_texts(), uuid.uuid4().hex

        def mark(m: re.Match) -> str:
            key = f"\ue000{nonce}:{len(literals)}\ue001"
            literals[key] = m.group(0)
            return key

        out = []
        for message in messages:
            if isinstance(message, dict):
                message = {k: pattern.sub(mark, v) if isinstance(v, str) and k != "role" else v
                           for k, v in message.items()}
            out.append(message)
        return out

    def _encode_with_literals(self, text: str, literals: dict[str, str], add_bos: bool) -> list[int]:
        """Template text with control tokens parsed; the marked message text without."""
        tok = self.tokenizer
        out = [tok.bos_id] if add_bos and tok.add_bos and tok.bos_id is not None else []
        pattern = re.compile("|".join(map(re.escape, literals)))
        position = 0
        for m in pattern.finditer(text):
            out += tok.encode(text[position:m.start()], add_special=False, parse_special=True)
            out += tok.encode(literals[m.group(0)], add_special=False, parse_special=False)
            position = m.end()
        out += tok.encode(text[position:], add_special=False, parse_special=True)
        if add_bos and tok.add_eos and tok.eos_id is not None:
            out.append(tok.eos_id)
        return out

    def chat_ids(self, messages: Sequence[dict], tools: Optional[list[dict]] = None) -> list[int]:
        """chat_tokens of a conversation that fits the context as a prompt."""
        return self._check_length(self.chat_tokens(messages, tools))

    def _check_length(self, ids: list[int]) -> list[int]:
        if not ids:
            raise ValueError("the prompt is empty (no tokens)")
        if len(ids) >= self.n_ctx:
            raise ValueError(f"the prompt is {len(ids)} tokens, longer than the context "
                             f"(n_ctx={self.n_ctx}) leaves room for; shorten it or raise n_ctx")
        return ids

    # ---- whole requests ----
    def build(self, prompt: Any = None, *, messages: Optional[Sequence[dict]] = None, n: int = 1,
              tools: Optional[list[dict]] = None, tool_choice: Any = None, parallel_tool_calls: bool = True,
              **sampling) -> EngineRequest:
        """An engine request from exactly one of `prompt` (text or token ids) and `messages`
        (a chat conversation), with `SamplingParams` fields as keyword arguments.

        tools (OpenAI's array of functions), tool_choice ("auto", "none", "required" or
        {"type": "function", "function": {"name": ...}}) and parallel_tool_calls go with
        messages: the tools reach the chat template, a forced call is enforced by a grammar, and
        the request's `tools` (a `ToolSetup`) parses the calls out of the output.

        The seed defaults to the builder's (or a fresh random one); max_tokens (default
        SamplingParams') is capped at what the prompt leaves of the context. Raises TypeError
        for a prompt of the wrong type or an unknown option, ValueError for bad values (a
        message about tools starts with "tools:" or "tool_choice:").
        """
        if (prompt is None) == (messages is None):
            raise TypeError("give exactly one of prompt and messages")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        setup = self.tool_setup(tools, tool_choice, parallel_tool_calls)
        if setup is not None:
            if messages is None:
                raise TypeError("tools need chat messages (a conversation for the chat template), not a prompt")
            messages = setup.messages(list(messages))
            self._add_tool_constraint(setup, sampling)
        ids = (self.prompt_ids(prompt) if messages is None else
               self.chat_ids(messages, setup.template_tools() if setup is not None else None))
        params = self.params(sampling)
        params.max_tokens = min(params.max_tokens, self.n_ctx - len(ids))
        return EngineRequest(ids, params, n, setup if setup is not None and setup.parses else None)

    def tool_setup(self, tools: Any, tool_choice: Any = None, parallel: bool = True) -> Optional[ToolSetup]:
        """The request's tools for this model's chat template (None without tools)."""
        if not tools:
            if tool_choice not in (None, "none", "auto"):
                raise ValueError("tool_choice: needs tools")
            if tools is not None and not isinstance(tools, list):
                raise ValueError(f"tools: must be a list of functions, got {type(tools).__name__}")
            return None
        return ToolSetup(tools, tool_choice, parallel, self.chat_template, special_marker_texts(self.tokenizer))

    @staticmethod
    def _add_tool_constraint(setup: ToolSetup, sampling: dict) -> None:
        """The grammar of a forced (or, with a marker token, started) call as the request's
        constraint; another constraint on the same output is a ValueError."""
        constraint = setup.constraint()
        if constraint is None:
            return
        other = [k for k in ("constraint",) + _CONSTRAINT_OPTIONS if sampling.get(k) is not None]
        if other:
            kind = sampling["constraint"].kind if other[0] == "constraint" else other[0]
            raise ValueError(f"tools: a tool_choice that forces or parses a call cannot be combined with "
                             f"another constraint on the output ({kind})")
        sampling["constraint"] = constraint

    def params(self, sampling: dict) -> SamplingParams:
        """Validated SamplingParams with the default seed filled in; json_schema, grammar,
        response_format or regex (`compile_constraint`) become its constraint."""
        fields = dict(sampling)
        spec = compile_constraint(**{k: fields.pop(k) for k in _CONSTRAINT_OPTIONS if k in fields})
        if spec is not None:
            if fields.get("constraint") is not None:
                raise ValueError(f"{spec.kind}: cannot be combined with another constraint on the output "
                                 f"({fields['constraint'].kind})")
            fields["constraint"] = spec
        if fields.get("seed") is None:
            fields["seed"] = self.default_seed if self.default_seed is not None \
                else int.from_bytes(os.urandom(4), "little")
        params = SamplingParams(**fields)
        params.validate(self.n_vocab)
        return params
