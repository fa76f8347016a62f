"""`localllm serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine.

| module | what it holds |
| --- | --- |
| `app.py` | the app, its routes, API key, the request path into the engine |
| `state.py` | configuration, admission (429, 400, queue timeout 503), requests in flight, the shutdown drain |
| `limits.py` | bounds on what a request may ask for, checked before tokenizing |
| `guard.py` | Host/Origin checks, CORS, Content-Type, body size (ASGI middleware) |
| `http.py` | header/body timeouts and the connection cap (h11 protocol), the signal-draining server |
| `protocol.py` | request bodies (strict pydantic) and their sampling options |
| `openai_format.py` | response bodies and stream chunks |
| `metrics.py` | Prometheus metrics (`GET /metrics`) |
| `errors.py` | OpenAI-style error bodies for every failure |
"""
from .app import ServerConfig, create_app, serve_forever
from .http import ConnectionLimits
from .limits import RequestLimits

__all__ = ["ConnectionLimits", "RequestLimits", "ServerConfig", "create_app", "serve_forever"]
