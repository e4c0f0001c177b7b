"""The first hour without surprises (issue 29, items 5, 7, 8, 9, 11, 14): what a new user reads
in an 80-column terminal. A run where every sample fails says why and exits 6; a bad backend
option is a usage error before anything loads, for every kind; ``scripted:`` text may hold a
``?``; ``explain`` of a missing image exits non-zero; one download hint; progress bars keep their
counts at 80 columns, on every command that judges; captions are cut at a word with an
ellipsis; ``methods`` shows each option's values and an empty default as ``(none)``; ``html``
without ``--images`` says how to get thumbnails."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED, EXIT_BACKEND, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
LONG_SPEC = "scripted:I would rate this caption 85 out of 100 because it is quite accurate"


@pytest.fixture(autouse=True)
def narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    """An 80-column terminal (rich reads COLUMNS), no colour codes in the captured text."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


def _score(tmp_path: Path, backend: str, *extra: str, out: str = "out.jsonl") -> list[str]:
    return ["score", "--method", "vanilla", "--backend", backend, "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / out), "--no-cache", *extra]


# ------------------------------------------------------------------- item 5: every sample failed
def test_a_run_where_every_sample_fails_names_the_cause_and_exits_6(tmp_path: Path, capsys: Any) -> None:
    code = main(_score(tmp_path, "scripted:no idea"))
    err = capsys.readouterr().err
    assert code == EXIT_ALL_FAILED == 6
    assert "6 of 6 sample(s) failed" in err
    assert "6x no score in the answer" in err and "'no idea'" in err  # the cause, counted, without the sample's name
    assert "no sample succeeded (exit 6)" in err


def test_the_causes_are_printed_with_quiet_and_a_partial_failure_exits_0(tmp_path: Path, capsys: Any) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps([["orange cat", "I cannot judge this."]]))
    code = main(_score(tmp_path, f"scripted:85?rules={rules}", "--quiet"))
    err = capsys.readouterr().err
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    failed = sum(r["status"] == "error" for r in records)
    assert 0 < failed < len(records)
    assert code == 0
    assert f"{failed} of {len(records)} sample(s) failed" in err and f"{failed}x no score in the answer" in err


def test_exit_3_takes_precedence_over_6_when_samples_failed_for_backend_reasons(capsys: Any) -> None:
    from capjudge.cli.common import finish
    from capjudge.data.types import ScoreResult
    from capjudge.run.summary import RunTally

    tally = RunTally(method="vanilla")
    for i in range(2):
        tally.add(ScoreResult(image="x.jpg", caption="c", score=None, method="vanilla", backend="b", model="m", template_hash="h", raw=None, status="error", error=f"sample {i}: backend error: BackendGone: gone", id=str(i), details={"resumable": True}))
    assert finish(tally) == EXIT_BACKEND
    assert "2x BackendGone: gone" in capsys.readouterr().err


def test_golden_style_compare_where_every_pair_fails_exits_6(tmp_path: Path) -> None:
    args = ["compare", "--backend", "scripted:I cannot tell.", "--images", str(IMAGES), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(tmp_path / "p.jsonl"), "--no-cache", "--quiet"]
    assert main(args) == EXIT_ALL_FAILED


# -------------------------------------------------------------- item 9: explain of a missing image
def test_explain_of_a_missing_image_exits_non_zero(capsys: Any) -> None:
    code = main(["explain", "--backend", "scripted:0.5", "--images", str(IMAGES), "--image", "nope.jpg", "--caption", "two cats", "--no-cache"])
    captured = capsys.readouterr()
    assert code == EXIT_ALL_FAILED
    assert "not found" in captured.out and "no sample succeeded" in captured.err


