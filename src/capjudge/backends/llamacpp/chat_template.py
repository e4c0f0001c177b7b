"""A GGUF's own chat template (``tokenizer.chat_template``, Jinja) rendered for libmtmd.

Rendered as llama.cpp's server renders it: each image becomes a text part holding libmtmd's media
marker (libmtmd later replaces the marker with the model's image tokens), images first in their
message as the HF backend puts them; a template that does not understand typed content parts
(``[{"type": "text", ...}]``) receives the message as one string instead; a leading BOS the template
writes is removed when the tokenizer adds one itself (no double BOS, as llama.cpp's
``common_chat_templates_apply`` does). The Jinja environment is llama-cpp-python's
(sandboxed, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, ``{% generation %}`` ignored,
``tojson``, ``strftime_now``, ``raise_exception``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from capjudge.backends.base import BackendError, Message

__all__ = ["render_chat_template"]

_NEEDLE = "\u2063capjudge-probe\u2063"


@functools.lru_cache(maxsize=8)
def _compile(source: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[Jinja2ChatFormatter.IgnoreGenerationTags, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = Jinja2ChatFormatter.tojson
    try:
        return env.from_string(source)
    except jinja2.TemplateError as exc:
        raise BackendError(f"the model's chat template does not compile: {exc}") from exc


def _raise(message: str) -> None:
    raise BackendError(f"the model's chat template refused the conversation: {message}")


def _render(source: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool, bos: str, eos: str, variables: dict[str, Any] | None = None) -> str:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    return str(_compile(source).render(
        messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos, eos_token=eos,
        raise_exception=_raise, strftime_now=Jinja2ChatFormatter.strftime_now, **(variables or {}),
    ))


@functools.lru_cache(maxsize=8)
def _typed_content(source: str, bos: str, eos: str) -> bool:
    """Whether the template renders typed content parts (else messages go in as strings)."""
    probe = [{"role": "user", "content": [{"type": "text", "text": _NEEDLE}]}]
    try:
        out = _render(source, probe, add_generation_prompt=False, bos=bos, eos=eos)
    except Exception:  # noqa: BLE001 - a template that fails on parts takes strings
        return False
    return _NEEDLE in out and "'type'" not in out and '"type"' not in out


def render_chat_template(source: str, messages: Sequence[Message], marker: str, *, bos: str, eos: str, strip_bos: bool, variables: dict[str, Any] | None = None) -> str:
    """The prompt text of ``messages`` under the Jinja chat template ``source``.

    Each image is ``marker`` (libmtmd's media marker), placed before the message's text; a literal
    marker inside a text is defused so that it cannot stand for an image. A final assistant message
    is continued, not closed. ``strip_bos``: the tokenizer adds BOS itself, so a leading ``bos``
    written by the template is dropped. ``variables``: more template variables
    (``enable_thinking``).
    """
    safe = marker.replace("<", "< ")
    typed = _typed_content(source, bos, eos)
    conv: list[dict[str, Any]] = []
    for m in messages:
        text = m.content.replace(marker, safe)
        if typed:
            parts = [{"type": "text", "text": marker} for _ in m.images]
            conv.append({"role": m.role, "content": [*parts, {"type": "text", "text": text}]})
        else:
            conv.append({"role": m.role, "content": marker * len(m.images) + text})
    prefill = bool(messages) and messages[-1].role == "assistant"
    try:
        out = _render(source, conv, add_generation_prompt=not prefill, bos=bos, eos=eos, variables=variables)
    except BackendError:
        raise
    except Exception as exc:  # noqa: BLE001 - a template error is this request's failure
        raise BackendError(f"the model's chat template failed on this conversation: {type(exc).__name__}: {exc}") from exc
    if prefill:  # continue the final assistant message: cut what the template writes after it
        last = messages[-1].content.replace(marker, safe)
        at = out.rfind(last) if last else -1
        if at < 0:
            raise BackendError("cannot continue the final assistant message: the chat template does not echo it")
        out = out[: at + len(last)]
    if strip_bos and bos and out.startswith(bos):
        out = out[len(bos):]
    return out
