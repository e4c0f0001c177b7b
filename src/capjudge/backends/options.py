"""Converting backend options, which arrive as text from spec strings (``?key=value``) and
``--backend-opt``, to the types the backends take, with errors that name the option."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from capjudge.core.errors import BackendError


class OptionError(BackendError, ValueError):
    """A backend option has a value of the wrong kind (a usage error: the CLI exits 2)."""


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def as_bool(value: Any, name: str = "option") -> bool:
    """``True``/``False`` from a bool or text such as ``"true"``, ``"0"``, ``"off"``; other text
    is an error (``"flase"`` must not silently mean ``False``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise OptionError(f"option {name}={value!r} is not a yes/no value (true/false, 1/0, yes/no, on/off)")


def check_known(kind: str, options: Iterable[str], known: Iterable[str]) -> None:
    """Raise :class:`OptionError` naming every option of ``options`` not in ``known``."""
    allowed = set(known)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise OptionError(f"unknown {kind} option(s): {', '.join(unknown)} (known: {', '.join(sorted(allowed))})")


def as_int(value: Any, name: str = "option") -> int | None:
    """An integer from a number or text; ``None`` for an empty value."""
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise OptionError(f"option {name}={value!r} is not an integer") from None


def as_float(value: Any, name: str = "option") -> float | None:
    """A number from a number or text; ``None`` for an empty value."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OptionError(f"option {name}={value!r} is not a number") from None


def as_json_object(value: Mapping[str, Any] | str | None, name: str) -> dict[str, Any]:
    """A dict from a mapping or a JSON object's text; ``{}`` for nothing (``ValueError`` otherwise)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} must be a JSON object, got {value!r}") from exc
    if not isinstance(value, Mapping):
        raise ValueError(f"{name} must be a mapping, got {type(value).__name__}")
    return dict(value)
