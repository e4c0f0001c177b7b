"""Input coercion and clean-up shared by the score, verdict and list parsers.

Everything here is linear in the length of the text: bounded regular expressions, no nested
quantifiers.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

# Chat-template and end-of-sequence tokens that models leak into their answers: ``</s>``, ``<s>``,
# ``<|im_end|>``, ``<|eot_id|>``, ``<eos>``, ``<end_of_turn>``, ``[/INST]``...
_SPECIAL_TOKEN_RE = re.compile(
    r"<\|[^|<>\n]{0,40}\|>|</?s>|<(?:eos|bos|pad|unk|end_of_turn|start_of_turn|end_of_text)>|\[/?INST\]",
    re.IGNORECASE,
)
# Dashes and minus signs that should read as ASCII hyphen-minus.
_DASHES = str.maketrans({"\u2212": "-", "\u2012": "-", "\u2010": "-", "\u2011": "-", "\uff0d": "-"})


def coerce_text(value: Any) -> str | None:
    """Turn whatever a caller passed into text, or ``None`` when it cannot hold an answer.

    ``str`` is used as is; ``bytes``-like values are decoded as UTF-8 (bad bytes replaced); finite
    ``int``/``float`` values become their decimal text (``85`` -> ``"85"``); objects with a string
    ``text`` attribute (a backend ``Completion``) give that. ``bool``, ``None``, NaN and anything
    else give ``None``.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8", errors="replace")
        except Exception:  # pragma: no cover - decode with errors="replace" does not raise
            return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value) if abs(value) < 10**30 else None
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    text = getattr(value, "text", None)
    return text if isinstance(text, str) else None


# Longer answers (a model stuck in a repetition loop) are read from their first and last
# MAX_CHARS // 2 characters: explanations lead, verdicts and final scores trail, and the parsers
# stay fast on megabytes of junk.
MAX_CHARS = 100_000


def clean(text: str) -> str:
    """Normalise a model answer for parsing.

    Unicode compatibility forms (full-width digits, NBSP) are folded with NFKC, dash variants
    become ``-``, special tokens are dropped, and Markdown emphasis (``*``, ``__``) and heading
    marks are removed so that ``**Score:** 85`` reads ``Score: 85``. Answers longer than
    :data:`MAX_CHARS` keep their head and tail only.
    """
    if len(text) > MAX_CHARS:
        half = MAX_CHARS // 2
        text = text[:half] + "\n\n" + text[-half:]
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).translate(_DASHES)
    text = _SPECIAL_TOKEN_RE.sub(" ", text)
    return text.replace("*", "").replace("__", "")


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters: cut at the last word boundary in its
    second half (else mid-word: a path or URL has none) and ended with "…" when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    if text[limit - 1] != " " and " " in cut[limit // 2 :]:  # the cut falls inside a word
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ,;:") + "…"
