"""The OpenAI-protocol backend against a scripted local server (no internet)."""

from __future__ import annotations

import io
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import BackendError, Completion, GenerationConfig, Message, Request
from capjudge.backends.cache import CachedBackend, ResponseCache
from capjudge.backends.openai import OpenAIBackend
from capjudge.backends.openai.caps import lookup_caps
from capjudge.backends.openai.retry import RetryPolicy, wait_seconds
from capjudge.backends.registry import load_backend
from capjudge.backends.usage import BudgetExceeded, PriceTable, image_tokens
from capjudge.data.images import load_image
from capjudge.judges.smoothing import expected_digit_score, smooth_from_steps
from openai_fake_server import (
    FakeOpenAIServer,
    Received,
    Reply,
    chat_body,
    default_responder,
    error_body,
    running_server,
)

KEY = "sk-test-SECRET-7f3a9c2e1d"
FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 5.0}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with running_server(expected_key=KEY) as srv:
        yield srv


def compat(srv: FakeOpenAIServer, model: str = "fake-model", **options: Any) -> OpenAIBackend:
    opts = {"api_key": KEY, **FAST, **options}
    backend = load_backend(f"openai-compatible:{srv.base_url}#{model}", **opts)
    assert isinstance(backend, OpenAIBackend)
    return backend


def png_bytes(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (16, 12)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def req(text: str, *, top: int = 0, image: bytes | None = None, **cfg: Any) -> Request:
    images = (load_image(image),) if image is not None else ()
    return Request((Message("user", text, images),), GenerationConfig(top_logprobs=top, **cfg))


# -- request shape ------------------------------------------------------------------------------------
def test_openai_compatible_request_shape(server: FakeOpenAIServer) -> None:
    image = png_bytes()
    with compat(server, detail="low", extra_body={"repeat_penalty": 1.0}) as b:
        out = b.generate_one(req("Rate this caption.", top=5, image=image, max_new_tokens=7, seed=3))
    got = server.received[0]
    assert got.path == "/v1/chat/completions"
    assert got.headers["authorization"] == f"Bearer {KEY}"
    body = got.body
    assert body["model"] == "fake-model"
    assert body["max_tokens"] == 7 and body["temperature"] == 0.0 and body["seed"] == 3
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert body["repeat_penalty"] == 1.0  # extra_body passthrough (llama.cpp server)
    parts = body["messages"][0]["content"]
    assert parts[0]["type"] == "image_url" and parts[1] == {"type": "text", "text": "Rate this caption."}
    assert parts[0]["image_url"]["detail"] == "low"
    assert parts[0]["image_url"]["url"] == load_image(image).data_url()
    assert out.logprobs and len(out.steps) == 4 and out.steps[2].top[0][0] == out.text[2]
    assert out.usage is not None and out.usage.prompt_tokens == 100 and out.usage.completion_tokens == 4
    assert out.meta["top_logprobs"] == 5


def test_https_image_url_is_passed_through(server: FakeOpenAIServer) -> None:
    url = "https://example.org/cat.jpg"
    with compat(server) as b:
        b.generate_one(Request((Message("user", "hi", (load_image(url),)),)))
    part = server.received[0].body["messages"][0]["content"][0]
    assert part["image_url"] == {"url": url}  # no detail sent unless configured


def test_azure_url_shape_key_header_and_top_logprobs_cap(server: FakeOpenAIServer) -> None:
    b = load_backend("azure:my-gpt4o", azure_endpoint=server.endpoint, api_version="2024-10-21", api_key=KEY, **FAST)
    with b:
        out = b.generate_one(req("score?", top=10))
    got = server.received[0]
    assert got.path == "/openai/deployments/my-gpt4o/chat/completions"
    assert got.query["api-version"] == ["2024-10-21"]
    assert got.headers["api-key"] == KEY and "authorization" not in got.headers
    assert got.body["top_logprobs"] == 5  # Azure cap from the capability table
    assert out.logprobs
    assert b.identity()["api_version"] == "2024-10-21" and b.identity()["model"] == "my-gpt4o"


def test_azure_entra_id_token_provider(server: FakeOpenAIServer) -> None:
    server.expected_key = "entra-token-abc"
    calls: list[int] = []

    def provider() -> str:
        calls.append(1)
        return "entra-token-abc"

    b = load_backend("azure:dep", azure_endpoint=server.endpoint, api_version="2024-10-21", azure_ad_token_provider=provider, **FAST)
    with b:
        assert isinstance(b.generate_one(req("x")), Completion)
    assert server.received[0].headers["authorization"] == "Bearer entra-token-abc"
    assert calls


def test_azure_needs_api_version_and_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_VERSION", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT", raising=False)
    with pytest.raises(BackendError, match="API version"):
        load_backend("azure:dep", azure_endpoint="http://127.0.0.1:9", api_key="k")
    with pytest.raises(BackendError, match="endpoint"):
        load_backend("azure:dep", api_version="2024-10-21", api_key="k")
    monkeypatch.setenv("OPENAI_API_VERSION", "2024-06-01")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "from-env")
    b = load_backend("azure:dep")
    assert b.identity()["api_version"] == "2024-06-01"
    b.close()


