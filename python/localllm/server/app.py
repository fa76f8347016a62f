"""The OpenAI-compatible HTTP server: a FastAPI app over one `LLM` and its engine.

Requests become engine requests through `LLM.make_request` (the same path as `LLM.generate`),
run on the engine's step-loop thread, and come back through `localllm.engine.aio.RequestGroup` to the
handler's coroutine: the event loop never takes the engine's lock. Everything a request controls
is bounded (`limits.py`) before it is tokenized; tokenizing and templating run on worker
threads, never on the engine's. No answer starts (no 200 header) before the request's first
output: a request that cannot start gets a 503 body, not a silent stream. A client that goes
away (stream or not) has its requests aborted, so the engine frees their blocks at its next step.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
from typing import Any, AsyncIterator, Awaitable, Callable, Optional, Union

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from ..engine.aio import RequestGroup
from ..text.chat import ChatTemplateError
from ..engine import RequestOutput
from ..llm import LLM
from ..engine.requests import EngineRequest
from .embeddings import add_embedding_routes
from ..structured.tools import ToolSetup
from .errors import APIError, bad_request, error_body, install_error_handlers, invalid_body
from .guard import RequestGuard
from .metrics import CONTENT_TYPE
from .openai_format import Completion
from .protocol import ChatRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest
from .state import InFlight, ServerConfig, ServerState

__all__ = ["ServerConfig", "create_app"]

log = logging.getLogger("localllm.server")


def create_app(config: ServerConfig, llm: Optional[LLM] = None, on_load_error=None) -> FastAPI:
    """The app. Given no `llm`, the model loads on a thread at startup while /health answers 503;
    `on_load_error()` is called if that fails (the CLI stops the server)."""
    state = ServerState(config, llm)
    if llm is not None:
        llm.engine.start()

    async def lifespan(_: FastAPI):
        if state.llm is None:
            def load():
                try:
                    state.load()
                except BaseException:
                    if on_load_error is not None:
                        on_load_error()
            threading.Thread(target=load, name="localllm-load-model", daemon=True).start()
        yield
        if state.llm is not None:
            state.llm.engine.stop(timeout=5)

    app = FastAPI(title="localllm", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.localllm = state
    app.add_middleware(RequestGuard, bind_host=config.host, allowed_hosts=config.allowed_hosts,
                       allowed_origins=config.allowed_origins, max_body_bytes=config.limits.max_body_bytes,
                       draining=lambda: state.draining)
    install_error_handlers(app)
    auth = [Depends(_api_key_check(config.api_key))]
    _add_info_routes(app, state, auth)
    _add_generation_routes(app, state, auth)
    add_embedding_routes(app, state, auth)
    return app


def _api_key_check(key: Optional[str]):
    expected = key.encode() if key else None

    async def check(request: Request) -> None:
        if expected is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise APIError(401, "invalid or missing API key (send 'Authorization: Bearer <key>')",
                           code="invalid_api_key")
    return check


def _add_info_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    @app.get("/health")
    async def health() -> JSONResponse:
        if state.llm is None:
            status = 500 if state.load_error is not None else 503
            message = f"the model failed to load: {state.load_error}" if state.load_error else "Loading model"
            return JSONResponse(error_body(status, message), status_code=status)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    def metrics() -> Response:              # sync: runs on a worker thread (reads engine state)
        return Response(state.metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models", dependencies=auth)
    async def models() -> dict:
        llm = state.ready()
        return {"object": "list", "data": [{"id": state.model_id, "object": "model", "created": 0,
                                            "owned_by": "localllm", "max_model_len": llm.n_ctx}]}

    @app.post("/tokenize", dependencies=auth)
    async def tokenize(request: Request) -> dict:
        llm = state.ready()
        body = await _body(request, TokenizeRequest)
        state.check_model(body.model)
        given = [x is not None for x in (body.prompt, body.content, body.messages)]
        if sum(given) != 1:
            raise bad_request("give exactly one of prompt (or content) and messages")
        if body.messages is not None:
            conversation = _conversation(ChatRequest(messages=body.messages), state, llm)
            tokens = await _user_call(llm.requests.chat_tokens, conversation)
        else:
            text = body.prompt if body.prompt is not None else body.content
            state.config.limits.check_text(text, "prompt" if body.prompt is not None else "content", llm.n_ctx)
            tokens = await _user_call(llm.tokenize, text, body.add_special_tokens, True)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": llm.n_ctx}

    @app.post("/detokenize", dependencies=auth)
    async def detokenize(request: Request) -> dict:
        llm = state.ready()
        body = await _body(request, DetokenizeRequest)
        state.check_model(body.model)
        limit = state.config.limits.prompt_chars(llm.n_ctx)
        if len(body.tokens) > limit:
            raise bad_request(f"tokens: {len(body.tokens)} token ids, at most {limit} are allowed", param="tokens")
        tokens = await _user_call(llm.requests.token_ids, body.tokens, "tokens")
        return {"prompt": await run_in_threadpool(llm.detokenize, tokens)}


async def _body(request: Request, model: type[BaseModel]) -> Any:
    """The JSON body as `model` (the guard has checked its type and bounded its size)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise invalid_body(e) from None


