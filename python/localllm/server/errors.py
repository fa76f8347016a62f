"""OpenAI-style errors: every failure answers `{"error": {"message", "type", "param", "code"}}`
with a status that says whose fault it is (400 bad request, 401 key, 403 host or origin, 404 path,
408 too slow, 413 too large, 415 not JSON, 429 queue full, 503 loading, draining or queued too
long, 500 ours). A client that goes away is one INFO line, not an error."""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

__all__ = ["APIError", "bad_request", "error_body", "install_error_handlers", "invalid_body"]

log = logging.getLogger("localllm.server")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 408: "timeout_error", 413: "invalid_request_error",
          415: "invalid_request_error", 429: "rate_limit_error", 500: "server_error", 503: "unavailable_error"}


# Fields of several accepted types: pydantic reports one error per type; say what is accepted.
_UNION_FIELDS = {"prompt": "a string, a list of token ids (ints >= 0), or a list of strings or of token-id lists",
                 "stop": "a string or a list of strings",
                 "content": "a string or a list of content parts"}


class APIError(Exception):
    def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.headers = status, message, param, code, headers


def bad_request(message: str, param: Optional[str] = None, code: Optional[str] = None) -> APIError:
    return APIError(400, message, param, code)


def error_body(status: int, message: str, param: Optional[str] = None, code: Any = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "server_error"), "param": param,
                      "code": code if code is not None else status}}


def _response(status: int, message: str, param: Optional[str] = None, code: Any = None,
              headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def invalid_body(exc: ValidationError) -> APIError:
    """A 400 naming the first problem pydantic found in a request body."""
    errors = exc.errors()
    if not errors:
        return APIError(400, "invalid request body")
    e = errors[0]
    if e.get("type") == "json_invalid":
        return APIError(400, f"malformed JSON body: {e.get('ctx', {}).get('error', e.get('msg'))}")
    loc = [str(p) for p in e.get("loc", ())]
    # Union members appear in the location (e.g. "str", "list[int]"): keep field names and indices.
    path = [p for p in loc if not any(c in p for c in "[]()") and p not in ("str", "int", "float", "bool")]
    param = ".".join(path) or None
    got = json.dumps(e.get("input"), default=str)[:80]
    if param is None:
        return APIError(400, f"the request body must be a JSON object, got {got}")
    if e.get("type") == "missing":
        return APIError(400, f"{param}: this field is required", param)
    if param in _UNION_FIELDS and sum(1 for x in errors if x.get("loc", ())[:1] == (param,)) > 1:
        return APIError(400, f"{param} must be {_UNION_FIELDS[param]} (got {got})", param)
    return APIError(400, f"{param}: {e.get('msg')} (got {got})", param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return _response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        return _response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, _: ClientDisconnect) -> JSONResponse:
        # Nobody reads this answer; the disconnect is the client's business, worth one line.
        client = request.client
        log.info("client %s went away while sending %s %s", f"{client.host}:{client.port}" if client else "?",
                 request.method, request.url.path)
        return _response(400, "the client disconnected")

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error")
        return _response(500, f"internal error: {type(exc).__name__}: {exc}")
