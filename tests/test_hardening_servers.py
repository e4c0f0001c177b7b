"""Hostile servers cost one row (issue 20, "Servers"): log-probabilities that are none, usage that
is no token count, and a server that trickles its answer.

- A log-probability above 0, NaN, infinite or not a number, from a server or any backend, makes
  that sample an error record naming the value and the token; it is never a score.
- A record with status ``ok`` has a finite score on the method's scale (pairs: a verdict).
- Negative or non-numeric usage counts are ignored with one warning: no cost is negative, no row lost.
- ``timeout=`` bounds a whole request: a server sending a byte a second is cut off at the timeout.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import (
    BackendError,
    Completion,
    GenerationConfig,
    Message,
    Request,
    TokenStep,
)
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.backends.usage import PriceTable, Usage, usage_from_report
from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED
from capjudge.data.types import Sample
from capjudge.judges.invariants import checked_score, pair_problem
from capjudge.judges.judge import Judge
from openai_fake_server import answering, running_server, trickling_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
CAPTIONS = EXAMPLES / "captions.jsonl"  # 6 samples
PAIRS = EXAMPLES / "pairs.jsonl"  # 2 pairs


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fleur_tokens(bad: Any = None, *, chosen: Any = -0.3) -> list[tuple[str, Any, list[tuple[str, Any]]]]:
    """The tokens of the answer "0.85"; ``bad`` replaces the log-probability of an alternative at
    token 3 (the first decimal), ``chosen`` is the log-probability of token 3 itself."""
    third = [("8", -0.3 if bad is None else bad), ("7", -1.5)]
    return [("0", -0.01, [("0", -0.01)]), (".", 0.0, [(".", 0.0)]), ("8", chosen, third), ("5", -0.7, [("5", -0.7), ("6", -0.7)])]


def score_cli(tmp_path: Path, base_url: str, method: str, *extra: str, command: str = "score", inp: Path = CAPTIONS) -> tuple[int, list[dict[str, Any]]]:
    out = tmp_path / f"{command}-{method}.jsonl"
    rc = main([command, "--method", method, "--backend", f"openai-compatible:{base_url}#m", "--images", str(IMAGES),
               "--input", str(inp), "--out", str(out), "--no-cache", "--quiet", "--overwrite",
               "--backend-opt", "retry_base_delay=0.01", "--backend-opt", "max_retries=1", *extra])
    return rc, read_jsonl(out)


def assert_ok_records_are_sound(records: list[dict[str, Any]], scale: tuple[float, float]) -> None:
    """Whatever the server sent: an ok record has a finite score on the scale."""
    for r in records:
        if r["status"] == "ok":
            assert isinstance(r["score"], (int, float)) and math.isfinite(r["score"]) and scale[0] <= r["score"] <= scale[1], r


# -- item 7: log-probabilities that are none --------------------------------------------------------
@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (5.0, "log-probability 5.0 (> 0)"),
        (50.0, "log-probability 50.0 (> 0)"),  # exp(50): a score of 1e21 on a 0-1 scale today
        (float("nan"), "log-probability NaN (not a number)"),
        (float("inf"), "log-probability inf (> 0)"),
        ("abc", "log-probability 'abc' (not a number)"),
    ],
)
def test_fleur_bad_logprob_is_an_error_record_naming_value_and_token(tmp_path: Path, bad: Any, named: str) -> None:
    with running_server(responder=answering("0.85", tokens=fleur_tokens(bad))) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur")
        asked = srv.count
    assert rc == EXIT_ALL_FAILED
    assert len(records) == 6 and asked == 6  # not retried: the answer came, it is bad
    for r in records:
        assert r["status"] == "error" and r["score"] is None, r
        assert named in r["error"] and "at token 3 '8'" in r["error"] and "the server returned" in r["error"], r["error"]
        assert r["error"].startswith(f"sample {r['id']}: ")


def test_fleur_control_valid_logprobs_still_score(tmp_path: Path) -> None:
    # The same answer with log-probabilities that are log-probabilities: smoothed, on the scale.
    with running_server(responder=answering("0.85", tokens=fleur_tokens())) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur")
    assert rc == 0 and all(r["status"] == "ok" and r["smoothed"] for r in records)
    assert_ok_records_are_sound(records, (0.0, 1.0))


def test_fleur_alternatives_adding_up_to_more_than_one_are_refused(tmp_path: Path) -> None:
    # Every digit at log-probability 0 (each a probability of 1): each value is one, together they
    # are no distribution (the smoothed "score" would be 4.5 on a 0-1 scale).
    every_digit = [(str(d), 0.0) for d in range(10)]
    tokens = [("0", -0.01, [("0", -0.01)]), (".", 0.0, [(".", 0.0)]), ("8", 0.0, every_digit)]
    with running_server(responder=answering("0.8", tokens=tokens)) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur")
    assert rc == EXIT_ALL_FAILED and all(r["status"] == "error" for r in records)
    assert all("add up to 10 (> 1) at token 3 '8'" in r["error"] for r in records), records[0]["error"]


def test_fleur_infinite_chosen_token_logprob_is_refused(tmp_path: Path) -> None:
    with running_server(responder=answering("0.85", tokens=fleur_tokens(chosen=float("-inf")))) as srv:
        _, records = score_cli(tmp_path, srv.base_url, "fleur")
    assert all(r["status"] == "error" and "-inf (probability 0 for the token the model wrote) at token 3" in r["error"] for r in records)


@pytest.mark.parametrize("method", ["vanilla", "gpt4v-grade"])
def test_score_methods_refuse_an_answer_with_bad_logprobs(tmp_path: Path, method: str) -> None:
    # These methods ask for no log-probabilities; a server that sends broken ones anyway is
    # broken, and its answer is not trusted either.
    tokens = [("Score", -0.1, []), (":", -0.1, []), (" 80", 7.5, [])]
    with running_server(responder=answering("Score: 80", tokens=tokens)) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, method)
    assert rc == EXIT_ALL_FAILED
    assert all(r["status"] == "error" and "log-probability 7.5 (> 0) at token 3 ' 80'" in r["error"] for r in records), records[0]
    with running_server(responder=answering("Score: 80", tokens=[("Score", -0.1, []), (":", -0.1, []), (" 80", -0.2, [])])) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, method)
    assert rc == 0 and all(r["status"] == "ok" and r["score"] == 80.0 for r in records)


def test_pairwise_method_refuses_an_answer_with_bad_logprobs(tmp_path: Path) -> None:
    tokens = [("Answer", -0.1, []), (" 1", float("nan"), [])]
    with running_server(responder=answering("Answer 1", tokens=tokens)) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "gpt4v-pairwise", command="compare", inp=PAIRS)
    assert rc == EXIT_ALL_FAILED and len(records) == 2
    for r in records:
        assert r["status"] == "error" and r["verdict"] is None
        assert "log-probability NaN (not a number) at token 2 ' 1'" in r["error"], r["error"]


def test_comparison_by_grading_refuses_bad_logprobs(tmp_path: Path) -> None:
    # Today both captions get a "score" of ~1e21 and the pair is an ok tie.
    with running_server(responder=answering("0.85", tokens=fleur_tokens(50.0))) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur", "--mode", "grading", command="compare", inp=PAIRS)
    assert rc == EXIT_ALL_FAILED and len(records) == 2
    for r in records:
        assert r["status"] == "error" and r["verdict"] is None
        assert "log-probability 50.0 (> 0)" in r["error"], r["error"]


def test_local_backend_answers_are_checked_too() -> None:
    # A local backend (as HF / llama.cpp report them: exact digit log-probabilities) with a NaN
    # among its digits: the judge refuses it wherever it comes from (an old cache entry included).
    digits = tuple([math.log(0.9)] + [float("nan")] + [math.log(0.01)] * 8)
    steps = [TokenStep("0", -0.01), TokenStep(".", 0.0), TokenStep("7", -0.1, (("7", -0.1),), digits)]
    backend = ScriptedBackend(lambda _r: Completion(text="0.7", steps=steps, logprobs=True))
    with Judge("fleur", backend) as judge:
        result = judge.score(Sample(IMAGES / "cats.jpg", "two cats"))
    assert result.status == "error" and result.score is None
    assert result.error is not None and "the backend returned log-probability NaN (not a number) for alternative 'digit 1' at token 3 '7'" in result.error


@pytest.mark.parametrize(("mean", "named"), [(7.0, "score 7, outside the method's scale 0-1"), (float("nan"), "score nan, which is not a finite number")])
def test_ok_record_always_has_a_finite_score_on_the_scale(mean: float, named: str) -> None:
    # A score that reaches the record by another road than log-probabilities (here a sampling
    # estimate, as an API backend without log-probabilities sends): the record's invariant holds.
    backend = ScriptedBackend(lambda _r: Completion(text="0.7", meta={"sampling_estimate": {"mean": mean, "calls": 5}}))
    with Judge("fleur", backend) as judge:
        result = judge.score(Sample(IMAGES / "cats.jpg", "two cats"))
    assert result.status == "error" and result.score is None
    assert result.error is not None and named in result.error and result.error.startswith("sample 0: ")


def test_invariant_functions() -> None:
    assert checked_score(0.5, (0.0, 1.0)) == (0.5, None)
    assert checked_score(1.0000004, (0.0, 1.0)) == (1.0, None)  # float32 rounding: clipped
    assert checked_score(1.01e22, (0.0, 1.0))[0] is None
    assert checked_score(None, (0.0, 1.0))[0] is None
    assert checked_score(250.0, (0.0, 100.0), outside_ok=True) == (250.0, None)  # first-integer methods
    assert checked_score(float("inf"), (0.0, 100.0), outside_ok=True)[0] is None
    assert pair_problem("A") is None and pair_problem("tie", (0.5, 0.5)) is None
    assert pair_problem(None) is not None and pair_problem("maybe") is not None
    assert pair_problem("tie", (float("nan"), 0.5)) is not None


# -- item 7: usage that is no token count -----------------------------------------------------------
@pytest.mark.parametrize("usage", [{"prompt_tokens": -5000, "completion_tokens": 4}, {"prompt_tokens": "lots", "completion_tokens": 4}])
def test_bad_usage_never_makes_a_cost_negative_nor_loses_a_row(tmp_path: Path, capsys: pytest.CaptureFixture[str], usage: dict[str, Any]) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1000.0, "output": 1000.0}}))
    with running_server(responder=answering("0.85", tokens=fleur_tokens(), usage=usage)) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur", "--prices", str(prices))
    err = capsys.readouterr().err
    assert rc == 0 and len(records) == 6 and all(r["status"] == "ok" for r in records)
    costs = [r["details"]["backend_meta"]["cost_usd"] for r in records]
    assert costs == [pytest.approx(4 * 1000.0 / 1e6)] * 6  # the completion tokens only, never below 0
    assert err.count("which is not a token count") == 1, err  # said once for the run
    assert "prompt_tokens=" in err


@pytest.mark.parametrize("count", [1e30, 10**30, 100_000_001])
def test_absurd_usage_is_ignored_and_the_budget_still_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str], count: Any) -> None:
    # 1e30 tokens would cost 4e24 USD: ignored with a warning, as a negative count is (issue #30, item 19).
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1000.0, "output": 1000.0}}))
    usage = {"prompt_tokens": count, "completion_tokens": 4}
    with running_server(responder=answering("0.85", tokens=fleur_tokens(), usage=usage)) as srv:
        rc, records = score_cli(tmp_path, srv.base_url, "fleur", "--prices", str(prices), "--max-cost", "100")
    err = capsys.readouterr().err
    assert rc == 0 and len(records) == 6 and all(r["status"] == "ok" for r in records), [r.get("error") for r in records]
    assert [r["details"]["backend_meta"]["cost_usd"] for r in records] == [pytest.approx(4 * 1000.0 / 1e6)] * 6
    assert all(r["details"]["usage"]["prompt_tokens"] == 0 for r in records)
    assert err.count("which is more than one call can count (over 100,000,000): ignored") == 1, err


def test_token_counts_up_to_the_bound_are_kept() -> None:
    assert usage_from_report({"prompt_tokens": 100_000_000, "completion_tokens": 2.0}) == Usage(prompt_tokens=100_000_000, completion_tokens=2)
    assert usage_from_report({"prompt_tokens": float("inf"), "completion_tokens": float("nan")}) == Usage()


def test_prices_never_go_below_zero_for_stored_negative_counts() -> None:
    # A usage read back from an old cache entry with a negative count.
    assert PriceTable({"m": {"input": 1.0, "output": 1.0}}).cost("m", Usage(prompt_tokens=-10**9, completion_tokens=0)) == 0.0


# -- item 8: the timeout bounds the whole request ---------------------------------------------------
def test_trickling_server_is_cut_at_the_timeout(tmp_path: Path) -> None:
    inp = tmp_path / "one.jsonl"
    inp.write_text(json.dumps({"id": "t1", "image": "cats.jpg", "caption": "two cats"}) + "\n")
    out = tmp_path / "out.jsonl"
    # A body of 30 bytes at one a second: with a per-read timeout of 2 s the request lasts 30 s.
    with trickling_server(interval=1.0, body_size=30) as srv:
        t0 = time.monotonic()
        rc = main(["score", "--method", "vanilla", "--backend", f"openai-compatible:{srv.base_url}#m", "--images", str(IMAGES),
                   "--input", str(inp), "--out", str(out), "--no-cache", "--quiet",
                   "--backend-opt", "timeout=2", "--backend-opt", "max_retries=0"])
        wall = time.monotonic() - t0
        connections = srv.connections
    assert wall < 10.0, f"the request lasted {wall:.1f} s with timeout=2"
    assert connections == 1
    (record,) = read_jsonl(out)
    assert record["status"] == "error" and "timed out" in record["error"] and "timeout=2 s" in record["error"], record["error"]
    assert rc == 3  # a timeout is a backend failure a re-run may cure


def test_trickling_server_expiry_is_retried_as_a_timeout(tmp_path: Path) -> None:
    request = Request((Message("user", "rate it"),), GenerationConfig(max_new_tokens=4))
    with trickling_server(interval=0.5, body_size=60) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, timeout=1.0, max_retries=1, retry_base_delay=0.01, retry_max_delay=0.02)
        t0 = time.monotonic()
        (out,) = backend.generate([request])
        wall = time.monotonic() - t0
        backend.close()
        connections = srv.connections
    assert isinstance(out, BackendError) and "timed out (after 2 attempts)" in str(out), out
    assert connections == 2 and wall < 8.0


def test_tokenize_call_is_bounded_by_the_timeout() -> None:
    request = Request((Message("user", "rate it"),), GenerationConfig(max_new_tokens=4))
    with trickling_server(interval=1.0, body_size=30) as srv:
        backend = load_backend(f"openai-compatible:{srv.base_url}#m", lazy=False, timeout=2.0, max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(BackendError, match="/tokenize.*timeout=2 s"):
            backend.prompt_tokens(request)
        wall = time.monotonic() - t0
        backend.close()
    assert wall < 10.0
