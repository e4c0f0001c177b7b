"""Judge behaviour on a scripted backend: grouping, two-step methods, error isolation, pairwise."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import BackendError, Completion, Request, TokenStep
from capjudge.backends.scripted import ScriptedBackend
from capjudge.prompts import LLAVA_V1_SYSTEM

EX = Path(__file__).resolve().parents[1] / "examples" / "images"
CATS, DOG = EX / "cats.jpg", EX / "dog.jpg"


def user_text(req: Request) -> str:
    return [m for m in req.messages if m.role == "user"][-1].content


def test_score_many_keeps_input_order_and_groups_by_image() -> None:
    backend = ScriptedBackend(lambda r: "85" if "good" in user_text(r) else "The score is 20 out of 100.")
    judge = Judge("vanilla", backend)
    samples = [Sample(CATS, "good cat"), Sample(DOG, "bad dog"), Sample(CATS, "bad cat"), Sample(DOG, "good dog")]
    results = list(judge.score_many(samples))
    assert [r.caption for r in results] == [s.caption for s in samples]
    assert [r.score for r in results] == [85.0, 20.0, 20.0, 85.0]
    assert [r.id for r in results] == ["0", "1", "2", "3"]
    # One backend call for the batch, with the captions of one image adjacent.
    assert backend.batches == [4]
    shas = [r.images[0].sha256 for r in backend.calls]
    assert shas[0] == shas[1] and shas[2] == shas[3] and shas[1] != shas[2]
    r = results[0]
    assert (r.method, r.backend, r.model, r.status, r.smoothed, r.raw) == ("vanilla", "scripted:scripted", "scripted", "ok", False, "85")
    assert len(r.template_hash) == 16


def test_two_step_method_asks_first_step_once_per_image() -> None:
    def respond(req: Request) -> str:
        text = user_text(req)
        if text.startswith("Analyze the uploaded image"):
            return f"- Object 1: thing in image {req.images[0].sha256[:6]}"
        assert "Visual context: - Object 1: thing in image" in text
        return "70"

    backend = ScriptedBackend(respond)
    judge = Judge("visce2", backend, batch_size=3)  # two batches: the context cache spans batches
    samples = [Sample(CATS, f"cap {i}") for i in range(4)] + [Sample(DOG, "a dog"), Sample(str(CATS), "again")]
    results = list(judge.score_many(samples))
    assert all(r.ok and r.score == 70.0 for r in results), [r.error for r in results]
    contexts = [c for c in backend.calls if user_text(c).startswith("Analyze")]
    assert len(contexts) == 2  # one per distinct image, not per caption
    assert results[0].context and results[0].context.startswith("- Object 1")
    # The paper-faithful system sentence (LLaVA's llava_v1) precedes every turn on a local-style backend.
    assert backend.calls[0].messages[0].content == LLAVA_V1_SYSTEM



@pytest.mark.parametrize("method", ["visce2", "description"])
def test_first_step_is_cached_across_runs(tmp_path: Path, method: str) -> None:
    """A later run (new judge, new cache object over the same folder) with new captions of the same
    images asks only the scoring step: each image's first-step answer comes from the response cache."""
    from capjudge.backends.cache import CachedBackend

    def respond(req: Request) -> str:
        text = user_text(req)
        return "70" if "Caption" in text or "caption" in text else f"A picture, number {req.images[0].sha256[:6]}."

    inner = ScriptedBackend(respond)  # one script: a script's cache entries are its own
    first = list(Judge(method, CachedBackend(inner, tmp_path)).score_many([Sample(CATS, "two cats"), Sample(DOG, "a dog")]))
    assert all(r.ok for r in first), [r.error for r in first]
    assert len(inner.calls) == 4  # two first steps, two scores

    later = list(Judge(method, CachedBackend(inner, tmp_path)).score_many([Sample(CATS, "cats on a bed"), Sample(DOG, "a brown dog")]))
    assert all(r.ok for r in later), [r.error for r in later]
    asked = [user_text(c) for c in inner.calls[4:]]
    assert len(asked) == 2 and all("cats on a bed" in t or "a brown dog" in t for t in asked)
    assert [r.context for r in later] == [r.context for r in first]


