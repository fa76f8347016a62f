"""``convert``: Hugging Face checkpoint -> GGUF (F32/F16/BF16 or quantized) in one pass."""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .archs import converter_for
from .checkpoint import Checkpoint
from .filetypes import QT, QUANTIZATION_VERSION, preset
from .quant_rules import choose_types
from .weighting import add_imatrix_keys, check_needs_imatrix, imatrix_metadata, load_imatrix, tensor_importances
from .writer import OutputTensor, write_gguf

__all__ = ["convert", "ConvertResult", "PlanEntry"]


@dataclass(frozen=True)
class PlanEntry:
    name: str
    shape: tuple[int, ...]        # numpy order
    qtype: QT
    nbytes: int
    fallback_from: QT | None = None


@dataclass
class ConvertResult:
    """What a conversion wrote (or, for a dry run, would write)."""
    path: Path | None
    architecture: str
    file_type: str
    tensors: list[PlanEntry] = field(default_factory=list)
    input_bytes: int = 0
    output_bytes: int = 0
    seconds: float = 0.0

    @property
    def type_counts(self) -> dict[str, int]:
        return dict(Counter(t.qtype.name for t in self.tensors))


def _model_name(ckpt: Checkpoint) -> str:
    name = ckpt.config.get("_name_or_path") or ""
    return os.path.basename(str(name).rstrip("/")) or ckpt.dir.resolve().name


def convert(hf_dir: str | os.PathLike, out_path: str | os.PathLike | None, type: str = "f16",
            threads: int | None = None, vocab_only: bool = False, dry_run: bool = False,
            progress: bool | None = None, imatrix: str | os.PathLike | None = None) -> ConvertResult:
    """Convert the checkpoint in ``hf_dir`` to a GGUF file at ``out_path``.

    Args:
        hf_dir: directory with config.json, safetensors weights and tokenizer files.
        out_path: output .gguf (not needed for a dry run).
        type: output preset: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m,
            q5_k_s, q5_k_m, q6_k (K-quant presets mix types per tensor as llama.cpp does).
        threads: encoding threads (default: all CPUs available).
        vocab_only: write only the metadata and vocabulary (no tensors).
        dry_run: check everything and return the plan without writing.
        progress: tqdm progress bar (default: when stderr is a terminal).
        imatrix: a GGUF imatrix file: quantize importance-weighted, as llama-quantize --imatrix.

    Raises:
        ValueError (CheckpointError, VocabError): bad or unsupported checkpoint.
        OSError: unreadable input or unwritable output.
    """
    t0 = time.perf_counter()
    chosen_preset = preset(type)
    ckpt = Checkpoint(hf_dir)
    arch = converter_for(ckpt)
    vocab = arch.vocab()
    planned = [] if vocab_only else arch.plan()
    im = load_imatrix(imatrix) if imatrix is not None else None
    choices = choose_types([(p.name, p.shape, QT.F32) for p in planned], chosen_preset,
                           arch.hp.n_layer, arch.hp.n_head // arch.hp.n_head_kv, getattr(arch, "n_expert", 0),
                           has_imatrix=im is not None)
    if im is None:
        check_needs_imatrix(choices, chosen_preset)
        importances = [None] * len(choices)
    else:
        importances = tensor_importances(choices, [p.shape for p in planned], [True] * len(choices),
                                         chosen_preset, im)
    outputs = [OutputTensor(p.name, p.shape, c.qtype, p.load,
                            p.source.nbytes if p.source is not None else 0, importance=qw)
               for p, c, qw in zip(planned, choices, importances)]
    result = ConvertResult(None, arch.gguf_arch, chosen_preset.name,
                           [PlanEntry(o.name, o.shape, o.qtype, o.nbytes, c.fallback_from)
                            for o, c in zip(outputs, choices)],
                           input_bytes=sum(o.source_nbytes for o in outputs))
    if dry_run:
        result.output_bytes = sum(t.nbytes for t in result.tensors)
        result.seconds = time.perf_counter() - t0
        return result
    if out_path is None:
        raise ValueError("an output path is needed (or use dry_run)")

    def add_metadata(w) -> None:
        w.add_type("model")
        w.add_name(_model_name(ckpt))
        arch.write_metadata(w)
        arch.write_pooling(w)
        w.add_file_type(chosen_preset.ftype)
        w.add_quantization_version(QUANTIZATION_VERSION)
        vocab.write(w)
        if im is not None:
            add_imatrix_keys(w, imatrix_metadata(imatrix, im))

    result.output_bytes = write_gguf(out_path, arch.gguf_arch, add_metadata, outputs,
                                     threads=threads, progress=progress)
    result.path = Path(out_path)
    result.seconds = time.perf_counter() - t0
    return result
