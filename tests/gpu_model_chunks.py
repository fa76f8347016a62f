"""Brings a cached model to a lent GPU machine, whose calls carry at most 64 MiB each: `split`
(here) cuts the cached GGUF into two halves in two ignored folders, build/gpu-model-a and
build/gpu-model-b, each carried by one device call; `join` (there) puts them together into
build/gpu-models (the cache that tests/gpu_check.sh points LOCALLLM_CACHE at) and checks the
sha256 against the model registry (python/localllm/hub.py). See docs/cuda.md.

    python3 tests/gpu_model_chunks.py split [--model smollm2-135m-q4_1]
    python3 tests/gpu_model_chunks.py join  [--model smollm2-135m-q4_1]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "python"))
from localllm import hub  # noqa: E402

CHUNK_DIRS = (REPO / "build" / "gpu-model-a", REPO / "build" / "gpu-model-b")
JOINED_DIR = REPO / "build" / "gpu-models"
MAX_CHUNK = 60 << 20


def chunk_paths(model: hub.KnownModel) -> list[Path]:
    return [d / f"{model.filename}.part{i}" for i, d in enumerate(CHUNK_DIRS)]


def split(key: str) -> None:
    model = hub.KNOWN_MODELS[key]
    data = hub.pull(key, quiet=True).read_bytes()
    half = (len(data) + 1) // 2
    if half > MAX_CHUNK:
        sys.exit(f"{key}: {len(data):,} bytes do not fit in two chunks of {MAX_CHUNK:,}")
    for i, path in enumerate(chunk_paths(model)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data[i * half:(i + 1) * half])
        print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} bytes")


def join(key: str) -> Path:
    model = hub.KNOWN_MODELS[key]
    parts = chunk_paths(model)
    missing = [str(p.relative_to(REPO)) for p in parts if not p.exists()]
    if missing:
        sys.exit(f"{key}: missing {', '.join(missing)} (carry each folder in one device call)")
    JOINED_DIR.mkdir(parents=True, exist_ok=True)
    target = JOINED_DIR / model.filename
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for p in parts:
            data = p.read_bytes()
            digest.update(data)
            out.write(data)
    if digest.hexdigest() != model.sha256:
        target.unlink()
        sys.exit(f"{key}: sha256 of the joined chunks is {digest.hexdigest()}, expected {model.sha256}")
    print(f"{target.relative_to(REPO)}: {target.stat().st_size:,} bytes, sha256 verified")
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["split", "join"])
    ap.add_argument("--model", default="smollm2-135m-q4_1", choices=sorted(hub.KNOWN_MODELS))
    args = ap.parse_args()
    split(args.model) if args.action == "split" else join(args.model)


if __name__ == "__main__":
    main()
