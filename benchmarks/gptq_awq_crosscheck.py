"""Cross-check the converter's GPTQ/AWQ unpacking against AutoGPTQ's and AutoAWQ's own code.

AutoGPTQ (0.7.1) and AutoAWQ (0.2.9) do not import as packages here (AutoGPTQ's __init__ fails
against transformers 5, AutoAWQ's needs `datasets` and its CUDA kernels), so they are not test
dependencies. Their packing and dequantizing modules are plain torch, though; this script
installs nothing itself and loads just those modules:

    pip download --no-deps auto-gptq==0.7.1 autoawq==0.2.9 -d /tmp/pkgs
    pip install --no-deps --target /tmp/xpkgs /tmp/pkgs/*
    PYTHONPATH=python:convert:/tmp/xpkgs python benchmarks/gptq_awq_crosscheck.py

For each layout it packs a random fp16 linear layer with the library's own ``pack`` /
``from_linear`` (GPTQ: AutoGPTQ's ``QuantLinear.pack``, which writes v1 zeros, zero - 1;
AWQ: ``WQLinear_GEMM.from_linear``), writes the tensors to a safetensors file, reads them back
with the converter (``localllm_convert.packed``), and compares the converter's float32 weight,
rounded to fp16, with the library's own dequantization in fp16 (AutoGPTQ's CPU forward pass on
an identity input; AutoAWQ's ``dequantize_gemm``); GPTQ layers are also read as GPTQModel's
``gptq_v2`` after GPTQModel's own v1 -> v2 zero conversion. It also checks that the GGUF blocks the
converter builds from the codes equal its weight exactly. Prints one line per layout; exit
status 1 when any differs.
"""
from __future__ import annotations

import importlib.util
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch


def _load_module(name: str):
    """One module of a package whose __init__ cannot be imported here (parent packages stubbed)."""
    if name in sys.modules:
        return sys.modules[name]
    parts = name.split(".")
    top = sys.modules.get(parts[0])
    root = Path(top.__path__[0] if top is not None
                else importlib.util.find_spec(parts[0]).submodule_search_locations[0])
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            stub = types.ModuleType(pkg)
            stub.__path__ = [str(root.joinpath(*parts[1:i]))]
            sys.modules[pkg] = stub
    return importlib.import_module(name)


