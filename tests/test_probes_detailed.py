"""Probes for detailed captions: the sentence splitter, insert_hallucination, drop_sentence,
repeat_sentence, and how a judge's score moves for them (capjudge probe's report)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Request
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.probes import PERTURBATIONS, NotApplicable, Perturbed, perturb, resolve_kinds
from capjudge.probes.report import probe_markdown
from capjudge.probes.runner import run_probe
from capjudge.probes.sentences import split_sentences
from capjudge.probes.wordlists import foil_lexicon

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"
CATS, DOG = IMAGES / "cats.jpg", IMAGES / "dog.jpg"
DETAILED = ("insert_hallucination", "drop_sentence", "repeat_sentence")

LONG_CATS = (
    "The photograph shows two cats lying side by side on a soft, light blue blanket. "
    "The cat on the left has orange fur with darker stripes along its back and tail. "
    "Its eyes are half closed, and its front paws are tucked under its chest. "
    "The cat on the right is grey, with a white patch on its throat and white tips on its paws. "
    "It rests its head against the orange cat's shoulder, which suggests the two are comfortable together. "
    "The blanket is wrinkled around them, forming small folds and shadows. "
    "Behind the cats, part of a beige sofa cushion is visible, slightly out of focus. "
    "The light comes from the upper left, probably from a window, and gives the fur a warm glow. "
    "Approx. 3.5 cm of the orange cat's tail hangs over the edge of the blanket. "
    "Overall, the scene feels calm, quiet and domestic."
)
LONG_DOG = (
    "A black dog sits in the middle of the frame, looking straight at the camera. "
    "It wears a pair of large over-ear headphones, which rest on top of its head and cover its ears. "
    "The dog's coat is short and glossy, and a small white mark can be seen on its chest. "
    "Its mouth is closed and its ears seem relaxed under the headphones. "
    "In the background, an orange cat walks from left to right, slightly blurred by its motion. "
    "The floor is made of light wooden boards that run diagonally across the picture. "
    "A white wall fills the upper part of the image, with a thin shadow along the skirting board. "
    "The picture seems to have been taken indoors, in daylight, at the height of the dog's eyes."
)


def words(text: str) -> int:
    return len(text.split())


# ------------------------------------------------------------------------------ the splitter
@pytest.mark.parametrize(
    "text, expected",
    [
        ("A dog runs. A cat sleeps.", ["A dog runs.", "A cat sleeps."]),
        ("Is it a dog? Yes! It is.", ["Is it a dog?", "Yes!", "It is."]),
        ("Dr. Smith and Mr. Jones stand on St. Mark's Square. They wave.", ["Dr. Smith and Mr. Jones stand on St. Mark's Square.", "They wave."]),
        ("The board is 3.5 m long. It is 0.75 m wide.", ["The board is 3.5 m long.", "It is 0.75 m wide."]),
        ("A poster of J. R. R. Tolkien hangs there. It is old.", ["A poster of J. R. R. Tolkien hangs there.", "It is old."]),
        ("A flag of the U.S. Army flies. Wind blows.", ["A flag of the U.S. Army flies.", "Wind blows."]),
        ("Fruit, e.g. apples, lies there. A knife too.", ["Fruit, e.g. apples, lies there.", "A knife too."]),
        ("It reads \"STOP.\" A car waits.", ["It reads \"STOP.\"", "A car waits."]),
        ("A clock shows 10 a.m. in the hall. People pass.", ["A clock shows 10 a.m. in the hall.", "People pass."]),
        ("Wait... The dog jumps.", ["Wait...", "The dog jumps."]),
        ("The dog jumps (high). 2 cats watch.", ["The dog jumps (high).", "2 cats watch."]),
        ("a dog. then a cat.", ["a dog. then a cat."]),  # no capital after the point: one sentence
        ("First paragraph without a point\n\nSecond paragraph.", ["First paragraph without a point", "Second paragraph."]),
        ("One sentence without end", ["One sentence without end"]),
        ("   ", []),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    found = split_sentences(text)
    assert [s.text for s in found] == expected
    for s in found:
        assert text[s.start : s.end] == s.text  # offsets into the text, nothing rewritten


def test_long_captions_split_into_their_sentences() -> None:
    assert len(split_sentences(LONG_CATS)) == 10 and len(split_sentences(LONG_DOG)) == 8
    assert 100 <= words(LONG_CATS) <= 300 and 100 <= words(LONG_DOG) <= 300


# ------------------------------------------------------------------------------ perturbations
def test_family_and_kinds() -> None:
    assert resolve_kinds("detailed") == list(DETAILED)
    assert resolve_kinds("insert-hallucination,drop-sentence,repeat-sentence") == list(DETAILED)
    assert set(DETAILED) <= set(resolve_kinds("all"))
    for k in DETAILED:
        assert PERTURBATIONS[k].family == "detailed" and PERTURBATIONS[k].description


@pytest.mark.parametrize("seed", range(8))
def test_insert_hallucination_adds_one_sentence_with_an_absent_object(seed: int) -> None:
    out = perturb(LONG_CATS, "insert_hallucination", seed)
    assert isinstance(out, Perturbed)
    before = [s.text for s in split_sentences(LONG_CATS)]
    after = [s.text for s in split_sentences(out.caption)]
    assert len(after) == len(before) + 1
    new = [i for i in range(len(after)) if after[:i] + after[i + 1 :] == before]
    assert new and 0 < new[0] < len(after) - 1  # strictly between two sentences, the rest untouched
    obj = re.search(r"object '([^']+)'", out.change).group(1)  # type: ignore[union-attr]
    assert obj in after[new[0]] and not re.search(rf"\b{obj}s?\b", LONG_CATS.lower())
    assert obj in foil_lexicon().forms
    assert perturb(LONG_CATS, "insert_hallucination", seed) == out  # seeded


def test_hallucinated_objects_come_from_unmentioned_supercategories() -> None:
    # the cats caption names animals and furniture (sofa): the inserted object is neither
    lex = foil_lexicon()
    for seed in range(20):
        out = perturb(LONG_CATS, "insert_hallucination", seed)
        obj = re.search(r"object '([^']+)'", out.change).group(1)  # type: ignore[union-attr]
        assert lex.forms[obj].group not in ("animals",)
    objects = {perturb(LONG_CATS, "insert_hallucination", s).change for s in range(20)}
    assert len(objects) > 5  # the seed moves the object, the sentence and the position


@pytest.mark.parametrize("seed", range(8))
def test_drop_sentence_removes_exactly_one(seed: int) -> None:
    out = perturb(LONG_DOG, "drop_sentence", seed)
    assert isinstance(out, Perturbed)
    before = [s.text for s in split_sentences(LONG_DOG)]
    after = [s.text for s in split_sentences(out.caption)]
    assert len(after) == len(before) - 1
    assert any(before[:i] + before[i + 1 :] == after for i in range(len(before)))
    assert "  " not in out.caption and out.caption == out.caption.strip()


def test_drop_sentence_keeps_the_rest_byte_for_byte() -> None:
    text = "First one.  Second one.\n\nThird one."
    seen = {perturb(text, "drop_sentence", s).caption for s in range(30)}
    assert seen == {"Second one.\n\nThird one.", "First one. Third one.", "First one. Second one."}


@pytest.mark.parametrize("seed", range(8))
def test_repeat_sentence_repeats_one_of_its_own(seed: int) -> None:
    out = perturb(LONG_CATS, "repeat_sentence", seed)
    assert isinstance(out, Perturbed)
    before = [s.text for s in split_sentences(LONG_CATS)]
    after = [s.text for s in split_sentences(out.caption)]
    assert len(after) == len(before) + 1 and set(after) == set(before)
    dup = [t for t in set(after) if after.count(t) == 2]
    assert len(dup) == 1 and after.index(dup[0]) < len(after) - after[::-1].index(dup[0]) - 1


def test_repeating_a_last_sentence_without_a_point_closes_it() -> None:
    text = "A dog sits. It looks up"
    seen = {perturb(text, "repeat_sentence", s).caption for s in range(30)}
    assert seen <= {"A dog sits. A dog sits. It looks up", "A dog sits. It looks up. A dog sits.", "A dog sits. It looks up. It looks up."}
    assert len(seen) >= 2


@pytest.mark.parametrize("kind", DETAILED)
@pytest.mark.parametrize("caption", ["A dog on a sofa.", "a dog. then a cat on a sofa", "Dr. Smith walks his dog."])
def test_one_sentence_captions_are_refused_with_a_note(kind: str, caption: str) -> None:
    out = perturb(caption, kind)
    assert isinstance(out, NotApplicable)
    assert out.reason == "fewer than 2 sentences (1): a perturbation of detailed captions needs several"


# ------------------------------------------------------------------------------ how scores move
def _caption_in(prompt: str) -> str:
    return prompt.split("Candidate caption: ", 1)[1].split("\n")[0]


ORIGINAL_SENTENCES = {s.text for c in (LONG_CATS, LONG_DOG) for s in split_sentences(c)}


def detail_judge(req: Request) -> str:
    """Rewards each distinct true sentence (coverage), punishes any sentence it cannot verify
    (a hallucination), ignores repetition."""
    sentences = {s.text for s in split_sentences(_caption_in([m for m in req.messages if m.role == "user"][-1].content))}
    return str(20 + 5 * len(sentences & ORIGINAL_SENTENCES) - 30 * len(sentences - ORIGINAL_SENTENCES))


def length_lover(req: Request) -> str:
    """Scores by length alone: repetition pays."""
    return str(min(100, words(_caption_in([m for m in req.messages if m.role == "user"][-1].content)) // 3))


SAMPLES = [Sample(CATS, LONG_CATS, id="cats"), Sample(DOG, LONG_DOG, id="dog"), Sample(DOG, "A black dog wearing headphones.", id="short")]


def test_probe_reports_how_a_detail_judge_moves() -> None:
    rep = run_probe(Judge("vanilla", ScriptedBackend(detail_judge)), SAMPLES, kinds="detailed", seed=1)
    hall, drop, rep_ = (rep.summary(k) for k in DETAILED)
    for s in (hall, drop, rep_):
        assert s.family == "detailed" and s.n_captions == 3 and s.n_applicable == 2 and s.n_scored == 2
        assert s.not_applicable == {"fewer than 2 sentences (1): a perturbation of detailed captions needs several": 1}
    assert hall.prefer_original == 2 and hall.mean_drop == pytest.approx(30.0)
    assert drop.prefer_original == 2 and drop.mean_drop == pytest.approx(5.0)
    assert rep_.ties == 2 and rep_.mean_drop == pytest.approx(0.0)
    md = probe_markdown(rep)
    assert all(k in md for k in DETAILED)


def test_probe_shows_a_length_biased_judge_rewarding_repetition() -> None:
    rep = run_probe(Judge("vanilla", ScriptedBackend(length_lover)), SAMPLES[:2], kinds="repeat_sentence,drop_sentence", seed=0)
    assert rep.summary("repeat_sentence").prefer_perturbed == 2 and (rep.summary("repeat_sentence").mean_drop or 0) < 0
    assert rep.summary("drop_sentence").prefer_original == 2


def test_cli_probe_detailed_family(tmp_path: Path) -> None:
    captions = tmp_path / "long.jsonl"
    captions.write_text("".join(json.dumps({"id": s.id, "image": Path(str(s.image)).name, "caption": s.caption}) + "\n" for s in SAMPLES), encoding="utf-8")
    out = tmp_path / "o"
    rc = main([
        "probe", "--backend", "scripted:0.5", "--method", "fleur", "--captions", str(captions), "--images", str(IMAGES),
        "--no-cache", "--quiet", "--kinds", "detailed", "--out-json", str(out / "r.json"), "--out", str(out / "res.jsonl"),
    ])
    assert rc == 0
    report = json.loads((out / "r.json").read_text())
    kinds = {s["kind"]: s for s in report["summaries"]}
    assert set(kinds) == set(DETAILED)
    for s in kinds.values():
        assert s["n_applicable"] == 2 and s["ties"] == 2  # a constant judge does not move
    records = [json.loads(line) for line in (out / "res.jsonl").read_text().splitlines()]
    long_ones = [r for r in records if words(r["caption"]) >= 50]
    assert long_ones and all(r["details"]["caption_words"] == words(r["caption"]) for r in long_ones)
    assert all("caption_words" not in r["details"] for r in records if words(r["caption"]) < 50)
