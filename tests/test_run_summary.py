"""The end of a run: smoothed against raw scores in the summary, a loud warning when a smoothing
method got no log-probabilities, and records that are the same in every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from capjudge.cli import main
from capjudge.data.types import ScoreResult
from capjudge.run.summary import RunTally
from openai_fake_server import running_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fleur_run(tmp_path: Path, base_url: str, *extra: str) -> list[str]:
    return ["score", "--method", "fleur", "--backend", f"openai-compatible:{base_url}#m", "--images", str(EXAMPLES / "images"),
            "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--no-cache", *extra]


def test_server_that_drops_logprobs_is_warned_about_loudly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_server(drop_logprobs=True) as srv:
        rc = main(fleur_run(tmp_path, srv.base_url))
    assert rc == 0
    res = read_jsonl(tmp_path / "o.jsonl")
    assert res and all(r["status"] == "ok" and r["smoothed"] is False for r in res)
    captured = capsys.readouterr()
    assert "smoothed" in captured.out and "raw (not smoothed)" in captured.out
    assert f"returned no log-probabilities for {len(res)} of {len(res)}" in captured.err and "WARNING" in captured.err
    # --quiet drops the table, never the warning (a new server: --out starts over).
    with running_server(drop_logprobs=True) as srv:
        assert main(fleur_run(tmp_path, srv.base_url, "--quiet", "--overwrite")) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "WARNING" in captured.err


def test_server_with_logprobs_gives_smoothed_scores_and_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with running_server() as srv:
        assert main(fleur_run(tmp_path, srv.base_url)) == 0
    res = read_jsonl(tmp_path / "o.jsonl")
    assert all(r["smoothed"] for r in res)
    captured = capsys.readouterr()
    assert "WARNING" not in captured.err
    smoothed_row = next(line for line in captured.out.splitlines() if "  smoothed" in line)
    assert str(len(res)) in smoothed_row


def test_tally_counts() -> None:
    def rec(**kw: object) -> ScoreResult:
        base: dict = {"image": "a", "caption": "c", "score": 0.5, "method": "fleur", "backend": "b", "model": "m", "template_hash": "h", "raw": "0.5"}
        base.update(kw)
        return ScoreResult(**base)

    t = RunTally(method="fleur", smoothing=True)
    t.add(rec(smoothed=True))
    t.add(rec(details={"smoothing": "not applied: the backend gave no token probabilities (raw score)"}))
    t.add(rec(details={"smoothing": "not applied: the answer holds no 0.x / 1.0 score at its digit tokens (raw score)"}))
    t.add(rec(score=None, status="error", error="sample 4: backend error: BackendGone: the server is gone", details={"resumable": True}))
    t.add(rec(score=None, status="error", error="sample 5: image 'x.jpg' not found"))
    assert (t.ok, t.smoothed, t.raw, t.raw_no_logprobs, t.failed, t.resumable) == (3, 1, 2, 1, 2, 1)
    assert t.main_cause == "BackendGone: the server is gone"
    assert "for 1 of 3 scored samples" in t.warnings()[0]
    assert ("  for backend reasons", "1") in t.score_rows()


def test_records_are_the_same_in_every_run(tmp_path: Path, corrupt_image: Path) -> None:
    inp = tmp_path / "in.jsonl"
    not_an_image = tmp_path / "notes.jpg"
    not_an_image.write_bytes(b"shopping list: milk, eggs")
    inp.write_text("\n".join([
        json.dumps({"id": "not-an-image", "image": str(not_an_image), "caption": "a list"}),
        json.dumps({"id": "good", "image": "cats.jpg", "caption": "two cats"}),
        json.dumps({"id": "corrupt", "image": str(corrupt_image), "caption": "a cat"}),
        json.dumps({"id": "bytes-like", "image": "missing.jpg", "caption": "a cat"}),
        "{this line is not json",
    ]) + "\n")
    runs = []
    for k in range(2):
        out = tmp_path / f"run{k}.jsonl"
        assert main(["score", "--method", "fleur", "--backend", "scripted:0.75", "--images", str(EXAMPLES / "images"), "--input", str(inp),
                     "--out", str(out), "--no-cache", "--quiet"]) == 0
        runs.append(out.read_text())
    assert runs[0] == runs[1]
    res = [json.loads(x) for x in runs[0].splitlines()]
    assert [r["status"] for r in res] == ["error", "ok", "error", "error", "error"]
    assert " at 0x" not in runs[0]
    assert "notes.jpg" in res[0]["error"] and "corrupt.jpg" in res[2]["error"]
    # the unreadable line carries the method's scale (FLEUR: 0-1), like every other record
    assert all(r["scale"] == [0.0, 1.0] for r in res)


def test_pil_error_text_has_no_address(tmp_path: Path) -> None:
    from capjudge.data.images import ImageError, load_image

    not_an_image = tmp_path / "notes.jpg"
    not_an_image.write_bytes(b"shopping list: milk, eggs")
    with pytest.raises(ImageError) as info:
        load_image(not_an_image)  # PIL's own text: "cannot identify image file <_io.BytesIO object at 0x...>"
    assert " at 0x" not in str(info.value) and "not an image in a format Pillow reads" in str(info.value)


def test_compare_summary_reports_position_bias() -> None:
    from capjudge.data.types import PairResult
    from capjudge.run.summary import RunTally

    def pair(votes: list[str | None], verdict: str) -> PairResult:
        return PairResult(image="i", caption_a="a", caption_b="b", verdict=verdict, method="gpt4v-pairwise", backend="scripted:x", model="x", template_hash="h", votes=votes)  # type: ignore[arg-type]

    tally = RunTally(method="gpt4v-pairwise")
    # votes[0]: order (A, B); votes[1]: order (B, A), mapped back. First shown won: A / B.
    for votes, verdict in ([["A", "B"], "tie"], [["A", "A"], "A"], [["B", "B"], "B"], [["A", "tie"], "A"]):
        tally.add(pair(votes, verdict))
    rows = dict(tally.position_rows())
    # first shown won: both votes of pair 1, one of pair 2 (A in (A, B)), one of pair 3 (B in
    # (B, A)), the decisive vote of pair 4: 5 of 7 decisive votes
    assert rows["first position won"] == "71.4% of 7 votes"
    assert rows["order flips"] == "50.0% of 4 pairs"  # pairs 1 and 4
    assert rows["  same position won both"] == "25.0%"  # pair 1
    grading = RunTally(method="fleur")
    grading.add(PairResult(image="i", caption_a="a", caption_b="b", verdict="A", method="fleur", backend="b", model="m", template_hash="h", mode="grading", scores=(0.8, 0.2)))
    assert grading.position_rows() == []


def test_compare_command_prints_position_bias(tmp_path, capsys) -> None:
    from pathlib import Path

    from capjudge.cli import main

    examples = Path(__file__).resolve().parents[1] / "examples"
    rc = main(["compare", "--backend", "scripted:Answer 1", "--images", str(examples / "images"), "--input", str(examples / "pairs.jsonl"), "--out", str(tmp_path / "p.jsonl"), "--no-cache"])
    out = capsys.readouterr().out
    assert rc == 0 and "first position won" in out and "100.0% of 4 votes" in out
