"""Start and stop a live `localllm serve` for the server tests: a subprocess on 127.0.0.1 on a
free port, ready once /health answers 200."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import package_env

REPO = Path(__file__).resolve().parent.parent

CHAT = "/v1/chat/completions"          # the OpenAI paths the server tests call
COMPL = "/v1/completions"
MSGS = [{"role": "user", "content": "Hi"}]   # the shortest chat


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """`with LiveServer(model, "-c", "1024") as srv:` srv.url is http://127.0.0.1:PORT."""

    def __init__(self, model: Path, *args: str, timeout: float = 120, log: Path | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "localllm_cli", "serve", "-m", str(model), "--port", str(self.port),
                    "-t", "2", "--log-level", "warning", *args]
        self.timeout = timeout
        self.log = log            # the server's output goes there (read it with log_text), else a pipe
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> LiveServer:
        env = package_env()
        out = open(self.log, "w") if self.log is not None else subprocess.PIPE
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=out, stderr=subprocess.STDOUT, text=True)
        if self.log is not None:
            out.close()
        deadline = time.time() + self.timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited ({self.proc.returncode}): {self.log_text()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.__exit__()
        raise TimeoutError(f"server not healthy after {self.timeout} s")

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        if self.log is not None:
            return Path(self.log).read_text(errors="replace")
        return self.proc.stdout.read() if self.proc is not None and self.proc.poll() is not None else ""

    def rss(self) -> int:
        """The server process's resident memory, bytes."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def metrics(self) -> dict[str, float]:
        """The /metrics samples (name or name{labels} -> value)."""
        out = {}
        for line in httpx.get(f"{self.url}/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def wait_idle(self, timeout: float = 20) -> dict[str, float]:
        """Metrics once nothing runs or waits and no KV block is referenced."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            idle = m["localllm_requests_running"] == 0 and m["localllm_requests_waiting"] == 0 \
                and m["localllm_kv_blocks_used"] == 0
            if idle or time.time() > deadline:
                return m
            time.sleep(0.05)
