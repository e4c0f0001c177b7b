"""Follow-ups of issue 20 item 7 (a record with status ``ok`` always has a finite score on its
method's scale): an answer refused for its log-probabilities is never cached, and a results file
written by an older capjudge, holding ``ok`` records that break the rule, is healed by a re-run.

- The response cache never stores an answer whose token log-probabilities are not
  log-probabilities (nor serves one an older capjudge stored): the next run asks the backend again.
- A re-run over ``--out`` does not keep an ``ok`` record with a null, NaN, infinite or
  out-of-scale score, or a pair record with no valid verdict: it asks those rows again (without
  ``--retry-errors``) and says how many and why; good records are kept.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import Capabilities, Completion, Request, TokenStep
from capjudge.backends.cache import CachedBackend, ResponseCache
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.data.recordcheck import record_problem
from capjudge.data.types import Sample
from capjudge.judges.judge import Judge

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
CAPTIONS = EXAMPLES / "captions.jsonl"  # 6 samples
PAIRS = EXAMPLES / "pairs.jsonl"  # 2 pairs


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> None:
    # json.dumps writes NaN / Infinity as JavaScript does: what an older capjudge wrote.
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def fleur_answer(bad: bool) -> Completion:
    """The answer "0.7" as a local backend reports it (exact digit log-probabilities); ``bad``: a
    log-probability of +5 among the digits."""
    digits = tuple([math.log(0.9), 5.0 if bad else math.log(0.05)] + [math.log(0.005)] * 8)
    steps = [TokenStep("0", -0.01), TokenStep(".", 0.0), TokenStep("7", -0.1, (("7", -0.1),), digits)]
    return Completion(text="0.7", steps=steps, logprobs=True)


def bad_then_good() -> Callable[[Request], Completion]:
    """A responder whose first answer to each request is bad and every later one good."""
    seen: set[str] = set()

    def respond(request: Request) -> Completion:
        key = repr(request.messages)
        first = key not in seen
        seen.add(key)
        return fleur_answer(bad=first)

    return respond


# -- 1. answers with invalid log-probabilities are never cached -------------------------------------
@pytest.mark.parametrize("capabilities", [Capabilities(batching=True), Capabilities(concurrency=2)], ids=["generate", "submit"])
def test_answer_with_bad_logprobs_is_not_cached_and_asked_again(tmp_path: Path, capabilities: Capabilities) -> None:
    inner = ScriptedBackend(bad_then_good(), capabilities=capabilities)
    sample = Sample(IMAGES / "cats.jpg", "two cats")
    with Judge("fleur", CachedBackend(inner, tmp_path / "cache")) as judge:
        first = judge.score(sample)
    assert first.status == "error" and "log-probability 5.0 (> 0)" in (first.error or "")
    calls = len(inner.calls)
    with Judge("fleur", CachedBackend(inner, tmp_path / "cache")) as judge:
        second = judge.score(sample)
    assert len(inner.calls) > calls, "the second run replayed the bad answer from the cache"
    assert second.status == "ok" and second.score is not None and 0.0 <= second.score <= 1.0, second.error
    assert not second.details.get("cached")
    # ... and the good answer is cached: a third run asks nothing.
    calls = len(inner.calls)
    with Judge("fleur", CachedBackend(inner, tmp_path / "cache")) as judge:
        third = judge.score(sample)
    assert len(inner.calls) == calls and third.status == "ok" and third.score == second.score


def test_response_cache_refuses_to_store_bad_logprobs(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    try:
        cache.set("bad", fleur_answer(bad=True))
        assert cache.set_many([("bad2", fleur_answer(bad=True)), ("good", fleur_answer(bad=False))]) == 1
        assert cache.get("bad") is None and cache.get("bad2") is None and "bad" not in cache
        good = cache.get("good")
        assert good is not None and good.text == "0.7" and good.cached
        assert cache.set_many([("plain", Completion(text="73"))]) == 1  # no log-probabilities: stored
    finally:
        cache.close()


def test_cli_rerun_with_cache_dir_asks_again_after_bad_logprobs(tmp_path: Path) -> None:
    # Through the CLI: scripted answers with a log-probability of +5 are refused; the same command
    # with --cache-dir (--overwrite: every row asked, through the cache), once the backend is
    # fixed, scores every row: nothing is replayed from the cache.
    import capjudge.backends.scripted as scripted

    out = tmp_path / "out.jsonl"
    args = ["score", "--method", "fleur", "--backend", "scripted:m", "--images", str(IMAGES), "--input", str(CAPTIONS), "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--quiet", "--overwrite"]
    state = {"bad": True}

    # One backend object for both runs: one identity, as a local model has.
    backend = ScriptedBackend(lambda _r: fleur_answer(bad=state["bad"]), model="m")

    def from_spec(spec: Any, **options: Any) -> ScriptedBackend:
        return backend

    mp = pytest.MonkeyPatch()
    mp.setattr(scripted, "from_spec", from_spec)
    try:
        main(args)
        assert all(r["status"] == "error" for r in read_jsonl(out))
        state["bad"] = False
        asked = len(backend.calls)
        assert main(args) == 0
        assert len(backend.calls) == asked + 6
    finally:
        mp.undo()
    records = read_jsonl(out)
    assert len(records) == 6 and all(r["status"] == "ok" and not r["details"].get("cached") for r in records), records


# -- 2. a re-run heals ok records that break the rule ----------------------------------------------
def test_record_problem() -> None:
    base = {"status": "ok", "scale": [0, 1], "details": {}}
    assert record_problem({**base, "score": 0.5}) is None
    assert record_problem({**base, "score": 1.0000004}) is None  # rounding: clipped when made
    assert "no score" in (record_problem({**base, "score": None}) or "")
    assert "not a finite number" in (record_problem({**base, "score": float("nan")}) or "")
    assert "outside the method's scale 0-1" in (record_problem({**base, "score": 1.01e22}) or "")
    assert record_problem({**base, "scale": [0, 100], "score": 500, "details": {"outside_scale": True}}) is None
    assert "not a finite number" in (record_problem({**base, "score": float("inf"), "details": {"outside_scale": True}}) or "")
    assert record_problem({"status": "error", "score": None}) is None
    pair = {"status": "ok", "caption_a": "a", "caption_b": "b"}
    assert record_problem({**pair, "verdict": "A"}) is None
    assert "no valid verdict" in (record_problem({**pair, "verdict": None}) or "")
    assert "caption B" in (record_problem({**pair, "verdict": "tie", "scores": [0.5, float("nan")]}) or "")


def test_rerun_asks_again_ok_records_without_a_valid_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    base = ["score", "--method", "vanilla", "--images", str(IMAGES), "--input", str(CAPTIONS), "--out", str(out), "--no-cache"]
    assert main([*base, "--backend", "scripted:The score is 73 out of 100.", "--quiet"]) == 0
    records = read_jsonl(out)
    assert [r["score"] for r in records] == [73.0] * 6 and records[0]["scale"] == [0.0, 100.0]
    # What an older capjudge could write: status ok with a null, NaN, infinite or off-scale score;
    # row 6 is out of scale but its method keeps such numbers (details.outside_scale): kept.
    records[1]["score"] = None
    records[2]["score"] = float("nan")
    records[3]["score"] = 1.01e22
    records[4]["score"] = float("-inf")
    records[5].update(score=500.0, details={**records[5]["details"], "outside_scale": True})
    write_jsonl(out, records)
    capsys.readouterr()
    # The same command, no --retry-errors: the broken rows are asked again, the others kept.
    assert main([*base, "--backend", "scripted:The score is 73 out of 100."]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    after = read_jsonl(out)
    assert [r["id"] for r in after] == [r["id"] for r in records]
    assert [r["score"] for r in after] == [73.0, 73.0, 73.0, 73.0, 73.0, 500.0], after
    assert all(r["status"] == "ok" for r in after)
    assert "4 record(s) said ok without a valid score or verdict" in shown, shown
    assert "row 2: the judge produced no score (None)" in shown, shown
    assert "2 record(s) kept from the results file" in shown, shown


def test_rerun_asks_again_pair_records_without_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pairs.jsonl"
    base = ["compare", "--images", str(IMAGES), "--input", str(PAIRS), "--out", str(out), "--no-cache"]
    assert main([*base, "--backend", "scripted:Answer 1", "--quiet"]) == 0
    records = read_jsonl(out)
    assert [r["verdict"] for r in records] == ["tie", "tie"]
    records[1]["verdict"] = None  # status stays "ok"
    write_jsonl(out, records)
    capsys.readouterr()
    assert main([*base, "--backend", "scripted:Answer 1"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    after = read_jsonl(out)
    assert [r["verdict"] for r in after] == ["tie", "tie"], after
    assert "1 record(s) said ok without a valid score or verdict" in shown and "no valid verdict (None)" in shown, shown


def test_batch_answer_with_bad_logprobs_is_not_stored_and_asked_again(tmp_path: Path) -> None:
    # --batch: a batch whose lines carry a log-probability of +5 is not collected as answers (run
    # store, response cache): its lines go into the next batch, which answers them well. (Already
    # so before this change: the OpenAI backend's body reader refuses such answers, and collect
    # takes them for malformed lines; this guards that path.)
    from openai_fake_server import Received, Reply, answering, running_server

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"s{i}", "image": "cats.jpg", "caption": f"caption {i}"}) + "\n" for i in range(2)))
    out = tmp_path / "b.jsonl"
    good_tokens = [("0", -0.01, [("0", -0.01)]), (".", 0.0, [(".", 0.0)]), ("8", -0.3, [("8", -0.3), ("7", -1.5)])]
    bad_tokens = [("0", -0.01, [("0", -0.01)]), (".", 0.0, [(".", 0.0)]), ("8", -0.3, [("8", 5.0), ("7", -1.5)])]
    good, bad = answering("0.8", tokens=good_tokens), answering("0.8", tokens=bad_tokens)
    count = {"n": 0}

    def respond(req: Received) -> Reply:
        count["n"] += 1
        return bad(req) if count["n"] <= 2 else good(req)

    with running_server(responder=respond) as server:
        argv = ["score", "--method", "fleur", "--backend", f"openai-compatible:{server.base_url}#gpt-4o", "--input", str(inp),
                "--images", str(IMAGES), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet",
                "--batch", "--wait", "--poll-interval", "0.05"]
        assert main(argv) == 0
        assert len(server.batches) == 2
    records = read_jsonl(out)
    assert [r["status"] for r in records] == ["ok", "ok"], records


def test_bad_answer_stored_by_an_older_capjudge_is_a_miss(tmp_path: Path) -> None:
    # An entry an older capjudge stored (a FLEUR answer with a log-probability of +5 among its top
    # alternatives): never served; the request is asked again.
    import base64
    import struct

    from capjudge.backends.cache import FORMAT_VERSION
    from capjudge.backends.datadisk import open_data_cache

    def packed(values: list[float]) -> str:
        return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")

    steps = [{"token": "0", "logprob": -0.01, "top_tokens": ["0"], "top_logprobs": packed([-0.01])},
             {"token": "7", "logprob": -0.1, "top_tokens": ["7", "8"], "top_logprobs": packed([-0.1, 5.0])}]
    completion = {**Completion(text="0.7", logprobs=True).to_dict(), "steps": steps}
    disk = open_data_cache(tmp_path / "cache")
    disk.set("old", {"v": FORMAT_VERSION, "completion": completion, "created": 0.0, "meta": {}})
    disk.set("fine", {"v": FORMAT_VERSION, "completion": {**completion, "steps": steps[:1]}, "created": 0.0, "meta": {}})
    disk.close()
    cache = ResponseCache(tmp_path / "cache")
    try:
        hit = cache.get("fine")
        assert hit is not None and hit.steps, "control: a sound entry in this format is served"
        assert cache.get("old") is None
    finally:
        cache.close()
