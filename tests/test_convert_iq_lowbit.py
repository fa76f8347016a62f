"""The low-bit i-quant presets of the converter (iq2_xxs ... iq3_m): llama.cpp's per-tensor rules,
checked against llama-quantize's own --dry-run plan on the same files when it is built
(benchmarks/llamaserver_build.py builds the vendored llama.cpp), and by hand otherwise; the
refusal of the presets that need an importance matrix; and an iq3_s file written and run."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from localllm_convert.filetypes import PRESETS, preset
from localllm_convert.quant_rules import QT, choose_types

from test_iq_lowbit import llama_weights

N_LAYER = 8   # ffn_down's first eighth and iq3_xs's middle three quarters both non-empty

IQ_PRESETS = ("iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs", "iq3_xs", "iq3_s", "iq3_m")


def llama_quantize() -> Path | None:
    root = Path(os.environ.get("LOCALLLM_LLAMA_SERVER_DIR", Path.home() / ".cache/localllm/llama-server"))
    exe = root / "build" / "bin" / "llama-quantize"
    return exe if exe.exists() else None


def tiny_model(tmp_path: Path, n_head_kv: int, tied: bool) -> tuple[Path, list[tuple[str, tuple, QT]]]:
    """An F32 llama of 256-wide rows (every type fits) with 4 query heads per n_head_kv."""
    import gguf
    mats, small = llama_weights(np.random.default_rng(0), N_LAYER)
    hd = 256 // 4
    for il in range(N_LAYER):
        for k in ("attn_k", "attn_v"):
            mats[f"blk.{il}.{k}.weight"] = mats[f"blk.{il}.{k}.weight"][:n_head_kv * hd]
    if tied:
        del mats["output.weight"]
    path = tmp_path / f"m{n_head_kv}{int(tied)}.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for key, val in (("block_count", N_LAYER), ("embedding_length", 256), ("feed_forward_length", 512),
                     ("attention.head_count", 4), ("attention.head_count_kv", n_head_kv),
                     ("context_length", 256)):
        w.add_uint32(f"llama.{key}", val)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    for name, arr in (small | mats).items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    infos = [(n, a.shape, QT.F32) for n, a in (small | mats).items()]
    return path, infos


def llamacpp_plan(exe: Path, path: Path, name: str) -> dict[str, QT]:
    """{tensor: type} from llama-quantize --dry-run (no imatrix)."""
    out = subprocess.run([str(exe), "--dry-run", str(path), name.upper(), "1"], capture_output=True, text=True,
                         timeout=120)
    plan = {}
    for line in (out.stdout + out.stderr).splitlines():
        m = re.search(r"\]\s+(\S+)\s+- \[.*\], type =\s+(\w+), size = .*?(?:\((\w+)\))?\s*$", line)
        if m:
            plan[m.group(1)] = QT[(m.group(3) or m.group(2)).upper()]
    assert plan, out.stdout + out.stderr
    return plan


def test_presets_are_llamacpp_file_types():
    ids = {name: PRESETS[name].ftype for name in IQ_PRESETS}
    assert ids == {"iq2_xxs": 19, "iq2_xs": 20, "iq2_s": 28, "iq2_m": 29, "iq3_xxs": 23, "iq3_xs": 22,
                   "iq3_s": 26, "iq3_m": 27}   # llama.h LLAMA_FTYPE_MOSTLY_*
    assert preset("iq2_s").default_type == QT.IQ2_XS and preset("iq2_m").default_type == QT.IQ2_S
    assert preset("iq3_xs").default_type == QT.IQ3_S and preset("iq3_m").default_type == QT.IQ3_S


@pytest.mark.parametrize("name", IQ_PRESETS)
@pytest.mark.parametrize("n_head_kv,tied", [(2, False), (1, True)])
def test_rules_follow_llama_quantize(name, n_head_kv, tied, tmp_path):
    exe = llama_quantize()
    if exe is None:
        pytest.skip("llama-quantize is not built from the vendored llama.cpp")
    path, infos = tiny_model(tmp_path, n_head_kv, tied)
    ours = {c.name: c.qtype for c in choose_types(infos, preset(name), N_LAYER, 4 // n_head_kv)}
    assert ours == llamacpp_plan(exe, path, name)


def test_rules_by_hand():
    """A few of llama_tensor_get_type's choices, for machines without llama-quantize."""
    layers = [(f"blk.{i}.{k}.weight", (256, 256)) for i in range(8)
              for k in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")]
    infos = [(n, s, QT.F32) for n, s in [("token_embd.weight", (320, 256)), ("output.weight", (320, 256)), *layers]]
    got = {n: {c.name: c.qtype for c in choose_types(infos, preset(n), 8, 2)} for n in IQ_PRESETS}
    assert got["iq2_m"]["blk.3.attn_v.weight"] == QT.IQ3_S and got["iq2_m"]["blk.0.ffn_down.weight"] == QT.IQ3_S
    assert got["iq2_m"]["blk.3.ffn_down.weight"] == QT.IQ2_S and got["iq2_m"]["output.weight"] == QT.Q5_K
    assert got["iq2_xxs"]["token_embd.weight"] == QT.Q2_K and got["iq2_xxs"]["blk.2.attn_v.weight"] == QT.Q2_K
    assert got["iq3_m"]["blk.1.attn_v.weight"] == QT.Q4_K and got["iq3_m"]["blk.0.ffn_down.weight"] == QT.Q4_K
    assert got["iq3_m"]["blk.1.attn_output.weight"] == QT.Q4_K and got["iq3_m"]["output.weight"] == QT.Q6_K
    assert got["iq3_xs"]["blk.3.ffn_up.weight"] == QT.IQ3_XXS and got["iq3_xs"]["blk.7.ffn_up.weight"] == QT.IQ3_S
    assert got["iq3_xxs"]["blk.3.attn_q.weight"] == QT.IQ2_S and got["iq3_xxs"]["blk.3.ffn_down.weight"] == QT.Q3_K
    assert got["iq3_xxs"]["blk.3.attn_v.weight"] == QT.IQ3_S   # no imatrix
    with_imatrix = {c.name: c.qtype for c in choose_types(infos, preset("iq3_xxs"), 8, 2, has_imatrix=True)}
    assert with_imatrix["blk.3.attn_v.weight"] == QT.IQ3_XXS and with_imatrix["blk.3.ffn_down.weight"] == QT.IQ3_XXS


def test_presets_needing_an_importance_matrix_are_refused(tmp_path):
    from localllm_convert import quantize_gguf
    path, _ = tiny_model(tmp_path, 2, False)
    for name in ("iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs", "iq3_xs"):
        with pytest.raises(ValueError, match=f"output type {name} needs an importance matrix"):
            quantize_gguf(str(path), str(tmp_path / "out.gguf"), name)
    assert not (tmp_path / "out.gguf").exists()
    # iq3_m: IQ3_S and Q4_K only, which llama-quantize writes without an imatrix too
    quantize_gguf(str(path), str(tmp_path / "out.gguf"), "iq3_m", progress=False)


def test_iq3_s_file_is_written_and_runs(tmp_path):
    from localllm import _core
    from localllm_convert import quantize_gguf
    from test_iq_lowbit import forward_logits
    path, _infos = tiny_model(tmp_path, 2, False)
    out = tmp_path / "iq3_s.gguf"
    quantize_gguf(str(path), str(out), "iq3_s", progress=False)
    from gguf import GGUFReader
    types = {t.name: QT(t.tensor_type) for t in GGUFReader(str(out)).tensors}
    assert types["blk.3.attn_q.weight"] == QT.IQ3_S and types["output.weight"] == QT.Q6_K
    assert np.isfinite(forward_logits(out, [1, 2, 3, 4])).all()
    assert _core.type_info(int(QT.IQ3_S))["needs_importance"] is False
