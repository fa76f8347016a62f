"""Streaming GGUF output: tensor infos first, then each tensor's data in order, on all threads.

Only a couple of tensors are in memory at a time: the one being encoded and the next one, read
ahead on a background thread. Encoding (float conversion or quantization) splits a tensor's rows
into chunks that a thread pool runs in parallel (the native quantizers release the GIL). The
file is written to a hidden temporary file beside the output and renamed over it only when
complete, so an error, Ctrl-C or SIGTERM never leaves a partial output behind.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from .arrays import encode
from .filetypes import QT, row_nbytes

__all__ = ["OutputTensor", "write_gguf", "default_threads", "CHUNK_ELEMENTS"]

# Elements per encoding task: small enough that the native quantizer runs each task on one
# thread (it splits only inputs of 2**17 elements or more), large enough to amortise the call.
CHUNK_ELEMENTS = 1 << 16


def default_threads() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


@dataclass
class OutputTensor:
    """One tensor to write: its name, logical shape (numpy order), output type and loader."""
    name: str
    shape: tuple[int, ...]
    qtype: QT
    load: Callable[[], np.ndarray]          # float32 data (or, with `raw`, the stored bytes)
    source_nbytes: int                      # bytes read from the input (for progress/throughput)
    raw: bool = False                       # `load` returns the final bytes: no encoding
    # Quantized weighted by an imatrix: float32 [n_mat, n] (n_mat: the experts of a 3-D tensor, else 1).
    importance: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        rows = int(np.prod(self.shape[:-1], dtype=np.int64)) if len(self.shape) > 1 else 1
        return rows * row_nbytes(self.qtype, int(self.shape[-1]))


def _encode_parallel(pool: ThreadPoolExecutor, data: np.ndarray, qtype: QT,
                     importance: np.ndarray | None = None) -> np.ndarray:
    """Encode float32 ``data`` [..., n] to ``qtype`` with its rows spread over the pool; with
    ``importance`` [n_mat, n], the rows of matrix i (data's leading index for a 3-D tensor)
    weighted by importance[i]."""
    if data.ndim < 2 or (data.size <= CHUNK_ELEMENTS and importance is None):
        return encode(data, qtype)
    rows = data.reshape(-1, data.shape[-1])
    rows_per_mat = rows.shape[0] // (1 if importance is None else importance.shape[0])
    step = max(1, CHUNK_ELEMENTS // rows.shape[1])

    def chunk(r0: int) -> np.ndarray:
        r1 = min(r0 + step, (r0 // rows_per_mat + 1) * rows_per_mat)   # never across a matrix
        qw = None if importance is None else importance[r0 // rows_per_mat]
        return encode(rows[r0:r1], qtype, qw)

    starts, r0 = [], 0
    while r0 < rows.shape[0]:
        starts.append(r0)
        r0 = min(r0 + step, (r0 // rows_per_mat + 1) * rows_per_mat)
    out = np.concatenate(list(pool.map(chunk, starts)), axis=0)
    return out.reshape(*data.shape[:-1], out.shape[-1])


def _progress_bar(total: int, enabled: bool | None, desc: str):
    from tqdm import tqdm
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=desc,
                disable=not enabled, dynamic_ncols=True, leave=True)


@contextlib.contextmanager
def _sigterm_raises():
    """While writing, SIGTERM (and SIGHUP) raise SystemExit in the main thread instead of
    killing the process outright, so the cleanup below removes the temporary file. Signal
    handlers belong to the main thread: elsewhere this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, terminate) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _temp_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.{os.getpid()}.partial")


def write_gguf(out_path: str | os.PathLike, arch: str, add_metadata: Callable[[object], None],
               tensors: Sequence[OutputTensor], threads: int | None = None,
               progress: bool | None = None) -> int:
    """Write a GGUF file; returns its size in bytes.

    Args:
        out_path: the output file (replaced atomically when done).
        arch: general.architecture.
        add_metadata: called with the gguf.GGUFWriter to add every key/value.
        tensors: the tensors, in file order.
        threads: encoding threads (default: all CPUs available).
        progress: show a tqdm bar (default: when stderr is a terminal).
    """
    import gguf
    out = Path(out_path)
    if out.is_dir():
        raise IsADirectoryError(f"output {out} is a directory")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"output directory {out.parent} does not exist")
    tmp = _temp_path(out)
    n_threads = max(1, threads or default_threads())
    with _sigterm_raises():
        return _write_to_temp(gguf.GGUFWriter(tmp, arch), tmp, out, add_metadata, tensors, n_threads, progress)


def _write_to_temp(writer, tmp: Path, out: Path, add_metadata: Callable[[object], None],
                   tensors: Sequence[OutputTensor], n_threads: int, progress: bool | None) -> int:
    """Everything into ``tmp``, renamed to ``out`` when complete; ``tmp`` removed otherwise."""
    try:
        add_metadata(writer)
        for t in tensors:
            writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes,
                                   raw_dtype=t.qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        _write_data(writer, tensors, n_threads, progress)
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return out.stat().st_size


def _write_data(writer, tensors: Sequence[OutputTensor], n_threads: int,
                progress: bool | None) -> None:
    """Load (one tensor ahead), encode and append every tensor's data."""
    total = sum(t.source_nbytes for t in tensors)
    with ThreadPoolExecutor(max_workers=1) as reader, \
            ThreadPoolExecutor(max_workers=n_threads) as pool, \
            _progress_bar(total, progress, "converting") as bar:
        pending: Future | None = reader.submit(tensors[0].load) if tensors else None
        for i, t in enumerate(tensors):
            data = pending.result()
            pending = reader.submit(tensors[i + 1].load) if i + 1 < len(tensors) else None
            if t.raw:
                stored = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
            else:
                if tuple(data.shape) != tuple(t.shape):
                    raise ValueError(f"tensor {t.name}: got shape {list(data.shape)}, "
                                     f"expected {list(t.shape)}")
                stored = _encode_parallel(pool, data, t.qtype, t.importance)
            if stored.nbytes != t.nbytes:
                raise RuntimeError(f"tensor {t.name}: encoded to {stored.nbytes} bytes, "
                                   f"expected {t.nbytes}")
            del data
            writer.write_tensor_data(stored)
            bar.update(t.source_nbytes)
            bar.set_postfix_str(f"{i + 1}/{len(tensors)} tensors", refresh=False)