def test_keys_only_from_arguments_or_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        load_backend("openai:gpt-4o")
    with pytest.raises(BackendError, match="credentials"):
        load_backend("openai:gpt-4o?api_key=sk-in-spec")
    b = load_backend("openai-compatible:http://127.0.0.1:9/v1#m")  # key optional: "EMPTY"
    assert b._client.api_key == "EMPTY"
    with pytest.raises(BackendError, match="base_url#model"):
        load_backend("openai-compatible:http://127.0.0.1:9/v1")


# -- log-probabilities and FLEUR smoothing ------------------------------------------------------------
def test_fleur_smoothing_from_served_top_logprobs(server: FakeOpenAIServer) -> None:
    # The served numbers: first decimal "8" (p=.6) vs "7" (.3) vs "9" (.05); second "5" (.5) vs "0" (.4).
    lp = math.log
    tokens = [
        ("0", lp(0.99), [("0", lp(0.99)), ("1", lp(0.01))]),
        (".", 0.0, [(".", 0.0)]),
        ("8", lp(0.6), [("8", lp(0.6)), ("7", lp(0.3)), ("9", lp(0.05)), (" eight", lp(0.02))]),
        ("5", lp(0.5), [("5", lp(0.5)), ("0", lp(0.4))]),
    ]
    server.push(Reply(body=chat_body("0.85", tokens=tokens)))
    with compat(server) as b:
        out = b.generate_one(req("Score:", top=5))
    smoothed = smooth_from_steps(out.steps)
    assert smoothed is not None
    by_hand = 0.1 * (8 * 0.6 + 7 * 0.3 + 9 * 0.05) + 0.01 * (5 * 0.5 + 0 * 0.4)
    assert smoothed.score == pytest.approx(by_hand, abs=1e-9)
    assert smoothed.raw_score == 0.85


def test_fleur_smoothing_with_merged_digit_tokens(server: FakeOpenAIServer) -> None:
    # GPT tokenizers may write "85" as one token: each candidate gives its probability to its digits.
    lp = math.log
    tokens = [("0", lp(0.99), [("0", lp(0.99))]), (".", 0.0, [(".", 0.0)]), ("85", lp(0.5), [("85", lp(0.5)), ("80", lp(0.3)), ("75", lp(0.2))])]
    server.push(Reply(body=chat_body("0.85", tokens=tokens)))
    with compat(server) as b:
        out = b.generate_one(req("Score:", top=3))
    smoothed = smooth_from_steps(out.steps)
    assert smoothed is not None
    first = [0.0] * 10
    first[8], first[7] = 0.8, 0.2
    second = [0.0] * 10
    # given the printed first digit "8" (mass 0.8; "75" does not share it): 0.5 / 0.8 and 0.3 / 0.8
    second[5], second[0] = 0.5 / 0.8, 0.3 / 0.8
    assert smoothed.score == pytest.approx(expected_digit_score(first, second), abs=1e-9)


def test_logprobs_refused_falls_back_and_is_recorded() -> None:
    with running_server(expected_key=KEY, refuse_logprobs=True) as srv, compat(srv, concurrency=1) as b:
        outs = b.generate([req("a", top=5), req("b", top=5)])
        assert all(isinstance(o, Completion) for o in outs)
        first, second = outs
        assert first.meta["logprobs_refused"] is True and "logprobs" in first.meta["logprobs_refused_reason"]
        assert not first.steps and not first.logprobs and first.text.startswith("0.")
        # The refusal is remembered: 2 calls for the first request, 1 for the second.
        assert srv.count == 3 and "logprobs" not in srv.received[2].body
        assert second.meta["logprobs_refused"] is True


