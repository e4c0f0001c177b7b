"""The G-Eval sampling estimate (capjudge.judges.sampling): asked by the judge, through any backend,
for answers of a smoothing method that carry no log-probabilities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion, GenerationConfig, Message, Request
from capjudge.backends.openai import OpenAIBackend
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.judges.sampling import SamplingEstimate, estimate_by_sampling, sampling_requests
from openai_fake_server import (
    FakeOpenAIServer,
    Received,
    Reply,
    chat_body,
    default_responder,
    running_server,
)

KEY = "sk-test-SECRET-7f3a9c2e1d"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 5.0}
CATS = Path(__file__).resolve().parents[1] / "examples" / "images" / "cats.jpg"


def compat_spec(srv: FakeOpenAIServer) -> str:
    return f"openai-compatible:{srv.base_url}#fake-model"


def req(text: str, *, top: int = 0) -> Request:
    return Request((Message("user", text),), GenerationConfig(top_logprobs=top))


def test_estimate_by_sampling_when_logprobs_refused() -> None:
    answers = iter(["0.80", "0.60", "0.80", "0.60"])

    def responder(r: Received) -> Reply:
        if r.body.get("temperature") == 1.0:
            return Reply(body=chat_body(next(answers)))
        return default_responder(r)

    options = {"api_key": KEY, **FAST, "estimate_by_sampling": 4}  # the backend option, as --backend-opt gives it
    with running_server(expected_key=KEY, refuse_logprobs=True, responder=responder) as srv, Judge("fleur", compat_spec(srv), backend_options=options) as judge:
        assert judge.estimate_samples == 4 and "estimate_by_sampling" not in judge.backend.identity()
        r = judge.score(Sample(CATS, "two cats"))
        est = r.details["backend_meta"]["sampling_estimate"]
        assert est["mean"] == pytest.approx(0.7) and est["calls"] == 4 and est["n"] == 4
        assert est["first"][8] == pytest.approx(0.5) and est["first"][6] == pytest.approx(0.5)
        assert r.details["backend_meta"]["logprobs_refused"] is True
        assert r.ok and r.smoothed and r.score == pytest.approx(0.7) and "sampling 4" in r.details["smoothing"]
        sampled = [q for q in srv.received if q.body.get("temperature") == 1.0]
        assert len(sampled) == 4 and all("logprobs" not in q.body for q in sampled)
    # The helper also works on any backend (here: through a cache, so samples are cached by index).
    with running_server(expected_key=KEY) as srv:
        b = load_backend(compat_spec(srv), api_key=KEY, **FAST)
        assert isinstance(b, OpenAIBackend)
        with b:
            est2 = estimate_by_sampling(b, req("b"), n=3)
        assert isinstance(est2, SamplingEstimate) and est2.calls == 3 and est2.mean is not None


def test_missing_logprobs_count_as_none() -> None:
    """A server that answers without log-probabilities although asked (``transformers serve``)."""
    with running_server(expected_key=KEY, drop_logprobs=True) as srv, Judge("fleur", compat_spec(srv), backend_options={"api_key": KEY, **FAST}, estimate_by_sampling=3) as judge:
        r = judge.score(Sample(CATS, "two cats"))
        assert r.ok and r.smoothed and r.details["backend_meta"]["sampling_estimate"]["n"] == 3
        assert len(srv.received) == 4


def scripted_with_samples(answers: list[str], main: str = "0.8") -> ScriptedBackend:
    pending = iter(answers)

    def respond(r: Request) -> str:
        return next(pending) if r.sample_index is not None else main

    return ScriptedBackend(respond)


def test_the_estimate_works_on_a_local_backend(tmp_path: Any) -> None:
    backend = scripted_with_samples(["0.80", "0.60", "0.80", "0.60"])
    with Judge("fleur", backend, estimate_by_sampling=4, cache_dir=tmp_path) as judge:
        r = judge.score(Sample(CATS, "two cats"))
    assert r.ok and r.smoothed and r.score == pytest.approx(0.7) and r.raw_score == pytest.approx(0.8)
    est = r.details["backend_meta"]["sampling_estimate"]
    assert est["mean"] == pytest.approx(0.7) and est["calls"] == 4 and est["n"] == 4 and est["errors"] == 0
    assert est["first"][8] == pytest.approx(0.5) and est["first"][6] == pytest.approx(0.5)
    assert r.details["smoothing"] == "estimated by sampling 4 answers (no log-probabilities)"
    main, *samples = backend.calls
    assert main.config.top_logprobs > 0 and main.sample_index is None
    assert [q.sample_index for q in samples] == [0, 1, 2, 3]
    assert all(q.config.temperature == 1.0 and q.config.top_logprobs == 0 for q in samples)
    # A re-run: every sample is cached by its index, the estimate is the same.
    with Judge("fleur", backend, estimate_by_sampling=4, cache_dir=tmp_path) as judge:
        again = judge.score(Sample(CATS, "two cats"))
    assert len(backend.calls) == 5 and again.score == r.score
    assert again.details["cached"] and again.details["backend_meta"]["sampling_estimate"]["calls"] == 0
    assert again.details["smoothing"] == r.details["smoothing"]


def test_the_backend_option_works_on_every_backend_kind() -> None:
    with Judge("fleur", "scripted:0.8", backend_options={"estimate_by_sampling": "3"}) as judge:
        r = judge.score(Sample(CATS, "two cats"))
    assert judge.estimate_samples == 3
    assert r.smoothed and r.details["backend_meta"]["sampling_estimate"]["n"] == 3 and r.score == pytest.approx(0.8)


def test_no_estimate_unless_asked_or_needed() -> None:
    backend = scripted_with_samples([])
    with Judge("fleur", backend) as judge:  # not asked: the raw score, as before
        r = judge.score(Sample(CATS, "two cats"))
    assert not r.smoothed and "no token probabilities" in r.details["smoothing"] and len(backend.calls) == 1
    with Judge("vanilla", backend, estimate_by_sampling=4) as judge:  # a method that reads no log-probabilities
        judge.score(Sample(CATS, "two cats"))
    assert len(backend.calls) == 2


def test_an_estimate_the_answer_already_carries_is_kept() -> None:
    """An answer cached by an older capjudge, whose backend made the estimate: no samples asked."""
    meta = {"sampling_estimate": {"mean": 0.95, "first": None, "second": None, "calls": 4}}
    backend = ScriptedBackend(lambda _r: Completion(text="0.8", model="m", meta=meta))
    with Judge("fleur", backend, estimate_by_sampling=4) as judge:
        r = judge.score(Sample(CATS, "a cat"))
    assert r.score == pytest.approx(0.95) and len(backend.calls) == 1


def test_sampling_requests_differ_only_in_index_and_decoding() -> None:
    base = req("x", top=5)
    got = sampling_requests(base, 3)
    assert [r.sample_index for r in got] == [0, 1, 2]
    assert all(r.messages == base.messages and r.config.temperature == 1.0 and r.config.top_logprobs == 0 for r in got)
