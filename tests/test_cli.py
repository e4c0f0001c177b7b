"""The capjudge command line: score, compare, explain, methods, demo, and its error handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_score_with_scripted_backend_writes_every_row(tmp_path: Path, capsys) -> None:
    inp = tmp_path / "in.jsonl"
    rows = [json.loads(x) for x in (EXAMPLES / "captions.jsonl").read_text().splitlines()]
    lines = [json.dumps(r) for r in rows[:3]] + ["{not json", json.dumps({"image": "cats.jpg"}), json.dumps({"image": "nope.jpg", "caption": "a cat"})]
    inp.write_text("\n".join(lines) + "\n")
    out = tmp_path / "res.jsonl"
    rc = main(["score", "--method", "vanilla", "--backend", "scripted:The score is 73 out of 100.", "--images", str(EXAMPLES / "images"), "--input", str(inp), "--out", str(out), "--no-cache"])
    assert rc == 0
    res = read_jsonl(out)
    assert len(res) == 6
    assert [r["status"] for r in res] == ["ok", "ok", "ok", "error", "error", "error"]
    assert all(r["score"] == 73.0 for r in res[:3])
    assert "not valid JSON" in res[3]["error"] and "line 4" in res[3]["error"]
    assert "missing field(s) caption" in res[4]["error"]
    assert "nope.jpg" in res[5]["error"]
    for r in res:
        for key in ("image", "caption", "score", "method", "backend", "status", "error", "raw"):
            assert key in r
    printed = capsys.readouterr().out
    assert "scored" in printed and "failed" in printed and "cache hits" in printed


def test_score_csv_input_and_resume_from_cache(tmp_path: Path, capsys) -> None:
    out = tmp_path / "res.jsonl"
    args = ["score", "--method", "ref-fleur", "--backend", "scripted:0.8", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.csv"), "--out", str(out), "--cache-dir", str(tmp_path / "cache"), "--quiet"]
    assert main(args) == 0
    first = read_jsonl(out)
    assert [r["status"] for r in first] == ["ok"] * 3
    assert first[0]["references"][0] == "two cats are sleeping next to each other."
    assert main(args) == 0  # resumes from --out: every record kept as it was
    assert read_jsonl(out) == first
    assert main([*args, "--overwrite"]) == 0  # starts over: every answer from the cache
    second = read_jsonl(out)
    assert all(r["details"]["cached"] for r in second)
    assert [r["score"] for r in second] == [r["score"] for r in first]


def test_usage_errors_exit_2(tmp_path: Path, capsys) -> None:
    base = ["--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache"]
    assert main(["score", "--method", "nonsense", "--backend", "scripted:1", *base]) == 2
    assert "unknown method" in capsys.readouterr().err
    assert main(["score", "--method", "vanilla", "--backend", "gemini:pro", *base]) == 2
    assert "unknown backend kind" in capsys.readouterr().err
    assert main(["score", "--method", "vanilla", "--backend", "scripted:1", "--input", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["score", "--method", "vanilla", "--backend", "scripted:1", "--max-cost", "1", *base]) == 2
    assert "API backends only" in capsys.readouterr().err
    assert main([]) == 2


def test_compare_pairs_file(tmp_path: Path, capsys) -> None:
    out = tmp_path / "pairs.jsonl"
    rc = main(["compare", "--backend", "scripted:Answer 1", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache"])
    assert rc == 0
    res = read_jsonl(out)
    assert [r["verdict"] for r in res] == ["tie", "tie"]  # pure position bias cancels out
    assert res[0]["votes"] == ["A", "B"] and res[0]["mode"] == "pairwise"
    rc = main(["compare", "--method", "vanilla", "--mode", "grading", "--backend", "scripted:50", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--overwrite"])
    assert rc == 0 and all(r["mode"] == "grading" and r["verdict"] == "tie" for r in read_jsonl(out))


def test_explain_and_methods(tmp_path: Path, capsys) -> None:
    rc = main(["explain", "--backend", "scripted:0.7", "--image", str(EXAMPLES / "images" / "cats.jpg"), "--caption", "two cats", "--json", "--no-cache"])
    assert rc == 0
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["score"] == 0.7 and rec["explanation"] == "0.7"
    assert main(["methods"]) == 0
    table = capsys.readouterr().out
    for name in ("fleur", "visce2", "gpt4v-pairwise", "listwise"):
        assert name in table


def test_user_template_file(tmp_path: Path) -> None:
    tpl = tmp_path / "strict.j2"
    tpl.write_text("Score the caption from 0 to 100: {{ caption }}. Reply with a number only.")
    out = tmp_path / "o.jsonl"
    rc = main(["score", "--method", "vanilla", "--template-file", str(tpl), "--backend", "scripted:Rating: 7/10", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--limit", "2"])
    assert rc == 0
    res = read_jsonl(out)
    assert len(res) == 2 and res[0]["score"] == 70.0
    assert res[0]["method"] == "vanilla+strict"


@pytest.mark.hf
@pytest.mark.slow
def test_score_and_demo_on_the_tiny_hf_model(tiny_llava_dir: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "fleur.jsonl"
    rc = main(["score", "--method", "fleur", "--backend", f"hf:{tiny_llava_dir}", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--cache-dir", str(tmp_path / "cache")])
    assert rc == 0
    res = read_jsonl(out)
    assert len(res) == 6 and sum(r["smoothed"] for r in res) >= 4
    monkeypatch.setenv("CAPJUDGE_HOME", str(tmp_path / "home"))
    rc = main(["demo", "--out-dir", str(tmp_path / "demo")])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "MEANINGLESS" in printed
    for name in ("fleur.jsonl", "visce2.jsonl", "ref-fleur.jsonl", "pairs.jsonl", "pairs-grading.jsonl"):
        assert (tmp_path / "demo" / name).is_file()
    # one run per results file: the pairwise and the grading comparison share the pairs' ids
    assert {r["mode"] for r in read_jsonl(tmp_path / "demo" / "pairs.jsonl")} == {"pairwise"}
    assert {r["mode"] for r in read_jsonl(tmp_path / "demo" / "pairs-grading.jsonl")} == {"grading"}
    demo_fleur = read_jsonl(tmp_path / "demo" / "fleur.jsonl")
    assert demo_fleur[-1]["status"] == "error" and "no-such-image.jpg" in demo_fleur[-1]["error"]
    assert any(r["smoothed"] for r in demo_fleur)


def test_wrong_method_for_the_command_is_a_usage_error_and_keeps_old_results(tmp_path: Path, capsys) -> None:
    out = tmp_path / "kept.jsonl"
    out.write_text('{"old": 1}\n')
    rc = main(["score", "--method", "gpt4v-pairwise", "--backend", "scripted:1", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache"])
    assert rc == 2 and "compare" in capsys.readouterr().err
    assert out.read_text() == '{"old": 1}\n'
    rc = main(["compare", "--method", "listwise", "--mode", "grading", "--backend", "scripted:1", "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache"])
    assert rc == 2 and "scoring method" in capsys.readouterr().err
    rc = main(["score", "--method", "vanilla", "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--concurrency", "0", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache"])
    assert rc == 2 and "concurrency" in capsys.readouterr().err
    rc = main(["score", "--method", "vanilla", "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--backend-opt", "concurrency=lots", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache"])
    assert rc == 2 and "concurrency='lots'" in capsys.readouterr().err


def test_explain_keeps_a_record_for_a_bad_row(tmp_path: Path, capsys) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"image": "cats.jpg", "caption": "two cats"}) + "\n{broken\n")
    out = tmp_path / "ex.jsonl"
    rc = main(["explain", "--backend", "scripted:0.6", "--images", str(EXAMPLES / "images"), "--input", str(inp), "--out", str(out), "--no-cache", "--json"])
    assert rc == 0
    res = read_jsonl(out)
    assert [r["status"] for r in res] == ["ok", "error"] and "line 2" in res[1]["error"]


def test_methods_lists_full_names_sources_and_decoding_when_piped() -> None:
    import os
    import subprocess
    import sys

    from capjudge.prompts import get_method, list_methods

    env = {**os.environ, "COLUMNS": "40", "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    out = subprocess.run([sys.executable, "-m", "capjudge.cli", "methods"], capture_output=True, text=True, env=env, check=True).stdout
    lines = out.splitlines()
    for name in list_methods():
        block = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
        m = get_method(name)
        assert m.decoding() in lines[block + 2], name  # never shortened
        assert m.paper in lines[block + 1], name
    width = max(len(n) for n in list_methods())  # names padded to the longest one
    assert f"{'gpt4v-pairwise':<{width}}  pairwise, verdict A, B or tie" in out
    assert "visce2-code" in out and "sampled T=0.2, <= 1024 tokens" in out
    assert "https://aclanthology.org/2024.acl-long.205" in out and "seed 00" not in out
    rows = [json.loads(x) for x in subprocess.run([sys.executable, "-m", "capjudge.cli", "methods", "--json"], capture_output=True, text=True, env=env, check=True).stdout.splitlines()]
    fleur = next(r for r in rows if r["method"] == "fleur")
    assert fleur["options"] == {"second_decimal": "official", "answer_form": "decimal"} and fleur["scale"] == "0-1" and fleur["source_url"]


def test_method_option_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    rc = main(["score", "--method", "vanilla-code", "--method-option", "no_number=zero", "--backend", "scripted:fine caption", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", "--limit", "2"])
    assert rc == 0
    recs = read_jsonl(out)
    assert all(r["score"] == 0 and "scored 0" in r["details"]["fallback"] for r in recs)
    assert main(["score", "--method", "fleur", "--method-option", "no_number=zero", "--backend", "scripted:0.5", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "p.jsonl"), "--no-cache", "--quiet"]) == 2


def test_usage_errors_of_subcommand_modules_exit_2_under_python_m(tmp_path: Path) -> None:
    """``python -m capjudge.cli`` runs cli.py as __main__; a subcommand module's UsageError must
    still be the one the main loop catches (exit 2, no traceback)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    run = subprocess.run([sys.executable, "-m", "capjudge.cli", "html", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "r.html")], capture_output=True, text=True, env=env)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "missing.jsonl" in run.stderr