async def _user_call(fn, *args, param: Union[str, Callable[[str], str], None] = None):
    """Run fn on a worker thread (tokenizing, templating); its ValueError/TypeError is the
    request's fault: 400 with its message, naming param (or the field param(message) names)."""
    return await _user_await(run_in_threadpool(fn, *args), param)


async def _user_await(work: Awaitable, param: Union[str, Callable[[str], str], None] = None):
    """Await work whose ValueError/TypeError is the request's fault, as `_user_call`'s."""
    try:
        return await work
    except (ValueError, TypeError, ChatTemplateError) as e:
        raise bad_request(str(e), param=param(str(e)) if callable(param) else param) from None


def _conversation(body: ChatRequest, state: ServerState, llm: LLM) -> list[dict[str, Any]]:
    try:
        conversation = body.conversation()
    except ValueError as e:
        raise bad_request(str(e), param="messages") from None
    state.config.limits.check_messages(conversation, llm.n_ctx)
    return conversation


def _add_generation_routes(app: FastAPI, state: ServerState, auth: list) -> None:
    @app.post("/v1/completions", dependencies=auth)
    async def completions(request: Request) -> Response:
        llm = state.ready()
        body = await _body(request, CompletionRequest)
        state.check_model(body.model)
        if body.echo:
            raise bad_request("echo is not supported", param="echo")
        prompts = body.prompts()
        if not prompts:
            raise bad_request("prompt is an empty list", param="prompt")
        state.check_choices(body.n, len(prompts))
        state.config.limits.check_prompts(prompts, llm.n_ctx)
        sampling = _sampling(body, state, llm)
        reqs = [await _user_call(lambda p=p: llm.make_request(p, n=body.n, **sampling), param="prompt")
                for p in prompts]
        return await _run(state, request, body, reqs, "text")

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(request: Request) -> Response:
        llm = state.ready()
        body = await _body(request, ChatRequest)
        state.check_model(body.model)
        state.check_choices(body.n, 1)
        conversation = _conversation(body, state, llm)
        sampling = _sampling(body, state, llm)
        req = await _user_call(lambda: llm.make_request(
            messages=conversation, n=body.n, tools=body.tools, tool_choice=body.tool_choice,
            parallel_tool_calls=body.parallel_tool_calls, **sampling), param=_chat_param)
        return await _run(state, request, body, [req], "chat", req.tools)


def _chat_param(message: str) -> str:
    """The field a chat request's error names: its tools, its tool_choice, else its messages."""
    field = message.split(":", 1)[0]
    return field if field in ("tools", "tool_choice") else "messages"


def _sampling(body: Union[ChatRequest, CompletionRequest], state: ServerState, llm: LLM) -> dict:
    state.config.limits.check_sampling(body)
    try:
        return body.sampling(llm.n_vocab)
    except ValueError as e:
        message = str(e)          # protocol's messages start with the field's name
        field = message.split(":", 1)[0]
        raise bad_request(message, param=field if field in type(body).model_fields else None) from None


