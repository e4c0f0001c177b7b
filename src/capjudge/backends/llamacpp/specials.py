"""Message text never becomes a llama.cpp control token.

llama.cpp tokenizes the rendered prompt with ``parse_special`` (the chat template's ``<s>``,
``<|im_start|>`` ... must be parsed), which would also parse a caption that spells ``</s>`` or
``<|im_end|>``. So:

1. :meth:`ControlText.hide` (applied to each message's text before the prompt is rendered)
   replaces every control-token text in it by one private-use character per token (``U+F0000 +
   k``); a text without one is unchanged, and so is every ordinary prompt and its tokens.
2. A prompt holding hidden text is tokenized exactly as llama.cpp tokenizes a prompt, except that
   the hidden strings are text (:meth:`ControlText.tokenize`): the prompt is cut at the control-token
   texts still in it (the template's), which become their ids (with llama.cpp's whitespace
   stripping around tokens marked ``lstrip`` / ``rstrip``), and each piece between them, the hidden
   strings put back, is tokenized with ``parse_special=False``, as llama.cpp tokenizes each piece
   of text between special tokens. The backend splices these ids into libmtmd's text chunks
   (:meth:`ControlText.splice`), in place of the ids libmtmd made of the same piece.
3. Should a piece not be found in libmtmd's chunks, the control-token texts of the data are broken
   up with a space after their first character instead (:meth:`ControlText.defused`; ``</s>`` is
   read as ``< /s>``), as libmtmd's media marker always is.

Characters of the private-use planes 15 and 16 in a message's text become U+FFFD so that they
cannot pose as hidden strings.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from capjudge.backends.hidden_text import HiddenStrings

Tokenize = Callable[[bytes, bool, bool], list[int]]
"""``(text, add_special, parse_special) -> ids``: llama.cpp's tokenizer."""


class ControlText(HiddenStrings):
    """The control-token texts of a llama.cpp vocabulary and the tokenization that keeps message
    text out of them."""

    def __init__(self, llama_cpp: Any, vocab: Any, n_vocab: int, tokenize: Tokenize) -> None:
        parsed = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
        self.ids: dict[str, int] = {}
        self._lstrip: set[str] = set()
        self._rstrip: set[str] = set()
        for tid in range(n_vocab):
            attr = int(llama_cpp.llama_vocab_get_attr(vocab, tid))
            if not attr & parsed:
                continue
            raw = llama_cpp.llama_vocab_get_text(vocab, tid)
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
            if len(text) > 1 and text not in self.ids:
                self.ids[text] = tid
                if attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP:
                    self._lstrip.add(text)
                if attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP:
                    self._rstrip.add(text)
        super().__init__(self.ids)
        self._tokenize = tokenize

    # ----------------------------------------------------------------- rendering
    def defused(self, text: str) -> str:
        """The hidden strings put back broken up (``< /s>``): the fallback of :meth:`splice`."""
        if self.hidden_pattern is None:
            return text
        return self.hidden_pattern.sub(lambda m: self.shown[m.group()][:1] + " " + self.shown[m.group()][1:], text)

    # ----------------------------------------------------------------- tokenizing
    def tokenize(self, text: str, add_special: bool) -> list[int]:
        """``text`` (a rendered prompt or one part of it between images) tokenized as llama.cpp
        does with ``parse_special``, its hidden strings as text."""
        pieces: list[tuple[bool, str]] = []  # (is a control token, text)
        at = 0
        for m in self.special_pattern.finditer(text) if self.special_pattern is not None else ():
            pieces += [(False, text[at : m.start()]), (True, m.group())]
            at = m.end()
        pieces.append((False, text[at:]))
        for i, (special, s) in enumerate(pieces):  # llama.cpp strips whitespace next to such tokens
            if special and s in self._lstrip and i > 0:
                pieces[i - 1] = (False, pieces[i - 1][1].rstrip())
            if special and s in self._rstrip and i + 1 < len(pieces):
                pieces[i + 1] = (False, pieces[i + 1][1].lstrip())
        out = list(self._tokenize(b"", add_special, False)) if add_special else []
        for special, s in pieces:
            if special:
                out.append(self.ids[s])
            elif s:
                out.extend(self._tokenize(self.show(s).encode("utf-8"), False, False))
        return out

    def splice(self, text: str, marker: str, chunks: Sequence[tuple[int, ...] | None]) -> list[tuple[int, ...] | None] | None:
        """libmtmd's text chunks of the prompt ``text`` (``None`` for a media chunk) with the ids
        of each part holding hidden strings replaced by :meth:`tokenize`'s; ``None`` when a
        part's ids are not found in the chunks (the caller then uses :meth:`defused`)."""
        out = list(chunks)
        k = 0  # the next chunk to search
        for j, part in enumerate(text.split(marker)):
            if not self.holds_hidden(part):
                continue
            made = tuple(self._tokenize(part.encode("utf-8"), j == 0, True))  # as libmtmd made them
            exact = tuple(self.tokenize(part, j == 0))
            while k < len(out):
                tokens = out[k]
                at = _find(tokens, made) if tokens is not None else -1
                if at >= 0:
                    assert tokens is not None
                    out[k] = tokens[:at] + exact + tokens[at + len(made) :]
                    k += 1
                    break
                k += 1
            else:
                return None
        return out


def _find(seq: tuple[int, ...], sub: tuple[int, ...]) -> int:
    if not sub:
        return -1
    for i in range(len(seq) - len(sub) + 1):
        if seq[i : i + len(sub)] == sub:
            return i
    return -1
