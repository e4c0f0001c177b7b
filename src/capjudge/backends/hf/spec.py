"""``hf:`` backend specs: options checked without loading anything, and the backend built from a
spec, at once (:func:`from_spec`) or when a request first misses the cache (:func:`lazy_from_spec`)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from capjudge.backends.base import Backend, BackendError
from capjudge.backends.hf.backend import HFBackend
from capjudge.backends.hf.graphs import mode as graphs_mode
from capjudge.backends.hf.identity import model_identity
from capjudge.backends.hf.loading import check_4bit_packages, load_failure, local_only
from capjudge.backends.hf.settings import check_system_policy, resolve_settings, usable_device
from capjudge.backends.hf.thinking import hf_plan, template_text
from capjudge.backends.options import OptionError, as_bool, as_int, check_known
from capjudge.backends.presets import CHAT_FORMATS, UnknownPresetError, get_preset
from capjudge.backends.registry import BackendSpec
from capjudge.backends.thinking import OPTIONS as THINKING_OPTIONS
from capjudge.backends.thinking import parse as parse_thinking

_DTYPES = ("auto", "float16", "half", "bfloat16", "float32", "float", "float64", "double")
_DEVICE = re.compile(r"^(auto|(cpu|cuda|mps|xpu|npu|hpu|mtia|xla|meta)(:\d+)?)$")
_ATTN = re.compile(r"^(paged\|)?(eager|sdpa|flash_attention_[23]|flex_attention|[\w.-]+/[\w.:-]+)$")
_LOCAL = ("/", "./", "../", "~", ".\\")


def check_options(spec: BackendSpec, **options: Any) -> dict[str, Any]:
    """The options of ``hf:`` converted and checked without loading anything (no torch import):
    names, yes/no values, numbers, dtype, device, and a local model folder that must exist."""
    check_known(
        "hf",
        options,
        [p for p in inspect.signature(HFBackend.__init__).parameters if p not in ("self", "model")],
    )
    if "batch_size" in options:
        options["batch_size"] = as_int(options["batch_size"], "batch_size")
        if options["batch_size"] is not None and options["batch_size"] < 1:
            raise OptionError(
                f"option batch_size={options['batch_size']!r}: at least 1 request per batch"
            )
    preset = options.get("preset")
    if preset is not None and str(preset).strip().lower() not in ("", "auto"):
        try:
            options["preset"] = get_preset(str(preset)).name
        except UnknownPresetError as exc:
            raise OptionError(str(exc)) from None
    if options.get("chat_format") is not None and options["chat_format"] not in CHAT_FORMATS:
        raise OptionError(
            f"option chat_format={options['chat_format']!r} is not one of {', '.join(CHAT_FORMATS)}"
        )
    if options.get("system_policy") is not None:
        check_system_policy(options["system_policy"])
    # Options from a spec or --backend-opt arrive as text: "false" must not be truthy.
    for name in (
        "trust_remote_code",
        "local_files_only",
        "pad_square",
        "prefix_reuse",
        "refill",
        "load_4bit",
    ):
        if name in options and options[name] is not None:
            options[name] = as_bool(options[name], name)
    if any(k in options for k in THINKING_OPTIONS):
        settings = parse_thinking(options)
        options.update(
            thinking=settings.mode,
            thinking_budget=settings.budget,
            reasoning_markers=settings.markers,
        )
    if options.get("decode_graphs") is not None:
        options["decode_graphs"] = graphs_mode(options["decode_graphs"])
    dtype = options.get("dtype")
    if dtype is not None and str(dtype) not in _DTYPES:
        raise OptionError(f"option dtype={dtype!r} is not one of {', '.join(_DTYPES)}")
    attn = options.get("attn_implementation")
    if attn not in (None, "") and not _ATTN.match(str(attn)):
        raise OptionError(
            f"option attn_implementation={attn!r} is not eager, sdpa, flash_attention_2, flash_attention_3, flex_attention (or paged|..., or a kernels-hub repo org/name)"
        )
    device = options.get("device")
    if device is not None and not _DEVICE.match(str(device)):
        raise OptionError(
            f"option device={device!r} is not a device (auto, cpu, cuda, cuda:1, mps, ...)"
        )
    if spec.target.startswith(_LOCAL) and not Path(spec.target).expanduser().is_dir():
        raise FileNotFoundError(f"model folder {spec.target!r} not found")
    return options


def from_spec(spec: BackendSpec, **options: Any) -> HFBackend:
    """``hf:<model id or folder>[?device=cuda&dtype=float16&batch_size=8]``."""
    return HFBackend(spec.target, **check_options(spec, **options))


def lazy_from_spec(spec: BackendSpec, **options: Any) -> Backend:
    """The backend of :func:`from_spec`, loaded only when a request misses the cache: its options
    are checked and its identity (cache keys) computed now, without the weights (a hub model's
    revision is read from its config file)."""
    from capjudge.backends.lazy import LazyBackend

    opts = check_options(spec, **options)
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendError(
            "the hf backend needs torch and transformers: pip install 'capjudge[hf]'"
        ) from exc
    model = spec.target
    load_4bit = bool(opts.get("load_4bit", False))
    if load_4bit:
        check_4bit_packages()
    local = local_only(model, opts.get("local_files_only"))
    settings = resolve_settings(
        model,
        local,
        opts.get("preset", "auto"),
        opts.get("chat_format"),
        opts.get("system_policy"),
        opts.get("pad_square"),
    )
    _, dtype_name = usable_device(
        torch, opts.get("device", "auto"), opts.get("dtype", "auto"), settings.dtype
    )

    def revision() -> str | None:
        import transformers

        try:
            config = transformers.AutoConfig.from_pretrained(
                model,
                local_files_only=local,
                trust_remote_code=bool(opts.get("trust_remote_code", False)),
            )
        except OSError as exc:
            raise load_failure(model, exc) from exc
        return getattr(config, "_commit_hash", None)

    thinking = parse_thinking(opts)
    if not thinking.default:
        hf_plan(model, thinking, template_text(model, local), settings.chat_format, settings.preset)
    ident = model_identity(
        model,
        dtype_name,
        settings.pad_square,
        settings.chat_format,
        opts.get("attn_implementation"),
        revision,
        load_4bit=load_4bit,
        settings=settings,
        thinking=thinking,
    )
    return LazyBackend(
        lambda: HFBackend(model, **opts),
        kind=HFBackend.kind,
        spec=f"hf:{model}",
        model=model,
        identity=ident,
    )
