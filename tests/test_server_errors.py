"""Bad input to a live `localllm serve`: each a 4xx with an OpenAI-style error body naming the
problem, and the server answers normally afterwards; the API key (401, constant-time compare,
/health open) and the bounded queue (429 with Retry-After)."""
from __future__ import annotations

import concurrent.futures as cf

import httpx
import openai
import pytest

from conftest import model_file
from serving import CHAT, COMPL, MSGS, LiveServer


KEY = "smollm2-135m-q4_1"
CTX = 256
MODEL = model_file(KEY).stem


@pytest.fixture(scope="module")
def server():
    with LiveServer(model_file(KEY), "-c", str(CTX), "--parallel", "4") as srv:
        yield srv


# (path, body, status, words the message must contain, param)
BAD = [
    (COMPL, b'{"prompt": "x", "max_tokens": ', 400, "malformed JSON", None),
    (COMPL, b"[1, 2]", 400, "must be a JSON object", None),
    (COMPL, b"", 400, "malformed JSON", None),
    (COMPL, {"max_tokens": 4}, 400, "prompt: this field is required", "prompt"),
    (COMPL, {"prompt": 5}, 400, "prompt must be a string, a list of token ids", "prompt"),
    (COMPL, {"prompt": [1.5, 2]}, 400, "prompt must be a string, a list of token ids", "prompt"),
    (COMPL, {"prompt": [True]}, 400, "prompt must be", "prompt"),
    (COMPL, {"prompt": [10 ** 7]}, 400, "out of range", "prompt"),
    (COMPL, {"prompt": [-3]}, 400, "prompt must be", "prompt"),
    (COMPL, {"prompt": []}, 400, "prompt is an empty list", "prompt"),
    (COMPL, {"prompt": ""}, 400, "empty", "prompt"),
    (COMPL, {"prompt": "x", "temperature": "hot"}, 400, "temperature: Input should be a valid number", "temperature"),
    (COMPL, {"prompt": "x", "temperature": -1}, 400, "temperature", "temperature"),
    (COMPL, {"prompt": "x", "max_tokens": 0}, 400, "max_tokens", "max_tokens"),
    (COMPL, {"prompt": "x", "max_tokens": "10"}, 400, "max_tokens: Input should be a valid integer", "max_tokens"),
    (COMPL, {"prompt": "x", "max_tokens": 2.5}, 400, "max_tokens", "max_tokens"),
    (COMPL, {"prompt": "x", "top_p": 0}, 400, "top_p", "top_p"),
    (COMPL, {"prompt": "x", "top_p": 1.5}, 400, "top_p", "top_p"),
    (COMPL, {"prompt": "x", "min_p": 2}, 400, "min_p", "min_p"),
    (COMPL, {"prompt": "x", "top_k": -5}, 400, "top_k", "top_k"),
    (COMPL, {"prompt": "x", "seed": -1}, 400, "seed", "seed"),
    (COMPL, {"prompt": "x", "seed": 2 ** 64}, 400, "seed", "seed"),
    (COMPL, {"prompt": "x", "n": 0}, 400, "n: Input should be greater than or equal to 1", "n"),
    (COMPL, {"prompt": "x", "n": 1000}, 400, "n: Input should be less than or equal to 64", "n"),
    (COMPL, {"prompt": "x", "stop": 3}, 400, "stop must be a string or a list of strings", "stop"),
    (COMPL, {"prompt": "x", "stop": [""]}, 400, "stop strings must be non-empty", "stop"),
    (COMPL, {"prompt": "x", "presence_penalty": 3}, 400, "presence_penalty", "presence_penalty"),
    (COMPL, {"prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty", "repetition_penalty"),
    (COMPL, {"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias: keys must be token ids", "logit_bias"),
    (COMPL, {"prompt": "x", "logit_bias": {"99999999": 1}}, 400, "logit_bias: token '99999999' is out of range",
     "logit_bias"),
    (COMPL, {"prompt": "x", "logit_bias": {"5": 500}}, 400, "logit_bias.5", "logit_bias.5"),
    (COMPL, {"prompt": "x", "logprobs": 50}, 400, "logprobs", "logprobs"),
    (COMPL, {"prompt": "x", "stream": "yes"}, 400, "stream: Input should be a valid boolean", "stream"),
    (COMPL, {"prompt": "x", "echo": True}, 400, "echo is not supported", "echo"),
    (COMPL, {"prompt": "x", "model": "gpt-4"}, 400, "model 'gpt-4' is not served here", "model"),
    (COMPL, {"prompt": "word " * 400}, 400, "longer than the context", "prompt"),
    (CHAT, {"messages": []}, 400, "messages: List should have at least 1 item", "messages"),
    (CHAT, {"messages": "hi"}, 400, "messages: Input should be a valid array", "messages"),
    (CHAT, {"messages": [{"content": "hi"}]}, 400, "messages.0.role: this field is required", "messages.0.role"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     400, "only text parts are supported", "messages"),
    (CHAT, {"messages": MSGS, "top_logprobs": 2}, 400, "top_logprobs: needs logprobs", "top_logprobs"),
    (CHAT, {"messages": MSGS, "logprobs": 1}, 400, "logprobs: Input should be a valid boolean", "logprobs"),
    (CHAT, {"messages": MSGS, "model": "nope"}, 400, "not served here", "model"),
    (CHAT, {"messages": [{"role": "user", "content": "word " * 400}]}, 400, "longer than the context", "messages"),
    ("/tokenize", {"tokens": [1]}, 400, "exactly one of prompt", None),
    ("/detokenize", {"tokens": ["a"]}, 400, "tokens.0", "tokens.0"),
    ("/detokenize", {"tokens": [10 ** 7]}, 400, "out of range", None),
    ("/v1/nothing", {}, 404, "no such endpoint: POST /v1/nothing", None),
]


@pytest.mark.parametrize("path,body,status,words,param", BAD,
                         ids=[f"{i}-{b[0]}" for i, b in enumerate(BAD)])
def test_bad_input_is_a_clear_4xx(server, path, body, status, words, param):
    content = body if isinstance(body, bytes) else None
    r = httpx.post(server.url + path, content=content, json=None if content is not None else body, timeout=30,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert words in err["message"], err
    assert set(err) == {"message", "type", "param", "code"} and err["param"] == param
    assert err["type"] == ("invalid_request_error" if status == 400 else "not_found_error")


def test_server_still_answers_after_bad_input(server):
    for path, body, *_ in BAD[:10]:
        httpx.post(server.url + path, json=body if not isinstance(body, bytes) else None, timeout=30)
    r = httpx.post(server.url + COMPL, json={"prompt": "Hello", "max_tokens": 3, "temperature": 0}, timeout=60)
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
    m = server.wait_idle()
    assert m["localllm_kv_blocks_used"] == 0
    assert httpx.get(server.url + "/v1/completions", timeout=10).status_code == 405


def test_api_key_and_bounded_queue():
    with LiveServer(model_file(KEY), "-c", str(CTX), "--parallel", "1", "--max-queue", "1",
                    "--api-key", "s3cret") as srv:
        assert httpx.get(srv.url + "/health").status_code == 200              # open without a key
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = httpx.post(srv.url + COMPL, json={"prompt": "x", "max_tokens": 1}, headers=headers)
            assert r.status_code == 401 and "API key" in r.json()["error"]["message"]
            assert httpx.get(srv.url + "/v1/models", headers=headers).status_code == 401
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="s3cret", max_retries=0)
        assert client.completions.create(model=MODEL, prompt="Hi", max_tokens=2).usage.completion_tokens == 2
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + "/v1", api_key="bad", max_retries=0).models.list()
        # One runs, one may wait: of 6 at once, some are refused with 429 and Retry-After.
        body = {"prompt": "Go", "max_tokens": 48, "ignore_eos": True, "temperature": 0}
        auth = {"Authorization": "Bearer s3cret"}
        with cf.ThreadPoolExecutor(6) as pool:
            rs = list(pool.map(lambda _: httpx.post(srv.url + COMPL, json=body, headers=auth, timeout=120), range(6)))
        codes = sorted(r.status_code for r in rs)
        assert codes.count(200) >= 1 and codes.count(429) >= 1 and set(codes) <= {200, 429}, codes
        refused = next(r for r in rs if r.status_code == 429)
        assert refused.headers["Retry-After"] == "1" and "busy" in refused.json()["error"]["message"]
        ok = [r.json()["choices"][0]["text"] for r in rs if r.status_code == 200]
        assert len(set(ok)) == 1                        # same request, same answer, whatever ran beside it
        m = srv.wait_idle()
        assert m["localllm_kv_blocks_used"] == 0


def test_health_is_503_until_the_model_has_loaded(monkeypatch):
    """In-process app (Starlette's TestClient runs its startup): the model load is held until
    the test lets it go, so the loading window is certain to be seen."""
    import threading
    import time
    from fastapi.testclient import TestClient
    from localllm.server import ServerConfig, create_app
    from localllm.server.state import ServerState as _State

    go = threading.Event()
    real_load = _State.load
    monkeypatch.setattr(_State, "load", lambda self: (go.wait(60), real_load(self)))
    app = create_app(ServerConfig(model=str(model_file(KEY)), n_ctx=CTX, threads=2, parallel=2))
    with TestClient(app) as http:
        r = http.get("/health")
        assert r.status_code == 503 and r.json()["error"]["message"] == "Loading model"
        r = http.post(COMPL, json={"prompt": "x", "max_tokens": 1})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        go.set()
        deadline = time.time() + 60
        while http.get("/health").status_code != 200 and time.time() < deadline:
            time.sleep(0.05)
        assert http.get("/health").json() == {"status": "ok"}
        r = http.post(COMPL, json={"prompt": "Hello", "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2