def test_top_logprobs_over_server_cap_is_lowered() -> None:
    with running_server(expected_key=KEY, max_top_logprobs=5) as srv, compat(srv) as b:
        out = b.generate_one(req("a", top=20))
        assert out.logprobs and out.meta["top_logprobs"] == 5
        assert [r.body["top_logprobs"] for r in srv.received] == [20, 5]


def test_capability_table_skips_logprobs_for_vision_preview(server: FakeOpenAIServer) -> None:
    assert not lookup_caps("openai", "gpt-4-vision-preview").logprobs
    assert not lookup_caps("openai", "o3-mini").logprobs and lookup_caps("openai", "o3-mini").reasoning
    assert lookup_caps("openai", "gpt-4o-2024-08-06").max_top_logprobs == 20
    assert lookup_caps("azure", "gpt-4o").max_top_logprobs == 5
    b = OpenAIBackend("gpt-4-vision-preview", kind="openai", base_url=server.base_url, api_key=KEY, **FAST)
    with b:
        out = b.generate_one(req("a", top=5))
    assert "logprobs" not in server.received[0].body
    assert out.meta["logprobs_refused"] and "vision" in out.meta["logprobs_refused_reason"]
    assert not b.capabilities.logprobs


def test_reasoning_models_get_max_completion_tokens(server: FakeOpenAIServer) -> None:
    with OpenAIBackend("o4-mini", kind="openai", base_url=server.base_url, api_key=KEY, **FAST) as b:
        b.generate_one(req("a", max_new_tokens=50))
    body = server.received[0].body
    # the answer budget plus the default reasoning budget (tests/test_reasoning_api.py has the rest)
    assert body["max_completion_tokens"] == 50 + 8192 and "max_tokens" not in body and "temperature" not in body


# -- retries --------------------------------------------------------------------------------------
def test_wait_honours_retry_after_headers() -> None:
    class Resp:
        def __init__(self, headers: dict[str, str]) -> None:
            self.headers = headers

    class Exc(Exception):
        def __init__(self, headers: dict[str, str]) -> None:
            super().__init__("x")
            self.response = Resp(headers)

    policy = RetryPolicy(base_delay=100.0, max_delay=100.0)
    assert wait_seconds(Exc({"retry-after-ms": "250"}), 0, policy) == pytest.approx(0.25)
    assert wait_seconds(Exc({"retry-after": "3"}), 0, policy) == pytest.approx(3.0)
    assert wait_seconds(Exc({"retry-after": "100000"}), 0, policy) == policy.max_retry_after
    assert 0 <= wait_seconds(Exc({}), 2, RetryPolicy(base_delay=0.01)) <= 0.04


def test_429_with_retry_after_is_retried(server: FakeOpenAIServer) -> None:
    server.push(Reply(status=429, body=error_body("Rate limit reached", code="rate_limit_exceeded"), headers={"retry-after": "1"}))
    with compat(server) as b:
        t0 = time.monotonic()
        out = b.generate_one(req("a"))
        elapsed = time.monotonic() - t0
    assert isinstance(out, Completion) and server.count == 2
    assert elapsed >= 0.9  # waited as told, not the 10 ms backoff


def test_500_retried_then_reported_with_status(server: FakeOpenAIServer) -> None:
    server.push(Reply(status=500, body=error_body("boom", type_="server_error")), Reply(status=503, body=error_body("busy")))
    with compat(server) as b:
        assert isinstance(b.generate_one(req("a")), Completion)
        assert server.count == 3
        server.reset()
        server.push(*[Reply(status=500, body=error_body("still broken", type_="server_error"))] * 3)
        b.retry = RetryPolicy(max_retries=2, base_delay=0.01, max_delay=0.02)
        (err,) = b.generate([req("b")])
    assert isinstance(err, BackendError) and server.count == 3
    assert "HTTP 500" in str(err) and "still broken" in str(err) and "3 attempts" in str(err)