def test_one_bad_sample_never_stops_the_rest(tmp_path: Path, corrupt_image: Path) -> None:
    def respond(req: Request) -> str | BaseException:
        text = user_text(req)
        if "explode" in text:
            return BackendError("server said no")
        if "mumble" in text:
            return "I cannot rate this."
        return "0.7"

    judge = Judge("fleur", ScriptedBackend(respond))
    samples = [
        Sample(CATS, "fine one"),
        Sample(corrupt_image, "corrupt image"),
        Sample(tmp_path / "missing.jpg", "missing image"),
        Sample(DOG, "   "),
        Sample(DOG, "explode please"),
        Sample(DOG, "mumble"),
        Sample(CATS, "fine two"),
    ]
    results = list(judge.score_many(samples))
    assert [r.status for r in results] == ["ok", "error", "error", "error", "error", "error", "ok"]
    assert "could not be decoded" in results[1].error and "corrupt.jpg" in results[1].error
    assert "not found" in results[2].error and "missing.jpg" in results[2].error
    assert "empty caption" in results[3].error
    assert "server said no" in results[4].error
    assert "no score in the answer" in results[5].error and results[5].raw == "I cannot rate this."
    assert results[0].score == 0.7 and not results[0].smoothed
    assert "raw score" in results[0].details["smoothing"]
    assert all(r.id == str(i) for i, r in enumerate(results))


def test_reference_methods_require_references() -> None:
    backend = ScriptedBackend("0.9")
    judge = Judge("ref-fleur", backend)
    ok, bad = judge.score_many([Sample(CATS, "a cat", references=("two cats", "cats sleeping")), Sample(CATS, "a cat")])
    assert ok.ok and ok.score == 0.9
    assert "Reference Captions: two cats\ncats sleeping" in user_text(backend.calls[0])
    assert not bad.ok and "needs reference captions" in bad.error


def _fleur_completion(d1: list[float], d2: list[float]) -> Completion:
    def step(tok: str, dist: list[float] | None = None) -> TokenStep:
        digits = tuple(math.log(p) if p > 0 else -50.0 for p in dist) if dist else None
        return TokenStep(token=tok, logprob=0.0, digits=digits)

    return Completion(text="0.85", steps=[step("▁"), step("0", [1.0] + [0.0] * 9), step("."), step("8", d1), step("5", d2)], logprobs=True)


def test_fleur_smoothing_from_backend_digit_probabilities() -> None:
    d1 = [0.0] * 10
    d1[8], d1[7] = 0.75, 0.25
    d2 = [0.1] * 10
    judge = Judge("fleur", ScriptedBackend(lambda r: _fleur_completion(d1, d2)))
    r = judge.score(Sample(CATS, "a cat"))
    assert r.smoothed and r.raw_score == 0.85
    assert r.score == pytest.approx(0.1 * (8 * 0.75 + 7 * 0.25) + 0.01 * 4.5)
    assert r.details["digit_probs"]["first"][8] == pytest.approx(0.75)
    # The request asked for log-probabilities.
    assert judge.backend.calls[0].config.top_logprobs > 0


def test_listwise_scores_every_caption_of_an_image() -> None:
    backend = ScriptedBackend(lambda r: "{1: 0.8, 2: 0.3}" if "2. " in user_text(r) and "3. " not in user_text(r) else "{1: 0.5}")
    judge = Judge("listwise", backend)
    results = list(judge.score_many([Sample(CATS, "good"), Sample(DOG, "only one"), Sample(CATS, "bad")]))
    assert [r.score for r in results] == [0.8, 0.5, 0.3]
    assert len(backend.calls) == 2
    assert results[2].details["list_position"] == 2


