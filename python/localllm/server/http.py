"""The HTTP layer under the app: uvicorn's h11 protocol with the timeouts and the connection
cap uvicorn lacks, and a server whose SIGINT/SIGTERM drains the engine before it stops.

Timeouts (each closes the connection; a request whose body is late also gets a 408 first):

* header timeout: from the connection's start, or the end of its previous response, until the
  request's headers are complete: idle sockets and slowly sent headers are dropped;
* body timeout: from the headers until the body is complete: a chunked body left unfinished, or
  a body shorter than its Content-Length, is dropped;
* keep-alive timeout (uvicorn's): an idle connection between requests.

Connections beyond --max-connections get a 503 for their request and are closed.
"""
from __future__ import annotations

import asyncio
import json
import logging
import signal
from dataclasses import dataclass
from typing import Callable, Optional

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import error_body

__all__ = ["ConnectionLimits", "GracefulServer", "GuardedH11Protocol", "protocol_class", "serve_app"]

log = logging.getLogger("localllm.server")


@dataclass
class ConnectionLimits:
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive_timeout: float = 5.0
    max_connections: int = 512


class _CoalescedWrites:
    """A connection's transport whose writes within one turn of the event loop go out as one
    send: uvicorn writes a response's head, body and end separately, and each send to a socket is
    a system call and, on loopback, a wake-up of the client for a partial answer (the sends were
    among the largest costs in a profile of one-text embedding requests, 2026-12-06). Closing
    sends what is pending first; everything else is the transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header/body deadlines and the connection cap of `limits`."""

    limits = ConnectionLimits()

    def connection_made(self, transport) -> None:       # type: ignore[override]
        super().connection_made(_CoalescedWrites(transport, self.loop))
        self._over_capacity = len(self.connections) > self.limits.max_connections
        self._deadline: Optional[asyncio.TimerHandle] = None
        self._waiting_for = ""
        self._arm("headers", self.limits.header_timeout)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, what: str, seconds: float) -> None:
        self._disarm()
        self._waiting_for = what
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = ""

    def _expired(self) -> None:
        if self.transport.is_closing():
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        if self._waiting_for == "body" and self.cycle is not None and not self.cycle.response_started:
            log.info("client %s: request body not complete after %g s; closing", client, self.limits.body_timeout)
            self._send_error(408, f"the request body was not complete within {self.limits.body_timeout:g} s")
            self.cycle.disconnected = True       # the app's answer, if any, goes nowhere
            self.cycle.message_event.set()
        else:
            log.info("client %s: no complete request %s after %g s; closing", client,
                     "body" if self._waiting_for == "body" else "headers",
                     self.limits.body_timeout if self._waiting_for == "body" else self.limits.header_timeout)
        self.transport.close()

    def _send_error(self, status: int, message: str) -> None:
        body = json.dumps(error_body(status, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"connection", b"close")]
        if status == 503:
            headers.append((b"retry-after", b"1"))
        try:
            self.transport.write(self.conn.send(h11.Response(status_code=status, headers=headers)))
            self.transport.write(self.conn.send(h11.Data(data=body)))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:
            pass                # a response was already under way: closing is all that is left

    def handle_events(self) -> None:
        if self._over_capacity:
            return self._refuse_over_capacity()
        super().handle_events()
        self._follow_request_state()

    def _refuse_over_capacity(self) -> None:
        try:
            while (event := self.conn.next_event()) is not h11.NEED_DATA:
                if isinstance(event, h11.Request):
                    log.warning("more than %d connections open: 503 for %s", self.limits.max_connections,
                                event.target.decode("latin-1")[:100])
                    self._send_error(503, f"the server has {self.limits.max_connections} connections open "
                                          f"(--max-connections); retry later")
                    self.transport.close()
                    return
        except h11.RemoteProtocolError:
            self.transport.close()

    def _follow_request_state(self) -> None:
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            if self._waiting_for != "body":
                self._arm("body", self.limits.body_timeout)
        elif state is not h11.IDLE:
            self._disarm()          # the request is in (or the connection ends)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm("headers", self.limits.header_timeout)


def protocol_class(limits: ConnectionLimits) -> type:
    """GuardedH11Protocol bound to these limits (uvicorn instantiates the class itself)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


class GracefulServer(uvicorn.Server):
    """uvicorn's server; the first SIGINT/SIGTERM also calls on_exit_signal() on the event loop
    (the app starts draining) before uvicorn stops accepting and waits for the requests."""

    def __init__(self, config: uvicorn.Config, on_exit_signal: Callable[[], None]):
        super().__init__(config)
        self._on_exit_signal = on_exit_signal
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit and self._loop is not None:
            log.info("%s: draining (new requests get 503)", signal.Signals(sig).name)
            self._loop.call_soon_threadsafe(self._on_exit_signal)
        super().handle_exit(sig, frame)


def serve_app(create_app, config, host: str, port: int, log_level: str = "info") -> None:
    """Run create_app(config)'s app with uvicorn (the guarded h11 protocol) until a stop signal
    has drained it; a model that fails to load stops it (RuntimeError)."""
    import time
    server: Optional[GracefulServer] = None

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    app = create_app(config, on_load_error=stop)
    state = app.state.localllm
    limits: ConnectionLimits = config.connections
    # uvicorn cancels what still runs this long after the signal: the grace period, then time
    # for the stopped requests' last chunks and error bodies to go out.
    uv_config = uvicorn.Config(app, host=host, port=port, log_level=log_level, http=protocol_class(limits),
                               timeout_keep_alive=limits.keep_alive_timeout,
                               timeout_graceful_shutdown=config.shutdown_grace + 5)
    server = GracefulServer(uv_config, state.begin_shutdown)
    started = time.perf_counter()
    server.run()
    if state.load_error is not None:
        raise RuntimeError(f"the model failed to load after {time.perf_counter() - started:.1f} s: "
                           f"{state.load_error}") from state.load_error
