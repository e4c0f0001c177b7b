"""capjudge.reward: a caption judge as a TRL reward function (issue #24, item 1).

Called exactly as TRL 1.16's GRPOTrainer calls reward functions (``_calculate_rewards``: keyword
arguments ``prompts``, ``completions``, ``completion_ids``, every dataset column but ``prompt``,
and ``trainer_state``, ``log_extra``, ``log_metric``), on the scripted backend and the tiny HF judge.
"""

from __future__ import annotations

import asyncio
import base64
import http.server
import inspect
import logging
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Completion, Request
from capjudge.backends.scripted import ScriptedBackend
from capjudge.core.redact import register_secret
from capjudge.reward import AsyncCaptionReward, CaptionReward, make_async_reward, make_reward

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "images"
CATS, DOG = EXAMPLES / "cats.jpg", EXAMPLES / "dog.jpg"


def _pixel(image: Any) -> tuple[int, ...]:
    return tuple(image.getpixel((375, 375)))


def _pixels() -> dict[tuple[int, ...], str]:
    from PIL import Image

    return {_pixel(Image.open(CATS).convert("RGB")): "0.9", _pixel(Image.open(DOG).convert("RGB")): "0.3"}


class ByImage:
    """Answers by the picture the request shows (cats 0.9, dog 0.3): proves which image was judged."""

    def __init__(self) -> None:
        self.answers = _pixels()

    def __call__(self, request: Request) -> str:
        return self.answers[_pixel(request.images[0].pil())]


def trl_call(reward: Any, completions: list[Any], **columns: Any) -> Any:
    """The call GRPOTrainer._calculate_rewards makes (TRL 1.16), for a standard-format dataset."""
    n = len(completions)
    return reward(
        prompts=["Describe the image."] * n,
        completions=completions,
        completion_ids=[[1, 2, 3]] * n,
        **columns,
        trainer_state=object(),
        log_extra=lambda *a, **k: None,
        log_metric=lambda *a, **k: None,
    )


@pytest.fixture()
def scripted() -> ScriptedBackend:
    return ScriptedBackend(ByImage())


# ----------------------------------------------------------------------------- signature
def test_trl_call_returns_one_float_or_none_per_completion(scripted: ScriptedBackend) -> None:
    reward = make_reward("fleur", scripted)
    out = trl_call(reward, ["two cats", "a dog", "cats on a bed"], image=[str(CATS), str(DOG), str(CATS)])
    assert isinstance(reward, CaptionReward) and not inspect.iscoroutinefunction(reward.__call__)
    assert out == [pytest.approx(0.9), pytest.approx(0.3), pytest.approx(0.9)]
    assert all(type(x) is float for x in out)
    assert reward.__name__ == "capjudge_fleur"
    assert make_reward("fleur", scripted, name="caption").__name__ == "caption"


def test_trl_sees_the_sync_and_async_forms() -> None:
    trl_utils = pytest.importorskip("trl.trainer.utils", reason="TRL not installed (pip install 'capjudge[rl]')")
    sync, asyn = make_reward("fleur", "scripted:0.5"), make_async_reward("fleur", "scripted:0.5")
    try:
        assert not trl_utils.is_async_callable(sync) and trl_utils.is_async_callable(asyn)
        assert trl_utils.get_callable_name(sync) == trl_utils.get_callable_name(asyn) == "capjudge_fleur"
    finally:
        asyn.close()


# ----------------------------------------------------------------------------- images
@pytest.fixture()
def image_server() -> Iterator[str]:
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(EXAMPLES), **k)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_every_image_form(scripted: ScriptedBackend, image_server: str) -> None:
    from PIL import Image

    data = CATS.read_bytes()
    forms: list[Any] = [
        str(CATS),
        CATS,
        data,
        Image.open(CATS),
        "data:image/jpeg;base64," + base64.b64encode(data).decode(),
        f"{image_server}/cats.jpg",
        {"bytes": data, "path": None},  # an undecoded datasets.Image cell
        {"bytes": None, "path": str(CATS)},
    ]
    forms.append(DOG)
    out = trl_call(make_reward("fleur", scripted), ["a caption"] * len(forms), image=forms)
    assert out == [pytest.approx(0.9)] * (len(forms) - 1) + [pytest.approx(0.3)]


