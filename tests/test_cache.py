"""The response cache: keys, hits and misses, several processes, and resuming a killed run."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import (
    Backend,
    BackendError,
    Completion,
    GenerationConfig,
    Message,
    Request,
    TokenStep,
    Usage,
)
from capjudge.backends.cache import (
    CachedBackend,
    ResponseCache,
    cacheable,
    default_cache_dir,
)
from capjudge.backends.openai import OpenAIBackend
from capjudge.backends.registry import load_backend
from capjudge.backends.usage import BudgetExceeded
from capjudge.cli.cache import register as register_cli
from capjudge.data.images import load_image
from openai_fake_server import running_server

KEY = "sk-cache-test-SECRET-99"
SRC = str(Path(__file__).resolve().parents[1] / "src")


class Counting(Backend):
    """An in-process backend that records every batch it is asked (``fail`` in a prompt: an error)."""

    kind = "counting"
    model = "count-1"
    spec = "counting:count-1"

    def __init__(self) -> None:
        self.batches: list[list[Request]] = []

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        self.batches.append(list(requests))
        out: list[Completion | BaseException] = []
        for r in requests:
            text = r.messages[-1].content
            if "fail" in text:
                out.append(BackendError(f"cannot answer {text!r}"))
            else:
                steps = [TokenStep("0", -0.1, (("0", -0.1),)), TokenStep(".", 0.0), TokenStep("7", -0.5, (("7", -0.5), ("8", -1.0)))]
                out.append(Completion(text=f"0.7 for {text}", steps=steps, logprobs=True, model=self.model, usage=Usage(10, 3), meta={"n": len(self.batches)}))
        return out

    @property
    def calls(self) -> int:
        return sum(len(b) for b in self.batches)


def req(text: str, **cfg: object) -> Request:
    sample_index = cfg.pop("sample_index", None)
    return Request((Message("user", text),), GenerationConfig(**cfg), sample_index=sample_index)  # type: ignore[arg-type]


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CAPJUDGE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("CAPJUDGE_CACHE_DIR")
    assert default_cache_dir() == Path.home() / ".cache" / "capjudge"


def test_response_cache_roundtrip_stats_clear(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path)
    comp = Completion(text="0.85", steps=[TokenStep("8", -0.2, (("8", -0.2), ("7", -2.0)))], logprobs=True, model="m", usage=Usage(5, 2), finish_reason="stop", meta={"x": 1})
    assert cache.get("k") is None
    cache.set("k", comp)
    got = cache.get("k")
    assert got is not None and got.cached and got.to_dict() == comp.to_dict()
    stats = cache.stats()
    assert stats["entries"] == 1 and stats["hits"] == 1 and stats["misses"] == 1 and stats["size_bytes"] > 0
    assert cache.clear() == 1 and len(cache) == 0


def test_cached_backend_hits_misses_and_rules(tmp_path: Path) -> None:
    inner = Counting()
    backend = CachedBackend(inner, tmp_path)
    assert backend.model == "count-1" and backend.kind == "counting" and backend.spec == "counting:count-1"
    batch = [req("a"), req("b"), req("fail c"), req("d", temperature=0.7), req("e", temperature=0.7, sample_index=0)]
    first = backend.generate(batch)
    assert inner.calls == 5 and len(inner.batches) == 1
    assert isinstance(first[2], BackendError)
    assert len(backend.cache) == 3  # a, b and the numbered sample; not the error nor the free sample
    second = backend.generate(batch)
    assert len(inner.batches) == 2 and [r.messages[0].content for r in inner.batches[1]] == ["fail c", "d"]  # misses only, one batch
    assert all(second[i].cached for i in (0, 1, 4))  # type: ignore[union-attr]
    assert second[0].to_dict() == first[0].to_dict()  # type: ignore[union-attr]
    assert not cacheable(req("x", temperature=1.0)) and cacheable(req("x", temperature=1.0, sample_index=3))
    # read=False asks again (and refreshes), write=False stores nothing
    CachedBackend(inner, tmp_path, read=False).generate([req("a")])
    assert inner.batches[-1][0].messages[0].content == "a"
    CachedBackend(inner, tmp_path, write=False).generate([req("new")])
    assert CachedBackend(inner, tmp_path).cache.get(inner.cache_key(req("new"))) is None


def test_cached_backend_stream_yields_hits_first(tmp_path: Path) -> None:
    inner = Counting()
    backend = CachedBackend(inner, tmp_path)
    backend.generate([req("b")])
    order = [i for i, _ in backend.stream([req("a"), req("b"), req("c")])]
    assert order[0] == 1 and sorted(order) == [0, 1, 2]


def _png(color: tuple[int, int, int]) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buf, format="PNG")
    return buf.getvalue()


def test_cache_key_covers_everything_that_changes_the_answer(tmp_path: Path) -> None:
    def backend(**kw: object) -> OpenAIBackend:
        opts: dict[str, object] = {"kind": "openai-compatible", "base_url": "http://127.0.0.1:9/v1", "api_key": "sk-one-111111"}
        opts.update(kw)
        model = str(opts.pop("model", "m"))
        return OpenAIBackend(model, **opts)  # type: ignore[arg-type]

    img_a = _png((255, 0, 0))
    (tmp_path / "one.png").write_bytes(img_a)
    (tmp_path / "two.png").write_bytes(img_a)

    def r(prompt: str = "Caption A: x\nCaption B: y", image: bytes | Path = img_a, **cfg: object) -> Request:
        return Request((Message("user", prompt, (load_image(image),)),), GenerationConfig(**cfg))  # type: ignore[arg-type]

    base = backend().cache_key(r())
    # The backend: kind, endpoint, model, API version, detail, extra body.
    assert backend(model="other").cache_key(r()) != base
    assert backend(base_url="http://127.0.0.1:10/v1").cache_key(r()) != base
    assert backend(detail="low").cache_key(r()) != base
    assert backend(extra_body={"repeat_penalty": 1.1}).cache_key(r()) != base
    azure = [OpenAIBackend("dep", kind="azure", azure_endpoint="http://127.0.0.1:9", api_version=v, api_key="k" * 10) for v in ("2024-06-01", "2024-10-21")]
    assert azure[0].cache_key(r()) != azure[1].cache_key(r()) != base
    # The request: prompt (pair order), image content, every generation setting.
    assert backend().cache_key(r("Caption A: y\nCaption B: x")) != base
    assert backend().cache_key(r(image=_png((0, 0, 255)))) != base
    for cfg in ({"temperature": 0.5}, {"max_new_tokens": 5}, {"top_logprobs": 5}, {"seed": 1}, {"top_p": 0.9}):
        assert backend().cache_key(r(**cfg)) != base, cfg
    # Not: the image path, the API key, concurrency, timeouts.
    assert backend().cache_key(r(image=tmp_path / "one.png")) == backend().cache_key(r(image=tmp_path / "two.png")) == base
    assert backend(api_key="sk-two-222222", concurrency=3, timeout=5.0).cache_key(r()) == base
    assert "sk-one" not in str(backend().identity())


_WRITER = textwrap.dedent(
    """
    import sys
    from capjudge.backends.base import Completion
    from capjudge.backends.cache import ResponseCache
    cache = ResponseCache(sys.argv[1])
    w = sys.argv[2]
    for i in range(40):
        cache.set(f"{w}-{i}", Completion(text=f"{w}:{i}"))
    """
)


def test_several_processes_write_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), f"w{n}"], env=env) for n in range(4)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    cache = ResponseCache(tmp_path)
    assert len(cache) == 160
    assert all(cache.get(f"w{n}-{i}").text == f"w{n}:{i}" for n in range(4) for i in range(40))  # type: ignore[union-attr]


_JOB = textwrap.dedent(
    """
    import sys
    from capjudge.backends.base import GenerationConfig, Message, Request
    from capjudge.backends.cache import CachedBackend
    from capjudge.backends.registry import load_backend
    base_url, cache_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    inner = load_backend(f"openai-compatible:{base_url}#fake", api_key_env="OPENAI_API_KEY", concurrency=4, retry_base_delay=0.01)
    backend = CachedBackend(inner, cache_dir)
    reqs = [Request((Message("user", f"caption {i}"),), GenerationConfig(top_logprobs=5)) for i in range(n)]
    for i, out in backend.stream(reqs):
        print(i, type(out).__name__, flush=True)
    """
)


def _job_requests(n: int) -> list[Request]:
    return [Request((Message("user", f"caption {i}"),), GenerationConfig(top_logprobs=5)) for i in range(n)]


def test_killed_run_resumes_with_only_missing_requests(tmp_path: Path) -> None:
    n = 60
    cache_dir = tmp_path / "cache"
    with running_server(expected_key=KEY, delay=0.05) as srv:
        env = {**os.environ, "PYTHONPATH": SRC, "OPENAI_API_KEY": KEY}
        proc = subprocess.Popen([sys.executable, "-c", _JOB, srv.base_url, str(cache_dir), str(n)], env=env, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while srv.count < n // 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        proc.kill()  # SIGKILL: no cleanup, answers in flight are lost
        proc.wait(timeout=10)
        assert srv.count < n, "the job finished before it could be killed"
        done = len(ResponseCache(cache_dir))
        assert 0 < done < n
        before = srv.count
        inner = load_backend(f"openai-compatible:{srv.base_url}#fake", api_key=KEY, concurrency=4, retry_base_delay=0.01)
        with CachedBackend(inner, cache_dir) as backend:
            outs = backend.generate(_job_requests(n))
        assert all(isinstance(o, Completion) for o in outs)
        assert srv.count - before == n - done  # only the missing requests
        assert sum(o.cached for o in outs) == done  # type: ignore[union-attr]
        assert len(ResponseCache(cache_dir)) == n


def test_budget_interrupted_run_resumes(tmp_path: Path) -> None:
    n = 12
    prices = {"fake": {"input": 1000.0, "output": 1000.0}}
    with running_server(expected_key=KEY) as srv:
        inner = load_backend(f"openai-compatible:{srv.base_url}#fake", api_key=KEY, concurrency=1, prices=prices, max_cost=0.6)
        with CachedBackend(inner, tmp_path) as backend:
            first = backend.generate(_job_requests(n))
        ok = sum(isinstance(o, Completion) for o in first)
        assert 0 < ok < n and all(isinstance(o, (Completion, BudgetExceeded)) for o in first)
        before = srv.count
        inner = load_backend(f"openai-compatible:{srv.base_url}#fake", api_key=KEY, concurrency=1, prices=prices)
        with CachedBackend(inner, tmp_path) as backend:
            second = backend.generate(_job_requests(n))
        assert srv.count - before == n - ok and all(isinstance(o, Completion) for o in second)
        assert [o.text for o in second[:ok]] == [o.text for o in first[:ok]]  # type: ignore[union-attr]


def test_cache_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="capjudge")
    register_cli(parser.add_subparsers(dest="command"))
    cache = ResponseCache(tmp_path)
    cache.set("a", Completion(text="x"))
    cache.set("b", Completion(text="y"))
    args = parser.parse_args(["cache", "stats", "--cache-dir", str(tmp_path)])
    assert args.func(args) == 0 and "2 entries" in capsys.readouterr().out
    args = parser.parse_args(["cache", "stats", "--cache-dir", str(tmp_path), "--json"])
    assert args.func(args) == 0 and '"entries": 2' in capsys.readouterr().out
    args = parser.parse_args(["cache", "clear", "--cache-dir", str(tmp_path)])
    assert args.func(args) == 0 and "removed 2" in capsys.readouterr().out
    assert len(ResponseCache(tmp_path)) == 0


# -- answers of submit(): stored in batches by one writer, before the caller sees them ------------
class Held(Backend):
    """A concurrent backend whose answers the test hands out: ``submit`` returns a future that
    :meth:`answer` finishes (from another thread, as an API backend's event loop would)."""

    kind = "held"
    model = "held-1"
    spec = "held:held-1"

    def __init__(self) -> None:
        import concurrent.futures

        self.futures: dict[str, concurrent.futures.Future[Completion | BaseException]] = {}
        self.submitted = 0

    def generate(self, requests: Sequence[Request]) -> list[Completion | BaseException]:
        raise AssertionError("only submit() is used here")

    def submit(self, request: Request) -> Any:
        import concurrent.futures

        self.submitted += 1
        fut: concurrent.futures.Future[Completion | BaseException] = concurrent.futures.Future()
        self.futures[request.messages[-1].content] = fut
        return fut

    def answer(self, *texts: str) -> None:
        import threading

        def finish() -> None:
            for t in texts:
                if self.futures[t].cancelled():  # its caller gave up
                    continue
                out: Completion | BaseException = BackendError(f"no answer to {t}") if "fail" in t else Completion(text=f"0.5 for {t}", model=self.model)
                self.futures[t].set_result(out)

        thread = threading.Thread(target=finish)
        thread.start()
        thread.join()


def test_submitted_answers_are_stored_in_batches_before_the_caller_sees_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    inner = Held()
    backend = CachedBackend(inner, tmp_path)
    batches: list[list[str]] = []
    first_batch_started, go_on = threading.Event(), threading.Event()
    set_many = ResponseCache.set_many

    def recording(self: ResponseCache, items: Sequence[tuple[str, Completion]], **kw: Any) -> int:
        batches.append([c.text for _, c in items])
        if len(batches) == 1:
            first_batch_started.set()
            assert go_on.wait(30)  # the writer is busy: the next answers wait for the next batch
        return set_many(self, items, **kw)

    monkeypatch.setattr(ResponseCache, "set_many", recording)
    texts = [f"caption {i}" for i in range(10)] + ["fail 10"]
    futures = [backend.submit(req(t)) for t in texts]
    inner.answer("caption 0")
    assert first_batch_started.wait(30)
    inner.answer(*texts[1:])  # all arrive while the first batch is being written
    assert not any(f.done() for f in futures)  # nobody sees an answer before it is stored
    go_on.set()
    outs = [f.result(timeout=30) for f in futures]
    assert batches == [["0.5 for caption 0"], [f"0.5 for caption {i}" for i in range(1, 10)]]  # one transaction for nine
    assert isinstance(outs[-1], BackendError) and all(isinstance(o, Completion) for o in outs[:-1])
    assert backend.cache.stats()["writes"] == 10
    backend.close()

    again = CachedBackend(Held(), tmp_path)  # a re-run: everything that was answered comes from the cache
    hits = [again.submit(req(t)).result(timeout=30) for t in texts[:-1]]
    assert again.inner.submitted == 0 and all(isinstance(h, Completion) and h.cached for h in hits)
    assert [h.text for h in hits] == [o.text for o in outs[:-1]]  # type: ignore[union-attr]
    again.close()


def test_the_answer_a_caller_sees_is_already_in_the_cache(tmp_path: Path) -> None:
    inner = Held()
    backend = CachedBackend(inner, tmp_path)
    seen: list[bool] = []
    futures = {t: backend.submit(req(t)) for t in ("a", "b", "c", "d")}
    for t, fut in futures.items():
        fut.add_done_callback(lambda _f, t=t: seen.append(inner.cache_key(req(t)) in backend.cache))
    inner.answer("a", "b", "c", "d")
    assert [fut.result(timeout=30).text for fut in futures.values()] == [f"0.5 for {t}" for t in "abcd"]  # type: ignore[union-attr]
    backend.close()  # waits for the writer, whose thread ran the callbacks
    assert seen == [True] * 4


def test_a_batch_that_cannot_be_committed_still_stores_what_it_can_and_answers_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ResponseCache(tmp_path)
    real_set = cache._cache.set

    def failing(key: str, value: Any, **kw: Any) -> Any:
        if value["completion"]["text"] == "bad":
            raise OSError("disk full")
        return real_set(key, value, **kw)

    monkeypatch.setattr(cache._cache, "set", failing)
    items = [("k1", Completion(text="good 1")), ("k2", Completion(text="bad")), ("k3", Completion(text="good 3"))]
    assert cache.set_many(items) == 2  # the transaction rolled back; one by one, the good ones are stored
    assert cache.get("k1").text == "good 1" and cache.get("k3").text == "good 3" and cache.get("k2") is None  # type: ignore[union-attr]

    inner = Held()
    backend = CachedBackend(inner, cache)
    futures = [backend.submit(req(t)) for t in ("x", "y")]
    monkeypatch.setattr(ResponseCache, "set_many", lambda *a, **k: (_ for _ in ()).throw(OSError("disk gone")))
    inner.answer("x", "y")
    assert [f.result(timeout=30).text for f in futures] == ["0.5 for x", "0.5 for y"]  # type: ignore[union-attr]
    backend.close()


def test_a_cancelled_caller_does_not_stop_the_writer(tmp_path: Path) -> None:
    inner = Held()
    backend = CachedBackend(inner, tmp_path)
    first, second = backend.submit(req("first")), backend.submit(req("second"))
    assert first.cancel()
    inner.answer("first", "second")
    assert second.result(timeout=30).text == "0.5 for second"  # type: ignore[union-attr]
    backend.close()