async def _run(state: ServerState, request: Request, body: Union[ChatRequest, CompletionRequest],
               reqs: list[EngineRequest], kind: str, tools: Optional[ToolSetup] = None) -> Response:
    """Submit the engine requests and answer: a stream of chunks, or one JSON body."""
    llm = state.llm
    state.admit(sum(r.n for r in reqs))
    answer = Completion(kind, state.model_id, llm.tokenizer, sum(r.n for r in reqs),
                        sum(len(r.prompt_ids) for r in reqs), reqs[0].params.logprobs is not None,
                        body.include_usage, tools)
    group = RequestGroup(llm.engine)
    flight = state.track(group)
    try:
        for r in reqs:      # a worker thread: n samplers each take the prompt's tokens
            await _user_call(group.submit, r)
        if state.draining:  # the drain began while this request was being submitted
            flight.stopped_by_shutdown = True
            raise APIError(503, "the server is shutting down", headers={"Retry-After": "1"})
        state.metrics.prompt_tokens.inc(answer.prompt_tokens)
        first = await state.first_output(flight)
    except BaseException:
        group.abort()
        state.untrack(flight)
        raise
    if body.stream:
        return StreamingResponse(_events(state, flight, answer, first), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await _collect(state, request, flight, answer, first)


async def _outputs(state: ServerState, group: RequestGroup,
                   first: tuple[int, RequestOutput]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """`first`, then the group's outputs, observed by the metrics; a failed request raises its
    error. Requests left unfinished (the client went away) count as aborted."""
    last: dict[int, Optional[float]] = {}
    pending: Optional[tuple[int, RequestOutput]] = first
    try:
        while pending is not None or group.unfinished:
            index, out = pending if pending is not None else await group.next()
            pending = None
            last[index] = state.metrics.observe(out, last.get(index))
            if out.finish_reason == "error":
                raise APIError(500, f"generation failed: {out.error}")
            yield index, out
    finally:
        if group.unfinished:
            state.metrics.finished.labels("abort").inc(group.unfinished)


async def _events(state: ServerState, flight: InFlight, answer: Completion,
                  first: tuple[int, RequestOutput]) -> AsyncIterator[str]:
    """Server-sent events: one `data:` line per chunk, then `data: [DONE]`; a stream stopped by
    shutdown ends the same way, its last chunks with finish_reason "abort". Cancelled when the
    client disconnects: leaving the `async with` aborts what is still running."""
    try:
        async with flight.group:
            try:
                async for index, out in _outputs(state, flight.group, first):
                    for chunk in answer.chunks(index, out):
                        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
            except APIError as e:
                yield f"data: {json.dumps(error_body(e.status, e.message))}\n\n"
            if answer.include_usage:
                yield f"data: {json.dumps(answer.usage_chunk())}\n\n"
            yield "data: [DONE]\n\n"
        if flight.stopped_by_shutdown:
            log.info("request %d: stream stopped by shutdown after %d tokens (finish_reason 'abort', [DONE])",
                     flight.id, answer.usage()["completion_tokens"])
    except (asyncio.CancelledError, GeneratorExit):
        log.info("request %d: client went away mid-stream after %d tokens; aborted", flight.id,
                 answer.usage()["completion_tokens"])
        raise
    finally:
        state.untrack(flight)


async def _collect(state: ServerState, request: Request, flight: InFlight, answer: Completion,
                   first: tuple[int, RequestOutput]) -> JSONResponse:
    """The whole answer; a client that disconnects while waiting aborts it, shutdown gives 503."""
    async def watch_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        log.info("request %d: client went away before its answer; aborted", flight.id)
        flight.group.abort()

    watcher = asyncio.create_task(watch_disconnect())
    try:
        async with flight.group:
            async for index, out in _outputs(state, flight.group, first):
                answer.add(index, out)
    finally:
        watcher.cancel()
        state.untrack(flight)
    if flight.stopped_by_shutdown:
        log.info("request %d: stopped by shutdown after %d tokens; 503", flight.id,
                 answer.usage()["completion_tokens"])
        raise APIError(503, f"the server is shutting down: the request was stopped after "
                       f"{state.config.shutdown_grace:g} s", headers={"Retry-After": "1"})
    return JSONResponse(answer.response())


def serve_forever(config: ServerConfig, host: str, port: int, log_level: str = "info") -> None:
    """Run the server with uvicorn until interrupted; a model that fails to load stops it."""
    from .http import serve_app
    serve_app(create_app, config, host, port, log_level)
