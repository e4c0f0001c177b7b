"""The judge behind a paper's numbers (``Method.paper_judge``, issue #32 item 3): shown by
``capjudge methods``; the default judge of ``score`` / ``compare`` / ``arena`` when no ``--backend``
is given (checked on the fake OpenAI server: the request names the paper's model); a usage error
naming the command when the paper's judge has no hosted spec (CaptionQA); one note on stderr, in the
summary and in the HTML report when another judge runs, and none for methods without a paper judge;
CAPability's text-only requests (rows without a readable image) on a local backend."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from capjudge.cli.app import main
from capjudge.data.types import ScoreResult
from capjudge.prompts.registry import get_method, list_methods
from capjudge.report.pages import results_page
from capjudge.run.summary import RunTally
from openai_fake_server import FakeOpenAIServer, Received, Reply, chat_body, running_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CAPABILITY = EXAMPLES / "capability"
RULES = EXAMPLES / "scripted_detailed.json"
KEY = "sk-test-paper-judge"
FAST = ["--backend-opt", "retry_base_delay=0.01", "--backend-opt", "retry_max_delay=0.05", "--backend-opt", "timeout=10", "--concurrency", "1"]

PAPER_JUDGES = {
    "capability": ("gpt-4-turbo", "openai:gpt-4-turbo"),
    "capability-code": ("gpt-4-turbo", "openai:gpt-4-turbo"),
    "captionqa": ("Qwen/Qwen2.5-72B-Instruct", None),
    "dcscore": ("gpt-4o-2024-05-13", "openai:gpt-4o-2024-05-13"),
    "dcscore-code": ("gpt-4o-2024-05-13", "openai:gpt-4o-2024-05-13"),
    "caparena": ("gpt-4o-2024-08-06", "openai:gpt-4o-2024-08-06"),
    "capmas-factuality": ("gpt-4o-2024-05-13", "openai:gpt-4o-2024-05-13"),
    "capmas-coverage": ("gpt-4o-2024-05-13", "openai:gpt-4o-2024-05-13"),
    "clair": ("gpt-4o-2024-05-13", "openai:gpt-4o-2024-05-13"),
}


def _rules_responder(path: Path) -> object:
    """A fake-server responder answering as ``scripted:...?rules=path`` does: the first rule whose
    pattern is found in the request's text."""
    rules = json.loads(path.read_text(encoding="utf-8"))

    def respond(req: Received) -> Reply:
        text = req.prompt_text()
        answer = next((a for p, a in rules if re.search(p, text)), "no rule matched")
        return Reply(body=chat_body(answer))

    return respond


