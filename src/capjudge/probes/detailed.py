"""Perturbations for detailed (multi-sentence, 100-300-word) captions, registered with the others
in :mod:`.perturbations` as the family ``detailed``:

* ``insert_hallucination``: a sentence naming an object the caption does not mention (an MSCOCO
  object noun from the FOIL-style list, ``data/foil.json``, in one of the sentences of
  ``data/hallucinations.json``) inserted between two sentences, at a seeded position: a judge of
  detailed captions should score it lower (precision, hallucination);
* ``drop_sentence``: one seeded sentence removed: a judge that weighs coverage should score it
  lower (recall);
* ``repeat_sentence``: one sentence of the caption repeated at a seeded later position: nothing
  false is added, only redundancy (a judge that rewards length scores it higher).

Each needs at least two sentences (:func:`capjudge.probes.sentences.split_sentences`); a caption
with fewer is refused with that note. The functions here take ``(caption, rng, options)`` and
return ``(new caption, change)`` or raise :class:`Refused`; :mod:`.perturbations` seeds and wraps
them as every other perturbation.
"""

from __future__ import annotations

import random
import re

from capjudge.probes.sentences import Sentence, split_sentences
from capjudge.probes.wordlists import data_json, foil_lexicon

SOURCE = "capjudge (detailed-caption probes: hallucinated object, coverage, repetition)"
MIN_SENTENCES = 2


class Refused(Exception):
    """The perturbation does not apply to this caption (the message is the reason)."""


def _sentences(caption: str) -> list[Sentence]:
    found = split_sentences(caption)
    if len(found) < MIN_SENTENCES:
        raise Refused(f"fewer than {MIN_SENTENCES} sentences ({len(found)}): a perturbation of detailed captions needs several")
    return found


def _closed(text: str) -> str:
    """``text`` ending in sentence punctuation (a copied last sentence may have none)."""
    return text if re.search(r"[.!?…][\"'”’)\]]*$", text) else text + "."


def _article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def _absent_object(caption: str, rng: random.Random) -> str:
    """An object noun the caption does not mention, preferably of a supercategory it names nothing of."""
    words = set(re.findall(r"[a-z]+", caption.lower()))
    lex = foil_lexicon()
    absent: dict[str, list[str]] = {}
    touched: set[str] = set()
    for group, entries in lex.entries.items():
        for sg, pl in entries:
            forms = {sg, pl or sg}
            if any(all(p in words for p in f.split()) for f in forms):
                touched.add(group)
            else:
                absent.setdefault(group, []).append(sg)
    fresh = [g for g in absent if g not in touched]
    groups = fresh or list(absent)
    if not groups:
        raise Refused("every object noun of the list is in the caption")
    return rng.choice(absent[rng.choice(sorted(groups))])


def insert_hallucination(caption: str, rng: random.Random, options: object) -> tuple[str, str]:
    """Insert a sentence naming an object the caption does not mention, between two of its sentences."""
    found = _sentences(caption)
    obj = _absent_object(caption, rng)
    template = rng.choice(data_json("hallucinations.json")["templates"])
    a = _article(obj)
    sentence = template.format(a=a, A=a.capitalize(), object=obj)
    k = rng.randint(1, len(found) - 1)  # before sentence k: strictly between two sentences
    at = found[k].start
    return caption[:at] + sentence + " " + caption[at:], f"inserted {sentence!r} before sentence {k + 1} of {len(found)} (object {obj!r})"


def drop_sentence(caption: str, rng: random.Random, options: object) -> tuple[str, str]:
    """Remove one sentence (coverage: what the caption no longer says)."""
    found = _sentences(caption)
    k = rng.randrange(len(found))
    if k < len(found) - 1:
        new = caption[: found[k].start] + caption[found[k + 1].start :]
    else:
        new = caption[: found[k - 1].end] + caption[found[k].end :]
    return new, f"dropped sentence {k + 1} of {len(found)}: {found[k].text!r}"


def repeat_sentence(caption: str, rng: random.Random, options: object) -> tuple[str, str]:
    """Repeat one of the caption's own sentences at a later position (redundancy, nothing false)."""
    found = _sentences(caption)
    k = rng.randrange(len(found))
    j = rng.randint(k + 1, len(found))  # the copy goes before sentence j, or at the end
    copy = _closed(found[k].text)
    if j < len(found):
        at = found[j].start
        new = caption[:at] + copy + " " + caption[at:]
    else:
        end = found[-1].end
        new = caption[:end] if found[-1].text == _closed(found[-1].text) else caption[:end] + "."
        new += " " + copy + caption[end:]
    where = f"before sentence {j + 1}" if j < len(found) else "at the end"
    return new, f"sentence {k + 1} of {len(found)} repeated {where}: {copy!r}"


FUNCTIONS = (insert_hallucination, drop_sentence, repeat_sentence)
"""The perturbations of this module, in their registration order."""

__all__ = ["FUNCTIONS", "MIN_SENTENCES", "SOURCE", "Refused", "drop_sentence", "insert_hallucination", "repeat_sentence"]
