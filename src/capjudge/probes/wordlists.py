"""The word lists the caption perturbations read from ``capjudge/probes/data/``: function words,
colours, the swap lexicons (fine-grained categories, FOIL's object nouns) and the JSON tables."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal


def _data(name: str) -> str:
    from importlib import resources  # here: `capjudge --help` imports this module (16 ms saved)

    return resources.files("capjudge.probes").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def _lines(name: str) -> list[str]:
    return [ln.strip() for ln in _data(name).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@cache
def data_json(name: str) -> dict[str, Any]:
    """The JSON object of a data file, without its ``_``-prefixed (comment) keys."""
    return {k: v for k, v in json.loads(_data(name)).items() if not k.startswith("_")}


@cache
def function_words() -> frozenset[str]:
    """Words never repeated by ``repeat_word`` and on which ``truncate`` prefers to stop."""
    return frozenset(_lines("function_words.txt"))


@cache
def colour_groups() -> tuple[tuple[str, ...], ...]:
    """Colours; the spellings on one line (grey|gray) are one colour."""
    return tuple(tuple(w.strip().lower() for w in ln.split("|")) for ln in _lines("colours.txt"))


@dataclass(frozen=True)
class _Entry:
    group: str
    index: int
    number: Literal["sg", "pl", "any"]


@dataclass(frozen=True)
class Lexicon:
    """Swap groups read from a data file: ``forms`` maps every form to its entry; ``entries`` holds
    each group's (singular, plural) forms."""

    forms: dict[str, _Entry]
    entries: dict[str, list[tuple[str, str | None]]]

    def alternatives(self, word: str) -> list[str]:
        """Other members of the word's group, in the word's grammatical number."""
        e = self.forms[word]
        out = []
        for i, (sg, pl) in enumerate(self.entries[e.group]):
            if i == e.index:
                continue
            if e.number == "pl":
                out.append(pl or sg)
            else:
                out.append(sg)
        return [w for w in out if w != word]


def _lexicon(groups: dict[str, list[str]]) -> Lexicon:
    forms: dict[str, _Entry] = {}
    entries: dict[str, list[tuple[str, str | None]]] = {}
    for group, items in groups.items():
        entries[group] = []
        for i, item in enumerate(items):
            parts = [p.strip().lower() for p in item.split("/")]
            sg, pl = parts[0], (parts[1] if len(parts) > 1 else None)
            entries[group].append((sg, pl))
            if pl is None or pl == sg:
                forms.setdefault(sg, _Entry(group, i, "any"))
            else:
                forms.setdefault(sg, _Entry(group, i, "sg"))
                forms.setdefault(pl, _Entry(group, i, "pl"))
    return Lexicon(forms, entries)


@cache
def category_lexicon() -> Lexicon:
    """Fine-grained kinds (brands, breeds, sports, dishes, ...) for ``category_swap``."""
    return _lexicon(data_json("categories.json"))


@cache
def foil_lexicon() -> Lexicon:
    """MSCOCO object nouns grouped by supercategory for ``noun_swap``."""
    return _lexicon(data_json("foil.json"))
