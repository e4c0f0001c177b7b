"""Proprietary reasoning models (o-series, gpt-5) against a local server that behaves like their API
(``openai_fake_server.reasoning_api``): hidden reasoning spends ``max_completion_tokens``, and
``max_tokens`` / ``temperature`` / ``top_p`` / penalties / log-probabilities are refused with 400.

What this proves (issue 22, item 1): ``openai:gpt-5-mini`` judges ``vanilla`` and ``fleur`` on the
bundled examples at default settings with every record ok; a tiny ``reasoning_budget`` makes every
record an error that says the budget ran out and names the option (not an unparsable answer, not
retried); the bodies carry ``max_completion_tokens`` = answer budget + reasoning budget and none of
the refused fields; reasoning tokens show in the usage counts, the records and the cost; the cache
tells budgets apart; batch bodies follow the same rules; other models are sent what they were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import GenerationConfig, Message, Request
from capjudge.backends.cache import ResponseCache
from capjudge.backends.openai import OpenAIBackend
from capjudge.backends.openai.caps import REASONING_BUDGETS, lookup_caps
from capjudge.backends.openai.wire import ReasoningBudgetExceeded
from capjudge.backends.registry import check_backend
from capjudge.cli import main
from capjudge.judges.judge import Judge
from capjudge.prompts.registry import get_method
from openai_fake_server import REASONING_THINK, FakeOpenAIServer, reasoning_api, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
KEY = "sk-test-REASONING-5b1c0d"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 5.0}
PRICE = {"input": 0.25, "output": 2.0}  # gpt-5-mini, USD per 1M tokens
REFUSED = ("max_tokens", "temperature", "top_p", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty", "repetition_penalty")


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with running_server(responder=reasoning_api()) as srv:
        yield srv


def rows() -> list[dict[str, Any]]:
    return [json.loads(x) for x in (EXAMPLES / "captions.jsonl").read_text().splitlines() if x.strip()]


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def score_cli(srv: FakeOpenAIServer, tmp: Path, method: str, *opts: str, name: str = "out") -> tuple[int, list[dict[str, Any]]]:
    prices = tmp / "prices.json"
    prices.write_text(json.dumps({"gpt-5-mini": PRICE}))
    out = tmp / f"{name}.jsonl"
    argv = [
        "score", "--method", method, "--backend", "openai:gpt-5-mini", "--backend-opt", f"base_url={srv.base_url}",
        "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out),
        "--no-cache", "--prices", str(prices),
    ]
    for o in opts:
        argv += ["--backend-opt", o]
    return main(argv), read(out)


def chat_bodies(srv: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r.body for r in srv.received if r.path.endswith("/chat/completions")]


@pytest.mark.parametrize("method", ["vanilla", "fleur"])
def test_cli_judges_at_default_settings(server: FakeOpenAIServer, tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    rc, res = score_cli(server, tmp_path, method)
    assert rc == 0
    assert len(res) == len(rows()) and all(r["status"] == "ok" for r in res), [r.get("error") for r in res]
    assert all(isinstance(r["score"], float) for r in res)
    answer_budget = get_method(method).max_new_tokens
    bodies = chat_bodies(server)
    assert len(bodies) == len(res)  # no request asked twice (nothing refused)
    for body in bodies:
        assert body["max_completion_tokens"] == answer_budget + REASONING_BUDGETS[None]
        assert not any(k in body for k in REFUSED) and "reasoning_effort" not in body
    think = REASONING_THINK["medium"]
    for r in res:
        usage = r["details"]["usage"]
        assert usage["reasoning_tokens"] == think and usage["completion_tokens"] > think  # inside, not added
    if method == "fleur":  # no log-probabilities: FLEUR's raw score, as for any model without them
        assert all(r["smoothed"] is False and r["score"] == r["raw_score"] for r in res)
        assert all("no token probabilities" in r["details"]["smoothing"] for r in res)
        assert all(r["details"]["backend_meta"]["logprobs_refused"] for r in res)
    printed = capsys.readouterr().out
    completion = sum(r["details"]["usage"]["completion_tokens"] for r in res)
    prompt = sum(r["details"]["usage"]["prompt_tokens"] for r in res)
    assert re.search(rf"tokens in/out\s*│\s*{prompt}/{completion}\s*│", printed)
    assert re.search(rf"of which reasoning\s*│\s*{think * len(res)}\s*│", printed)
    cost = (prompt * PRICE["input"] + completion * PRICE["output"]) / 1e6  # reasoning billed once, as output
    assert f"{cost:.4f}" in printed
    assert KEY not in printed and all(KEY not in json.dumps(r) for r in res)


@pytest.mark.parametrize("method", ["vanilla", "fleur"])
def test_a_tiny_reasoning_budget_is_a_clear_error_per_record(server: FakeOpenAIServer, tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    _, res = score_cli(server, tmp_path, method, "reasoning_budget=10")
    assert res and all(r["status"] == "error" and r["score"] is None for r in res)
    budget = get_method(method).max_new_tokens + 10
    for r in res:
        err = r["error"]
        assert "reasoning spent the whole token budget" in err and f"max_completion_tokens={budget}" in err
        assert f"{budget} tokens, {budget} of them reasoning" in err
        assert "--backend-opt reasoning_budget=" in err and "reasoning_effort" in err
        assert "pars" not in err.lower()  # never an unparsable-answer error
    assert len(chat_bodies(server)) == len(res)  # not retried
    assert all(b["max_completion_tokens"] == budget for b in chat_bodies(server))


def test_python_api_effort_and_budget(server: FakeOpenAIServer) -> None:
    opts = {"base_url": server.base_url, "api_key": KEY, **FAST}
    with Judge("vanilla", "openai:gpt-5-mini", images_root=EXAMPLES / "images", backend_options={**opts, "reasoning_effort": "high"}) as judge:
        res = list(judge.score_many(rows()))
    assert all(r.status == "ok" for r in res)
    body = chat_bodies(server)[0]
    assert body["reasoning_effort"] == "high" and body["max_completion_tokens"] == get_method("vanilla").max_new_tokens + REASONING_BUDGETS["high"]
    assert res[0].details["usage"]["reasoning_tokens"] == REASONING_THINK["high"]
    server.reset()
    # high effort thinks 7000 tokens: a budget of 5000 runs out
    with Judge("vanilla", "openai:gpt-5-mini", images_root=EXAMPLES / "images", backend_options={**opts, "reasoning_effort": "high", "reasoning_budget": 5000}) as judge:
        res = list(judge.score_many(rows()[:1]))
    assert res[0].status == "error" and "reasoning_effort=high" in (res[0].error or "")


def test_backend_error_type_and_usage_counted(server: FakeOpenAIServer) -> None:
    request = Request((Message("user", "Rate it from 0 to 100."),), GenerationConfig(max_new_tokens=16))
    with OpenAIBackend("o4-mini", base_url=server.base_url, api_key=KEY, reasoning_budget=100, prices={"o4-mini": {"input": 1.0, "output": 4.0}}, **FAST) as b:
        out = b.generate([request])[0]
        assert isinstance(out, ReasoningBudgetExceeded) and not out.resumable
        summary = b.usage.summary()
    # the call was billed: 116 tokens of output, all of them reasoning
    assert summary["completion_tokens"] == 116 and summary["reasoning_tokens"] == 116 and summary["calls"] == 1
    assert summary["cost_usd"] == pytest.approx((120 * 1.0 + 116 * 4.0) / 1e6)
    assert summary["by_model"]["o4-mini"]["reasoning_tokens"] == 116


def test_cache_identity_and_options(server: FakeOpenAIServer) -> None:
    def ident(**o: Any) -> dict[str, Any]:
        with OpenAIBackend("gpt-5-mini", base_url=server.base_url, api_key=KEY, **o) as b:
            return b.identity()

    base = ident()
    assert base["reasoning"] is True and base["reasoning_budget"] == REASONING_BUDGETS[None] and base["reasoning_effort"] is None
    assert ident(reasoning_budget=100) != base and ident(reasoning_effort="low") != base
    assert ident(reasoning_effort="low")["reasoning_budget"] == REASONING_BUDGETS["low"]
    with OpenAIBackend("gpt-4o", base_url=server.base_url, api_key=KEY) as b:
        assert "reasoning" not in b.identity()  # other models' cache keys are unchanged
    # the name table and the override
    assert all(lookup_caps("openai", m).reasoning for m in ("o1", "o3-mini", "o3-pro", "o4-mini-2025-04-16", "gpt-5", "gpt-5-nano", "gpt-5.1"))
    assert not any(lookup_caps("openai", m).reasoning for m in ("gpt-4o", "gpt-4.1-mini", "gpt-50", "my-o3"))
    with OpenAIBackend("gpt-5-mini", base_url=server.base_url, api_key=KEY, reasoning=False) as b:
        body = b.request_body(Request((Message("user", "x"),), GenerationConfig(max_new_tokens=16)))
    assert body["max_tokens"] == 16 and "max_completion_tokens" not in body
    for bad in ({"reasoning_effort": "extreme"}, {"reasoning_budget": "-1"}, {"reasoning": "perhaps"}):
        with pytest.raises(ValueError):
            check_backend("openai:gpt-5-mini", **bad)
    with pytest.raises(ValueError, match="reasoning models"):
        OpenAIBackend("gpt-4o", base_url=server.base_url, api_key=KEY, reasoning_effort="low")
    with pytest.raises(ValueError, match="refuses log-probabilities"):
        OpenAIBackend("o3", base_url=server.base_url, api_key=KEY, logprobs=True)


def test_openai_compatible_reasoning_override(server: FakeOpenAIServer) -> None:
    """A reasoning model behind an OpenAI-protocol gateway: reasoning=true gives it the same rules
    (no penalty fields, no log-probabilities, the reasoning budget)."""
    with OpenAIBackend("my-thinker", kind="openai-compatible", base_url=server.base_url, reasoning=True, reasoning_budget=3000, **FAST) as b:
        out = b.generate_one(Request((Message("user", "Rate it from 0 to 100."),), GenerationConfig(max_new_tokens=32, top_logprobs=20)))
    assert out.text and out.meta["logprobs_refused"] and out.usage is not None and out.usage.reasoning_tokens == REASONING_THINK["medium"]
    body = chat_bodies(server)[0]
    assert body["max_completion_tokens"] == 3032 and not any(k in body for k in REFUSED)


def test_azure_reasoning_deployment(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIBackend("judge-deploy", kind="azure", azure_endpoint=server.endpoint, api_version="2025-04-01-preview", api_key=KEY, model_name="o4-mini", reasoning_effort="low", **FAST) as b:
        out = b.generate_one(Request((Message("user", "Rate it from 0 to 100."),), GenerationConfig(max_new_tokens=32, top_logprobs=5)))
    got = server.received[0]
    assert got.deployment == "judge-deploy" and out.text
    assert got.body["max_completion_tokens"] == 32 + REASONING_BUDGETS["low"] and got.body["reasoning_effort"] == "low"
    assert not any(k in got.body for k in REFUSED)


def test_batch_bodies_follow_the_same_rules(server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    out = tmp_path / "batch.jsonl"
    argv = [
        "score", "--method", "fleur", "--backend", "openai:gpt-5-mini", "--backend-opt", f"base_url={server.base_url}",
        "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out),
        "--cache-dir", str(tmp_path / "cache"), "--batch", "--wait",
    ]
    main([*argv, "--backend-opt", "reasoning_budget=10"])
    res = read(out)
    assert res and all(r["status"] == "error" and "reasoning spent the whole token budget" in r["error"] for r in res)
    lines = server.batch_line_counts
    assert lines and all(n == 1 for n in lines.values())
    uploaded = [f["data"] for f in server.files.values() if f.get("purpose") == "batch"]
    bodies = [json.loads(line)["body"] for data in uploaded for line in (data.decode() if isinstance(data, bytes) else data).splitlines() if line.strip()]
    assert bodies and all(b["max_completion_tokens"] == get_method("fleur").max_new_tokens + 10 and not any(k in b for k in REFUSED) for b in bodies)
    assert len(ResponseCache(tmp_path / "cache")) == 0  # an empty answer is never kept


def test_the_cache_tells_reasoning_settings_apart(server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    n = len(rows())

    def run(name: str, *opts: str) -> list[dict[str, Any]]:
        out = tmp_path / f"{name}.jsonl"
        argv = [
            "score", "--method", "vanilla", "--backend", "openai:gpt-5-mini", "--backend-opt", f"base_url={server.base_url}",
            "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--quiet",
        ]
        for o in opts:
            argv += ["--backend-opt", o]
        main(argv)
        return read(out)

    run("a")
    assert len(chat_bodies(server)) == n
    assert all(r["status"] == "ok" for r in run("b"))
    assert len(chat_bodies(server)) == n  # same settings: answered from the cache
    run("c", "reasoning_effort=low")
    assert len(chat_bodies(server)) == 2 * n
    run("d", "reasoning_budget=9000")
    assert len(chat_bodies(server)) == 3 * n
    assert len(ResponseCache(tmp_path / "cache")) == 3 * n
    small = run("e", "reasoning_budget=10")
    assert len(chat_bodies(server)) == 4 * n and all(r["status"] == "error" for r in small)
    assert len(ResponseCache(tmp_path / "cache")) == 3 * n  # failures are not cached


def test_usage_of_other_models_is_written_as_before() -> None:
    from capjudge.backends.base import Completion
    from capjudge.backends.usage import Usage, UsageTracker, usage_from_report

    plain = usage_from_report({"prompt_tokens": 10, "completion_tokens": 3})
    assert plain == Usage(10, 3) and plain.to_dict() == {"prompt_tokens": 10, "completion_tokens": 3}
    assert Completion("x", usage=plain).to_dict()["usage"] == {"prompt_tokens": 10, "completion_tokens": 3}
    tracker = UsageTracker()
    tracker.settle(0.0, "gpt-4o", plain, 0.0)
    summary = tracker.summary()
    assert "reasoning_tokens" not in summary and "reasoning_tokens" not in summary["by_model"]["gpt-4o"]
    thought = usage_from_report({"prompt_tokens": 10, "completion_tokens": 300, "completion_tokens_details": {"reasoning_tokens": 290}})
    assert thought.reasoning_tokens == 290 and thought.total_tokens == 310  # inside completion_tokens
    assert Completion.from_dict(Completion("x", usage=thought).to_dict()).usage == thought  # the cache keeps them
