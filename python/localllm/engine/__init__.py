"""The serving engine: requests in, one batched forward per step, tokens out.

- `core`: `Engine`, the continuous-batching step loop over the model;
- `scheduler`: which sequences run each step (decode tokens, prefill chunks, preemption);
- `kv_blocks`: the paged KV pool's free list, reference counts, block tables, prefix cache;
- `speculative`: n-gram and draft-model proposers, verified in one forward;
- `requests`: prompts and parameters turned into engine requests;
- `aio`: asyncio iteration over the engine's outputs (the server's side).
"""
from .core import Engine, EngineStats, RequestOutput, RequestTimes, kv_bytes_per_token

__all__ = ["Engine", "EngineStats", "RequestOutput", "RequestTimes", "kv_bytes_per_token"]
