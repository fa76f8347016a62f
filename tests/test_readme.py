"""Every command block of README.md, run as written (tests/readme_commands.py reads them).

The two set-up commands are run by .ci/run in a fresh virtual environment; here the part of the
first one after `pip install . &&` runs too. Each command runs in an empty folder holding only the
files the README names as the user's own (a text file for perplexity, a Hugging Face checkpoint
for convert), with `localllm` and `python` meaning this test run's interpreter and packages.
The server blocks run against `localllm serve` started from the README's own line.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import readme_commands
from conftest import CORPUS, REPO, package_env

ALL = readme_commands.blocks()
SERVER = [b for b in ALL if b.section == "Server"]
SETUP = [b for b in ALL if b.section == readme_commands.SETUP_SECTION]
DEVELOPMENT = [b for b in ALL if b.section == "Development"]
TOUR = [b for b in ALL if b not in SERVER + SETUP + DEVELOPMENT]
NO_GPU = "needs a GPU"            # LLM's refusal of -ngl > 0 where no GPU can run it


@pytest.fixture(scope="module")
def shell_env(tmp_path_factory) -> dict:
    """PATH with `localllm` and `python` bound to this interpreter and the packages under test."""
    bin_dir = tmp_path_factory.mktemp("bin")
    for name, argv in (("localllm", f'"{sys.executable}" -m localllm_cli'), ("python", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {argv} "$@"\n')
        shim.chmod(0o755)
    env = package_env()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    return env


GPTQ_DIR = "Qwen2.5-0.5B-Instruct-GPTQ-Int4"


def user_files(where: Path, text: str) -> None:
    """The files the README's commands (text) name as the user's own."""
    shutil.copy(CORPUS, where / "wiki.test.raw")
    from tiny_checkpoints import build
    build("llama", None, where / "SmolLM2-135M-Instruct")     # the converter's input, random weights
    if GPTQ_DIR in text:   # a GPTQ checkpoint: random qwen2 weights packed as AutoGPTQ does
        from test_convert_gptq_awq import Layout, make_checkpoint
        make_checkpoint(where / GPTQ_DIR, Layout(), arch="qwen2")


def run_line(cmd: str, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    gpu_only = readme_commands.GPU_MARK.search(cmd)
    if proc.returncode != 0 and gpu_only:
        assert NO_GPU in proc.stderr, f"{cmd}\nfailed without the no-GPU message:\n{proc.stderr}"
    elif proc.returncode != 0:
        raise AssertionError(f"README command failed ({proc.returncode}): {cmd}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_setup_commands_are_what_ci_runs():
    cmds = readme_commands.setup_commands()
    ci = (REPO / ".ci" / "run").read_text()
    assert "tests/readme_commands.py install" in ci and "tests/readme_commands.py test" in ci
    assert cmds["test"] == 'pip install ".[test]" && python -m pytest'


def test_first_command_after_install(tmp_path, shell_env):
    after_install = readme_commands.setup_commands()["install"].split("&&", 1)[1].strip()
    proc = run_line(after_install, tmp_path, shell_env)
    assert "general.architecture" in proc.stdout or "llama" in proc.stdout      # localllm info
    assert "Paris" in proc.stdout                                                # the greedy reply


@pytest.mark.parametrize("block", TOUR + DEVELOPMENT, ids=lambda b: b.id)
def test_block(block, tmp_path, shell_env):
    if block.lang == "python":
        script = tmp_path / "example.py"
        script.write_text(block.text)
        run_line(f"python {script.name}", tmp_path, shell_env)
        return
    cwd = REPO if block.section == "Development" else tmp_path
    if cwd == tmp_path:
        user_files(tmp_path, block.text)
    for cmd in block.commands():
        proc = run_line(cmd, cwd, shell_env)
        assert proc.stdout.strip() or proc.stderr.strip(), f"{cmd} printed nothing"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _wait_healthy(url: str, proc: subprocess.Popen, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited ({proc.returncode}):\n{proc.stderr.read()}")
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"{url} not healthy after {limit} s")


def test_server_blocks(tmp_path, shell_env):
    serve = [c for c in SERVER[0].commands()]
    assert len(serve) == 1 and serve[0].startswith("localllm serve"), "the Server section starts with `localllm serve`"
    port = int(re.search(r"--port (\d+)", serve[0]).group(1)) if "--port" in serve[0] else 8080
    assert _port_free(port), f"port {port} is taken: the README's server cannot start"
    proc = subprocess.Popen(["bash", "-c", f"exec {serve[0]}"], cwd=tmp_path, env=shell_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health", proc)
        for block in SERVER[1:]:
            if block.lang == "python":
                (tmp_path / "client.py").write_text(block.text)
                out = run_line("python client.py", tmp_path, shell_env).stdout
                assert len(out.strip()) > 0
                continue
            for cmd in block.commands():
                out = run_line(cmd, tmp_path, shell_env).stdout
                if '"stream": true' in cmd:
                    assert out.rstrip().endswith("data: [DONE]"), out[-300:]
                else:
                    assert json.loads(out)["choices"][0]["message"]["content"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
