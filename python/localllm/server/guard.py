"""What every HTTP request passes before a route sees it (pure ASGI middleware):

* Host must name this server (127.0.0.1, localhost or [::1] with its port, the address the
  connection came in on, or an --allowed-hosts entry): a DNS-rebinding page, whose requests
  carry its own host name, is refused (403), so it cannot read the answers.
* Origin, when a browser sends one, must be this server's own or an --allowed-origins entry
  (403 otherwise); CORS headers and preflight answers go to --allowed-origins only.
* POST bodies must be application/json (415): a page's "simple" text/plain or form POST, which
  a browser sends cross-site without a preflight, never reaches the model.
* Bodies are bounded (413): Content-Length is checked before reading, and chunked bodies are
  counted while they are read.
* While the server shuts down, new requests get 503.

Its refusals are OpenAI error bodies and close the connection (the body may be unread).
"""
from __future__ import annotations

import json
from typing import Callable, Optional
from urllib.parse import urlsplit

from .errors import APIError, error_body

__all__ = ["RequestGuard", "BodyTooLarge"]

LOCAL_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
_WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


class BodyTooLarge(APIError):
    def __init__(self, limit: int, size: Optional[int] = None):
        got = f"{size} bytes" if size is not None else "more"
        super().__init__(413, f"request body: {got}, at most {limit} bytes are allowed (--max-body)",
                         code="request_too_large", headers={"Connection": "close"})


def _split_host(value: str) -> tuple[str, Optional[int]]:
    """('name', port) of a Host header value or an origin's netloc; IPv6 without brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
    else:
        name, sep, port = value.rpartition(":")
        if not sep:
            name, port = value, None
    if port is not None and not port.isdigit():
        return "", None
    return name, int(port) if port else None


def _with_default_port(name_port: tuple[str, Optional[int]]) -> tuple[str, Optional[int]]:
    """An http Host or origin without a port means port 80."""
    return name_port[0], 80 if name_port[1] is None else name_port[1]


class RequestGuard:
    """The middleware. bind_host: the --host served; allowed_hosts / allowed_origins: the
    extra names (an entry "*" allows any); draining(): True once shutdown has begun."""

    def __init__(self, app, *, bind_host: str, allowed_hosts: tuple[str, ...], allowed_origins: tuple[str, ...],
                 max_body_bytes: int, draining: Callable[[], bool]):
        self.app = app
        self.local_names = LOCAL_NAMES | ({bind_host.strip("[]").lower()} - _WILDCARD_BINDS)
        self.allowed_hosts = {_split_host(h) for h in allowed_hosts if h != "*"}
        self.any_host = "*" in allowed_hosts
        self.cors_origins = {o.rstrip("/").lower() for o in allowed_origins}
        self.max_body_bytes = max_body_bytes
        self.draining = draining

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        port = (scope.get("server") or ("", None))[1]
        local = scope.get("server")[0] if scope.get("server") else ""
        refusal = self._refusal(scope, headers, port, local)
        if refusal is not None:
            return await _refuse(send, refusal, self._cors_headers(headers))
        origin = headers.get("origin")
        if scope["method"] == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            return await _preflight(send, self._cors_headers(headers))
        cors = self._cors_headers(headers)
        if cors:
            send = _adding_headers(send, cors)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            receive = self._bounded(receive)
        await self.app(scope, receive, send)

    def _refusal(self, scope, headers: dict[str, str], port: Optional[int], local: str) -> Optional[APIError]:
        if not self._host_ok(headers.get("host", ""), port, local):
            return APIError(403, f"Host {headers.get('host', '')[:100]!r} is not this server's (start it with "
                            f"--allowed-hosts to serve that name)", code="host_not_allowed")
        origin = headers.get("origin")
        if origin is not None and not self._origin_ok(origin, port, local):
            return APIError(403, f"Origin {origin[:100]!r} is not allowed (start the server with --allowed-origins "
                            f"to accept it)", code="origin_not_allowed")
        if self.draining() and scope["path"] != "/metrics":
            return APIError(503, "the server is shutting down", headers={"Retry-After": "1"})
        if scope["method"] in ("POST", "PUT", "PATCH"):
            media = headers.get("content-type", "").split(";")[0].strip().lower()
            if media != "application/json":
                return APIError(415, f"Content-Type must be application/json, got {media or 'none'!r}",
                                code="unsupported_media_type")
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
                return BodyTooLarge(self.max_body_bytes, int(length))
        return None

    def _host_ok(self, host: str, port: Optional[int], local: str) -> bool:
        if self.any_host:
            return True
        name, given_port = _split_host(host)
        if (name, given_port) in self.allowed_hosts or (name, None) in self.allowed_hosts:
            return True
        _, given_port = _with_default_port((name, given_port))
        return given_port == port and (name in self.local_names or name == local.lower())

    def _origin_ok(self, origin: str, port: Optional[int], local: str) -> bool:
        origin = origin.rstrip("/").lower()
        if "*" in self.cors_origins or origin in self.cors_origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme != "http" or not parts.netloc:
            return False                    # "null" (sandboxed pages, file://) and other schemes
        name, given_port = _with_default_port(_split_host(parts.netloc))
        return given_port == port and (name in self.local_names or name == local.lower())

    def _cors_headers(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
        origin = headers.get("origin", "").rstrip("/")
        if not origin or not ("*" in self.cors_origins or origin.lower() in self.cors_origins):
            return []
        return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]

    def _bounded(self, receive):
        """receive, raising BodyTooLarge once the body passes the limit (chunked bodies)."""
        limit, seen = self.max_body_bytes, 0

        async def bounded_receive():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message
        return bounded_receive


def _adding_headers(send, extra: list[tuple[bytes, bytes]]):
    async def send_with_headers(message) -> None:
        if message["type"] == "http.response.start":
            message = dict(message, headers=list(message.get("headers", [])) + extra)
        await send(message)
    return send_with_headers


async def _refuse(send, error: APIError, cors: list[tuple[bytes, bytes]]) -> None:
    body = json.dumps(error_body(error.status, error.message, error.param, error.code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")] + cors
    headers += [(k.lower().encode(), v.encode()) for k, v in (error.headers or {}).items() if k.lower() != "connection"]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _preflight(send, cors: list[tuple[bytes, bytes]]) -> None:
    """A CORS preflight from an allowed origin (others were refused before)."""
    headers = cors + [(b"access-control-allow-methods", b"GET, POST, OPTIONS"),
                      (b"access-control-allow-headers", b"Authorization, Content-Type"),
                      (b"access-control-max-age", b"600"), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
