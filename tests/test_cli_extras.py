"""What `pip install .` alone gives: every `localllm` command but convert/quantize runs without the
packages of the optional extras, and those two name the extra they need.

The commands run in a subprocess where importing any package that only an extra brings (read
from pyproject.toml) raises ModuleNotFoundError, as it would in a fresh venv without extras."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from conftest import REPO, model_file, package_env

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("-", "_") for r in reqs}


EXTRA_ONLY = set().union(*map(_names, PYPROJECT["optional-dependencies"].values())) - _names(PYPROJECT["dependencies"])
# PyPI names whose import name differs.
EXTRA_ONLY |= {"llama_cpp", "pytest"}

BLOCKER = """
import sys
BLOCKED = set({blocked!r})
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: an extra's package)", name=name)
        return None
sys.meta_path.insert(0, Blocker())
from localllm_cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def without_extras(*args: str) -> subprocess.CompletedProcess:
    code = BLOCKER.format(blocked=sorted(EXTRA_ONLY))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=package_env(), timeout=600)


def test_blocked_set_holds_the_extras_packages():
    assert {"gguf", "safetensors", "torch", "scipy", "openai"} <= EXTRA_ONLY
    assert not EXTRA_ONLY & {"numpy", "fastapi", "jinja2", "tokenizers"}


@pytest.mark.parametrize("command", ["pull", "list", "info", "run", "chat", "tokenize", "perplexity", "bench",
                                     "convert", "quantize", "serve"])
def test_every_command_parses_without_extras(command):
    proc = without_extras(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: localllm" in proc.stdout


def test_run_info_tokenize_without_extras():
    model = str(model_file("smollm2-135m-q4_1"))
    for args in (["info", model], ["run", "-m", model, "-p", "The capital of France is", "-n", "4", "--temp", "0"],
                 ["tokenize", "-m", model, "Hello"], ["list"]):
        proc = without_extras(*args)
        assert proc.returncode == 0, f"localllm {' '.join(args)}:\n{proc.stderr}"
        assert proc.stdout.strip()


@pytest.mark.parametrize("args", [["convert", "some_dir", "-o", "out.gguf"], ["quantize", "a.gguf", "b.gguf", "q8_0"]])
def test_convert_names_its_extra(args, tmp_path):
    proc = without_extras(*args)
    assert proc.returncode == 1
    assert "pip install 'localllm[convert]'" in proc.stderr and "Traceback" not in proc.stderr


def test_convert_help_lists_the_presets():
    from localllm_convert.filetypes import PRESETS
    proc = without_extras("convert", "--help")
    listed = re.findall(r"\b(?:f32|f16|bf16|q\d_\w+|iq\d_\w+)\b", " ".join(proc.stdout.split()))
    assert sorted(set(listed)) == sorted(PRESETS)


def test_run_json_schema_and_grammar_files(tmp_path):
    import json

    import jsonschema
    from conftest import model_file, package_env
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population": {"type": "integer"}},
              "required": ["city", "population"], "additionalProperties": False}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"\n')
    base = [sys.executable, "-m", "localllm_cli", "run", "-m", str(model_file("smollm2-135m-q4_1")), "--temp", "0",
            "-n", "100", "-p", "The largest city of France as JSON:"]
    out = subprocess.run(base + ["--json-schema", str(tmp_path / "s.json")], capture_output=True, text=True,
                         env=package_env(), timeout=300, check=True).stdout
    jsonschema.validate(json.loads(out), schema)
    out = subprocess.run(base + ["--grammar", str(tmp_path / "g.gbnf")], capture_output=True, text=True,
                         env=package_env(), timeout=300, check=True).stdout
    assert out.strip() in ("yes", "no")
    bad = subprocess.run(base + ["--grammar", str(tmp_path / "s.json")], capture_output=True, text=True,
                         env=package_env(), timeout=300)
    assert bad.returncode != 0 and "grammar" in bad.stderr
