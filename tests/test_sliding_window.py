"""API judges send requests through a sliding window: a slow request holds one slot, not a batch.

Every test here is ordered by events (a request the server holds until the test releases it), never
by timing.
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion
from capjudge.backends.registry import load_backend
from capjudge.judges.dispatch import BatchExecutor, WindowExecutor
from capjudge.judges.scoring import ScoringRun
from openai_fake_server import FakeOpenAIServer, Received, Reply, default_responder, running_server

FAST = {"retry_base_delay": 0.01, "retry_max_delay": 0.05, "timeout": 30.0, "max_retries": 0}


def png(color: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), color).save(buf, format="PNG")
    return buf.getvalue()


RED, BLUE = png((200, 30, 30)), png((30, 30, 200))


def holding(word: str, release: threading.Event, arrived: threading.Event | None = None, answer: Callable[[Received], Reply] = default_responder) -> Callable[[Received], Reply]:
    """A responder that holds every request whose prompt holds ``word`` until ``release`` is set."""

    def respond(req: Received) -> Reply:
        if word in req.prompt_text():
            if arrived is not None:
                arrived.set()
            assert release.wait(60), "the test never released the held request"
        return answer(req)

    return respond


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # never leave a server thread hanging


def judge_on(srv: FakeOpenAIServer, method: str = "vanilla", concurrency: int = 4, **kw: Any) -> Judge:
    backend = load_backend(f"openai-compatible:{srv.base_url}#fake-model", concurrency=concurrency, **FAST)
    return Judge(method, backend, **kw)


def test_a_slow_request_does_not_hold_the_others(release: threading.Event) -> None:
    samples = [Sample(RED, "a SLOW caption")] + [Sample(RED if i % 2 else BLUE, f"caption {i}") for i in range(1, 30)]
    with running_server(responder=holding("SLOW", release)) as srv:
        judge = judge_on(srv, concurrency=4)
        got: list[int] = []
        for index, result in judge.score_stream(samples):
            got.append(index)
            assert result.ok, result.error
            if len(got) == len(samples) - 1:
                # Every other request was answered while the first one is still held by the server.
                assert sorted(got) == list(range(1, len(samples)))
                release.set()
        assert got[-1] == 0
        assert srv.max_concurrent <= 4
        judge.close()


def test_requests_in_flight_never_exceed_concurrency() -> None:
    with running_server(delay=0.02) as srv:
        judge = judge_on(srv, concurrency=3)
        run = ScoringRun(judge)
        assert isinstance(run.executor, WindowExecutor) and run.executor.limit == 3
        results = [r for _, r in run.run(Sample(RED, f"caption {i}") for i in range(24))]
        assert len(results) == 24 and all(r.ok for r in results)
        assert run.executor.max_in_flight == 3  # the window was full, never over
        assert srv.max_concurrent <= 3
        judge.close()


def test_a_slow_first_step_holds_only_its_own_image(release: threading.Event) -> None:
    red_url = "data:image/png;base64," + base64.b64encode(RED).decode()
    held = []

    def answer(req: Received) -> Reply:
        reply = default_responder(req)
        if "Analyze the uploaded image" in req.prompt_text():
            if req.body["messages"][-1]["content"][0]["image_url"]["url"] == red_url:
                held.append(req)
                assert release.wait(60)  # the red image's first step waits for the test
            reply.body["choices"][0]["message"]["content"] = "- Object 1: a coloured square"
        else:
            reply.body["choices"][0]["message"]["content"] = "70"
        return reply

    samples = [Sample(RED, f"red {i}") for i in range(3)] + [Sample(BLUE, f"blue {i}") for i in range(3)]
    with running_server(responder=answer) as srv:
        judge = judge_on(srv, "visce2", concurrency=4)
        order: list[int] = []
        for index, result in judge.score_stream(samples):
            assert result.ok and result.context == "- Object 1: a coloured square", result.error
            order.append(index)
            if len(order) == 3:
                assert sorted(order) == [3, 4, 5]  # the blue captions, while red's first step waits
                release.set()
        assert sorted(order[3:]) == [0, 1, 2]
        first_steps = [r for r in srv.received if "Analyze the uploaded image" in r.prompt_text()]
        assert len(first_steps) == 2 and len(held) == 1  # once per image
        judge.close()


@pytest.mark.parametrize("method", ["fleur", "visce2", "listwise"])
def test_window_and_batches_make_the_same_records(method: str) -> None:
    def answer(req: Received) -> Reply:
        reply = default_responder(req)
        text = req.prompt_text()
        if "Analyze the uploaded image" in text:
            reply.body["choices"][0]["message"]["content"] = "- Object 1: a square"
        elif method == "listwise":
            reply.body["choices"][0]["message"]["content"] = "{1: 0.8, 2: 0.3, 3: 0.5, 4: 0.4, 5: 0.2, 6: 0.9}"
        elif method == "visce2":
            reply.body["choices"][0]["message"]["content"] = "64"
        return reply

    samples = [Sample(RED if i % 3 else BLUE, f"caption {i}", id=f"s{i}") for i in range(9)] + [Sample("/nonexistent/broken.png", "broken")]
    with running_server(responder=answer) as srv:
        judge = judge_on(srv, method, concurrency=3)
        windowed = sorted(judge.score_stream(samples), key=lambda t: t[0])
        judge.contexts.clear()
        batched = sorted(ScoringRun(judge, BatchExecutor(judge.backend)).run(samples), key=lambda t: t[0])
        judge.close()
    assert [i for i, _ in windowed] == list(range(len(samples)))
    assert [r.to_dict() for _, r in windowed] == [r.to_dict() for _, r in batched]
    assert sum(r.ok for _, r in windowed) == 9 and "not found" in (windowed[-1][1].error or "")


def test_images_of_the_next_groups_are_loaded_ahead_in_another_thread(tmp_path: Any, corrupt_image: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge's thread reads answers and sends requests; the next groups' pictures are read,
    hashed and decoded meanwhile by a loader thread, each once, with the same error records."""
    from capjudge.judges.judge import Judge as JudgeClass

    paths = []
    for k in range(6):
        path = tmp_path / f"img{k}.png"
        path.write_bytes(png((40 * k, 100, 30)))
        paths.append(path)
    paths.insert(3, corrupt_image)
    samples = [Sample(str(p), f"caption {j} of {p.name}", id=f"{p.name}-{j}") for p in paths for j in range(3)]
    loads: list[tuple[str, str]] = []
    real_load = JudgeClass.load_image

    def recording(self: Any, image: Any) -> Any:
        loads.append((str(image), threading.current_thread().name))
        return real_load(self, image)

    monkeypatch.setattr(JudgeClass, "load_image", recording)
    with running_server() as srv:
        judge = judge_on(srv, "fleur", concurrency=2)
        results = list(judge.score_many(samples))
        judge.close()
    assert sorted(image for image, _ in loads) == sorted(str(p) for p in paths)  # each picture once
    threads = dict(loads)
    assert threads.pop(str(paths[0])) == threading.current_thread().name  # the first, at once
    assert all(thread.startswith("capjudge-images") for thread in threads.values())
    broken = [r for r in results if not r.ok]
    assert len(broken) == 3 and all("corrupt.jpg" in (r.error or "") and "could not be decoded" in (r.error or "") for r in broken)
    assert sum(r.ok for r in results) == 18 and srv.count == 18


