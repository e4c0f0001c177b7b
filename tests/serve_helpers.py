"""A judge server on 127.0.0.1 for the serve tests: uvicorn in a thread (``serving``) or ``capjudge serve``
in a process of its own (``ServeProcess``), started and stopped by the test."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from capjudge.backends.scripted import ScriptedBackend
from capjudge.serve.app import ServeSettings, create_app
from capjudge.serve.served import ServedJudge, judge_info
from capjudge.serve.server import free_port, make_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
IMAGES = EXAMPLES / "images"
SRC = Path(__file__).resolve().parents[1] / "src"
ANSWER = "I would rate it 85 out of 100."


class Gate:
    """A scripted responder that holds every answer until ``open()``; ``entered`` is set when the
    backend first receives a batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()

    def __call__(self, request: Any) -> str:
        self.entered.set()
        if not self.gate.wait(60):
            raise TimeoutError("gate never opened")
        return ANSWER

    def open(self) -> None:
        self.gate.set()


@dataclass
class Served:
    """A running server: its base URL, its judge and backend, its app."""

    url: str
    judge: ServedJudge
    backend: ScriptedBackend
    app: Any


@contextlib.contextmanager
def serving(responder: Any = ANSWER, *, method: str = "vanilla", images: Path | None = IMAGES, judge: ServedJudge | None = None, **settings: Any) -> Iterator[Served]:
    """A server for ``judge`` (default: ``method`` on a scripted backend answering with
    ``responder``) on a free port of 127.0.0.1, stopped (gracefully) at the end of the block."""
    backend = ScriptedBackend(responder)
    if judge is None:
        judge = ServedJudge(method, backend, images_root=images, batch_size=settings.get("max_batch", 64))
    config = ServeSettings(**settings)
    app = create_app(judge, config, judge_info(judge))
    port = free_port()
    server = make_server(app, "127.0.0.1", port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{port}", judge, backend, app)
    finally:
        server.should_exit = True
        thread.join(30)


def b64(path: Path) -> str:
    """A file's bytes in base64."""
    return base64.b64encode(path.read_bytes()).decode("ascii")


def auth(token: str) -> dict[str, str]:
    """The Authorization header of ``token``."""
    return {"Authorization": f"Bearer {token}"}


class ServeProcess:
    """``capjudge serve --method vanilla`` on a scripted backend (no token) in a process of its own, on
    a free port of 127.0.0.1, with ``args`` added; ready (``/health`` answers) when built."""

    def __init__(self, tmp: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        env.pop("CAPJUDGE_TOKEN", None)
        self.log_path = tmp / f"serve-{self.port}.log"
        self.log = self.log_path.open("w")
        cmd = [sys.executable, "-m", "capjudge.cli", "serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--no-cache", *args, "--port", str(self.port)]
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop(kill=True)
                raise RuntimeError(f"the server did not start: {self.log_path.read_text()}")
            time.sleep(0.1)

    def stop(self, *, kill: bool = False) -> None:
        """SIGTERM (the server answers what it holds, then exits), or SIGKILL with ``kill``."""
        if self.proc.poll() is None:
            self.proc.kill() if kill else self.proc.terminate()
        self.proc.wait(60)
        self.log.close()
