"""``--out`` is durable as answers arrive, ends in input order, and a re-run resumes from it."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED
from openai_fake_server import Received, Reply, default_responder, running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_for(condition: Any, what: str, limit: float = 60.0) -> None:
    """Poll until ``condition()`` holds (a guard against hanging, not a speed check)."""
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.02)


def write_input(tmp_path: Path, n: int) -> Path:
    from PIL import Image

    img = tmp_path / "img.png"
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 120, 10)).save(buf, format="PNG")
    img.write_bytes(buf.getvalue())
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"image": str(img), "caption": f"caption number {i}"}) + "\n" for i in range(n)))
    return inp


def score_args(url: str, inp: Path, out: Path, *extra: str) -> list[str]:
    return ["score", "--method", "vanilla", "--backend", f"openai-compatible:{url}#fake-model", "--backend-opt", "max_retries=0", "--concurrency", "2", "--input", str(inp), "--out", str(out), "--quiet", *extra]


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()


def test_a_killed_run_keeps_every_answered_record_and_a_rerun_asks_only_the_rest(tmp_path: Path, release: threading.Event) -> None:
    answered: list[str] = []
    lock = threading.Lock()

    def respond(req: Received) -> Reply:
        with lock:
            first_five = len(answered) < 5
            if first_five:
                answered.append(req.prompt_text())
        if not first_five:
            assert release.wait(120)  # later requests hang until the run is killed
        return default_responder(req)

    inp, out = write_input(tmp_path, 12), tmp_path / "out.jsonl"
    with running_server(responder=respond) as srv:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        proc = subprocess.Popen([sys.executable, "-m", "capjudge.cli", *score_args(srv.base_url, inp, out, "--no-cache")], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for(lambda: out.is_file() and len(read_jsonl(out)) >= 5, "five records in --out")
            wait_for(lambda: srv.count >= 7, "the window to fill with hanging requests")
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        kept = read_jsonl(out)
        assert len(kept) == 5 and all(r["status"] == "ok" for r in kept)
        assert all(sum(r["caption"] + "\n" in p + "\n" or r["caption"] + " " in p for p in answered) == 1 for r in kept)
        assert len({r["row"] for r in kept}) == 5

        release.set()
        before = srv.count
        assert main(score_args(srv.base_url, inp, out, "--no-cache")) == 0
        assert srv.count - before == 7  # only the rows without a record
    final = read_jsonl(out)
    assert [r["row"] for r in final] == list(range(1, 13))
    assert [r["caption"] for r in final] == [f"caption number {i}" for i in range(12)]
    by_row = {r["row"]: r for r in final}
    assert all(by_row[r["row"]] == r for r in kept)  # kept as they were


def test_records_arrive_in_completion_order_and_the_file_ends_in_input_order(tmp_path: Path, release: threading.Event) -> None:
    def respond(req: Received) -> Reply:
        if "caption number 0" in req.prompt_text():
            assert release.wait(60)
        return default_responder(req)

    inp, out = write_input(tmp_path, 8), tmp_path / "out.jsonl"
    with running_server(responder=respond) as srv:
        codes: list[int] = []
        run = threading.Thread(target=lambda: codes.append(main(score_args(srv.base_url, inp, out, "--no-cache"))))
        run.start()
        try:
            # The first row is held by the server; the seven others are already in the file.
            wait_for(lambda: out.is_file() and len(read_jsonl(out)) == 7, "seven records in --out")
            assert sorted(r["row"] for r in read_jsonl(out)) == list(range(2, 9))
        finally:
            release.set()
            run.join(60)
    assert codes == [0]
    assert [r["row"] for r in read_jsonl(out)] == list(range(1, 9))


def test_a_rerun_refuses_another_run_and_overwrite_starts_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    base = ["--backend", "scripted:0.7", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet"]
    assert main(["score", "--method", "fleur", "--limit", "4", *base]) == 0
    before = out.read_text()
    assert main(["score", "--method", "vanilla", *base]) == 2
    err = capsys.readouterr().err
    assert "method 'fleur' (this run: 'vanilla')" in err and "--overwrite" in err
    assert main(["score", "--method", "fleur", "--limit", "3", *base]) == 2  # row 4's result would be dropped
    assert "not in this input" in capsys.readouterr().err
    assert out.read_text() == before
    assert main(["score", "--method", "fleur", *base]) == 0  # more rows: the first four are kept
    assert [r["row"] for r in read_jsonl(out)] == list(range(1, 7))
    assert main(["score", "--method", "vanilla", "--overwrite", *base]) == 0
    assert {r["method"] for r in read_jsonl(out)} == {"vanilla"}


def test_retry_errors_asks_again_bypassing_cached_answers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = {"fixed": False}

    def respond(req: Received) -> Reply:
        reply = default_responder(req)
        if not state["fixed"]:  # a misconfigured server: answers that hold no score
            reply.body["choices"][0]["message"]["content"] = "I cannot see any image."
        return reply

    inp, out = write_input(tmp_path, 3), tmp_path / "out.jsonl"
    with running_server(responder=respond) as srv:
        args = [*score_args(srv.base_url, inp, out, "--cache-dir", str(tmp_path / "cache"))]
        args.remove("--quiet")
        assert main(args) == EXIT_ALL_FAILED and srv.count == 3  # every sample failed: exit 6
        assert all(r["status"] == "error" and "came from the response cache" not in r["error"] for r in read_jsonl(out))
        capsys.readouterr()
        state["fixed"] = True
        assert main(args) == EXIT_ALL_FAILED and srv.count == 3  # resumed: the error records are kept
        assert "--retry-errors" in capsys.readouterr().out
        assert main([*args, "--overwrite"]) == EXIT_ALL_FAILED and srv.count == 3  # started over: answers replayed
        assert all("came from the response cache" in r["error"] for r in read_jsonl(out))
        assert main([*args, "--retry-errors"]) == 0 and srv.count == 6  # asked again, cache bypassed
        assert all(r["status"] == "ok" and not r["details"]["cached"] for r in read_jsonl(out))
        assert main([*args, "--overwrite"]) == 0 and srv.count == 6  # the new answers are cached
        assert all(r["status"] == "ok" and r["details"]["cached"] for r in read_jsonl(out))


def test_compare_writes_as_it_goes_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    base = ["compare", "--backend", "scripted:Answer 1", "--images", str(EXAMPLES / "images"), "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(out), "--no-cache", "--quiet"]
    assert main([*base, "--limit", "1"]) == 0
    first = read_jsonl(out)
    assert [r["row"] for r in first] == [1]
    assert main(base) == 0
    final = read_jsonl(out)
    assert [r["row"] for r in final] == [1, 2] and final[0] == first[0]
    assert all(r["verdict"] == "tie" for r in final)


def test_rows_that_failed_for_backend_reasons_are_asked_again_on_a_rerun(tmp_path: Path) -> None:
    from openai_fake_server import error_body

    state = {"down": True}

    def respond(req: Received) -> Reply:
        if state["down"]:
            return Reply(status=503, body=error_body("overloaded", type_="server_error"))
        return default_responder(req)

    inp, out = write_input(tmp_path, 4), tmp_path / "out.jsonl"
    with running_server(responder=respond) as srv:
        args = score_args(srv.base_url, inp, out, "--no-cache")
        assert main(args) == 3
        first = read_jsonl(out)
        assert all(r["status"] == "error" and r["details"].get("resumable") for r in first)
        state["down"] = False
        asked = srv.count
        assert main(args) == 0 and srv.count - asked == 4  # "re-run the same command to resume"
    assert [r["status"] for r in read_jsonl(out)] == ["ok"] * 4