def test_dual_sided_comparison_maps_the_second_order_back() -> None:
    # A judge that recognises the better caption wherever it is shown.
    def fair(req: Request) -> str:
        text = user_text(req)
        first = text.split("Answer 1: ")[1].split("\n")[0]
        return "Answer 1" if "good" in first else "Answer 2 is better."

    judge = Judge("gpt4v-pairwise", ScriptedBackend(fair))
    r = judge.compare(CATS, "a good caption", "a poor caption")
    assert (r.verdict, r.votes, r.mode, r.status) == ("A", ["A", "A"], "pairwise", "ok")
    r = judge.compare(CATS, "a poor caption", "a good caption")
    assert (r.verdict, r.votes) == ("B", ["B", "B"])

    # A judge with pure position bias always answers "Answer 1": the dual-sided vote makes it a tie.
    biased = Judge("gpt4v-pairwise", ScriptedBackend("Answer 1"))
    r = biased.compare(CATS, "a good caption", "a poor caption")
    assert (r.verdict, r.votes) == ("tie", ["A", "B"])

    # "A and tie -> A"
    half = Judge("gpt4v-pairwise", ScriptedBackend(lambda req: "Tie" if "poor" in user_text(req).split("Answer 1: ")[1].split("\n")[0] else "[[A]]"))
    assert half.compare(CATS, "a good caption", "a poor caption").verdict == "A"

    unsure = Judge("gpt4v-pairwise", ScriptedBackend("I am not sure."))
    r = unsure.compare(CATS, "x", "y")
    assert r.status == "error" and r.verdict is None and "no verdict" in r.error


def test_comparison_by_single_grading() -> None:
    judge = Judge("vanilla", ScriptedBackend(lambda r: "90" if "good" in user_text(r) else "40"))
    results = list(judge.compare_many([(CATS, "good one", "bad one"), {"image": DOG, "caption_a": "bad", "caption_b": "good"}, (CATS, "bad a", "bad b")]))
    assert [r.verdict for r in results] == ["A", "B", "tie"]
    assert results[0].scores == (90.0, 40.0) and results[0].mode == "grading"
    bad = list(judge.compare_many([{"image": DOG, "caption_a": "x"}]))
    assert bad[0].status == "error" and "malformed" in bad[0].error


def test_explain_asks_the_follow_up_with_the_score_in_history() -> None:
    def respond(req: Request) -> str:
        if user_text(req) == "Why? Tell me the reason.":
            assert req.messages[-2].role == "assistant" and req.messages[-2].content == "0.6"
            return "Because the caption misses the second cat."
        return "0.6"

    backend = ScriptedBackend(respond)
    r = Judge("fleur", backend).explain(Sample(CATS, "a cat"))
    assert r.ok and r.score == 0.6 and r.explanation == "Because the caption misses the second cat."
    follow = backend.calls[-1]
    assert follow.messages[1].images and not follow.messages[-1].images  # image in the first turn only


def test_system_turn_policy() -> None:
    local = ScriptedBackend("0.5")
    Judge("fleur", local).score(Sample(CATS, "x"))
    assert local.calls[0].messages[0].role == "system"
    api = ScriptedBackend("0.5")
    api.kind = "openai"
    Judge("fleur", api).score(Sample(CATS, "x"))
    assert api.calls[0].messages[0].role == "user"
    custom = ScriptedBackend("0.5")
    Judge("fleur", custom, system=None).score(Sample(CATS, "x"))
    assert custom.calls[0].messages[0].role == "user"


def test_backend_that_raises_for_a_whole_batch() -> None:
    class Broken(ScriptedBackend):
        def generate(self, requests):  # type: ignore[override]
            raise RuntimeError("GPU on fire")

    results = list(Judge("vanilla", Broken("1")).score_many([Sample(CATS, "a"), Sample(DOG, "b")]))
    assert all(not r.ok and "GPU on fire" in r.error for r in results)


def test_pairwise_method_refuses_single_scoring() -> None:
    with pytest.raises(ValueError, match="compare"):
        list(Judge("gpt4v-pairwise", ScriptedBackend("x")).score_many([Sample(CATS, "a")]))