@pytest.mark.parametrize(
    ("status", "code", "message"),
    [(400, None, "Invalid image."), (403, None, "Forbidden."), (429, "insufficient_quota", "You exceeded your current quota.")],
)
def test_client_errors_are_not_retried(server: FakeOpenAIServer, status: int, code: str | None, message: str) -> None:
    server.push(Reply(status=status, body=error_body(message, code=code)))
    with compat(server) as b:
        (err,) = b.generate([req("a")])
    assert isinstance(err, BackendError) and server.count == 1
    assert f"HTTP {status}" in str(err) and message in str(err)


def test_wrong_key_reported_and_scrubbed() -> None:
    with running_server(expected_key="sk-the-right-one-123", echo_key=True) as srv, compat(srv) as b:
        (err,) = b.generate([req("a")])
        assert isinstance(err, BackendError) and "HTTP 401" in str(err) and srv.count == 1
        assert KEY not in str(err) and "***" in str(err)


def test_malformed_json_retried_then_reported(server: FakeOpenAIServer) -> None:
    server.push(Reply(raw=b'{"id": "x", "choices": ['))
    with compat(server, max_retries=2) as b:
        assert isinstance(b.generate_one(req("a")), Completion) and server.count == 2
        server.push(*[Reply(raw=b"<html>gateway</html>")] * 3)
        (err,) = b.generate([req("b")])
    assert isinstance(err, BackendError) and "malformed" in str(err)


def test_answers_that_are_not_chat_completions_are_retried_then_reported(server: FakeOpenAIServer) -> None:
    server.push(Reply(body={"object": "chat.completion", "choices": []}), Reply(body=[1, 2]), Reply(body={"error": None}))
    with compat(server, max_retries=2) as b:
        (err,) = b.generate([req("a")])
    assert isinstance(err, BackendError) and "holds no choices" in str(err) and server.count == 3


def test_the_body_sent_is_what_the_sdk_create_sends(server: FakeOpenAIServer) -> None:
    """Requests go through the SDK client's ``post`` with capjudge's body (skipping ``create``'s
    walk over typed dicts and its pydantic answer): the server sees the same request."""
    import asyncio

    request = Request(
        (Message("system", "Be a judge."), Message("user", "Rate this caption.", (load_image(png_bytes()),))),
        GenerationConfig(max_new_tokens=9, top_logprobs=4, seed=1, stop=("\n",)),
    )
    with compat(server, detail="high", extra_body={"repeat_penalty": 1.1, "top_logprobs": 3}) as b:
        out = b.generate_one(request)
        params = b._params(request, with_logprobs=True)
        extra = params.pop("extra_body")
        asyncio.run(type(b._client)(api_key=KEY, base_url=server.base_url, max_retries=0).chat.completions.create(**params, extra_body=extra))
    ours, sdks = server.received
    assert ours.body == sdks.body and ours.body["top_logprobs"] == 3 and ours.body["repeat_penalty"] == 1.1
    skip = {"content-length", "x-stainless-retry-count", "x-stainless-read-timeout", "x-stainless-timeout"}
    assert {k: v for k, v in ours.headers.items() if k not in skip} == {k: v for k, v in sdks.headers.items() if k not in skip}
    assert out.logprobs and out.meta["response_id"] == "chatcmpl-fake" and out.usage is not None


