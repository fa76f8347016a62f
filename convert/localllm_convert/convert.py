"""``convert``: Hugging Face checkpoint -> GGUF (F32/F16/BF16 or quantized) in one pass."""
from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .archs import converter_for
from .checkpoint import Checkpoint
from .filetypes import PRESETS, QT, QUANTIZATION_VERSION, Preset, preset
from .packed import PackedWeightRef
from .packed_exact import choose_packed_type, encode_exact
from .quant_rules import check_importance, choose_types
from .weighting import add_imatrix_keys, imatrix_metadata, load_imatrix, tensor_importances
from .writer import OutputTensor, write_gguf

__all__ = ["convert", "ConvertResult", "PlanEntry"]


@dataclass(frozen=True)
class PlanEntry:
    name: str
    shape: tuple[int, ...]        # numpy order
    qtype: QT
    nbytes: int
    fallback_from: QT | None = None
    exact: bool | None = None     # GPTQ/AWQ layer: stored exactly (True) or requantized (False)


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

    packed_format: str | None = None   # "GPTQ 4-bit, group 128, ..." for a quantized checkpoint

    @property
    def type_counts(self) -> dict[str, int]:
        return dict(Counter(t.qtype.name for t in self.tensors))

    @property
    def exact_count(self) -> tuple[int, int]:
        """(GPTQ/AWQ layers written exactly, GPTQ/AWQ layers in all)."""
        packed = [t for t in self.tensors if t.exact is not None]
        return sum(1 for t in packed if t.exact), len(packed)


def _model_name(ckpt: Checkpoint) -> str:
    name = ckpt.config.get("_name_or_path") or ""
    return os.path.basename(str(name).rstrip("/")) or ckpt.dir.resolve().name


def _output_tensor(p, qtype: QT, keep_packed: bool, importance=None) -> tuple[OutputTensor, bool | None]:
    """One planned tensor as written: a GPTQ/AWQ layer in the type it loses least in (exact
    blocks from its codes where one fits) unless a preset was asked for; the rest as planned,
    quantized weighted by ``importance`` (an imatrix's) where given. Also whether a GPTQ/AWQ
    layer is exact (None for other tensors)."""
    source_nbytes = p.source.nbytes if p.source is not None else 0
    if not isinstance(p.source, PackedWeightRef):
        return OutputTensor(p.name, p.shape, qtype, p.load, source_nbytes, importance=importance), None
    if not keep_packed:
        return OutputTensor(p.name, p.shape, qtype, p.load, source_nbytes, importance=importance), False
    choice = choose_packed_type(p.source)
    if not choice.exact:
        return OutputTensor(p.name, p.shape, choice.qtype, p.load, source_nbytes), False
    return OutputTensor(p.name, p.shape, choice.qtype,
                        lambda: encode_exact(p.source, choice.qtype, p.transform),
                        source_nbytes, raw=True), True


def _packed_preset(entries: list[PlanEntry]) -> Preset:
    """general.file_type of a GPTQ/AWQ conversion: the preset of the type most of its
    quantized layers got."""
    counts = Counter(e.qtype for e in entries if e.exact is not None)
    if not counts:
        return PRESETS["f16"]
    most = counts.most_common(1)[0][0]
    return next((p for p in PRESETS.values() if p.default_type == most), PRESETS["f16"])


def convert(hf_dir: str | os.PathLike, out_path: str | os.PathLike | None, type: str | None = None,
            threads: int | None = None, vocab_only: bool = False, dry_run: bool = False,
            progress: bool | None = None, imatrix: str | os.PathLike | None = None) -> ConvertResult:
    """Convert the checkpoint in ``hf_dir`` to a GGUF file at ``out_path``.

    Args:
        hf_dir: directory with config.json, safetensors weights and tokenizer files.
        out_path: output .gguf (not needed for a dry run).
        type: output preset: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_s, q4_k_m,
            q5_k_s, q5_k_m, q6_k (K-quant presets mix types per tensor as llama.cpp does).
            None (default): f16, except that the layers of a GPTQ/AWQ checkpoint keep their
            quantization (exactly where a ggml type holds it, see packed_exact); a preset
            requantizes them from their dequantized weights.
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
    ckpt = Checkpoint(hf_dir)
    chosen_preset = preset(type or "f16")
    arch = converter_for(ckpt)
    vocab = arch.vocab()
    planned = [] if vocab_only else arch.plan()
    im = load_imatrix(imatrix) if imatrix is not None else None
    choices = choose_types([(p.name, p.shape, QT.F32) for p in planned], chosen_preset,
                           arch.hp.n_layer, arch.hp.n_head // arch.hp.n_head_kv, getattr(arch, "n_expert", 0),
                           has_imatrix=im is not None)
    check_importance(choices, chosen_preset, has_imatrix=im is not None)
    importances = [None] * len(choices) if im is None else \
        tensor_importances(choices, [p.shape for p in planned], [True] * len(choices), chosen_preset, im)
    outputs, entries = [], []
    for p, c, qw in zip(planned, choices, importances):
        out, exact = _output_tensor(p, c.qtype, keep_packed=type is None, importance=qw)
        outputs.append(out)
        entries.append(PlanEntry(out.name, out.shape, out.qtype, out.nbytes, c.fallback_from, exact))
    if type is None and ckpt.packed_format is not None:
        chosen_preset = _packed_preset(entries)
    result = ConvertResult(None, arch.gguf_arch, chosen_preset.name, entries,
                           input_bytes=sum(o.source_nbytes for o in outputs),
                           packed_format=ckpt.packed_format.describe() if ckpt.packed_format else None)
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