# ------------------------------------------------------------------- item 7: backend options
@pytest.mark.parametrize(
    ("backend", "option", "named"),
    [
        ("hf:{tiny}", "device=cdua", "device='cdua'"),
        ("hf:{tiny}", "device=gpu:0", "device='gpu:0'"),
        ("hf:{tiny}", "dtype=float17", "dtype='float17'"),
        ("hf:{tiny}", "batch_size=0", "batch_size=0"),
        ("hf:{tiny}", "attn_implementation=bogus", "attn_implementation='bogus'"),
        ("openai:gpt-4o", "timeout=0", "timeout=0"),
        ("openai:gpt-4o", "max_retries=-1", "max_retries=-1"),
        ("openai:gpt-4o", "max_top_logprobs=-3", "max_top_logprobs=-3"),
        ("openai:gpt-4o", "retry_base_delay=-1", "retry_base_delay=-1"),
        ("openai:gpt-4o", "gone_after=-1", "gone_after=-1"),
        ("openai:gpt-4o", "max_cost=-1", "max_cost=-1"),
        ("openai:gpt-4o", "extra_body=notjson", "extra_body"),
        ("azure:my-deployment", "timeout=nan", "timeout=nan"),
        ("openai-compatible:http://127.0.0.1:9/v1#m", "thinking_budget=-2", "thinking_budget=-2"),
        ("openai-compatible:http://127.0.0.1:9/v1#m", "default_headers=x", "default_headers"),
        ("scripted:85", "rulez=x.json", "rulez"),
    ],
)
def test_every_bad_backend_option_is_a_usage_error_before_loading(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch, backend: str, option: str, named: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "az-test")
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example.invalid")
    tiny = tmp_path / "model"
    tiny.mkdir()  # a folder is all the checks before loading read: nothing loads
    code = main(_score(tmp_path, backend.format(tiny=tiny), "--backend-opt", option, "--limit", "1"))
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert named in err
    assert "internal error" not in err and "Traceback" not in err


def test_llamacpp_numbers_are_checked(tmp_path: Path) -> None:
    from capjudge.backends.llamacpp.backend import check_options
    from capjudge.backends.options import OptionError
    from capjudge.backends.registry import parse_spec

    spec = parse_spec(f"llamacpp:{tmp_path / 'm.gguf'}")
    for option, named in (("n_ctx", "-5"), ("n_threads", "0"), ("n_batch", "-1"), ("n_gpu_layers", "-7")):
        with pytest.raises(OptionError, match=f"{option}={named}"):
            check_options(spec, **{option: named})
    with pytest.raises(FileNotFoundError, match="chat_template='/no/such.jinja'"):
        check_options(spec, chat_template="/no/such.jinja")


def test_hf_device_without_cuda_is_an_option_error() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    from capjudge.backends.hf.settings import usable_device
    from capjudge.backends.options import OptionError

    with pytest.raises(OptionError, match="device='cuda': torch sees no CUDA GPU"):
        usable_device(torch, "cuda", "auto")
    assert usable_device(torch, "cpu", "auto")[1] == "float32"


# ------------------------------------------------------------------ item 8: scripted text with '?'
@pytest.mark.parametrize(
    ("spec", "text", "options"),
    [
        ("scripted:Maybe 40?</think> 85", "Maybe 40?</think> 85", {}),
        ("scripted:Is it 40%3F Yes, 85.", "Is it 40? Yes, 85.", {}),
        ("scripted:Why? 85?rules=r.json", "Why? 85", {"rules": "r.json"}),
        ("scripted:a?b=c", "a?b=c", {}),  # b is no option of scripted: text
        ("scripted:The score is 0.73.", "The score is 0.73.", {}),  # existing specs unchanged
        ("scripted:Answer 1?rules=r.json", "Answer 1", {"rules": "r.json"}),
        ("scripted:100%", "100%", {}),
    ],
)
def test_scripted_text_may_hold_any_character(spec: str, text: str, options: dict[str, str]) -> None:
    from capjudge.backends.registry import parse_spec

    parsed = parse_spec(spec)
    assert (parsed.target, parsed.options, parsed.raw) == (text, options, spec)


def test_a_scripted_answer_with_a_question_mark_runs(tmp_path: Path) -> None:
    # (the opening marker written out: a bare closing one counts only where a template opened it)
    assert main(_score(tmp_path, "scripted:<think>Maybe 40?</think> 85", "--quiet", "--limit", "1")) == 0
    rec = json.loads((tmp_path / "out.jsonl").read_text())
    assert rec["status"] == "ok" and rec["score"] == 85 and rec["details"]["reasoning"] == "Maybe 40?"


def test_name_targets_still_end_at_the_first_question_mark() -> None:
    from capjudge.backends.registry import parse_spec

    parsed = parse_spec("hf:some/model?dtype=float16")
    assert (parsed.target, parsed.options) == ("some/model", {"dtype": "float16"})


