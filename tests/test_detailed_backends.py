"""What the detailed-caption methods need from the core, on every backend: text-only requests (no
image) on the tiny HF and tiny llama.cpp models, the OpenAI wire and the scripted backend; the tiny
models running each new method end to end (text-only steps included); request layouts that leave
the other methods' requests (and cache keys) as they were; scripted rules; the CLI's --vqa-dir and
the official aggregate in the summary and the HTML report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Backend, Completion, GenerationConfig, Message, Request
from capjudge.backends.registry import load_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.core.errors import UsageError
from capjudge.data.images import load_image
from openai_fake_server import FakeOpenAIServer, running_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RULES = EXAMPLES / "scripted_detailed.json"
TEXT_ONLY = Request((Message("system", "You answer briefly.", parts=True), Message("user", "Name a colour.", parts=True)), GenerationConfig(max_new_tokens=4))
SYSTEM_ONLY = Request((Message("system", "Rate 0 to 100 how alike two captions are.", parts=True),), GenerationConfig(max_new_tokens=4))


def test_layout_fields_leave_other_requests_as_they_were() -> None:
    plain = Request((Message("user", "x"),))
    assert plain.fingerprint()["messages"] == [{"role": "user", "content": "x", "images": []}]  # cache keys unchanged
    laid = Request((Message("user", "x", text_first=True, detail="high", parts=True),))
    assert laid.fingerprint()["messages"][0] == {"role": "user", "content": "x", "images": [], "text_first": True, "detail": "high", "parts": True}


def test_openai_wire_text_only_and_layouts() -> None:
    from PIL import Image

    with running_server() as srv:
        be = load_backend(f"openai-compatible:{srv.base_url}#m", neutral_penalties=False, timeout=5.0)
        be.generate([TEXT_ONLY])
        img = load_image(Image.new("RGB", (8, 8), (1, 2, 3)))
        be.generate([Request((Message("user", "t", images=(img,), text_first=True, detail="high"),)), Request((Message("user", "plain"),))])
        be.close()
        bodies = [r.body["messages"] for r in srv.received]
    assert bodies[0] == [{"role": "system", "content": [{"type": "text", "text": "You answer briefly."}]}, {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}]
    # The two requests of one generate call go out concurrently: find each by its content.
    layout = next(b for b in bodies[1:] if isinstance(b[0]["content"], list))
    plain = next(b for b in bodies[1:] if isinstance(b[0]["content"], str))
    assert layout[0]["content"][0] == {"type": "text", "text": "t"} and layout[0]["content"][1]["image_url"]["detail"] == "high"
    assert plain == [{"role": "user", "content": "plain"}]  # as before


def test_scripted_rules_pick_by_prompt(tmp_path: Path) -> None:
    be = load_backend(f"scripted:fallback?rules={RULES}")
    assert isinstance(be, ScriptedBackend)
    outs = be.generate([Request((Message("system", "decompose the given CAPTION into atomic propositions"),)), TEXT_ONLY])
    assert isinstance(outs[0], Completion) and outs[0].text.startswith("1. ") and isinstance(outs[1], Completion) and outs[1].text == "fallback"
    assert be.identity()["script"].startswith("rules:")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a list"}', encoding="utf-8")
    with pytest.raises(UsageError, match="bad.json"):
        load_backend(f"scripted:x?rules={bad}")
    assert main(["score", "--method", "clair", "--backend", f"scripted:x?rules={bad}", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]) == 2


@pytest.mark.parametrize("command", ["score", "compare", "arena"])
def test_rules_files_are_said_to_be_trusted_like_code(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #30, item 18: a rules pattern such as (a+)+$ runs unbounded (Python's re takes no time
    limit, and no check tells every such pattern apart), so the help says what a rules file is."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "rules=FILE" in text and "trusted like code" in text and "(a+)+$" in text
    docs = " ".join((EXAMPLES.parent / "docs" / "backends.md").read_text(encoding="utf-8").split())
    assert "A rules file is trusted like code" in docs


# ------------------------------------------------------------------------------- the README commands
@pytest.mark.parametrize(
    ("command", "method", "extra", "aggregate"),
    [
        ("score", "capmas-factuality", [], "precision (micro, official)"),
        ("score", "capmas-coverage", ["--vqa-dir", str(EXAMPLES / "vqa")], "recall (micro, official)"),
        ("score", "clair", [], "mean score"),
        ("compare", "caparena", [], "A better"),
    ],
)
def test_readme_commands_on_the_examples(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, method: str, extra: list[str], aggregate: str) -> None:
    out, html = tmp_path / "out.jsonl", tmp_path / "report.html"
    inp = EXAMPLES / ("pairs.jsonl" if command == "compare" else "captions.jsonl")
    rc = main([command, "--method", method, "--backend", f"scripted:no rule matched?rules={RULES}", "--images", str(EXAMPLES / "images"), "--input", str(inp), "--out", str(out), "--no-cache", "--html", str(html), *extra])
    assert rc == 0
    assert aggregate in capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records and all(r["status"] == "ok" for r in records)
    if command == "score":
        assert all(r["details"]["steps"] for r in records)
        page = html.read_text(encoding="utf-8")
        assert "steps" in page
    else:
        assert [r["verdict"] for r in records] == ["A", "A"]  # the rules favour the examples' good captions


def test_vqa_dir_usage_errors(tmp_path: Path) -> None:
    base = ["--backend", "scripted:x", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    assert main(["score", "--method", "capmas-coverage", *base]) == 2  # no question folder
    assert main(["score", "--method", "capmas-coverage", "--vqa-dir", str(tmp_path / "none"), *base]) == 2
    assert main(["score", "--method", "clair", "--vqa-dir", str(EXAMPLES / "vqa"), *base]) == 2
    assert not (tmp_path / "o.jsonl").exists()


# ------------------------------------------------------------------------------- tiny local models
class Spy(ScriptedBackend):
    """Answers through a real backend, the decomposition step excepted (a tiny random model writes
    no numbered list): the verification step then runs on the real model with the image."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.seen: list[Request] = []
        super().__init__(self.answer, model="spy")

    def answer(self, request: Request) -> Any:
        self.seen.append(request)
        if "decompose the given CAPTION" in request.messages[0].content:
            return "1. Two cats.\n2. A sofa."
        out = self.inner.generate([request])[0]
        return out


