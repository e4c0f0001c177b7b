"""The options of a ``vllm:MODEL`` spec: which Python runs the server, what the server is started
with (the method's needs, the preset's chat template and reasoning parser, vLLM's own flags passed
through as ``--kebab-case``), and what goes to the OpenAI-protocol client. Checked as text before
anything starts (:func:`check_options`): an unknown option or a bad value is a usage error."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capjudge.backends.options import (
    OptionError,
    as_bool,
    as_float,
    as_int,
    as_json_object,
    check_known,
)
from capjudge.backends.presets import JudgePreset, get_preset, preset_for_config, read_config
from capjudge.backends.registry import BackendSpec
from capjudge.core.redact import get_logger
from capjudge.prompts.server import SERVER_CHAT_TEMPLATES, server_chat_template_path

log = get_logger("capjudge.backends.vllm")

PYTHON_VARIABLE = "CAPJUDGE_VLLM_PYTHON"
"""The environment variable naming a Python with vLLM, used when this interpreter has none."""

SERVER_FLAGS: dict[str, str] = {
    "tensor_parallel_size": "int", "pipeline_parallel_size": "int", "data_parallel_size": "int",
    "gpu_memory_utilization": "float", "max_model_len": "int", "max_num_seqs": "int", "max_num_batched_tokens": "int",
    "dtype": "str", "quantization": "str", "kv_cache_dtype": "str", "revision": "str", "tokenizer": "str",
    "tokenizer_mode": "str", "load_format": "str", "generation_config": "str", "seed": "int", "max_logprobs": "int",
    "swap_space": "float", "cpu_offload_gb": "float", "enforce_eager": "bool", "trust_remote_code": "bool",
    "enable_prefix_caching": "bool", "enable_chunked_prefill": "bool",
    "limit_mm_per_prompt": "json", "mm_processor_kwargs": "json", "hf_overrides": "json",
}  # fmt: skip
"""vLLM server flags a spec may set (``max_model_len=4096`` -> ``--max-model-len 4096``), with
their types; anything else goes in ``server_args``."""

IDENTITY_FLAGS = ("dtype", "quantization", "kv_cache_dtype", "revision", "tokenizer", "tokenizer_mode", "load_format", "generation_config", "seed", "mm_processor_kwargs", "hf_overrides")
"""The server flags that change answers (in the backend's identity, the cache key); the others
(parallelism, memory, batch sizes) do not."""

CLIENT_OPTIONS = (
    "concurrency", "timeout", "max_retries", "retry_base_delay", "retry_max_delay", "gone_after", "gone_grace", "detail",
    "extra_body", "logprobs", "max_top_logprobs", "add_special_tokens", "neutral_penalties", "thinking", "thinking_budget",
    "max_response_bytes",
)  # fmt: skip
"""Options of the OpenAI-protocol client (:class:`~capjudge.backends.openai.OpenAIBackend`)."""

OWN_OPTIONS = ("python", "startup_timeout", "preset", "chat_template", "reasoning_parser", "server_args", "pad_square")
"""The kind's own options."""

DEFAULT_CONCURRENCY = 32
"""Requests in flight to the server (vLLM batches them itself)."""
DEFAULT_STARTUP_TIMEOUT = 900.0
"""Seconds the server may take to answer ``/health`` (a large model loads for minutes)."""
DEFAULT_TOP_LOGPROBS = 20
"""Alternatives per token the client asks at most, and the server's ``--max-logprobs`` at least."""

REASONING_PARSERS = {
    "qwen3-vl-thinking": "qwen3",
    "qwen3-hybrid": "qwen3",
    "glm-4.1v-thinking": "glm45",
    "glm-4.5v": "glm45",
    "llava-critic-r1": "deepseek_r1",
}
"""vLLM's reasoning parser for each thinking preset (``reasoning_parser=NAME`` for others)."""


@dataclass(frozen=True)
class VLLMSettings:
    """A ``vllm:`` spec's options, checked: the server's Python, flags and chat template, and the
    client's options."""

    model: str
    python: str
    startup_timeout: float
    preset: JudgePreset | None
    chat_template: str | None  # a file, or None: the model's own
    chat_template_id: str  # "model", a packaged template's name, or "sha256:..." of a file
    reasoning_parser: str | None
    flags: dict[str, Any] = field(default_factory=dict)
    server_args: tuple[str, ...] = ()
    client: dict[str, Any] = field(default_factory=dict)
    pad_fill: tuple[int, ...] | None = None  # images padded to a square with this colour (LLaVA-1.5), or not

    @property
    def max_logprobs(self) -> int:
        """The server's ``--max-logprobs``: at least the alternatives the client asks."""
        asked = self.client.get("max_top_logprobs")
        return max(int(self.flags.get("max_logprobs") or 0), DEFAULT_TOP_LOGPROBS if asked is None else int(asked))

    def command(self, port: int) -> list[str]:
        """The server's command line on 127.0.0.1:``port``."""
        cmd = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model, "--served-model-name", self.model,
               "--host", "127.0.0.1", "--port", str(port), "--max-logprobs", str(self.max_logprobs)]  # fmt: skip
        flags = {"enable_prefix_caching": True, "seed": 0, **self.flags}  # a judge's image prefix is shared by its captions
        for name, value in flags.items():
            if name == "max_logprobs":
                continue
            flag = "--" + name.replace("_", "-")
            if isinstance(value, bool):
                cmd.append(flag if value else "--no-" + flag[2:])
            else:
                cmd += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
        if self.chat_template:
            cmd += ["--chat-template", self.chat_template]
        if self.reasoning_parser:
            cmd += ["--reasoning-parser", self.reasoning_parser]
        return [*cmd, *self.server_args]

    def identity(self) -> dict[str, Any]:
        """What of the server changes answers (the client's part is added by the backend)."""
        ident: dict[str, Any] = {"kind": "vllm", "model": self.model, "chat_template": self.chat_template_id}
        if self.preset is not None:
            ident["preset"] = self.preset.name
        if self.reasoning_parser:
            ident["reasoning_parser"] = self.reasoning_parser
        if self.pad_fill is not None:
            ident["pad_square"] = True
        for name in IDENTITY_FLAGS:
            if name in self.flags:
                ident[name] = json.dumps(self.flags[name], sort_keys=True) if isinstance(self.flags[name], dict) else self.flags[name]
        if self.server_args:
            ident["server_args"] = " ".join(self.server_args)
        return ident

    def env(self) -> dict[str, str]:
        """The server's environment: this one, without usage reports, offline for a local folder,
        and without ``PYTHONPATH`` when another Python (its own env) runs it."""
        env = dict(os.environ)
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        if Path(self.model).is_dir():
            env.setdefault("HF_HUB_OFFLINE", "1")
            env.setdefault("TRANSFORMERS_OFFLINE", "1")
        if Path(self.python).resolve() != Path(sys.executable).resolve():
            env.pop("PYTHONPATH", None)
        return env