def rtn(w: torch.Tensor, bits: int, gs: int, sym: bool, g_idx: torch.Tensor):
    """GPTQ-style round-to-nearest parameters per (output row, group): scales, zeros [out, G]."""
    maxq = 2 ** bits - 1
    n_groups = int(g_idx.max()) + 1
    scales = torch.zeros(w.shape[0], n_groups)
    zeros = torch.zeros(w.shape[0], n_groups)
    for g in range(n_groups):
        cols = w[:, g_idx == g].float()
        lo, hi = cols.min(1).values.clamp(max=0), cols.max(1).values.clamp(min=0)
        if sym:
            hi = torch.maximum(lo.abs(), hi)
            scale, zero = (2 * hi / maxq).clamp(min=1e-5), torch.full_like(hi, (maxq + 1) // 2)
        else:
            scale = ((hi - lo) / maxq).clamp(min=1e-5)
            zero = torch.round(-lo / scale.half().float())
        scales[:, g], zeros[:, g] = scale.half().float(), zero
    return scales, zeros


def converter_weight(tensors: dict[str, np.ndarray], config: dict):
    """The converter's view of one packed layer (written to and read from safetensors)."""
    from safetensors.numpy import save_file
    from localllm_convert.checkpoint import _index_file
    from localllm_convert.packed import packed_tensors
    from localllm_convert.packed_config import read_quantization_config
    path = Path(tempfile.mkdtemp()) / "layer.safetensors"
    save_file({f"layer.{k}": v for k, v in tensors.items()}, str(path))
    ref = packed_tensors(_index_file(path), read_quantization_config({"quantization_config": config}, None))
    return ref["layer.weight"]


def exact_blocks_ok(ref) -> str:
    from localllm_convert.packed_exact import choose_packed_type, encode_exact
    choice = choose_packed_type(ref)
    if not choice.exact:
        return f"{choice.qtype.name} (requantized)"
    encode_exact(ref, choice.qtype, None)      # raises when the blocks differ from the weight
    return f"{choice.qtype.name} exact"


_GPTQMODEL_V2_OFFSET = {4: 0b00010001000100010001000100010001, 8: 0b00000001000000010000000100000001}


def gptq_case(bits: int, gs: int, sym: bool, act_order: bool) -> bool:
    qlinear = _load_module("auto_gptq.nn_modules.qlinear.qlinear_cuda")
    n_in, n_out = 512, 256
    torch.manual_seed(bits * 1000 + gs)
    linear = torch.nn.Linear(n_in, n_out, bias=False).half()
    linear.weight.data.normal_(0, 0.05)
    g = torch.arange(n_in) // (n_in if gs == -1 else gs)
    if act_order:
        g = g[torch.randperm(n_in)]
    scales, zeros = rtn(linear.weight.data, bits, gs, sym, g)
    q = qlinear.QuantLinear(bits, gs, n_in, n_out, bias=False)
    q.pack(linear, scales, zeros, g.int())
    with torch.no_grad():
        theirs = q(torch.eye(n_in, dtype=torch.float16)).T.numpy()     # [out, in], fp16
    config = {"quant_method": "gptq", "bits": bits, "group_size": gs, "sym": sym,
              "desc_act": act_order, "checkpoint_format": "gptq"}
    ref = converter_weight({k: getattr(q, k).numpy() for k in ("qweight", "qzeros", "scales", "g_idx")},
                           config)
    ours = ref.read()
    # GPTQModel's v1 -> v2 conversion (convert_gptq_v1_to_v2_format, int32 words): add 1 to
    # every packed zero with one integer addition; the converter's gptq_v2 reading must agree
    v2 = {k: getattr(q, k).numpy() for k in ("qweight", "scales", "g_idx")}
    v2["qzeros"] = (q.qzeros.numpy().view(np.uint32) + np.uint32(_GPTQMODEL_V2_OFFSET[bits])).view(np.int32)
    ours_v2 = converter_weight(v2, config | {"checkpoint_format": "gptq_v2"}).read()
    same = np.array_equal(ours.astype(np.float16), theirs) and np.array_equal(ours_v2, ours)
    print(f"AutoGPTQ {bits}-bit group {gs:4} {'sym ' if sym else 'asym'} "
          f"{'act-order' if act_order else '         '}: "
          f"{'equal' if same else 'DIFFERENT'} (max |diff| {np.abs(ours - theirs).max():.3g}); "
          f"{exact_blocks_ok(ref)}")
    return same


def awq_case(gs: int) -> bool:
    gemm = _load_module("awq.modules.linear.gemm")
    packing = _load_module("awq.utils.packing_utils")
    n_in, n_out = 512, 256
    torch.manual_seed(gs)
    linear = torch.nn.Linear(n_in, n_out, bias=False).half()
    linear.weight.data.normal_(0, 0.05)
    scales, zeros = rtn(linear.weight.data, 4, gs, False, torch.arange(n_in) // gs)
    q = gemm.WQLinear_GEMM.from_linear(linear.float(), 4, gs, scales=scales.T.contiguous(),
                                       zeros=zeros.T.contiguous())
    theirs = packing.dequantize_gemm(q.qweight, q.qzeros, q.scales, 4, gs).T.numpy()
    config = {"quant_method": "awq", "bits": 4, "group_size": gs, "zero_point": True, "version": "gemm"}
    ref = converter_weight({k: getattr(q, k).numpy() for k in ("qweight", "qzeros", "scales")}, config)
    ours = ref.read()
    same = np.array_equal(ours.astype(np.float16), theirs.astype(np.float16))
    print(f"AutoAWQ GEMM 4-bit group {gs:4}: {'equal' if same else 'DIFFERENT'} "
          f"(max |diff| {np.abs(ours - theirs).max():.3g}); {exact_blocks_ok(ref)}")
    return same


def main() -> int:
    ok = True
    for bits in (4, 8):
        for gs in (32, 64, 128, -1):
            for sym in (True, False):
                ok &= gptq_case(bits, gs, sym, act_order=False)
        ok &= gptq_case(bits, 128, True, act_order=True)
    for gs in (32, 64, 128):
        ok &= awq_case(gs)
    print("all equal" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
