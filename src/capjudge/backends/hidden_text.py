"""Message text held apart from a local model's special-token strings while its prompt renders.

The HF and llama.cpp backends tokenize the rendered prompt themselves, parsing special-token
strings anywhere in it. Before the chat template renders, :meth:`HiddenStrings.hide` replaces each
special-token string found in a message's text (the user's caption, references, context) by one
private-use character (``U+F0000 + k``); the backend's tokenization then puts them back as text
(``backends/hf/specials.py``, ``backends/llamacpp/specials.py``). A text holding no such string is
returned unchanged, so every ordinary prompt stays byte for byte what it was. Characters of the
private-use planes 15 and 16 found in a message's text become U+FFFD, so they cannot pose as hidden
strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

HIDDEN_BASE = 0xF0000
"""The first private-use character standing for a hidden string."""

PRIVATE_PLANES = re.compile("[\U000f0000-\U0010ffff]")
"""Characters of the private-use planes 15 and 16 (taken out of message text)."""


class HiddenStrings:
    """Special-token strings and their one-character stand-ins in message text."""

    def __init__(self, strings: Iterable[str]) -> None:
        self.strings = sorted(strings, key=len, reverse=True)  # the longest first: `</s>` before `<s>`
        self.special_pattern = re.compile("|".join(re.escape(s) for s in self.strings)) if self.strings else None
        self.hidden = {s: chr(HIDDEN_BASE + k) for k, s in enumerate(self.strings)}
        self.shown = {c: s for s, c in self.hidden.items()}
        self.hidden_pattern = re.compile("|".join(map(re.escape, self.shown))) if self.shown else None

    def hide(self, text: str) -> str:
        """``text`` (a message's text) with every special-token string held as one private-use
        character; unchanged when it holds none."""
        if PRIVATE_PLANES.search(text):
            text = PRIVATE_PLANES.sub("\ufffd", text)
        if self.special_pattern is None or not self.special_pattern.search(text):
            return text
        return self.special_pattern.sub(lambda m: self.hidden[m.group()], text)

    def holds_hidden(self, text: str) -> bool:
        """Whether a rendered prompt holds message text that :meth:`hide` changed."""
        return self.hidden_pattern is not None and self.hidden_pattern.search(text) is not None

    def show(self, text: str) -> str:
        """The hidden strings put back (the prompt as the model reads it)."""
        if self.hidden_pattern is None:
            return text
        return self.hidden_pattern.sub(lambda m: self.shown[m.group()], text)