def find_python(given: Any) -> str:
    """The Python that runs the server: ``python=PATH``, else this interpreter when it has vLLM,
    else ``$CAPJUDGE_VLLM_PYTHON``; an error naming all three otherwise."""
    if given:
        path = Path(str(given)).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise OptionError(f"option python={given}: no executable file there (a Python with vLLM installed)")
        return str(path)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    env = os.environ.get(PYTHON_VARIABLE)
    if env:
        path = Path(env).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise OptionError(f"${PYTHON_VARIABLE}={env}: no executable file there (a Python with vLLM installed)")
        return str(path)
    raise OptionError(f"the vllm backend needs vLLM: this Python ({sys.executable}) has none; install it (pip install vllm), or name a Python that has it with option python=PATH or ${PYTHON_VARIABLE}")


def _flag_value(name: str, value: Any) -> Any:
    kind = SERVER_FLAGS[name]
    if kind == "int":
        number = as_int(value, name)
        if number is not None and number < (0 if name == "seed" else 1):
            raise OptionError(f"option {name}={value!r}: {'0' if name == 'seed' else '1'} or more")
        return number
    if kind == "float":
        real = as_float(value, name)
        if real is not None and not real > 0:
            raise OptionError(f"option {name}={value!r}: a number above 0")
        if name == "gpu_memory_utilization" and real is not None and real > 1:
            raise OptionError(f"option {name}={value!r}: a share of the GPU's memory, above 0 and at most 1")
        return real
    if kind == "bool":
        return as_bool(value, name)
    if kind == "json":
        return as_json_object(value, name)
    text = str(value).strip()
    if not text or text.startswith("-"):
        raise OptionError(f"option {name}={value!r}: a value (not empty, not a flag)")
    return text


def _preset(model: str, given: Any) -> JudgePreset | None:
    if given is not None and str(given).strip().lower() not in ("", "auto"):
        return get_preset(str(given))
    # A hub id's config.json from the HF cache, or the hub (the server downloads the model anyway).
    config = read_config(model, local_files_only=False)
    if config is None:
        log.warning("vllm:%s: no config.json could be read: no judge preset, the model's own chat template (preset=NAME to choose one)", model)
    return preset_for_config(config, model) if config else None


