"""What loading an HF model needs before and around ``from_pretrained``: whether to read local files
only (the hub probe, the offline hint), the messages of a failed load or a missing optional
package (with the install command), and 4-bit loading's settings and packages."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import capjudge.backends.hf.hub as hub
from capjudge.backends.base import BackendError
from capjudge.backends.hf.quiet import quiet_libraries


def local_only(model: str, local_files_only: bool | None) -> bool:
    """Read local files only: as asked, else when ``HF_HUB_OFFLINE`` is set, the model is a folder,
    or the hub cannot be reached (probed once per process: see :mod:`capjudge.backends.hf.hub`).
    Raises a :class:`BackendError` with what to do when the hub cannot be reached and the model is
    not in the local cache, instead of letting the hub client retry for a minute."""
    quiet_libraries()
    if local_files_only is not None:
        return bool(local_files_only)
    if os.environ.get("HF_HUB_OFFLINE", "0").strip().lower() in ("1", "true", "yes", "on") or Path(model).is_dir():
        return True
    status = hub.hub_status()
    if status.reachable:
        return False
    if hub.is_cached(model):
        hub.note_cache_only(model, status)
        return True
    raise BackendError(hub.offline_hint(model, status))


def load_failure(model: str, exc: OSError) -> BackendError:
    """The error of a model that could not be read (``exc``), with what to do."""
    cause = str(exc).strip().rstrip(".")  # the library's sentence ends with its own period
    return BackendError(
        f"could not load HF model {model!r}: {cause}. Give a local folder (hf:/path/to/model), or download the model "
        f"first ({hub.download_command(model)}); capjudge never downloads weights itself when offline"
    )


def llava_4bit_settings(torch: Any) -> dict[str, Any]:
    """The ``BitsAndBytesConfig`` of LLaVA's ``load_pretrained_model(load_4bit=True)``
    (``llava/model/builder.py``), which the VisCE2 code's ``llava_v15.py`` calls."""
    return {
        "load_in_4bit": True,
        "bnb_4bit_compute_dtype": torch.float16,
        "bnb_4bit_use_double_quant": True,
        "bnb_4bit_quant_type": "nf4",
    }


# Packages that transformers asks for by name in its ImportError texts, and what to install
# (torchvision: see torchvision_requirement).
_INSTALL = {
    "torchvision": "torchvision",
    "accelerate": "accelerate",
    "bitsandbytes": "bitsandbytes",
    "timm": "timm",
    "einops": "einops",
    "sentencepiece": "sentencepiece",
    "protobuf": "protobuf",
}


def missing_package_message(model: str, exc: ImportError) -> str:
    """A load failure for a missing optional package, with the install command.

    transformers raises e.g. ``Qwen2VLVideoProcessor requires the Torchvision library`` from the
    processors of Qwen2/2.5/3-VL, LLaVA-OneVision, InternVL and Mistral 3 when torchvision is absent.
    """
    text = str(exc)
    lowered = text.lower()
    names = [name for name in _INSTALL if name in lowered]
    name = getattr(exc, "name", None)
    if not names and name and name.split(".")[0] in _INSTALL:
        names = [name.split(".")[0]]
    if not names:
        return f"could not load HF model {model!r}: a package it needs is missing: {text}"
    specs = [torchvision_requirement() if n == "torchvision" else _INSTALL[n] for n in names]
    note = " (torchvision's release must match your torch; on a CUDA machine use the index URL from pytorch.org)" if "torchvision" in names else ""
    return f"could not load HF model {model!r}: it needs {', '.join(names)} ({text}): pip install " + " ".join(f"'{s}'" if "=" in s else s for s in specs) + note


def torchvision_requirement() -> str:
    """The pip requirement of the torchvision release that goes with the installed torch
    (torch 2.x pairs with torchvision 0.(x+15), e.g. 2.13 with 0.28); a bare ``torchvision``
    would let pip replace torch with the one the newest torchvision wants."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "torchvision"
    m = re.match(r"2\.(\d+)", version)
    return f"torchvision==0.{int(m.group(1)) + 15}.*" if m else "torchvision"


def check_4bit_packages() -> None:
    """Raise a :class:`BackendError` with the install command when 4-bit loading cannot work."""
    import importlib.util

    missing = [name for name in ("bitsandbytes", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise BackendError(
            f"load_4bit=true needs {' and '.join(missing)}: pip install {' '.join(missing)} "
            "(bitsandbytes' 4-bit kernels need a CUDA GPU on most builds); or drop load_4bit to load in float16"
        )