def test_images_column_and_named_column(scripted: ScriptedBackend) -> None:
    reward = make_reward("fleur", scripted)
    assert trl_call(reward, ["a", "b"], images=[[str(DOG)], [str(CATS), str(DOG)]]) == [pytest.approx(0.3), pytest.approx(0.9)]
    named = make_reward("fleur", scripted, image_column="picture")
    assert trl_call(named, ["a"], picture=[str(DOG)], image=[str(CATS)]) == [pytest.approx(0.3)]


def test_a_bad_image_is_none_and_the_others_are_scored(scripted: ScriptedBackend, corrupt_image: Path, caplog: pytest.LogCaptureFixture) -> None:
    reward = make_reward("fleur", scripted)
    images: list[Any] = [str(CATS), str(corrupt_image), None, str(DOG), str(corrupt_image), [], b"not an image"]
    with caplog.at_level(logging.WARNING, logger="capjudge.reward"):
        out = trl_call(reward, ["c"] * len(images), image=images)
        trl_call(reward, ["c"], image=[str(corrupt_image)])  # same cause again: not logged again
    assert out == [pytest.approx(0.9), None, None, pytest.approx(0.3), None, None, None]
    lines = [r.getMessage() for r in caplog.records if r.name == "capjudge.reward"]
    assert sum("corrupt.jpg" in line for line in lines) == 1  # one line per cause
    assert any("no image" in line for line in lines) and any("images list is empty" in line for line in lines)
    assert len(lines) == 4


def test_missing_image_column_or_wrong_lengths_are_the_callers_error(scripted: ScriptedBackend) -> None:
    reward = make_reward("fleur", scripted)
    with pytest.raises(ValueError, match="no image column"):
        trl_call(reward, ["a"], picture=[str(CATS)])
    with pytest.raises(ValueError, match="one value per completion"):
        trl_call(reward, ["a", "b"], image=[str(CATS)])
    with pytest.raises(ValueError, match="differ in length"):
        reward(prompts=["p"], completions=["a", "b"], image=[str(CATS)] * 2)
    with pytest.raises(ValueError, match="image column 'picture'"):
        trl_call(make_reward("fleur", scripted, image_column="picture"), ["a"], image=[str(CATS)])