def run_every_method(backend: Backend) -> None:
    """Each new method on ``backend``: text-only steps (decomposition, coverage, CLAIR) and image
    steps (verification, CapArena) reach the model and every sample gets a record."""
    assert isinstance(backend.generate([TEXT_ONLY])[0], Completion)
    assert isinstance(backend.generate([SYSTEM_ONLY])[0], Completion)
    spy = Spy(backend)
    sample = Sample(str(EXAMPLES / "images" / "cats.jpg"), "two cats on a sofa.", ("a grey cat and an orange cat.",), id="s1")
    for method, options in (("capmas-factuality", {}), ("capmas-coverage", {"vqa_dir": str(EXAMPLES / "vqa")}), ("clair", {})):
        spy.seen.clear()
        res = Judge(method, spy, max_new_tokens=8, method_options=options).score(sample)
        assert res.status in ("ok", "error") and res.details.get("calls", 0) >= 1, res
        images = [len(r.images) for r in spy.seen]
        if method == "capmas-factuality":
            assert images[0] == 0 and 1 in images[1:]  # text-only decomposition, then the image
            assert res.ok or "never gave one True/False per proposition" in (res.error or "")
        else:
            assert set(images) == {0}  # text only
    spy.seen.clear()
    pair = Judge("caparena", spy, max_new_tokens=8).compare(sample.image, "two cats", "a dog", references=["two cats"])
    assert pair.status in ("ok", "error") and len(spy.seen) >= 2 and all(len(r.images) == 1 for r in spy.seen)
    assert spy.seen[0].messages[0].role == "system" and "Caption Reference" in spy.seen[0].messages[1].content


@pytest.mark.slow
def test_tiny_hf_runs_every_detailed_method(hf_backend: Backend) -> None:
    run_every_method(hf_backend)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    pytest.importorskip("llama_cpp")
    from capjudge.testing.tiny_gguf import build_tiny_llava_gguf

    model, mmproj = build_tiny_llava_gguf(tmp_path_factory.mktemp("tiny-gguf-detailed"), seed=0)
    be = load_backend(f"llamacpp:{model}?mmproj={mmproj}&n_ctx=2048&n_threads=2")
    yield be
    be.close()


@pytest.mark.slow
def test_tiny_llamacpp_runs_every_detailed_method(tiny_gguf: Backend) -> None:
    run_every_method(tiny_gguf)


def test_fake_server_runs_unchanged_methods_without_system_on_api() -> None:
    """Today's behaviour kept: on API backends `--system auto` sends no system turn for the other methods."""
    with running_server() as srv:
        srv_: FakeOpenAIServer = srv
        j = Judge("vanilla", f"openai-compatible:{srv_.base_url}#m", backend_options={"neutral_penalties": False, "timeout": 5.0})
        j.score(str(EXAMPLES / "images" / "cats.jpg"), "two cats")
        j.backend.close()
        assert all(m["role"] != "system" for m in srv_.received[0].body["messages"])


def test_steps_go_out_in_batches_with_the_other_samples() -> None:
    """A batching backend gets every sample's decomposition in one batch, then every verification."""
    from capjudge.backends.scripted import read_rules, rule_responder

    be = ScriptedBackend(rule_responder(read_rules(RULES), "x"))
    samples = [Sample(str(EXAMPLES / "images" / img), f"caption {k}", ("ref",), id=str(k)) for k, img in enumerate(["cats.jpg", "dog.jpg", "cats.jpg"])]
    results = list(Judge("capmas-factuality", be, batch_size=8).score_many(samples))
    assert [r.score for r in results] == [pytest.approx(2 / 3)] * 3
    assert be.batches == [3, 3]
    assert [len(r.images) for r in be.calls] == [0, 0, 0, 1, 1, 1]