def _chat_template(given: Any, preset: JudgePreset | None) -> tuple[str | None, str]:
    """The ``--chat-template`` file and how the identity names it: ``auto`` (the preset's: LLaVA-1.5's
    ``llava_v1``, BOS included, else the model's own), ``model``, a packaged name or a file."""
    text = "auto" if given is None else str(given).strip()
    if text == "auto":
        text = "llava_v1" if preset is not None and preset.chat_format == "llava" else "model"
    if text == "model":
        return None, "model"
    if text in SERVER_CHAT_TEMPLATES:
        return str(server_chat_template_path(text)), text
    path = Path(text).expanduser()
    if not path.is_file():
        raise OptionError(f"option chat_template={given}: not a file, nor one of auto, model, {', '.join(SERVER_CHAT_TEMPLATES)}")
    return str(path.resolve()), "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _pad_fill(model: str, given: Any, preset: JudgePreset | None) -> tuple[int, ...] | None:
    """The colour images are padded to a square with (the image processor's mean, as the HF
    backend pads), or ``None``: ``pad_square=auto`` follows the preset (LLaVA-1.5 pads)."""
    text = "auto" if given is None else str(given).strip().lower()
    pad = (preset is not None and preset.pad_square) if text == "auto" else as_bool(given, "pad_square")
    if not pad:
        return None
    mean = _image_mean(model)
    return tuple(int(x * 255) for x in (mean or (0.5, 0.5, 0.5)))  # the HF backend's fallback


def _image_mean(model: str) -> list[float] | None:
    """The image processor's ``image_mean``: ``preprocessor_config.json``, or the ``image_processor``
    of ``processor_config.json`` (where transformers 5 saves it), of a folder or a hub id."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = Path(model) / name
        try:
            if not Path(model).is_dir():
                from huggingface_hub import hf_hub_download

                path = Path(hf_hub_download(model, name))
            data = json.loads(path.read_text(encoding="utf-8"))
        except Exception:  # noqa: BLE001 - not there: the next file, or the fallback
            continue
        mean = (data.get("image_processor") or {}).get("image_mean") if "image_mean" not in data else data["image_mean"]
        if isinstance(mean, list) and len(mean) == 3 and all(isinstance(x, (int, float)) for x in mean):
            return [float(x) for x in mean]
    return None


def check_options(spec: BackendSpec, **options: Any) -> VLLMSettings:
    """A ``vllm:`` spec's options checked and converted, without starting anything: known names,
    values of the right kind, the Python, the model folder, the chat template and the client's
    options (through the OpenAI-protocol backend's own checks)."""
    from capjudge.backends.openai.options import check_options as check_client

    check_known("vllm", options, (*OWN_OPTIONS, *SERVER_FLAGS, *CLIENT_OPTIONS))
    model = spec.target
    if model.startswith((".", "/", "~")) or Path(model).expanduser().exists():
        path = Path(model).expanduser()
        if not (path / "config.json").is_file():
            raise OptionError(f"vllm:{model}: not a model folder (no config.json there)")
        model = str(path.resolve())
    flags = {k: _flag_value(k, v) for k, v in options.items() if k in SERVER_FLAGS and v is not None}
    try:
        server_args = tuple(shlex.split(str(options.get("server_args") or "")))
    except ValueError as exc:
        raise OptionError(f"option server_args: {exc}") from None
    startup = as_float(options.get("startup_timeout", DEFAULT_STARTUP_TIMEOUT), "startup_timeout")
    if startup is None or not startup > 0:
        raise OptionError(f"option startup_timeout={options.get('startup_timeout')!r}: seconds, above 0")
    preset = _preset(model, options.get("preset"))
    template, template_id = _chat_template(options.get("chat_template"), preset)
    parser = options.get("reasoning_parser")
    parser = REASONING_PARSERS.get(preset.name) if preset is not None and parser in (None, "auto") else parser
    parser = None if parser in (None, "", "none") else str(parser)
    client = {k: v for k, v in options.items() if k in CLIENT_OPTIONS}
    client.setdefault("concurrency", DEFAULT_CONCURRENCY)
    # The client's own checks, on the URL the server will have (a port of 0 until it starts).
    checked = check_client(BackendSpec("openai-compatible", f"http://127.0.0.1:0/v1#{model}"), **client)
    checked.pop("model", None)
    checked.pop("base_url", None)
    pad = _pad_fill(model, options.get("pad_square"), preset)
    return VLLMSettings(model, find_python(options.get("python")), float(startup), preset, template, template_id, parser, flags, server_args, checked, pad)
