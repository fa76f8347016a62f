"""`localllm serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) over the engine.

| module | what it holds |
| --- | --- |
| `app.py` | the app, its routes, admission (429), API key, the request path into the engine |
| `protocol.py` | request bodies (strict pydantic) and their sampling options |
| `openai_format.py` | response bodies and stream chunks |
| `metrics.py` | Prometheus metrics (`GET /metrics`) |
| `errors.py` | OpenAI-style error bodies for every failure |
"""
from .app import ServerConfig, create_app, serve_forever

__all__ = ["ServerConfig", "create_app", "serve_forever"]