# ----------------------------------------------------------------------------- completions
def test_conversational_completions() -> None:
    backend = ScriptedBackend(lambda req: "0.8" if "two cats" in req.messages[-1].content else "0.1")
    reward = make_reward("fleur", backend)
    completions = [
        [{"role": "assistant", "content": "two cats"}],
        [{"role": "assistant", "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "cats"}]}],
        [{"role": "user", "content": "two cats"}, {"role": "assistant", "content": "a dog"}],
        [{"role": "user", "content": "two cats"}],  # no assistant message
        [{"role": "assistant", "content": [{"type": "image"}]}],  # no text
        42,
    ]
    assert trl_call(reward, completions, image=[str(CATS)] * len(completions)) == [pytest.approx(0.8), pytest.approx(0.8), pytest.approx(0.1), None, None, None]


def test_caption_from() -> None:
    backend = ScriptedBackend(lambda req: "0.8" if "two cats" in req.messages[-1].content else "0.1")

    def after_marker(text: str) -> str | None:
        return text.split("Caption:", 1)[1].strip() if "Caption:" in text else None

    reward = make_reward("fleur", backend, caption_from=after_marker)
    assert trl_call(reward, ["Let me look. Caption: two cats", "two cats"], image=[str(CATS)] * 2) == [pytest.approx(0.8), None]


def test_references_column_reaches_reference_methods() -> None:
    seen: list[str] = []
    backend = ScriptedBackend(lambda req: seen.append(req.messages[-1].content) or "70")
    trl_call(make_reward("reference", backend), ["two cats"], image=[str(CATS)], references=[["a grey cat and an orange cat"]])
    assert "a grey cat and an orange cat" in seen[0]


# ----------------------------------------------------------------------------- scores
@pytest.mark.parametrize(
    ("method", "answer", "normalized", "raw"),
    [("vanilla", "70", 0.7, 70.0), ("fleur", "0.35", 0.35, 0.35), ("visce2-code", "150", 1.0, 150.0), ("gpt4v-grade", '{"score": 40, "reasoning": "ok"}', 0.4, 40.0)],
)
def test_normalised_and_raw(method: str, answer: str, normalized: float, raw: float) -> None:
    backend = ScriptedBackend(answer)
    norm, plain = make_reward(method, backend), make_reward(method, backend, normalize=False)
    assert trl_call(norm, ["two cats"], image=[str(CATS)]) == [pytest.approx(normalized)]
    assert trl_call(plain, ["two cats"], image=[str(CATS)]) == [pytest.approx(raw)]


def test_no_score_is_none() -> None:
    out = trl_call(make_reward("vanilla", "scripted:no number here"), ["two cats", "x"], image=[str(CATS)] * 2)
    assert out == [None, None]


def test_pairwise_methods_are_refused() -> None:
    with pytest.raises(ValueError, match="compares two captions"):
        make_reward("gpt4v-pairwise", "scripted:A")


def test_judge_option_takes_any_score_many() -> None:
    class Remote:
        """Stands for a judge served elsewhere: only score_many."""

        def __init__(self) -> None:
            self.inner = Judge("vanilla", "scripted:80")
            self.calls = 0

        def score_many(self, samples: Any) -> Any:
            self.calls += 1
            return self.inner.score_many(samples)

    remote = Remote()
    reward = make_reward(judge=remote)
    assert trl_call(reward, ["a", "b"], image=[str(CATS), str(DOG)]) == [pytest.approx(0.8)] * 2
    assert remote.calls == 1 and reward.__name__ == "capjudge"
    with pytest.raises(ValueError, match="ready judge"):
        make_reward("vanilla", judge=remote)
    with pytest.raises(TypeError, match="score_many"):
        make_reward(judge=object())  # type: ignore[arg-type]


def test_cache_only_on_request(tmp_path: Path) -> None:
    calls: list[int] = []
    backend = ScriptedBackend(lambda req: calls.append(1) or "0.5")
    for _ in range(2):
        trl_call(make_reward("fleur", backend), ["two cats"], image=[str(CATS)])
    assert len(calls) == 2  # default: no cache, a policy samples
    cached = make_reward("fleur", backend, cache=tmp_path / "cache")
    for _ in range(2):
        assert trl_call(cached, ["two cats"], image=[str(CATS)]) == [pytest.approx(0.5)]
    assert len(calls) == 3


def test_no_secret_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-reward-test-0123456789abcdef"
    register_secret(secret)

    def fails(req: Request) -> Completion | BaseException:
        return RuntimeError(f"upstream refused key {secret}")

    with caplog.at_level(logging.WARNING, logger="capjudge.reward"):
        out = trl_call(make_reward("fleur", ScriptedBackend(fails)), ["a", "b"], image=[str(CATS)] * 2)
    assert out == [None, None]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "upstream refused key" in text and secret not in text and secret[:8] + "-" not in text


# ----------------------------------------------------------------------------- async
def test_async_form_gives_the_same_rewards(scripted: ScriptedBackend) -> None:
    reward = make_async_reward("fleur", scripted)
    try:
        assert isinstance(reward, AsyncCaptionReward) and inspect.iscoroutinefunction(reward.__call__)
        out = asyncio.run(trl_call(reward, ["a", "b", "c"], image=[str(CATS), None, str(DOG)]))
    finally:
        reward.close()
    assert out == [pytest.approx(0.9), None, pytest.approx(0.3)]


def test_concurrent_async_calls_are_one_batch(scripted: ScriptedBackend) -> None:
    reward = make_async_reward("fleur", scripted, batch_window=0.2)

    async def three_calls() -> list[Any]:
        return await asyncio.gather(
            trl_call(reward, ["a", "b"], image=[str(CATS)] * 2),
            trl_call(reward, ["c"], image=[str(DOG)]),
            trl_call(reward, ["d", "e", "f"], image=[str(DOG), None, str(CATS)]),
        )

    try:
        out = asyncio.run(three_calls())
    finally:
        reward.close()
    assert out == [[pytest.approx(0.9)] * 2, [pytest.approx(0.3)], [pytest.approx(0.3), None, pytest.approx(0.9)]]
    assert reward.batcher.batches == [5]  # one judge batch for the three calls
    assert scripted.batches == [5]  # one backend call


def test_async_batch_sent_when_full() -> None:
    backend = ScriptedBackend("0.5")
    reward = make_async_reward("fleur", backend, batch_window=30.0, max_batch=3)

    async def calls() -> list[Any]:
        return await asyncio.gather(*(trl_call(reward, ["a"], image=[str(CATS)]) for _ in range(3)))

    try:
        out = asyncio.run(asyncio.wait_for(calls(), timeout=20))  # far below the window
    finally:
        reward.close()
    assert out == [[pytest.approx(0.5)]] * 3 and reward.batcher.batches == [3]


# ----------------------------------------------------------------------------- tiny HF judge
@pytest.mark.hf
@pytest.mark.slow
def test_one_image_group_per_image_on_hf(tiny_llava_dir: Path) -> None:
    """A GRPO batch of B=2 images x G=4 completions: one image prefix pass per image, every answer
    from the prefix path, and the rewards equal the judge's own scores (normalised)."""
    from capjudge.backends.hf import HFBackend

    captions = ["two cats are lying on a bed.", "a cat on a bed.", "an orange cat and a grey cat.", "cats sleeping together.",
                "a black dog looks at the camera.", "a dog wearing a hat.", "a dog and a cat.", "a dog in a room."]
    images = [str(CATS)] * 4 + [str(DOG)] * 4
    backend = HFBackend(str(tiny_llava_dir), prefix_reuse=True)
    inner = Judge("fleur", backend)

    class Recording:
        def __init__(self) -> None:
            self.results: list[Any] = []

        def score_many(self, samples: Any) -> Any:
            self.results = list(inner.score_many(samples))
            return self.results

    recording = Recording()
    tower_calls: list[int] = []
    hook = backend.net.model.vision_tower.register_forward_hook(lambda *a: tower_calls.append(1))
    backend.prefix_stats.reset()
    try:
        out = trl_call(make_reward(judge=recording), captions, image=images)
    finally:
        hook.remove()
    assert backend.prefix_stats.prefix_forwards == 2 and len(tower_calls) == 2  # one per image
    assert backend.prefix_stats.rows == 8
    assert {r.details.get("prefix_reuse") for r in recording.results} == {"used"}
    assert out == [None if r.score is None else pytest.approx(r.score) for r in recording.results]  # fleur: already on 0-1
    alone = [Judge("fleur", HFBackend(str(tiny_llava_dir), prefix_reuse=False)).score(Sample(i, c)) for i, c in zip(images[:2], captions[:2])]
    for got, one in zip(out, alone):
        assert (got is None) == (one.score is None)
        if one.score is not None:
            assert got == pytest.approx(one.score, abs=1e-5)
    assert sum(x is not None for x in out) >= 4
    backend.close()


# ----------------------------------------------------------------------------- README
def test_readme_example_runs_as_printed() -> None:
    """docs/reward.md "In short": the block without a model runs from the repository root and
    prints what its comment says."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "docs" / "reward.md").read_text(encoding="utf-8")
    section = readme.split("## In short: Use it as a reward", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"python - <<'EOF'\n(.*?)\nEOF\n", section, re.S)
    assert code is not None
    expected = re.search(r"#\s*(\[.*\])\s*$", code.group(1), re.M)
    assert expected is not None
    done = subprocess.run([sys.executable, "-c", code.group(1)], cwd=root, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(root / "src")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == expected.group(1)


# ----------------------------------------------------------------------------- lone surrogates
SURROGATE = "two cats \ud800 on a bed"  # a lone UTF-16 surrogate: no text (issue #30, item 20)


def test_a_lone_surrogate_is_that_completions_none_with_its_cause(scripted: ScriptedBackend, caplog: pytest.LogCaptureFixture) -> None:
    reward = make_reward("fleur", scripted)
    with caplog.at_level(logging.WARNING, logger="capjudge.reward"):
        out = trl_call(reward, ["two cats", SURROGATE, "a dog"], image=[str(CATS), str(CATS), str(DOG)])
    assert out == [pytest.approx(0.9), None, pytest.approx(0.3)]
    assert "the caption holds a lone surrogate" in caplog.text and "which is not text" in caplog.text


@pytest.mark.hf
@pytest.mark.slow
def test_a_lone_surrogate_on_a_local_judge_fails_alone(tiny_llava_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The tokenizer refused the whole batch ("TextEncodeInput must be Union..."): now the one
    completion is None, named, and the others of its batch are scored."""
    reward = make_reward("fleur", f"hf:{tiny_llava_dir}")
    try:
        with caplog.at_level(logging.WARNING, logger="capjudge.reward"):
            out = trl_call(reward, ["two cats", SURROGATE, "a cat on a bed"], image=[str(CATS)] * 3)
    finally:
        reward.close()
    assert out[1] is None and "lone surrogate" in caplog.text and "TextEncodeInput" not in caplog.text
    alone = Judge("fleur", f"hf:{tiny_llava_dir}").score_many([Sample(CATS, "two cats"), Sample(CATS, "a cat on a bed")])
    assert [out[0], out[2]] == [None if r.score is None else pytest.approx(r.score, abs=1e-5) for r in alone]
