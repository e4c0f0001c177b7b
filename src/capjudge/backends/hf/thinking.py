"""Thinking options of ``hf:`` models (:mod:`capjudge.backends.thinking`): the chat template's
text read from a model folder or the local HF cache before anything loads (so that
``thinking=on|off`` on a model without the ``enable_thinking`` switch fails first), and the plan
from the template and the judge preset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capjudge.backends.presets import GENERIC, get_preset
from capjudge.backends.thinking import Plan, Thinking, plan
from capjudge.core.redact import get_logger

log = get_logger(__name__)

_FILES = ("chat_template.jinja", "chat_template.json", "processor_config.json", "tokenizer_config.json")


def _template_of(text: str, name: str) -> str | None:
    if name.endswith(".jinja"):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        return None
    found = data.get("chat_template") if isinstance(data, dict) else None
    if isinstance(found, list):  # [{"name": "default", "template": "..."}, ...]
        found = next((t.get("template") for t in found if isinstance(t, dict) and t.get("name") == "default"), None)
    return found if isinstance(found, str) else None


def template_text(model: str, local_files_only: bool) -> str | None:
    """The chat template of ``model`` (a folder, or a hub id in the local cache / downloadable),
    read from its files without loading it; ``None`` when none is found."""
    folder = Path(model).expanduser()
    for name in _FILES:
        try:
            if folder.is_dir():
                file = folder / name
                if not file.is_file():
                    continue
            else:
                from huggingface_hub import hf_hub_download

                file = Path(hf_hub_download(model, name, local_files_only=local_files_only))
            found = _template_of(file.read_text(encoding="utf-8"), name)
        except Exception:  # noqa: BLE001 - a file that is not there or not readable: the next one
            continue
        if found:
            return found
    return None


def loaded_template(processor: Any) -> str | None:
    """The chat template a loaded processor renders with (its own, else its tokenizer's)."""
    for owner in (processor, getattr(processor, "tokenizer", None)):
        found = getattr(owner, "chat_template", None)
        if isinstance(found, str) and found:
            return found
    return None


def hf_plan(model: str, settings: Thinking, template: str | None, chat_format: str, preset: str, context: tuple[int, str] | None = None) -> Plan:
    """The thinking plan of an ``hf:`` model: its template counts only with ``chat_format=template``.
    ``context``: the loaded model's context in tokens and where it was read; the default budget
    is fitted to it, and a lowered default is said once (a warning)."""
    try:
        chosen = GENERIC if preset == GENERIC.name else get_preset(preset)
    except Exception:  # noqa: BLE001 - an unknown name was refused earlier
        chosen = GENERIC
    source = template if chat_format == "template" else None
    made = plan(settings, source, model, preset_thinks=chosen.thinks, preset_markers=chosen.reasoning_markers, context=context[0] if context else None)
    if made.fitted_from is not None and context is not None:
        log.warning(
            "%s: the model's context is %d tokens (%s), so the default thinking budget is %d tokens (half of it), not %d; "
            "--thinking-budget N (backend option thinking_budget=N) sets it",
            model, context[0], context[1], made.extra_tokens, made.fitted_from,
        )
    return made


__all__ = ["hf_plan", "loaded_template", "template_text"]
