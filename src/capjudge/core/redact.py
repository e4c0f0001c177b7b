"""Keeping secrets and run-varying noise out of everything capjudge writes.

Servers sometimes echo the credentials they received (``Authorization: Bearer sk-...`` in the body of
an HTTP 500), and Python error texts sometimes hold memory addresses (``<_io.BytesIO object at
0x7f...>``). Everything capjudge writes passes through here: log records (:class:`ScrubFilter`, on
capjudge's loggers and on the command line's log handler), result records (``to_dict``), cache
entries, error messages and summaries.

Secrets are masked in three ways: every value registered with :func:`register_secret` (the OpenAI
backend registers the key it was given), the values of the standard key variables
(``OPENAI_API_KEY``, ``AZURE_OPENAI_API_KEY``), and by shape (``Bearer <token>``, ``sk-...`` keys,
``api-key: <value>`` headers, credential query parameters and ``user:password@`` in URLs), so a key
capjudge was never told about is masked too. Credentials in a backend spec are registered when the
spec is parsed (:mod:`capjudge.backends.credentials`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import Any, TypeVar

T = TypeVar("T")

MASK = "***"
KEY_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")
MIN_SECRET_LENGTH = 8  # shorter values ("EMPTY", "none") are placeholders, not secrets

_secrets: set[str] = set()
_lock = threading.Lock()

# Shapes of credentials. The token character classes exclude quotes and backslashes, so masking
# inside JSON text keeps it valid JSON. Each shape comes with a text it cannot match without
# (in ASCII text, lower-cased for the case-insensitive ones): a case-insensitive search scans
# every position (~0.1 ms per KB), a substring test is ~100 times faster, and most texts
# (answers, records, cache entries) hold none of them.
_SHAPES: tuple[tuple[re.Pattern[str], str, str, bool], ...] = (
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + MASK, "bearer", True),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), "sk-" + MASK, "sk-", False),
    (re.compile(r"""(?i)\b((?:x-)?api[-_]key["']?\s*[:=]\s*["']?)[A-Za-z0-9._~+/=-]{8,}"""), r"\1" + MASK, "api", True),
    # In URLs, whatever their length: credential query parameters (?token=, &api_key=, the names
    # of capjudge.backends.credentials.is_secret_name) and user info (scheme://user:password@).
    (
        re.compile(
            r"""(?i)([?&](?:[a-z0-9]+[_-])*(?:token|key|apikey|secret|password|passwd|pwd|auth|sig|signature|credentials?|accesstoken|authtoken)=)"""
            r"""(?!\*\*\*)[^&\s"'#\\]+"""
        ),
        r"\1" + MASK,
        "=",
        False,
    ),
    (re.compile(r"""(://)[^/\s@:"'\\]+:[^/\s@"'\\]+@"""), r"\1" + MASK + "@", "@", False),
)
# " at 0x7f3a2c1b0d90" in object reprs: different in every run.
_ADDRESS = re.compile(r"\s+at\s+0x[0-9a-fA-F]{4,}")


def register_secret(value: str | None) -> None:
    """Mask ``value`` wherever it appears in logs, records, cache entries and messages."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def _known_secrets() -> list[str]:
    with _lock:
        known = set(_secrets)
    for name in KEY_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= MIN_SECRET_LENGTH:
            known.add(value)
    # Longest first: a secret that contains another is masked whole.
    return sorted(known, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` with every known secret and every credential-shaped token masked."""
    if not text:
        return text
    for secret in _known_secrets():
        if secret in text:
            text = text.replace(secret, MASK)
    # Outside ASCII, case-insensitive matching knows more equivalences than str.lower (the Kelvin
    # sign matches "k"): every shape is searched. A mask never makes a trigger appear.
    ascii_text = text.isascii()
    lower = text.lower() if ascii_text else text
    for pattern, replacement, trigger, folded in _SHAPES:
        if not ascii_text or trigger in (lower if folded else text):
            text = pattern.sub(replacement, text)
    return text


def stable(text: str) -> str:
    """``text`` scrubbed and without memory addresses, so that two runs' error texts are equal."""
    return _ADDRESS.sub("", scrub(text))


def scrub_data(data: T) -> T:
    """A JSON-like value (dicts, lists, strings, numbers) with :func:`scrub` applied to every string.

    Returns ``data`` itself when nothing needed masking.
    """
    try:
        text = json.dumps(data, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return data
    clean = scrub(text)
    if clean == text:
        return data
    result: T = json.loads(clean)
    return result


def scrub_record(record: dict[str, Any]) -> dict[str, Any]:
    """A result record made safe and stable to write: secrets masked everywhere, memory addresses
    removed from its error texts (``error`` and ``details.*error*``). ``record`` is not modified."""
    record = dict(scrub_data(record))
    if isinstance(record.get("error"), str):
        record["error"] = stable(record["error"])
    details = record.get("details")
    if isinstance(details, dict):
        record["details"] = {k: stable(v) if "error" in k and isinstance(v, str) else v for k, v in details.items()}
    return record


class ScrubFilter(logging.Filter):
    """A logging filter that masks secrets in the message, its arguments and any traceback.

    It rewrites the record in place (``msg`` becomes the final text, ``args`` empty), so that every
    handler after it sees the scrubbed text. Attach it to a handler to cover every logger that
    handler serves (the command line does), or to a logger for that logger's own records.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Scrub ``record``; never drops it."""
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is logging's problem, not ours
            return True
        record.msg = scrub(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


_FILTER = ScrubFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with :class:`ScrubFilter` attached (capjudge's own loggers)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, ScrubFilter) for f in logger.filters):
        logger.addFilter(_FILTER)
    return logger


def install_scrubber(handler: logging.Handler) -> None:
    """Attach :class:`ScrubFilter` to ``handler`` (once): every record it emits is scrubbed,
    whichever library logged it (the OpenAI SDK and httpx log requests and responses at debug)."""
    if not any(isinstance(f, ScrubFilter) for f in handler.filters):
        handler.addFilter(_FILTER)