def test_an_image_is_encoded_once_for_all_its_captions(server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    from capjudge import Judge, Sample

    encodes: list[int] = []
    real = base64.b64encode

    def counting(data: bytes, *args: Any) -> bytes:
        encodes.append(len(data))
        return real(data, *args)

    monkeypatch.setattr(base64, "b64encode", counting)
    image = png_bytes((10, 200, 10), (40, 30))
    with Judge("fleur", compat(server, concurrency=3)) as judge:
        results = list(judge.score_many([Sample(image, f"caption number {i}") for i in range(6)]))
    assert all(r.ok for r in results) and server.count == 6
    assert encodes == [len(image)]  # one data URL for the six requests
    urls = {m["content"][0]["image_url"]["url"] for r in server.received for m in r.body["messages"] if isinstance(m["content"], list)}
    assert len(urls) == 1


def test_slow_answer_times_out_and_is_retried(server: FakeOpenAIServer) -> None:
    server.push(Reply(delay=1.5))
    with compat(server, timeout=0.3) as b:
        out = b.generate_one(req("a"))
    assert isinstance(out, Completion) and server.count == 2


def test_bad_items_become_errors_not_exceptions(server: FakeOpenAIServer) -> None:
    with compat(server) as b:
        outs = b.generate([req("a"), "not a request", req("b")])  # type: ignore[list-item]
    assert isinstance(outs[0], Completion) and isinstance(outs[2], Completion)
    assert isinstance(outs[1], BackendError) and "request 1" in str(outs[1])


# -- concurrency, streaming, event loops ---------------------------------------------------------
def test_200_requests_concurrency_16_then_all_cached(tmp_path: Path) -> None:
    with running_server(expected_key=KEY, delay=0.1) as srv:
        requests = [req(f"caption number {i}", top=5) for i in range(200)]
        with compat(srv, concurrency=16) as inner:
            backend = CachedBackend(inner, ResponseCache(tmp_path / "cache"))
            first = backend.generate(requests)
            assert all(isinstance(o, Completion) for o in first)
            # Requests overlap (each takes 0.1 s on the server) but never exceed the limit; speed
            # itself is measured in benchmarks/bench_api.py, not here.
            assert srv.count == 200 and 4 <= srv.max_concurrent <= 16
            assert inner.usage.summary()["calls"] == 200
            second = backend.generate(requests)
            assert srv.count == 200  # zero new requests
            assert all(o.cached for o in second)  # type: ignore[union-attr]
            assert [o.to_dict() for o in second] == [o.to_dict() for o in first]  # type: ignore[union-attr]
            assert backend.cache.stats()["hits"] == 200


def test_stream_yields_in_completion_order() -> None:
    def responder(r: Received) -> Reply:
        reply = default_responder(r)
        reply.delay = 0.6 if "slow" in r.prompt_text() else 0.0
        return reply

    with running_server(expected_key=KEY, responder=responder) as srv, compat(srv, concurrency=4) as b:
        order = [i for i, _ in b.stream([req("slow one"), req("fast 1"), req("fast 2")])]
    assert sorted(order) == [0, 1, 2] and order[-1] == 0


def test_stream_stopped_early_sends_no_more_requests() -> None:
    with running_server(expected_key=KEY, delay=0.2) as srv, compat(srv, concurrency=1) as b:
        stream = b.stream([req(f"r{i}") for i in range(6)])
        next(stream)
        stream.close()  # the consumer gives up: queued requests are cancelled
        time.sleep(0.5)
        assert srv.count <= 3


def test_generate_inside_running_event_loop(server: FakeOpenAIServer) -> None:
    import asyncio

    async def main() -> tuple[list[Any], list[Any]]:
        with compat(server) as b:
            sync = b.generate([req("a"), req("b")])  # blocking call from inside a loop still works
            asynchronous = await b.agenerate([req("c")])
            return sync, asynchronous

    sync, asynchronous = asyncio.run(main())
    assert all(isinstance(o, Completion) for o in sync + asynchronous)


# -- usage, cost and budget ----------------------------------------------------------------------
def test_usage_and_cost_accounting(server: FakeOpenAIServer) -> None:
    prices = {"fake-model": {"input": 2.0, "output": 10.0}}
    with compat(server, prices=prices) as b:
        outs = b.generate([req("a"), req("b")])
    summary = b.usage.summary()
    assert summary["calls"] == 2 and summary["prompt_tokens"] == 200
    per_call = (100 * 2.0 + outs[0].usage.completion_tokens * 10.0) / 1e6  # type: ignore[union-attr]
    assert outs[0].meta["cost_usd"] == pytest.approx(per_call)  # type: ignore[union-attr]
    assert summary["cost_usd"] == pytest.approx(2 * per_call)


def test_price_table_lookup_and_override(tmp_path: Path) -> None:
    table = PriceTable()
    assert table.lookup("gpt-4o-2024-08-06") == table.lookup("gpt-4o")
    assert table.lookup("gpt-4o-mini-2024-07-18") == table.lookup("gpt-4o-mini") != table.lookup("gpt-4o")
    assert table.lookup("llava-1.5-7b") is None
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"llava-1.5-7b": {"input": 0.1, "output": 0.2}}))
    assert PriceTable.load(path).lookup("llava-1.5-7b").input == 0.1  # type: ignore[union-attr]
    assert image_tokens(1024, 1024, "high") == 85 + 170 * 4 and image_tokens(4000, 3000, "low") == 85
    with pytest.raises(ValueError, match="price"):
        load_backend("openai-compatible:http://127.0.0.1:9/v1#unknown-model", max_cost=1.0)


