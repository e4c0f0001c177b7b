"""Stop rules (issue 33, item 3): the paper form of FLEUR ends its answer once the score's digits
are complete; the HF backend's decoding paths stop there (fewer steps), and the answer equals the
whole answer cut at that token, so the smoothed score is unchanged."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from capjudge.backends.base import GenerationConfig, Message, Request
from capjudge.parsing.stopping import RULES, reached, stop_index
from capjudge.prompts.registry import get_method


def _chars(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def _stop_at(text: str) -> str | None:
    at = stop_index("score", [ord(c) for c in text], _chars)
    return None if at is None else text[: at + 1]


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        ("0.75, because the caption is right", "0.75,"),
        ("0.8\n\nThe caption", "0.8\n"),
        ("  0.7 because", "  0.7 bec"),
        ("1.0.", "1.0."),
        ("0.75", None),  # a second decimal may still follow
        ("0.7 out of 1.0", None),
        ("0.0 to 1.0: 0.6", None),
        ("On a scale of 0.0 to 1.0, I'd give 0.7.", None),  # not at the start: the parser needs it all
        ("75, good", None),
    ],
)
def test_the_score_rule_stops_once_the_opening_score_is_complete(answer: str, kept: str | None) -> None:
    assert _stop_at(answer) == kept


def test_no_rule_never_stops_and_a_long_answer_is_not_checked() -> None:
    assert not reached("", [ord(c) for c in "0.7,"], _chars)
    assert not reached("score", [ord(c) for c in "0.7," + "x" * 40], _chars)


def test_the_paper_fleur_methods_carry_the_rule_and_the_code_forms_do_not() -> None:
    assert [get_method(m).stop_rule for m in ("fleur", "ref-fleur", "fleur-code", "ref-fleur-code", "vanilla")] == ["score", "score", "", "", ""]
    plain = Request((Message("user", "x"),), GenerationConfig())
    ruled = Request((Message("user", "x"),), GenerationConfig(stop_rule="score"))
    assert "stop_rule" not in plain.fingerprint()["config"]  # cache keys of other requests unchanged
    assert ruled.fingerprint()["config"]["stop_rule"] == "score"


hf = pytest.mark.hf


@hf
def test_completion_is_cut_after_the_token_that_ends_the_score(tiny_llava_dir: Path) -> None:
    torch = pytest.importorskip("torch")
    from capjudge.backends.hf import HFBackend

    be = HFBackend(str(tiny_llava_dir))
    try:
        ids = be.tokenizer.encode("0.75, because it is", add_special_tokens=False)
        logits = torch.randn(len(ids), be.net.config.text_config.vocab_size)
        cut = be.completion_from_ids(ids, logits, GenerationConfig(top_logprobs=2, stop_rule="score"), 5)
        whole = be.completion_from_ids(ids, logits, GenerationConfig(top_logprobs=2), 5)
        assert cut.text == "0.75," and cut.finish_reason == "stop"
        assert cut.steps == whole.steps[: len(cut.steps)] and len(cut.steps) < len(whole.steps)
    finally:
        be.close()


def _fleur_requests(be: object, example_images: list[Path]) -> list[Request]:
    """The requests ``Judge("fleur")`` sends for a few captions (answers ``0.84``, ``0.4``, ...)."""
    from capjudge import Judge, Sample

    seen: list[Request] = []
    inner = be.generate  # type: ignore[attr-defined]

    def record(reqs: list[Request]) -> object:
        seen.extend(reqs)
        return inner(reqs)

    be.generate = record  # type: ignore[attr-defined]
    try:
        captions = ["a cat.", "an orange cat and a grey cat are lying together on a white bed in the room.", "three horses run across a snowy field."]
        list(Judge("fleur", be).score_many([Sample(example_images[0], c) for c in captions]))  # type: ignore[arg-type]
    finally:
        be.generate = inner  # type: ignore[attr-defined]
    return seen


def _same_steps(a: list, b: list) -> None:
    """Same tokens; log-probabilities to 1e-9 (float64; the packed path's answer draft changes the
    summation order between two calls)."""
    assert [s.token for s in a] == [s.token for s in b]
    assert [s.logprob for s in a] == pytest.approx([s.logprob for s in b], abs=1e-9)
    assert [d for s in a for d in s.digits or ()] == pytest.approx([d for s in b for d in s.digits or ()], abs=1e-9)


@hf
def test_both_decoding_paths_stop_at_the_rule(tiny_llava_dir: Path, example_images: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule that holds inside the tiny model's answers (``0.`` of ``0.84``): the packed prefix
    path and the slot refill path end there, with the steps of the whole answer up to it."""
    import dataclasses

    from capjudge.backends.hf import HFBackend

    monkeypatch.setitem(RULES, "point", re.compile(r"^\s*\d\."))
    be = HFBackend(str(tiny_llava_dir), dtype="float64", batch_size=2)
    try:
        fleur = _fleur_requests(be, example_images)
        for max_new in (16, 160):  # prefix path, then slot refill
            def with_config(**kw: object) -> list[Request]:
                return [dataclasses.replace(r, config=dataclasses.replace(r.config, max_new_tokens=max_new, **kw)) for r in fleur]  # noqa: B023

            whole = be.generate(with_config(stop_rule=""))
            assert sum(c.text.startswith("0.") and len(c.steps) > 2 for c in whole) >= 2, [c.text for c in whole]
            cut = be.generate(with_config(stop_rule="point"))
            assert [c.meta.get("refill", c.meta.get("prefix_reuse")) for c in cut] == ["used"] * 3
            for a, b in zip(cut, whole):
                if b.text.startswith("0."):
                    assert a.finish_reason == "stop" and len(a.steps) == 2 and a.text == "0."
                    _same_steps(a.steps, b.steps[:2])
                else:
                    _same_steps(a.steps, b.steps)
    finally:
        be.close()