# ----------------------------------------------------------------------- item 11: download hints
def test_download_hints_are_one_text() -> None:
    from capjudge.backends.hf import hub
    from capjudge.backends.hf.loading import load_failure

    hint = str(load_failure("someone/model", OSError("We couldn't connect to 'https://huggingface.co'.")))
    offline = hub.offline_hint("someone/model", hub.HubStatus("http://127.0.0.1:9", False, "refused"))
    for text in (hint, offline):
        assert hub.download_command("someone/model") in text
        assert "huggingface-cli" not in text
    assert ".." not in hint


# -------------------------------------------------------------------------- item 14: the terminal
def _bar_line(err: str, label_start: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith(label_start)]
    assert lines, err
    return lines[-1]


def test_the_progress_bar_keeps_its_counts_at_80_columns(tmp_path: Path, capsys: Any) -> None:
    main(_score(tmp_path, LONG_SPEC))
    line = _bar_line(capsys.readouterr().err, "vanilla on scripted:")
    assert len(line) <= 80
    assert "6/6" in line and "━" in line  # the bar and its counts; the label is what is cut
    assert "…" in line


def test_probe_and_choose_one_show_progress(tmp_path: Path, capsys: Any) -> None:
    main(["probe", "--method", "vanilla", "--backend", LONG_SPEC, "--images", str(IMAGES), "--captions", str(EXAMPLES / "captions.jsonl"), "--no-cache", "--kinds", "repeat_word,truncate", "--pairwise"])
    line = _bar_line(capsys.readouterr().err, "probe vanilla on")
    assert len(line) <= 80 and re.search(r"\b(\d+)/\1\b", line), line  # done/total, all done
    main(["choose-one", "--method", "vanilla", "--backend", "scripted:85", "--images", str(IMAGES), "--captions", str(EXAMPLES / "captions.jsonl"), "--no-cache"])
    line = _bar_line(capsys.readouterr().err, "choose-one vanilla on")
    assert re.search(r"\b(\d+)/\1\b", line), line


def test_counting_judge_forwards_what_it_does_not_count() -> None:
    from rich.progress import Progress

    from capjudge.cli.common import CountingJudge
    from capjudge.judges.judge import Judge

    judge = Judge("vanilla", "scripted:85", images_root=IMAGES)
    with Progress(disable=True) as bar:
        task = bar.add_task("x", total=0)
        counted = CountingJudge(judge, bar, task)
        counted.batch_size = 3  # whole_lists sets the judge's batch size
        assert judge.batch_size == 3 and counted.method is judge.method
        results = list(counted.score_many([{"image": "cats.jpg", "caption": "two cats"}] * 2))
        assert [r.score for r in results] == [85.0, 85.0]
        assert bar.tasks[0].completed == 2 == bar.tasks[0].total


def test_captions_are_cut_at_a_word_with_an_ellipsis() -> None:
    from capjudge.parsing.text import shorten

    caption = "two cats lying on a pink blanket next to two remote controls"
    assert shorten(caption, 30) == "two cats lying on a pink…"
    assert shorten(caption, 200) == caption
    assert shorten("x" * 40, 10) == "x" * 9 + "…"  # no word boundary: cut, still marked


def test_methods_show_each_option_with_its_values(capsys: Any) -> None:
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "score=plain|expected, default plain" in out
    assert "vqa_dir=DIR, default (none)" in out
    assert "vqa_dir= " not in out and "(default)" not in out


def test_html_without_images_says_how_to_get_thumbnails(tmp_path: Path, capsys: Any) -> None:
    main(_score(tmp_path, "scripted:85", "--quiet"))
    capsys.readouterr()
    assert main(["html", str(tmp_path / "out.jsonl"), "--out", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert "0 thumbnails" in err and "give --images DIR" in err
    assert main(["html", str(tmp_path / "out.jsonl"), "--out", str(tmp_path / "r.html"), "--images", str(IMAGES)]) == 0
    assert "no thumbnails" not in capsys.readouterr().err


def test_demo_shows_progress_and_formats_its_numbers(tmp_path: Path, capsys: Any) -> None:
    assert main(["demo", "--backend", "scripted:0.5126389313633795", "--out-dir", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    for label in ("fleur: scoring", "visce2: scoring", "ref-fleur: scoring", "gpt4v-pairwise: comparing", "fleur: grading pairs"):
        assert re.search(re.escape(label) + r".*\b(\d+)/\1\b", out), (label, out)
    assert "score 0.5126, why:" in out  # as the summary table shows scores, not 0.5126389313633795
