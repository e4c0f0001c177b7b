"""The settings an HF model runs with: its judge preset and prompting settings (chosen from its
config, explicit options winning), the checks of those options, and the torch device and dtype."""

from __future__ import annotations

from typing import Any

from capjudge.backends.base import BackendError
from capjudge.backends.options import OptionError, as_bool
from capjudge.backends.presets import (
    CHAT_FORMATS,
    SYSTEM_POLICIES,
    OriginalCheckpointError,
    Resolved,
    UnknownPresetError,
    check_loadable,
    read_config,
    resolve,
)
from capjudge.core.redact import get_logger

log = get_logger(__name__)


def device_and_dtype(torch: Any, device: str, dtype: str, gpu_dtype: str = "float16") -> tuple[Any, str]:
    """The torch device and dtype name that ``"auto"`` settings resolve to, checked (``gpu_dtype``:
    the preset's dtype on CUDA)."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise OptionError(f"option device={device!r} is not a device (auto, cpu, cuda, cuda:1, mps, ...)") from None
    if dtype == "auto":
        dtype = gpu_dtype if dev.type == "cuda" else "float32"
    if not hasattr(torch, str(dtype)):
        raise BackendError(f"unknown dtype {dtype!r} (use float16, bfloat16 or float32)")
    return dev, str(dtype)


def usable_device(torch: Any, device: str, dtype: str, gpu_dtype: str = "float16") -> tuple[Any, str]:
    """:func:`device_and_dtype`, and a CUDA device that torch can reach here (an option error
    before anything loads, not a failure inside the model's ``to()``)."""
    dev, dtype_name = device_and_dtype(torch, device, dtype, gpu_dtype)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise OptionError(f"option device={device!r}: torch sees no CUDA GPU here (torch.cuda.is_available() is false); use device=cpu or auto")
    return dev, dtype_name


def check_chat_format(chat_format: str) -> str:
    """``chat_format`` checked to be one of :data:`~capjudge.backends.presets.CHAT_FORMATS`."""
    if chat_format not in CHAT_FORMATS:
        raise BackendError(f"unknown chat_format {chat_format!r} (use one of {', '.join(CHAT_FORMATS)})")
    return chat_format


def resolve_settings(
    model: str,
    local_files_only: bool,
    preset: str | None = "auto",
    chat_format: str | None = None,
    system_policy: str | None = None,
    pad_square: bool | None = None,
) -> Resolved:
    """The judge preset and prompting settings of ``model``: its config is read first (a folder's
    ``config.json``, or the hub file), an authors'-format checkpoint is refused with the name of
    its transformers conversion, and explicit options win over the preset."""
    config = read_config(model, local_files_only=local_files_only)
    if config is not None:
        try:
            check_loadable(config, model)
        except OriginalCheckpointError as exc:
            raise BackendError(str(exc)) from None
    try:
        settings = resolve(
            model,
            preset=preset,
            chat_format=check_chat_format(chat_format) if chat_format is not None else None,
            system_policy=check_system_policy(system_policy) if system_policy is not None else None,
            pad_square=as_bool(pad_square, "pad_square") if pad_square is not None else None,
            config=config,
        )
    except UnknownPresetError as exc:
        raise OptionError(str(exc)) from None
    if settings.source == "default":
        log.info("%s: no judge preset for model_type %r: the processor's chat template, no padding", model, (config or {}).get("model_type"))
    return settings


def check_system_policy(policy: str) -> str:
    """``policy`` checked to be one of :data:`~capjudge.backends.presets.SYSTEM_POLICIES` (an option error)."""
    if policy not in SYSTEM_POLICIES:
        raise OptionError(f"option system_policy={policy!r} is not one of {', '.join(SYSTEM_POLICIES)}")
    return policy