def test_dual_sided_comparison_through_the_window(release: threading.Event) -> None:
    def answer(req: Received) -> Reply:
        reply = default_responder(req)
        first = req.prompt_text().split("Answer 1: ")[1].split("\n")[0]
        reply.body["choices"][0]["message"]["content"] = "Answer 1" if "good" in first else "Answer 2"
        return reply

    pairs = [(RED, "a SLOW good caption", "a poor one")] + [(BLUE, f"good {i}", f"poor {i}") for i in range(6)]
    with running_server(responder=holding("SLOW", release, answer=answer)) as srv:
        judge = judge_on(srv, "gpt4v-pairwise", concurrency=4)
        order = []
        for index, result in judge.compare_stream(pairs):
            assert result.ok and result.verdict == "A" and result.votes == ["A", "A"], result.error
            order.append(index)
            if len(order) == 6:
                release.set()
        assert order[-1] == 0 and sorted(order) == list(range(7))
        judge.close()


def test_results_of_a_cached_answer_come_back_without_a_request(tmp_path: Any) -> None:
    samples = [Sample(RED, f"caption {i}") for i in range(6)]
    with running_server() as srv:
        first = list(judge_on(srv, "fleur", cache_dir=tmp_path).score_many(samples))
        assert srv.count == 6
        again = list(judge_on(srv, "fleur", cache_dir=tmp_path).score_many(samples))
        assert srv.count == 6 and all(r.details["cached"] for r in again)
    assert [r.score for r in again] == [r.score for r in first]


def test_a_submitted_answer_is_in_the_cache_when_the_judge_sees_it(tmp_path: Any) -> None:
    from capjudge.backends.cache import CachedBackend

    with running_server() as srv:
        judge = judge_on(srv, "vanilla", cache_dir=tmp_path)
        backend = judge.backend
        assert isinstance(backend, CachedBackend)
        for seen, (_, result) in enumerate(judge.score_stream([Sample(RED, f"caption {i}") for i in range(5)]), start=1):
            assert result.ok
            assert backend.cache.stats()["writes"] >= seen
        assert backend.cache.stats()["writes"] == 5
        judge.close()
    hit = CachedBackend(backend.inner, tmp_path).submit(judge.requests.score_request(judge.prepare_sample(0, Sample(RED, "caption 0")))).result()
    assert isinstance(hit, Completion) and hit.cached


def test_a_broken_input_keeps_every_result_read_before_it() -> None:
    from capjudge.backends.base import Capabilities
    from capjudge.backends.scripted import ScriptedBackend

    def gen() -> Iterator[Sample]:
        yield Sample(RED, "first")
        for i in range(4):
            yield Sample(BLUE, f"c{i}")
        raise RuntimeError("input broke")

    backend = ScriptedBackend("50", capabilities=Capabilities(concurrency=2))
    got = []
    with pytest.raises(RuntimeError, match="input broke"):
        for r in Judge("vanilla", backend).score_many(gen()):
            got.append(r.caption)
    assert got == ["first", "c0", "c1", "c2", "c3"]