def test_budget_stops_run_cleanly(server: FakeOpenAIServer) -> None:
    prices = {"fake-model": {"input": 1000.0, "output": 1000.0}}  # 0.001 USD per token
    requests = [req(f"caption {i}", max_new_tokens=10) for i in range(10)]
    with compat(server, prices=prices, max_cost=0.5, concurrency=1) as b:
        outs = b.generate(requests)
    ok = [o for o in outs if isinstance(o, Completion)]
    refused = [o for o in outs if isinstance(o, BudgetExceeded)]
    assert ok and refused and len(ok) + len(refused) == 10
    assert server.count == len(ok)  # refused requests were never sent
    assert b.usage.spent <= 0.5
    first_refused = next(i for i, o in enumerate(outs) if isinstance(o, BudgetExceeded))
    assert all(isinstance(o, BudgetExceeded) for o in outs[first_refused:])  # the run stopped
    assert "max_cost" in str(refused[0])


# -- secrets --------------------------------------------------------------------------------------
def test_api_key_never_in_results_cache_or_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    cache_dir = tmp_path / "cache"
    results = tmp_path / "results.jsonl"
    with running_server(expected_key=KEY) as srv:
        srv.push(Reply(status=429, body=error_body("slow down"), headers={"retry-after-ms": "10"}))
        with compat(srv) as inner:
            backend = CachedBackend(inner, cache_dir)
            outs = backend.generate([req("a", top=5), req("b", image=png_bytes())])
            srv.expected_key = "another-key-xyz"  # now every call fails with 401
            srv.echo_key = True
            outs += backend.generate([req("c")])
            with results.open("w") as f:
                for o in outs:
                    rec = {"backend": backend.spec, "identity": backend.identity(), "repr": repr(backend)}
                    rec.update(o.to_dict() if isinstance(o, Completion) else {"status": "error", "error": str(o)})
                    f.write(json.dumps(rec) + "\n")
            keys = [backend.cache_key(req(x)) for x in "abc"]
    assert isinstance(outs[2], BackendError)
    needle = KEY.encode()
    assert needle not in results.read_bytes()
    for path in cache_dir.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), path
    assert KEY not in caplog.text and "retrying" in caplog.text
    assert all(KEY not in k for k in keys)


# -- end to end through the Judge ------------------------------------------------------------------
def test_judge_fleur_on_fake_server_end_to_end(tmp_path: Path) -> None:
    judge_mod = pytest.importorskip("capjudge.judges.judge", exc_type=ImportError)
    from capjudge.data.types import Sample

    sample = Sample(png_bytes(), "A red rectangle on a white background.", id="s1")
    with running_server(expected_key=KEY) as srv:
        judge = judge_mod.Judge("fleur", compat(srv), cache_dir=tmp_path / "cache")
        result = judge.score(sample)
        assert result.ok and result.smoothed and result.id == "s1", result.error
        # The default responder serves "0.<d1><d2>" with P(d1)=e^-0.3567, P(d1+1)=e^-1.204 and
        # P(d2)=P(d2+1)=e^-0.6931 (mod 10): the smoothed score by hand.
        d1, d2 = int(result.raw[2]), int(result.raw[3])  # type: ignore[index]
        p1, q1, p2 = math.exp(-0.3567), math.exp(-1.204), math.exp(-0.6931)
        by_hand = 0.1 * (d1 * p1 + ((d1 + 1) % 10) * q1)
        if d2 != 0:  # FLEUR's code: "0.x0" is "0.x", its second decimal does not count
            by_hand += 0.01 * (d2 * p2 + ((d2 + 1) % 10) * p2)
        assert result.score == pytest.approx(by_hand, abs=1e-9)
        assert srv.received[0].body["top_logprobs"] == 20
        judge.close()
        again = judge_mod.Judge("fleur", compat(srv), cache_dir=tmp_path / "cache").score(sample)
        assert srv.count == 1 and again.details["cached"] and again.score == result.score
