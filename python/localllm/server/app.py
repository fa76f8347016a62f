"""The OpenAI-compatible HTTP server: a FastAPI app over one `LLM` and its engine.

Requests become engine requests through `LLM.make_request` (the same path as `LLM.generate`),
run on the engine's step-loop thread, and come back through `localllm.engine.aio.RequestGroup` to the
handler's coroutine: the event loop never takes the engine's lock. A client that goes away
(stream or not) has its requests aborted, so the engine frees their blocks at its next step.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Optional, Union

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from ..engine.aio import RequestGroup
from ..text.chat import ChatTemplateError
from ..llm import LLM
from ..engine.requests import EngineRequest
from ..engine.speculative import SpecConfig
from .errors import APIError, bad_request, error_body, install_error_handlers, invalid_body
from .metrics import CONTENT_TYPE, ServerMetrics
from .openai_format import Completion
from .protocol import ChatRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest

__all__ = ["ServerConfig", "create_app"]

log = logging.getLogger("localllm.server")


@dataclass
class ServerConfig:
    """What `localllm serve` was asked for. parallel: sequences generated at once; kv_blocks:
    the shared KV pool (None: LLM's default); max_queue: requests allowed to wait beyond the
    running ones before 429."""
    model: Optional[str] = None
    n_ctx: int = 4096
    threads: Optional[int] = None
    parallel: int = 16
    kv_blocks: Optional[int] = None
    max_queue: int = 256
    api_key: Optional[str] = None
    n_batch: int = 512
    speculative: Optional[SpecConfig] = None     # speculative decoding for every request
    cache_type_k: str = "f16"                    # the KV cache's types (LLM's cache_type_k / _v)
    cache_type_v: str = "f16"


class _State:
    """The app's model slot (None while loading) and what the handlers share."""

    def __init__(self, config: ServerConfig, llm: Optional[LLM]):
        self.config = config
        self.llm = llm
        self.load_error: Optional[BaseException] = None
        self.metrics = ServerMetrics(lambda: self.llm.engine if self.llm is not None else None)

    @property
    def model_id(self) -> str:
        path = self.llm.model_path if self.llm is not None else Path(self.config.model or "model")
        return Path(path).stem

    def ready(self) -> LLM:
        if self.llm is None:
            if self.load_error is not None:
                raise APIError(500, f"the model failed to load: {self.load_error}")
            raise APIError(503, "Loading model", headers={"Retry-After": "1"})
        return self.llm

    def load(self) -> None:
        c = self.config
        try:
            llm = LLM(c.model, n_threads=c.threads, n_ctx=c.n_ctx, n_batch=c.n_batch, max_running=c.parallel,
                      kv_blocks=c.kv_blocks, speculative=c.speculative, cache_type_k=c.cache_type_k,
                      cache_type_v=c.cache_type_v)
            llm.engine.start()
            self.llm = llm
            log.info("model %s loaded in %.2f s", llm.model_path, llm.load_time)
        except BaseException as e:
            self.load_error = e
            log.error("loading the model failed: %s", e)
            raise

    def check_model(self, model: Optional[str]) -> None:
        if model is not None and model != self.model_id:
            raise APIError(400, f"model {model!r} is not served here; this server serves {self.model_id!r}",
                           param="model", code="model_not_found")

    def admit(self, n_new: int) -> None:
        """429 when the requests would wait beyond the queue's bound."""
        running, waiting = self.llm.engine.counts()
        limit = self.config.parallel + self.config.max_queue
        if running + waiting + n_new > limit:
            self.metrics.rejected.labels("429").inc()
            raise APIError(429, f"the server is busy: {running} requests running, {waiting} waiting "
                           f"(at most {self.config.max_queue} may wait); retry later",
                           headers={"Retry-After": "1"})


def create_app(config: ServerConfig, llm: Optional[LLM] = None, on_load_error=None) -> FastAPI:
    """The app. Given no `llm`, the model loads on a thread at startup while /health answers 503;
    `on_load_error()` is called if that fails (the CLI stops the server)."""
    state = _State(config, llm)
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
    install_error_handlers(app)
    auth = [Depends(_api_key_check(config.api_key))]
    _add_info_routes(app, state, auth)
    _add_generation_routes(app, state, auth)
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


def _add_info_routes(app: FastAPI, state: _State, auth: list) -> None:
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
            try:
                conversation = ChatRequest(messages=body.messages).conversation()
            except ValueError as e:
                raise bad_request(str(e), param="messages") from None
            tokens = await _user_call(llm.requests.chat_tokens, conversation)
        else:
            text = body.prompt if body.prompt is not None else body.content
            tokens = await _user_call(llm.tokenize, text, body.add_special_tokens, True)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": llm.n_ctx}

    @app.post("/detokenize", dependencies=auth)
    async def detokenize(request: Request) -> dict:
        llm = state.ready()
        body = await _body(request, DetokenizeRequest)
        state.check_model(body.model)
        tokens = await _user_call(llm.requests.token_ids, body.tokens, "tokens")
        return {"prompt": llm.detokenize(tokens)}


async def _body(request: Request, model: type[BaseModel]) -> Any:
    """The JSON body as `model`, whatever the Content-Type says (curl -d sends a form type)."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise invalid_body(e) from None


async def _user_call(fn, *args):
    """Run fn on a worker thread (tokenizing, templating); its ValueError/TypeError is the
    request's fault: 400 with its message."""
    try:
        return await run_in_threadpool(fn, *args)
    except (ValueError, TypeError, ChatTemplateError) as e:
        raise bad_request(str(e)) from None


def _add_generation_routes(app: FastAPI, state: _State, auth: list) -> None:
    @app.post("/v1/completions", dependencies=auth)
    async def completions(request: Request) -> Response:
        llm = state.ready()
        body = await _body(request, CompletionRequest)
        state.check_model(body.model)
        if body.echo:
            raise bad_request("echo is not supported", param="echo")
        sampling = _sampling(body, llm)
        prompts = body.prompts()
        if not prompts:
            raise bad_request("prompt is an empty list", param="prompt")
        reqs = [await _user_call(lambda p=p: llm.make_request(p, n=body.n, **sampling)) for p in prompts]
        return await _run(state, request, body, reqs, "text")

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(request: Request) -> Response:
        llm = state.ready()
        body = await _body(request, ChatRequest)
        state.check_model(body.model)
        sampling = _sampling(body, llm)
        try:
            conversation = body.conversation()
        except ValueError as e:
            raise bad_request(str(e), param="messages") from None
        req = await _user_call(lambda: llm.make_request(messages=conversation, n=body.n, **sampling))
        return await _run(state, request, body, [req], "chat")


def _sampling(body: Union[ChatRequest, CompletionRequest], llm: LLM) -> dict:
    try:
        return body.sampling(llm.n_vocab)
    except ValueError as e:
        raise bad_request(str(e)) from None


async def _run(state: _State, request: Request, body: Union[ChatRequest, CompletionRequest],
               reqs: list[EngineRequest], kind: str) -> Response:
    """Submit the engine requests and answer: a stream of chunks, or one JSON body."""
    llm = state.llm
    state.admit(sum(r.n for r in reqs))
    answer = Completion(kind, state.model_id, llm.tokenizer, sum(r.n for r in reqs),
                        sum(len(r.prompt_ids) for r in reqs), reqs[0].params.logprobs is not None,
                        body.include_usage)
    group = RequestGroup(llm.engine)
    try:
        for r in reqs:
            group.submit(r)
    except (ValueError, TypeError) as e:
        group.abort()
        raise bad_request(str(e)) from None
    state.metrics.prompt_tokens.inc(answer.prompt_tokens)
    if body.stream:
        return StreamingResponse(_events(state, group, answer), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    return await _collect(state, request, group, answer)


async def _outputs(state: _State, group: RequestGroup) -> AsyncIterator[tuple[int, Any]]:
    """The group's outputs, observed by the metrics; a failed request raises its error. Requests
    left unfinished (the client went away) count as aborted."""
    last: dict[int, Optional[float]] = {}
    try:
        async for index, out in group:
            last[index] = state.metrics.observe(out, last.get(index))
            if out.finish_reason == "error":
                raise APIError(500, f"generation failed: {out.error}")
            yield index, out
    finally:
        if group.unfinished:
            state.metrics.finished.labels("abort").inc(group.unfinished)


async def _events(state: _State, group: RequestGroup, answer: Completion) -> AsyncIterator[str]:
    """Server-sent events: one `data:` line per chunk, then `data: [DONE]`. Cancelled when the
    client disconnects: leaving the `async with` aborts what is still running."""
    async with group:
        try:
            async for index, out in _outputs(state, group):
                for chunk in answer.chunks(index, out):
                    yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
        except APIError as e:
            yield f"data: {json.dumps(error_body(e.status, e.message))}\n\n"
        if answer.include_usage:
            yield f"data: {json.dumps(answer.usage_chunk())}\n\n"
        yield "data: [DONE]\n\n"


async def _collect(state: _State, request: Request, group: RequestGroup, answer: Completion) -> JSONResponse:
    """The whole answer; a client that disconnects while waiting aborts it."""
    async def watch_disconnect() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        group.abort()

    watcher = asyncio.create_task(watch_disconnect())
    try:
        async with group:
            async for index, out in _outputs(state, group):
                answer.add(index, out)
    finally:
        watcher.cancel()
    return JSONResponse(answer.response())


def serve_forever(config: ServerConfig, host: str, port: int, log_level: str = "info") -> None:
    """Run the server with uvicorn until interrupted; a model that fails to load stops it."""
    import uvicorn
    server: Optional[uvicorn.Server] = None

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    app = create_app(config, on_load_error=stop)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           timeout_graceful_shutdown=3))
    started = time.perf_counter()
    server.run()
    state: _State = app.state.localllm
    if state.load_error is not None:
        raise RuntimeError(f"the model failed to load after {time.perf_counter() - started:.1f} s: "
                           f"{state.load_error}") from state.load_error
