"""Request bodies of the OpenAI-compatible endpoints (pydantic, strict: a string is not a number
and a bool is not an int), and their translation into `LLM.make_request` arguments.

Absent sampling fields take localllm's (llama.cpp's) defaults, as llama-server does: a request
gives the same text as `LLM.generate` with the same fields.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from ..structured.grammar import compile_constraint

__all__ = ["ChatRequest", "CompletionRequest", "DetokenizeRequest", "TokenizeRequest", "MAX_LOGPROBS", "MAX_N"]

MAX_LOGPROBS = 20        # top alternatives per token (OpenAI allows 20 in chat)
MAX_N = 64               # choices per request
MAX_INT = 2**31 - 1      # token counts and top_k: beyond it a value only overflows the native sampler
# The roles OpenAI's chat API defines; anything else is a client's mistake (or a probe), not a turn.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
Number = StrictFloat            # ints are accepted (as floats), strings and bools are not
TokenIds = list[Annotated[StrictInt, Field(ge=0)]]


class _Body(BaseModel):
    # Unknown fields (user, metadata, ...) are ignored as OpenAI-compatible servers do;
    # Infinity/NaN (or 1e999) are refused here, naming the field, not deep in the sampler.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: StrictBool = False


class _Sampling(_Body):
    """Fields shared by completions and chat completions."""
    model: Optional[StrictStr] = None
    max_tokens: Optional[Annotated[StrictInt, Field(ge=1, le=MAX_INT)]] = None
    max_completion_tokens: Optional[Annotated[StrictInt, Field(ge=1, le=MAX_INT)]] = None
    temperature: Optional[Annotated[Number, Field(ge=0)]] = None
    top_p: Optional[Annotated[Number, Field(gt=0, le=1)]] = None
    top_k: Optional[Annotated[StrictInt, Field(ge=-1, le=MAX_INT)]] = None
    min_p: Optional[Annotated[Number, Field(ge=0, le=1)]] = None
    seed: Optional[Annotated[StrictInt, Field(ge=0, lt=2**64)]] = None
    stop: Optional[Union[StrictStr, list[StrictStr]]] = None
    presence_penalty: Optional[Annotated[Number, Field(ge=-2, le=2)]] = None
    frequency_penalty: Optional[Annotated[Number, Field(ge=-2, le=2)]] = None
    repetition_penalty: Optional[Annotated[Number, Field(gt=0)]] = None
    logit_bias: Optional[dict[StrictStr, Annotated[Number, Field(ge=-100, le=100)]]] = None
    n: Annotated[StrictInt, Field(ge=1, le=MAX_N)] = 1
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    ignore_eos: StrictBool = False
    # Constrained output: OpenAI's response_format, and llama-server's json_schema / grammar (GBNF).
    response_format: Optional[dict[str, Any]] = None
    json_schema: Optional[Union[dict[str, Any], StrictBool]] = None
    grammar: Optional[StrictStr] = None

    def sampling(self, n_vocab: int) -> dict[str, Any]:
        """`SamplingParams` fields for the fields this request sets (a constraint compiled:
        a ValueError names the field and the problem)."""
        out: dict[str, Any] = {}
        constraint = compile_constraint(response_format=self.response_format, json_schema=self.json_schema,
                                        grammar=self.grammar)
        if constraint is not None:
            out["constraint"] = constraint
        max_tokens = self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens
        # No limit given: until end of generation or the end of the context (capped there).
        out["max_tokens"] = max_tokens if max_tokens is not None else 2**31
        for name in ("temperature", "top_p", "min_p", "seed", "presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.top_k is not None:
            out["top_k"] = max(self.top_k, 0)        # vLLM's -1 and llama.cpp's 0 both disable it
        if self.repetition_penalty is not None:
            out["repeat_penalty"] = self.repetition_penalty
        if self.stop is not None:
            stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
            if any(not s for s in stops):
                raise ValueError("stop: stop strings must be non-empty")
            out["stop"] = stops
        if self.logit_bias:
            out["logit_bias"] = {_token_key(k, n_vocab): float(v) for k, v in self.logit_bias.items()}
        if self.ignore_eos:
            out["ignore_eos"] = True
        return out

    @property
    def include_usage(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


def _token_key(key: str, n_vocab: int) -> int:
    try:
        token = int(key)
    except ValueError:
        raise ValueError(f"logit_bias: keys must be token ids, got {key[:24]!r}") from None
    if not 0 <= token < n_vocab:
        raise ValueError(f"logit_bias: token {key[:24]!r} is out of range [0, {n_vocab})")
    return token


class CompletionRequest(_Sampling):
    """POST /v1/completions: a prompt as text, token ids, or a list of either (one completion
    per prompt, `n` each)."""
    prompt: Union[StrictStr, TokenIds, list[StrictStr], list[TokenIds]]
    logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=MAX_LOGPROBS)]] = None
    echo: StrictBool = False

    def prompts(self) -> list[Union[str, list[int]]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [p]
        return list(p)

    def sampling(self, n_vocab: int) -> dict[str, Any]:
        out = super().sampling(n_vocab)
        if self.logprobs is not None:
            out["logprobs"] = self.logprobs
        return out


class ChatMessage(_Body):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)   # name, tool_calls, ... reach the template
    role: Literal[ROLES]
    content: Optional[Union[StrictStr, list[dict[str, Any]]]] = None


class ChatRequest(_Sampling):
    """POST /v1/chat/completions."""
    messages: list[ChatMessage] = Field(min_length=1)
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[StrictStr, dict[str, Any]]] = None
    parallel_tool_calls: StrictBool = True
    logprobs: StrictBool = False
    top_logprobs: Optional[Annotated[StrictInt, Field(ge=0, le=MAX_LOGPROBS)]] = None

    def sampling(self, n_vocab: int) -> dict[str, Any]:
        out = super().sampling(n_vocab)
        if self.top_logprobs is not None and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs set to true")
        if self.logprobs:
            out["logprobs"] = self.top_logprobs or 0
        return out

    def conversation(self) -> list[dict[str, Any]]:
        """The messages as template input; text content parts are joined into one string, and
        absent or null content (an assistant turn that only calls tools) is "": templates
        concatenate content, and None would fail them."""
        out = []
        for i, m in enumerate(self.messages):
            message = m.model_dump(exclude_none=False)
            if isinstance(m.content, list):
                message["content"] = _join_text_parts(m.content, i)
            elif m.content is None:
                message["content"] = ""
            out.append(message)
        return out


def _join_text_parts(parts: list[dict[str, Any]], i: int) -> str:
    texts = []
    for j, part in enumerate(parts):
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise ValueError(f"messages[{i}].content[{j}]: only text parts are supported, got type "
                             f"{part.get('type')!r}")
        texts.append(part["text"])
    return "".join(texts)


class TokenizeRequest(_Body):
    """POST /tokenize: text (`prompt`, or llama-server's `content`) or chat `messages`."""
    model: Optional[StrictStr] = None
    prompt: Optional[StrictStr] = None
    content: Optional[StrictStr] = None
    messages: Optional[list[ChatMessage]] = None
    add_special_tokens: StrictBool = True     # for prompt/content (messages follow the chat template)


class DetokenizeRequest(_Body):
    """POST /detokenize."""
    model: Optional[StrictStr] = None
    tokens: TokenIds

