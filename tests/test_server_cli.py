"""`localllm serve` started as a user types it: by model name, without -c (the library's default
context), and --kv-memory read as the other commands read sizes (a bare number is bytes)."""
from __future__ import annotations

import subprocess
import sys

import httpx
import openai
import pytest

from conftest import model_file, package_env
from serving import LiveServer, free_port


KEY = "smollm2-135m-q4_1"


def test_serve_by_name_without_ctx_size():
    model_file(KEY)                       # cached, so the server finds it by name
    with LiveServer(KEY) as srv:          # no -c: the default context, 4096 tokens
        assert httpx.get(f"{srv.url}/health").status_code == 200
        models = httpx.get(f"{srv.url}/v1/models").json()["data"]
        assert models[0]["max_model_len"] == 4096
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0, timeout=120)
        r = client.chat.completions.create(model=models[0]["id"], max_tokens=8, temperature=0,
                                           messages=[{"role": "user", "content": "Say hi."}])
        assert r.choices[0].message.content and r.usage.completion_tokens >= 1


@pytest.mark.parametrize("size, words", [("1000", "holds 0 tokens, less than one context (4096 tokens)"),
                                         ("lots", "not a size: 'lots'")])
def test_kv_memory_is_bytes_like_every_size_option(size, words):
    model_file(KEY)
    cmd = [sys.executable, "-m", "localllm_cli", "serve", "-m", KEY, "--port", str(free_port()),
           "--kv-memory", size]
    proc = subprocess.run(cmd, env=package_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and words in proc.stderr, proc.stderr
