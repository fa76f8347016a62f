"""Shared fixtures: the three real models (pulled into the cache on first use) and the llama.cpp
reference data carried in tests/data (see tests/data/README.md)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from localllm import hub

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
REFERENCE = DATA / "reference"
CORPUS = DATA / "corpus" / "gpl-3.txt"
MODEL_KEYS = list(hub.KNOWN_MODELS)


def package_env() -> dict:
    """The environment for a subprocess that must import the same localllm, localllm_cli and
    localllm_convert as this test run (installed, or from the source tree with the in-place
    build): their folders first on PYTHONPATH."""
    import localllm
    import localllm_cli
    import localllm_convert
    dirs = {str(Path(m.__file__).resolve().parent.parent) for m in (localllm, localllm_cli, localllm_convert)}
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*sorted(dirs), os.environ.get("PYTHONPATH", "")]))


def model_file(key: str) -> Path:
    """Path of a known model, pulled (sha256-verified) into the cache when absent."""
    return hub.pull(key, quiet=True)


def f16_perplexity_rows() -> list[dict]:
    """llama-perplexity's figures over the whole corpus with its default f16 cache (the rows of
    reference/perplexity.json without cache types or a chunk limit; test_kv_quant.py has those)."""
    rows = json.loads((REFERENCE / "perplexity.json").read_text())["results"]
    return [r for r in rows if "cache_type_k" not in r and "max_chunks" not in r]


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session", params=MODEL_KEYS)
def model_key(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def model_path(model_key) -> Path:
    return model_file(model_key)


_LLMS: dict = {}


def llm_for(key: str, n_ctx: int = 4096, numerics: str = "fast"):
    """One loaded LLM per (model, n_ctx, numerics) for the whole test session (loading is the
    slow part)."""
    from localllm import LLM
    if (key, n_ctx, numerics) not in _LLMS:
        _LLMS[(key, n_ctx, numerics)] = LLM(str(model_file(key)), n_ctx=n_ctx, seed=0, numerics=numerics)
    return _LLMS[(key, n_ctx, numerics)]


@pytest.fixture(scope="session")
def llm(model_key):
    return llm_for(model_key)


def greedy_rows(model: str | None = None) -> list[dict]:
    rows = read_jsonl(REFERENCE / "greedy.jsonl")
    return [r for r in rows if model is None or r["model"] == model]
