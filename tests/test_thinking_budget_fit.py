"""The thinking budget on a model of a small context (issue 29, item 6): the tiny thinking
Qwen3-VL (capjudge.testing.tiny_thinking) with a context of 4,096 tokens. The default budget of
4,096 tokens made every row a context-length error advising ``--max-new-tokens``; now the default
is fitted to the context (said once, in a warning), a budget that does not fit is named in the
error (``--thinking-budget``), and after fixing the option a re-run on the same ``--out`` asks the
rows that failed for the budget again."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.hf.context import context_error
from capjudge.backends.thinking import DEFAULT_THINKING_BUDGET, Thinking, fit_default_budget, plan
from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
CATS = EXAMPLES / "images" / "cats.jpg"
CONTEXT = 4096


# ------------------------------------------------------------------------------ without a model
def test_the_default_budget_is_fitted_to_the_context() -> None:
    assert fit_default_budget(None) == DEFAULT_THINKING_BUDGET == 4096
    assert fit_default_budget(262144) == 4096
    assert fit_default_budget(4096) == 2048
    thinks = "<think>{{ messages }}"  # a template that writes reasoning markers: the model thinks
    fitted = plan(Thinking(), thinks, "m", context=4096)
    assert (fitted.extra_tokens, fitted.fitted_from) == (2048, 4096)
    given = plan(Thinking(budget=4096), thinks, "m", context=4096)  # a budget given is kept
    assert (given.extra_tokens, given.fitted_from) == (4096, None)
    roomy = plan(Thinking(), thinks, "m", context=32768)
    assert (roomy.extra_tokens, roomy.fitted_from) == (4096, None)


def test_the_context_error_names_the_option_that_overflowed() -> None:
    by_budget = context_error(179, 12, 16 + 4096, 4096, "text_config.max_position_embeddings", thinking_budget=4096)
    assert by_budget is not None
    text = str(by_budget)
    assert "(the method's 16 + the thinking budget 4096)" in text
    assert "--thinking-budget N" in text and f"at most {4096 - 179 - 16} here" in text
    assert "--max-new-tokens" not in text
    assert by_budget.counts["thinking_budget"] == 4096
    by_answer = context_error(4000, 12, 200 + 64, 4096, "x", thinking_budget=64)  # over without the budget too
    assert by_answer is not None and "--max-new-tokens" in str(by_answer) and "--thinking-budget" in str(by_answer)
    plain = context_error(991, 576, 10, 1000, "x")  # no thinking: as before
    assert plain is not None and "--thinking-budget" not in str(plain) and "thinking_budget" not in plain.counts


# ---------------------------------------------------------------------------- the tiny model


@pytest.fixture(scope="module")
def small_context_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny thinking model with a context of :data:`CONTEXT` tokens."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from capjudge.testing.tiny_thinking import build_tiny_thinking_vlm

    built = build_tiny_thinking_vlm(tmp_path_factory.mktemp("tiny-thinking"))
    folder = tmp_path_factory.mktemp("small-context") / "model"
    shutil.copytree(built, folder)
    config = json.loads((folder / "config.json").read_text())
    config.setdefault("text_config", {})["max_position_embeddings"] = CONTEXT
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.hf
@pytest.mark.slow
def test_the_default_budget_fits_a_small_context_and_says_so(small_context_model: Path, caplog: pytest.LogCaptureFixture) -> None:
    from capjudge import Judge, load_backend

    backend = load_backend(f"hf:{small_context_model}")
    with caplog.at_level(logging.WARNING, logger="capjudge"):
        r = Judge("fleur", backend).score(CATS, "two cats lying on a pink blanket")
    assert r.ok, r.error  # before: a context-length error advising --max-new-tokens
    assert r.details["reasoning"] == "score 97 out of 100, or 3"
    said = [rec.getMessage() for rec in caplog.records if "default thinking budget" in rec.getMessage()]
    assert len(said) == 1 and "is 2048 tokens (half of it), not 4096" in said[0] and "--thinking-budget" in said[0]


def _score(model: Path, out: Path, *extra: str) -> list[str]:
    return ["score", "--method", "fleur", "--backend", f"hf:{model}", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"),
            "--out", str(out), "--no-cache", "--limit", "2", *extra]  # fmt: skip


@pytest.mark.hf
@pytest.mark.slow
def test_a_budget_that_does_not_fit_is_named_and_a_rerun_with_another_asks_again(small_context_model: Path, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = tmp_path / "out.jsonl"
    assert main(_score(small_context_model, out, "--thinking-budget", "4096")) == EXIT_ALL_FAILED
    err = capsys.readouterr().err
    assert "lower the thinking budget (--thinking-budget N" in err  # the cause, at the end of the run
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(r["status"] == "error" and r["details"]["context"]["thinking_budget"] == 4096 and r["details"]["options_digest"] for r in records)

    # The same options: the records are kept, and the summary says which options ask them again.
    assert main(_score(small_context_model, out, "--thinking-budget", "4096")) == EXIT_ALL_FAILED
    said = " ".join(capsys.readouterr().out.split())  # rich wraps at 80 columns
    assert "2 record(s) kept" in said and "did not fit the token budget" in said and "--thinking-budget" in said

    # The option fixed: the rows that failed for the budget are asked again, without --retry-errors.
    assert main(_score(small_context_model, out, "--thinking-budget", "64")) == 0
    said = " ".join(capsys.readouterr().out.split())  # rich wraps at 80 columns
    assert "2 error record(s) that did not fit the token budget were made with other options: asked again" in said
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok", "ok"]


# ------------------------------------------------------------------ llama.cpp: n_ctx 2048 default
@pytest.mark.llamacpp
@pytest.mark.slow
def test_llamacpp_fits_the_default_budget_to_n_ctx_and_names_a_budget_that_does_not_fit(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    from capjudge import Judge, load_backend
    from capjudge.testing.tiny_gguf_qwen import build_tiny_thinking_gguf

    model, mmproj = build_tiny_thinking_gguf(tmp_path)
    spec = f"llamacpp:{model}?mmproj={mmproj}"
    fitted = load_backend(spec)  # n_ctx 2048 by default: 4096 + the answer never fitted
    assert fitted.identity()["thinking_budget_fitted"] == 1024  # the answers change with n_ctx: so does the cache key
    r = Judge("fleur", fitted).score(CATS, "a cat")
    assert r.ok, r.error
    assert "thinking_budget_fitted" not in load_backend(spec, n_ctx=16384).identity()  # room enough: identity unchanged
    too_big = Judge("fleur", load_backend(spec, thinking_budget=4096)).score(CATS, "a cat")
    assert too_big.error is not None and "lower the thinking budget of 4096 tokens (--thinking-budget N" in too_big.error
    assert too_big.details["context"]["thinking_budget"] == 4096