def test_unicode_digit_alternatives_never_stop_a_run() -> None:
    # LLaMA vocabularies hold "²" or "٣", for which str.isdigit() is true: not decimal digits.
    def respond(req: Request) -> Completion:
        top = (("8", math.log(0.7)), ("²", math.log(0.2)), ("٣", math.log(0.1)))
        return Completion(text="0.8", steps=[TokenStep("0", 0.0), TokenStep(".", 0.0), TokenStep("8", math.log(0.7), top=top)], logprobs=True)

    r = Judge("fleur", ScriptedBackend(respond)).score(Sample(CATS, "a cat"))
    assert r.ok and r.smoothed and r.score == pytest.approx(0.1 * 8 * 0.7)


def test_smoothing_reads_the_score_the_parser_read() -> None:
    def step(tok: str, d: int | None = None) -> TokenStep:
        digits = tuple(0.0 if i == d else -50.0 for i in range(10)) if d is not None else None
        return TokenStep(tok, 0.0, digits=digits)

    toks = ["On", "▁a", "▁scale", "▁of", "▁", "0", ".", "0", "▁to", "▁", "1", ".", "0", ",", "▁I", "'d", "▁give", "▁", "0", ".", "7"]
    steps = [step(t, int(t) if t.isdigit() else None) for t in toks]
    comp = Completion(text="On a scale of 0.0 to 1.0, I'd give 0.7", steps=steps, logprobs=True)
    r = Judge("fleur", ScriptedBackend(lambda req: comp)).score(Sample(CATS, "a cat"))
    assert r.raw_score == 0.7 and r.smoothed and r.score == pytest.approx(0.7)


def test_grouping_by_image_whatever_the_input_order(monkeypatch) -> None:
    import capjudge.judges.prepare as judge_module

    loads: list[str] = []
    real = judge_module.load_image

    def counting(image, **kw):
        loads.append(str(image))
        return real(image, **kw)

    monkeypatch.setattr(judge_module, "load_image", counting)
    backend = ScriptedBackend(lambda r: "{1: 0.9, 2: 0.8, 3: 0.7}")
    judge = Judge("listwise", backend, batch_size=2)
    samples = [Sample(CATS, "c1"), Sample(DOG, "d1"), Sample(CATS, "c2"), Sample(DOG, "d2"), Sample(CATS, "c3")]
    results = list(judge.score_many(samples))
    assert [r.caption for r in results] == ["c1", "d1", "c2", "d2", "c3"]
    # One listwise prompt per image holding all its captions, although they were interleaved
    # and the batch size is smaller than the cats' group.
    assert len(backend.calls) == 2
    assert sorted(r.details["list_size"] for r in results) == [2, 2, 3, 3, 3]
    assert [r.score for r in results] == [0.9, 0.9, 0.8, 0.8, 0.7]
    assert sorted(loads) == sorted({str(CATS), str(DOG)})  # each image read once


def test_scripted_backends_do_not_share_cache_entries(tmp_path: Path) -> None:
    a = Judge("vanilla", "scripted:80", cache_dir=tmp_path).score(Sample(CATS, "x"))
    b = Judge("vanilla", "scripted:50", cache_dir=tmp_path).score(Sample(CATS, "x"))
    again = Judge("vanilla", "scripted:80", cache_dir=tmp_path).score(Sample(CATS, "x"))
    assert (a.score, b.score, again.score) == (80.0, 50.0, 80.0)
    assert again.details["cached"] and not b.details["cached"]