def test_methods_show_the_paper_judge(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["methods", "--format", "json"]) == 0
    rows = {r["method"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    for name, (model, spec) in PAPER_JUDGES.items():
        assert rows[name]["paper_judge"]["model"] == model and rows[name]["paper_judge"]["default_backend"] == spec
        assert rows[name]["paper_judge"]["served"] and rows[name]["paper_judge"]["where"]
    assert {n for n, r in rows.items() if r["paper_judge"] is not None} == set(PAPER_JUDGES)
    assert main(["methods"]) == 0
    blocks: dict[str, str] = {}  # method -> its lines
    for line in capsys.readouterr().out.splitlines():
        if line and not line[0].isspace():
            name = line.split()[0]
        blocks[name] = blocks.get(name, "") + line + "\n"
    assert "judge:" in blocks["capability"] and "default --backend openai:gpt-4-turbo" in blocks["capability"]
    assert "no default --backend" in blocks["captionqa"]
    assert "judge:" not in blocks["vanilla"]


def test_exactly_the_methods_whose_code_hard_wires_a_judge_have_one() -> None:
    for name in list_methods():
        judge = get_method(name).paper_judge
        assert (judge is not None) == (name in PAPER_JUDGES), name


def test_matching_is_loose_on_spelling_not_on_the_model() -> None:
    from capjudge.prompts.paperjudge import CAPMAS_JUDGE, CAPTIONQA_JUDGE

    assert CAPMAS_JUDGE.matches("gpt-4o-20240513")  # CapMAS's own Azure deployment name
    assert CAPMAS_JUDGE.matches("gpt-4o-2024-05-13") and not CAPMAS_JUDGE.matches("gpt-4o")
    assert not CAPMAS_JUDGE.matches("gpt-4o-2024-08-06")
    assert CAPTIONQA_JUDGE.matches("/models/Qwen2.5-72B-Instruct") and CAPTIONQA_JUDGE.matches("qwen/qwen2.5-72b-instruct")
    assert not CAPTIONQA_JUDGE.matches("Qwen/Qwen2.5-72B-Instruct-AWQ")
    assert CAPMAS_JUDGE.others(["panel(gpt-4o-2024-05-13, scripted)"]) == ["scripted"]


def test_default_backend_is_the_papers_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = tmp_path / "cap.jsonl"
    with running_server() as srv:
        server: FakeOpenAIServer = srv
        server.responder = _rules_responder(CAPABILITY / "rules.json")
        rc = main(["score", "--method", "capability", "--method-option", f"annotations={CAPABILITY / 'annotations'}", "--input", str(CAPABILITY / "captions.jsonl"), "--out", str(out), "--no-cache", "--backend-opt", f"base_url={server.base_url}", "--backend-opt", f"api_key={KEY}", *FAST])
        models = {r.body["model"] for r in server.received}
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert models == {"gpt-4-turbo"}
    assert "no --backend given: capability runs on its paper's judge" in captured.err and "--backend openai:gpt-4-turbo" in captured.err
    assert "NOTE" not in captured.err  # the paper's judge: nothing to note
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert records and {r["backend"] for r in records} == {"openai:gpt-4-turbo"}
    assert "paper's judge" in captured.out


def test_compare_and_arena_default_to_caparenas_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    opts = ["--backend-opt", f"api_key={KEY}", "--images", str(EXAMPLES / "images"), "--no-cache", *FAST]
    with running_server() as srv:
        server: FakeOpenAIServer = srv
        server.responder = _rules_responder(RULES)
        base = ["--backend-opt", f"base_url={server.base_url}", *opts]
        assert main(["compare", "--method", "caparena", "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(tmp_path / "pairs.jsonl"), *base]) == 0
        compared = {r.body["model"] for r in server.received}
        server.received.clear()
        assert main(["arena", "--method", "caparena", "--input", str(EXAMPLES / "arena.jsonl"), "--round-robin", "--out", str(tmp_path / "battles.jsonl"), *base]) == 0
        battled = {r.body["model"] for r in server.received}
    err = capsys.readouterr().err
    assert compared == battled == {"gpt-4o-2024-08-06"}
    assert err.count("caparena runs on its paper's judge") == 2 and "NOTE" not in err


def test_caparena_auto_defaults_to_its_judge_before_any_request(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    # No --backend: the paper's judge is chosen first, then the checks go on (the missing
    # assignments file stops the run, exit 2) before any backend is built or battle asked.
    rc = main(["arena", "--protocol", "caparena-auto", "--assignments", str(tmp_path / "none.json"), "--models", f"a={EXAMPLES / 'captions.jsonl'}", "--out", str(tmp_path / "b.jsonl")])
    err = capsys.readouterr().err
    assert "caparena runs on its paper's judge" in err and "--backend openai:gpt-4o-2024-08-06" in err
    assert rc == 2 and "none.json" in err  # the next check after the judge: the assignments file


def test_captionqa_without_backend_is_a_usage_error_naming_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["score", "--method", "captionqa", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "Qwen/Qwen2.5-72B-Instruct" in err and "--backend openai-compatible:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-72B-Instruct" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_the_captionqa_message_names_the_vllm_kind_where_it_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.backends import kinds
    from capjudge.cli.paperjudge import open_judge_specs

    monkeypatch.setattr(kinds, "names", lambda: ["openai", "openai-compatible", "vllm"])
    assert [spec for spec, _ in open_judge_specs("Qwen/Qwen2.5-72B-Instruct")] == ["vllm:Qwen/Qwen2.5-72B-Instruct", "openai-compatible:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-72B-Instruct"]
    monkeypatch.setattr(kinds, "names", lambda: ["openai", "openai-compatible"])
    assert [spec for spec, _ in open_judge_specs("Qwen/Qwen2.5-72B-Instruct")] == ["openai-compatible:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-72B-Instruct"]


@pytest.mark.parametrize("command", ["score", "compare"])
def test_methods_without_a_paper_judge_still_need_a_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    inp = EXAMPLES / ("pairs.jsonl" if command == "compare" else "captions.jsonl")
    method = "gpt4v-pairwise" if command == "compare" else "vanilla"
    assert main([command, "--method", method, "--input", str(inp), "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "give a backend" in err and "paper's judge" not in err


def test_another_judge_is_noted_once_on_stderr_in_the_summary_and_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, html = tmp_path / "clair.jsonl", tmp_path / "clair.html"
    rc = main(["score", "--method", "clair", "--backend", f"scripted:no rule matched?rules={RULES}", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--html", str(html)])
    captured = capsys.readouterr()
    assert rc == 0
    assert captured.err.count("NOTE: the paper's numbers for clair came from gpt-4o-2024-05-13") == 1
    assert "not directly comparable" in captured.err and "no --backend given" not in captured.err
    assert "paper's judge" in captured.out
    page = html.read_text(encoding="utf-8")
    assert "the paper&#39;s numbers for clair came from gpt-4o-2024-05-13" in page or "the paper's numbers for clair came from gpt-4o-2024-05-13" in page


def test_no_note_for_a_method_without_a_paper_judge(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.jsonl"
    rc = main(["score", "--method", "vanilla", "--backend", "scripted:I would rate it 85 out of 100.", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache"])
    captured = capsys.readouterr()
    assert rc == 0
    assert "NOTE" not in captured.err and "paper's judge" not in captured.out
    assert results_page([out]).warnings == []


def test_tally_rows_and_notes_by_judge() -> None:
    def record(model: str, method: str = "dcscore") -> ScoreResult:
        return ScoreResult(image="i.jpg", caption="c", score=0.5, method=method, backend=f"x:{model}", model=model, template_hash="h", raw="0.5", scale=(0.0, 1.0))

    paper, other = RunTally(method="dcscore"), RunTally(method="dcscore+mine")
    paper.add(record("gpt-4o-2024-05-13"))
    other.add(record("gpt-4o-2024-05-13"))
    other.add(record("Qwen2-VL-7B"))
    assert paper.warnings() == [] and paper.judge_rows() == [("paper's judge", "gpt-4o-2024-05-13, this run's")]
    assert len(other.warnings()) == 1 and "Qwen2-VL-7B" in other.warnings()[0] and "gpt-4o-2024-05-13" not in other.warnings()[0].split("judge is", 1)[1]
    assert "not directly comparable" in other.judge_rows()[0][1]
    plain = RunTally(method="vanilla")
    plain.add(record("Qwen2-VL-7B", method="vanilla"))
    assert plain.warnings() == [] and plain.judge_rows() == []


@pytest.mark.slow
def test_tiny_hf_runs_capability_text_only(hf_backend: Any) -> None:
    """The text-only method with no image at all (CAPability: its rows may name videos) runs on a
    local backend: every caption gets a record, no request carries an image."""
    from capjudge import Judge
    from capjudge.backends.scripted import ScriptedBackend

    seen: list[Any] = []

    def answer(request: Any) -> Any:
        seen.append(request)
        return hf_backend.generate([request])[0]

    rows = [json.loads(line) for line in (CAPABILITY / "captions.jsonl").read_text(encoding="utf-8").splitlines()][:3]
    for backend in (hf_backend, ScriptedBackend(answer, model="spy")):
        judge = Judge("capability", backend, max_new_tokens=8, method_options={"annotations": str(CAPABILITY / "annotations")})
        res = list(judge.score_many(rows))  # not closed: hf_backend is the session's
        assert len(res) == len(rows) and all(r.status in ("ok", "error") for r in res)
    assert seen and all(not m.images for r in seen for m in r.messages)
