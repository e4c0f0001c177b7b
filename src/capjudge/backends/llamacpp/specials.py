"""Message text never becomes a llama.cpp control token.

llama.cpp tokenizes the rendered prompt with ``parse_special`` (the chat template's ``<s>``,
``<|im_start|>`` ... must be parsed), which would also parse a caption that spells ``</s>`` or
``<|im_end|>``. Before the prompt is rendered, every control-token text inside a message's text
is broken up with a space after its first character (``</s>`` becomes ``< /s>``), the convention
this backend already applies to libmtmd's media marker; a text without one is unchanged, so every
ordinary prompt tokenizes exactly as before. (The HF backend tokenizes such text exactly as typed;
libmtmd tokenizes whole text chunks, so here the text is defused instead.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_MAX_PASSES = 8  # breaking one string up cannot create another more than a few times over


def control_texts(llama_cpp: Any, vocab: Any, n_vocab: int) -> list[str]:
    """The texts of the vocabulary's control and unknown tokens (those ``parse_special`` parses)."""
    parsed = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    out = set()
    for tid in range(n_vocab):
        if int(llama_cpp.llama_vocab_get_attr(vocab, tid)) & parsed:
            raw = llama_cpp.llama_vocab_get_text(vocab, tid)
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
            if len(text) > 1:
                out.add(text)
    return sorted(out, key=len, reverse=True)


class Defuser:
    """Breaks up the given special strings inside message text (see the module docstring)."""

    def __init__(self, strings: Iterable[str]) -> None:
        self.strings = [s for s in strings if len(s) > 1]
        self._pattern = re.compile("|".join(re.escape(s) for s in self.strings)) if self.strings else None

    def __call__(self, text: str) -> str:
        """``text`` with no special string left in it; unchanged when it holds none."""
        if self._pattern is None:
            return text
        for _ in range(_MAX_PASSES):
            if not self._pattern.search(text):
                return text
            text = self._pattern.sub(lambda m: m.group()[:1] + " " + m.group()[1:], text)
        return text
