"""What identifies an HF model's answers (the cache keys of ``hf:`` results)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from capjudge.backends.presets import Resolved
from capjudge.backends.thinking import Thinking


def model_identity(
    model: str,
    dtype_name: str,
    pad_square: bool,
    chat_format: str,
    attn: str | None,
    revision: Any,
    *,
    load_4bit: bool = False,
    settings: Resolved | None = None,
    thinking: Thinking | None = None,
) -> dict[str, Any]:
    """What identifies an HF model's answers: settings (the judge preset and system policy
    included), and a hash of a local folder's files or the hub revision (``revision()``, called
    only for hub ids)."""
    ident: dict[str, Any] = {
        "kind": "hf",
        "model": model,
        "dtype": dtype_name,
        "pad_square": pad_square,
        "chat_format": chat_format,
        "attn": attn,
    }
    if settings is not None:
        ident["preset"] = settings.preset
        ident["system_policy"] = settings.system_policy
    if load_4bit:
        ident["quantization"] = "bnb-nf4-double-fp16"
    if thinking is not None:
        ident.update(thinking.identity())  # non-default settings only: other identities unchanged
    path = Path(model)
    if path.is_dir():
        h = hashlib.sha256()
        for f in sorted(path.iterdir()):
            if f.is_file():
                st = f.stat()
                h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
        ident["files"] = h.hexdigest()[:16]
    else:
        ident["revision"] = revision()
    return ident
