"""The type stubs cover the native modules: every public name of `_core` and `_harness` is
declared in its `.pyi` (names only a CUDA build has may be declared beyond that)."""
from __future__ import annotations

import ast

import pytest

from conftest import REPO
from localllm import _core, _harness


def declared(pyi: str) -> set[str]:
    names = set()
    for node in ast.parse((REPO / "python" / "localllm" / pyi).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("module, pyi", [(_core, "_core.pyi"), (_harness, "_harness.pyi")], ids=["_core", "_harness"])
def test_every_public_name_is_declared(module, pyi):
    public = {n for n in dir(module) if not n.startswith("_")}
    assert public - declared(pyi) == set()