@pytest.mark.parametrize(("answer", "value", "d"), [("1.0", 1.0, 1), ("0.0", 0.0, 0)])
def test_smoothing_skips_a_restated_scale_end_equal_to_the_score(answer: str, value: float, d: int) -> None:
    # "On a scale of 0.0 to 1.0, I'd give <answer>": the restatement's digits are certain, the
    # answer's are not; the answer is what gets smoothed.
    def step(tok: str, dist: dict[int, float] | None = None) -> TokenStep:
        digits = tuple(math.log(dist.get(i, 0.0)) if dist.get(i, 0.0) > 0 else -50.0 for i in range(10)) if dist is not None else None
        return TokenStep(tok, 0.0, digits=digits)

    certain = {0: 1.0} if d == 0 else {1: 1.0}
    toks = [step("On"), step("▁scale"), step("▁"), step("0", {0: 1.0}), step("."), step("0", {0: 1.0}), step("▁to"), step("▁"), step("1", {1: 1.0}), step("."), step("0", {0: 1.0}), step(","), step("▁give"), step("▁")]
    if d == 1:
        toks += [step("1", {0: 0.5, 1: 0.5}), step("."), step("0", {0: 1.0})]
    else:
        toks += [step("0", {0: 1.0}), step("."), step("0", {0: 0.5, 4: 0.5})]
    comp = Completion(text=f"On scale 0.0 to 1.0, give {answer}", steps=toks, logprobs=True)
    r = Judge("fleur", ScriptedBackend(lambda req: comp)).score(Sample(CATS, "a cat"))
    assert r.raw_score == value and r.smoothed
    assert r.score == pytest.approx(0.95 if d == 1 else 0.2), certain


def test_sampling_estimate_scores_by_the_mean_of_parsed_samples() -> None:
    meta = {"sampling_estimate": {"mean": 0.95, "first": [0, 0, 0, 0, 0, 0, 0, 0, 1.0, 0], "second": None, "calls": 4}}
    comp = Completion(text="0.8", model="m", meta=meta)
    r = Judge("fleur", ScriptedBackend(lambda req: comp)).score(Sample(CATS, "a cat"))
    assert r.score == pytest.approx(0.95) and r.smoothed and "sampling 4" in r.details["smoothing"]


def test_data_dependent_template_errors_are_records_in_every_mode() -> None:
    from capjudge.prompts import get_method, register_template

    register_template("needs-ref", "Rate {{ caption }} against {{ references[0] }}.", overwrite=True)
    register_template("list-needs-ref", "{% for c in captions %}{{ c }} vs {{ references[0] }}{% endfor %}", overwrite=True)
    register_template("pair-needs-ref", "{{ caption_a }} / {{ caption_b }} / {{ references[0] }}", overwrite=True)
    listwise = Judge(get_method("listwise").with_options(name="lw", template="list-needs-ref"), ScriptedBackend("{1: 0.5}"))
    assert all(not r.ok and "references" in r.error for r in listwise.score_many([Sample(CATS, "a")]))
    pair = Judge(get_method("gpt4v-pairwise").with_options(name="pw", template="pair-needs-ref"), ScriptedBackend("Answer 1"))
    (r,) = pair.compare_many([(CATS, "a", "b")])
    assert not r.ok and r.verdict is None
    ok = pair.compare(CATS, "a", "b", references=["ref"])
    assert ok.ok and ok.verdict == "tie"
    inputs = [Sample(CATS, "a"), ("not", "a sample"), {"image": CATS, "caption": "b", "references": "one ref"}]
    scored = list(Judge(get_method("vanilla").with_options(name="v", template="needs-ref"), ScriptedBackend("50")).score_many(inputs))
    assert [r.status for r in scored] == ["error", "error", "ok"]
    assert "not a Sample or a dict" in scored[1].error and scored[2].references == ["one ref"]


def test_input_that_breaks_keeps_what_was_read_and_misuse_fails_at_the_call() -> None:
    def gen():
        for i in range(3):
            yield Sample(CATS, f"c{i}")
        raise RuntimeError("input broke")

    got = []
    with pytest.raises(RuntimeError, match="input broke"):
        for r in Judge("vanilla", ScriptedBackend("50")).score_many(gen()):
            got.append(r.score)
    assert got == [50.0, 50.0, 50.0]
    with pytest.raises(ValueError, match="compares pairs"):
        Judge("gpt4v-pairwise", ScriptedBackend("x")).score_many([])
    with pytest.raises(ValueError, match="scoring method"):
        Judge("listwise", ScriptedBackend("x")).compare_many([], mode="grading")
